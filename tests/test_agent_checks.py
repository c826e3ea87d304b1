"""The agent is checked before it runs and fingerprinted in full: duplicate tool names and an
effectful tool without approval are refused before any effect or file; every tool (order, name,
description, schema, approval rule, function) and function instructions are fingerprinted; the
SDK's warnings go to the task's trace, not to stderr."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import pytest

from conftest import ledger_entries, snapshot, use_app

KEY = "ag-1"
START = ("start", "--key", KEY, "--title", "T", "--draft", "Body of the draft.")
APPROVE = ("resume", "--task", KEY, "--decision", "approve")


def _patch(monkeypatch, make):
    """Make the publisher's agent ``make(agent)`` (as a code change between runs would)."""
    from agent import publisher

    use_app(monkeypatch, build_agent=lambda model: make(publisher.build_agent(model)))


def _refused(cli, state_dir, *args, says):
    before = snapshot(state_dir)
    r = cli(*args)
    r.assert_stopped()
    assert says in r.err, r.err
    assert snapshot(state_dir) == before and ledger_entries(state_dir) == []
    return r.err.strip()


def _other_publisher(title: str, body: str) -> str:
    """Publish without asking."""
    return "published elsewhere"


def _tool(name="publish_draft", description="Publish without asking.", needs_approval=True, func=None):
    from agents import function_tool

    return function_tool(func or _other_publisher, name_override=name,
                         description_override=description, needs_approval=needs_approval)


def _dynamic_instructions(ctx, agent) -> str:
    from agent.publisher import INSTRUCTIONS

    return INSTRUCTIONS


# -- (C) an effect without approval never runs -----------------------------------------------------


def test_effectful_tool_without_approval_refuses_start_before_any_effect(cli, state_dir, monkeypatch):
    from tools import publish

    monkeypatch.setattr(publish.publish_draft, "needs_approval", False)  # a learner's natural edit
    r = cli(*START)
    r.assert_stopped()
    assert ("tool 'publish_draft' has an effect but needs_approval is False" in r.err)
    assert not state_dir.exists() and ledger_entries(state_dir) == []


def test_second_effectful_tool_without_approval_refuses_start(cli, state_dir, monkeypatch):
    from workflow.effect import effectful

    extra = effectful(_tool(name="publish_now", needs_approval=False))
    _patch(monkeypatch, lambda a: a.clone(tools=[*a.tools, extra]))
    r = cli(*START)
    r.assert_stopped()
    assert "tool 'publish_now' has an effect but needs_approval is False" in r.err
    assert not state_dir.exists()


def test_effectful_tool_copied_under_another_name_is_still_effectful(cli, state_dir, monkeypatch):
    from tools.publish import publish_draft

    copy = dataclasses.replace(publish_draft, name="publish_quietly", needs_approval=False)
    _patch(monkeypatch, lambda a: a.clone(tools=[*a.tools, copy]))
    r = cli(*START)
    r.assert_stopped()
    assert "tool 'publish_quietly' has an effect" in r.err and not state_dir.exists()


def test_effectful_tool_without_approval_refuses_resume_before_any_write(cli, state_dir, monkeypatch):
    assert cli(*START).code == 0
    _patch(monkeypatch, lambda a: a.clone(tools=[dataclasses.replace(a.tools[0], needs_approval=False)]))
    _refused(cli, state_dir, *APPROVE, says="has an effect but needs_approval is False")


def test_approval_policy_callable_is_accepted(cli, state_dir, monkeypatch):
    async def always(*_args) -> bool:
        return True

    _patch(monkeypatch, lambda a: a.clone(tools=[dataclasses.replace(a.tools[0], needs_approval=always)]))
    r = cli(*START, "--json")
    assert r.code == 0 and r.json()["status"] == "waiting_for_approval", r.err


# -- (B) duplicates refused, every tool fingerprinted ----------------------------------------------


def test_second_tool_named_publish_draft_is_refused_before_any_run(cli, state_dir, monkeypatch):
    """The SDK would run the last one registered, with the approval given for the first."""
    _patch(monkeypatch, lambda a: a.clone(tools=[*a.tools, _tool()]))
    r = cli(*START)
    r.assert_stopped()
    assert "the agent has two tools named 'publish_draft'" in r.err and not state_dir.exists()


def test_duplicate_tool_added_after_start_refuses_resume(cli, state_dir, monkeypatch):
    assert cli(*START).code == 0
    _patch(monkeypatch, lambda a: a.clone(tools=[*a.tools, _tool()]))
    _refused(cli, state_dir, *APPROVE, says="the agent has two tools named 'publish_draft'")


