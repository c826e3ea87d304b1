"""JSON shapes printed by the command line (contract in docs/commands.md). Never imports the SDK.

- a task: ``{"task_id", "idempotency_key", "status", "decision": null | {"decision", "by", "at",
  "reason"}, "decisions": [{"call_id", "tool", "channel", "decision", "by", "at", "reason",
  "always", "source"}], "channels": [...], "pending": [{"call_id", "tool", "arguments"}],
  "final_output", "schema_version", "revision", "checkpoint_path"}``. ``decision`` is the latest
  decision of the current round (a one-call task's only one); ``decisions`` lists every call's.
  Each ``decision`` is ``approved``, ``rejected`` or ``approved_with_edits`` (workflow/edits.py).
- list: ``{"tasks": [task, …]}`` (built by ``workflow.review.inbox.inbox_view``) · ledger: ``{"path",
  "entries": [entry, …]}``
"""

from __future__ import annotations

from typing import Any

from state.schema import Checkpoint
from state.files.store import Store
from state.terminal import command, one_line
from state.store import as_task_store

__all__ = ["one_line", "task_view", "ledger_view", "task_text", "resume_hint", "DECISION_FIELDS"]


def several_lines(text: str, indent: str) -> str:
    """``text`` over as many terminal lines as it has: each line escaped as by :func:`one_line`,
    each line after the first on a line of its own starting ``indent`` then ``| ``, so a line of
    model output or a reason can never pass for a line of ours."""
    return f"\n{indent}| ".join(one_line(line) for line in text.split("\n"))


def _auto(d: dict[str, Any], decisions: list[dict[str, Any]]) -> str | None:
    """``auto: complies with the edits by NAME`` when the program wrote decision ``d`` (one of a
    task's ``decisions``): the approval of the model's new call that carries exactly the draft NAME
    approved with edits earlier on that channel (its reason is :data:`workflow.edits.AUTO_REASON`,
    written by ``workflow.hitl.decide``), so it is not shown as a reason typed by a reviewer. None
    for any other decision."""
    from workflow.edits import AUTO_REASON

    if d["reason"] == AUTO_REASON and d["decision"] == "approved" and any(
            e["decision"] == "approved_with_edits" and e["channel"] == d["channel"]
            and e["by"] == d["by"] and e["call_id"] != d["call_id"] for e in decisions):
        return f"auto: complies with the edits by {d['by']}"
    return None


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
        if set(args) - {"channel"} != {"title", "body"}:  # not a draft: its own arguments
            shown = ", ".join(f"{one_line(str(k))[:40]}={str(v)[:60]!r}" for k, v in args.items())
            lines.append(f"  pending: {one_line(p['tool'])}({shown})  call_id={one_line(p['call_id'])}")
            continue
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
        auto = _auto(d, task["decisions"])
        lines.append(f"  call {one_line(d['call_id'])} on {one_line(str(d['channel']))}: {d['decision']} by "
                     f"{one_line(d['by'])} ({one_line(auto) if auto else d['source'] + rule})"
                     + (f" reason={d['reason']!r}" if d["reason"] and not auto else ""))
    if task["decision"] and not several:
        d = task["decision"]
        auto = next((_auto(e, task["decisions"]) for e in task.get("decisions", []) if e["at"] == d["at"]), None)
        why = f" ({one_line(auto)})" if auto else f" reason={d['reason']!r}" if d["reason"] else ""
        lines.append(f"  decision: {d['decision']} by {one_line(d['by'])} at {one_line(d['at'])}{why}")
    if task["final_output"]:
        lines.append(f"  final output: {several_lines(task['final_output'], '    ')}")
    lines.append(f"  checkpoint: {one_line(task['checkpoint_path'])}")
    if task["status"] == "waiting_for_approval":
        call = task["pending"][0]["call_id"] if len(task["pending"]) > 1 else None
        lines.append(f"  next: {resume_hint(task['task_id'], call)} (or reject --reason \"...\")")
    return "\n".join(lines)
