"""A human's finding about an effect that may have happened: it was published, or it was not; and
the end of a task whose effect provably never ran.

A call is *in doubt* when its effect went to a provider that cannot deduplicate and the program
cannot know whether the provider acted (a timeout, an answer other than the outcome, a crash after
the request was begun): :mod:`workflow.external` never sends it again by itself. An effect through a
deduplicating provider that stays unconfirmed (the service holds the key for other content, or is
gone for good) may have happened too, and so may a local effect whose function was begun (its
intent recorded: ``workflow.effect``) with no ledger entry after it, when the same approve cannot
finish it. In each case a person looks at the provider (or at what the function did) and says what
they found (:func:`settle`):

- ``published``: the ledger entry is written (``settled_by``, ``settle_reason``: who found it, and
  why), then the run finishes with the recorded approval replayed; the gate answers the model from
  that entry and sends nothing;
- ``not_published``: a :class:`state.records.Settlement` of the attempt is written; the call is
  ``publishing`` again and the next ``resume`` sends it once more, as a new attempt.

In team mode a finding is an approval's to make: only a reviewer the rule of the call's channel
lets approve may record it (:func:`workflow.team.check_settle`; ``fail`` likewise, for every
channel of the task). Either finding is refused for a call whose effect cannot have happened or is
confirmed (code ``not_in_doubt``), and ``not_published`` is refused until the attempt's window has
ended (code ``in_window``): a request given up by the program may still reach the provider and act
until then (:func:`workflow.external.window_s`). Both are recorded under the task's lock and re-checked there,
and each record is created exclusively, so two people settling at once record one finding.

Where no effect can have happened (nothing was approved as asked and carried out, every attempt of
an effect through a service was found not done), :func:`fail` ends the task ``failed`` with the
reason a person gives; they then start a new task.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from state.clock import now_iso
from state.errors import Next, Refused
from state.records import Settlement
from state.terminal import one_line
from workflow import calls
from workflow import external, team
from workflow.external import effect_status

Outcome = Literal["published", "not_published"]
OUTCOMES: tuple[Outcome, ...] = ("published", "not_published")


def settleable(status: Optional[dict[str, Any]]) -> bool:
    """True if an effect in ``status`` (:func:`workflow.external.effect_status`) may have happened
    and is not confirmed: ``in_doubt``, or ``publishing`` with a request of its latest attempt
    possibly sent and not found not done. Such an effect is settled by a person."""
    return (status is not None and status["state"] in ("in_doubt", "publishing") and status["sent"]
            and status["not_sent"] is None)


def in_doubt(store: Any, cp: Any) -> list[tuple[str, str, str, dict[str, Any]]]:
    """The calls of ``cp`` whose effect a person may settle (:func:`settleable`): ``[(call_id,
    channel, ledger key, status)]``, ``status`` as :func:`workflow.external.effect_status` gives
    it (through a service, or a local effect whose function may have run before a crash). Where
    several calls share a channel's key (the model proposed again after a reject), only the call
    the effect's intent names is in doubt, never a rejected one: a finding about it is about that
    call's effect. Raises ``Refused`` if a record is damaged."""
    out = []
    listed = calls.calls_of(cp)
    for call_id, channel in listed:
        key = calls.keys(cp, channel)[0]
        status = effect_status(store, key, cp=cp)
        if settleable(status) and _its_effect(store, cp, listed, call_id, key):
            out.append((call_id, channel, key, status))
    return out


def _its_effect(store: Any, cp: Any, listed: list[tuple[str, str]], call_id: str, key: str) -> bool:
    """False if the effect under ``key`` is not ``call_id``'s: the call was rejected (it ran
    nothing), or the effect's intent names another call of ``cp`` (``listed``)."""
    decided = calls.decision_of(cp, call_id)
    if decided is not None and decided.decision == "rejected":
        return False
    intent = store.intent_get(key)
    return intent is None or intent.call_id == call_id or intent.call_id not in {c for c, _ in listed}


def window_open(status: dict[str, Any]) -> Optional[str]:
    """The ``window_ends`` of ``status`` (:func:`workflow.external.effect_status`) while it is
    still ahead (:func:`workflow.external.window_open`), else None."""
    return external.window_open(status.get("window_ends"))


