"""What a caller of the public API gives is checked where it enters (one ``Refused`` line, nothing
written, the model never called), and what an effect returns can always be recorded."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Mapping
from typing import Any

import pytest
from agents import Agent
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from state.files.store import Store
from workflow import Application, Approve, Effect, Refused, Reject, decide, effect_tool, start

CONTENT = {"to": "ana", "body": "hi"}
CALLED: list[str] = []
RESULT: dict[str, Any] = {}


@effect_tool
def send(effect: Effect, to: str, body: str) -> Any:
    """Send a message.

    Args:
        to: Who gets it.
        body: The message.
    """
    CALLED.append(effect.idempotency_key)
    return RESULT["value"]


def _respond(call: Any) -> ModelStep:
    CALLED.append("model")
    last = call.input[-1] if isinstance(call.input, list) else {"content": call.input}
    if isinstance(last, dict) and last.get("type") == "function_call_output":
        return ModelStep(output=[assistant_message(f"answered: {last['output']}")])
    return ModelStep(output=[function_call("send", CONTENT, call_id="c1")])


APP = Application(build_agent=lambda model: Agent(name="S", instructions="Send it.", tools=[send], model=model),
                  offline_model=lambda: ScriptedModel([ModelStep.respond(_respond) for _ in range(6)]))


@pytest.fixture(autouse=True)
def _fresh():
    CALLED.clear()
    RESULT.clear()
    yield


def _start(store: Store, key: str = "t-1", title: str = "T", content: Any = CONTENT) -> Any:
    return asyncio.run(start(store, APP, task_id=key, title=title, content=content, input="Send it.",
                             channels=["mail"]))


@pytest.mark.parametrize("key", ["k#5", "../x", "", "a" * 101, None, "CON"])
def test_a_bad_task_id_is_refused_before_the_model_runs(state_dir, key):
    with pytest.raises(Refused) as refused:
        _start(Store(state_dir), key=key)
    assert refused.value.code == "unsafe_input" and CALLED == [] and not state_dir.exists()


@pytest.mark.parametrize("title", ["", "two\nlines", "esc \x1b[2J", "x" * 201, None])
def test_a_bad_title_is_refused_before_the_model_runs(state_dir, title):
    with pytest.raises(Refused) as refused:
        _start(Store(state_dir), title=title)
    assert refused.value.code == "unsafe_input" and CALLED == [] and not state_dir.exists()


@pytest.mark.parametrize("ttl", [None, 0, -5, 1.5, "3600", True, 366 * 86_400 + 1])
def test_a_bad_expiry_is_refused_before_the_model_runs(state_dir, ttl):
    """``expires_in_s`` is whole seconds from 1 to the command line's longest ``--expires-in``
    (366 days): anything else is one refusal, never a ``TypeError`` from deep inside."""
    with pytest.raises(Refused) as refused:
        asyncio.run(start(Store(state_dir), APP, task_id="t-1", title="T", content=CONTENT, input="Send it.",
                          channels=["mail"], expires_in_s=ttl))
    assert refused.value.code == "unsafe_input" and "expires_in_s must be a whole number" in str(refused.value)
    assert CALLED == [] and not state_dir.exists()


@pytest.mark.parametrize("by", ["", None, "al\x1b[2J\nSTOPPED: fake", "n" * 101])
def test_a_bad_reviewer_name_is_refused_with_nothing_written(state_dir, by):
    store = Store(state_dir)
    _start(store)
    before = sorted(p.relative_to(state_dir).as_posix() for p in state_dir.rglob("*"))
    with pytest.raises(Refused) as refused:
        asyncio.run(decide(store, APP, "t-1", Approve(), by=by))
    assert refused.value.code == "unsafe_input"
    assert sorted(p.relative_to(state_dir).as_posix() for p in state_dir.rglob("*")) == before


@pytest.mark.parametrize("decision", [Approve(reason="e" * 1001), Reject(message="e" * 1001),
                                      Reject(message="ok\x1b[2J"), Approve(reason=7)])
def test_a_bad_reason_is_refused_before_the_lock_with_nothing_written(state_dir, decision):
    """A reason (or reject message) too long, with a control character, or not text: one
    ``Refused`` (``unsafe_input``) from the check every door shares, before the task's lock is
    taken; never a validation error from deep inside."""
    store = Store(state_dir)
    _start(store)
    before = sorted(p.relative_to(state_dir).as_posix() for p in state_dir.rglob("*"))
    with pytest.raises(Refused) as refused:
        asyncio.run(decide(store, APP, "t-1", decision, by="ana"))
    assert refused.value.code == "unsafe_input", refused.value
    assert sorted(p.relative_to(state_dir).as_posix() for p in state_dir.rglob("*")) == before


@pytest.mark.parametrize("decision", [Approve(edits="to"), "approve"])
def test_a_decision_that_is_not_a_value_of_the_api_is_refused(state_dir, decision):
    store = Store(state_dir)
    _start(store)
    with pytest.raises(Refused) as refused:
        asyncio.run(decide(store, APP, "t-1", decision, by="ana"))
    assert refused.value.code == "usage"


def test_content_too_large_for_a_checkpoint_is_refused_at_start(state_dir):
    with pytest.raises(Refused) as refused:
        _start(Store(state_dir), content={"to": "ana", "body": "x" * (300 * 1024)})
    assert refused.value.code == "unsafe_input" and "more than the" in str(refused.value)
    assert CALLED == [] and not state_dir.exists()


@pytest.mark.parametrize("value", [{1, 2}, object(), {"n": math.nan}, {"big": "x" * (20 * 1024)}],
                         ids=["set", "object", "nan", "over-16-KiB"])
def test_a_result_the_ledger_cannot_keep_is_replaced_and_the_effect_still_recorded(state_dir, value):
    """The effect ran: its ledger entry is written all the same (with a fixed note for the result),
    so the task completes and a repeat never runs the function again."""
    store = Store(state_dir)
    RESULT["value"] = value
    _start(store)
    done = asyncio.run(decide(store, APP, "t-1", Approve(), by="ana"))
    entry = store.ledger_get("t-1")
    assert done.status == "completed" and entry is not None and "was not kept" in entry.result["result"]
    asyncio.run(decide(store, APP, "t-1", Approve(), by="ana"))
    assert CALLED.count("t-1") == 1


def _two_calls(store: Store, key: str = "m-1") -> dict[str, str]:
    """A publisher task with two pending calls, one per channel: ``{channel: call_id}``."""
    from agent import application
    from workflow import read_task

    asyncio.run(application.start(store, task_id=key, title="T", draft="A draft.",
                                  channels=["blog", "news"]))
    return {p["arguments"]["channel"]: p["call_id"] for p in read_task(store, key).pending}


def test_decide_takes_a_mapping_of_call_ids_to_decisions(state_dir):
    """``decide(store, app, task, {call_id: Approve() | Reject(...)})`` decides each call named,
    in order, as pydantic-ai and LangGraph take decisions: one publication, one rejection."""
    from agent.application import APP as PUBLISHER
    from conftest import ledger_entries
    from workflow import Reject, read_task

    store = Store(state_dir)
    calls = _two_calls(store)
    asyncio.run(decide(store, PUBLISHER, "m-1", {calls["news"]: Reject(message="not there"),
                                                 calls["blog"]: Approve()}, by="ana"))
    task = read_task(store, "m-1")
    assert task.status == "completed" and task.pending == ()
    assert {d["channel"]: d["decision"] for d in task.decisions} == {"blog": "approved", "news": "rejected"}
    assert [e["idempotency_key"] for e in ledger_entries(state_dir)] == ["m-1#blog"]


class _Twice(Mapping):
    """A mapping of one's own that yields its one key twice."""

    def __init__(self, key: str, value: Any) -> None:
        self.key, self.value = key, value

    def __iter__(self) -> Any:
        yield from (self.key, self.key)

    def __len__(self) -> int:
        return 2

    def __getitem__(self, key: str) -> Any:
        return self.value


