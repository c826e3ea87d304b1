"""Approve what the model proposes: a task started without content.

The model composes the call's arguments; the reviewer sees them in ``pending`` and approves the call
as shown. That approval records the content it saw (``Decision.content_sha256``), and the effect
runs only if the call carries exactly that content and has an approval of its own. A reject answers
one call: its reason goes back to the model, whose next call waits for a human again, and the
reject's rejection record is that call's own, so no restored checkpoint can run the rejected call.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest
from agents import Agent
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from conftest import checkpoint_file, next_revision_file, restore_checkpoint
from state.files.store import Store
from state.schema import PROPOSED, call_scope, content_fingerprint
from workflow import Application, Approve, Effect, Refused, Reject, decide, effect_tool, open_store, start

PAID: list[tuple[str, str, int]] = []


@effect_tool(done="paid")
def pay_invoice(effect: Effect, vendor: str, amount_cents: int) -> str:
    """Pay a vendor's invoice.

    Args:
        vendor: Who is paid.
        amount_cents: How much, in cents.
    """
    PAID.append((effect.idempotency_key, vendor, amount_cents))
    return "paid"


def _respond(call: Any) -> ModelStep:
    """Proposes ``pay_invoice`` from a request ``pay VENDOR CENTS``; told ``at most N``, proposes
    N under a new call ID; told anything else, answers with it."""
    items = call.input if isinstance(call.input, list) else [{"role": "user", "content": call.input}]
    last = items[-1]
    if last.get("type") != "function_call_output":
        _, vendor, cents = str(last["content"]).split()
        return ModelStep(output=[function_call("pay_invoice", {"vendor": vendor, "amount_cents": int(cents)},
                                               call_id=f"call-{cents}")])
    capped = re.search(r"at most (\d+)", str(last["output"]))
    if capped:
        vendor = json.loads([i for i in items if i.get("type") == "function_call"][-1]["arguments"])["vendor"]
        cents = int(capped.group(1))
        return ModelStep(output=[function_call("pay_invoice", {"vendor": vendor, "amount_cents": cents},
                                               call_id=f"call-{cents}")])
    return ModelStep(output=[assistant_message(f"answered: {last['output']}")])


APP = Application(build_agent=lambda model: Agent(name="Payer", instructions="Pay what you are asked.",
                                                   tools=[pay_invoice], model=model),
                  offline_model=lambda: ScriptedModel([ModelStep.respond(_respond) for _ in range(6)]))


@pytest.fixture(autouse=True)
def _fresh():
    PAID.clear()


def _start(store: Any, key: str = "inv-1", request: str = "pay acme 1200") -> Any:
    return asyncio.run(start(store, APP, task_id=key, title="Invoice", input=request, channels=["bank"]))


def _decide(store: Any, choice: Any, key: str = "inv-1", **kw: Any) -> Any:
    """``decide`` by ann; an approval names the call waiting now (as a reviewer who saw it would)."""
    if isinstance(choice, Approve) and "call_id" not in kw and store.load(key).pending:
        kw["call_id"] = store.load(key).pending[0].call_id
    return asyncio.run(decide(store, APP, key, choice, by="ann", **kw))


def test_started_without_content_the_task_waits_with_what_the_model_proposed(state_dir):
    store = Store(state_dir)
    task = _start(store)
    assert task.status == "waiting_for_approval" and PAID == []
    [call] = task.pending
    assert call["arguments"] == {"vendor": "acme", "amount_cents": 1200}
    assert store.load("inv-1").content_sha256 == PROPOSED


@pytest.mark.parametrize("where", ["files", "postgresql"])
def test_start_again_with_another_input_is_refused_and_with_the_same_returns_the_task(state_dir, request, where):
    """The input is all a model that proposes the arguments is told: a second ``start`` of the
    key with another request is refused, naming the input, and nothing changes; with the same
    request (a list of input items too) it returns the saved task, as after a crash."""
    store = Store(state_dir) if where == "files" else open_store(request.getfixturevalue("pg_url"))
    first = _start(store)
    with pytest.raises(Refused, match="task inv-1 already exists and differs in its input"):
        _start(store, request="pay globex 99999")
    assert store.load("inv-1").revision == first.revision and PAID == []
    assert _start(store).pending == first.pending
    items = [{"role": "user", "content": "pay acme 1200"}]
    second = asyncio.run(start(store, APP, task_id="inv-2", title="Invoice", input=items, channels=["bank"]))
    again = asyncio.run(start(store, APP, task_id="inv-2", title="Invoice", input=[dict(i) for i in items],
                              channels=["bank"]))
    assert again.pending == second.pending and again.revision == 1
    with pytest.raises(Refused, match="differs in its input"):
        asyncio.run(start(store, APP, task_id="inv-2", title="Invoice", input="pay acme 1200", channels=["bank"]))


def test_an_input_with_a_nan_is_fingerprinted_and_one_nested_too_deep_is_refused_cleanly(state_dir):
    """The input's fingerprint is taken of a NaN too (so a later start with another input is
    compared, never waved through); an input nested too deep to write gives no fingerprint, and a
    second start with it is refused as another input, never a traceback."""
    from state.schema import input_fingerprint

    assert input_fingerprint([{"role": "user", "content": "pay acme 1200", "n": float("nan")}]) is not None
    deep: Any = "pay acme 1200"
    for _ in range(5000):
        deep = [deep]
    assert input_fingerprint(deep) is None
    store = Store(state_dir)
    _start(store)
    with pytest.raises(Refused, match="differs in its input"):
        asyncio.run(start(store, APP, task_id="inv-1", title="Invoice", input=deep, channels=["bank"]))


@pytest.mark.parametrize("where", ["files", "postgresql"])
def test_an_approval_runs_exactly_the_call_as_shown_once(state_dir, request, where):
    store = Store(state_dir) if where == "files" else open_store(request.getfixturevalue("pg_url"))
    _start(store)
    done = _decide(store, Approve())
    assert done.status == "completed" and PAID == [("inv-1", "acme", 1200)]
    [rec] = store.load("inv-1").decisions
    assert rec.content_sha256 == content_fingerprint({"vendor": "acme", "amount_cents": 1200})
    assert _decide(store, Approve()).status == "completed" and len(PAID) == 1
    assert store.ledger_get("inv-1").content_sha256 == rec.content_sha256


def test_a_reject_answers_one_call_and_the_models_next_call_waits_for_a_human(state_dir):
    store = Store(state_dir)
    _start(store)
    task = _decide(store, Reject(message="at most 900"))
    assert task.status == "waiting_for_approval" and PAID == []
    [call] = task.pending
    assert call["call_id"] == "call-900" and call["arguments"] == {"vendor": "acme", "amount_cents": 900}
    assert store.rejection_get("inv-1", call_scope("bank", "call-1200")) is not None
    assert store.rejection_get("inv-1", None) is None  # the channel is not rejected: one call is
    assert _decide(store, Approve()).status == "completed"
    assert PAID == [("inv-1", "acme", 900)]


def test_a_retry_of_a_decision_with_the_revision_seen_gets_the_task_after_the_model_proposed_anew(state_dir):
    """A reviewer's reject named the revision they saw; its answer was lost, and the model has
    since proposed a new call. The same request again gets the task as it is (the new call still
    waits, undecided); another reviewer's, or another reason, with that old revision is stale."""
    store = Store(state_dir)
    _start(store)
    task = _decide(store, Reject(message="at most 900"), expect_revision=1)
    assert [p["call_id"] for p in task.pending] == ["call-900"] and task.revision > 1
    again = _decide(store, Reject(message="at most 900"), expect_revision=1)
    assert (again.revision, again.pending, again.decisions) == (task.revision, task.pending, task.decisions)
    for who, why in (("bob", "at most 900"), ("ann", "at most 800")):
        with pytest.raises(Refused) as exc:
            asyncio.run(decide(store, APP, "inv-1", Reject(message=why), by=who, expect_revision=1))
        assert exc.value.code == "stale_revision", exc.value
    assert store.load("inv-1").revision == task.revision and PAID == []
    assert _decide(store, Approve()).status == "completed" and PAID == [("inv-1", "acme", 900)]


