"""A human's finding about an effect that is in doubt: it was published, or it was not.

A call is *in doubt* when its effect went to a provider that cannot deduplicate and the program
cannot know whether the provider acted (a timeout, a lost answer, a crash after the request was
begun): :mod:`workflow.external` never sends it again by itself. A person looks at the provider and
says what they found:

- ``published``: the ledger entry is written (``settled_by``, ``settle_reason``: who found it, and
  why), then the run finishes with the recorded approval replayed; the gate answers the model from
  that entry and sends nothing;
- ``not_published``: a :class:`state.records.Settlement` of the attempt is written; the call is
  ``publishing`` again and the next ``resume`` sends it once more, as a new attempt.

Either finding is refused for a call that is not in doubt (code ``not_in_doubt``). Both are
recorded under the task's lock and re-checked there, and each record is created exclusively, so
two people settling at once record one finding.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from state.clock import now_iso
from state.errors import Next, Refused
from state.records import Settlement
from workflow import calls
from workflow.external import effect_status

Outcome = Literal["published", "not_published"]
OUTCOMES: tuple[Outcome, ...] = ("published", "not_published")


def in_doubt(store: Any, cp: Any) -> list[tuple[str, str, str, dict[str, Any]]]:
    """The calls of ``cp`` whose effect is in doubt: ``[(call_id, channel, ledger key, status)]``,
    ``status`` as :func:`workflow.external.effect_status` gives it. Empty for a task with no
    service (``cp.service`` None). Raises ``Refused`` if a record is damaged."""
    if cp.service is None:
        return []
    out = []
    for call_id, channel in calls.calls_of(cp):
        key = calls.keys(cp, channel)[0]
        status = effect_status(store, key)
        if status is not None and status["state"] == "in_doubt":
            out.append((call_id, channel, key, status))
    return out


def pick(store: Any, cp: Any, call_id: Optional[str]) -> tuple[str, str, str, dict[str, Any]]:
    """The call in doubt to settle: ``call_id``, or the task's only one. Raises :class:`Refused`
    (``not_in_doubt``) if there is none, or that call is not in doubt; ``ambiguous`` if several
    are and none is named."""
    found = in_doubt(store, cp)
    if call_id is not None:
        found = [f for f in found if f[0] == call_id]
    if not found:
        which = f"call {call_id} of task {cp.task_id}" if call_id else f"task {cp.task_id}"
        raise Refused("not_in_doubt", [f"{which} is not in doubt (only an effect a provider without "
                                       "deduplication may have acted on is settled); nothing recorded",
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
    if outcome not in OUTCOMES:
        raise Refused("usage", f"outcome {outcome!r} is neither published nor not_published")
    pick(store, store.load(task_id), call_id)  # before the lock: a refusal leaves no lock file
    with store.task_lock(task_id):
        cp = store.load(task_id)
        call, channel, key, status = pick(store, cp, call_id)
        intent = store.intent_get(key)
        if outcome == "not_published":
            store.settlement_record(Settlement(idempotency_key=key, attempt=intent.attempt, task_id=task_id,
                                               by=by, at=now_iso(), reason=reason, source="human"))
        else:
            store.ledger_record(key=key, task_id=task_id, action=cp.action, title=cp.title[:200],
                                content_sha256=intent.content_sha256, channel=channel, approval="human",
                                result={"settled": "published"}, settled_by=by, settle_reason=reason)
    return cp, call


async def settle(store: Any, app: Any, *, task_id: str, outcome: Outcome, by: str,
                 call_id: Optional[str] = None, reason: Optional[str] = None, **kwargs: Any) -> Any:
    """:func:`record`, then for ``published`` the run finishes: the recorded approval is replayed
    (:func:`workflow.hitl.decide`, ``kwargs`` passed on) and the gate answers the model from the
    ledger entry, sending nothing. Returns the checkpoint (``completed``, or waiting on other calls;
    for ``not_published`` unchanged: its shown status is ``publishing``). Raises :class:`Refused`."""
    cp, call = record(store, task_id, outcome, by=by, call_id=call_id, reason=reason)
    if outcome == "not_published":
        return store.load(task_id)
    from workflow import hitl  # the SDK, only to finish the run

    return await hitl.decide(store, app, task_id=task_id, decision="approve", by=by, call_id=call, **kwargs)
