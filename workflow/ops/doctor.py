"""``run.py doctor``: check every task against the ledger; repair only what is provable. No SDK.

What it reads: whatever the store lists through its one capability for it,
:meth:`state.store.Inspectable.inspect` (:mod:`state.inspection`): the file store reads every
checkpoint (the newest revision file of each task, in its folder ``checkpoints/<name>/``), every ledger entry
(``ledger/*.json``), the lock files (``locks/*.lock``) and temp files (``.tmp-*.part``) of the
state dir (:mod:`state.files.inspect`); PostgreSQL its rows. Each task is read under its own
lock (taken without waiting), so a task a live process is working on is reported as ``busy``
instead of as a half-finished write. Doctor itself never asks which kind of store it has: it
judges each task by the decision table and says what to do about each finding.

Findings (``kind``: what it means → the recommended ``action``):

=========================  ===================================================================
``unreadable_checkpoint``  not JSON / not our schema / MAC fails / misnamed → a human restores or
                           removes it (nothing can be proven from it)
``unreadable_ledger_entry`` a ledger file that cannot be parsed or names another key → a human
``completed_without_entry`` checkpoint ``completed`` but no ledger entry → a human (resume refuses)
``entry_mismatch``         the entry names another task or other content → a human
``cancelled_with_entry``   ``cancelled`` but the ledger shows it executed → a human; ``failed`` by
                           ``fail`` while its call executed (the entry came after) →
                           ``doctor --repair`` ends it ``completed``, the failure kept (provable:
                           the entry)
``executed_not_recorded``  waiting, approval recorded, entry present (crash between the ledger and
                           the outcome) → ``python run.py resume --task ID --decision approve``
``decision_not_finished``  waiting, decision recorded, no entry (a crash after it, a run stopped) →
                           ``python run.py resume --task ID --decision <the recorded one>``
``entry_without_approval`` waiting, entry present, no approval recorded → a human
``entry_without_task``     a ledger entry whose task has no checkpoint → a human (one that needed no
                           approval: the same start, cut by a crash before its checkpoint)
``effect_unconfirmed``     approved, its effect through a service begun but not confirmed
                           (``publishing``) → ``python run.py resume --task ID --decision approve``
                           (sends again with the same ``Idempotency-Key``)
``effect_in_doubt``        a provider that cannot deduplicate may have acted (``in_doubt``) → a
                           human looks at the service, then ``python run.py settle --task ID
                           --call C --outcome published|not-published --by NAME``
``cancelled_with_intent``  ``cancelled``/``expired`` or rejected, yet its effect was begun (it may
                           have happened) → a human
``intent_without_approval`` waiting, its effect begun, no approval recorded → a human
``quorum_not_carried_out`` waiting in team mode, a call's quorum reached (the approvals that count
                           now), no decision recorded (a crash between the last approval and the
                           decision) → an approver's ``python run.py resume --task ID --decision
                           approve`` (their token) carries it out
``unsigned_record``        a ledger entry, effect intent, settlement or rejection record without
                           a signature (written by an earlier version, or by hand), which the
                           task's signed checkpoint proves (``state.adoption``) →
                           ``doctor --repair`` signs it
``unsigned_unproven``      the same, but nothing signed proves it → a human checks it (the task,
                           the service); if it is genuine, ``doctor --repair --adopt <its path>``
                           signs it; if not, it is removed by hand. Until then every command that
                           reads it stops
``adopt_not_found``        ``--adopt`` named something that is not an unsigned record → a human
``leftover_temp``          ``.tmp-<owner>.*.part`` left by a process that died mid-write →
                           ``doctor --repair`` deletes it (provable: see below)
``unknown_temp``           a ``.tmp-*.part`` of unknown owner → delete by hand when no run.py runs
``old_layout_conflict``    a file of ``tasks/`` (the layout before one folder per task) newer than
                           its task's checkpoint in ``checkpoints/``, or of its revision with other
                           bytes → a human (never removed by ``--repair``)
``busy`` (note)            a live process holds the task's lock → run doctor again later
``not_judged`` (note)      a task with an unsigned record (above) is judged once that record is
                           signed or removed: nothing is proven from it meanwhile
``old_layout`` (note)      tasks still in ``tasks/``, found by listing that whole folder →
                           ``doctor --repair`` moves each into its folder
``not_locked`` (note)      the locks could not be taken because the state dir cannot be written
                           (read-only mount, no write permission): every task was still checked,
                           read-only, without its lock; nothing was repaired
=========================  ===================================================================

A read-only state dir (``chmod -R a-w``, a read-only mount, a backup) is checked all the same:
opening a lock file for writing fails with a permission error (``EACCES``/``EPERM``) or ``EROFS``,
and then doctor reads each checkpoint, ledger entry and rejection record without the lock and says
so once (``not_locked``). Without the lock a task a live process is writing could look
half-finished; on a state dir nobody can write, nobody is writing. ``--repair`` repairs nothing
there: a ``leftover_temp`` is reported with "not repaired". A lock file that is a symlink or a
folder is still ``unusable_lock``.

Repairs (``--repair``): signing the ``unsigned_record`` records a signed checkpoint proves (and,
with ``--adopt PATH``, the ones a person vouched for: ``state.adoption``), deleting
``leftover_temp`` files, clearing (to 0 bytes, under the task's lock) older revision files that a
crash left whole between a write and its cleanup (nobody reads them: ``state.files.store``), and
moving each task still in ``tasks/`` into its folder under its lock (``old_layout``: copy its
checkpoint, remove the files it supersedes, then the empty folder; each step leaves a readable
task, ``state.files.store``). Every write of a task's files happens under that task's lock
(``locks/<owner>.lock``; the signing key under ``locks/signing.key.lock``, ``state.id`` under
``locks/state.id.lock``), so a temp file whose owner's lock doctor holds belongs to no live
process: deleting it is provably safe. Nothing else is repaired: marking a task completed needs a
new signed checkpoint carrying the finished RunState, which only ``resume`` (with the SDK) can
produce from the ledger entry; everything else needs a human.

Lock files are not findings: filelock uses OS locks (``flock`` / ``msvcrt.locking``), which the OS
drops when the holder dies, so a lock file left by a killed process does not block anyone
(``tests/test_concurrency.py`` kills a holder with ``kill -9``). Deleting lock files is never safe
while processes may be waiting on them, so doctor leaves them alone.

Exit status (``run.py``): 0 when no inconsistency remains (notes allowed); otherwise the report is
printed and then one ``STOPPED: doctor found N inconsistencies …`` line, exit 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from state import clock
from state.errors import Next, Part, Refused
from state.inspection import Counted, Problem, Records, Repaired, TaskCheck
from state.records import LedgerEntry, RejectionRecord, is_end_mark
from state.schema import Checkpoint
from state.store import Inspectable, TaskStore, location_of
from state.terminal import one_line
from workflow.calls import calls_of, keys
from workflow.reconcile import Evidence, ended_by_fail, executed_after_fail, reconcile

#: Finding kinds that are not inconsistencies (do not make doctor exit 1).
NOTES = frozenset({"busy", "not_locked", "not_judged", "old_layout"})
#: The findings of an unsigned record (``state.adoption``): its task is not judged until it is settled.
UNSIGNED = frozenset({"unsigned_record", "unsigned_unproven"})


@dataclass
class Finding:
    """One problem: ``{"kind", "task_id" (or null), "path", "detail", "action"}``. ``action`` is
    what a person should do, as text and :class:`state.errors.Next` steps (e.g.
    ``Next("doctor_resume", task_id, "approve")``, a command the application words its own way);
    :func:`with_actions` turns it into one string."""

    kind: str
    task_id: str | None
    path: str
    detail: str
    action: tuple[Part, ...]


@dataclass
class Report:
    """What :func:`doctor` returns (as a dict): see :meth:`as_dict`."""

    state_dir: str
    repair: bool
    tasks: int = 0
    ledger_entries: int = 0
    lock_files: int = 0
    findings: list[Finding] = field(default_factory=list)
    repairs: list[dict[str, str]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """``{"state_dir", "repair", "checked": {"tasks", "ledger_entries", "lock_files"},
        "findings": [finding…], "repairs": [{"kind", "path", "result"}…],
        "inconsistencies": int, "consistent": bool}``."""
        bad = sum(1 for f in self.findings if f.kind not in NOTES)
        return {
            "state_dir": self.state_dir,
            "repair": self.repair,
            "checked": {"tasks": self.tasks, "ledger_entries": self.ledger_entries,
                        "lock_files": self.lock_files},
            "findings": [{"kind": f.kind, "task_id": f.task_id, "path": f.path, "detail": f.detail,
                          "action": f.action} for f in self.findings],
            "repairs": self.repairs,
            "inconsistencies": bad,
            "consistent": bad == 0,
        }


HUMAN = "a human must check; doctor repairs nothing here"
#: The action of a finding nobody but a human can settle.
ASK_HUMAN: tuple[Part, ...] = (HUMAN,)
#: Statuses of a task that can still be decided.
OPEN = ("waiting_for_approval", "budget_exceeded")


def _resume(task_id: str, decision: str) -> Next:
    return Next("doctor_resume", task_id, decision)


#: What each finding of the decision table means, for the report (``{by}``/``{at}``: the
#: rejection record; ``{decided}``: the recorded decision; ``{status}``: the checkpoint's).
DETAILS = {
    "executed_or_approved_but_rejected": "a rejection record (by {by} at {at}) exists, but the task "
                                         "is {status}{in_ledger}",
    "fail_not_finished": "ended by {by} at {at} (fail), but the checkpoint says {status} (a crash while it "
                         "was ended, or an older checkpoint put back); no decision of it runs again",
    "rejection_not_finished": "rejected by {by} at {at}, but the checkpoint says {status} (a crash "
                              "after the rejection record, or an older checkpoint put back)",
    "completed_without_entry": "the checkpoint says completed but the ledger has no entry; nothing "
                               "proves the effect happened",
    "cancelled_with_entry": "the checkpoint says cancelled but the ledger shows it executed",
    "entry_without_approval": "the ledger shows it executed but the task is {status} with recorded "
                              "decision {decided!r}",
    "executed_not_recorded": "approved and in the ledger, but the outcome was not written (crash "
                             "after the ledger entry, or a run that failed after it); the entry proves "
                             "it executed (should the same approve fail each time, fail ends it completed)",
    "decision_not_finished": "decision {decided!r} is recorded but the run was not finished (a crash "
                             "after the decision, or a run that stopped: the same decision finishes it)",
    "status_contradicts_decision": "the checkpoint says {status} but records decision {decided!r}",
    "effect_unconfirmed": "approved, but its effect through {service} is not confirmed (attempt {attempt}, "
                          "since {since}); the same resume sends it again (with the same Idempotency-Key, unless that "
                          "attempt was found not sent)",
    "effect_not_sent": "approved, but its effect through {service} was found not done (attempt "
                       "{attempt}, since {since}); the same resume sends it again (a new attempt, a new key), or a "
                       "person ends the task failed",
    "effect_in_doubt": "its effect through {service}, which does not deduplicate, may have happened (attempt "
                       "{attempt}, since {since}); nothing is sent again until a human settles it",
    "cancelled_with_intent": "the task is {status} with decision {decided!r}{in_ledger}, but its effect through "
                             "{service} was begun (attempt {attempt}, since {since}) and may have happened",
    "intent_without_approval": "its effect through {service} was begun (attempt {attempt}, since {since}) but "
                               "the task is {status} with no approval recorded",
}
#: :data:`DETAILS` of a local effect (its intent's ``service`` is ``state.records.LOCAL_EFFECT``):
#: the function was called, and no ledger entry followed.
LOCAL_DETAILS = {
    "effect_unconfirmed": "approved, and its function (a local effect) was begun at {since} with no ledger entry "
                          "after it (a crash, or the function failed): it may have acted; the same resume runs it "
                          "again under the same idempotency key",
    "effect_not_sent": "approved, and its function (a local effect) was found not done (attempt {attempt}, "
                       "since {since}); the same resume runs it again, or a person ends the task failed",
}
#: The findings of an effect begun (through a service, or a local effect's function called): their
#: detail names the intent.
BEGUN = frozenset({"effect_unconfirmed", "effect_in_doubt", "effect_not_sent", "cancelled_with_intent",
                   "intent_without_approval"})


def _intent(store: TaskStore, key: str, kind: str, cp: Checkpoint) -> dict[str, Any]:
    """The intent's values a :data:`BEGUN` finding's detail names (``service``, ``attempt``,
    ``since``, ``call_id``, ``window_ends``: until when a request of it may still act, or None);
    empty for any other ``kind``."""
    if kind not in BEGUN:
        return {}
    from workflow.external import effect_status

    from state.records import LOCAL_EFFECT

    intent, status = store.intent_get(key), effect_status(store, key, cp=cp) or {}
    local = status.get("service") == LOCAL_EFFECT
    return {"service": "its own function (a local effect)" if local else one_line(str(status.get("service"))),
            "attempt": status.get("attempt"), "since": status.get("since"),
            "call_id": getattr(intent, "call_id", None), "window_ends": status.get("window_ends"), "local": local}


def _detail(kind: str, intent: dict[str, Any]) -> str:
    """The text of finding ``kind`` (:data:`DETAILS`, or :data:`LOCAL_DETAILS` for a local effect)."""
    return (LOCAL_DETAILS.get(kind) if intent.get("local") else None) or DETAILS[kind]


def _action(task_id: str, call_id: str | None, kind: str, window_ends: str | None = None,
            local: bool = False, named: bool = False, failed: bool = False) -> tuple[Part, ...] | None:
    """The action of a :data:`BEGUN` finding (``effect_in_doubt``: settle ``call_id``, after
    ``window_ends`` when that is ahead; ``effect_unconfirmed``: resume, or settle when the service
    cannot confirm it; ``effect_not_sent``: resume, or end it failed; ``cancelled_with_intent`` of
    a task ``failed`` with its call approved (``failed``: a fail that landed while the effect was
    out): a person's look, then settle; the other contradictions: a human), or None (the caller
    words it)."""
    from workflow.external import advice

    look = advice(window_ends) + ": "
    # the same approve again; ``named``: a task of several calls names the call (a resume without
    # --call is refused there)
    again = Next("doctor_resume_call", task_id, call_id, "approve") if named and call_id else Next(
        "doctor_resume", task_id, "approve")
    if kind == "effect_unconfirmed" and call_id and local:
        return (again, "; if the function cannot finish, a human looks at what it did, then settles it: ",
                Next("doctor_settle", task_id, call_id))
    if kind == "effect_in_doubt" and call_id:
        return (look, Next("doctor_settle", task_id, call_id))
    if kind == "effect_unconfirmed" and call_id:
        return (again, "; if the service cannot confirm it (it holds the key for "
                "other content, or is gone for good), " + look, Next("doctor_settle", task_id, call_id))
    if kind == "effect_not_sent":
        return (again, " sends it again; or, to give it up, ", Next("doctor_fail", task_id))
    if kind == "cancelled_with_intent" and failed and call_id:  # a fail met an approved call's effect half-way
        check = "a human must check what its function did, then settle it: " if local else look
        return (check, Next("doctor_settle", task_id, call_id),
                " (an action that may have executed is never marked cancelled)")
    if kind == "cancelled_with_intent":
        return (HUMAN + " (an action that may have executed is never marked cancelled)",)
    if kind == "intent_without_approval":
        return ASK_HUMAN
    return None


def _check_task(cp: Checkpoint, path: Path | str, entry: tuple[LedgerEntry, str] | None,
                report: Report, rejected: RejectionRecord | None = None, store: TaskStore | None = None) -> None:
    """Add ``cp``'s finding, if any, to ``report``: the ``doctor`` column of the decision table
    (:func:`workflow.reconcile.reconcile`), after checking that the evidence is for this task.
    ``store``: where an effect begun through a service is read (:func:`workflow.reconcile.begun_of`;
    None: nothing begun)."""
    from workflow.reconcile import begun_of

    if is_end_mark(rejected):  # fail's end mark, not a reject
        if cp.status in OPEN:
            report.findings.append(_ended_unsaved(store, cp, path, rejected))
            return
        rejected = None
    if entry is not None:
        e, entry_name = entry
        if e.task_id != cp.task_id or e.content_sha256 != cp.expected_sha256(cp.channels[0]):
            report.findings.append(Finding(
                "entry_mismatch", cp.task_id, str(path),
                f"ledger entry {entry_name} is for task {e.task_id!r} / content "
                f"{e.content_sha256[:12]}…, the checkpoint for {cp.task_id!r} / "
                f"{cp.expected_sha256(cp.channels[0])[:12]}…",
                ASK_HUMAN))
            return
    key = keys(cp, cp.channels[0])[0]
    try:
        begun = begun_of(store, cp, key, entry[0] if entry else None) if store is not None else None
    except Refused as exc:  # a damaged intent: nothing can be proven from it
        report.findings.append(Finding("entry_mismatch", cp.task_id, str(path), str(exc), ASK_HUMAN))
        return
    ev = Evidence(status=cp.status, decided=cp.decision.decision if cp.decision else None,
                  entry=entry is not None, rejection=rejected is not None, begun=begun)
    verdict = reconcile(ev, "doctor")
    if verdict.kind != "finding":
        return
    kind = verdict.code or ""
    intent = _intent(store, key, kind, cp) if store is not None else {}
    detail = _detail(kind, intent).format(
        by=getattr(rejected, "by", None), at=getattr(rejected, "at", None), status=cp.status,
        decided=ev.decided, in_ledger=" and in the ledger" if entry is not None else "", **intent)
    failed = cp.status == "failed" and ev.decided == "approved" and not ev.rejection
    action = (_action(cp.task_id, intent.get("call_id"), kind, intent.get("window_ends"), bool(intent.get("local")),
                      failed=failed) or _task_action(cp, kind, verdict.action))
    report.findings.append(Finding(kind, cp.task_id, str(path), detail, _unless_uncounted(store, cp, action)))


def _unless_uncounted(store: TaskStore | None, cp: Checkpoint, action: tuple[Part, ...]) -> tuple[Part, ...]:
    """``action``, or, where it names the approve that carries out an approval on record which
    counts no more (:func:`workflow.team.uncounted`: that approve is refused), the way out that
    refusal names."""
    from workflow.team import uncounted

    if store is None or not any(isinstance(p, Next) and "approve" in p.args for p in action):
        return action
    try:
        why = uncounted(store, cp)
    except Refused:
        return action
    return action if why is None else why.parts


def _task_action(cp: Checkpoint, kind: str, decision: str | None) -> tuple[Part, ...]:
    """The action of a one-call task's finding ``kind`` (``decision``: the table's, or None)."""
    if decision is not None:
        return (_resume(cp.task_id, decision),)
    if kind == "entry_without_approval" and cp.decision is None and cp.status in OPEN:
        return (f"{HUMAN}; if the entry is right, ", _resume(cp.task_id, "approve"), " records it")
    if kind == "completed_without_entry":
        return (HUMAN + " (resume refuses this task)",)
    if kind == "cancelled_with_entry":
        return ENDED_BEFORE_ITS_ENTRY if ended_by_fail(cp) else (
            HUMAN + " (an executed action is never marked cancelled)",)
    return ASK_HUMAN


def _ended_unsaved(store: TaskStore | None, cp: Checkpoint, path: Path | str, mark: RejectionRecord) -> Finding:
    """The ``fail_not_finished`` finding of an open task whose end mark exists
    (:func:`workflow.reconcile.ended_unsaved`): the same ``fail`` finishes it, once a person has
    settled an effect of it that was begun and may have happened (its intent, no entry)."""
    from workflow.reconcile import MAY_HAVE, begun_of

    detail = DETAILS["fail_not_finished"].format(by=mark.by, at=mark.at, status=cp.status)
    for channel in cp.channels if store is not None else []:
        key = keys(cp, channel)[0]
        intent = store.intent_get(key) if begun_of(store, cp, key) in MAY_HAVE else None
        if intent is not None:
            return Finding("fail_not_finished", cp.task_id, str(path), detail + "; an effect of it was begun and "
                           "may have happened", ("a person looks at what it did, then settles it: ",
                                                 Next("doctor_settle", cp.task_id, intent.call_id),
                                                 "; then ", Next("doctor_fail", cp.task_id)))
    return Finding("fail_not_finished", cp.task_id, str(path), detail, (Next("doctor_fail", cp.task_id),))


def _check_calls(store: TaskStore, cp: Checkpoint, path: Path | str, report: Report) -> None:
    """A task with several channels, or with a call the model made after an earlier one was
    answered (:func:`per_call`): the ``doctor`` column of the decision table for each call
    (:func:`workflow.reconcile.gather` reads that call's entry and rejection record). A call that
    waits on a channel where an earlier call was decided and answered
    (:func:`workflow.reconcile.decided_before`) is a task waiting for a human, not a finding."""
    from workflow.reconcile import decided_before, end_mark, gather

    mark = end_mark(store, cp)
    if mark is not None:
        report.findings.append(_ended_unsaved(store, cp, path, mark))
        return
    for call_id, channel in calls_of(cp):
        if decided_before(cp, call_id, channel):
            continue
        try:
            ev, _, rejected = gather(store, cp, call_id)
        except Refused as exc:
            report.findings.append(Finding("entry_mismatch", cp.task_id, str(path), str(exc), ASK_HUMAN))
            continue
        verdict = reconcile(ev, "doctor")
        if verdict.kind != "finding":
            continue
        kind = verdict.code or ""
        intent = _intent(store, keys(cp, channel)[0], kind, cp)
        detail = f"call {call_id} on {channel}: " + _detail(kind, intent).format(
            by=getattr(rejected, "by", None), at=getattr(rejected, "at", None), status=ev.status,
            decided=ev.decided, in_ledger=" and in the ledger" if ev.entry else "", **intent)
        failed = cp.status == "failed" and ev.decided == "approved" and not ev.rejection
        action = _action(cp.task_id, call_id, kind, intent.get("window_ends"), bool(intent.get("local")),
                         named=True, failed=failed) or (
            (Next("doctor_resume_call", cp.task_id, call_id, verdict.action),) if verdict.action else
            ENDED_BEFORE_ITS_ENTRY if kind == "cancelled_with_entry" and ended_by_fail(cp) else ASK_HUMAN)
        report.findings.append(Finding(kind, cp.task_id, str(path), detail, _unless_uncounted(store, cp, action)))


#: The action of a ``cancelled_with_entry`` finding on a task
#: :func:`workflow.reconcile.ended_by_fail`.
ENDED_BEFORE_ITS_ENTRY: tuple[Part, ...] = (
    Next("doctor_repair"), " ends it completed, the failure kept (the entry proves the call executed while the "
    "task was being ended)")


def per_call(cp: Checkpoint) -> bool:
    """True if ``cp`` is judged call by call (:func:`_check_calls`): it has several channels, or
    more than one call (a call answered, then the model's new call on the same channel), or its
    model proposes the arguments (each reject there has the call's own rejection record,
    :func:`workflow.calls.rejection_scope`). A task with one call is judged on its current
    decision (:func:`_check_task`)."""
    return len(cp.channels) > 1 or len(calls_of(cp)) > 1 or cp.proposed()


#: What a person is told to do about each kind of problem a store reports
#: (:class:`state.inspection.Problem`; a store-specific ``remedy`` is added in brackets).
PROBLEM_ACTIONS: dict[str, tuple[Part, ...]] = {
    "busy": ("run doctor again when it finishes",),
    "unknown_temp": ("delete it by hand ", Next("when_idle")),
    "leftover_temp": (Next("doctor_repair"), " deletes it"),
    "unsigned_record": (Next("doctor_repair"), " signs it (the task's signed checkpoint proves it)"),
    "old_layout": (Next("doctor_repair"), " moves each task into its folder"),
    "not_locked": ("nothing, if nobody writes this state dir; to check under locks or to repair, "
                   "run doctor where the state dir is writable",),
}


def _finding(problem: Problem) -> Finding:
    """The report's line for a problem the store found."""
    action = PROBLEM_ACTIONS.get(problem.kind, ASK_HUMAN)
    if problem.kind == "unsigned_unproven":  # a person vouches for this very record, or removes it
        action = ("a human must check it (the task's receipt; for an effect, the service); if it is genuine, ",
                  Next("doctor_adopt", problem.path), " signs it")
    if problem.remedy:
        action += (f" ({problem.remedy})",)
    return Finding(problem.kind, problem.task_id, problem.path, problem.detail, action)


def doctor(store: TaskStore, *, repair: bool = False, adopt: Iterable[str] = (),
           token: Optional[str] = None) -> dict[str, Any]:
    """Check every task of ``store`` against its ledger; with ``repair`` let the store make the
    repairs it can prove (unsigned records a signed checkpoint proves; the file store: leftover
    temp files, older revision files a crash left whole, tasks still in the layout before one
    folder per task) and sign the unsigned records ``adopt`` names (each exactly as a finding's
    ``path`` gave it: a person vouched for them). See the module docstring.

    Works over any :class:`state.store.Inspectable` store: the store lists its own problems and
    each task (held under its lock while it is judged here, :mod:`state.inspection`), and this
    function judges each task by the decision table. Returns :meth:`Report.as_dict`. Never raises
    :class:`Refused` for a damaged record: every problem becomes a finding. Raises
    :class:`Refused` for a store that cannot be inspected, and, in team mode (a reviewer
    registered), for ``adopt`` without ``token`` of an admin (:func:`workflow.team.require_admin`):
    an adopted ledger entry is a publication, so vouching for one is an admin's act, checked before
    anything is read.
    """
    if not isinstance(store, Inspectable):
        raise Refused("usage", f"the store {location_of(store)} cannot be checked by doctor (it lists no "
                      "records to check); nothing was read")
    adopt = tuple(adopt)
    if adopt and not repair:
        raise Refused("usage", "adopting unsigned records is a repair: it needs repair as well; nothing was read")
    if adopt:
        from state import reviewers as people
        from workflow import team

        if people.team_mode(store):
            team.require_admin(store, token, "adopting an unsigned record")
    report = Report(state_dir=location_of(store), repair=repair)
    unsigned: set[str] = set()  # tasks with an unsigned record: not judged (the store lists those first)
    team_tasks: list[Any] = []  # the first checkpoint started in team mode (a reviewer list it needs)
    # ``adopt`` only when given: a store written before it existed still works without it
    for item in store.inspect(repair=repair, adopt=adopt) if adopt else store.inspect(repair=repair):
        if isinstance(item, TaskCheck) and item.checkpoint.team is not None and not team_tasks:
            team_tasks.append(item.checkpoint)
        if isinstance(item, Problem):
            report.findings.append(_finding(item))
            if item.kind in UNSIGNED and item.task_id is not None:
                unsigned.add(item.task_id)
        elif isinstance(item, Repaired):
            report.repairs.append({"kind": item.kind, "path": item.path, "result": item.result})
        elif isinstance(item, TaskCheck) and item.checkpoint.task_id in unsigned:
            item.claim(keys(item.checkpoint, c)[0] for c in item.checkpoint.channels)
            report.findings.append(Finding("not_judged", item.checkpoint.task_id, item.where,
                                           "not judged while a record of this task is unsigned (named above)",
                                           ("sign or remove that record first, then run doctor again",)))
        elif isinstance(item, TaskCheck):
            _judge(store, item, report)
        elif isinstance(item, Counted):
            report.tasks, report.ledger_entries = item.tasks, item.ledger_entries
            report.lock_files = item.lock_files
    _reviewers_lost(store, report, team_tasks)
    return report.as_dict()


def _reviewers_lost(store: TaskStore, report: Report, team_tasks: list[Any]) -> None:
    """A finding ``reviewers_missing`` if the store's reviewer list is empty but it once had one
    (:func:`state.reviewers.list_lost`: a policy, or ``team_tasks``, a task started in team mode
    among those doctor checked)."""
    from state import reviewers as people

    try:
        found = None if people.team_mode(store) else people.list_lost(store, team_tasks)
    except Refused:  # a damaged list or policy: not a list deleted (and no finding raises here)
        return
    if found is not None:
        report.findings.append(Finding("reviewers_missing", None, "reviewers", people.lost_list_problem(found),
                                       ("restore the reviewer list from a backup; until then a task started in "
                                        "team mode cannot be decided",)))


def _judge(store: TaskStore, check: TaskCheck, report: Report) -> None:
    """Add the findings of one task (read under its lock) to ``report``; with ``repair``, first end
    a task that ``fail`` ended while its call executed ``completed`` (:func:`executed_after_fail`)."""
    cp = check.checkpoint
    if report.repair and ended_by_fail(cp):
        done = executed_after_fail(store, cp.task_id)
        if done:
            check.claim(keys(cp, c)[0] for c in cp.channels)
            report.repairs.append({"kind": "executed_after_fail", "path": str(check.where), "result": (
                f"ended completed, the failure kept: ledger entry {', '.join(done)} proves the call executed")})
            return
    _check_quorum(store, cp, check.where, report)
    if per_call(cp):  # each channel's entry and record are this task's (judged per call)
        check.claim(keys(cp, c)[0] for c in cp.channels)
        _check_calls(store, cp, check.where, report)
        return
    found = check.records()
    if isinstance(found, Problem):
        report.findings.append(_finding(found))
        return
    assert isinstance(found, Records)
    entry = (found.entry, found.entry_name) if found.entry is not None else None
    _check_task(cp, check.where, entry, report, found.rejection, store)


def _check_quorum(store: TaskStore, cp: Checkpoint, path: Path | str, report: Report) -> None:
    """Add a ``quorum_not_carried_out`` finding for each call of a waiting team task whose quorum
    is reached (the approvals that count now, :func:`workflow.team.progress`) with no decision
    recorded: a crash cut the command off between the approval that reached it and the decision,
    and an approver's approve again carries it out (:func:`workflow.team.check_before`). A request
    that expired is left to ``expire`` (its approve is refused), and a reviewer list that cannot be
    read judges nothing here (the decision refuses it all the same)."""
    from workflow.calls import decision_of
    from workflow.team import listed, progress

    if cp.status != "waiting_for_approval" or cp.team is None or not cp.approvals:
        return
    if cp.expires_at and clock.now() >= clock.parse_iso(cp.expires_at):  # expired: only reject or expire
        return
    try:
        counted = progress(cp, listed(store) if cp.team.authenticated else None)
    except Refused:
        return
    several = len(cp.pending) > 1
    for entry in counted:
        call = entry["call_id"]
        if entry["missing"] or not entry["approved_by"] or decision_of(cp, call) is not None:
            continue
        again = Next("doctor_resume_call", cp.task_id, call, "approve") if several else Next(
            "doctor_resume", cp.task_id, "approve")
        report.findings.append(Finding(
            "quorum_not_carried_out", cp.task_id, str(path),
            f"call {call} on {entry['channel']}: approved by {', '.join(entry['approved_by'])}, the "
            f"{entry['required']} approval(s) its rule needs, and no decision recorded (the command stopped "
            "between the last approval and the decision)",
            ("an approver's ", again, " (with their reviewer token) carries it out")))


#: The next steps of ``doctor`` that are the application's own commands, in words (``a``: the step's
#: arguments), and what does it when the task recorded no command of its application (the library's
#: command line decides, settles and ends nothing; its ``doctor --repair`` makes the store's repairs).
THEIRS = {
    "doctor_resume": (lambda a: f"decide task {a[0]} again: {a[1]}", "the application's decide"),
    "doctor_resume_call": (lambda a: f"decide call {a[1]} of task {a[0]}: {a[2]}", "the application's decide"),
    "doctor_settle": (lambda a: (f"settle call {a[1]} of task {a[0]} as a person who checked found it: its "
                                 "effect done (outcome published) or not done (not_published)"), "workflow.settle"),
    "doctor_fail": (lambda a: f"end task {a[0]} as failed, by a person, with a reason", "workflow.fail"),
}


def their_step(step: Next, given: Optional[str]) -> str:
    """A next step of :data:`THEIRS` in words, naming ``given``, the command the task's application
    recorded (``Checkpoint.command``, escaped onto one line), or, when None, what does it."""
    words, how = THEIRS[step.action]
    how = how if given is None else f"with the application's own command: {one_line(given)}"
    return f"{words([one_line(a) for a in step.args])} ({how})"


def commands_of(store: Any) -> Callable[[str], Optional[str]]:
    """Task ID → the command its application gave (``Checkpoint.command``), or None (none given,
    or a checkpoint that cannot be read: doctor reports that one itself). Reads only the tasks a
    next step names, each once, not every checkpoint again."""
    known: dict[str, Optional[str]] = {}

    def command_of(task_id: str) -> Optional[str]:
        if task_id not in known:
            try:
                known[task_id] = store.load(task_id).command
            except Refused:
                known[task_id] = None
        return known[task_id]
    return command_of


def own_commands(store: Any, hint: Callable[[Next], str]) -> Callable[[Next], str]:
    """``hint`` (an application's words for a next step, e.g. ``cli.hints.hint``), except that a
    step of :data:`THEIRS` for a task another application started (its ``Checkpoint.command``
    set) names that application's command: one application's doctor never sends a person to its
    own decide for another's task, which it would refuse (another agent)."""
    command_of = commands_of(store)

    def worded(step: Next) -> str:
        given = command_of(step.args[0]) if step.action in THEIRS and step.args else None
        return hint(step) if given is None else their_step(step, given)
    return worded


def with_actions(result: dict[str, Any], hint: Callable[[Next], str]) -> dict[str, Any]:
    """:func:`doctor`'s ``result`` with each finding's ``action`` as one string: its text with each
    :class:`state.errors.Next` replaced by ``hint(step)`` (the application's words for it, e.g.
    ``cli.hints.hint``). What ``--json`` prints and :func:`doctor_text` reads."""
    def text(parts: tuple[Part, ...]) -> str:
        return "".join(p if isinstance(p, str) else hint(p) for p in parts)

    return {**result, "findings": [{**f, "action": text(f["action"])} for f in result["findings"]]}


def doctor_text(result: dict[str, Any]) -> str:
    """The human-readable report (non-``--json`` output) of a result :func:`with_actions` worded."""
    c = result["checked"]
    lines = [f"doctor: {one_line(result['state_dir'])}",
             f"  checked {_count(c['tasks'], 'task')}, {_count(c['ledger_entries'], 'ledger entry')}, "
             f"{_count(c['lock_files'], 'lock file')}"]
    for r in result["repairs"]:  # file names and details come from the disk: escaped
        lines.append(f"  repaired {r['kind']}: {one_line(r['path'])} ({one_line(r['result'])})")
    for f in result["findings"]:
        who = f"task {one_line(f['task_id'])}: " if f["task_id"] else ""
        lines.append(f"  {f['kind']}: {who}{one_line(f['detail'])}")
        lines.append(f"    file: {one_line(f['path'])}")
        lines.append(f"    action: {one_line(f['action'])}")
    if result["consistent"]:
        lines.append("  consistent: every task agrees with the ledger")
    return "\n".join(lines)


def summary(result: dict[str, Any]) -> str:
    """The ``STOPPED:`` line's text when inconsistencies remain."""
    n = result["inconsistencies"]
    return f"doctor found {n} inconsistenc{'y' if n == 1 else 'ies'} (see the report above)"




def _count(n: int, noun: str) -> str:
    """``1 task``, ``2 tasks``, ``1 ledger entry``, ``3 ledger entries``."""
    if n == 1:
        return f"1 {noun}"
    return f"{n} {noun[:-1] + 'ies' if noun.endswith('y') else noun + 's'}"