def test_a_task_whose_model_answers_wrongly_after_the_effect_each_time_has_a_way_out(state_dir, monkeypatch):
    """After the approved call executed, the model's next answer reuses that call's ID for another
    call, which the SDK refuses: the decision is recorded and the task stays open. When the model
    does so again and again, ``fail`` ends the task ``completed`` (its entry stands, the reason is
    recorded), and it never runs the call again; before, it had no way out."""
    from workflow import fail, read_task

    def reused(call: Any) -> ModelStep:
        items = call.input if isinstance(call.input, list) else []
        if items and items[-1].get("type") == "function_call_output":
            return ModelStep(output=[function_call("pay_invoice", {"vendor": "acme", "amount_cents": 1},
                                                   call_id="call-1200")])
        return _respond(call)

    app = Application(build_agent=APP.build_agent,
                      offline_model=lambda: ScriptedModel([ModelStep.respond(reused) for _ in range(6)]))
    store = Store(state_dir)
    asyncio.run(start(store, app, task_id="inv-1", title="Invoice", input="pay acme 1200", channels=["bank"]))
    for _ in range(2):
        with pytest.raises(Refused, match="malformed"):
            asyncio.run(decide(store, app, "inv-1", Approve(), by="ann", call_id="call-1200"))
    assert read_task(store, "inv-1").status == "waiting_for_approval" and PAID == [("inv-1", "acme", 1200)]
    ended = fail(store, "inv-1", reason="the model keeps answering with a used call ID", by="ann")
    assert ended.status == "completed" and PAID == [("inv-1", "acme", 1200)]
    assert store.load("inv-1").failure == "ended by ann: the model keeps answering with a used call ID"
    with pytest.raises(Refused, match="already executed") as exc:  # ended: the table's word on it
        fail(store, "inv-1", reason="again", by="ann")
    assert exc.value.code == "executed" and store.load("inv-1").status == "completed"