def pick(store: Any, cp: Any, call_id: Optional[str]) -> tuple[str, str, str, dict[str, Any]]:
    """The call in doubt to settle: ``call_id``, or the task's only one. Raises :class:`Refused`
    (``not_in_doubt``) if there is none, or that call is not in doubt; ``not_found`` if the task
    never had that call (neither pending nor decided, nor in doubt); ``ambiguous`` if several are
    in doubt and none is named."""
    found = in_doubt(store, cp)
    if call_id is not None:
        found = [f for f in found if f[0] == call_id]
        known = list(dict.fromkeys([*(d.call_id for d in cp.decisions), *(p.call_id for p in cp.pending)]))
        if not found and call_id not in known:  # a call this task never had, not one out of doubt
            shown = one_line(call_id)
            shown = shown if len(shown) <= 80 else shown[:79] + "…"
            raise Refused("not_found", [f"task {cp.task_id} has no call '{shown}' (its calls: "
                                        f"{', '.join(one_line(c) for c in known) or 'none'}); nothing recorded",
                                        Next("shows_status", cp.task_id)], task_id=cp.task_id)
    if not found:
        which = f"call {call_id} of task {cp.task_id}" if call_id else f"task {cp.task_id}"
        raise Refused("not_in_doubt", [f"{which} is not in doubt (only an effect that may have happened and "
                                       "is not confirmed is settled); nothing recorded",
                                       Next("shows_status", cp.task_id)], task_id=cp.task_id)
    if len(found) > 1:
        raise Refused("ambiguous", [f"task {cp.task_id} has {len(found)} calls in doubt",
                                    Next("name_call", cp.task_id)], task_id=cp.task_id)
    return found[0]


def record(store: Any, task_id: str, outcome: Outcome, *, by: str, call_id: Optional[str] = None,
           reason: Optional[str] = None) -> tuple[Any, str]:
    """Record a person's finding (``outcome``) about the call in doubt (:func:`pick`), under the
    task's lock: ``(checkpoint, call_id)``. ``published``: the ledger entry (result
    ``{"settled": "published"}``, ``settled_by=by``, ``settle_reason=reason``); ``not_published``: a
    settlement (source ``human``). ``by`` and ``reason`` are text checked by the caller. Raises
    :class:`Refused` as :func:`pick` does (also when another person settled it meanwhile)."""
    _check_before(store, task_id, outcome, call_id, by)
    with store.task_lock(task_id):
        found = _write(store, task_id, outcome, by, call_id, reason)
    return _traced(store, outcome, by, reason, *found)


def _check_before(store: Any, task_id: str, outcome: Outcome, call_id: Optional[str], by: str) -> None:
    """:func:`record`'s checks before the lock (a refusal leaves no lock file)."""
    if outcome not in OUTCOMES:
        raise Refused("usage", f"outcome {outcome!r} is neither published nor not_published")
    cp = store.load(task_id)
    _check_window(cp, outcome, *_allowed(store, cp, call_id, by))


def _write(store: Any, task_id: str, outcome: Outcome, by: str, call_id: Optional[str],
           reason: Optional[str]) -> tuple[Any, str, str, Any]:
    """:func:`record`'s checks again and its write, under the task's lock: ``(checkpoint, call,
    channel, intent)``."""
    cp = store.load(task_id)
    call, channel, key, status = _allowed(store, cp, call_id, by)
    _check_window(cp, outcome, call, channel, key, status)
    intent = store.intent_get(key)
    if outcome == "not_published":
        store.settlement_record(Settlement(idempotency_key=key, attempt=intent.attempt, task_id=task_id,
                                           by=by, at=now_iso(), reason=reason, source="human"))
    else:
        store.ledger_record(key=key, task_id=task_id, action=cp.action, title=cp.title[:200],
                            content_sha256=intent.content_sha256, channel=channel, approval="human",
                            result={"settled": "published"}, settled_by=by, settle_reason=reason)
    return cp, call, channel, intent


def _traced(store: Any, outcome: Outcome, by: str, reason: Optional[str], cp: Any, call: str, channel: str,
            intent: Any) -> tuple[Any, str]:
    """The finding in the task's trace too; ``(checkpoint, call)``."""
    from workflow.observe import decisions
    from workflow.team import rule_of

    decisions.record(store, cp, "settlement", {"call_id": call, "channel": channel, "outcome": outcome,
                                                    "by": by, "attempt": intent.attempt, "has_reason": bool(reason),
                                                    "rule": rule_of(cp, channel).describe()})
    return cp, call


