"""Content is JSON values, not only text: a tool with an ``int`` argument (``refund(order_id,
amount_cents)``) is gated like any other, and the gate judges a call on the arguments as the model
sent them (what ``start`` compared and the reviewer saw), not on the SDK's parse of them."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest
from agents import Agent
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from state.files.store import Store
from workflow import Application, Approve, Effect, Refused, Reject, decide, effect_tool, read_task, start

REFUNDS: list[tuple[str, str, int]] = []


@effect_tool
def refund(effect: Effect, order_id: str, amount_cents: int) -> dict:
    """Refund an order.

    Args:
        order_id: The order, exactly as given.
        amount_cents: The amount in cents, exactly as given.
    """
    REFUNDS.append((effect.idempotency_key, order_id, amount_cents))
    return {"refunded": amount_cents, "type": type(amount_cents).__name__}


def _app(sent: dict[str, Any]) -> Application:
    """An application whose offline model asks for ``refund(**sent)``, then quotes the answer."""
    def respond(call: Any) -> ModelStep:
        last = call.input[-1] if isinstance(call.input, list) else {"content": call.input}
        if isinstance(last, dict) and last.get("type") == "function_call_output":
            return ModelStep(output=[assistant_message(f"refund answered: {last['output']}")])
        return ModelStep(output=[function_call("refund", sent, call_id="call_refund_1")])

    return Application(
        build_agent=lambda model: Agent(name="Refunds", instructions="Refund as asked.", tools=[refund],
                                        model=model),
        offline_model=lambda: ScriptedModel([ModelStep.respond(respond) for _ in range(4)]))


def _start(store: Store, app: Application, content: dict[str, Any], key: str = "r-1") -> Any:
    return asyncio.run(start(store, app, task_id=key, title="Refund A-1", content=content,
                             input="Refund order A-1.", channels=["refund"]))


@pytest.fixture(autouse=True)
def _no_refunds():
    REFUNDS.clear()
    yield
    REFUNDS.clear()


def test_an_int_argument_is_content_and_the_function_gets_the_int(state_dir):
    content = {"order_id": "A-1", "amount_cents": 1999}
    app = _app(content)
    store = Store(state_dir)
    assert _start(store, app, content).status == "waiting_for_approval" and REFUNDS == []
    done = asyncio.run(decide(store, app, "r-1", Approve(), by="ana"))
    assert done.status == "completed"
    assert REFUNDS == [("r-1", "A-1", 1999)] and isinstance(REFUNDS[0][2], int)
    asyncio.run(decide(store, app, "r-1", Approve(), by="ana"))  # the same approval again
    assert len(REFUNDS) == 1 and read_task(store, "r-1").status == "completed"


def test_a_reject_of_an_int_call_runs_nothing(state_dir):
    content = {"order_id": "A-1", "amount_cents": 1999}
    app = _app(content)
    store = Store(state_dir)
    _start(store, app, content)
    done = asyncio.run(decide(store, app, "r-1", Reject(message="refunded by the bank already"), by="bo"))
    assert done.status == "cancelled" and REFUNDS == []
    assert "refunded by the bank already" in done.final_output


def test_a_number_and_its_text_are_different_content_refused_at_start(state_dir):
    """Asked for ``1999``, the model sends ``"1999"``: refused at start, before any human is asked
    and with nothing saved (a type is part of what is approved)."""
    store = Store(state_dir)
    with pytest.raises(Refused) as refused:
        _start(store, _app({"order_id": "A-1", "amount_cents": "1999"}), {"order_id": "A-1", "amount_cents": 1999})
    assert refused.value.code == "agent" and not store.exists("r-1")


def test_the_gate_judges_the_arguments_as_sent_not_the_sdks_parse(state_dir):
    """Content ``"1999"`` (text) and a model that sends ``"1999"``: the reviewer approves exactly
    that call; the SDK parses it into the int parameter as ``1999``, and the gate still lets the
    approved call run (judged on the sent text) instead of refusing it after the approval."""
    content = {"order_id": "A-1", "amount_cents": "1999"}
    app = _app(content)
    store = Store(state_dir)
    _start(store, app, content)
    done = asyncio.run(decide(store, app, "r-1", Approve(), by="ana"))
    assert done.status == "completed" and REFUNDS == [("r-1", "A-1", 1999)]


@pytest.mark.parametrize("bad", [math.nan, math.inf, None, ["a"], {"x": 1}])
def test_content_values_other_than_json_strings_numbers_or_booleans_are_refused(state_dir, bad):
    store = Store(state_dir)
    with pytest.raises(Refused) as refused:
        _start(store, _app({"order_id": "A-1"}), {"order_id": "A-1", "amount_cents": bad})
    assert refused.value.code == "usage" and "JSON string, number or boolean" in str(refused.value)
    assert not (state_dir / "checkpoints").exists() and not (state_dir / "tasks").exists()