def test_a_reject_the_model_takes_ends_cancelled_with_no_effect(state_dir):
    store = Store(state_dir)
    _start(store)
    task = _decide(store, Reject(message="not this month"))
    assert task.status == "cancelled" and PAID == [] and "not this month" in task.final_output


def test_a_restored_checkpoint_never_runs_the_call_a_human_rejected(state_dir):
    store = Store(state_dir)
    _start(store)
    before = checkpoint_file(state_dir, "inv-1").read_bytes()
    _decide(store, Reject(message="at most 900"))
    restore_checkpoint(state_dir, "inv-1", before)  # waits again at the rejected call
    with pytest.raises(Refused) as exc:
        _decide(store, Approve())
    assert exc.value.code == "rejected" and PAID == []


def test_a_sticky_approval_is_refused_where_the_model_proposes(state_dir):
    store = Store(state_dir)
    _start(store)
    with pytest.raises(Refused) as exc:
        _decide(store, Approve(always=True))
    assert "each approval is of the call as shown" in str(exc.value) and PAID == []


def _approved_by_hand(state_dir: Any, content_sha256: Any) -> None:
    """The next revision records an approval of the pending call, written by hand and re-signed (a
    writer holding the key): ``content_sha256`` as given (None: the field left out)."""
    store = Store(state_dir)
    cp = store.load("inv-1")
    call = cp.pending[0]

    def approve(d: dict) -> None:
        from state.schema import arguments_sha256

        rec = {"decision": "approved", "by": "ann", "at": d["created_at"], "reason": None,
               "call_id": call.call_id, "tool": call.tool, "arguments_sha256": arguments_sha256(call.arguments),
               "channel": "bank", "always": False, "source": "human", "edits": None}
        if content_sha256 is not None:
            rec["content_sha256"] = content_sha256
        d["decisions"] = [rec]
        d["decision"] = rec

    next_revision_file(state_dir, "inv-1", approve)


@pytest.mark.parametrize("recorded", ["other content", "left out"])
def test_the_gate_runs_a_proposed_call_only_with_an_approval_of_the_content_it_carries(state_dir, recorded):
    """An approval on record whose content is not the call's (or says none) runs nothing: the gate
    compares the call it is asked to run with the content that approval saw (fail closed)."""
    store = Store(state_dir)
    _start(store)
    _approved_by_hand(state_dir, content_fingerprint({"vendor": "eve", "amount_cents": 1200})
                      if recorded == "other content" else None)
    with pytest.raises(Refused):
        _decide(store, Approve())
    assert PAID == []


def test_an_approval_of_the_shown_content_written_by_hand_the_same_way_runs(state_dir):
    """The control of the test above: the same hand-written approval with the call's own content
    runs it once (so the refusals above are the content check, not the hand-writing)."""
    store = Store(state_dir)
    _start(store)
    _approved_by_hand(state_dir, content_fingerprint({"vendor": "acme", "amount_cents": 1200}))
    assert _decide(store, Approve()).status == "completed" and PAID == [("inv-1", "acme", 1200)]


