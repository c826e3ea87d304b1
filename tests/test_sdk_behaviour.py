"""The SDK behaviours this project relies on (openai-agents 0.24.x), each pinned by a named test.

If an SDK upgrade changes one of them, the test that names it fails before users are surprised.
"""

from __future__ import annotations

import asyncio
import json

from agents import Agent, RunContextWrapper, Runner, RunState, function_tool, set_tracing_disabled
from agents.testing import ModelStep, ScriptedModel

from agent.models import offline_responder

set_tracing_disabled(True)  # offline: no hosted trace export, no warning
CALLS: list[str] = []


@function_tool(needs_approval=True)
def probe_tool(ctx: RunContextWrapper[dict], title: str, body: str) -> str:
    """Record that the tool body ran."""
    CALLS.append(ctx.context.get("who", "?"))
    return "ran"


def _ask(title="T", body="B"):
    return f"Publish this draft with publish_draft.\nTitle: {title}\nBody:\n{body}"


def _paused():
    """Run to the interruption (the offline model calls 'publish_draft'; rename for the probe)."""
    from agents.testing import function_call

    model = ScriptedModel([ModelStep(output=[function_call("probe_tool", {"title": "T", "body": "B"}, call_id="c1")])]
                          + [ModelStep.respond(offline_responder) for _ in range(4)])
    agent = Agent(name="Probe", instructions="x", tools=[probe_tool], model=model)
    result = asyncio.run(Runner.run(agent, _ask(), context={"who": "start"}))
    return agent, result


def test_sdk_needs_approval_interrupts_before_the_tool_runs():
    CALLS.clear()
    _, result = _paused()
    assert CALLS == []
    assert [(i.name, i.call_id) for i in result.interruptions] == [("probe_tool", "c1")]
    assert type(result.interruptions[0]).__name__ == "ToolApprovalItem"


def test_sdk_from_string_rebuilds_interruptions_and_context_override_wins():
    CALLS.clear()
    agent, result = _paused()
    text = result.to_state().to_string()
    state = asyncio.run(RunState.from_string(agent, text, context_override={"who": "override"}))
    items = state.get_interruptions()
    assert [(i.name, i.call_id, json.loads(i.arguments)) for i in items] == [
        ("probe_tool", "c1", {"title": "T", "body": "B"})]
    state.approve(items[0])
    asyncio.run(Runner.run(agent, state))
    assert CALLS == ["override"]


def test_sdk_resuming_the_same_saved_state_twice_runs_the_tool_twice():
    """The trap the ledger exists for: the SDK itself does not make a tool run at most once."""
    CALLS.clear()
    agent, result = _paused()
    text = result.to_state().to_string()
    for _ in range(2):
        state = asyncio.run(RunState.from_string(agent, text))
        state.approve(state.get_interruptions()[0])
        asyncio.run(Runner.run(agent, state))
    assert CALLS == ["start", "start"]


def test_sdk_runs_a_call_approved_inside_a_hand_edited_file():
    """The trap check_stored_run_state exists for: approvals are read from the file, unauthenticated."""
    CALLS.clear()
    agent, result = _paused()
    data = json.loads(result.to_state().to_string())
    data["context"]["function_tool_approvals"] = [
        {"agent": {"name": "Probe"}, "tool_key": "probe_tool", "decision": {"approved": ["c1"], "rejected": []}}
    ]
    state = asyncio.run(RunState.from_string(agent, json.dumps(data)))
    asyncio.run(Runner.run(agent, state))  # no approve() call by anyone
    assert CALLS == ["start"]


def test_sdk_reject_sends_rejection_message_verbatim():
    CALLS.clear()
    agent, result = _paused()
    state = result.to_state()
    state.reject(state.get_interruptions()[0], rejection_message="exact words")
    final = asyncio.run(Runner.run(agent, state))
    assert CALLS == [] and final.final_output == "probe_tool answered: exact words"  # the tool it called


def test_sdk_approvals_survive_to_string_after_completion():
    """After a completed approve, the serialized state still lists the approved call_id
    (why check_stored_run_state allows call_ids our decision path recorded)."""
    agent, result = _paused()
    state = result.to_state()
    state.approve(state.get_interruptions()[0])
    done = asyncio.run(Runner.run(agent, state))
    ctx = json.loads(done.to_state().to_string())["context"]
    assert ctx["function_tool_approvals"][0]["decision"]["approved"] == ["c1"]


