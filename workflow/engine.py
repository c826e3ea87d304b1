"""One door: everything between a front end and the story in :mod:`workflow.hitl`.

:class:`Engine` is public (``workflow.Engine``). The public API (:func:`workflow.decide`), the
publisher's command line (its ``resume`` and ``review``) and the browser inbox
(``POST /task/{id}/decide``) each build one from a store and an application and decide through
it (the last two import it from ``workflow``, as any front end of your own would), so a decision
is judged the same way whichever door it came through, in this order, before the lock and, but
for step 6, without the SDK (a refusal costs nothing and writes nothing):

1. the entry: the task ID an allowed key, the reviewer name given one line of allowed text;
2. the checkpoint, loaded and verified once (:meth:`state.store.TaskStore.load`);
3. who decides (:meth:`Engine.decider`): in single-user mode the name given; in team mode the
   reviewer a token belongs to, or the one a browser session signed in as;
4. the decision table on that one read, and no secret's value in the name or the reason
   (:func:`workflow.reconcile.preflight`);
5. the task's policy for that reviewer (:func:`workflow.team.check_before`);
6. the revision the reviewer saw, when given (:func:`workflow.guards.check_revision`).

Then :meth:`Engine.decide` runs :func:`workflow.hitl.decide` with that judgement: under the lock
the checkpoint is loaded a second time and everything is judged again on it (``recheck``); the
effect gate reads it once more right before the effect (a lock file can be deleted under a
process), and the outcome is written without reading it back; the :class:`workflow.task.Task`
returned is built from the checkpoint the run wrote.

Never imports the SDK at import time: :meth:`Engine.decide` imports the story when a human
actually decides.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Optional

from state.errors import Refused

if TYPE_CHECKING:
    from state.schema import Checkpoint
    from state.store import TaskStore
    from workflow.application import Application
    from workflow.edits import Edit
    from workflow.task import Task


#: How many judgements one :class:`Engine` keeps for :meth:`Engine.decide` (the oldest go first).
MAX_JUDGED = 256


@dataclass(frozen=True)
class Judged:
    """A decision judged before the lock (:meth:`Engine.judge`): what :meth:`Engine.decide` runs.

    ``by``: who decides; ``checked``: the decision table's ``(checkpoint, verdict)`` on the one
    read (:func:`workflow.reconcile.preflight`); the rest as given."""

    task_id: str
    decision: str
    by: str
    reason: Optional[str]
    call_id: Optional[str]
    always: bool
    edit: Optional["Edit"]
    expect_revision: Optional[int]
    checked: tuple[Any, Any]


class Engine:
    """The engine of one store and one application (:class:`workflow.application.Application`).

    ``Engine(store, app)`` touches neither disk nor SDK (``app`` None: an engine that only
    answers who decides, for a door that runs no agent). :meth:`judge` then :meth:`decide` make
    one decision; :meth:`decider` answers who decides. Every refusal raises :class:`Refused`.
    """

    def __init__(self, store: "TaskStore", app: Optional["Application"]) -> None:
        self.store = store
        self.app = app
        #: id -> (what judge returned, its private copy, who-decides inputs), until decide takes it
        self._issued: dict[int, tuple[Judged, Judged, dict[str, Any]]] = {}

    def decider(self, cp: Optional["Checkpoint"], by: Optional[str], *, token: Optional[str] = None,
                session: Any = None, default_by: Optional[str] = None,
                signs_in: bool = False) -> str:
        """Who makes a decision on ``cp`` (None: on no one task, e.g. ``review``).

        Team mode (:func:`workflow.team.is_team`): with ``session`` (a browser sign-in: its
        ``reviewer``, ``token_id`` and ``fingerprint``), its reviewer while still registered with
        the token signed in with (:func:`workflow.team.signed_in`); else the
        reviewer ``token`` belongs to, ``by`` (if given) being their name
        (:func:`workflow.team.decider`). Single-user mode: ``by``, else ``default_by`` (the command
        line's login name). ``signs_in``: the door authenticates by sign-in only (the browser
        inbox): in team mode a decision without ``session`` is refused. Raises :class:`Refused`
        (``unauthenticated``, ``not_you``, ``unsafe_input`` for no name)."""
        from workflow import team

        if session is None and not signs_in:  # a name, or a token: one read of the reviewer list
            return team.decider(self.store, by, token, cp, default_by=default_by)
        if not team.is_team(self.store, cp):
            return team.decider(self.store, by, None, cp, default_by=default_by)
        if session is None:  # fail closed: one name for everyone is no team
            raise Refused("unauthenticated", f"{'task ' + cp.task_id + ': ' if cp is not None else ''}team mode: "
                          "this inbox was started without sign-in (it decides as one reviewer name for "
                          "everyone); stop it and run serve again, where each reviewer signs in with their own "
                          "token; nothing decided")
        return team.signed_in(self.store, session.reviewer, session.token_id, session.fingerprint)

    def judge(self, task_id: Any, decision: str, *, by: Optional[str] = None, token: Optional[str] = None,
              session: Any = None, default_by: Optional[str] = None, signs_in: bool = False,
              call_id: Optional[str] = None, reason: Optional[str] = None, always: bool = False,
              edit: Optional["Edit"] = None, expect_revision: Optional[int] = None) -> Judged:
        """Steps 1-6 of the module docstring for ``decision`` (``"approve"`` or ``"reject"``) on
        call ``call_id`` (None: the only pending one) of ``task_id``: who decides as
        :meth:`decider`. The reason is checked here as text (:func:`check_reason`: its length,
        its characters; a front end may check it first, in its own words) and for secrets. Reads
        only. Raises :class:`Refused`."""
        from workflow import reconcile, team

        check_entry(task_id, by=by if by is not None else "-")
        if reason is not None:
            check_reason(reason)
        cp = self.store.load(task_id)
        who = self.decider(cp, by, token=token, session=session, default_by=default_by, signs_in=signs_in)
        if call_id is None:  # fixed now: a call decided while this one waits is never taken for another
            call_id = reconcile.meant(cp, decision, who, reason, edit, expect_revision)
        checked = reconcile.preflight(self.store, task_id, decision, call_id, by=who, reason=reason,
                                      edit=edit, cp=cp)
        team.check_before(self.store, checked[0], call_id, decision, who, edits=edit is not None,
                          always=always)
        if expect_revision is not None:
            from workflow import guards  # with the SDK: a page or caller that names its revision

            guards.check_revision(checked[0], expect_revision, None, call_id, who, checked[1])
        judged = Judged(task_id=task_id, decision=decision, by=who, reason=reason, call_id=call_id,
                        always=always, edit=edit, expect_revision=expect_revision, checked=checked)
        # decide takes this very value, and decides from a copy of it no caller holds
        self._issued[id(judged)] = (judged, replace(judged), {
            "by": by, "token": token, "session": session, "default_by": default_by, "signs_in": signs_in})
        while len(self._issued) > MAX_JUDGED:  # the oldest, never decided, are forgotten
            del self._issued[next(iter(self._issued))]
        return judged

    async def decide(self, judged: Judged, **options: Any) -> "Task":
        """Apply the decision :meth:`judge` returned and resume the run
        (:func:`workflow.hitl.decide`; ``options``: ``model``, ``budget_changes``,
        ``trace_content``, ``on_event``). Returns the :class:`workflow.task.Task` after it, built
        from the checkpoint the run wrote (not read again). Raises :class:`Refused`: ``usage`` for a
        ``judged`` this engine's :meth:`judge` did not return (among its last :data:`MAX_JUDGED`),
        or one it decided already (who decides is judged there, never taken from a value built,
        copied or changed by hand: the engine decides from its own copy); who decides is resolved
        again from the same token or session (a token rotated or a reviewer removed since: raised
        as :meth:`decider` raises it, or ``not_you``), nothing decided."""
        from workflow import hitl
        from workflow.task import Task

        kept = self._issued.pop(id(judged), None)
        if kept is None or kept[0] is not judged:
            raise Refused("usage", f"Engine.decide takes what this engine's judge returned, once, among its last "
                          f"{MAX_JUDGED} (who decides is judged there); nothing decided: judge it again")
        judged, who = kept[1], kept[2]
        cp = judged.checked[0]
        if self.decider(cp, who["by"], token=who["token"], session=who["session"], default_by=who["default_by"],
                        signs_in=who["signs_in"]) != judged.by:  # a token rotated or a reviewer removed since
            raise Refused("not_you", f"task {judged.task_id}: who decides changed since it was judged; nothing "
                          "decided: judge it again")

        cp = await hitl.decide(self.store, self.app, task_id=judged.task_id, decision=judged.decision,
                               by=judged.by, reason=judged.reason, call_id=judged.call_id,
                               always=judged.always, edit=judged.edit,
                               expect_revision=judged.expect_revision, checked=judged.checked, **options)
        return Task.of(self.store, cp)

    @staticmethod
    def warm() -> None:
        """Import the story and the SDK now (about 2 s), so that a long-running door (the inbox
        server) does not pay it on its first decision."""
        from workflow import hitl  # noqa: F401


def check_reason(reason: Any) -> None:
    """``reason`` is text of at most :data:`state.schema.MAX_REASON_CHARS` characters with no
    control characters but new lines. Raises :class:`Refused` (``unsafe_input``)."""
    from state.schema import MAX_REASON_CHARS, check_text

    if not isinstance(reason, str):
        raise Refused("unsafe_input", "the reason must be a string; nothing written")
    try:
        check_text(reason, what="the reason", limit=MAX_REASON_CHARS, single_line=False)
    except ValueError as exc:
        raise Refused("unsafe_input", f"{exc}; nothing written") from None


def check_entry(task_id: Any, *, title: Any = None, by: Any = None) -> None:
    """What a caller gives, checked where it enters, before any model call or file: ``task_id``
    an allowed key (:func:`state.schema.key_problem`); the ``title`` (of ``start``) or ``by`` (of a
    decision) one non-empty line of allowed text, at most :data:`state.schema.MAX_TITLE_CHARS` /
    :data:`state.schema.MAX_NAME_CHARS` characters, no control or invisible characters
    (:func:`state.schema.check_text`). Raises :class:`Refused` (``unsafe_input``)."""
    from state.schema import MAX_NAME_CHARS, MAX_TITLE_CHARS, check_text, key_problem

    problem = key_problem(task_id)
    if problem is not None:
        raise Refused("unsafe_input", f"the task ID {str(task_id)[:40]!r} is not allowed ({problem}); nothing written")
    what, value, limit = (("the title", title, MAX_TITLE_CHARS) if by is None
                          else ("the reviewer name", by, MAX_NAME_CHARS))
    if not isinstance(value, str) or not value.strip():
        raise Refused("unsafe_input", f"{what} must be a non-empty string; nothing written")
    try:
        check_text(value, what=what, limit=limit, single_line=True)
    except ValueError as exc:
        raise Refused("unsafe_input", f"{exc}; nothing written") from None