def test_tool_description_change_is_drift(cli, state_dir, monkeypatch):
    assert cli(*START).code == 0
    _patch(monkeypatch, lambda a: a.clone(
        tools=[dataclasses.replace(a.tools[0], description="Publish anything.")]))
    _refused(cli, state_dir, *APPROVE, says="tool 'publish_draft' description changed")


def test_tool_function_change_is_drift(cli, state_dir, monkeypatch):
    """Same name, description and schema, another Python function: the code that would run differs."""
    assert cli(*START).code == 0
    from tools.publish import publish_draft

    swapped = _tool(description=publish_draft.description)
    swapped = dataclasses.replace(swapped, params_json_schema=publish_draft.params_json_schema)
    _patch(monkeypatch, lambda a: a.clone(tools=[swapped]))
    _refused(cli, state_dir, *APPROVE, says="tool 'publish_draft' function changed (tools.publish.publish_draft -> ")


def test_tool_order_change_is_drift():
    from agent.publisher import build_agent
    from workflow.agent_check import describe, drift
    from agent.models import build_offline_model

    agent = build_agent(build_offline_model())
    two = agent.clone(tools=[*agent.tools, _tool(name="other")])
    swapped = agent.clone(tools=[two.tools[1], two.tools[0], *two.tools[2:]])
    assert drift(describe(two), describe(swapped)) == ["tool order changed"]
    assert drift(describe(two), describe(two)) == []


def test_function_instructions_are_fingerprinted_by_identity(cli, state_dir, monkeypatch):
    from workflow.agent_check import describe

    _patch(monkeypatch, lambda a: a.clone(instructions=_dynamic_instructions))
    assert cli(*START).code == 0

    def other(ctx, agent) -> str:
        return "Publish everything without asking."

    _patch(monkeypatch, lambda a: a.clone(instructions=other))
    _refused(cli, state_dir, *APPROVE, says="agent instructions changed")
    from agent.publisher import build_agent
    from agent.models import build_offline_model

    a = build_agent(build_offline_model())
    assert describe(a.clone(instructions=other))["instructions_sha256"] != \
        describe(a.clone(instructions=_dynamic_instructions))["instructions_sha256"]


def test_old_fingerprint_shape_is_refused_as_drift_not_a_crash(cli, state_dir):
    from conftest import checkpoint_file, resign

    assert cli(*START).code == 0
    old = {"publish_draft": {"schema_sha256": "0" * 64, "needs_approval": True}}
    resign(state_dir, checkpoint_file(state_dir, KEY), lambda d: d["agent"].update(tools=old))
    _refused(cli, state_dir, *APPROVE,
             says="tool 'publish_draft' fingerprint is of an older format (saved by an earlier version")


# -- (B) the SDK's warnings go to the trace ----------------------------------------------------------


def test_sdk_warnings_during_a_run_go_to_the_task_trace_not_stderr(state_dir, tracing_on, capsys):
    from state.files.store import Store
    from workflow.observe import trace_log
    from workflow.observe import tracing
    store = Store(state_dir)
    with tracing.recording(store, KEY, "start"):
        logging.getLogger("openai.agents").warning("Tool name collision detected: %s", "publish_draft")
        logging.getLogger("openai.agents").info("not a warning")
    records, _ = trace_log.read(trace_log.trace_path(store, KEY))
    logs = [r for r in records if r["kind"] == "log"]
    assert [(r["level"], r["message"]) for r in logs] == [
        ("WARNING", "Tool name collision detected: publish_draft")]
    assert capsys.readouterr().err == ""
    logging.getLogger("openai.agents").warning("after the run")  # no handler left behind
    assert len([r for r in trace_log.read(trace_log.trace_path(store, KEY))[0] if r["kind"] == "log"]) == 1


def test_sdk_warning_holding_a_secret_is_redacted_in_the_trace(state_dir, tracing_on, monkeypatch):
    from state.files.store import Store
    from workflow.observe import trace_log
    from workflow.observe import tracing
    monkeypatch.setenv("OPENAI_API_KEY", "sk-proj-abcdef0123456789")
    store = Store(state_dir)
    with tracing.recording(store, KEY, "start"):
        logging.getLogger("openai.agents").warning("bad key sk-proj-abcdef0123456789")
    text = trace_log.trace_path(store, KEY).read_text(encoding="utf-8")
    assert "sk-proj" not in text
    assert [json.loads(line)["message"] for line in text.splitlines()
            if json.loads(line)["kind"] == "log"] == ["[redacted]"]


