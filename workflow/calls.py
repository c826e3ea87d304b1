"""Several calls per task: which call a decision is for, and what each call's evidence is.

A model may ask for several ``publish_draft`` calls in one turn (one per channel); the SDK pauses
on all of them at once (``result.interruptions``) and lets each be decided on its own: decided
calls run (or get their rejection text) and the run pauses again on the undecided ones; the model
is asked again only when every call of that turn has an answer (openai-agents 0.24,
``run_internal/turn_resolution.resolve_interrupted_turn``; pinned by
``tests/test_sdk_behaviour.py::test_sdk_partial_decisions_run_decided_calls_and_pause_on_the_rest``).

Each call is one effect on one channel: its own idempotency key (:func:`state.schema.effect_key`),
ledger entry and rejection record. What may happen to one call is the decision table
(:mod:`workflow.reconcile`) applied to that call's evidence (:func:`evidence_of`). SDK-free.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from state.clock import now_iso
from state.errors import Next, Refused
from state.schema import Decision, PendingCall, channel_scope, effect_key
from state.schema import rejection_scope as rejection_scope_of
from state.terminal import one_line

if TYPE_CHECKING:
    from state.schema import Checkpoint


def channel_of(cp: "Checkpoint", arguments: dict[str, Any]) -> str:
    """The channel a call with ``arguments`` publishes to: its ``channel``, or the task's only
    channel when it names none (``tools.publish.call_channel`` reads a call the same way)."""
    channel = arguments.get("channel")
    return cp.channels[0] if channel is None and len(cp.channels) == 1 else channel


def pick_call(cp: "Checkpoint", call_id: Optional[str]) -> PendingCall:
    """The pending call a decision is for: ``call_id``, or the only pending call when it is None.
    Raises :class:`Refused` (nothing changed) when several calls are pending and none is named
    (naming them), or the named call is not pending."""
    ids = [p.call_id for p in cp.pending]
    if call_id is None:
        if len(cp.pending) == 1:
            return cp.pending[0]
        if not cp.pending:
            raise Refused("not_found", f"task {cp.task_id} has no pending call")
        raise Refused("ambiguous", [f"task {cp.task_id} has {len(ids)} pending calls ({', '.join(map(one_line, ids))})",
                               Next("name_call", cp.task_id)], task_id=cp.task_id)
    for call in cp.pending:
        if call.call_id == call_id:
            return call
    raise Refused("not_found", f"task {cp.task_id} has no pending call {call_id!r} (pending: "
                  f"{', '.join(ids) or 'none'})")


def decision_of(cp: "Checkpoint", call_id: str) -> Optional[Decision]:
    """The decision recorded for ``call_id`` (the latest in ``cp.decisions``), or None."""
    found = [d for d in cp.decisions if d.call_id == call_id]
    if found:
        return found[-1]
    return cp.decision if cp.decision is not None and cp.decision.call_id == call_id else None


def calls_of(cp: "Checkpoint") -> list[tuple[str, str]]:
    """Every call of the task the table judges, as ``(call_id, channel)``: the pending calls and
    the decided ones, in order, each once. A call the approval rule let run without a human (the
    ``preview`` channel) is neither: its ledger entry says ``approval: not_needed``. Nor is a call
    approved with edits once answered (never run: the model's next call on its channel, carrying
    the edited draft, is the one judged, :mod:`workflow.edits`)."""
    out: dict[str, str] = {}
    for d in cp.decisions:
        if d.edits is None:
            out.setdefault(d.call_id, d.channel)
    for p in cp.pending:
        out.setdefault(p.call_id, channel_of(cp, p.arguments))
    return list(out.items())


def keys(cp: "Checkpoint", channel: str) -> tuple[str, Optional[str]]:
    """``(ledger key, rejection-record channel)`` of ``channel`` in ``cp``. Raises
    :class:`Refused` if ``channel`` is not one of the task's (a call in a checkpoint this version
    did not write: such a call has no ledger key)."""
    if channel not in cp.channels:
        raise Refused("integrity", f"task {cp.task_id}: a call names channel {one_line(repr(channel))[:60]}, not one "
                      f"of the task's channels ({', '.join(cp.channels)}); a human must check")
    return effect_key(cp.task_id, channel, cp.channels), channel_scope(channel, cp.channels)


def rejection_scope(cp: "Checkpoint", channel: str, call_id: str) -> Optional[str]:
    """The rejection-record channel of a reject of ``call_id`` on ``channel``: the channel's
    (:func:`keys`), or in a task whose model proposes the arguments
    (:meth:`state.schema.Checkpoint.proposed`) the call's own
    (:func:`state.schema.call_scope`): there a reject answers one call and the model may propose
    another, which a human decides anew. Raises :class:`Refused` as :func:`keys` does."""
    keys(cp, channel)  # one of the task's channels
    return rejection_scope_of(channel, call_id, cp.channels, cp.proposed())


def unapplied(cp: "Checkpoint") -> list[Decision]:
    """The decisions recorded for calls still pending (recorded before a crash, a budget stop or
    a failed run), a person's or one a sticky rule made (``source: sticky``): replayed with every
    resume, each for its own call (:func:`to_apply`)."""
    pending = {p.call_id for p in cp.pending}
    return [d for d in cp.decisions if d.call_id in pending]


def sticky_decisions(cp: "Checkpoint", rec: Decision) -> list[Decision]:
    """For a human decision ``rec`` with ``always``: the decisions its sticky rule makes for the
    other pending calls of the same tool that have no decision on record (the calls the reviewer
    sees now), recorded through our path with ``source: sticky`` and ``by`` the person who gave
    the rule. Empty otherwise. A call the model makes later is never covered: it waits for a
    human (:func:`to_apply`)."""
    if not rec.always:
        return []
    out = []
    for p in cp.pending:
        if p.call_id == rec.call_id or p.tool != rec.tool or decision_of(cp, p.call_id) is not None:
            continue
        from state.schema import arguments_sha256

        out.append(Decision(decision=rec.decision, by=rec.by, at=now_iso(), reason=rec.reason,
                            call_id=p.call_id, tool=p.tool,
                            arguments_sha256=arguments_sha256(p.arguments),
                            channel=channel_of(cp, p.arguments), always=False, source="sticky"))
    return out


def target(cp: "Checkpoint", call_id: Optional[str]) -> str:
    """The call_id a decision on ``cp`` is for: :func:`pick_call` while calls are pending, else
    ``call_id`` or the last decided call (a replay of an ended task's decision)."""
    if cp.pending:
        return pick_call(cp, call_id).call_id
    last = cp.decision or (cp.decisions[-1] if cp.decisions else None)
    if call_id is None and last is None:
        raise Refused("not_found", f"task {cp.task_id} has no pending call")
    return call_id or last.call_id  # type: ignore[union-attr]


def to_apply(cp: "Checkpoint", rec: Decision) -> list[Decision]:
    """The decisions to give the SDK before this resume's run, one per call: those recorded for
    pending calls (:func:`unapplied`), and ``rec`` with the decisions of its sticky rule
    (:func:`sticky_decisions`) if it is new.

    Each is given as ``state.approve(item)`` / ``state.reject(item)`` of its own call, never with
    ``always_approve`` / ``always_reject``: the SDK keeps such a rule in the RunState and applies
    it to every later call of the tool in the run, without a pause (openai-agents 0.24,
    ``RunContextWrapper.approve_tool``;
    ``tests/test_sdk_behaviour.py::test_sdk_always_approve_runs_a_later_call_of_the_tool_without_a_pause``),
    so a call no human has seen would run. ``--always`` is our record of the calls it decided; a call
    the model makes in a later turn pauses and waits for a human."""
    recorded = unapplied(cp)
    if any(d.call_id == rec.call_id for d in recorded):
        return recorded
    return [*recorded, rec, *sticky_decisions(cp, rec)]