@pytest.mark.parametrize("bad", ["unknown", "always", "empty", "call_id", "value", "twice"])
def test_a_mapping_with_a_call_not_waiting_or_a_bad_value_records_nothing(state_dir, bad):
    from agent.application import APP as PUBLISHER
    from workflow import Reject, read_task

    store = Store(state_dir)
    calls = _two_calls(store)
    mapping: Any = {calls["blog"]: Approve(), **({"c-gone": Reject()} if bad == "unknown" else {})}
    mapping = {"empty": {}, "always": {calls["blog"]: Approve(always=True)},
               "value": {calls["blog"]: "approve"}, "twice": _Twice(calls["blog"], Approve())}.get(bad, mapping)
    before = read_task(store, "m-1")
    with pytest.raises(Refused) as refused:
        asyncio.run(decide(store, PUBLISHER, "m-1", mapping, by="ana",
                           call_id=calls["news"] if bad == "call_id" else None))
    says = {"unknown": "call 'c-gone' is not waiting for a decision", "always": "always= decides calls",
            "empty": "the mapping of decisions is empty", "call_id": "not call_id as well",
            "value": "must be Approve(...) or Reject(...), not str", "twice": "names a call more than once"}[bad]
    assert refused.value.code == "usage" and says in str(refused.value)
    assert read_task(store, "m-1") == before


