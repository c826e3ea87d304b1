"""Which model drives the agent. Default: an offline, deterministic model (no key, no network, no bill).

The offline model is the SDK's own test double, ``agents.testing.ScriptedModel``, with *responder*
steps: each step looks at the request it receives and answers like a careful model would:

- a request whose newest item is the user's draft → one ``publish_draft`` call carrying the title
  and body (call_id derived from the content, so it is the same in every process);
- a request whose newest item is the tool's output (or the human's rejection text) → one short
  final message quoting it.

It keeps no memory between calls, so a resume in a new process with a freshly built model behaves
exactly like a resume in the same process.
"""

from __future__ import annotations

import json
from typing import Any

from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

from state.schema import content_sha256

#: Enough scripted steps for the longest run one process makes (start or one resume).
_STEPS_PER_PROCESS = 16


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


def offline_responder(call: ModelCall) -> ModelStep:
    """Answer one model request deterministically (see module docstring)."""
    items = call.input if isinstance(call.input, list) else [{"role": "user", "content": call.input}]
    last = items[-1] if items else {}
    if _field(last, "type") == "function_call_output":
        output = _field(last, "output")
        text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
        return ModelStep(output=[assistant_message(f"publish_draft answered: {text}")])
    content = _field(last, "content")
    draft = parse_draft(content) if isinstance(content, str) else None
    if draft is None:
        return ModelStep(output=[assistant_message("I found no draft to publish.")])
    title, body = draft
    call_id = "call_" + content_sha256(title, body)[:16]
    return ModelStep(
        output=[function_call("publish_draft", {"title": title, "body": body}, call_id=call_id)]
    )


def build_offline_model() -> ScriptedModel:
    """A fresh offline model (``ScriptedModel`` with responder steps) for one process.

    ``emit_traces=True``: each model call gets a generation span (latency) in the local trace.
    """
    return ScriptedModel(
        [ModelStep.respond(offline_responder) for _ in range(_STEPS_PER_PROCESS)], emit_traces=True
    )