def test_an_approval_that_names_no_call_is_refused_where_the_model_proposes(state_dir):
    """After one reviewer's reject the model proposes another call; an approval naming no call (nor
    the revision seen) could approve that call, which its reviewer never saw: refused, nothing
    recorded. Naming the call, or the revision, approves it."""
    store = Store(state_dir)
    _start(store)
    _decide(store, Reject(message="at most 900"))
    before = store.load("inv-1").revision
    with pytest.raises(Refused) as exc:
        asyncio.run(decide(store, APP, "inv-1", Approve(), by="bob"))
    assert exc.value.code == "usage" and "names the call it approves" in str(exc.value)
    assert store.load("inv-1").revision == before and PAID == []
    done = asyncio.run(decide(store, APP, "inv-1", Approve(), by="bob", expect_revision=before))
    assert done.status == "completed" and PAID == [("inv-1", "acme", 900)]
    again = asyncio.run(decide(store, APP, "inv-1", Approve(), by="bob"))  # nothing waits: a repeat
    assert again.revision == done.revision and len(PAID) == 1


def test_a_task_with_content_still_holds_the_model_to_it(state_dir):
    store = Store(state_dir)
    with pytest.raises(Refused) as exc:
        asyncio.run(start(store, APP, task_id="inv-2", title="Invoice", input="pay acme 1200",
                          content={"vendor": "acme", "amount_cents": 999}, channels=["bank"]))
    assert exc.value.code == "agent" and not store.exists("inv-2")


def _invoke(store: Any, call_id: str, arguments: dict[str, Any]) -> Any:
    """The gate itself, as the SDK would run ``pay_invoice`` for an approved call ``call_id``,
    with the run context the workflow builds from the verified checkpoint."""
    from agents.tool_context import ToolContext

    from workflow.guards import run_context

    cp = store.load("inv-1")
    ctx = run_context(store, cp.task_id, cp.content_sha256, cp.channels, cp.action)
    text = json.dumps(arguments)
    tool_ctx = ToolContext(context=ctx, tool_name="pay_invoice", tool_call_id=call_id, tool_arguments=text)
    return asyncio.run(pay_invoice.on_invoke_tool(tool_ctx, text))


def test_the_gate_reads_the_calls_own_rejection_record_right_before_the_effect(state_dir):
    """A reject of this very call recorded meanwhile (by a process whose lock was lost) wins over
    the approval on record, at the gate: the record read there is the call's own."""
    from state.schema import Decision

    store = Store(state_dir)
    _start(store)
    shown = {"vendor": "acme", "amount_cents": 1200}
    _approved_by_hand(state_dir, content_fingerprint(shown))
    rec = store.load("inv-1").decisions[0]
    reject = Decision(**{**rec.model_dump(), "decision": "rejected", "content_sha256": None})
    store.rejection_record("inv-1", PROPOSED, reject, call_scope("bank", "call-1200"))
    with pytest.raises(Refused, match="a reject by ann"):
        _invoke(store, "call-1200", shown)
    assert PAID == []


def test_a_call_proposed_again_under_the_rejected_calls_id_is_answered_no_again(state_dir):
    """The SDK answers a call whose ID it already rejected with that reject again, without a new
    interruption: a model that repeats the rejected call word for word ends the task ``cancelled``
    with nothing run, rather than asking a human twice about one call ID (a new proposal needs a
    new call ID, as a real model's are)."""
    def again(call: Any) -> ModelStep:
        items = call.input if isinstance(call.input, list) else []
        if sum(1 for i in items if i.get("type") == "function_call_output") < 3:
            return ModelStep(output=[function_call("pay_invoice", {"vendor": "acme", "amount_cents": 5},
                                                   call_id="call-same")])
        return ModelStep(output=[assistant_message("gave up")])

    app = Application(build_agent=APP.build_agent,
                      offline_model=lambda: ScriptedModel([ModelStep.respond(again) for _ in range(8)]))
    store = Store(state_dir)
    asyncio.run(start(store, app, task_id="inv-1", title="Invoice", input="pay", channels=["bank"]))
    done = asyncio.run(decide(store, app, "inv-1", Reject(message="no"), by="ann"))
    assert (done.status, done.pending, [d["decision"] for d in done.decisions]) == ("cancelled", (), ["rejected"])
    assert PAID == []