def test_a_refusal_after_the_first_call_of_a_mapping_names_what_was_decided(state_dir):
    """The first call is decided (and stays so); the second is refused: the refusal says so."""
    from agent.application import APP as PUBLISHER
    from workflow import read_task

    store = Store(state_dir)
    calls = _two_calls(store)
    with pytest.raises(Refused) as refused:
        asyncio.run(decide(store, PUBLISHER, "m-1", {calls["blog"]: Approve(),
                                                     calls["news"]: Approve(edits={"nope": "x"})}, by="ana"))
    assert str(refused.value).startswith(f"calls {calls['blog']} of task m-1 were decided and stay recorded; "
                                         f"then call {calls['news']}: ")
    assert [p["call_id"] for p in read_task(store, "m-1").pending] == [calls["news"]]


def test_every_call_returns_the_same_frozen_task_whose_json_is_what_status_prints(state_dir):
    """``start``, ``decide`` and ``read_task`` return one shape, :class:`workflow.Task`: frozen,
    read-only inside, and ``to_json()`` equal to ``run.py status --task ID --json``."""
    import dataclasses

    from conftest import run_in_process
    from workflow import Task, read_task

    store = Store(state_dir)
    started = _start(store)
    assert isinstance(started, Task) and started.status == "waiting_for_approval"
    assert [dict(p) for p in started.pending] == [{"call_id": "c1", "tool": "send", "arguments": CONTENT,
                                                   "approvals": ()}]
    with pytest.raises(dataclasses.FrozenInstanceError):
        started.status = "completed"  # type: ignore[misc]
    with pytest.raises(TypeError):
        started.pending[0]["arguments"]["to"] = "eve"  # type: ignore[index]
    with pytest.raises(TypeError):
        started.pending[0]["arguments"].update(to="eve")  # type: ignore[attr-defined]
    assert json.loads(json.dumps(started.pending[0]["arguments"])) == CONTENT  # still plain JSON to json
    RESULT["value"] = {"sent": True}
    done = asyncio.run(decide(store, APP, "t-1", Approve(), by="ana"))
    assert isinstance(done, Task) and (done.status, done.revision, done.pending) == ("completed", 3, ())
    assert done == read_task(store, "t-1")
    assert [d["by"] for d in done.decisions] == ["ana"]
    printed = run_in_process(state_dir, "status", "--task", "t-1", "--json")
    assert done.to_json() == printed.json()


def test_a_task_carries_its_model_budget_spend_and_whether_a_decision_needs_a_token(state_dir):
    """What the command line prints beside the task JSON (the model and budget lines, the hint
    that a token is needed) comes from the :class:`workflow.Task` alone: the model, the budget and
    what was spent, and ``team`` once the store has reviewers."""
    from cli.text import budget_lines
    from state import reviewers as people
    from workflow import read_task

    store = Store(state_dir)
    task = _start(store)
    assert dict(task.model) == {"name": "offline", "api": "offline", "base_url": None}
    assert task.budget_stop is None
    assert (task.spend["turns"], task.budget["max_turns"], task.budget["max_cost_usd"]) == (1, 6, 0.05)
    assert budget_lines(task) == ["  model: offline (scripted, no network, no bill)",
                                  "  budget: spent 1 of 6 turns, 0 of 20,000 tokens, $0.00 of $0.05"]
    with pytest.raises(TypeError):
        task.spend["turns"] = 0  # type: ignore[index]
    assert task.team is False
    people.administer(store, "add", "root", token=None, at="2026-01-01T00:00:00.000000Z", roles=["admin"])
    assert read_task(store, "t-1").team is True  # a decision now needs a reviewer's token


