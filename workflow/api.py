"""The public API's functions and decision values (re-exported by ``workflow``: import them from
there, ``from workflow import start, decide, Approve, Reject``). Never imports the SDK at import
time: :func:`start` and :func:`decide` import the engine (:mod:`workflow.hitl`) when called.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union

from state.errors import Refused
from state.clock import MAX_DURATION_S
from state.terminal import one_line
from workflow.engine import check_entry as _check_entry, check_reason as _check_reason  # no SDK

if TYPE_CHECKING:
    from state.schema import Checkpoint
    from state.store import TaskStore
    from workflow.application import Application
    from workflow.task import Task


@dataclass(frozen=True)
class Approve:
    """A human's approval of one pending call.

    ``edits``: approve only with these changes to the call's content (``{argument: new value}``,
    e.g. ``{"subject": "Fixed"}``): the call is not run; the model is told exactly what was
    approved and its new call carrying it runs. ``always``: also approve the tool's other pending
    calls (each recorded as ``source: sticky``; a call the model makes later waits for a human).
    ``reason``: kept in the decision record.
    """

    edits: Optional[dict[str, str]] = None
    always: bool = False
    reason: Optional[str] = None


@dataclass(frozen=True)
class Reject:
    """A human's reject of one pending call: nothing runs. ``message`` is sent to the model
    verbatim as the call's answer (SDK ``state.reject(item, rejection_message=…)``; None: the
    application's default text); ``always``: also reject the tool's other pending calls."""

    message: Optional[str] = None
    always: bool = False


def open_store(where: Union[str, Path, None] = None) -> "TaskStore":
    """The store at ``where``: PostgreSQL for a ``postgresql://`` URL (psycopg imported only then),
    else the file store in that folder; None: ``$HITL_STORE_URL``, else the file store in
    ``$HITL_STATE_DIR`` (default ``.cache``). Touches neither disk nor server (the first method
    call does). Raises :class:`Refused` for an unusable folder or URL (a URL is never repeated in
    the message: it may hold a password)."""
    from state import store
    from state.settings import STORE_SCHEMES

    text = None if where is None else str(where)
    if text is not None and text.startswith(STORE_SCHEMES):
        return store.open_store(text, None)
    if text is None:
        return store.open_store(None, None)
    return store.FileStore(store.resolve_state_dir(text))


def read_task(store: "TaskStore", task_id: str) -> "Task":
    """Where task ``task_id`` stands, verified (signature, schema, its key), as a
    :class:`workflow.task.Task` (``.to_json()``: the command line's task JSON, docs/commands.md).
    Never imports the SDK. Raises :class:`Refused` if there is no such task or it cannot be
    verified."""
    from workflow.task import Task

    return Task.of(store, store.load(task_id))


def _task(store: "TaskStore", cp: "Checkpoint") -> "Task":
    """The :class:`workflow.task.Task` of a checkpoint the engine just returned."""
    from workflow.task import Task

    return Task.of(store, cp)


async def start(store: "TaskStore", app: "Application", *, task_id: str, title: str,
                input: Any, content: Optional[dict[str, str]] = None, by: Optional[str] = None,
                token: Optional[str] = None, **options: Any) -> "Task":
    """Run ``app``'s agent on ``input`` (any SDK input) until it asks for its gated call, then save
    a signed checkpoint (status ``waiting_for_approval``) and return the :class:`Task`.

    ``task_id`` is also the idempotency key of the effect (``<task_id>#<channel>`` for a task with
    several channels); ``title`` is the task's one-line label for reviewers; ``content`` is what the
    gated call must carry, exactly (its arguments minus ``channel``), or None (the default): the
    model proposes the arguments, the reviewer approves each call as shown in ``pending`` (with
    edits, as any approval), and a reject goes back to the model with its reason, which may
    propose another call that waits for a human again. ``options``: ``action`` (which
    of the application's tools with an effect this task gates; default ``app.action``, else the
    agent's first), ``channels`` (default one), ``model`` (an SDK ``Model``; default
    ``app.offline_model()``), ``spec``, ``budget``, ``expires_in_s`` (whole seconds, 1 to
    :data:`state.clock.MAX_DURATION_S`), ``trace_content``, ``on_event``
    (:func:`workflow.hitl.start`). ``by``: who asks (the requester); in team mode (a reviewer
    registered: docs/reviewers.md) ``token`` is the requester's reviewer token, and ``by`` must be
    theirs. The version of the store's policy in force is recorded with the task, which is decided under it
    (:func:`workflow.team.at_start`; an admin sets the policy: docs/reviewers.md).
    Starting the same key again with the same content returns the saved task without running.
    Raises :class:`Refused` (nothing saved) if the key is taken, the agent did not ask for exactly
    this content, or ``action`` names no tool of the agent declared with :func:`effect_tool`.
    One task gates one action: a call of another tool with an effect in the same run is never
    run (the run ends there: docs/api.md); a second action is a second task."""
    from workflow import hitl, team

    _check_entry(task_id, title=title)
    if by is not None:
        _check_entry(task_id, by=by)
    ttl = options.get("expires_in_s", 1)  # as the command line's --expires-in allows (state.clock)
    if isinstance(ttl, bool) or not isinstance(ttl, int) or not 1 <= ttl <= MAX_DURATION_S:
        raise Refused("unsafe_input", f"expires_in_s must be a whole number of seconds from 1 to {MAX_DURATION_S} "
                      f"(got {one_line(repr(ttl))[:40]}); nothing was run")
    crew = team.at_start(store, team.channels_of(options.get("channels")), by, token)
    return _task(store, await hitl.start(store, app, task_id=task_id, title=title, content=content,
                                         input=input, team=crew, **options))


async def decide(store: "TaskStore", app: "Application", task_id: str,
                 decision: Union[Approve, Reject, Mapping[str, Union[Approve, Reject]]], *,
                 by: Optional[str] = None, token: Optional[str] = None,
                 call_id: Optional[str] = None, expect_revision: Optional[int] = None,
                 **options: Any) -> "Task":
    """Record a human's ``decision`` (by ``by``) on one pending call of ``task_id`` (``call_id``;
    None: the only one), then resume the run from the checkpoint; returns the :class:`Task` after
    it (``completed``, ``cancelled``, ``waiting_for_approval`` on the next calls, ``budget_exceeded``).

    ``decision`` may also be a mapping ``{call_id: Approve(...) | Reject(...)}``, one entry per
    pending call to decide (as pydantic-ai's deferred tool results and LangGraph's resume map take
    them): every key must name a call waiting now and no value may be ``always`` (else
    :class:`Refused` ``usage``, nothing recorded); the calls are then decided in the mapping's
    order, each as its own decision (``expect_revision`` guards the first). A refusal after the
    first names the calls already decided: those decisions stay recorded.

    The decision is written before any effect, under the task's lock and with a compare-and-swap
    on the revision (``expect_revision``: the revision the reviewer saw; another is refused). What
    a decision may do given the task's status, ledger and rejection records is the decision table
    (docs/decision-table.md): repeating the decision that ended a task returns it unchanged, a
    reject of an executed call is refused. ``options``: ``model``, ``budget_changes``,
    ``trace_content``, ``on_event`` (:func:`workflow.hitl.decide`). Raises :class:`Refused`.

    Team mode (docs/reviewers.md): ``token`` is the deciding reviewer's; the decision is theirs
    (``by``, if given, must be their name: else ``not_you``), the task's policy must let them decide
    the call, and an approval counts toward the call's quorum: until it is reached the returned
    checkpoint is still ``waiting_for_approval`` (:func:`workflow.team.count`). Without reviewers,
    ``by`` is required and taken as given (single-user mode).
    """
    from workflow.engine import Engine

    if isinstance(decision, Mapping):
        return await _decide_each(store, app, task_id, decision, by=by, token=token, call_id=call_id,
                                  expect_revision=expect_revision, **options)
    edit = _edit(decision.edits) if isinstance(decision, Approve) and decision.edits is not None else None
    if isinstance(decision, Approve):
        word, reason, always = "approve", decision.reason, decision.always
    elif isinstance(decision, Reject):
        word, reason, always, edit = "reject", decision.message, decision.always, None
    else:
        raise Refused("usage", f"decision must be Approve(...) or Reject(...), not {type(decision).__name__}")
    engine = Engine(store, app)  # the one door of the command line and the inbox too
    judged = engine.judge(task_id, word, by=by, token=token, call_id=call_id, reason=reason, always=always,
                          edit=edit, expect_revision=expect_revision)
    return await engine.decide(judged, **options)


async def settle(store: "TaskStore", app: "Application", task_id: str, outcome: str, *,
                 by: Optional[str] = None, token: Optional[str] = None, call_id: Optional[str] = None,
                 reason: Optional[str] = None, **options: Any) -> "Task":
    """Record what a person found at the provider for a call in doubt (its effect went to a
    provider that cannot deduplicate, which may have acted: docs/external-effects.md) and go on.

    ``outcome`` ``"published"``: the ledger entry is written (``settled_by=by``, ``settle_reason=
    reason``) and the run finishes, sending nothing (``options`` as for :func:`decide`);
    ``"not_published"``: the attempt is settled as not done and the task is returned as it
    is (it shows ``publishing``; the next :func:`decide` with :class:`Approve` sends it once
    more). ``call_id``: the call in doubt, when several are. Raises :class:`Refused`
    (``not_in_doubt`` for a task or call not in doubt; ``unsafe_input``) with nothing written.
    In team mode ``token`` authenticates who settles, as for :func:`decide`, and the rule of the
    call's channel must let them approve it (``not_allowed`` otherwise: roles, the requester).
    """
    from workflow import settlement as settling

    by = _decider(store, task_id, by, token)
    if reason is not None:
        _check_reason(reason)
    return _task(store, await settling.settle(store, app, task_id=task_id, outcome=outcome, by=by,
                                              call_id=call_id, reason=reason, **options))


def fail(store: "TaskStore", task_id: str, *, reason: str, by: Optional[str] = None,
         token: Optional[str] = None) -> "Task":
    """End ``task_id`` where no effect can have happened (an approval never carried out, or every
    attempt through a service found not done): it ends ``failed`` with ``reason`` (text of at most
    :data:`state.schema.MAX_REASON_CHARS` characters, not blank), ``completed`` if a call of it executed (its
    entry stands: also the way out of a task whose every call was approved and executed but whose
    run cannot finish). Needs no SDK. Raises :class:`Refused`, nothing written: ``begun`` where an effect may
    have happened (settle it first), ``undecided`` for a call nobody decided (reject it),
    ``unsafe_input``; an ended task's own code. In team mode ``token`` authenticates who ends it, as
    for :func:`decide`, and the rule of every channel of the task must let them approve
    (``not_allowed`` otherwise) (:func:`workflow.settlement.fail`, docs/decision-table.md). A plain
    function: it waits for a busy task's lock by blocking (at most ``HITL_LOCK_TIMEOUT`` s), so an
    event loop calls it in a thread (``asyncio.to_thread``)."""
    from workflow import settlement as settling

    by = _decider(store, task_id, by, token)
    _check_reason(reason)
    if not reason.strip():  # the only record of why a task was ended
        raise Refused("unsafe_input", "a fail needs a reason (the only record of why the task was ended); nothing "
                      "written")
    return _task(store, settling.fail(store, task_id, by=by, reason=reason))


async def _decide_each(store: "TaskStore", app: "Application", task_id: str,
                       decisions: Mapping[Any, Any], *, call_id: Optional[str],
                       expect_revision: Optional[int], **kwargs: Any) -> "Task":
    """:func:`decide` for ``{call_id: Approve | Reject}``: checked whole first, then one decision
    per call in order. A key naming a call already decided the same way is a repeat, skipped (a
    mapping repeated after a crash changes nothing). A decision that leaves the task
    ``budget_exceeded`` (its approval not recorded: the next model call cannot be paid) ends the
    mapping there: the task is returned, the later calls undecided. Raises :class:`Refused` (see
    :func:`decide`)."""
    from state.terminal import one_line

    if call_id is not None:
        raise Refused("usage", "give the calls as the mapping's keys, not call_id as well")
    if not decisions:
        raise Refused("usage", "the mapping of decisions is empty: name at least one pending call")
    keys = list(decisions)
    if len(set(keys)) != len(keys):  # a Mapping of one's own may yield a key twice
        raise Refused("usage", "the mapping names a call more than once; nothing recorded")
    for value in decisions.values():
        if not isinstance(value, (Approve, Reject)):
            raise Refused("usage", "each decision must be Approve(...) or Reject(...), not "
                          f"{type(value).__name__}")
        if value.always:
            raise Refused("usage", "always= decides calls the mapping does not name: leave it out "
                          "and name each call")
    cp = _loaded(store, task_id, "-")  # the calls waiting and decided: the checkpoint, not its view
    waiting = [p.call_id for p in cp.pending]
    on_record = {d.call_id: Approve if d.decision == "approved" else Reject for d in cp.decisions}
    repeats = [k for k, v in decisions.items() if k not in waiting and on_record.get(k) is type(v)]
    unknown = [k for k in decisions if k not in waiting and k not in repeats]
    if unknown:
        shown = ", ".join(one_line(repr(k))[:80] for k in unknown)
        raise Refused("usage", f"task {task_id}: {'call' if len(unknown) == 1 else 'calls'} {shown} "
                      f"{'is' if len(unknown) == 1 else 'are'} not waiting for a decision (waiting: "
                      f"{', '.join(one_line(c) for c in waiting) or 'none'}); nothing recorded")
    done: list[str] = []
    task: Any = None
    for key, value in decisions.items():
        if key in repeats:
            continue
        try:
            task = await decide(store, app, task_id, value, call_id=key, expect_revision=expect_revision
                                if not done else None, **kwargs)
        except Refused as exc:
            if not done:
                raise
            raise Refused(exc.code, [f"calls {', '.join(done)} of task {task_id} were decided "
                                     f"and stay recorded; then call {one_line(key)}: ", *exc.parts],
                          **exc.data) from None
        done.append(one_line(key))
        if task.status == "budget_exceeded":  # nothing recorded for this call: stop, as decide does
            break
    return task if task is not None else _task(store, cp)  # every call a repeat: as it stands


def _decider(store: "TaskStore", task_id: Any, by: Optional[str], token: Optional[str]) -> str:
    """The checked ``by`` of a decision on ``task_id``: in team mode the reviewer of ``token``,
    else ``by`` as given (:meth:`workflow.engine.Engine.decider`). Raises :class:`Refused`."""
    from workflow.engine import Engine

    return Engine(store, None).decider(_loaded(store, task_id, by), by, token=token)


def _loaded(store: "TaskStore", task_id: Any, by: Optional[str]) -> "Checkpoint":
    """The checkpoint of ``task_id``, loaded and verified, once ``task_id`` and ``by`` are checked
    as entries. Raises :class:`Refused`."""
    _check_entry(task_id, by=by if by is not None else "-")
    return store.load(task_id)


def _edit(edits: dict[str, str]) -> Any:
    """:class:`Approve`'s ``edits`` as the engine's edit value (:class:`workflow.edits.Edit`):
    ``{argument: new text}``, any of the call's arguments but ``channel``. Raises :class:`Refused`
    (nothing written) for anything else."""
    from workflow.edits import Edit

    if not isinstance(edits, dict):
        raise Refused("usage", f"Approve(edits=…) takes {{argument: new value}}, not {type(edits).__name__}; "
                      "nothing written")
    return Edit(content=dict(edits))

