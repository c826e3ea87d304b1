"""A triage agent hands off to a publisher whose tool is gated by a human, on the library's public
API: the approval the publisher asks for is saved in a signed checkpoint, and ``decide`` resumes the
run from it with the *top-level* agent (the one the application builds).

SDK: ``Agent(handoffs=[publisher])``; the interruption's ``agent`` is the publisher, and
``RunState.from_string(triage, text)`` restores the publisher as the current agent (the engine's
``decide`` does it, with the checkpoint's signature, the compare-and-swap, the lock and the decision
table around it). Offline (one scripted model drives both agents); the tool's effect is the ledger
entry the gate records, once per idempotency key.

    python examples/triage_handoff.py [STATE_DIR]
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents import Agent
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

from workflow import Application, Approve, Effect, decide, effect_tool, open_store, read_task, start


@effect_tool(answer=lambda result, entry, created: "published" if created else "already published")
def publish_note(effect: Effect, title: str) -> None:
    """Publish a note (its only effect: the ledger entry the gate records, once per key)."""


def turn(call: ModelCall) -> ModelStep:
    """Both agents' turns: hand off, call the tool, then say what it answered. No memory: a new
    process works."""
    last = call.input[-1] if isinstance(call.input, list) else {}
    if last.get("type") == "function_call_output" and last.get("call_id") == "c1":
        return ModelStep(output=[assistant_message(f"Publisher: {last['output']}.")])
    if last.get("type") == "function_call_output":  # the handoff's output: the publisher's turn
        return ModelStep(output=[function_call("publish_note", {"title": "Release notes"}, call_id="c1")])
    return ModelStep(output=[function_call("transfer_to_publisher", {}, call_id="h1")])


def build_triage(model) -> Agent:
    """The top-level agent, rebuilt from code in every process (only the RunState is saved)."""
    publisher = Agent(name="Publisher", instructions="Publish what you are handed.",
                      tools=[publish_note], model=model)
    return Agent(name="Triage", instructions="Hand publishing requests to the publisher.",
                 handoffs=[publisher], model=model)


APP = Application(build_agent=build_triage,
                  offline_model=lambda: ScriptedModel([ModelStep.respond(turn) for _ in range(4)]))


async def main(state_dir: Path) -> None:
    store = open_store(state_dir)
    cp = await start(store, APP, task_id="handoff-1", title="Release notes",
                     content={"title": "Release notes"}, input="Please publish the release notes.",
                     channels=["notes"])
    for p in read_task(store, "handoff-1").pending:
        print(f"paused after the handoff: {p['tool']} {json.dumps(dict(p['arguments']))} ({cp.status})")
    cp = await decide(store, APP, "handoff-1", Approve(), by="alice")  # the top-level agent resumes
    print(f"{cp.status}: {cp.final_output}")
    print(f"ledger entries: {len(store.ledger_entries())}")


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(".cache/handoff-example")))
