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
from workflow.store import as_task_store


def one_line(text: str) -> str:
    """``text`` safe to print on one terminal line: every character that is not printable
    (newline, carriage return, escape sequences, C1 controls, bidi and zero-width marks …) is shown
    escaped (``\n``, ``\x1b``, ``\u202e``), so model output or a reason cannot forge lines, move the
    cursor or reorder what a reviewer reads."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


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


def task_text(task: dict[str, Any]) -> str:
    """A few human-readable lines for one task (the non-``--json`` output)."""
    lines = [f"task {task['task_id']}: {task['status']} (revision {task['revision']})"]
    for p in task["pending"]:
        args = p["arguments"]
        body = str(args.get("body", ""))
        preview = body if len(body) <= 60 else body[:57] + "..."
        on = f", channel={args['channel']!r}" if args.get("channel") is not None else ""
        lines.append(
            f"  pending: {p['tool']}(title={args.get('title')!r}, body={preview!r}{on})  "
            f"call_id={p['call_id']}"
        )
    several = len(task.get("channels", [])) > 1
    for d in task.get("decisions", []) if several else []:
        rule = " (always)" if d["always"] else ""
        lines.append(f"  call {d['call_id']} on {d['channel']}: {d['decision']} by {d['by']} "
                     f"({d['source']}{rule})" + (f" reason={d['reason']!r}" if d["reason"] else ""))
    if task["decision"] and not several:
        d = task["decision"]
        why = f" reason={d['reason']!r}" if d["reason"] else ""
        lines.append(f"  decision: {d['decision']} by {d['by']} at {d['at']}{why}")
    if task["final_output"]:
        lines.append(f"  final output: {one_line(task['final_output'])}")
    lines.append(f"  checkpoint: {task['checkpoint_path']}")
    if task["status"] == "waiting_for_approval":
        call = f" --call {task['pending'][0]['call_id']}" if len(task["pending"]) > 1 else ""
        lines.append(
            f"  next: python run.py resume --task {task['task_id']}{call} --decision approve "
            "(or reject --reason \"...\")"
        )
    return "\n".join(lines)