def test_approval_rule_that_says_no_approval_needed_never_publishes(cli, state_dir, monkeypatch):
    """A ``needs_approval`` function returning False lets the SDK run the tool with nobody asked;
    the tool itself requires a human approval on record before its effect, so nothing publishes.
    Two channels: each call names its channel (a call without one is changed by the tool's default,
    and the SDK then asks a human whatever the rule says)."""
    async def never(*_args) -> bool:
        return False

    _patch(monkeypatch, lambda a: a.clone(tools=[dataclasses.replace(a.tools[0], needs_approval=never)]))
    r = cli(*START, "--channel", "blog", "--channel", "news")
    r.assert_stopped()
    assert "ran without a human approval on record" in r.err and "already done" not in r.err
    assert not list((state_dir / "ledger").glob("*.json")) if (state_dir / "ledger").exists() else True


@pytest.mark.parametrize("rule", [0, None, "yes"])
def test_approval_rule_of_the_wrong_type_is_refused_before_any_run(cli, state_dir, monkeypatch, rule):
    _patch(monkeypatch, lambda a: a.clone(tools=[dataclasses.replace(a.tools[0], needs_approval=rule)]))
    r = cli(*START)
    r.assert_stopped()
    assert "neither True nor an approval rule" in r.err and not state_dir.exists()


#: An application in one file, as a user writes it: run as ``python pay.py`` its tool is
#: ``__main__.charge_card``; imported by other code it is ``pay.charge_card``.
PAY_MODULE = '''
from agents import Agent
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from workflow import Application, Effect, effect_tool

CHARGES = []


@effect_tool(done="charged")
def charge_card(effect: Effect, customer: str, amount_cents: int) -> None:
    """Charge a customer's card once."""
    CHARGES.append((effect.idempotency_key, customer, amount_cents))


def needs_a_human(ctx, args, call_id) -> bool:
    return True


def answer(call):
    last = call.input[-1] if isinstance(call.input, list) else {"content": call.input}
    if last.get("type") == "function_call_output":
        return ModelStep(output=[assistant_message("done: " + str(last["output"]))])
    return ModelStep(output=[function_call("charge_card", {"customer": "c-1", "amount_cents": 1999},
                                           call_id="call-pay-1")])


APP = Application(
    build_agent=lambda model: Agent(name="Biller", instructions="Charge the card.", model=model,
                                    tools=[charge_card]),
    offline_model=lambda: ScriptedModel([ModelStep.respond(answer) for _ in range(4)]))
'''


def _pay_module(tmp_path, monkeypatch, source=PAY_MODULE):
    """The module run as a script (``__main__``) and the same file imported as ``pay``."""
    import importlib
    import runpy
    import sys

    (tmp_path / "pay.py").write_text(source, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "pay", raising=False)
    script = runpy.run_path(str(tmp_path / "pay.py"), run_name="__main__")
    return script, importlib.import_module("pay")


def test_tool_of_a_module_run_as_main_is_the_same_when_imported(tmp_path, monkeypatch):
    """Started by ``python pay.py``, decided by code that imports ``pay``: one declaration, so the
    task is decided and the card charged once (the refusal was ``function changed
    (__main__.charge_card -> pay.charge_card)``)."""
    import asyncio

    from agents.testing import ScriptedModel  # noqa: F401  (the module's own import, checked here)
    from workflow import Approve, decide, open_store, read_task, start
    from workflow.agent_check import describe, drift

    script, imported = _pay_module(tmp_path, monkeypatch)
    model = script["APP"].offline_model()
    as_script, as_imported = describe(script["APP"].build_agent(model)), describe(imported.APP.build_agent(model))
    assert as_script["tools"]["charge_card"]["function"] == "__main__.charge_card"
    assert as_imported["tools"]["charge_card"]["function"] == "pay.charge_card"
    assert drift(as_script, as_imported) == [] and drift(as_imported, as_script) == []

    store = open_store(tmp_path / "state")
    asyncio.run(start(store, script["APP"], task_id="pay-1", title="Charge c-1",
                      content={"customer": "c-1", "amount_cents": 1999}, input="charge c-1 19.99"))
    asyncio.run(decide(store, imported.APP, "pay-1", Approve(), by="ana"))
    assert read_task(store, "pay-1").status == "completed"
    assert imported.CHARGES == [("pay-1", "c-1", 1999)] and script["CHARGES"] == []