def test_several_differing_calls_proposed_in_one_turn_after_an_effect_can_each_be_rejected(state_dir):
    """After its channel's effect ran, the model proposes two more calls on that channel in one
    turn, with other content: neither can run (one effect per channel), and each can be rejected,
    so the task finishes ``completed`` with its one effect instead of waiting for ever."""
    def more(call: Any) -> ModelStep:
        items = call.input if isinstance(call.input, list) else [{"role": "user", "content": call.input}]
        answered = sum(1 for i in items if i.get("type") == "function_call_output")
        if answered == 0:
            return ModelStep(output=[function_call("pay_invoice", {"vendor": "acme", "amount_cents": 1},
                                                   call_id="call-1")])
        if answered == 1:
            return ModelStep(output=[
                function_call("pay_invoice", {"vendor": "acme", "amount_cents": 2}, call_id="call-2"),
                function_call("pay_invoice", {"vendor": "acme", "amount_cents": 3}, call_id="call-3")])
        return ModelStep(output=[assistant_message("done")])

    app = Application(build_agent=APP.build_agent,
                      offline_model=lambda: ScriptedModel([ModelStep.respond(more) for _ in range(8)]))
    store = Store(state_dir)
    asyncio.run(start(store, app, task_id="inv-1", title="Invoice", input="pay", channels=["bank"]))
    task = asyncio.run(decide(store, app, "inv-1", Approve(), by="ann", call_id="call-1"))
    assert [p["call_id"] for p in task.pending] == ["call-2", "call-3"] and PAID == [("inv-1", "acme", 1)]
    asyncio.run(decide(store, app, "inv-1", Reject(message="one is enough"), by="ann", call_id="call-2"))
    done = asyncio.run(decide(store, app, "inv-1", Reject(message="one is enough"), by="ann", call_id="call-3"))
    assert done.status == "completed" and done.pending == () and PAID == [("inv-1", "acme", 1)]


@pytest.mark.parametrize("how", ["restored", "crashed"])
def test_doctor_names_a_reject_the_checkpoint_does_not_show(state_dir, monkeypatch, how):
    """The call's own rejection record is there, but the checkpoint waits at that call (an older
    copy put back, or a crash right after the record): ``doctor`` says so, as for any task."""
    from workflow.ops.doctor import doctor

    store = Store(state_dir)
    _start(store)
    before = checkpoint_file(state_dir, "inv-1").read_bytes()
    if how == "restored":
        _decide(store, Reject(message="no"))
        restore_checkpoint(state_dir, "inv-1", before)
    else:
        monkeypatch.setenv("HITL_FAILPOINT", "rejection:record:after")
        monkeypatch.setattr("os._exit", lambda code: (_ for _ in ()).throw(SystemExit(code)))
        with pytest.raises(SystemExit):
            _decide(store, Reject(message="no"))
        monkeypatch.delenv("HITL_FAILPOINT")
    assert checkpoint_file(state_dir, "inv-1").read_bytes() == before
    kinds = [f["kind"] for f in doctor(store)["findings"]]
    assert kinds == ["rejection_not_finished"], kinds


def test_an_approval_gone_from_disk_before_the_effect_stops_it(state_dir, monkeypatch):
    """The gate reads the approval from the store right before the effect, never from the copy the
    resume holds: the newest checkpoint (the one holding the approval) deleted between the decision
    and the effect, as a person putting an older file back would, and nothing is paid."""
    from state import failpoints

    store = open_store(str(state_dir))
    call_id = _start(store).pending[0]["call_id"]
    real = failpoints.hit

    def hit(point: str) -> None:
        if point == "checkpoint:decision:after":
            sorted((state_dir / "checkpoints").rglob("r*.json"))[-1].unlink()
        real(point)
    monkeypatch.setattr(failpoints, "hit", hit)
    with pytest.raises(Refused) as refused:
        _decide(store, Approve(), call_id=call_id)
    assert refused.value.code == "integrity", refused.value  # no approval of this content on record
    assert PAID == [] and store.ledger_get("inv-1") is None


@pytest.mark.parametrize("point, code, says", [
    ("checkpoint:decision:after", "failed", "ended failed while this approval ran"),
    ("effect:intent:before", "failed", "another process ended the task failed while this command checked")])
