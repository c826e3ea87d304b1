"""Several tools with an effect in one application: each task names the one it gates at start
(``action=`` in the API, ``start --action`` on the command line), keeps its own ledger entries
under that action, and never runs a call of the other."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from agents import Agent
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from conftest import ledger_entries, snapshot
from state.files.store import Store
from workflow import Application, Approve, Effect, Refused, Reject, decide, effect_tool, read_task, start

DONE: list[tuple[str, str]] = []


def _effect(name: str, doc: str) -> Any:
    """A tool with an effect named ``name``: it records (name, idempotency key) in ``DONE``."""
    def run(effect: Effect, text: str) -> str:
        DONE.append((name, effect.idempotency_key))
        return "done"
    run.__name__ = run.__qualname__ = name
    run.__doc__ = f"{doc}\n\nArgs:\n    text: The text, exactly as given."
    return effect_tool(run)


publish_note = _effect("publish_note", "Publish the note.")
send_summary = _effect("send_summary", "Send the reviewed summary.")


def _respond(call: Any) -> ModelStep:
    """Calls the tool the user message names first (``<tool>: <text>``); a rejected call is told,
    and the model, asked again by the next message, calls the other tool (never run)."""
    items = call.input if isinstance(call.input, list) else [{"role": "user", "content": call.input}]
    last = items[-1]
    if isinstance(last, dict) and last.get("type") == "function_call_output":
        return ModelStep(output=[assistant_message(f"answered: {last['output']}")])
    tool, _, text = items[0]["content"].partition(": ")
    return ModelStep(output=[function_call(tool, {"text": text}, call_id=f"call-{tool}")])


APP = Application(build_agent=lambda model: Agent(name="Summaries", instructions="Do what you are asked.",
                                                   tools=[publish_note, send_summary], model=model),
                  offline_model=lambda: ScriptedModel([ModelStep.respond(_respond) for _ in range(4)]))


@pytest.fixture(autouse=True)
def _fresh():
    DONE.clear()


def _start(store: Store, key: str, action: str | None, asked: str) -> Any:
    return asyncio.run(start(store, APP, task_id=key, title="Summary", content={"text": "v1.2 is out"},
                             input=f"{asked}: v1.2 is out", channels=["team"],
                             **({"action": action} if action else {})))


def test_reject_leaves_the_ledger_unchanged_then_approve_under_a_new_key_adds_one_entry_of_that_action(state_dir):
    """The exercise's check for a changed action: send_summary rejected, nothing recorded; approved
    under a new key, exactly one more entry, named send_summary."""
    store = Store(state_dir)
    task = _start(store, "sum-1", "send_summary", "send_summary")
    assert task.status == "waiting_for_approval" and task.pending[0]["tool"] == "send_summary"
    done = asyncio.run(decide(store, APP, "sum-1", Reject(message="not yet"), by="ana"))
    assert done.status == "cancelled" and ledger_entries(state_dir) == [] and DONE == []
    _start(store, "sum-2", "send_summary", "send_summary")
    done = asyncio.run(decide(store, APP, "sum-2", Approve(), by="ana"))
    assert done.status == "completed" and DONE == [("send_summary", "sum-2")]
    assert [(e["idempotency_key"], e["action"]) for e in ledger_entries(state_dir)] == [("sum-2", "send_summary")]


def test_each_task_keeps_its_own_action_and_the_first_tool_is_the_default(state_dir):
    store = Store(state_dir)
    _start(store, "n-1", None, "publish_note")  # no action named: the application's first tool
    _start(store, "s-1", "send_summary", "send_summary")
    for key in ("n-1", "s-1"):
        asyncio.run(decide(store, APP, key, Approve(), by="ana"))
    assert sorted((e["idempotency_key"], e["action"]) for e in ledger_entries(state_dir)) == [
        ("n-1", "publish_note"), ("s-1", "send_summary")]
    assert read_task(store, "s-1").to_json()["status"] == "completed"


def test_a_call_of_the_other_tool_is_refused_at_start_with_nothing_saved(state_dir):
    store = Store(state_dir)
    with pytest.raises(Refused, match="asked for tool 'publish_note', not send_summary"):
        _start(store, "x-1", "send_summary", "publish_note")
    assert not store.exists("x-1") and DONE == []


def test_the_command_line_starts_a_task_with_its_action(cli, state_dir):
    """``start --action NAME``: each of the publisher's two actions by name; another name is refused,
    nothing saved."""
    for key, action in (("a-1", "publish_draft"), ("a-2", "send_summary")):
        r = cli("start", "--key", key, "--title", "T", "--draft", "D.", "--action", action, "--json")
        assert r.code == 0 and json.loads(r.out)["pending"][0]["tool"] == action, r.err
    before = snapshot(state_dir)
    r = cli("start", "--key", "a-3", "--title", "T", "--draft", "D.", "--action", "send_mail")
    r.assert_stopped()
    assert "a tool named 'send_mail' declared with an effect (found: 'publish_draft', 'send_summary')" in r.err
    assert snapshot(state_dir) == before
    r = cli("start", "--key", "a-4", "--title", "T", "--draft", "D.", "--action", " ")  # never the default
    assert r.code == 2 and "argument --action: must not be empty" in r.err and snapshot(state_dir) == before


def test_a_tool_without_a_channel_argument_is_refused_a_task_for_several_channels(cli, state_dir, tmp_path):
    """``send_summary`` takes no ``channel``: a task for two channels could never route its calls
    (each would be refused at the gate, after its approval), so ``start`` refuses it, nothing on
    disk; one channel is fine, and so is ``publish_draft`` for two."""
    r = cli("start", "--key", "c-1", "--title", "T", "--draft", "D.", "--action", "send_summary",
            "--channel", "blog", "--channel", "news")
    r.assert_stopped()
    assert "tool 'send_summary' takes no channel argument, so a task for several channels (blog, news)" in r.err
    assert not state_dir.exists() or snapshot(state_dir) == {}
    r = cli("start", "--key", "c-2", "--title", "T", "--draft", "D.", "--channel", "blog", "--channel", "news",
            "--json")
    assert r.code == 0 and len(json.loads(r.out)["pending"]) == 2, r.err


def test_send_summary_approved_with_edits_sends_the_edited_summary_once(cli, state_dir):
    """An edit of a ``send_summary`` call: the model is told to call ``send_summary`` again (not
    ``publish_draft``, which this task would never run), with exactly the edited text; one entry,
    ``send_summary``'s, carrying the edit (its hash and its title); the same decision again adds
    nothing."""
    from agent.publisher import edit_message

    assert edit_message("T", "B", None, "send_summary").startswith(
        "The reviewer approved this call only with edits, so it was not run: call send_summary once more")
    assert cli("start", "--key", "e-1", "--title", "T", "--draft", "D.", "--action", "send_summary").code == 0
    for _ in range(2):
        r = cli("resume", "--task", "e-1", "--decision", "approve", "--edit-title", "New T", "--edit-body", "Better.",
                "--json")
        task = json.loads(r.out)
        assert r.code == 0 and task["status"] == "completed", r.err
        assert '"result": "sent"' in task["final_output"] and "send_summary answered" in task["final_output"]
    entries = ledger_entries(state_dir)
    assert [(e["idempotency_key"], e["action"]) for e in entries] == [("e-1", "send_summary")]
    from state.schema import content_sha256
    assert entries[0]["content_sha256"] == content_sha256("New T", "Better.")
    assert entries[0]["title"] == "New T"  # the entry's label is the title as approved, not as asked


def test_the_ledger_line_names_an_action_that_is_not_the_default(cli):
    """``run.py ledger``: a ``send_summary`` entry names its action after the key; a
    ``publish_draft`` entry (the default) prints as it always has."""
    for key, action in (("l-1", "publish_draft"), ("l-2", "send_summary")):
        assert cli("start", "--key", key, "--title", "T", "--draft", "D.", "--action", action).code == 0
        assert cli("resume", "--task", key, "--decision", "approve").code == 0
    lines = cli("ledger").out.splitlines()[1:]
    assert lines[0].split("  ")[2:5] == ["l-1", "blog", "'T'"]
    assert lines[1].split("  ")[2:6] == ["l-2", "send_summary", "blog", "'T'"]


def test_a_task_whose_action_is_none_of_the_agents_effect_tools_is_refused(cli, state_dir):
    """A checkpoint (re-signed) whose action names no tool of today's agent: resume stops, naming
    both the task's action and every tool with an effect the agent has; nothing changed."""
    from conftest import checkpoint_file, resign

    assert cli("start", "--key", "n-1", "--title", "T", "--draft", "D.").code == 0
    resign(state_dir, checkpoint_file(state_dir, "n-1"), lambda d: d.update(action="send_mail"))
    before = snapshot(state_dir)
    r = cli("resume", "--task", "n-1", "--decision", "approve")
    r.assert_stopped()
    assert ("task n-1: its action is send_mail, which is not one of the agent's tools with an effect "
            "(publish_draft, send_summary)") in r.err, r.err
    assert snapshot(state_dir) == before