def test_a_mapping_repeated_changes_nothing_and_a_mapping_that_cannot_pay_stops_there(state_dir):
    """The same mapping again (after a crash, say) returns the task unchanged; a mapping whose first
    approval cannot be paid returns ``budget_exceeded`` with that call and the later ones undecided,
    as one such decision does (it never goes on to decide the rest behind the caller's back)."""
    from agent import application
    from agent.application import APP as PUBLISHER
    from state.schema import ModelSpec
    from workflow import Reject, read_task
    from workflow.budget import make_budget

    store = Store(state_dir)
    calls = _two_calls(store)
    mapping = {calls["blog"]: Approve(), calls["news"]: Reject(message="not there")}
    done = asyncio.run(decide(store, PUBLISHER, "m-1", mapping, by="ana"))
    again = asyncio.run(decide(store, PUBLISHER, "m-1", mapping, by="ana"))
    assert done.status == "completed" and again == done and again.revision == done.revision

    one_turn = make_budget(ModelSpec(), max_turns=1)  # the start's turn: nothing left for the next
    asyncio.run(application.start(store, task_id="m-2", title="T", draft="A draft.", channels=["blog", "news"],
                                  budget=one_turn))
    pending = {p["arguments"]["channel"]: p["call_id"] for p in read_task(store, "m-2").pending}
    stopped = asyncio.run(decide(store, PUBLISHER, "m-2", {pending["blog"]: Approve(),
                                                           pending["news"]: Reject(message="no")}, by="ana"))
    assert stopped.status == "budget_exceeded" and stopped.budget_stop.startswith("budget exceeded: ")
    from cli.text import budget_lines  # the command line's lines, from the Task alone

    assert budget_lines(stopped)[1:] == [f"  {stopped.budget_stop}", "  next: raise the budget, e.g. python run.py "
                                         "resume --task m-2 --decision approve|reject --max-turns 3 (or --max-tokens, "
                                         "--max-cost-usd)"]
    assert stopped.decisions == () and sorted(p["call_id"] for p in stopped.pending) == sorted(pending.values())



def test_a_reviewer_list_that_cannot_be_read_shows_a_task_as_needing_a_token(state_dir):
    """``Task.team`` fails closed: with the store's reviewer list damaged, the task is shown as one
    whose decision needs a reviewer's token (the command line's ``next:`` lines say so), never as
    a single-user task; the decision itself then refuses."""
    from conftest import run_in_process
    from workflow import read_task

    store = Store(state_dir)
    _start(store)
    assert read_task(store, "t-1").team is False
    (state_dir / "reviewers").mkdir()
    (state_dir / "reviewers" / "r1.json").write_text("{not json", encoding="utf-8")  # damaged
    with pytest.raises(Refused):
        store.reviewer_list()
    assert read_task(store, "t-1").team is True
    printed = run_in_process(state_dir, "status", "--task", "t-1")
    assert printed.code == 0 and "team mode: run it with your reviewer token in HITL_REVIEWER_TOKEN" in printed.out


def test_status_of_a_waiting_task_whose_turns_are_spent_names_the_flag_its_approve_needs(cli):
    """A task started with one turn spends it reaching the approval: its approve would stop before
    the model's next turn (``budget_exceeded``). ``status`` says so, with the ``--max-turns`` that
    pays for it; that approve then completes the task. A task with turns left shows no such line."""
    assert cli("start", "--key", "b-1", "--draft", "Hi.", "--max-turns", "1").code == 0
    assert cli("start", "--key", "b-2", "--draft", "Hi.").code == 0
    shown = cli("status", "--task", "b-1").out.splitlines()
    assert shown[-2] == ("  budget: its turns are all spent (1 of 1): an approve stops before the model's next turn "
                         "(budget_exceeded) unless it raises them, e.g. --max-turns 3"), shown
    assert "its turns are all spent" not in cli("status", "--task", "b-2").out
    r = cli("resume", "--task", "b-1", "--decision", "approve", "--by", "ann", "--max-turns", "3", "--json")
    assert r.code == 0 and r.json()["status"] == "completed", r.err
