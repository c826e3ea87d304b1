"""The publisher as a tool of another agent (``Agent.as_tool``) with a gated tool of its own, on the
library's public API: the nested call's approval surfaces on the *outer* run (the nested
``ToolApprovalItem``'s ``agent`` is the Publisher), is saved in a signed checkpoint and decided
with ``decide``. The engine gates one action, the effect tool wherever it sits (here inside the
agent tool, which itself needs no approval: running the Publisher changes nothing by itself).
The nested run's state is saved inside the outer RunState, where the SDK would run a call
approved by hand-editing the file; the checkpoint's signature refuses such a file (and, behind
it, the engine's check for approvals no human gave, ``workflow.trust.hidden_approvals``).
Offline (one scripted model drives both agents).

    python examples/agent_as_tool.py [STATE_DIR]
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents import Agent
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

from workflow import Application, Approve, Effect, Refused, decide, effect_tool, open_store, read_task, start


@effect_tool(answer=lambda result, entry, created: "published" if created else "already published")
def publish_note(effect: Effect, title: str) -> None:
    """Publish a note (its only effect: the ledger entry the gate records, once per key)."""


def turn(call: ModelCall) -> ModelStep:
    """Both agents' turns, from what each is sent (no memory: a new process works)."""
    last = call.input[-1] if isinstance(call.input, list) else {"role": "user", "content": call.input}
    if last.get("type") == "function_call_output":
        done = "Editor: done." if last.get("call_id") == "outer-1" else "note published"
        return ModelStep(output=[assistant_message(done)])
    if last.get("content") == "publish Notes":  # the nested run: the Publisher's turn
        return ModelStep(output=[function_call("publish_note", {"title": "Notes"}, call_id="inner-1")])
    return ModelStep(output=[function_call("publisher", {"input": "publish Notes"}, call_id="outer-1")])


def build_editor(model) -> Agent:
    """The outer agent; its tool ``publisher`` is the Publisher agent, whose own tool is gated."""
    publisher = Agent(name="Publisher", instructions="Publish what you are asked to.",
                      tools=[publish_note], model=model)
    return Agent(name="Editor", instructions="Use the publisher.", model=model, tools=[
        publisher.as_tool(tool_name="publisher", tool_description="Publishes notes.")])


APP = Application(build_agent=build_editor,
                  offline_model=lambda: ScriptedModel([ModelStep.respond(turn) for _ in range(6)]))


async def forged_approval_is_refused(store, path: Path) -> None:
    """Type an approval into the nested run's part of the saved file, as a hand edit would, then
    decide: refused; then put the file back as it was saved."""
    saved = path.read_text(encoding="utf-8")
    forged, run_state = json.loads(saved), json.loads(json.loads(saved)["run_state"])
    nested = run_state["last_processed_response"]["functions"][0]["agent_run_state"]["context"]
    nested["function_tool_approvals"] = [{"agent": {"name": "Publisher"}, "tool_key": "publish_note",
                                          "decision": {"approved": ["inner-1"], "rejected": []}}]
    forged["run_state"] = json.dumps(run_state)
    path.write_text(json.dumps(forged), encoding="utf-8")
    try:
        await decide(store, APP, "nested-1", Approve(), by="alice")
    except Refused as exc:
        print(f"refused: {str(exc).split(' for ')[0]}")
    path.write_text(saved, encoding="utf-8")


async def main(state_dir: Path) -> None:
    store = open_store(state_dir)
    await start(store, APP, task_id="nested-1", title="Notes", content={"title": "Notes"},
                input="Publish the notes.", channels=["notes"])
    task = read_task(store, "nested-1")
    for p in task.pending:
        print(f"outer run paused: {p['tool']} (call {p['call_id']})")
    if task.pending:
        await forged_approval_is_refused(store, Path(task.to_json()["checkpoint_path"]))
    done = await decide(store, APP, "nested-1", Approve(), by="alice")
    print(f"final output: {done.final_output} ({done.status}, ledger entries: "
          f"{len(store.ledger_entries())})")


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(".cache/agent-tool-example")))
