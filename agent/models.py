"""The publisher's offline model: deterministic, no key, no network, no bill (the model of a task
started without ``--model``; real models: :mod:`workflow.models`).

The offline model is the SDK's own test double, ``agents.testing.ScriptedModel``, with *responder*
steps: each step looks at the request it receives and answers like a careful model would:

- a request whose newest item is the user's draft → one call of the tool it names
  (``publish_draft``, unless the task's action is another, e.g. ``send_summary``) per channel the
  user named, all in this one model turn (parallel tool calls, as a real model makes them), each
  carrying the title, the body and its channel; a draft for a single channel gets one call naming
  no channel (the task's only one). The call_id is derived from the content (and the channel), so
  it is the same in every process;
- a request whose newest items are the tools' outputs (or the human's rejection texts) → one short
  final message quoting each (one line per call, naming its channel, when there are several); but
  where one of them answers a call approved with edits (``agent.publisher.edit_message``) → one
  call of the tool it names per such answer, carrying exactly the edited draft (and the channel it
  names).

It keeps no memory between calls, so a resume in a new process with a freshly built model behaves
exactly like a resume in the same process.
"""

from __future__ import annotations

import json
from typing import Any

from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

from agent.publisher import EDIT_HEADER
from state.schema import content_sha256

#: Enough scripted steps for the longest run one process makes (start or one resume).
#: One run of this agent makes 1 call (start) or 1–2 (a resume); 8 leaves room. Each step is
#: scripted when the model is asked (:class:`_OfflineModel`): ScriptedModel copies every step it
#: is given, and building the model is paid by every start and resume (benchmarks/roundtrip.py).
_STEPS_PER_PROCESS = 8


def _field(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, dict) else getattr(item, name, None)


def parse_draft(message: str) -> tuple[str, str] | None:
    """Parse ``agent.publisher.user_message`` back into ``(title, body)``; None if it is not one."""
    head, sep, body = message.partition("\nBody:\n")
    if not sep:
        return None
    lines = head.split("\n")
    if len(lines) != 2 or not lines[1].startswith("Title: "):
        return None
    return lines[1][len("Title: ") :], body


def parse_tool(message: str) -> str:
    """The tool named in the first line of ``agent.publisher.user_message`` ("… with <tool> to
    these channels"), default ``publish_draft``."""
    first = message.split("\n", 1)[0]
    _, sep, rest = first.partition(" with ")
    return _tool_or_default(rest if sep else "")


def _edited_tool(message: str) -> str:
    """The tool an answer to a call approved with edits (``agent.publisher.edit_message``) asks
    to be called again, default ``publish_draft``."""
    return _tool_or_default(message[len(EDIT_HEADER):])


def _tool_or_default(text: str) -> str:
    """The first word of ``text`` if it is a plain name (a tool's), else ``publish_draft``."""
    name = text.split(" ", 1)[0]
    return name if name.isidentifier() else "publish_draft"


def parse_channels(message: str) -> list[str]:
    """The channels named in the first line of ``agent.publisher.user_message`` (``[]``: none)."""
    first = message.split("\n", 1)[0]
    _, sep, names = first.partition(" to these channels: ")
    if not sep:  # an answer to a call approved with edits names its one channel
        _, sep, names = first.partition(" to this channel: ")
    return [n for n in names.rstrip(".").split(", ") if n] if sep else []


def offline_responder(call: ModelCall) -> ModelStep:
    """Answer one model request deterministically (see module docstring)."""
    items = call.input if isinstance(call.input, list) else [{"role": "user", "content": call.input}]
    last = items[-1] if items else {}
    if _field(last, "type") == "function_call_output":
        outputs = []
        for item in reversed(items):  # every tool output of the last turn, in call order
            if _field(item, "type") != "function_call_output":
                break
            output = _field(item, "output")
            outputs.append(output if isinstance(output, str) else json.dumps(output, ensure_ascii=False))
        outputs.reverse()
        edits = [(parse_draft(o), parse_channels(o), _edited_tool(o)) for o in outputs if o.startswith(EDIT_HEADER)]
        edits = [(draft, channels, tool) for draft, channels, tool in edits if draft is not None]
        if not edits:
            return ModelStep(output=[assistant_message(_answered(items, outputs))])
        # approvals with edits: call the tool it names with exactly each edited draft, on its channel
        return ModelStep(output=[_publish_call(*draft, (channels or [None])[0], tool)
                                 for draft, channels, tool in edits])
    content = _field(last, "content")
    draft = parse_draft(content) if isinstance(content, str) else None
    if draft is None:
        return ModelStep(output=[assistant_message("I found no draft to publish.")])
    title, body = draft
    channels, tool = parse_channels(content), parse_tool(content)
    if len(channels) <= 1:
        return ModelStep(output=[_publish_call(title, body, None, tool)])
    return ModelStep(output=[_publish_call(title, body, channel, tool) for channel in channels])


def _answered(items: list[Any], outputs: list[str]) -> str:
    """The closing message quoting ``outputs``, the tools' outputs that end ``items``:
    ``publish_draft answered: <output>`` for one call; for several, one line per call naming its
    channel (or its call_id), so a rejection and a publication never share a line."""
    if len(outputs) == 1:
        called = [_field(i, "name") for i in items if _field(i, "type") == "function_call"]
        return f"{called[-1] if called and called[-1] else 'publish_draft'} answered: {outputs[0]}"
    asked = {_field(i, "call_id"): _field(i, "arguments") for i in items if _field(i, "type") == "function_call"}

    def channel(call_id: Any) -> str:
        try:
            return str(json.loads(asked.get(call_id) or "{}").get("channel") or call_id)
        except (TypeError, ValueError, AttributeError):
            return str(call_id)

    ids = [_field(i, "call_id") for i in items[-len(outputs):]]
    return "publish_draft answered, one line per call:\n" + "\n".join(
        f"{channel(call_id)}: {text}" for call_id, text in zip(ids, outputs))


def _publish_call(title: str, body: str, channel: str | None, tool: str = "publish_draft") -> Any:
    """One call of ``tool`` (``publish_draft``, or the task's other action) carrying the draft:
    naming ``channel`` (call_id ``call_<sha[:16]>_<channel>``), or none (the task's only channel;
    call_id ``call_<sha[:16]>``)."""
    call_id = "call_" + content_sha256(title, body)[:16]
    if channel is None:
        return function_call(tool, {"title": title, "body": body}, call_id=call_id)
    return function_call(tool, {"title": title, "body": body, "channel": channel},
                         call_id=f"{call_id}_{channel}")


class _OfflineModel(ScriptedModel):
    """``ScriptedModel`` with :data:`_STEPS_PER_PROCESS` responder steps, each one enqueued when a
    call finds none left (as if all had been given at once: the same steps, in the same order,
    and the call after the last one is refused by ``ScriptedModel`` as unexpected)."""

    def __init__(self) -> None:
        super().__init__(emit_traces=True)
        self._scripted = 0

    def _next_step(self) -> None:
        if self.remaining_steps == 0 and self._scripted < _STEPS_PER_PROCESS:
            self.enqueue(ModelStep.respond(offline_responder))
            self._scripted += 1

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        self._next_step()
        return await super().get_response(*args, **kwargs)

    async def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        self._next_step()
        async for event in super().stream_response(*args, **kwargs):
            yield event


def build_offline_model() -> ScriptedModel:
    """A fresh offline model (``ScriptedModel`` with responder steps) for one process.

    ``emit_traces=True``: each model call gets a generation span (latency) in the local trace.
    """
    return _OfflineModel()