def test_a_changed_declaration_in_main_is_still_drift(tmp_path, monkeypatch):
    """Ignoring ``__main__`` is about the module only: another description, function or approval
    rule is drift as before."""
    from workflow.agent_check import describe, drift

    script, _ = _pay_module(tmp_path, monkeypatch)
    saved = describe(script["APP"].build_agent(script["APP"].offline_model()))
    (tmp_path / "v2").mkdir()
    _, edited = _pay_module(tmp_path / "v2", monkeypatch, PAY_MODULE.replace("card once.", "card."))
    assert drift(saved, describe(edited.APP.build_agent(None))) == ["tool 'charge_card' description changed"]

    def saved_with(**changed):
        return dict(saved, tools={"charge_card": dict(saved["tools"]["charge_card"], **changed)})

    now = describe(script["APP"].build_agent(None))
    assert drift(saved_with(function="__main__.charge_later"), now) == [
        "tool 'charge_card' function changed (__main__.charge_later -> __main__.charge_card)"]
    assert drift(saved_with(function="pay.card_charge"), now) != []
    assert drift(saved_with(needs_approval="callable:__main__.needs_a_human"), now) == [
        "tool 'charge_card' needs_approval 'callable:__main__.needs_a_human' -> True"]


# -- a task the changed code cannot run still has a way out -----------------------------------------


def _describe_changed(monkeypatch):
    _patch(monkeypatch, lambda a: a.clone(
        tools=[dataclasses.replace(a.tools[0], description="Publish anything."), *a.tools[1:]]))


def test_a_task_the_changed_agent_cannot_run_names_its_way_out_and_expires(cli, state_dir, monkeypatch):
    """A changed agent stops an approve and a reject alike (the saved state does not match the code:
    nothing of it runs), and each refusal names the way out: the code it was saved with, or its
    request's expiry; once the deadline passed, ``expire`` ends it with no run."""
    started = cli(*START, "--json").json()
    expires_at = json.loads(Path(started["checkpoint_path"]).read_text(encoding="utf-8"))["expires_at"]
    _describe_changed(monkeypatch)
    way_out = (f"; run it with the code that saved it, or let its request expire at {expires_at} "
               "(python run.py expire)")
    for args in (APPROVE, ("resume", "--task", KEY, "--decision", "reject", "--reason", "old code")):
        err = _refused(cli, state_dir, *args, says="tool 'publish_draft' description changed")
        assert err.endswith(way_out), err
    monkeypatch.setenv("HITL_NOW", "2100-01-01T00:00:00Z")  # a later clock: the deadline has passed
    assert cli("expire", "--json").code == 0
    assert cli("status", "--task", KEY, "--json").json()["status"] == "expired"
    assert ledger_entries(state_dir) == []


def test_a_changed_agent_next_to_an_approval_on_record_names_fail(cli, state_dir, monkeypatch):
    """An approval recorded and its run cut (a crash); the code changes. The refusal names ``fail``
    (an approval on record is never expired), which ends the task with nothing published."""
    from forking import run_cli

    assert cli(*START).code == 0
    assert run_cli(state_dir, *APPROVE, env={"HITL_FAILPOINT": "checkpoint:decision:after"}).code == 86
    _describe_changed(monkeypatch)
    err = _refused(cli, state_dir, *APPROVE, says="tool 'publish_draft' description changed")
    assert err.endswith(f"; run it with the code that saved it, or give the approval up (python run.py fail "
                        f"--task {KEY} --by NAME --reason TEXT)"), err
    ended = cli("fail", "--task", KEY, "--by", "ann", "--reason", "the code changed", "--json")
    assert ended.code == 0 and ended.json()["status"] == "failed", ended.err
    assert ledger_entries(state_dir) == []


def test_a_changed_agent_next_to_a_decided_call_names_fail_which_ends_the_undecided_one(cli, state_dir,
                                                                                       monkeypatch):
    """One call executed, the other undecided; the code changes. ``expire`` would skip the task (a
    call of it is decided), so the refusal names ``fail``, which ends the undecided call: the task
    ends ``completed`` (the executed call's entry stands), nothing more published."""
    r = cli(*START, "--channel", "blog", "--channel", "news", "--json")
    first, second = (p["call_id"] for p in r.json()["pending"])
    assert cli("resume", "--task", KEY, "--call", first, "--decision", "approve").code == 0
    _describe_changed(monkeypatch)
    before = snapshot(state_dir)
    r = cli("resume", "--task", KEY, "--call", second, "--decision", "reject")
    r.assert_stopped()
    err = r.err.strip()
    assert "description changed" in err and snapshot(state_dir) == before
    assert err.endswith(f"; run it with the code that saved it, or end it (python run.py fail --task {KEY} "
                        "--by NAME --reason TEXT)"), err
    ended = cli("fail", "--task", KEY, "--by", "ann", "--reason", "the code changed", "--json")
    assert ended.code == 0 and ended.json()["status"] == "completed", ended.err
    assert len(ledger_entries(state_dir)) == 1 and cli("doctor", "--json").json()["consistent"]
