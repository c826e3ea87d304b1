"""A triage agent hands off to the publisher; the approval the publisher asks for is saved, and the
run is resumed from the file with the *top-level* agent (the one ``Runner.run`` was given).

SDK: ``Agent(handoffs=[publisher])``; the interruption's ``agent`` is the publisher, and
``RunState.from_string(triage, text)`` restores the publisher as the current agent. Offline
(scripted models); the tool's effect is an entry in this project's ledger (``state/files/ledger.py``).

    python examples/triage_handoff.py [STATE_DIR]
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents import Agent, RunContextWrapper, Runner, RunState, function_tool, set_tracing_disabled
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

from state.schema import content_sha256
from state.files.ledger import Ledger

set_tracing_disabled(True)  # offline: no hosted trace export


@function_tool(needs_approval=True)
def publish_note(ctx: RunContextWrapper[dict], title: str) -> str:
    """Publish a note (its only effect: one ledger entry, at most once per key)."""
    _, created = Ledger(Path(ctx.context["ledger_dir"])).record(
        key="handoff-1", task_id="handoff-1", action="publish_note", title=title, content_sha256=content_sha256(title, ""))
    return "published" if created else "already published"


def publisher_turn(call: ModelCall) -> ModelStep:
    """Call the tool; after its output (not the handoff's), say so. No memory: a new process works."""
    last = call.input[-1] if isinstance(call.input, list) else {}
    if last.get("type") == "function_call_output" and last.get("call_id") == "c1":
        return ModelStep(output=[assistant_message(f"Publisher: {last['output']}.")])
    return ModelStep(output=[function_call("publish_note", {"title": "Release notes"}, call_id="c1")])


def build_triage() -> Agent:
    """The top-level agent, rebuilt from code in every process (only the RunState is saved)."""
    publisher = Agent(name="Publisher", instructions="Publish what you are handed.",
                      tools=[publish_note], model=ScriptedModel([ModelStep.respond(publisher_turn)] * 2))
    return Agent(name="Triage", instructions="Hand publishing requests to the publisher.",
                 handoffs=[publisher], model=ScriptedModel(
                     [ModelStep(output=[function_call("transfer_to_publisher", {}, call_id="h1")])]))


async def main(state_dir: Path) -> None:
    context = {"ledger_dir": str(state_dir / "ledger")}
    result = await Runner.run(build_triage(), "Please publish the release notes.", context=context)
    item = result.interruptions[0]
    print(f"paused after the handoff: {item.name} {item.arguments} asked by {item.agent.name}")
    state_dir.mkdir(parents=True, exist_ok=True)
    saved = state_dir / "run_state.json"
    saved.write_text(result.to_state().to_string(), encoding="utf-8")

    triage = build_triage()  # "another process": from code, with the top-level agent
    state = await RunState.from_string(triage, saved.read_text(encoding="utf-8"),
                                       context_override=context)
    item = state.get_interruptions()[0]
    print(f"loaded with {triage.name}; the pending call belongs to {item.agent.name}")
    state.approve(item)
    result = await Runner.run(triage, state)
    print(f"final output ({result.last_agent.name}): {result.final_output}")
    print(f"ledger entries: {len(Ledger(state_dir / 'ledger').entries())}")


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(".cache/handoff-example")))
