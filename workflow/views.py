"""JSON shapes printed by the command line (contract in README). Never imports the SDK.

- a task: ``{"task_id", "idempotency_key", "status", "decision": null | {"decision", "by", "at",
  "reason"}, "pending": [{"call_id", "tool", "arguments"}], "final_output", "schema_version",
  "revision", "checkpoint_path"}``
- list: ``{"tasks": [task, …]}`` (built by ``workflow.inbox.inbox_view``) · ledger: ``{"path",
  "entries": [entry, …]}``
"""

from __future__ import annotations

from typing import Any

from state.schema import Checkpoint
from state.storage import Store
from tools.ledger import Ledger


def one_line(text: str) -> str:
    """``text`` safe to print on one terminal line: every character that is not printable
    (newline, carriage return, escape sequences, C1 controls, bidi and zero-width marks …) is shown
    escaped (``\n``, ``\x1b``, ``\u202e``), so model output or a reason cannot forge lines, move the
    cursor or reorder what a reviewer reads."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def task_view(store: Store, cp: Checkpoint) -> dict[str, Any]:
    """The task shape above for one checkpoint."""
    decision = None
    if cp.decision is not None:
        d = cp.decision
        kind = "approved_with_edits" if d.edits is not None else d.decision  # workflow/edits.py
        decision = {"decision": kind, "by": d.by, "at": d.at, "reason": d.reason}
    return {
        "task_id": cp.task_id,
        "idempotency_key": cp.idempotency_key,
        "status": cp.status,
        "decision": decision,
        "pending": [p.model_dump() for p in cp.pending],
        "final_output": cp.final_output,
        "schema_version": cp.schema_version,
        "revision": cp.revision,
        "checkpoint_path": str(store.checkpoint_path(cp.task_id)),
    }


def ledger_view(store: Store) -> dict[str, Any]:
    """``{"path": <ledger folder>, "entries": [...]}``, oldest first."""
    ledger = Ledger(store.ledger_dir)
    return {"path": str(ledger.folder), "entries": [e.model_dump() for e in ledger.entries()]}


def task_text(task: dict[str, Any]) -> str:
    """A few human-readable lines for one task (the non-``--json`` output)."""
    lines = [f"task {task['task_id']}: {task['status']} (revision {task['revision']})"]
    for p in task["pending"]:
        args = p["arguments"]
        body = str(args.get("body", ""))
        preview = body if len(body) <= 60 else body[:57] + "..."
        lines.append(
            f"  pending: {p['tool']}(title={args.get('title')!r}, body={preview!r})  "
            f"call_id={p['call_id']}"
        )
    if task["decision"]:
        d = task["decision"]
        why = f" reason={d['reason']!r}" if d["reason"] else ""
        lines.append(f"  decision: {d['decision']} by {d['by']} at {d['at']}{why}")
    if task["final_output"]:
        lines.append(f"  final output: {one_line(task['final_output'])}")
    lines.append(f"  checkpoint: {task['checkpoint_path']}")
    if task["status"] == "waiting_for_approval":
        lines.append(
            f"  next: python run.py resume --task {task['task_id']} --decision approve "
            "(or reject --reason \"...\")"
        )
    return "\n".join(lines)
