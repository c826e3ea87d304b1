"""The effect gate (``workflow.effect.effect_tool``) on a tool of its own, called as the SDK calls it.

The publisher's ``publish_draft`` is declared through the same gate; tests/test_second_defences.py
holds the checks it shares with any tool (content, approval on record, rejection record). Here:
what is new for *any* tool — the ``Effect`` parameter hidden from the model, one run of the
function per idempotency key with repeats answered by the first result, ledger entries with and
without a result, an asynchronous function — and that declaring the publisher's tool through the
gate left its fingerprint (what a saved checkpoint is compared with) as it was.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from conftest import ledger_entries, plant_record

KEY, TITLE, DRAFT, AT = "eg-1", "Title", "Body.", "2030-01-01T00:00:00+00:00"
RUNS: list[Any] = []


def _deliver() -> Any:
    """A tool of another application: its function counts its runs (a real effect, outside us)."""
    from workflow import Effect, effect_tool

    @effect_tool(done="delivered")
    def deliver(effect: Effect, title: str, body: str) -> dict:
        """Deliver a note.

        Args:
            title: Its title.
            body: Its text.
        """
        RUNS.append(effect)
        return {"delivered": len(RUNS), "key": effect.idempotency_key}

    return deliver


@pytest.fixture
def task(cli, state_dir):
    """A waiting task whose content is ``{"title", "body"}`` (started by the publisher's command
    line; its one pending call is what the tests approve): ``(store, checkpoint, call_id)``."""
    from state.store import FileStore

    RUNS.clear()
    r = cli("start", "--key", KEY, "--title", TITLE, "--draft", DRAFT, "--json")
    assert r.code == 0, r.err
    store = FileStore(state_dir)
    cp = store.load(KEY)
    return store, cp, cp.pending[0].call_id


def _approve(store: Any, cp: Any, call_id: str, decision: str = "approved") -> Any:
    from state.schema import Decision

    d = Decision(decision=decision, by="alice", at=AT, reason=None, call_id=call_id, tool="deliver",
                 arguments_sha256="0" * 64, channel=cp.channels[0], always=False, source="human")
    return store.save_revision(cp, failpoint="checkpoint:decision", decisions=[*cp.decisions, d],
                               event=("decision_recorded", {}))


def _invoke(tool: Any, store: Any, cp: Any, call_id: str, **arguments: Any) -> Any:
    """Call ``tool`` as the SDK does for an approved call, with the run context the engine builds."""
    from agents.tool_context import ToolContext

    from state import open_stores

    context = {"task_id": cp.task_id, "idempotency_key": cp.task_id, "content_sha256": cp.content_sha256,
               "channels": list(cp.channels), "store": open_stores.token_for(store)}
    args = json.dumps({"title": TITLE, "body": DRAFT, **arguments})
    ctx = ToolContext(context=context, tool_name=tool.name, tool_call_id=call_id, tool_arguments=args)
    return asyncio.run(tool.on_invoke_tool(ctx, args))


def test_the_effect_parameter_is_hidden_from_the_model_and_the_docstring_describes_the_tool():
    tool = _deliver()
    assert tool.name == "deliver" and tool.description == "Deliver a note."
    assert sorted(tool.params_json_schema["properties"]) == ["body", "title"]
    assert tool.needs_approval is True
    from workflow.effect import is_effectful

    assert is_effectful(tool)


def test_the_function_runs_once_per_key_and_a_repeat_answers_with_the_first_result(task, state_dir):
    store, cp, call_id = task
    tool = _deliver()
    cp = _approve(store, cp, call_id)
    first = json.loads(_invoke(tool, store, cp, call_id))
    assert first == {"delivered": 1, "key": KEY} and len(RUNS) == 1
    effect = RUNS[0]
    assert (effect.idempotency_key, effect.task_id, effect.channel, effect.call_id, effect.action) == (
        KEY, KEY, "blog", call_id, "deliver")
    [entry] = ledger_entries(state_dir)
    assert entry["action"] == "deliver" and entry["result"] == first and entry["approval"] == "human"
    assert entry["title"] == TITLE  # the task's label: the tool names no title of its own
    again = json.loads(_invoke(tool, store, cp, call_id))
    assert again == first and len(RUNS) == 1  # the first result; the function did not run again
    assert len(ledger_entries(state_dir)) == 1


def test_no_approval_on_record_runs_nothing(task, state_dir):
    from state.errors import Refused

    store, cp, call_id = task
    with pytest.raises(Refused, match="deliver for task eg-1 on blog ran without a human approval on "
                                      "record for this call .*nothing was delivered"):
        _invoke(_deliver(), store, cp, call_id)
    assert RUNS == [] and ledger_entries(state_dir) == []


def test_two_effect_tools_of_one_name_each_keep_their_own_words_and_private_channels(task, state_dir):
    """Two applications in one process may each declare an effect tool of the same name: each
    tool's refusals say what *it* does (``done=``) and its private channels are its own, whichever
    was declared last (they are the tool's, never a table by name)."""
    from workflow import Effect, effect_tool
    from workflow.effect import private_channels
    from state.errors import Refused

    store, cp, call_id = task
    first = _deliver()

    @effect_tool(name="deliver", done="posted", private_channels={"draft-box"})
    def deliver_elsewhere(effect: Effect, title: str, body: str) -> dict:
        """Post a note (another application's tool of the same name)."""
        RUNS.append(effect)
        return {}

    assert (private_channels(first), private_channels(deliver_elsewhere)) == (frozenset(), {"draft-box"})
    with pytest.raises(Refused, match="ran without a human approval on record for this call .*nothing was delivered"):
        _invoke(first, store, cp, call_id)
    with pytest.raises(Refused, match="ran without a human approval on record for this call .*nothing was posted"):
        _invoke(deliver_elsewhere, store, cp, call_id)
    assert RUNS == [] and ledger_entries(state_dir) == []


def test_content_other_than_the_tasks_runs_nothing(task, state_dir):
    from state.errors import Refused

    store, cp, call_id = task
    cp = _approve(store, cp, call_id)
    with pytest.raises(Refused, match="differs from the content that was started and approved"):
        _invoke(_deliver(), store, cp, call_id, body="Another body.")
    assert RUNS == [] and ledger_entries(state_dir) == []


def test_a_tool_that_is_not_the_tasks_action_runs_nothing(task, state_dir):
    """The run context names the task's action (the tool the reviewer was shown): another gated
    tool of the agent, even approved on record under the same call ID, never runs."""
    from agents.tool_context import ToolContext

    from state import open_stores
    from state.errors import Refused

    store, cp, call_id = task
    cp = _approve(store, cp, call_id)
    context = {"task_id": KEY, "idempotency_key": KEY, "content_sha256": cp.content_sha256,
               "channels": ["blog"], "action": "publish_draft", "store": open_stores.token_for(store)}
    args = json.dumps({"title": TITLE, "body": DRAFT})
    tool = _deliver()
    ctx = ToolContext(context=context, tool_name="deliver", tool_call_id=call_id, tool_arguments=args)
    with pytest.raises(Refused, match="deliver for task eg-1 is not the task's action"):
        asyncio.run(tool.on_invoke_tool(ctx, args))
    assert RUNS == [] and ledger_entries(state_dir) == []


def test_an_asynchronous_function_is_gated_the_same_way(task, state_dir):
    from state.errors import Refused
    from workflow import Effect, effect_tool

    @effect_tool
    async def deliver(effect: Effect, title: str, body: str) -> str:
        """Deliver a note."""
        RUNS.append(effect)
        return "delivered"

    store, cp, call_id = task
    with pytest.raises(Refused, match="without a human approval on record"):
        _invoke(deliver, store, cp, call_id)
    cp = _approve(store, cp, call_id)
    assert _invoke(deliver, store, cp, call_id) == "delivered"
    assert _invoke(deliver, store, cp, call_id) == "delivered" and len(RUNS) == 1


def test_ledger_entries_without_a_result_stay_readable_and_results_round_trip(tmp_path):
    """An entry written before results existed (and the publisher's, whose function returns None)
    has no ``result`` field; one with a result keeps it exactly."""
    from state.files.ledger import Ledger

    ledger = Ledger(tmp_path / "ledger")
    old = {"idempotency_key": "o-1", "task_id": "o-1", "action": "publish_draft", "title": "T",
           "content_sha256": "a" * 64, "published_at": AT}
    plant_record(tmp_path, "ledger_entry", old)  # signed, without a result field
    assert ledger.get("o-1").result is None
    entry, created = ledger.record(key="n-1", task_id="n-1", title="T", content_sha256="b" * 64,
                                   channel="email", approval="human", action="send_email",
                                   result={"sent_to": "ana", "n": [1, 2]})
    assert created and ledger.get("n-1").result == {"sent_to": "ana", "n": [1, 2]}
    again, created = ledger.record(key="n-1", task_id="n-1", title="T", content_sha256="b" * 64,
                                   channel="email", approval="human", action="send_email", result="other")
    assert not created and again.result == {"sent_to": "ana", "n": [1, 2]}  # the first, never rewritten
    ledger.record(key="p-1", task_id="p-1", action="publish_draft", title="T", content_sha256="c" * 64, channel="blog",
                  approval="human")
    assert "result" not in json.loads(ledger.path_for("p-1").read_text(encoding="utf-8"))


#: ``workflow.agent_check.describe`` of the publisher's tool before it was declared through the gate:
#: a checkpoint saved then is compared with this (drift), so it must not change.
PUBLISH_DRAFT_FINGERPRINT = {
    "position": 0,
    "function": "tools.publish.publish_draft",
    "needs_approval": "callable:tools.publish.needs_publish_approval",
    "description_sha256": "5e8d3e82efbae4cbe3331c9dca293fec8ea23a90815c90b11e77c96b28901677",
    "schema_sha256": "6ff02359cc2919b98e761abf5966235af3bde7be1b4179b4bab317261a0d2722",
}


def test_publish_draft_through_the_gate_keeps_the_fingerprint_saved_checkpoints_hold():
    from agent.models import build_offline_model
    from agent.publisher import build_agent
    from workflow.agent_check import describe

    tool = describe(build_agent(build_offline_model()))["tools"]["publish_draft"]
    assert tool == PUBLISH_DRAFT_FINGERPRINT


def test_an_effect_tool_behind_a_handoff_is_the_action_checked_and_fingerprinted():
    """The run may call any tool of an agent it hands off to (``Agent(handoffs=[...])``): that
    agent's effect tool is the task's action, it is refused without ``needs_approval`` like a tool
    of the top-level agent, and a change to it is drift for a saved checkpoint."""
    import dataclasses

    from agents import Agent

    from state.errors import Refused
    from workflow.agent_check import check_agent, describe, drift, gated_tool

    tool = _deliver()
    worker = Agent(name="Worker", tools=[tool])
    triage = Agent(name="Triage", handoffs=[worker])
    assert gated_tool(triage) is tool
    check_agent(triage)
    assert "deliver" in describe(triage)["tools"]
    quiet = Agent(name="Triage", handoffs=[worker.clone(tools=[dataclasses.replace(tool, needs_approval=False)])])
    with pytest.raises(Refused, match="has an effect but needs_approval is False"):
        check_agent(quiet)
    changed = Agent(name="Triage", handoffs=[worker.clone(tools=[dataclasses.replace(tool, description="x")])])
    assert drift(describe(triage), describe(changed)) == ["tool 'deliver' description changed"]


def test_an_effect_tool_inside_an_agent_used_as_a_tool_is_the_action():
    """``Agent.as_tool``: the nested agent's effect tool is what the run can call, so it is the
    task's action and is checked like the top-level agent's own."""
    import dataclasses

    from agents import Agent

    from state.errors import Refused
    from workflow.agent_check import check_agent, gated_tool

    tool = _deliver()
    worker = Agent(name="Worker", tools=[tool])
    outer = Agent(name="Editor", tools=[worker.as_tool(tool_name="worker", tool_description="Delivers.")])
    assert gated_tool(outer) is tool
    quiet = worker.clone(tools=[dataclasses.replace(tool, needs_approval=False)])
    with pytest.raises(Refused, match="has an effect but needs_approval is False"):
        check_agent(Agent(name="Editor", tools=[quiet.as_tool(tool_name="worker", tool_description="D.")]))


def test_approve_with_edits_that_are_not_argument_values_is_refused_before_anything(tmp_path):
    """``Approve(edits=…)`` becomes the engine's ``Edit(content=…)``: edits of the channel, or
    values that are not JSON strings, numbers or booleans, are refused with one line before the
    store is read (nothing written)."""
    from state.errors import Refused
    from workflow import Approve, decide, open_store

    store = open_store(tmp_path / "state")
    for edits in ({"channel": "news"}, {"subject": [7]}, {"subject": float("nan")}):
        with pytest.raises(Refused, match="the edits must be"):
            asyncio.run(decide(store, None, "t-1", Approve(edits=edits), by="alice"))
    assert not (tmp_path / "state").exists()


# -- whatever the function is, its effect runs before the ledger entry ------------------------------

def _plain_decorator(g: Any) -> Any:
    """A decorator as people write them: ``functools.wraps`` hides that ``g`` is asynchronous."""
    import functools

    @functools.wraps(g)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return g(*args, **kwargs)

    return wrapper


class _Later:
    """An awaitable that is not a coroutine (its ``__await__`` runs the effect)."""

    def __init__(self, effect: Any) -> None:
        self.effect = effect

    def __await__(self) -> Any:
        yield from asyncio.sleep(0).__await__()
        RUNS.append(self.effect)
        return {"delivered": len(RUNS)}


class _Deliverer:
    """A callable object whose ``__call__`` is asynchronous."""

    async def __call__(self, effect: Any, title: str, body: str) -> dict:
        """Deliver a note."""
        await asyncio.sleep(0)
        RUNS.append(effect)
        return {"delivered": len(RUNS)}


def _kind(kind: str) -> Any:
    """``deliver`` declared through the gate as a function of ``kind``; each run appends to RUNS."""
    import functools

    from workflow import Effect, effect_tool

    async def deliver(effect: Effect, title: str, body: str) -> dict:
        """Deliver a note."""
        await asyncio.sleep(0)
        RUNS.append(effect)
        return {"delivered": len(RUNS)}

    def deliver_later(effect: Effect, title: str, body: str) -> Any:
        """Deliver a note."""
        return _Later(effect)

    async def deliver_to(prefix: str, effect: Effect, title: str, body: str) -> dict:
        """Deliver a note."""
        RUNS.append(effect)
        return {"delivered": len(RUNS), "prefix": prefix}

    made = {"wraps": lambda: _plain_decorator(deliver), "awaitable": lambda: deliver_later,
            "partial": lambda: functools.partial(deliver_to, "p"), "callable_object": _Deliverer}[kind]()
    return effect_tool(made, name="deliver", done="delivered")


@pytest.mark.parametrize("kind", ["wraps", "awaitable", "partial", "callable_object"])
def test_an_awaitable_result_is_awaited_before_the_ledger_entry_whatever_the_function(kind, task, state_dir):
    """A plain decorator over an ``async def`` (``functools.wraps`` hides ``iscoroutinefunction``),
    a function returning an awaitable, a ``functools.partial`` and a callable object with an
    asynchronous ``__call__``: the effect runs (once) before its ledger entry, which keeps its result."""
    store, cp, call_id = task
    tool = _kind(kind)
    assert sorted(tool.params_json_schema["properties"]) == ["body", "title"]
    cp = _approve(store, cp, call_id)
    told = json.loads(_invoke(tool, store, cp, call_id))
    assert len(RUNS) == 1 and RUNS[0].idempotency_key == KEY
    assert told["delivered"] == 1
    [entry] = ledger_entries(state_dir)
    assert entry["result"] == told
    assert json.loads(_invoke(tool, store, cp, call_id)) == told and len(RUNS) == 1


def test_a_generator_is_refused_and_nothing_is_recorded(task, state_dir):
    """A function whose body does not run when it is called (a generator): refused, no entry."""
    from state.errors import Refused
    from workflow import Effect, effect_tool

    @effect_tool
    def deliver(effect: Effect, title: str, body: str) -> Any:
        """Deliver a note."""
        RUNS.append(effect)
        yield "delivered"

    store, cp, call_id = task
    cp = _approve(store, cp, call_id)
    with pytest.raises(Refused, match="returned a generator, whose body has not run; nothing was done"):
        _invoke(deliver, store, cp, call_id)
    assert RUNS == [] and ledger_entries(state_dir) == []


# -- the same through a service: counted at the service ---------------------------------------------

TOKEN = "tok-effect-gate-0123456789abcdef"


@pytest.fixture
def publishing(tmp_path):
    """A reference publishing service in a thread: ``(url, client, posts, publications)``:
    ``posts()`` the number of POSTs it received, ``publications()`` what it holds (its IDs)."""
    import httpx

    from tools.publishing_client import PublishingClient
    from tools.publishing_service import start_in_thread

    url, stop = start_in_thread(tmp_path / "svc", token=TOKEN)

    def posts() -> int:
        r = httpx.get(url + "/v1/_stats", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
        return r.json()["posts"]

    def publications() -> list[str]:
        r = httpx.get(url + "/v1/publications", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
        return [p["id"] for p in r.json()["data"]]

    yield url, PublishingClient(url, TOKEN, timeout_s=5), posts, publications
    stop()


def _invoke_through(tool: Any, url: str, store: Any, cp: Any, call_id: str) -> Any:
    """:func:`_invoke` for a task started with the service at ``url``."""
    from agents.tool_context import ToolContext

    from state import open_stores

    context = {"task_id": cp.task_id, "idempotency_key": cp.task_id, "content_sha256": cp.content_sha256,
               "channels": list(cp.channels), "store": open_stores.token_for(store), "service": url}
    args = json.dumps({"title": TITLE, "body": DRAFT})
    ctx = ToolContext(context=context, tool_name=tool.name, tool_call_id=call_id, tool_arguments=args)
    return asyncio.run(tool.on_invoke_tool(ctx, args))


def test_through_a_service_a_decorated_async_function_publishes_before_it_is_recorded(task, state_dir, publishing):
    """The decorated ``async def`` sends the request: one POST and one publication at the service,
    then the ledger entry holding that publication."""
    from workflow import Effect, effect_tool
    from workflow.external import Service

    url, client, posts, publications = publishing

    @effect_tool(name="deliver", done="delivered", service=Service(url=url, find=lambda k, a: client.find(k)))
    @_plain_decorator
    async def deliver(effect: Effect, title: str, body: str) -> dict:
        """Deliver a note."""
        return await asyncio.to_thread(client.publish, effect.request_key, title, body, effect.channel)

    store, cp, call_id = task
    cp = _approve(store, cp, call_id)
    told = json.loads(_invoke_through(deliver, url, store, cp, call_id))
    assert posts() == 1 and publications() == [told["id"]]
    [entry] = ledger_entries(state_dir)
    assert entry["result"]["id"] == told["id"] and told["title"] == TITLE


def test_through_a_service_a_decorated_async_lookup_is_awaited_before_anything_is_recorded(task, state_dir,
                                                                                         publishing):
    """A request whose answer was lost is asked about (``find``) before it is sent again: a ``find``
    behind a plain decorator is awaited (it finds nothing), and the request is then sent once."""
    from workflow import Effect, effect_tool
    from workflow.external import MayHaveActed, Service
    from state.errors import Refused

    url, client, posts, publications = publishing
    lost: list[str] = []
    asked: list[str] = []

    @_plain_decorator
    async def find(request_key: str, arguments: dict) -> Any:
        asked.append(request_key)
        return await asyncio.to_thread(client.find, request_key)

    @effect_tool(name="deliver", done="delivered", service=Service(url=url, find=find, attempts=1))
    def deliver(effect: Effect, title: str, body: str) -> dict:
        """Deliver a note."""
        if not lost:
            lost.append(effect.request_key)
            raise MayHaveActed("the answer was lost before the request was sent")
        return client.publish(effect.request_key, title, body, effect.channel)

    store, cp, call_id = task
    cp = _approve(store, cp, call_id)
    with pytest.raises(Refused, match="did not confirm it"):
        _invoke_through(deliver, url, store, cp, call_id)
    assert posts() == 0 and ledger_entries(state_dir) == []
    told = json.loads(_invoke_through(deliver, url, store, cp, call_id))
    assert asked == lost and posts() == 1 and publications() == [told["id"]] and told["idempotency_key"] == lost[0]
    [entry] = ledger_entries(state_dir)
    assert entry["result"] == told


def test_the_protocol_refuses_an_answer_that_is_still_awaitable(task, state_dir, publishing):
    """The second defence, in :func:`workflow.external.perform` itself: a ``send`` that answers
    with an awaitable (its request never ran) is not sent and not recorded: nothing at the service,
    no ledger entry, and the command says nothing reached the service."""
    from agents.tool_context import ToolContext

    from state import open_stores
    from state.errors import Refused
    from workflow import effect, external

    url, client, posts, publications = publishing
    store, cp, call_id = task
    cp = _approve(store, cp, call_id)

    async def send(e: Any) -> dict:
        return client.publish(e.request_key, TITLE, DRAFT, e.channel)

    context = {"task_id": KEY, "content_sha256": cp.content_sha256, "channels": ["blog"],
               "store": open_stores.token_for(store), "service": url}
    args = json.dumps({"title": TITLE, "body": DRAFT})
    ctx = ToolContext(context=context, tool_name="deliver", tool_call_id=call_id, tool_arguments=args)
    service = external.Service(url=url)
    call = effect._Call.check(ctx, {"title": TITLE, "body": DRAFT}, "deliver", True, frozenset(), None,
                              "content", service, "delivered")
    with pytest.raises(Refused, match="nothing reached the service .*send answered with an awaitable"):
        external.perform(call, service, send)
    assert posts() == 0 and publications() == [] and ledger_entries(state_dir) == []