def _allowed(store: Any, cp: Any, call_id: Optional[str], by: str) -> tuple[str, str, str, dict[str, Any]]:
    """:func:`pick`, once the task's policy lets ``by`` settle the call: in team mode a reviewer the
    rule of its channel lets approve (:func:`workflow.team.check_settle`). Raises :class:`Refused`."""
    found = pick(store, cp, call_id)
    team.check_settle(store, cp, [found[1]], by)
    return found


def _check_window(cp: Any, outcome: Outcome, call: str, _channel: str, _key: str, status: dict[str, Any]) -> None:
    """Refuse (``in_window``) a finding of ``not_published`` while a request of the attempt may
    still reach the provider and act (:func:`window_open`), naming when that ends."""
    ends = window_open(status) if outcome == "not_published" else None
    if ends is not None:
        raise Refused("in_window", [
            f"call {call} of task {cp.task_id}: a request of attempt {status['attempt']} may still reach the "
            f"service and act until {ends}; nothing recorded: wait until then, look at the service again, then "
            "settle it", Next("settle", cp.task_id, call)], task_id=cp.task_id)


async def settle(store: Any, app: Any, *, task_id: str, outcome: Outcome, by: str,
                 call_id: Optional[str] = None, reason: Optional[str] = None, **kwargs: Any) -> Any:
    """:func:`record` (its lock awaited, :func:`workflow.locking.task_lock`), then for ``published``
    the run finishes: the recorded approval is replayed
    (:func:`workflow.hitl.decide`, ``kwargs`` passed on) and the gate answers the model from the
    ledger entry, sending nothing; a task a ``fail`` ended while the effect was out is ended
    ``completed`` instead, its failure kept (:func:`workflow.reconcile.executed_after_fail`).
    Returns the checkpoint (``completed``, or waiting on other calls; for ``not_published``
    unchanged: its shown status is ``publishing``). Raises :class:`Refused`."""
    if outcome == "published":  # the run must be able to finish before anything is written
        from workflow import hitl  # the SDK, only to finish the run

        _check_can_finish(store, app, task_id, kwargs.get("model"))
    from workflow import locking  # the lock awaited: an event loop goes on meanwhile

    _check_before(store, task_id, outcome, call_id, by)
    async with locking.task_lock(store, task_id):
        found = _write(store, task_id, outcome, by, call_id, reason)
    cp, call = _traced(store, outcome, by, reason, *found)
    if outcome == "not_published":
        return store.load(task_id)
    from workflow import reconcile

    if reconcile.ended_by_fail(cp):  # a fail landed while the effect was out: done, so completed, the failure kept
        reconcile.executed_after_fail(store, task_id)
        return store.load(task_id)
    return await hitl.decide(store, app, task_id=task_id, decision="approve", by=by, call_id=call, **kwargs)


def _check_can_finish(store: Any, app: Any, task_id: str, model: Any = None) -> None:
    """Refuse, before anything is written, what would stop the run of ``task_id`` with ``app``'s
    agent half-way: a checkpoint that does not verify, an agent changed since the save, another
    service than the task was started with (:func:`workflow.guards.check_saved_against_code`).
    Raises :class:`Refused`; writes nothing. Imports the SDK."""
    from workflow import guards
    from workflow.agent_check import check_agent
    from workflow.budget import BudgetGuard, Pricing

    cp = store.load(task_id)
    agent = app.agent(cp.model, BudgetGuard(cp.budget, Pricing(cp.model, cp.budget)), model)
    check_agent(agent)
    guards.check_saved_against_code(cp, agent, app)