def test_a_task_failed_by_another_process_while_an_approval_runs_gets_no_effect(state_dir, monkeypatch, point,
                                                                                 code, says):
    """A lock file deleted under an approval paused after its decision was written, or after the
    gate checked the call and before it wrote the intent; another process ends the task with
    ``fail`` (no effect had happened, no intent was there). The approval, going on, is stopped by
    the checkpoint that says ``failed``: right before the effect, or read again once the intent is
    written (then settled ``not_sent`` by the program). Nothing paid, the task stays ``failed``
    with no ledger entry, and ``doctor`` finds it consistent."""
    from state import failpoints
    from state.files.store import file_name
    from workflow import fail
    from workflow.ops.doctor import doctor

    store = open_store(str(state_dir))
    call_id = _start(store).pending[0]["call_id"]
    real = failpoints.hit

    def hit(point_now: str) -> None:
        if point_now == point:
            (state_dir / "locks" / f"{file_name('inv-1')}.lock").unlink()
            assert fail(open_store(str(state_dir)), "inv-1", reason="gave up", by="bob").status == "failed"
        real(point_now)
    monkeypatch.setattr(failpoints, "hit", hit)
    with pytest.raises(Refused) as refused:
        _decide(store, Approve(), call_id=call_id)
    monkeypatch.setattr(failpoints, "hit", real)
    assert refused.value.code == code and says in str(refused.value), refused.value
    assert PAID == [] and store.ledger_get("inv-1") is None and store.load("inv-1").status == "failed"
    if point == "effect:intent:before":
        assert store.settlement_get("inv-1", 1).source == "not_sent"
    assert doctor(store)["consistent"]


def test_a_task_failed_while_its_function_ran_ends_completed_once_the_entry_is_recorded(state_dir, monkeypatch):
    """The window no check closes: a lock file deleted under an approval, and another process's
    ``fail``, which found no intent yet, writes ``failed`` after the gate wrote the intent and read
    the checkpoint again (:func:`_failed_by_bob` writes that revision while the function runs).
    The function had paid; its entry, written next, proves it, so the gate ends the task
    ``completed`` on top of that revision, as ``fail`` ends a task with an executed call (its
    failure kept): never ``failed`` with a ledger entry."""
    from state import failpoints
    from state.files.store import file_name
    from workflow import read_task
    from workflow.ops.doctor import doctor

    store = open_store(str(state_dir))
    call_id = _start(store).pending[0]["call_id"]
    real = failpoints.hit

    def hit(point: str) -> None:
        if point == "ledger:record:before" and PAID:  # the function paid; its entry is not written yet
            (state_dir / "locks" / f"{file_name('inv-1')}.lock").unlink()
            _failed_by_bob(state_dir)
        real(point)
    monkeypatch.setattr(failpoints, "hit", hit)
    with pytest.raises(Refused) as refused:  # its own outcome write lost the compare-and-swap
        _decide(store, Approve(), call_id=call_id)
    assert refused.value.code == "stale_revision" and str(refused.value) == (
        "task inv-1: its effect was done (ledger entry inv-1) while another process ended the task failed; it is "
        "now completed, the failure kept, since an executed action is never ended as if it had not run")
    monkeypatch.setattr(failpoints, "hit", real)
    assert PAID == [("inv-1", "acme", 1200)] and store.ledger_get("inv-1") is not None
    task = read_task(store, "inv-1")
    assert (task.status, task.failure) == ("completed", "ended by bob: gave up")
    ended, repaired = store.load("inv-1").history[-2:]
    assert (ended.event, repaired.event) == ("failed", "completed")
    assert (repaired.detail["executed_after"], repaired.detail["keys"]) == ("failed", ["inv-1"])
    assert doctor(store)["consistent"]


def test_a_task_failed_while_its_function_ran_ends_completed_even_when_the_model_then_fails(state_dir,
                                                                                           monkeypatch):
    """The same window, and then the model fails on the turn after the call (a provider error): the
    run's failure is not the last word either. The entry proves the call executed, so the task is
    ended ``completed`` (the failure kept) by the run that failed, not left ``failed`` for
    ``doctor --repair``; the refusal says so."""
    from state import failpoints
    from state.files.store import file_name
    from workflow import read_task
    from workflow.ops.doctor import doctor

    store = open_store(str(state_dir))
    call_id = _start(store).pending[0]["call_id"]
    real, answer = failpoints.hit, _respond

    def hit(point: str) -> None:
        if point == "ledger:record:before" and PAID:
            (state_dir / "locks" / f"{file_name('inv-1')}.lock").unlink()
            _failed_by_bob(state_dir)
        real(point)

    def failing(call: Any) -> ModelStep:  # the provider fails once the call has run
        items = call.input if isinstance(call.input, list) else []
        if items and items[-1].get("type") == "function_call_output":
            raise RuntimeError("provider error 500")
        return answer(call)
    monkeypatch.setattr(failpoints, "hit", hit)
    monkeypatch.setitem(globals(), "_respond", failing)  # APP's model reads it at each start
    with pytest.raises(Refused) as refused:
        _decide(store, Approve(), call_id=call_id)
    assert refused.value.code == "stale_revision" and "it is now completed, the failure kept" in str(refused.value)
    monkeypatch.undo()
    task = read_task(store, "inv-1")
    assert (task.status, task.failure, PAID) == ("completed", "ended by bob: gave up", [("inv-1", "acme", 1200)])
    assert doctor(store)["consistent"]