# -- streaming, handoffs, agents as tools, serialisation options ------------------------------------

def _probe_model():
    from agents.testing import function_call

    return ScriptedModel([ModelStep(output=[function_call("probe_tool", {"title": "T", "body": "B"}, call_id="c1")])]
                         + [ModelStep.respond(offline_responder) for _ in range(4)])


def test_sdk_streamed_run_lists_interruptions_once_the_stream_is_drained():
    """workflow/streaming.py: drain ``stream_events()``, then read ``interruptions``; no stream
    event announces the approval itself (hence our ``approval_needed`` event after the drain)."""
    CALLS.clear()
    agent = Agent(name="Probe", instructions="x", tools=[probe_tool], model=_probe_model())

    async def go():
        result = Runner.run_streamed(agent, _ask(), context={"who": "stream"})
        names = [getattr(e, "name", e.type) async for e in result.stream_events()]
        return result, names

    result, names = asyncio.run(go())
    assert "tool_called" in names and not any("approval" in n for n in names)
    assert [(i.name, i.call_id) for i in result.interruptions] == [("probe_tool", "c1")] and CALLS == []


def test_sdk_streamed_pause_saves_the_same_state_as_a_plain_one():
    async def both():
        plain = await Runner.run(Agent(name="Probe", instructions="x", tools=[probe_tool],
                                       model=_probe_model()), _ask(), context={"who": "x"})
        streamed = Runner.run_streamed(Agent(name="Probe", instructions="x", tools=[probe_tool],
                                             model=_probe_model()), _ask(), context={"who": "x"})
        async for _ in streamed.stream_events():
            pass
        return plain.to_state().to_json(), streamed.to_state().to_json()

    plain, streamed = asyncio.run(both())
    plain["trace"], streamed["trace"] = None, None
    assert plain == streamed


def _triage():
    from agents.testing import function_call

    publisher = Agent(name="Publisher", instructions="x", tools=[probe_tool], model=_probe_model())
    return Agent(name="Triage", instructions="x", handoffs=[publisher], model=ScriptedModel(
        [ModelStep(output=[function_call("transfer_to_publisher", {}, call_id="h1")])]))


def test_sdk_approval_after_a_handoff_is_resumed_from_the_top_level_agent():
    CALLS.clear()
    result = asyncio.run(Runner.run(_triage(), _ask(), context={"who": "handoff"}))
    assert [(i.name, i.agent.name) for i in result.interruptions] == [("probe_tool", "Publisher")]
    triage = _triage()
    state = asyncio.run(RunState.from_string(triage, result.to_state().to_string()))
    state.approve(state.get_interruptions()[0])
    done = asyncio.run(Runner.run(triage, state))
    assert CALLS == ["handoff"] and done.last_agent.name == "Publisher"


def _editor():
    from agents.testing import assistant_message, function_call

    inner = Agent(name="Publisher", instructions="x", tools=[probe_tool], model=_probe_model())
    return Agent(name="Editor", instructions="x", model=ScriptedModel([
        ModelStep(output=[function_call("publisher", {"input": _ask()}, call_id="o1")]),
        ModelStep(output=[assistant_message("outer done")])]),
        tools=[inner.as_tool(tool_name="publisher", tool_description="x", needs_approval=True)])


def _nested_pause():
    editor = _editor()
    first = asyncio.run(Runner.run(editor, "go", context={"who": "nested"}))
    state = first.to_state()
    state.approve(first.interruptions[0])
    return editor, first, asyncio.run(Runner.run(editor, state))


def test_sdk_agent_as_tool_approvals_surface_on_the_outer_run():
    CALLS.clear()
    editor, first, second = _nested_pause()
    assert [(i.name, i.agent.name) for i in first.interruptions] == [("publisher", "Editor")]
    assert [(i.name, i.agent.name) for i in second.interruptions] == [("probe_tool", "Publisher")]
    state = second.to_state()
    state.approve(second.interruptions[0])
    assert asyncio.run(Runner.run(editor, state)).final_output == "outer done" and CALLS == ["nested"]


