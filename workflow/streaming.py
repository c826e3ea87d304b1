"""Streamed runs: ``Runner.run_streamed``, its events handed on as they arrive, then the interruptions.

SDK (docs, "Human-in-the-loop" → streaming): a streamed run pauses for approval like a non-streamed
one. Drain ``result.stream_events()`` to the end, then read ``result.interruptions``; the result's
``to_state()`` is the same RunState ``Runner.run`` would leave, so a task started streamed is saved
exactly like one started without, and resumes either way.

:func:`runner` gives the story file (``workflow/hitl.py``) a drop-in for ``Runner.run``: same
arguments, same result shape (``interruptions``, ``final_output``, ``to_state()``), with each event
also handed to ``on_event`` as one plain dict (``{"event": <name>, ...}``):

- ``text_delta`` ``{"delta"}``: model text as it is generated;
- ``tool_call_requested`` ``{"tool", "call_id", "arguments"}``: the model asked for a tool;
- ``handoff`` ``{"from_agent", "to_agent"}``: one agent handed the conversation to another;
- ``tool_output`` ``{"call_id", "output"}``: a tool answered (or a rejection message stood in);
- ``approval_needed`` ``{"tool", "call_id", "arguments", "agent"}``: once the stream is drained, one
  per ``ToolApprovalItem`` in ``result.interruptions``;
- ``final_output`` ``{"output"}``: once the stream is drained, if the run finished.

No secret value is ever handed on: events are redacted like stored free text
(:func:`state.secrets.redact`, a value holding one becomes ``[redacted]`` whole), and text deltas are
held back by one secret's length so no part of one is emitted before it can be recognised.

Failures are the SDK's: ``stream_events()`` raises at its end what the run raised (the budget's
:class:`workflow.budget.BudgetExceeded`, a provider error), so the caller handles a streamed run's
failure exactly like ``Runner.run``'s. A cancelled stream (Ctrl-C) cancels the run
(``RunResultStreaming.cancel``) and re-raises: nothing is saved by this module.
"""

from __future__ import annotations

import json
from typing import Any, Awaitable, Callable

from agents import Runner
from agents.result import RunResultStreaming

from state import secrets

#: Receives one event (a JSON-ready dict with key ``"event"``) as soon as it is known.
OnEvent = Callable[[dict[str, Any]], None]


def _arguments(text: Any) -> Any:
    try:
        return json.loads(text or "{}")
    except (TypeError, ValueError):
        return text


def _field(raw: Any, name: str) -> Any:
    return raw.get(name) if isinstance(raw, dict) else getattr(raw, name, None)


class _Deltas:
    """Text deltas, held back by the longest secret's length minus one: a secret is recognised
    whole before any character of it is emitted; once one is seen the rest of the text is
    replaced by ``[redacted]``."""

    def __init__(self, emit: OnEvent) -> None:
        self.emit = emit
        self.secrets = [f for v in secrets.values(secrets.MIN_CHARS) for f in secrets.forms(v)]
        self.hold = max((len(s) for s in self.secrets), default=1) - 1
        self.buffer = ""
        self.redacted = False

    def add(self, delta: str) -> None:
        if self.redacted:
            return
        self.buffer += delta
        if any(s in self.buffer for s in self.secrets):
            self.buffer, self.redacted = "", True
            self.emit({"event": "text_delta", "delta": secrets.REDACTED})
            return
        cut = len(self.buffer) - self.hold
        if cut > 0:
            self.emit({"event": "text_delta", "delta": self.buffer[:cut]})
            self.buffer = self.buffer[cut:]

    def flush(self) -> None:
        if self.buffer:
            self.emit({"event": "text_delta", "delta": self.buffer})
        self.buffer, self.redacted = "", False


def describe(event: Any) -> dict[str, Any] | None:
    """One SDK stream event as our event dict (module docstring), or None for events not shown
    (raw protocol events other than text deltas, agent updates, reasoning)."""
    if event.type == "raw_response_event":
        data = event.data
        if getattr(data, "type", None) == "response.output_text.delta":
            return {"event": "text_delta", "delta": data.delta}
        return None
    if event.type != "run_item_stream_event":
        return None
    raw = getattr(event.item, "raw_item", None)
    if event.name == "tool_called":
        return {"event": "tool_call_requested", "tool": _field(raw, "name"),
                "call_id": _field(raw, "call_id"), "arguments": _arguments(_field(raw, "arguments"))}
    if event.name == "tool_output":
        return {"event": "tool_output", "call_id": _field(raw, "call_id"),
                "output": getattr(event.item, "output", None)}
    if event.name == "handoff_occured":  # sic: the SDK's spelling
        return {"event": "handoff", "from_agent": event.item.source_agent.name,
                "to_agent": event.item.target_agent.name}
    return None


def runner(on_event: OnEvent) -> Callable[..., Awaitable[RunResultStreaming]]:
    """A drop-in for ``Runner.run(agent, input_or_state, **kwargs)`` that runs
    ``Runner.run_streamed`` with the same arguments, hands each event to ``on_event`` as it
    arrives, drains the stream, then reports ``approval_needed`` per interruption or the
    ``final_output``; returns the (complete) ``RunResultStreaming``. Raises what the run raised."""

    def emit(event: dict[str, Any]) -> None:
        on_event(secrets.redact(event, lambda path: None, what="a stream event"))

    async def run(agent: Any, input: Any, **kwargs: Any) -> RunResultStreaming:
        result = Runner.run_streamed(agent, input, **kwargs)
        deltas = _Deltas(emit)
        async for event in result.stream_events():
            shown = describe(event)
            if shown is None:
                continue
            if shown["event"] == "text_delta":
                deltas.add(shown["delta"])
                continue
            deltas.flush()
            emit(shown)
        deltas.flush()
        for item in result.interruptions:
            emit({"event": "approval_needed", "tool": item.name, "call_id": item.call_id,
                  "arguments": _arguments(item.arguments), "agent": item.agent.name})
        if not result.interruptions:
            emit({"event": "final_output", "output": result.final_output})
        return result

    return run