def _failed_by_bob(state_dir: Any) -> None:
    """Task ``inv-1`` ended ``failed`` by bob, as ``fail`` writes it (:func:`workflow.settlement.fail`)
    when its own check ran before the effect's intent was written and its write lands after the
    gate read the checkpoint again: the one order of the two processes no check can refuse."""
    from state.files.store import Store

    store = Store(state_dir)
    store.save_revision(store.load("inv-1"), failpoint="checkpoint:outcome", status="failed", pending=[],
                        expires_at=None, failure="ended by bob: gave up",
                        event=("failed", {"by": "bob", "reason": "gave up", "status": "failed"}))


def test_fail_while_the_function_runs_is_refused_and_the_approve_pays_once(state_dir, monkeypatch):
    """The function is running (it paid; its ledger entry is not written yet) when another process,
    its lock file deleted, asks to ``fail`` the task: the call's intent, written before the
    function was called, says the effect may have happened, so ``fail`` is refused (``begun``),
    nothing written, and the approve ends ``completed`` with one payment."""
    from state import failpoints
    from state.files.store import file_name
    from workflow import fail

    store = open_store(str(state_dir))
    call_id = _start(store).pending[0]["call_id"]
    real, refusals = failpoints.hit, []

    def hit(point: str) -> None:
        if point == "ledger:record:before" and PAID:
            (state_dir / "locks" / f"{file_name('inv-1')}.lock").unlink()
            with pytest.raises(Refused) as refused:
                fail(open_store(str(state_dir)), "inv-1", reason="gave up", by="bob")
            refusals.append(refused.value.code)
        real(point)
    monkeypatch.setattr(failpoints, "hit", hit)
    assert _decide(store, Approve(), call_id=call_id).status == "completed"
    assert refusals == ["begun"] and PAID == [("inv-1", "acme", 1200)]
    assert store.load("inv-1").failure is None


def _failed_while_it_ran_and_left(state_dir: Any, monkeypatch: Any) -> Any:
    """The window of the test above, with the approving command gone before it could end the
    task ``completed`` (as if it crashed right after its ledger entry): the store, its task
    ``inv-1`` ``failed`` with a ledger entry."""
    from state import failpoints
    from state.files.store import file_name
    from workflow import reconcile

    store = open_store(str(state_dir))
    call_id = _start(store).pending[0]["call_id"]
    real = failpoints.hit

    def hit(point: str) -> None:
        if point == "ledger:record:before" and PAID:
            (state_dir / "locks" / f"{file_name('inv-1')}.lock").unlink()
            _failed_by_bob(state_dir)
        real(point)
    monkeypatch.setattr(failpoints, "hit", hit)
    monkeypatch.setattr(reconcile, "executed_after_fail", lambda store, task_id: [])  # gone before it
    with pytest.raises(Refused):
        _decide(store, Approve(), call_id=call_id)
    monkeypatch.undo()
    assert store.load("inv-1").status == "failed" and store.ledger_get("inv-1") is not None
    return store


def test_doctor_repair_ends_completed_a_task_failed_while_its_call_executed(state_dir, monkeypatch):
    """``doctor`` reports that task (``failed`` with an entry) and names ``doctor --repair``, which
    ends it ``completed`` (the failure kept); nothing else can, since ``fail`` and every decision
    refuse an ended task."""
    from cli import hints
    from workflow import read_task
    from workflow.ops.doctor import doctor, with_actions

    store = _failed_while_it_ran_and_left(state_dir, monkeypatch)
    report = with_actions(doctor(store), hints.hint)
    [finding] = report["findings"]
    assert (finding["kind"], report["consistent"]) == ("cancelled_with_entry", False)
    assert finding["action"] == ("python run.py doctor --repair ends it completed, the failure kept (the entry "
                                 "proves the call executed while the task was being ended)")
    repaired = doctor(store, repair=True)
    assert repaired["consistent"] and [r["kind"] for r in repaired["repairs"]] == ["executed_after_fail"]
    task = read_task(store, "inv-1")
    assert (task.status, task.failure) == ("completed", "ended by bob: gave up")
    assert doctor(store, repair=True)["repairs"] == []  # done once
    assert PAID == [("inv-1", "acme", 1200)]


