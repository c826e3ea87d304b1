"""Each decision step as an event in the trace: who decided which call, and under which rule.

The SDK traces runs, model calls and tool calls; it has no approval span (nor do LangGraph or
pydantic-ai), so no trace could answer "who approved this effect, and was it before the effect?".
:func:`record` adds one custom span per step, ``hitl.decision`` (an approval or a reject recorded,
and each call a sticky rule decided with it), ``hitl.approval`` (an approval counted toward a
quorum that is not reached yet) and ``hitl.settlement`` (a person's finding about a call in doubt),
each with ``{"task_id", "call_id", "channel", "by", …, "rule"}``, in the task's SDK trace (the
one its runs share: the SDK reattaches it from the saved RunState), between its runs. Our
local processor (:mod:`workflow.observe.tracing`) writes it to the task's trace file as a
``span`` record of that type. A command that needs no SDK (``settle --outcome not-published``)
writes the same record to the trace file itself, with no SDK span.

No reason text goes into the trace (``has_reason`` only): the signed checkpoint keeps it. A trace
is unsigned diagnostics: the decision itself is the checkpoint's, written before this, and
``run.py eval`` grades the trajectory from the checkpoint. Never raises: a trace that cannot be
written never stops a decision.
"""

from __future__ import annotations

import sys
from typing import Any, Literal

from state.store import TaskStore

Step = Literal["decision", "approval", "settlement"]


def record(store: TaskStore, cp: Any, step: Step, detail: dict[str, Any]) -> None:
    """Write one decision step of the task of checkpoint ``cp`` (``detail``: plain JSON values) to
    the trace: in the task's own SDK trace (the ``trace`` its saved RunState names, which the SDK
    reattaches on resume), else in a trace of its own grouped under the task."""
    task_id = cp.task_id
    data = {"task_id": task_id, **detail}
    try:
        if "agents" not in sys.modules:  # a command that needs no SDK (settle not-published): no SDK span
            _write_local(store, task_id, step, data)
            return
        from agents.tracing import custom_span, trace

        from state.fileio import parse_shared
        from workflow.observe import tracing

        saved = parse_shared(cp.run_state).get("trace") or {}  # read only: the parse this command shares
        same = {"trace_id": saved["id"]} if isinstance(saved.get("id"), str) else {}
        with tracing.routed(store, task_id), trace(f"{step} recorded", group_id=task_id, **same,
                                                    metadata={"task_id": task_id, "phase": step}):
            with custom_span(f"hitl.{step}", data=data):
                pass
    except Exception:  # diagnostics: the checkpoint already holds the decision
        return


def _write_local(store: TaskStore, task_id: str, step: Step, data: dict[str, Any]) -> None:
    """The record our processor would write for the span, written straight to the task's trace file
    (no SDK trace: none is loaded; ``trace_id`` null)."""
    from state.clock import now_iso
    from workflow.observe import trace_log

    now = now_iso()
    trace_log.append(trace_log.trace_path(store, task_id), {
        "kind": "span", "trace_id": None, "span_id": None, "parent_id": None, "started_at": now,
        "ended_at": now, "type": f"hitl.{step}", "name": None,
        "data": {"type": "custom", "name": f"hitl.{step}", "data": data}, "error": None})


def decision_detail(rec: Any, sticky: list[str], rule: str) -> dict[str, Any]:
    """The ``hitl.decision`` detail of decision ``rec`` (a :class:`state.schema.Decision`): who,
    which call, approved or rejected, with edits or not, the calls a sticky rule decided with it,
    and ``rule``, the rule of the call's channel (:meth:`state.schema.ApprovalRule.describe` of
    :func:`workflow.team.rule_of`)."""
    return {"call_id": rec.call_id, "channel": rec.channel, "tool": rec.tool, "decision": rec.decision,
            "by": rec.by, "at": rec.at, "source": rec.source, "always": rec.always,
            "edits": rec.edits is not None, "has_reason": bool(rec.reason), "sticky": sticky,
            "rule": rule}
