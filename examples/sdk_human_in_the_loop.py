"""The SDK's human-in-the-loop example, on the library: the approval survives a process exit.

The Agents SDK's ``examples/agent_patterns/human_in_the_loop.py`` saves the RunState to a file,
reads it back in the same process and asks ``(y/n)``. Here the same agent runs until the approval,
the library saves a signed checkpoint, and the question may be answered by a later process: run
the script again and it asks again; the answer resumes the run. ``get_temperature`` is declared
with ``effect_tool``, so its call runs once, whatever is run twice. Differences from the SDK's
version: an offline scripted model (no key needed), the saved task in ``$HITL_STATE_DIR`` (default
``.cache``), and every ``get_temperature`` call waits for a human (the library's gate never lets
a per-call rule skip a human outside a private channel, so the SDK's Oakland-only rule is kept as
its answer, which is always yes for this request).

    python examples/sdk_human_in_the_loop.py      # answer y or n; Ctrl-D leaves the task saved
"""

import asyncio
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the project folder: state/, workflow/

from agents import Agent, function_tool
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from workflow import Application, Approve, Effect, Refused, Reject, decide, effect_tool, open_store, read_task, start

TASK = "weather-oakland"


@function_tool
async def get_weather(city: str) -> str:
    """Get the weather for a given city.

    Args:
        city: The city to get weather for.

    Returns:
        Weather information for the city.
    """
    return f"The weather in {city} is sunny"


async def _needs_temperature_approval(_ctx, params, _call_id) -> bool:
    """Check if temperature tool needs approval."""
    return "Oakland" in params.get("city", "")


@effect_tool(
    # Dynamic approval: only require approval for Oakland
    needs_approval=_needs_temperature_approval
)
async def get_temperature(effect: Effect, city: str) -> str:
    """Get the temperature for a given city.

    Args:
        city: The city to get temperature for.

    Returns:
        Temperature information for the city.
    """
    return f"The temperature in {city} is 20° Celsius"


def offline_answer(call):  # a scripted model: both tools in one turn, then the answer
    last = call.input[-1] if isinstance(call.input, list) else {"content": call.input}
    if last.get("type") == "function_call_output":
        said = [i["output"] for i in call.input if i.get("type") == "function_call_output"]
        return ModelStep(output=[assistant_message(" ".join(said))])
    return ModelStep(output=[function_call("get_weather", {"city": "Oakland"}, call_id="call_weather"),
                             function_call("get_temperature", {"city": "Oakland"}, call_id="call_temp")])


# Main agent with tool that requires approval
app = Application(
    build_agent=lambda model: Agent(
        name="Weather Assistant",
        instructions=(
            "You are a helpful weather assistant. "
            "Answer questions about weather and temperature using the available tools."
        ),
        tools=[get_weather, get_temperature],
        model=model,
    ),
    offline_model=lambda: ScriptedModel([ModelStep.respond(offline_answer) for _ in range(4)]),
)


async def confirm(question: str) -> bool | None:
    """Prompt user for yes/no confirmation.

    Args:
        question: The question to ask.

    Returns:
        True if user confirms, False otherwise; None at the end of input (the task stays saved).
    """
    loop = asyncio.get_event_loop()
    try:
        answer = await loop.run_in_executor(None, input, f"{question} (y/n): ")
    except EOFError:
        return None
    normalized = answer.strip().lower()
    return normalized in ("y", "yes")


async def main():
    """Run the human-in-the-loop example."""
    store = open_store(os.environ.get("HITL_STATE_DIR") or ".cache")
    if store.exists(TASK):  # a later process: the run waits in the saved checkpoint
        result = read_task(store, TASK)
        print(f"Task {TASK} loaded from the store")
    else:
        result = await start(
            store, app, task_id=TASK, title="Weather in Oakland",
            input="What is the weather and temperature in Oakland?", channels=["answer"],
        )

    has_interruptions = len(result.pending) > 0

    while has_interruptions:
        print("\n" + "=" * 80)
        print("Run interrupted - tool approval required")
        print("=" * 80)
        print(f"State saved as task {TASK} (signed checkpoint, revision {result.revision})")

        # From here on you could run things in a different process: run this script again

        # Process each interruption
        for interruption in result.pending:
            print("\nTool call details:")
            print("  Agent: Weather Assistant")
            print(f"  Tool: {interruption['tool']}")
            print(f"  Arguments: {json.dumps(interruption['arguments'])}")

            confirmed = await confirm("\nDo you approve this tool call?")
            if confirmed is None:
                print("\nNo answer: the task stays saved; run the script again to decide")
                return

            if confirmed:
                print(f"✓ Approved: {interruption['tool']}")
                choice = Approve()
            else:
                print(f"✗ Rejected: {interruption['tool']}")
                choice = Reject()

            # Resume execution with the decision (recorded first, then the run resumes)
            print("\nResuming agent execution...")
            result = await decide(store, app, TASK, choice, by="you", call_id=interruption["call_id"])
            break
        has_interruptions = len(result.pending) > 0

    print("\n" + "=" * 80)
    print("Final Output:")
    print("=" * 80)
    print(shown(result.final_output))


def shown(text: object) -> str:  # text from the model or a file: control characters escaped
    return "".join(c if c.isprintable() or c == "\n" else ascii(c)[1:-1] for c in str(text))


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except Refused as exc:
        sys.exit(print(f"STOPPED: {exc}", file=sys.stderr) or 1)