def test_sdk_runs_a_nested_call_approved_inside_a_hand_edited_file():
    """The trap workflow.trust.hidden_approvals exists for: the nested run's approvals are read
    from the file too, unauthenticated."""
    from workflow.trust import hidden_approvals

    CALLS.clear()
    editor, _, second = _nested_pause()
    data = second.to_state().to_json()
    assert hidden_approvals(data) == []
    nested = data["last_processed_response"]["functions"][0]["agent_run_state"]["context"]
    nested["function_tool_approvals"] = [{"agent": {"name": "Publisher"}, "tool_key": "probe_tool",
                                          "decision": {"approved": ["c1"], "rejected": []}}]
    assert hidden_approvals(data) == [
        "$.last_processed_response.functions[0].agent_run_state.context.function_tool_approvals"]
    state = asyncio.run(RunState.from_json(editor, data))
    asyncio.run(Runner.run(editor, state))  # nobody called approve()
    assert CALLS == ["nested"]


def test_sdk_to_json_is_to_string_parsed_and_from_json_restores_it():
    agent, result = _paused()
    state = result.to_state()
    assert json.loads(state.to_string()) == state.to_json()
    again = asyncio.run(RunState.from_json(agent, state.to_json(), strict_context=True))
    assert [i.call_id for i in again.get_interruptions()] == ["c1"]


def test_sdk_strict_context_refuses_a_context_that_is_not_a_mapping():
    """Why hitl's run context is a plain dict: with strict_context the SDK refuses anything else
    instead of saving a lossy copy."""
    from dataclasses import dataclass

    import pytest
    from agents.exceptions import UserError

    @dataclass
    class Ctx:
        who: str

    agent = Agent(name="Probe", instructions="x", tools=[probe_tool], model=_probe_model())
    result = asyncio.run(Runner.run(agent, _ask(), context=Ctx("dc")))
    with pytest.raises(UserError, match="mapping"):
        result.to_state().to_string(strict_context=True)
    assert json.loads(result.to_state().to_string())["context"]["context"] == {"who": "dc"}


def test_sdk_rejection_message_wins_over_tool_error_formatter():
    """The model reads a rejection_message verbatim (our reject reason, and the edited draft of an
    approval with edits: workflow/edits.py) even when ``RunConfig.tool_error_formatter`` is set; the
    formatter only words a reject given without one."""
    from agents import RunConfig

    config = RunConfig(tool_error_formatter=lambda args: f"formatted {args.kind}")
    for message, expected in (("exact words", "exact words"), (None, "formatted approval_rejected")):
        agent, result = _paused()
        state = result.to_state()
        state.reject(state.get_interruptions()[0], rejection_message=message)
        final = asyncio.run(Runner.run(agent, state, run_config=config))
        assert final.final_output == f"probe_tool answered: {expected}"


# -- several calls in one turn (workflow/calls.py relies on these) ---------------------------------

@function_tool(needs_approval=True)
def probe_channel(ctx: RunContextWrapper[dict], title: str, channel: str) -> str:
    """Record which channel ran."""
    CALLS.append(channel)
    return f"ran {channel}"


def _three_pending(steps_after: int = 4):
    from agents.testing import assistant_message, function_call

    seen: list[int] = []

    def closing(call):
        seen.append(1)
        return ModelStep(output=[assistant_message("done")])

    model = ScriptedModel(
        [ModelStep(output=[function_call("probe_channel", {"title": "T", "channel": c}, call_id=f"c_{c}")
                           for c in ("a", "b", "c")])]
        + [ModelStep.respond(closing) for _ in range(steps_after)])
    agent = Agent(name="Probe", instructions="x", tools=[probe_channel], model=model)
    result = asyncio.run(Runner.run(agent, "go", context={}))
    return agent, result, seen


