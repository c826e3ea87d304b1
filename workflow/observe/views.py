"""JSON shapes printed by the command line (contract in docs/commands.md). Never imports the SDK.

- a task: ``{"task_id", "idempotency_key", "status", "decision": null | {"decision", "by", "at",
  "reason"}, "decisions": [{"call_id", "tool", "channel", "decision", "by", "at", "reason",
  "always", "source"}], "channels": [...], "pending": [{"call_id", "tool", "arguments"}],
  "final_output", "schema_version", "revision", "checkpoint_path"}``, and for a task whose effect
  goes through a service ``"service"`` (its URL) and ``"effects"`` (each channel's,
  :func:`workflow.external.task_effects`); ``status`` is then ``publishing`` or ``in_doubt`` while
  an effect is not confirmed (:func:`workflow.external.shown_status`). ``decision`` is the latest
  decision of the current round (a one-call task's only one); ``decisions`` lists every call's.
  Each ``decision`` is ``approved``, ``rejected`` or ``approved_with_edits`` (workflow/edits.py).
  A team task (docs/reviewers.md) adds ``requested_by``, ``policy_version``, ``approvals`` (each pending call's quorum:
  :func:`workflow.team.progress`) and ``approval_log`` (every approval, the calls decided since
  included: ``[{"call_id", "channel", "by", "at", "counted"}]``), so a task approved by several
  reviewers names each of them, not only the last, and which of them the quorum counted.
- list: ``{"tasks": [task, …]}`` (built by ``workflow.review.inbox.inbox_view``) · ledger: ``{"path",
  "entries": [entry, …]}``
"""

from __future__ import annotations

from typing import Any

from state.reviewers import registered
from state.schema import Checkpoint
from state.store import TaskStore, checkpoint_label
from state.terminal import one_line
from workflow.external import effect_status, shown_status, task_effects

__all__ = ["one_line", "several_lines", "task_view", "ledger_view", "in_flight_line", "DECISION_FIELDS"]


def several_lines(text: str, indent: str) -> str:
    """``text`` over as many terminal lines as it has: each line escaped as by :func:`one_line`,
    each line after the first on a line of its own starting ``indent`` then ``| ``, so a line of
    model output or a reason can never pass for a line of ours."""
    return f"\n{indent}| ".join(one_line(line) for line in text.split("\n"))


#: The fields of each entry of a task's ``decisions`` (``source``: ``human`` or ``sticky``).
DECISION_FIELDS = ("call_id", "tool", "channel", "decision", "by", "at", "reason", "always", "source")


def _kind(d: Any) -> str:
    """A decision's kind as shown: ``approved``, ``rejected`` or ``approved_with_edits``
    (an approval with edits, :mod:`workflow.edits`)."""
    return "approved_with_edits" if d.edits is not None else d.decision


def task_view(store: TaskStore, cp: Checkpoint) -> dict[str, Any]:
    """The task shape above for one checkpoint."""
    effects = task_effects(store, cp)
    decision = None
    if cp.decision is not None:
        d = cp.decision
        decision = {"decision": _kind(d), "by": d.by, "at": d.at, "reason": d.reason}
    return {
        "task_id": cp.task_id,
        "idempotency_key": cp.idempotency_key,
        "status": shown_status(cp.status, effects),
        "decision": decision,
        "decisions": [{**{k: getattr(d, k) for k in DECISION_FIELDS}, "decision": _kind(d)}
                      for d in cp.decisions],
        "channels": list(cp.channels),
        "pending": [p.model_dump() for p in cp.pending],
        "final_output": cp.final_output,
        "schema_version": cp.schema_version,
        "revision": cp.revision,
        "checkpoint_path": checkpoint_label(store, cp.task_id),
        **({"service": cp.service, "effects": effects} if cp.service is not None else {}),
        **({"requested_by": cp.team.requested_by, "policy_version": cp.team.policy_version,
            "approvals": _progress(store, cp), "approval_log": _log(cp)}
           if cp.team is not None else {}),
        **({"failure": cp.failure} if cp.failure is not None else {}),
    }


def ledger_view(store: TaskStore) -> dict[str, Any]:
    """``{"path": <ledger folder, or the database's ledger>, "entries": [...]}``, oldest first; each
    entry's ``settled_by``/``settle_reason`` only when a human settled it, and ``"in_flight"``
    (the effects begun, through a service or a local effect's function called, and not
    confirmed: ``[{"idempotency_key", "state",
    "service", "attempt", "since", "task_id", "channel"}]``) only when there are any."""
    entries = store.ledger_entries()
    recorded = {e.idempotency_key for e in entries}
    in_flight = []
    for intent in store.intents():
        if intent.idempotency_key not in recorded:
            cp = store.load(intent.task_id) if store.exists(intent.task_id) else None
            status = effect_status(store, intent.idempotency_key, intent=intent, cp=cp)  # not read again
            if status is not None and status["state"] not in ("published", "not_published"):
                in_flight.append({"idempotency_key": intent.idempotency_key, "state": status["state"],
                                  "service": intent.service, "attempt": intent.attempt, "since": intent.at,
                                  "task_id": intent.task_id, "channel": intent.channel})
    shown = [{k: v for k, v in e.model_dump().items() if v is not None or k not in _SETTLED} for e in entries]
    return {"path": str(store.ledger_dir), "entries": shown, **({"in_flight": in_flight} if in_flight else {})}


def in_flight_line(f: dict[str, Any]) -> str:
    """The ``ledger`` line of one of :func:`ledger_view`'s ``in_flight`` effects, every value escaped
    onto it: through which service, or (a local effect) that its function was called."""
    from state.records import LOCAL_EFFECT

    where = ("its function was begun, no ledger entry after it" if f["service"] == LOCAL_EFFECT
             else f"through {one_line(f['service'])}")
    return (f"  not confirmed: {one_line(f['idempotency_key'])}  {one_line(f['state'])}  {where} "
            f"(attempt {f['attempt']} since {one_line(f['since'])})")


#: The ledger entry's fields shown only when set (a human settled the effect).
_SETTLED = ("settled_by", "settle_reason")


def _progress(store: TaskStore, cp: Checkpoint) -> list[dict[str, Any]]:
    """:func:`workflow.team.progress` (who approved each pending call so far, how many are missing);
    for a waiting task started in team mode, only the approvals that count (the reviewer list is
    read: raises :class:`state.errors.Refused` as it does)."""
    from workflow.team import progress

    if cp.team is None or not cp.team.authenticated or not cp.pending:
        return progress(cp)
    return progress(cp, {r.name: r for r in registered(store)})


def _log(cp: Checkpoint) -> list[dict[str, Any]]:
    """:func:`workflow.team.approval_log` (every approval, with who and when, and whether it counted)."""
    from workflow.team import approval_log

    return approval_log(cp)