def fail(store: Any, task_id: str, *, by: str, reason: str) -> Any:
    """End ``task_id`` where no effect can have happened: ``failed`` with ``reason`` (who: ``by``),
    or ``completed`` when another call of it executed (an executed action is never undone; the
    failure is recorded all the same). The decision table (:func:`workflow.reconcile.reconcile`,
    action ``fail``) allows it for an open task whose approved calls were never carried out, or
    whose every attempt through a service was found not done, or (ending it ``completed``) whose
    approved calls executed but whose run cannot finish; it refuses a task with an effect that
    may have happened (``begun``: settle it first), a task whose every call is undecided
    (``undecided``: reject it), a rejected one (``rejected``: reject finishes it) or an ended one.
    In team mode ``by`` must be a reviewer the rule of every channel of the task lets approve
    (:func:`workflow.team.check_settle`). Judged before and again under the task's lock; then the
    task's end mark (:func:`_end_mark`), so no older checkpoint can approve a call of it, and a
    check that no effect was begun meanwhile, before the ``failed`` revision is written. A ``fail``
    cut by a crash or refused after its mark is finished by the same ``fail`` again. Returns the
    checkpoint. Raises :class:`Refused` (before the mark: nothing written)."""
    from workflow import reconcile

    first = store.load(task_id)
    team.check_settle(store, first, list(first.channels), by)  # before the lock too
    reconcile.check_fail(store, first)  # before the lock: a refusal leaves no lock file
    with store.task_lock(task_id):
        cp = store.load(task_id)
        team.check_settle(store, cp, list(cp.channels), by)
        if not reconcile.check_fail(store, cp):
            return cp  # failed already: unchanged
        why = f"ended by {by}: {reason}"[:1000]
        _end_mark(store, cp, by, why)  # kept whatever follows: from now on no effect of it starts
        _nothing_begun(store, cp)  # an effect begun meanwhile (a lost lock): it may have run
        executed = any(store.ledger_get(calls.keys(cp, c)[0]) is not None for c in cp.channels)
        status = "completed" if executed else "failed"
        return store.save_revision(cp, failpoint="checkpoint:outcome", status=status, pending=[],
                                   expires_at=None, failure=why,
                                   event=("failed", {"by": by, "reason": reason, "status": status}))


def _end_mark(store: Any, cp: Any, by: str, why: str) -> None:
    """Before ``fail`` ends ``cp``: its end mark, a rejection record under the task's own key with
    call ID :data:`state.records.ENDED_CALL`, by ``by`` with reason ``why``. It outlives any older
    copy of the checkpoint (an approval in it never runs: the decision table and the gate refuse
    every decision while the mark says ended and the checkpoint does not), and it is where a
    running effect and ``fail`` meet (each writes its own mark, then reads the other's). It is never
    removed, whatever follows (another ``fail`` may rely on it): a ``fail`` refused after it leaves
    a task no effect of which starts again, finished by the same ``fail`` once what was begun is
    settled. One already there (a ``fail`` cut by a crash, or racing) is kept: this one finishes
    it. Raises ``Refused`` if a record is damaged, or if a reject's record is there instead."""
    from state.records import ENDED_CALL, is_end_mark
    from state.schema import Decision, arguments_sha256

    mark = Decision(decision="rejected", by=by, at=now_iso(), reason=why, call_id=ENDED_CALL, tool=cp.action,
                    arguments_sha256=arguments_sha256({}), channel=cp.channels[0], always=False, source="human")
    found, created = store.rejection_record(cp.task_id, cp.content_sha256, mark, None)
    if not created and not is_end_mark(found):  # a reject's own record: the table refused already
        raise Refused("rejected", [f"task {cp.task_id} was rejected by {found.by} at {found.at}; nothing to end",
                                   Next("shows_status", cp.task_id)], task_id=cp.task_id)


def _nothing_begun(store: Any, cp: Any) -> None:
    """After ``fail``'s mark: no effect of ``cp`` is begun and unsettled (an intent with no ledger
    entry that may have acted: :data:`workflow.reconcile.MAY_HAVE`). The gate writes its intent
    and then reads the mark; ``fail`` writes the mark and then reads the intents: one of the two
    always sees the other, whatever the lock files said. Raises ``Refused`` (``begun``)."""
    from workflow import reconcile

    for channel in cp.channels:
        if reconcile.begun_of(store, cp, calls.keys(cp, channel)[0]) in reconcile.MAY_HAVE:
            raise Refused("begun", [f"task {cp.task_id}: an effect of it was begun while it was being ended, so it "
                                    "may have happened; no other effect of it starts now: a person settles that one",
                                    Next("doctor_explains"), ", then the same fail ends the task"],
                          task_id=cp.task_id)