def test_sdk_partial_decisions_run_decided_calls_and_pause_on_the_rest():
    CALLS.clear()
    agent, result, model_calls = _three_pending()
    assert [i.call_id for i in result.interruptions] == ["c_a", "c_b", "c_c"]
    state = asyncio.run(RunState.from_string(agent, result.to_state().to_string()))
    items = {i.call_id: i for i in state.get_interruptions()}
    state.approve(items["c_a"])
    state.reject(items["c_b"])
    again = asyncio.run(Runner.run(agent, state))
    assert CALLS == ["a"] and [i.call_id for i in again.interruptions] == ["c_c"]
    assert model_calls == []  # not asked while a call of the turn has no answer
    state = asyncio.run(RunState.from_string(agent, again.to_state().to_string()))
    state.approve(state.get_interruptions()[0])
    done = asyncio.run(Runner.run(agent, state))
    assert CALLS == ["a", "c"] and done.final_output == "done" and model_calls == [1]


def test_sdk_a_per_call_reject_after_always_approve_wins():
    """And the other order does not: a sticky approve given after a per-call reject overrides it
    (one more reason workflow.calls gives the SDK one decision per call, never a sticky rule)."""
    for order, expected in ((("sticky", "reject"), ["a", "b"]), (("reject", "sticky"), ["a", "b", "c"])):
        CALLS.clear()
        agent, result, _ = _three_pending()
        state = result.to_state()
        items = {i.call_id: i for i in state.get_interruptions()}
        for step in order:
            if step == "sticky":
                state.approve(items["c_a"], always_approve=True)
            else:
                state.reject(items["c_c"])
        asyncio.run(Runner.run(agent, state))
        assert CALLS == expected, order


def test_sdk_always_approve_runs_a_later_call_of_the_tool_without_a_pause():
    """A sticky approval stays in the RunState (``approved: True``) and runs the model's call of
    the same tool in the next turn without an interruption; a per-call approval does not: the new
    call pauses. Why ``workflow.calls.to_apply`` never gives ``always_approve``."""
    from agents.testing import assistant_message, function_call

    for always, expected_calls, paused in ((True, ["start", "start"], []), (False, ["start"], ["c2"])):
        CALLS.clear()
        model = ScriptedModel([ModelStep(output=[function_call("probe_tool", {"title": "T", "body": "B"}, call_id=c)])
                               for c in ("c1", "c2")] + [ModelStep(output=[assistant_message("done")])])
        agent = Agent(name="Probe", instructions="x", tools=[probe_tool], model=model)
        result = asyncio.run(Runner.run(agent, _ask(), context={"who": "start"}))
        state = result.to_state()
        state.approve(state.get_interruptions()[0], always_approve=always)
        if always:
            saved = json.loads(state.to_string())["context"]["function_tool_approvals"]
            assert [e["decision"]["approved"] for e in saved] == [True]
        again = asyncio.run(Runner.run(agent, state))
        assert CALLS == expected_calls and [i.call_id for i in again.interruptions] == paused, always


def test_sdk_asks_for_approval_when_arguments_are_malformed_whatever_the_rule_says():
    from agents.testing import function_call

    asked: list[object] = []

    def never(_ctx, params, _call_id):
        asked.append(params)
        return False

    tool = function_tool(lambda title, channel: "ran", name_override="probe_rule", needs_approval=never)
    model = ScriptedModel([ModelStep(output=[function_call("probe_rule", "{not json", call_id="c1")])]
                          + [ModelStep.respond(offline_responder) for _ in range(2)])
    agent = Agent(name="Probe", instructions="x", tools=[tool], model=model)
    result = asyncio.run(Runner.run(agent, "go"))
    assert [i.call_id for i in result.interruptions] == ["c1"] and asked == []


def test_sdk_per_call_rejection_message_beats_tool_error_formatter():
    from agents import RunConfig

    CALLS.clear()
    agent, result, _ = _three_pending()
    state = result.to_state()
    items = {i.call_id: i for i in state.get_interruptions()}
    state.reject(items["c_a"], rejection_message="per-call words")
    state.reject(items["c_b"])
    state.reject(items["c_c"])
    done = asyncio.run(Runner.run(agent, state, run_config=RunConfig(
        tool_error_formatter=lambda a: f"formatted {a.call_id}" if a.kind == "approval_rejected" else None)))
    outputs = [i.raw_item["output"] for i in done.new_items if i.type == "tool_call_output_item"]
    assert outputs == ["per-call words", "formatted c_b", "formatted c_c"]
