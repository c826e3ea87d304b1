"""The one decision table: given what the checkpoint says and what the evidence shows, what may happen now.

Three sources (four for an effect through a service) describe a task, and they can disagree after a crash,
a restored backup, a lost lock or a hand edit:

- the **checkpoint** (signed): its ``status`` and the decision recorded in it (none, approved,
  rejected);
- the **ledger entry**: proof that the action was executed (the only effect there is);
- the **rejection record**: proof that a human rejected it (kept outside the checkpoint, so an older
  copy of the checkpoint put back cannot undo it);
- for an effect through a service, the **intent** without a ledger entry (``begun``,
  :mod:`workflow.external`): ``publishing`` (approved, not confirmed: the same resume sends again
  with the same ``Idempotency-Key``) or ``in_doubt`` (a provider that cannot deduplicate may have
  acted: only ``settle`` moves it).

:func:`reconcile` answers, for one of four actions (``approve``, ``reject``, ``expire``, ``doctor``),
what may happen: run the decision, return the task unchanged, refuse, mark it expired, skip it, or
(for ``doctor``) report it as consistent or as a finding with the command to run. ``resume``,
``expire`` and ``doctor`` all call it, so they can never disagree about a task. The rules:

1. An executed action is never cancelled, and a rejected one is never executed: a task with both a
   ledger entry and a rejection record, evidence that contradicts its status, or a status that
   contradicts its recorded decision (``cancelled`` yet approved) is refused by every command and
   reported to a human.
2. Only what is provable is finished automatically: a recorded decision is replayed with the same
   decision (the ledger stops a second effect); a ledger entry proves the execution.
3. A recorded decision is never changed; a new approval after the deadline is refused (a reject is
   still accepted).
4. Repeating the decision that ended a task returns it unchanged (idempotent).
5. An effect begun (an intent, no entry) may have happened: it is never rejected (``begun``),
   expired or cancelled; ``approve`` resumes it (the gate then sends again with the same key, or
   refuses an in-doubt call), and ``doctor`` says to resume it or to settle it. A ledger entry
   makes the intent irrelevant.

A task with several calls (one per channel) is judged **per call**: each call has its own
decision, ledger entry and rejection record (:mod:`workflow.calls`), and ``status`` is the call's:
the task's, except that in a ``completed`` task a call decided ``rejected`` is ``cancelled`` (a
task completes when at least one call executed; it is cancelled only when none did), and in a
task still waiting a call already answered by the run (:func:`answered`) is ``completed`` if
approved, ``cancelled`` if rejected: its decision repeated is a no-op, never "not pending". A call
approved with edits and answered is over whatever its channel's ledger says
(:func:`answered_with_edits`), and a call the model makes after an earlier call on its channel
was decided and answered is judged on its own, the channel's evidence being the earlier call's
(:func:`decided_before`). A decision is checked against the call it is for; ``expire`` and
``doctor`` check every call of the task, with one channel or several. A task with one call is
judged exactly as before.

The full table, every cell, is in docs/decision-table.md and is compared cell by cell with this
function by ``tests/test_reconcile.py``. Never imports the SDK.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, Optional

from state import clock, secrets
from state.errors import Next, Part, Refused
from state.records import LedgerEntry, check_same_entry, is_end_mark
from state.terminal import one_line
from workflow.calls import calls_of, channel_of, decision_of, keys, pick_call, rejection_scope

if TYPE_CHECKING:
    from state.records import RejectionRecord
    from state.schema import Checkpoint
    from state.store import TaskStore as Store
    from workflow.edits import Edit

Action = Literal["approve", "reject", "expire", "fail", "doctor"]
ACTIONS: tuple[Action, ...] = ("approve", "reject", "expire", "fail", "doctor")
STATUSES = ("waiting_for_approval", "budget_exceeded", "completed", "cancelled", "expired", "failed")
#: The statuses in which calls still wait for a decision.
OPEN = ("waiting_for_approval", "budget_exceeded")
DECIDED = (None, "approved", "rejected")
#: The decision an ended task can never carry (our writer never ends one so).
NEVER = {"completed": "rejected", "cancelled": "approved", "expired": "approved", "failed": "rejected"}

#: The codes of a ``refuse`` verdict; :func:`refusal` turns one into its one-line message.
REFUSALS = ("conflict", "contradiction", "inconsistent", "no_entry", "executed", "rejected", "decided", "expired",
            "begun", "undecided", "failed")
#: What ``Evidence.begun`` may say: no effect begun, or the state of an intent without outcome:
#: ``publishing`` and ``in_doubt`` may have happened; ``not_sent``: provably not (its latest attempt
#: was found not done, by a person or by the program when no connection was ever made, and every
#: earlier one was found not done).
BEGUN = (None, "publishing", "in_doubt", "not_sent")
#: The states of an effect begun that may have happened.
MAY_HAVE = ("publishing", "in_doubt")


@dataclass(frozen=True)
class Evidence:
    """What is known about one task: ``status`` (one of :data:`STATUSES`), ``decided`` (the
    decision recorded in the checkpoint: None, ``"approved"`` or ``"rejected"``), ``entry`` (a
    ledger entry for this task and content exists), ``rejection`` (a rejection record for this
    task and content exists), ``overdue`` (``expires_at`` has passed on :func:`state.clock.now`),
    ``begun`` (one of :data:`BEGUN`: None, or the state of an intent without a ledger entry for the
    call's effect key, :func:`workflow.external.effect_status`: ``"publishing"`` or
    ``"in_doubt"``, or ``"not_sent"``: an intent whose effect provably did not happen)."""

    status: str
    decided: Optional[str]
    entry: bool
    rejection: bool
    overdue: bool = False
    begun: Optional[str] = None


@dataclass(frozen=True)
class Verdict:
    """What may happen: ``kind`` is ``run`` (apply the decision and resume the run), ``unchanged``
    (return the task as it is), ``complete`` (``fail`` ends the task ``completed``: see
    :data:`COMPLETE`), ``refuse`` (``code`` is a key of :data:`REFUSALS`), ``expire``,
    ``skip`` (``expire`` leaves it alone), ``ok`` or ``finding`` (``doctor``; ``code`` is the
    finding kind and ``action`` what to run: a decision word, or None when a human must check)."""

    kind: str
    code: Optional[str] = None
    action: Optional[str] = None

    def cell(self) -> str:
        """The verdict as written in docs/decision-table.md, e.g. ``refuse: executed``,
        ``finding: executed_not_recorded → approve``."""
        if self.kind == "refuse":
            return f"refuse: {self.code}"
        if self.kind == "finding":
            return f"finding: {self.code} → {self.action or 'human'}"
        return self.kind


RUN, UNCHANGED, EXPIRE, SKIP, OK = (Verdict(k) for k in ("run", "unchanged", "expire", "skip", "ok"))
#: ``fail`` of an open task's call that was approved and executed: the task ends ``completed``
#: (its entry stands, the reason is recorded), the way out when its run cannot finish.
COMPLETE = Verdict("complete")


def _refuse(code: str) -> Verdict:
    return Verdict("refuse", code)


def _finding(code: str, action: Optional[str] = None) -> Verdict:
    return Verdict("finding", code, action)


def reconcile(ev: Evidence, action: Action) -> Verdict:
    """The verdict for ``action`` on a task described by ``ev`` (see the module doc and
    docs/decision-table.md). Pure: reads nothing, raises ``ValueError`` only for an unknown
    status, decision or action."""
    if ev.status not in STATUSES or ev.decided not in DECIDED or ev.begun not in BEGUN or action not in ACTIONS:
        raise ValueError(f"no cell for {ev} / {action!r}")
    human = _refuse("conflict") if ev.entry and ev.rejection else _refuse("contradiction")

    # Rule 1: evidence that contradicts itself or the checkpoint stops everyone.
    if ev.entry and (ev.rejection or ev.decided == "rejected" or ev.status in ("cancelled", "expired", "failed")):
        kind = ("cancelled_with_entry" if ev.status in ("cancelled", "failed") else
                "executed_or_approved_but_rejected" if ev.rejection else "entry_without_approval")
        return _finding(kind) if action == "doctor" else (SKIP if action == "expire" else human)
    if ev.rejection and (ev.decided == "approved" or ev.status == "completed"):
        return _finding("executed_or_approved_but_rejected") if action == "doctor" else (
            SKIP if action == "expire" else human)
    if ev.decided is not None and NEVER.get(ev.status) == ev.decided:  # cancelled, yet approved
        return _finding("status_contradicts_decision") if action == "doctor" else (
            SKIP if action == "expire" else _refuse("inconsistent"))
    if ev.status == "completed" and not ev.entry:
        return _finding("completed_without_entry") if action == "doctor" else (
            SKIP if action == "expire" else _refuse("no_entry"))

    # Rule 5: an effect begun (an intent, no entry) may have happened.
    if ev.begun in MAY_HAVE and not ev.entry:
        if ev.status not in OPEN or ev.rejection or ev.decided == "rejected":  # never cancelled
            return _finding("cancelled_with_intent") if action == "doctor" else (
                SKIP if action == "expire" else _refuse("contradiction"))
        if action == "approve":  # the gate sends again with the same key, or refuses an in-doubt call
            return _refuse("expired") if ev.decided is None and ev.overdue else RUN  # a new approval
        if action in ("reject", "fail"):  # it may have happened: settle it first
            return _refuse("begun")
        if action == "expire":
            return SKIP
        if ev.decided is None:  # begun, but no approval on record: a human says
            return _finding("intent_without_approval")
        return (_finding("effect_in_doubt", "settle") if ev.begun == "in_doubt"
                else _finding("effect_unconfirmed", "approve"))
    # An effect found not done after an approval: sent again by the next approve, or
    # ended by a person (``fail``). Anywhere else its intent is one no command of ours writes.
    if ev.begun == "not_sent" and not ev.entry and ev.status != "failed":
        if ev.status not in OPEN or ev.rejection or ev.decided != "approved":
            return _finding("intent_without_approval") if action == "doctor" else (
                SKIP if action == "expire" else _refuse("contradiction"))
        if action == "doctor":
            return _finding("effect_not_sent", "approve")
        return {"approve": RUN, "reject": _refuse("decided"), "expire": SKIP, "fail": RUN}[action]

    # Ended tasks: the same decision again is a no-op; any other is refused.
    if ev.status == "completed":
        return {"approve": UNCHANGED, "reject": _refuse("executed"), "expire": SKIP, "fail": _refuse("executed"),
                "doctor": OK}[action]
    if ev.status == "cancelled":
        return {"approve": _refuse("rejected"), "reject": UNCHANGED, "expire": SKIP, "fail": _refuse("rejected"),
                "doctor": OK}[action]
    if ev.status == "expired":
        return {"approve": _refuse("expired"), "reject": UNCHANGED, "expire": SKIP, "fail": _refuse("expired"),
                "doctor": OK}[action]
    if ev.status == "failed":  # no effect happened, and none ever will: start a new task
        if ev.rejection:
            return _finding("executed_or_approved_but_rejected") if action == "doctor" else (
                SKIP if action == "expire" else human)
        return {"approve": _refuse("failed"), "reject": _refuse("failed"), "expire": SKIP, "fail": UNCHANGED,
                "doctor": OK}[action]

    # Open tasks (waiting_for_approval, budget_exceeded): what is recorded or proven decides.
    if ev.decided == "approved" or ev.entry:  # an approval to replay, or an execution to record
        if action == "approve":
            return RUN
        if action == "reject":
            return _refuse("executed" if ev.entry else "decided")
        if action == "fail":  # an approval never carried out: no effect happened; or one carried
            # out whose run cannot finish (the model's next answer refused each time): it completes
            return (COMPLETE if ev.decided == "approved" else _refuse("executed")) if ev.entry else RUN
        if action == "expire":
            return SKIP
        if ev.entry and ev.decided is None:  # executed, but no approval on record: a human says
            return _finding("entry_without_approval")
        if ev.status == "budget_exceeded":
            return OK  # waits for a larger budget
        return _finding("executed_not_recorded" if ev.entry else "decision_not_finished", "approve")
    if ev.decided == "rejected" or ev.rejection:  # a reject to finish
        if action == "approve":
            return _refuse("rejected" if ev.rejection else "decided")
        if action == "reject":
            return RUN
        if action == "fail":
            return _refuse("rejected")
        if action == "expire":
            return SKIP
        return _finding("rejection_not_finished" if ev.decided is None else "decision_not_finished",
                        "reject")
    # Nothing decided, nothing proven: a fresh decision.
    if action == "approve":
        return _refuse("expired") if ev.overdue else RUN
    if action == "reject":
        return RUN
    if action == "fail":  # a person rejects it: the reject is what ends an undecided call
        return _refuse("undecided")
    if action == "expire":
        return EXPIRE if ev.overdue else SKIP
    return OK


def answered(cp: "Checkpoint", call_id: str) -> bool:
    """True if ``call_id`` of an open task (:data:`OPEN`) was decided and the run gave it its answer
    (it executed, or the model got its rejection text): its decision is on record and it is no
    longer pending, while other calls still wait (of the same turn, or the model's new calls of a
    later turn). Such a call is judged as ended (``completed`` if approved, ``cancelled`` if
    rejected): repeating its decision returns the task unchanged, another decision is refused. A
    decision on record for a call still pending is one a crash, a budget stop or a failed run left
    unfinished: not answered."""
    return (cp.status in OPEN and decision_of(cp, call_id) is not None
            and all(p.call_id != call_id for p in cp.pending))


_DECIDED = {"approve": "approved", "reject": "rejected"}


def _waiting_at(cp: "Checkpoint", revision: int) -> list[str]:
    """The IDs of the calls ``cp`` waited at in its revision ``revision``, from its history (the
    latest ``started`` or ``interrupted`` event at or before it); [] when the history does not
    say."""
    found: list[str] = []
    for event in cp.history:
        if event.revision <= revision and event.event in ("started", "interrupted"):
            pending = event.detail.get("pending")
            found = [c for c in pending if isinstance(c, str)] if isinstance(pending, list) else []
    return found


def meant(cp: "Checkpoint", decision: Action, by: str, reason: Optional[str],
          edit: Optional["Edit"] = None, expect_revision: Optional[int] = None) -> Optional[str]:
    """The call a decision that names none is for, fixed when it is judged, before the lock (so a
    call decided by another reviewer meanwhile is judged again under the lock, never swapped for
    another): the task's only pending call, or None when it has none or several
    (:func:`workflow.calls.pick_call` then says so).

    In a task whose model proposes the arguments (:meth:`Checkpoint.proposed`), with no revision
    given (``expect_revision``, which binds what was seen by itself), a call the model proposed
    after an earlier decision was answered may be one nobody saw (the reviewer looked before that
    decision, or a crash cut the command off after it):

    - an approval: None (it must name its call: :func:`workflow.guards.check_revision`);
    - the same reject again (the task's latest decision is a person's reject by ``by`` with this
      ``reason``, answered, and every pending call is undecided and on its channel: the model's
      new proposal for the same effect): that reject's call, so the table returns the task
      unchanged (rule 4) and the new call still waits;
    - any other reject: refused (``usage``), naming the calls waiting; nothing is decided.

    With ``expect_revision`` older than ``cp``'s: when ``by`` made this very decision (same
    reason, same edits) of the one call the task waited at in that revision, and it was answered,
    that call (a retry whose answer was lost: the table returns the task unchanged, even after the
    model proposed a new call); else the task's only pending call.

    In any task, when this decision is the task's latest (a person's, by ``by``, with this
    ``reason``, answered) and every call waiting carries content another approval with edits
    approved (:func:`workflow.edits.complying`, ``unfinished``: the run goes on with them, a crash
    cut it off), this is that decision again: its call, so the task is returned unchanged and the
    edited call is finished (:func:`workflow.hitl.decide`), never decided by this person. So is
    an approval with ``edit`` when ``by`` made, with this ``reason``, an answered approval whose
    edits give the same content, and every call waiting is one such edits led to: the same command
    again after a crash (those calls already carry the edited content, so the edits would
    otherwise change nothing).

    Raises :class:`Refused` as said. Reads only."""
    from workflow import edits as edited

    if cp.status not in OPEN or not cp.pending:
        return None  # an ended task: workflow.calls.target replays its last decision
    only = cp.pending[0].call_id if len(cp.pending) == 1 else None
    if expect_revision is not None:
        seen = _waiting_at(cp, expect_revision) if expect_revision < cp.revision else []
        rec = decision_of(cp, seen[0]) if len(seen) == 1 else None
        if (rec is not None and rec.source == "human" and answered(cp, rec.call_id) and edited.same_edits(rec, edit)
                and (rec.by, rec.decision, rec.reason) == (by, _DECIDED[decision], reason)):
            return rec.call_id  # by's decision of the call they saw, on record: a retry
        return only
    last = cp.decisions[-1] if cp.decisions else None
    again = (last is not None and edit is None and last.edits is None and last.source == "human"
             and (last.by, last.decision, last.reason) == (by, _DECIDED[decision], reason)
             and answered(cp, last.call_id))
    following = {c for c, _ in [*edited.complying(cp), *edited.unfinished(cp)]}
    if again and all(p.call_id in following for p in cp.pending):  # another reviewer's edits led to them
        return last.call_id  # type: ignore[union-attr]
    if edit is not None and decision == "approve" and all(p.call_id in following for p in cp.pending):
        mine = [d.call_id for d in cp.decisions if d.edits is not None and d.source == "human"
                and (d.by, d.reason) == (by, reason) and answered(cp, d.call_id) and edited.same_edits(d, edit)]
        if mine:  # this very approval with edits again: the calls it led to are finished
            return mine[-1]
    if not cp.proposed():
        return only
    if decision == "approve":
        return None
    if not any(answered(cp, d.call_id) for d in cp.decisions):
        return only  # the model's first calls: what every reviewer saw
    if again and all(decision_of(cp, p.call_id) is None and channel_of(cp, p.arguments) == last.channel
                     for p in cp.pending):
        return last.call_id  # type: ignore[union-attr]
    ids = ", ".join(one_line(p.call_id) for p in cp.pending)
    raise Refused("usage", [f"task {cp.task_id}: its model proposed the call(s) waiting ({ids}) after an earlier "
                            "decision, so a reject names the call it rejects, as shown",
                            Next("name_call", cp.task_id, plain="; give its call ID, or the revision you saw")],
                  task_id=cp.task_id)


def ran_before(cp: "Checkpoint", call_id: str, channel: str) -> bool:
    """True if another call on ``channel`` was approved as it was asked (a person's or a sticky
    rule's decision) and is no longer pending: the run executed it, so the channel's ledger entry
    is that call's effect. For ``call_id`` rejected or undecided, the entry is then no evidence
    against it: such a call may be rejected (the model is told no; nothing is undone, and the task
    still completes, since an executed action is never cancelled) and is judged ``cancelled``
    once the task completed."""
    pending = {p.call_id for p in cp.pending}
    return any(d.call_id != call_id and d.channel == channel and d.decision == "approved"
               and d.edits is None and d.call_id not in pending for d in cp.decisions)


def approved_since(cp: "Checkpoint", call_id: str, channel: str, entry: Optional[LedgerEntry] = None) -> bool:
    """True if, in a task whose model proposes the arguments (:meth:`state.schema.Checkpoint.proposed`),
    another call on ``channel`` was approved as it was asked, pending or not, and the channel's
    ledger ``entry`` (if any) carries the content that approval was of: the rejected ``call_id``
    never runs (the gate runs only a call approved by its own ID, and its reject is its own
    record), so the channel's entry and effect intent are that other call's, never evidence about
    this one (:func:`ran_before` covers every task once the other call ran). An entry of other
    content stays evidence (the table then stops everyone)."""
    return cp.proposed() and any(
        d.call_id != call_id and d.channel == channel and d.decision == "approved" and d.edits is None
        and (entry is None or entry.content_sha256 == d.content_sha256) for d in cp.decisions)


def decided_before(cp: "Checkpoint", call_id: str, channel: str) -> bool:
    """True if ``call_id`` is a pending call with no decision of its own on a ``channel`` where an
    earlier call, decided as it was asked (approved or rejected, a person's or a sticky rule's
    decision), was answered by the run: the channel's ledger entry or rejection record is that
    call's evidence and proves nothing about this one. This call waits for a human like any other
    (the table still applies to it: on a published channel approving it publishes nothing new,
    the ledger keeps one entry per idempotency key, and rejecting it is allowed, :func:`ran_before`;
    on a rejected channel approving it is refused); ``doctor`` finds nothing to report."""
    if decision_of(cp, call_id) is not None or all(p.call_id != call_id for p in cp.pending):
        return False
    return any(d.channel == channel and d.edits is None and answered(cp, d.call_id)
               for d in cp.decisions)


def answered_with_edits(cp: "Checkpoint", call_id: Optional[str]) -> bool:
    """True if ``call_id`` was approved with edits and the run answered it (the message naming the
    edited draft reached the model; the call itself never runs, :mod:`workflow.edits`): its
    decision is over whatever its channel's ledger says. Repeating it (the same edits) returns the
    task unchanged; any other decision of it is refused."""
    recorded = decision_of(cp, call_id) if call_id else None
    return (recorded is not None and recorded.edits is not None
            and all(p.call_id != call_id for p in cp.pending))


def gather(store: "Store", cp: "Checkpoint", call_id: Optional[str] = None) -> tuple[
        Evidence, Optional[LedgerEntry], Optional["RejectionRecord"]]:
    """Read the evidence about one call of ``cp`` from ``store`` (a
    :class:`state.store.TaskStore`): ``(Evidence, ledger entry or None, rejection record or
    None)``, ``overdue`` on :func:`state.clock.now`. ``call_id`` None: the task's only call, or its
    last decided one. Reads only. Raises :class:`Refused` if either piece of evidence is for
    another task or other content (no table cell applies: a human must check), or a file is
    damaged."""
    calls = calls_of(cp)
    if call_id is None:
        last = cp.decision or (cp.decisions[-1] if cp.decisions else None)
        call_id = last.call_id if last is not None else (calls[0][0] if calls else None)
    recorded = decision_of(cp, call_id) if call_id else cp.decision
    channel = (recorded.channel if recorded is not None and recorded.call_id == call_id
               else dict(calls).get(call_id, cp.channels[0]) if call_id else cp.channels[0])
    key, scope = keys(cp, channel)
    if cp.proposed() and call_id:  # a reject there is one call's (workflow.calls.rejection_scope)
        scope = rejection_scope(cp, channel, call_id)
    evidence = store
    entry = evidence.ledger_get(key)
    if entry is not None:
        check_same_entry(entry, key=key, task_id=cp.task_id, content_sha256=cp.expected_sha256(channel, call_id),
                         action=cp.action)
    rejected = evidence.rejection_get(cp.task_id, scope)
    if is_end_mark(rejected):  # fail's end mark: not a reject
        rejected = None  # (an open task with one is judged by ended_unsaved, before the table)
    if rejected is not None and rejected.content_sha256 != cp.content_sha256:
        raise Refused("contradiction", [f"task {cp.task_id}: the rejection record and the checkpoint disagree; a "
                                   "human must check", Next("doctor")], task_id=cp.task_id)
    overdue = cp.expires_at is not None and clock.now() >= clock.parse_iso(cp.expires_at)
    decided = recorded.decision if recorded else None
    other = bool(call_id) and decided != "approved" and (
        ran_before(cp, call_id, channel) or (decided == "rejected" and approved_since(cp, call_id, channel, entry)))
    # a one-call task is judged exactly as before channels; where the model proposes, a rejected
    # call's part ended when the model got its answer, whatever the task did after it
    several = len(cp.channels) > 1 or other or (cp.proposed() and decided == "rejected")
    status = ("cancelled" if several and cp.status in ("completed", "failed") and decided == "rejected"
              else cp.status)
    if decided is not None and answered(cp, call_id):  # its part of the run is over
        status = "completed" if decided == "approved" else "cancelled"
    if (status == "completed" and decided in ("approved", None) and (entry is None or other) and cp.failure
            is not None and any(h.event == "failed" for h in cp.history)):  # fail gave this call up (approved
        status = "failed"  # or never decided) while another call ran: this one ran nothing, and never will
    ev = Evidence(status=status, decided=decided, entry=entry is not None and not other,
                  rejection=rejected is not None, overdue=overdue,
                  begun=None if other else begun_of(store, cp, key, entry))  # another call's effect
    return ev, entry, rejected


def end_mark(store: "Store", cp: "Checkpoint") -> Any:
    """The end mark ``fail`` made for ``cp``'s task (:func:`workflow.settlement.fail`: a rejection
    record under the task's own key whose call ID is :data:`state.records.ENDED_CALL`) while the
    task is still open (:data:`OPEN`: a ``fail`` that did not finish), or None (no mark, or the task
    ended: the checkpoint then says so itself, and no record is read). Raises ``Refused`` if the
    record is damaged. Reads only."""
    if cp.status not in OPEN:
        return None
    found = store.rejection_get(cp.task_id, None)
    return found if is_end_mark(found) else None


def _reject_unsaved(cp: "Checkpoint", rejected: "RejectionRecord", call_id: Optional[str]) -> bool:
    """True if ``rejected`` is ``call_id``'s own rejection record and the open ``cp`` still waits at
    that call with no decision: a crash after the record, or an older copy put back."""
    return (rejected.call_id == call_id and cp.status in OPEN and decision_of(cp, call_id) is None
            and any(p.call_id == call_id for p in cp.pending))


def reject_unfinished(store: "Store", cp: "Checkpoint") -> Optional["RejectionRecord"]:
    """The rejection record of the first call ``cp`` still waits at with no decision on record
    although its rejection record exists (a reject cut by a crash after that record, or an older
    checkpoint put back): an approve of it is refused, the same reject finishes it. None if there
    is none (nothing is read for an ended task). Reads the ledger and rejection records; raises
    ``Refused`` as :func:`gather`."""
    if cp.status not in OPEN:
        return None
    for p in cp.pending:
        rejected = gather(store, cp, p.call_id)[2]
        if rejected is not None and _reject_unsaved(cp, rejected, p.call_id):
            return rejected
    return None


def given_up(store: "Store", cp: "Checkpoint") -> tuple[str, ...]:
    """The call IDs of a task of several calls that ``fail`` ended (``failure`` set) whose approval
    it gave up: approved, never carried out (no ledger entry, no effect begun), judged ``failed``
    by :func:`gather`. Empty for any other task (nothing is read). Reads the ledger and intents;
    raises ``Refused`` if a record is damaged."""
    if cp.failure is None or cp.status not in ("completed", "failed") or len(cp.decisions) < 2:
        return ()
    found = []
    for d in cp.decisions:
        if d.decision == "approved":
            ev = gather(store, cp, d.call_id)[0]
            if ev.status == "failed" and not ev.entry and ev.begun is None:
                found.append(d.call_id)
    return tuple(found)


def ended_unsaved(store: "Store", cp: "Checkpoint", action: Action) -> Optional[Verdict]:
    """The verdict for ``action`` on an open task (:data:`OPEN`) whose end mark exists (a ``fail``
    cut by a crash after its mark, or an older checkpoint put back after one): ``fail`` finishes it
    (``run``), ``expire`` leaves it (``skip``), ``doctor`` finds ``fail_not_finished`` (action
    ``fail``), and an approve or a reject is refused (``failed``): the task was ended, nothing of it
    runs again. None when there is no such mark (the table judges). Raises :class:`Refused`."""
    mark = end_mark(store, cp)
    if mark is None:
        return None
    if action == "fail":
        return RUN
    if action == "expire":
        return SKIP
    if action == "doctor":
        return _finding("fail_not_finished", "fail")
    raise Refused("failed", [f"task {cp.task_id} was ended by {mark.by} at {mark.at}, but its checkpoint does not "
                             "say so (a crash while it was ended, or an older copy put back); nothing runs again: "
                             "the same fail finishes it", Next("fail_again", cp.task_id)], task_id=cp.task_id)


def begun_of(store: "Store", cp: "Checkpoint", key: str, entry: Optional[LedgerEntry] = None) -> Optional[str]:
    """``Evidence.begun`` for the effect key ``key`` of ``cp``: None when no intent is recorded
    (through a service, or for a local effect: ``workflow.effect``) or when the ledger holds its
    entry (``entry``, or read now); else ``"publishing"`` or ``"in_doubt"``
    (:func:`workflow.external.effect_status`), or ``"not_sent"`` when its latest attempt was found
    not done. None for a ``completed`` task too, whose cells an intent never changes (nothing is
    read). Reads only; raises :class:`Refused` if a record is damaged."""
    if entry is not None or cp.status == "completed":
        return None
    from workflow.external import check_bound, effect_status

    intent = store.intent_get(key)
    check_bound(cp, key, intent)  # an attempt bound, its intent deleted: raises, nothing is judged
    if intent is None:
        return None
    found = effect_status(store, key, intent=intent, cp=cp)
    if found is None or found["state"] == "published":
        return None
    if found["state"] == "not_published" or found["not_sent"] is not None:
        return "not_sent"
    return found["state"]


def check(store: "Store", cp: "Checkpoint", action: Action, call_id: Optional[str] = None) -> Verdict:
    """:func:`gather` then :func:`reconcile` for the call ``call_id`` (None: see :func:`gather`);
    a ``refuse`` verdict is raised as :class:`Refused` with its one-line message. For ``expire``
    with several calls: ``expire`` only if every call says so, else ``skip``. Reads only."""
    ended = ended_unsaved(store, cp, action)
    if ended is not None:
        return ended
    if action == "expire" and call_id is None and len(calls_of(cp)) > 1:
        verdicts = {check(store, cp, action, c).kind for c, _ in calls_of(cp)}
        return EXPIRE if verdicts == {"expire"} else SKIP
    ev, _, rejected = gather(store, cp, call_id)
    verdict = reconcile(ev, action)
    if answered_with_edits(cp, call_id) and action in ("approve", "reject"):
        verdict = UNCHANGED if action == "approve" else _refuse("decided")
    if verdict.kind == "refuse":
        recorded = decision_of(cp, call_id) if call_id else cp.decision
        shown = call_id or (recorded.call_id if recorded else None)  # the call judged (gather)
        one = len(cp.channels) == 1 and len(calls_of(cp)) <= 1
        where = cp.task_id if one or shown is None else f"{cp.task_id} (call {shown})"
        if rejected is not None and shown is not None and rejected.call_id != shown:  # an earlier call
            where = f"{cp.task_id} (call {shown}): its channel's content, in call {rejected.call_id},"
        unfinished = rejected is not None and _reject_unsaved(cp, rejected, shown)
        raise Refused(verdict.code or "refused", refusal(
            verdict.code or "", task_id=where,
            status=ev.status if verdict.code == "executed" else cp.status,  # an answered call: ended
            decided=ev.decided,
            decided_by=recorded.by if recorded else None,
            rejected_by=rejected.by if rejected else None,
            rejected_at=rejected.at if rejected else None, expires_at=cp.expires_at, task=cp.task_id,
            call=None if one else shown,  # expire skips a task with a call decided: not named then
            expirable=verdict.code != "expired" or check(store, cp, "expire").kind == "expire",
            unfinished=unfinished),
            task_id=cp.task_id)
    return verdict


def check_fail(store: "Store", cp: "Checkpoint") -> bool:
    """Whether :func:`workflow.settlement.fail` may end ``cp``: True if it may (every call's verdict
    for ``fail`` is ``run`` or ``complete``, or the call executed: its ledger entry stands), False
    if the task is ``failed`` already (unchanged). Raises :class:`Refused` with the first call's refusal
    (``begun``, ``undecided``, ``rejected``, ``executed`` for a task with nothing left to end…). A
    call still undecided does not stop it where another call was approved and never carried out
    (a reject of the undecided one would carry that one out: ``fail`` is how a person gives it up),
    or one executed or rejected (``fail`` ends the undecided ones: the way out where a changed
    agent runs no reject); nor does a call rejected, of a task with several (it ran nothing), as an
    executed one does not.
    Reads only."""
    verdicts = []
    undecided: Optional[Refused] = None
    rejected: Optional[Refused] = None
    executed = False
    calls = calls_of(cp) or [(None, None)]
    for call_id, _channel in calls:
        try:
            verdicts.append(check(store, cp, "fail", call_id))
        except Refused as exc:
            if exc.code == "undecided" and len(calls) > 1:  # judged below, with the task's other calls
                undecided = undecided or exc
                continue
            if exc.code == "rejected" and len(calls) > 1 and cp.status in (*OPEN, "completed"):  # it ran nothing:
                rejected = rejected or exc  # as executed, it does not stop the other calls (nor name the task's end)
                continue
            if exc.code != "executed" or cp.status not in OPEN:
                raise
            executed = True  # it stands, and does not stop the task's other calls from ending
    # a call still undecided next to one approved and never carried out: a reject of it would carry
    # that one out, so fail ends them all (nothing ran); next to one executed or rejected, fail ends
    # the undecided ones too (a changed agent can run no reject); every call undecided: a reject
    ran = any(v.kind in ("run", "complete") for v in verdicts)
    if undecided is not None and not ran and not executed and rejected is None:
        waiting = [c for c, _ in calls if c is not None and decision_of(cp, c) is None]
        if len(waiting) < 2:
            raise undecided
        raise Refused("undecided", [f"task {cp.task_id}: {len(waiting)} calls wait for a decision; a reject of each "
                                    f"of them ends it (cancelled), starting with call {waiting[0]}",
                                    Next("reject_call", cp.task_id, waiting[0])], task_id=cp.task_id)
    if not verdicts and undecided is None and rejected is not None:  # only rejects: a reject finishes it
        raise rejected
    if not verdicts and undecided is None:  # every call executed: the task completes, it does not fail
        raise Refused("executed", [f"task {cp.task_id}: every call executed; nothing to end",
                                   Next("finish_approve")], task_id=cp.task_id)
    return ran or undecided is not None


def preflight(store: "Store", task_id: str, decision: Action, call_id: Optional[str] = None, *,
              by: Optional[str] = None, reason: Optional[str] = None,
              edit: Optional["Edit"] = None, cp: Optional["Checkpoint"] = None) -> tuple["Checkpoint", Verdict]:
    """The checks before a decision takes the task's lock, none of which needs the SDK: the
    checkpoint loads and verifies, no hostile file sits where the task's files go
    (``Store.check_writable``), the decision table allows it (:func:`recheck`), and the reviewer
    name ``by`` and the ``reason`` hold no secret value (:func:`state.secrets.check_input`; the one
    place they are checked), and a reject that repeats one on record gives its reason or none
    (:func:`_same_reason`). Returns ``(checkpoint, verdict)``; raises :class:`Refused` otherwise.
    Reads only, so a refusal leaves the state dir as it was. ``cp``: the checkpoint of ``task_id``
    the caller has just loaded and verified, before the lock too (it is not read again)."""
    cp = cp if cp is not None and cp.task_id == task_id else store.load(task_id)
    store.check_writable(task_id)
    verdict = _judged(store, cp, decision, call_id, edit)
    if decision == "reject" and reason is not None and cp.status in OPEN:  # a reject on record is finished
        _same_reason(store, cp, call_id, reason)  # (the model is told its reason), never changed
    secrets.check_input(["the reviewer name", Next("input_by")], by)
    secrets.check_input("the reason", reason)
    return cp, verdict


def _same_reason(store: "Store", cp: "Checkpoint", call_id: Optional[str], reason: str) -> None:
    """Raise :class:`Refused` (``decided``) if the reject on record for ``call_id`` (None: the
    task's only call) of the open ``cp`` has another reason than ``reason``: in the checkpoint, or only in its
    rejection record (a reject cut before its checkpoint: :func:`_reject_unsaved`). Finishing it
    tells the model the recorded reason, so another one given now would be dropped without a word."""
    recorded: Any = decision_of(cp, call_id) if call_id else cp.decision
    if recorded is not None and recorded.decision != "rejected":
        return
    if recorded is None:
        target = call_id or (cp.pending[0].call_id if len(cp.pending) == 1 else None)
        found = gather(store, cp, target)[2] if target else None
        recorded = found if found is not None and _reject_unsaved(cp, found, target) else None
    if recorded is not None and recorded.reason is not None and recorded.reason != reason:
        raise Refused("decided", f"task {cp.task_id}: a reject by {recorded.by} at {recorded.at} is already recorded, "
                      f"with the reason {recorded.reason!r}; another reason cannot replace it (the model is told "
                      "the recorded one): the same reject with that reason, or none, finishes it; nothing "
                      "changed", task_id=cp.task_id)


def recheck(store: "Store", task_id: str, decision: Action, call_id: Optional[str] = None, *,
            edit: Optional["Edit"] = None) -> tuple["Checkpoint", Verdict]:
    """The decision table judged again on the checkpoint read now (under the task lock, after
    :func:`preflight`): it loads and verifies, the call is named when several are pending
    (:func:`workflow.calls.pick_call`), the table allows ``decision`` for that call, and an
    ``unchanged`` verdict repeats the recorded decision, edits included (``edit``: the approval's
    edits, or None; :func:`workflow.edits.check_repeat`). Returns ``(checkpoint, verdict)``;
    raises :class:`Refused` otherwise. Reads only."""
    cp = store.load(task_id)
    return cp, _judged(store, cp, decision, call_id, edit)


def _judged(store: "Store", cp: "Checkpoint", decision: Action, call_id: Optional[str],
            edit: Optional["Edit"]) -> Verdict:
    """The verdict of :func:`recheck` for the loaded ``cp``."""
    if cp.pending and cp.status in OPEN and not (call_id and answered(cp, call_id)):
        call_id = pick_call(cp, call_id).call_id
    verdict = check(store, cp, decision, call_id)
    if verdict.kind == "unchanged":
        from workflow.edits import check_repeat

        check_repeat(cp, call_id, "approved" if decision == "approve" else "rejected", edit)
    return verdict


def refusal(code: str, *, task_id: str, status: str, decided: Optional[str] = None,
            decided_by: Optional[str] = None, rejected_by: Optional[str] = None,
            rejected_at: Optional[str] = None, expires_at: Optional[str] = None,
            task: Optional[str] = None, call: Optional[str] = None, expirable: bool = True,
            unfinished: bool = False) -> list[Part]:
    """The one-line message (without ``STOPPED:``) for a ``refuse`` verdict's ``code``, naming what
    was found and what may still be done, as the parts of a :class:`Refused` message (strings and
    :class:`~state.errors.Next` steps). ``task_id`` is how the message names the task (e.g. ``t-1
    (call c-2)``), ``task`` its ID for the next steps (default ``task_id``). Raises ``KeyError`` for
    an unknown code. ``call``: the call a reject names (a task of several calls refuses a reject
    without ``--call``); ``expirable``: ``expire`` would mark the task expired (an ``expired`` refusal
    names it only then); ``unfinished``: the rejected call still waits in the checkpoint with no
    decision (a crash after the rejection record, or an older copy put back): a ``rejected``
    refusal then names the same reject, which finishes it."""
    task = task or task_id
    doctor: list[Part] = ["a human must check", Next("doctor")]
    reject = Next("reject_call", task, call) if call else Next("reject", task)
    if code == "expired" and status != "expired":
        return [f"approval expired: task {task_id} expired at {expires_at}; it can only be "
                "rejected", reject, *([" or marked expired", Next("expire")] if expirable else [])]
    if code == "rejected" and rejected_by is not None and status != "cancelled":
        return [f"task {task_id} was rejected by {rejected_by} at {rejected_at}; it can never be "
                "approved (the rejection record outlives any older copy of the checkpoint)",
                *(["; the checkpoint does not say so yet: the same reject finishes it", reject] if unfinished else [])]
    if code == "executed" and status != "completed":
        return [f"the ledger shows task {task_id} was already executed; it cannot be rejected",
                Next("finish_approve")]
    return {
        "conflict": [f"task {task_id}: the rejection record and the ledger disagree; ", *doctor],
        "contradiction": [f"task {task_id} is {status}, but its evidence says otherwise (ledger "
                          f"entry or rejection record); ", *doctor],
        "inconsistent": [f"task {task_id} is {status} but records the decision '{decided}'; ", *doctor],
        "no_entry": [f"task {task_id} is completed but the ledger has no entry for it; ", *doctor],
        "executed": [f"task {task_id} was already executed (completed); an executed action is "
                     "never cancelled"],
        "rejected": [f"task {task_id} was rejected (cancelled); start a new task with a new key"],
        "decided": [f"task {task_id}: a decision '{decided}' by {decided_by} is already recorded; "
                    "it cannot be changed"],
        "expired": [f"approval expired: task {task_id} expired at {expires_at}; start a new task"],
        "begun": [f"task {task_id}: its effect was begun (an intent is recorded, no outcome yet), so it may "
                  "have happened; it is neither rejected nor ended until a person settles it", Next("doctor_explains")],
        "undecided": [f"task {task_id}: a call waits for a decision; a reject ends it (cancelled)", reject],
        "failed": [f"task {task_id} failed (nothing was done, and nothing will be); start a new task with a new key"],
    }[code]


def cell_text(ev: Evidence, action: Action) -> str:
    """One cell of the printed table: the verdict's :meth:`Verdict.cell`, or ``A / B`` when it
    differs before (``A``) and after (``B``) the approval request's deadline."""
    before = reconcile(replace(ev, overdue=False), action).cell()
    after = reconcile(replace(ev, overdue=True), action).cell()
    return before if before == after else f"{before} / {after}"


def rows() -> list[Evidence]:
    """The table's rows, in order: every (status, recorded decision, ledger entry, rejection record)
    with nothing begun, each followed by the same evidence with an effect begun where that changes
    a cell (never with a ledger entry: it makes begun irrelevant): one row (``publishing``, standing
    for both, :func:`begun_cell`) when ``publishing`` and ``in_doubt`` agree, else one for each;
    then one with ``not_sent`` (an effect provably not done) where it changes a cell."""
    out = []
    for status in STATUSES:
        for decided in DECIDED:
            for entry in (False, True):
                for rejection in (False, True):
                    ev = Evidence(status, decided, entry, rejection)
                    out.append(ev)
                    if entry:
                        continue
                    cells = {b: [cell_text(replace(ev, begun=b), a) for a in ACTIONS] for b in BEGUN}
                    if not cells["publishing"] == cells["in_doubt"] == cells[None]:
                        out.extend([replace(ev, begun="publishing"), replace(ev, begun="in_doubt")]
                                   if cells["publishing"] != cells["in_doubt"] else [replace(ev, begun="publishing")])
                    if cells["not_sent"] != cells[None]:
                        out.append(replace(ev, begun="not_sent"))
    return out


def begun_cell(ev: Evidence) -> str:
    """The ``effect begun`` column of :func:`rows`' row ``ev``: ``-`` (nothing begun), ``yes``
    (``publishing`` or ``in_doubt``: every cell is the same for both) or the one state when they
    differ."""
    if ev.begun in (None, "not_sent"):
        return ev.begun or "-"
    other = "in_doubt" if ev.begun == "publishing" else "publishing"
    same = all(cell_text(ev, a) == cell_text(replace(ev, begun=other), a) for a in ACTIONS)
    return "yes" if same else ev.begun


def table_markdown() -> str:
    """The whole table as Markdown, one row per :func:`rows` (status, recorded decision, ledger
    entry, rejection record, effect begun), one column per action: what docs/decision-table.md
    prints."""
    head = ["status", "decision recorded", "ledger entry", "rejection record", "effect begun", *ACTIONS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for ev in rows():
        cells = [ev.status, ev.decided or "-", "yes" if ev.entry else "-", "yes" if ev.rejection else "-",
                 begun_cell(ev), *(cell_text(ev, a) for a in ACTIONS)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ended_by_fail(cp: "Checkpoint") -> bool:
    """True if ``cp`` is ``failed`` and its last event is ``fail``'s: if a ledger entry of it
    exists, ``fail`` ran while the call executed (a lock file deleted under the approval), and
    :func:`executed_after_fail` may end it ``completed``."""
    return cp.status == "failed" and bool(cp.history) and cp.history[-1].event == "failed"


def executed_after_fail(store: "Store", task_id: str) -> list[str]:
    """A ``fail`` by another process that ran while this run's tool function ran (a lock file
    deleted under the approval) saw no ledger entry and ended the task ``failed``. When the newest
    revision is that ``failed`` and a ledger entry of this task's keys exists now, for the content
    and action the checkpoint expects on its channel (and, for a human's, with an approval on
    record on that channel), the call did execute, and an executed action is never ended as if it
    had not: the task is ended ``completed`` on top of that revision, its failure kept, as
    :func:`workflow.settlement.fail` itself ends a task with an executed call. One
    compare-and-swap; anything else (another status, no entry, an entry of other content or with
    no approval on record, a lost swap) is left as it is, for ``doctor`` to report. Run by the
    command whose outcome write lost to that ``failed`` revision
    (:func:`workflow.guards.save_outcome`), and by ``doctor --repair`` for a command that crashed
    before it. Returns the keys whose entries ended it ``completed`` (empty: nothing written).
    Raises :class:`Refused` only if the checkpoint or an entry cannot be read."""
    newest = store.load(task_id)
    if not ended_by_fail(newest):
        return []
    executed = []
    for channel in newest.channels:
        key = keys(newest, channel)[0]
        entry = store.ledger_get(key)
        if entry is None:
            continue
        try:  # the entry of this very task, action and content, as doctor judges it
            check_same_entry(entry, key=key, task_id=task_id, content_sha256=newest.expected_sha256(channel),
                             action=newest.action)
        except Refused:  # another content (an entry put back from elsewhere): a human, never a repair
            return []
        approved = any(d.channel == channel and d.decision == "approved" for d in newest.decisions)
        if entry.approval == "human" and not approved:  # a human's entry with no approval on record
            return []
        executed.append(key)
    if not executed:
        return []
    try:
        store.save_revision(newest, failpoint="checkpoint:outcome", status="completed", pending=[],
                            expires_at=None, event=("completed", {"executed_after": "failed", "keys": executed}))
    except Refused:  # another writer came first: doctor judges what it left
        return []
    return executed


if __name__ == "__main__":  # python -m workflow.reconcile: print the table for the docs
    print(table_markdown())