def test_doctor_repair_never_completes_a_failed_task_on_an_entry_of_other_content(state_dir, monkeypatch):
    """An entry of the task's key for other content than its approved call (one put back from a
    backup, say) proves nothing about this call: ``doctor --repair`` leaves the task ``failed``
    and the mismatch stays a finding for a human."""
    from state.files.ledger import Ledger
    from state.files.store import Store
    from workflow import read_task
    from workflow.ops.doctor import doctor

    store = _failed_while_it_ran_and_left(state_dir, monkeypatch)
    Ledger(Store(state_dir).ledger_dir).path_for("inv-1").unlink()
    store.ledger_record(key="inv-1", task_id="inv-1", action="pay_invoice", title="Invoice",
                        content_sha256="0" * 64, channel="bank", approval="human", result="paid")
    repaired = doctor(store, repair=True)
    assert repaired["repairs"] == [] and not repaired["consistent"]
    assert [f["kind"] for f in repaired["findings"]] == ["entry_mismatch"]
    assert read_task(store, "inv-1").status == "failed"



def test_a_failed_task_restored_to_its_approval_never_pays(state_dir, monkeypatch):
    """The approval recorded, the run cut before the effect; ``fail`` ends the task. After a restore
    of the checkpoint of the approval (every later revision removed) an approve and a reject are
    refused: the task's end mark outlives the older copy; the same ``fail`` ends it again. Nothing
    paid."""
    from state import failpoints
    from workflow import fail
    from workflow.ops.doctor import doctor

    store = open_store(str(state_dir))
    _start(store)
    real = failpoints.hit

    def hit(point: str) -> None:
        if point == "effect:intent:before":
            raise RuntimeError(point)  # the SDK reports it as the run's error: the decision is on record
        real(point)
    monkeypatch.setattr(failpoints, "hit", hit)
    with pytest.raises(Refused, match="the decision is recorded"):
        _decide(store, Approve())
    monkeypatch.setattr(failpoints, "hit", real)
    approved = checkpoint_file(state_dir, "inv-1").read_bytes()
    assert fail(store, "inv-1", reason="paid by hand", by="bob").status == "failed"
    assert doctor(store)["consistent"]
    restore_checkpoint(state_dir, "inv-1", approved)
    assert store.load("inv-1").status == "waiting_for_approval"
    call_id = store.load("inv-1").pending[0].call_id
    for choice in (Approve(), Reject(message="at most 500")):  # a reject would let the model propose anew
        with pytest.raises(Refused) as refused:
            asyncio.run(decide(store, APP, "inv-1", choice, by="ann", call_id=call_id))
        assert refused.value.code == "failed" and "was ended by bob at" in str(refused.value), refused.value
    assert PAID == [] and store.ledger_get("inv-1") is None
    assert [f["kind"] for f in doctor(store)["findings"]] == ["fail_not_finished"]
    assert fail(store, "inv-1", reason="put back by mistake", by="bob").status == "failed"
    assert PAID == [] and doctor(store)["consistent"]


def test_the_gate_reads_fails_end_mark_before_it_writes_an_intent(state_dir, monkeypatch):
    """A task whose rejects are per call (the model proposes): the end mark lies under the task's
    own key, not the call's. A ``fail`` cut after its mark while an approval's run goes on (a lost
    lock): the gate refuses before it writes any intent, and nothing is paid."""
    from state import failpoints
    from workflow.settlement import _end_mark

    store = open_store(str(state_dir))
    _start(store)
    real = failpoints.hit

    def hit(point: str) -> None:
        if point == "checkpoint:decision:after":
            _end_mark(store, store.load("inv-1"), "bob", "ended by bob: gone")  # then its process died
        real(point)
    monkeypatch.setattr(failpoints, "hit", hit)
    with pytest.raises(Refused) as refused:
        _decide(store, Approve())
    assert refused.value.code == "failed" and "the task was ended by bob at" in str(refused.value), refused.value
    assert PAID == [] and store.intent_get("inv-1") is None and store.ledger_get("inv-1") is None
