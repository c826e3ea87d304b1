"""JSON shapes printed by the command line (contract in docs/commands.md). Never imports the SDK.

- a task: ``{"task_id", "idempotency_key", "status", "decision": null | {"decision", "by", "at",
  "reason"}, "decisions": [{"call_id", "tool", "channel", "decision", "by", "at", "reason",
  "always", "source"}], "channels": [...], "pending": [{"call_id", "tool", "arguments"}],
  "final_output", "schema_version", "revision", "checkpoint_path"}``. ``decision`` is the latest
  decision of the current round (a one-call task's only one); ``decisions`` lists every call's.
  Each ``decision`` is ``approved``, ``rejected`` or ``approved_with_edits`` (workflow/edits.py).
- list: ``{"tasks": [task, …]}`` (built by ``workflow.inbox.inbox_view``) · ledger: ``{"path",
  "entries": [entry, …]}``
"""

from __future__ import annotations

from typing import Any

from state.schema import Checkpoint
from state.storage import Store
from state.terminal import command, one_line
from workflow.store import as_task_store

__all__ = ["one_line", "task_view", "ledger_view", "task_text", "resume_hint", "DECISION_FIELDS"]


#: The fields of each entry of a task's ``decisions`` (``source``: ``human`` or ``sticky``).
DECISION_FIELDS = ("call_id", "tool", "channel", "decision", "by", "at", "reason", "always", "source")


def _kind(d: Any) -> str:
    """A decision's kind as shown: ``approved``, ``rejected`` or ``approved_with_edits``
    (an approval with edits, :mod:`workflow.edits`)."""
    return "approved_with_edits" if d.edits is not None else d.decision


def task_view(store: Store, cp: Checkpoint) -> dict[str, Any]:
    """The task shape above for one checkpoint."""
    decision = None
    if cp.decision is not None:
        d = cp.decision
        decision = {"decision": _kind(d), "by": d.by, "at": d.at, "reason": d.reason}
    return {
        "task_id": cp.task_id,
        "idempotency_key": cp.idempotency_key,
        "status": cp.status,
        "decision": decision,
        "decisions": [{**{k: getattr(d, k) for k in DECISION_FIELDS}, "decision": _kind(d)}
                      for d in cp.decisions],
        "channels": list(cp.channels),
        "pending": [p.model_dump() for p in cp.pending],
        "final_output": cp.final_output,
        "schema_version": cp.schema_version,
        "revision": cp.revision,
        "checkpoint_path": str(store.checkpoint_path(cp.task_id)),
    }


def ledger_view(store: Store) -> dict[str, Any]:
    """``{"path": <ledger folder, or the database's ledger>, "entries": [...]}``, oldest first."""
    entries = as_task_store(store).ledger_entries()
    return {"path": str(store.ledger_dir), "entries": [e.model_dump() for e in entries]}


def resume_hint(task_id: str, call_id: str | None = None, decision: str = "approve") -> str:
    """The ``resume`` command a person pastes to decide ``task_id`` (``--call`` when given), every
    argument shell-quoted (:func:`state.terminal.command`)."""
    call = ["--call", call_id] if call_id is not None else []
    return command("resume", "--task", task_id, *call, "--decision", decision)


def task_text(task: dict[str, Any]) -> str:
    """A few human-readable lines for one task (the non-``--json`` output). Every value from the
    model or the file is escaped onto its line (:func:`state.terminal.one_line`; titles, bodies and
    reasons as Python literals, ``repr``, which escapes them too), the ``next:`` command quoted."""
    lines = [f"task {one_line(task['task_id'])}: {one_line(task['status'])} (revision {task['revision']})"]
    for p in task["pending"]:
        args = p["arguments"]
        body = str(args.get("body", ""))
        preview = body if len(body) <= 60 else body[:57] + "..."
        on = f", channel={args['channel']!r}" if args.get("channel") is not None else ""
        lines.append(
            f"  pending: {one_line(p['tool'])}(title={args.get('title')!r}, body={preview!r}{on})  "
            f"call_id={one_line(p['call_id'])}"
        )
    several = len(task.get("channels", [])) > 1
    for d in task.get("decisions", []) if several else []:
        rule = " (always)" if d["always"] else ""
        lines.append(f"  call {one_line(d['call_id'])} on {one_line(str(d['channel']))}: {d['decision']} by "
                     f"{one_line(d['by'])} ({d['source']}{rule})" + (f" reason={d['reason']!r}" if d["reason"] else ""))
    if task["decision"] and not several:
        d = task["decision"]
        why = f" reason={d['reason']!r}" if d["reason"] else ""
        lines.append(f"  decision: {d['decision']} by {one_line(d['by'])} at {one_line(d['at'])}{why}")
    if task["final_output"]:
        lines.append(f"  final output: {one_line(task['final_output'])}")
    lines.append(f"  checkpoint: {one_line(task['checkpoint_path'])}")
    if task["status"] == "waiting_for_approval":
        call = task["pending"][0]["call_id"] if len(task["pending"]) > 1 else None
        lines.append(f"  next: {resume_hint(task['task_id'], call)} (or reject --reason \"...\")")
    return "\n".join(lines)
