"""The SDK alone, offline: pause -> save -> load -> approve -> resume (no code of this project).

Follows the SDK's human-in-the-loop docs; the model is the SDK's own scripted test double.
Run: python examples/sdk_only.py
"""

import asyncio
import sys
from pathlib import Path

from agents import Agent, Runner, RunState, function_tool, set_tracing_disabled
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

set_tracing_disabled(True)  # offline: no trace export


@function_tool(needs_approval=True)
def publish_draft(title: str) -> str:
    """Publish a draft. Pauses the run until a human approves the call."""
    print(f"[tool] publishing {title!r}")
    return f"published {title!r}"


model = ScriptedModel([  # what a real model would answer: first a tool call, then a sentence
    ModelStep(output=[function_call("publish_draft", {"title": "Release notes"}, call_id="c1")]),
    ModelStep(output=[assistant_message("Done: the release notes are published.")]),
])
agent = Agent(name="Publisher", instructions="Publish drafts.", tools=[publish_draft], model=model)


async def main(path: Path) -> None:
    result = await Runner.run(agent, "Publish the release notes.")
    for item in result.interruptions:  # the run paused before the tool ran
        print(f"paused: {item.name} {item.arguments} needs approval")
    path.write_text(result.to_state().to_string(), encoding="utf-8")  # save
    print(f"saved the run state to {path.name}")

    state = await RunState.from_string(agent, path.read_text(encoding="utf-8"))  # load
    for item in state.get_interruptions():
        state.approve(item)  # a human said yes
    result = await Runner.run(agent, state)  # resume: now the tool runs
    print(f"final output: {result.final_output}")


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("run_state.json")))
