"""The RunState's serialisation options side by side: ``to_string``/``from_string`` (what this
project saves), ``to_json``/``from_json`` (the same data as a dict, for a JSON column),
``strict_context=True`` (refuse a context that would not survive the round trip) and
``context_override`` (the context comes from the caller, never from the file). Offline.

    python examples/serialization.py
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents import Agent, RunContextWrapper, Runner, RunState, function_tool, set_tracing_disabled
from agents.exceptions import UserError
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

set_tracing_disabled(True)  # offline: no hosted trace export


@function_tool(needs_approval=True)
def publish_note(ctx: RunContextWrapper[dict], title: str) -> str:
    """Publish a note for the task in the run context."""
    return f"published {title!r} for {ctx.context['task_id']}"


@dataclass
class Task:
    """A context that is not a mapping: ``to_string()`` would keep only ``asdict`` of it."""

    task_id: str


def build() -> Agent:
    return Agent(name="Publisher", instructions="Publish.", tools=[publish_note], model=ScriptedModel([
        ModelStep(output=[function_call("publish_note", {"title": "Notes"}, call_id="c1")]),
        ModelStep(output=[assistant_message("done")])]))


async def main() -> None:
    agent = build()
    paused = (await Runner.run(agent, "Publish the notes.", context={"task_id": "t-1"})).to_state()
    text, data = paused.to_string(strict_context=True), paused.to_json(strict_context=True)
    print(f"to_string() parsed == to_json(): {json.loads(text) == data}")

    try:
        strict = await Runner.run(build(), "Publish.", context=Task("t-2"))
        strict.to_state().to_string(strict_context=True)
    except UserError as exc:
        print(f"strict_context=True refused a dataclass context: {str(exc).split(' when ')[0]}")

    state = await RunState.from_json(agent, data, context_override={"task_id": "t-1 (ours)"},
                                     strict_context=True)
    again = await RunState.from_string(agent, text, strict_context=True)
    same = [i.call_id for i in state.get_interruptions()] == [i.call_id for i in again.get_interruptions()]
    print(f"from_json and from_string restore the same interruption: {same}")
    state.approve(state.get_interruptions()[0])
    result = await Runner.run(agent, state)
    outputs = [i.output for i in result.new_items if i.type == "tool_call_output_item"]
    print(f"tool output: {outputs[0]}")  # the task_id of context_override, not of the file


if __name__ == "__main__":
    asyncio.run(main())
