"""The engine runs any application (``workflow.application.Application``): the action is the agent's
tool declared through the effect gate, the content is data, and one decision checks each thing once.

The second application here is a note sender, ``send_note(to, text)``, written only against
``workflow/``, ``state/`` and the SDK: the engine has no other view of it than its ``Application``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import pytest
from agents import Agent, RunContextWrapper, function_tool
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from conftest import ledger_entries, use_app
from state import open_stores
from state.errors import Refused
from state.files.store import Store
from state.schema import ModelSpec, content_fingerprint, content_sha256
from workflow import hitl
from workflow.application import Application, default_edit_message
from workflow.effect import effectful

CONTENT = {"to": "ops", "text": "The deploy is done."}


@function_tool(needs_approval=True, failure_error_function=None)
def send_note(ctx: RunContextWrapper[dict[str, Any]], to: str, text: str) -> str:
    """Send a note to a team. Requires a human's approval.

    Args:
        to: The team.
        text: The note.
    """
    task = ctx.context
    store = open_stores.lookup(task["store"])
    entry, created = store.ledger_record(
        key=task["task_id"], task_id=task["task_id"], action=task["action"], title=to,
        content_sha256=content_fingerprint({"to": to, "text": text}), channel=task["channels"][0],
        approval="human")
    return "sent" if created else "already sent"


@function_tool
def look_up(team: str) -> str:
    """Look a team up (no effect)."""
    return team


effectful(send_note)


def _respond(call: Any) -> ModelStep:
    items = call.input if isinstance(call.input, list) else [{"role": "user", "content": call.input}]
    last = items[-1]
    if isinstance(last, dict) and last.get("type") == "function_call_output":
        output = str(last["output"])
        if output.startswith("The reviewer approved this call only with edits"):  # call it as told
            return ModelStep(output=[function_call("send_note", json.loads(output[output.index("{"):]),
                                                   call_id="call_note_2")])
        return ModelStep(output=[assistant_message(f"send_note answered: {output}")])
    return ModelStep(output=[function_call("send_note", CONTENT, call_id="call_note_1")])


def _model() -> ScriptedModel:
    return ScriptedModel([ModelStep.respond(_respond) for _ in range(4)])


NOTES = Application(
    build_agent=lambda model: Agent(name="Notes", instructions="Send the note you are given.",
                                    tools=[send_note], model=model),
    offline_model=_model)


def _start(store: Store, app: Application = NOTES, key: str = "n-1", **kw: Any):
    return asyncio.run(hitl.start(store, app, task_id=key, title="Note to ops", content=CONTENT,
                                  input="Send it.", channels=["notes"], **kw))


def test_another_application_runs_its_own_action_to_one_ledger_entry(state_dir):
    """Nothing of the publisher: the checkpoint's action is the note tool's name, the content its
    arguments; approve runs it once, the same approval again runs nothing."""
    store = Store(state_dir)
    cp = _start(store)
    assert cp.action == "send_note" and cp.content_sha256 == content_fingerprint(CONTENT)
    assert [p.tool for p in cp.pending] == ["send_note"]
    done = asyncio.run(hitl.decide(store, NOTES, task_id="n-1", decision="approve", by="ann"))
    assert done.status == "completed" and done.final_output == "send_note answered: sent"
    again = asyncio.run(hitl.decide(store, NOTES, task_id="n-1", decision="approve", by="ann"))
    assert again.revision == done.revision
    assert [(e["idempotency_key"], e["action"]) for e in ledger_entries(state_dir)] == [("n-1", "send_note")]


@pytest.mark.parametrize("word", ["approve", "reject"])
def test_a_retry_with_the_revision_seen_gets_the_task_only_when_the_decision_on_record_is_the_callers(
        state_dir, word):
    """A request that named the revision it saw, retried after its answer was lost: the same
    reviewer's same decision gets the task as it is, never a "look again" for their own change;
    another reviewer's decision made meanwhile is still a revision they did not see, refused."""
    from workflow import Approve, Reject, decide

    store = Store(state_dir)
    seen = _start(store).revision
    value = Approve() if word == "approve" else Reject(message="No.")
    done = asyncio.run(decide(store, NOTES, "n-1", value, by="ann", expect_revision=seen))
    again = asyncio.run(decide(store, NOTES, "n-1", value, by="ann", expect_revision=seen))
    assert again.status == done.status == ("completed" if word == "approve" else "cancelled")
    assert again.revision == done.revision
    with pytest.raises(Refused, match=r"changed since the page was rendered \(revision 1, now 3\)") as exc:
        asyncio.run(decide(store, NOTES, "n-1", value, by="bob", expect_revision=seen))
    assert exc.value.code == "stale_revision"
    assert len(ledger_entries(state_dir)) == (1 if word == "approve" else 0)


def test_another_applications_reject_reaches_its_model_and_runs_nothing(state_dir):
    store = Store(state_dir)
    _start(store)
    done = asyncio.run(hitl.decide(store, NOTES, task_id="n-1", decision="reject", by="bob",
                                   reason="Not to ops."))
    assert done.status == "cancelled" and done.final_output == "send_note answered: Not to ops."
    assert ledger_entries(state_dir) == []


def test_another_applications_call_approved_with_edits_runs_with_exactly_the_edited_content(state_dir):
    """Approve with edits of any content: the call is answered with the application's edit
    message (here the default one), the model's new call carrying exactly the edited content is
    approved for the same reviewer, and the ledger entry is that content's."""
    from workflow.edits import Edit

    store = Store(state_dir)
    _start(store)
    done = asyncio.run(hitl.decide(store, NOTES, task_id="n-1", decision="approve", by="ann",
                                   edit=Edit(content={"text": "The deploy is done, at last."})))
    assert done.status == "completed", done.final_output
    edited = {**CONTENT, "text": "The deploy is done, at last."}
    [first, second] = done.decisions
    assert first.edits is not None and first.edits.content == edited and first.edits.original == CONTENT
    assert (second.call_id, second.by, second.edits) == ("call_note_2", "ann", None)
    [entry] = ledger_entries(state_dir)
    assert entry["content_sha256"] == content_fingerprint(edited)


def test_edits_naming_an_argument_the_call_does_not_have_are_refused(state_dir):
    from workflow.edits import Edit

    store = Store(state_dir)
    _start(store)
    with pytest.raises(Refused, match="the edits name subject, which the call does not have"):
        asyncio.run(hitl.decide(store, NOTES, task_id="n-1", decision="approve", by="ann",
                                edit=Edit(content={"subject": "x"})))
    assert store.load("n-1").decisions == []


def test_an_agent_without_a_tool_with_an_effect_is_refused_at_start_with_nothing_saved(state_dir):
    plain = dataclasses.replace(NOTES, build_agent=lambda model: Agent(
        name="Notes", instructions="x", tools=[look_up], model=model))
    with pytest.raises(Refused, match=r"a tool declared with an effect \(found: none\)"):
        _start(Store(state_dir), plain)
    assert not state_dir.exists()


def test_two_tools_with_an_effect_a_task_gates_the_one_named_at_start_default_the_first(state_dir, monkeypatch):
    """An agent with a second tool with an effect: a task gates the action named at start
    (``action=``), else ``Application.action``, else the agent's first such tool; a name that is
    none of them is refused with nothing saved."""
    from workflow import effect

    monkeypatch.setattr(effect, "_EFFECTFUL", set(effect._EFFECTFUL))  # this test's registration only
    second = effectful(dataclasses.replace(look_up, name="page_ops", needs_approval=True))
    both = dataclasses.replace(NOTES, build_agent=lambda model: Agent(
        name="Notes", instructions="x", tools=[send_note, second], model=model))
    assert _start(Store(state_dir), both).action == "send_note"  # the first
    with pytest.raises(Refused, match=r"tool named 'nope' declared with an effect \(found: 'send_note', 'page_ops'"):
        _start(Store(state_dir), both, key="n-2", action="nope")
    assert not Store(state_dir).exists("n-2")
    cp = _start(Store(state_dir), dataclasses.replace(both, action="send_note"), key="n-3")
    assert cp.action == "send_note"


@pytest.mark.parametrize("content", [{}, {"to": "ops", "channel": "notes"}, {"to": [1]}, {"to": None}, ["to"]])
def test_content_that_is_not_json_values_by_argument_is_refused_before_anything(state_dir, content):
    with pytest.raises(Refused, match="the content must be a non-empty"):
        asyncio.run(hitl.start(Store(state_dir), NOTES, task_id="n-1", title="T", content=content,
                               input="Send it."))
    assert not state_dir.exists()


def test_a_call_that_carries_other_content_is_refused_at_start(state_dir):
    with pytest.raises(Refused, match="does not carry the content as given"):
        asyncio.run(hitl.start(Store(state_dir), NOTES, task_id="n-1", title="T",
                               content={**CONTENT, "text": "Another note."}, input="Send it."))
    assert not state_dir.exists()


@pytest.mark.parametrize("title, body", [("Release notes", "Version 1.2."), ("Tïtle ✓", "a\nb"), ("", "")])
def test_the_content_fingerprint_of_a_draft_is_its_content_sha256(title, body):
    """Existing checkpoints, ledger entries and rejection records keep their fingerprints: the
    generic one of ``{"title", "body"}`` is exactly the publisher's."""
    assert content_fingerprint({"title": title, "body": body}) == content_sha256(title, body)
    assert content_fingerprint({"body": body, "title": title}) == content_sha256(title, body)


def test_the_default_edit_message_names_the_tool_and_the_exact_arguments():
    text = default_edit_message("send_note", {"to": "ops", "text": "Hi"}, "notes")
    assert "call send_note once more" in text
    assert text.endswith('and "channel": "notes": {"text": "Hi", "to": "ops"}')


def test_one_decision_checks_each_thing_once(cli, state_dir, monkeypatch):
    """``resume`` from the command line: the decision table is judged once before the lock
    (``preflight``, which the command line runs before importing the SDK) and once under it
    (``recheck``), the agent is built once, the reviewer name and the reason checked once."""
    from agent import publisher
    from state import secrets
    from workflow import reconcile

    assert cli("start", "--key", "k-1", "--title", "T", "--draft", "D").code == 0
    seen: dict[str, int] = {}

    def counted(name: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            seen[name] = seen.get(name, 0) + 1
            return fn(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(reconcile, "preflight", counted("preflight", reconcile.preflight))
    monkeypatch.setattr(reconcile, "recheck", counted("recheck", reconcile.recheck))
    use_app(monkeypatch, build_agent=counted("build_agent", publisher.build_agent))
    real_check = secrets.check_input

    def name(what):  # a plain string, or message parts (text and next steps): the text
        return what if isinstance(what, str) else "".join(p for p in what if isinstance(p, str))
    monkeypatch.setattr(secrets, "check_input",
                        lambda what, value: (seen.__setitem__(name(what), seen.get(name(what), 0) + 1),
                                             real_check(what, value))[1])
    r = cli("resume", "--task", "k-1", "--decision", "approve", "--by", "ann", "--reason", "ok", "--json")
    assert r.code == 0 and r.json()["status"] == "completed", r.err
    assert seen == {"preflight": 1, "recheck": 1, "build_agent": 1, "the reviewer name": 1,
                    "the reason": 1}


def _counting_loads(monkeypatch: Any) -> list[str]:
    """Every ``Store.load`` from now on, named by the function that asked (file store), and each
    verification in full it made (``"(verified in full)"``: bytes this process had not verified)."""
    import sys as _sys

    from state.files.store import Store as FileStore

    import state.files.store as files

    asked: list[str] = []
    real, verify = FileStore.load, files.verify_envelope

    def load(self: Any, task_id: str) -> Any:
        asked.append(_sys._getframe(1).f_code.co_name)
        return real(self, task_id)

    def verified(*args: Any, **kwargs: Any) -> Any:  # parse, MAC and validation, in full
        asked.append("(verified in full)")
        return verify(*args, **kwargs)
    monkeypatch.setattr(FileStore, "load", load)
    monkeypatch.setattr(files, "verify_envelope", verified)
    return asked


def test_an_approval_reads_the_checkpoint_before_the_lock_under_it_and_right_before_the_effect(
        cli, state_dir, monkeypatch):
    """One approval, through each door (the command line, the browser inbox's one adapter, the
    library), goes through the one engine (``workflow.engine.Engine``: judged once, decided once)
    and reads the checkpoint twice for the decision: once before the lock (``judge``: who decides,
    the decision table and the policy, on one read) and once under it (``recheck``); then the
    effect gate once more, right before the effect (``_checkpoint``: a lock file can be deleted
    under a process), and, for a local effect, once again once its intent is written (a ``fail``
    that landed meanwhile stops it; the same bytes, not verified again); a tool that records its
    own ledger entry, outside the gate, skips both. It
    verifies the checkpoint in full (parse, MAC, validation) at most twice: ``judge``'s read, and
    the gate's of the decision this process just wrote; the read under the lock finds the very
    bytes ``judge`` verified. The outcome is written without reading it back (the run token holds
    what was written)."""
    from agent.application import APP
    from workflow import Approve, decide
    from workflow.engine import Engine
    from workflow.review.web import decide_call

    passes: list[str] = []
    judge, run = Engine.judge, Engine.decide

    def judged(self: Any, *args: Any, **kwargs: Any) -> Any:
        passes.append("judge")
        return judge(self, *args, **kwargs)

    async def decided(self: Any, *args: Any, **kwargs: Any) -> Any:
        passes.append("decide")
        return await run(self, *args, **kwargs)
    monkeypatch.setattr(Engine, "judge", judged)
    monkeypatch.setattr(Engine, "decide", decided)

    assert cli("start", "--key", "k-1", "--title", "T", "--draft", "D").code == 0
    asked = _counting_loads(monkeypatch)
    assert cli("resume", "--task", "k-1", "--decision", "approve", "--by", "ann").code == 0
    full = "(verified in full)"
    assert (asked, passes) == (["judge", full, "recheck", "_checkpoint", full, "_checkpoint"],
                               ["judge", "decide"]), (asked, passes)

    assert cli("start", "--key", "k-2", "--title", "T", "--draft", "D").code == 0
    store = Store(state_dir)
    cp = store.load("k-2")
    asked.clear(), passes.clear()
    done = decide_call(store, APP, task_id="k-2", call_id=cp.pending[0].call_id, decision="approve",
                       reason=None, by="ann", expect_revision=cp.revision)
    assert done.status == "completed"  # judge's read: the bytes this test's load verified
    assert (asked, passes) == (["judge", "recheck", "_checkpoint", full, "_checkpoint"],
                               ["judge", "decide"]), (asked, passes)

    _start(Store(state_dir))  # an application of its own, through the public API
    asked.clear(), passes.clear()
    asyncio.run(decide(Store(state_dir), NOTES, "n-1", Approve(), by="ann"))
    assert (asked, passes) == (["judge", full, "recheck"], ["judge", "decide"]), (asked, passes)


def test_the_command_line_and_the_inbox_decide_only_through_the_engine_of_the_public_api():
    """No module of ``cli/`` or ``workflow/review/`` reaches the story (``workflow.hitl``), the
    engine's module (``workflow.engine``), the decision table's pre-lock judgement, who decides, or
    the publisher's own decide: each decision they make goes through ``Engine``, imported from
    ``workflow`` (the public API, its ``__all__``), as the public ``workflow.decide`` does."""
    import ast
    from pathlib import Path

    import workflow

    assert "Engine" in workflow.__all__ and workflow.Engine.__module__ == "workflow.engine"
    root = Path(__file__).resolve().parents[1]
    banned_modules = {"workflow.hitl", "workflow.engine"}
    banned_calls = {("hitl", "decide"), ("hitl", "resume"), ("reconcile", "preflight"),
                    ("team", "decider"), ("application", "decide"), ("application", "resume")}
    found: list[str] = []
    engine_users: set[str] = set()
    for path in [*sorted((root / "cli").glob("*.py")), *sorted((root / "workflow" / "review").glob("*.py"))]:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module is not None:
                names = {f"{node.module}.{a.name}" for a in node.names} | {node.module}
                found += [f"{path.name}: imports {n}" for n in sorted(names & banned_modules)]
                if node.module == "workflow" and "Engine" in {a.name for a in node.names}:
                    engine_users.add(path.name)
            elif isinstance(node, ast.Import):
                found += [f"{path.name}: imports {a.name}" for a in node.names if a.name in banned_modules]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                owner = node.func.value
                if isinstance(owner, ast.Name) and (owner.id, node.func.attr) in banned_calls:
                    found.append(f"{path.name}: calls {owner.id}.{node.func.attr}")
    assert found == [], found
    assert engine_users == {"commands.py", "web.py"}, engine_users


def test_repeating_a_decision_on_a_real_model_task_needs_no_api_key(state_dir, monkeypatch):
    """A decision the table answers ``unchanged`` runs nothing: the agent checked before the lock is
    built around the offline model, so a missing OPENAI_API_KEY does not stop it."""
    from agent import application

    from agent.models import build_offline_model

    spec = ModelSpec(name="gpt-test", api="responses", base_url="https://api.example.test/v1")
    store = Store(state_dir)
    asyncio.run(application.start(store, task_id="r-1", title="T", draft="D", spec=spec,
                                  model=build_offline_model()))
    done = asyncio.run(application.decide(store, task_id="r-1", decision="approve", by="ann",
                                          model=build_offline_model()))
    assert done.status == "completed" and done.model == spec
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    again = asyncio.run(application.decide(store, task_id="r-1", decision="approve", by="ann"))
    assert again.revision == done.revision and json.loads(again.model_dump_json())["status"] == "completed"


def test_the_engine_decides_only_what_its_own_judge_returned(state_dir):
    """``Engine.decide`` takes the judgement of the same engine's ``judge`` only, once: a judgement
    copied with another reviewer's name (who was never judged), built by hand, or made by another
    engine is refused (``usage``) and nothing is decided; the judge's own then decides, once."""
    from workflow import Engine, Task
    from workflow.engine import Judged

    store = Store(state_dir)
    _start(store)
    engine = Engine(store, NOTES)
    judged = engine.judge("n-1", "approve", by="ann")
    forged = [dataclasses.replace(judged, by="the boss"), Engine(store, NOTES).judge("n-1", "approve", by="ann"),
              Judged(**{f.name: getattr(judged, f.name) for f in dataclasses.fields(Judged)})]
    for bad in forged:
        with pytest.raises(Refused) as refused:
            asyncio.run(engine.decide(bad))
        assert refused.value.code == "usage"
    assert store.load("n-1").status == "waiting_for_approval" and ledger_entries(state_dir) == []
    done = asyncio.run(engine.decide(judged))
    assert isinstance(done, Task) and done.status == "completed" and done.decisions[0]["by"] == "ann"
    with pytest.raises(Refused) as twice:
        asyncio.run(engine.decide(judged))
    assert twice.value.code == "usage"


def test_two_decisions_on_one_task_in_one_event_loop_take_turns_and_the_loop_keeps_running(state_dir, monkeypatch):
    """A front end of one event loop (a web server on ``Engine``) decides one task twice at once:
    the second decision waits for the task's lock by sleeping, not by holding the loop, so the
    first run goes on (the loop ticks meanwhile), the second is then judged on what the first left
    (completed: nothing more to do) and the note is sent once. Holding the loop, the second would
    wait the whole ``HITL_LOCK_TIMEOUT`` with the first run stuck behind it, then be refused."""
    import time

    from workflow import Engine

    class Slow(ScriptedModel):  # a model that takes its time, as a real one does
        async def get_response(self, *args: Any, **kwargs: Any) -> Any:
            await asyncio.sleep(0.2)
            return await super().get_response(*args, **kwargs)

    monkeypatch.setenv("HITL_LOCK_TIMEOUT", "5")
    store = Store(state_dir)
    _start(store)
    slow = dataclasses.replace(NOTES, offline_model=lambda: Slow([ModelStep.respond(_respond) for _ in range(4)]))

    async def both() -> tuple[Any, Any, int, float]:
        engine = Engine(store, slow)
        first, second = (engine.judge("n-1", "approve", by=who) for who in ("ann", "bob"))
        ticks, running = 0, True

        async def tick() -> None:
            nonlocal ticks
            while running:
                ticks += 1
                await asyncio.sleep(0.01)
        ticker = asyncio.create_task(tick())
        began = time.monotonic()
        a, b = await asyncio.gather(engine.decide(first), engine.decide(second))
        took = time.monotonic() - began
        running = False
        await ticker
        return a, b, ticks, took

    a, b, ticks, took = asyncio.run(both())
    assert (a.status, b.status) == ("completed", "completed") and a.revision == b.revision
    assert [d["by"] for d in b.decisions] == ["ann"]
    assert len(ledger_entries(state_dir)) == 1
    assert took < 4 and ticks >= 5, (took, ticks)  # the loop ran while the first decision did


def test_settle_waits_for_a_busy_task_lock_without_holding_the_event_loop(state_dir, monkeypatch):
    """``settle`` (a person's finding about a call in doubt) awaits the task's lock as a decision
    does: while another coroutine of the same loop holds it, the finding waits its turn and is then
    written, instead of freezing the loop (the holder with it) until ``HITL_LOCK_TIMEOUT`` refuses
    it. What is checked and written is stubbed here: only the wait is under test (the finding
    itself: tests/test_external_effects.py)."""
    import time

    from workflow import locking, settlement

    monkeypatch.setenv("HITL_LOCK_TIMEOUT", "5")
    store = Store(state_dir)
    cp = _start(store)
    written: list[float] = []
    monkeypatch.setattr(settlement, "_check_before", lambda *args: None)
    monkeypatch.setattr(settlement, "_write",
                        lambda *args: written.append(time.monotonic()) or (cp, "c", "notes", None))
    monkeypatch.setattr(settlement, "_traced", lambda *args: (cp, "c"))

    async def both() -> float:
        released: list[float] = []

        async def hold() -> None:
            async with locking.task_lock(store, "n-1"):
                await asyncio.sleep(0.3)
            released.append(time.monotonic())

        holder = asyncio.create_task(hold())
        await asyncio.sleep(0.05)  # the holder has the lock
        await settlement.settle(store, NOTES, task_id="n-1", outcome="not_published", by="ann")
        await holder
        return written[0] - released[0]

    assert asyncio.run(both()) >= 0 and len(written) == 1  # written once the holder let go


def test_a_lock_held_by_a_coroutine_of_this_process_is_named_so_when_the_wait_runs_out(state_dir, monkeypatch):
    """The wait for a busy task lock runs out while another coroutine of the same process holds
    it (through another store object on the same folder): the refusal says so, not "another
    process", which would send a person looking for a process that is not there. Once the holder
    let go, the words for a holder elsewhere are back."""
    from workflow import locking

    monkeypatch.setenv("HITL_LOCK_TIMEOUT", "0.2")
    store = Store(state_dir)
    _start(store)

    async def both() -> Refused:
        async def hold() -> None:
            async with locking.task_lock(store, "n-1"):
                await asyncio.sleep(0.6)

        holder = asyncio.create_task(hold())
        await asyncio.sleep(0.05)
        with pytest.raises(Refused) as busy:
            async with locking.task_lock(Store(state_dir), "n-1"):
                pass
        await holder
        return busy.value

    refused = asyncio.run(both())
    assert refused.code == "locked" and str(refused) == (
        "task n-1 is being worked on by another decision in this process (waited 0.2 s); "
        "try again when it finishes")
    assert locking._HELD == set()
    with Store(state_dir).task_lock("n-1"):  # held outside any coroutine's task_lock
        with pytest.raises(Refused) as elsewhere:
            asyncio.run(_enter(locking.task_lock(store, "n-1")))
    assert "by another process (waited 0.2 s)" in str(elsewhere.value)


async def _enter(lock: Any) -> None:
    async with lock:
        pass


def test_two_starts_of_one_task_refused_in_one_event_loop_leave_the_state_dir_as_they_found_it(state_dir,
                                                                                                monkeypatch):
    """Two starts of one task at once, in one event loop, each refused by its model after taking
    the lock in turn: nothing is left, not a lock file, a trace or a folder. The second judges what
    it created against what existed when it took the lock, after the first had removed its own,
    not against what it saw when it began to wait (the first's lock file and trace)."""
    from conftest import snapshot

    class Failing(ScriptedModel):  # the provider answers with an error, after a while
        async def get_response(self, *args: Any, **kwargs: Any) -> Any:
            await asyncio.sleep(0.1)
            raise RuntimeError("provider error 500")

    monkeypatch.setenv("HITL_LOCK_TIMEOUT", "5")
    failing = dataclasses.replace(NOTES, offline_model=lambda: Failing([]))

    async def both() -> list[Any]:
        starts = (hitl.start(Store(state_dir), failing, task_id="n-1", title="Note", content=CONTENT,
                             input="Send it.", channels=["notes"]) for _ in range(2))
        return await asyncio.gather(*starts, return_exceptions=True)

    for outcome in asyncio.run(both()):
        assert isinstance(outcome, Refused) and "nothing saved" in str(outcome), outcome
    assert snapshot(state_dir) == {}


def test_an_applications_command_is_one_line_of_text_recorded_signed_in_each_task(state_dir):
    """``Application.command`` (how a person runs the application) is checked when the application
    is built (empty, several lines, control or bidirectional characters: ``ValueError``), recorded
    in the task's checkpoint at start under its MAC, and absent for an application that gives none
    (checkpoints as before)."""
    for bad in ("", "  ", "python pay.py\nrm -rf /", "python pay.py\x1b[2J", "python \u202epay.py", 7):
        with pytest.raises(ValueError):
            dataclasses.replace(NOTES, command=bad)
    store = Store(state_dir)
    cp = _start(store, dataclasses.replace(NOTES, command="python notes.py"))
    assert cp.command == "python notes.py" and store.load("n-1").command == "python notes.py"
    assert "command" not in _start(store, key="n-2").model_dump(exclude_none=True)


def test_the_engine_decides_from_its_own_copy_as_who_was_judged_while_they_still_are(state_dir):
    """What ``judge`` returned, changed by hand afterwards (``object.__setattr__`` on the frozen
    value), decides as judged: the engine keeps its own copy. Who decides is resolved again at
    ``decide`` from the same token: a token rotated since is refused, nothing decided."""
    from state import reviewers as people
    from workflow import Engine

    store = Store(state_dir)
    _start(store)
    engine = Engine(store, NOTES)
    judged = engine.judge("n-1", "reject", by="ann", reason="not today")
    object.__setattr__(judged, "by", "eve")
    object.__setattr__(judged, "decision", "approve")
    done = asyncio.run(engine.decide(judged))
    assert (done.status, done.decisions[0]["by"], done.decisions[0]["decision"]) == ("cancelled", "ann", "rejected")
    assert ledger_entries(state_dir) == []

    _start(store, key="n-2")
    at = "2026-01-01T00:00:00.000000Z"
    root = people.administer(store, "add", "root", token=None, at=at, roles=["admin"])["token"]
    bob = people.administer(store, "add", "bob", token=root, at=at, roles=["editor"])["token"]
    # a task started before team mode may still be rejected (never approved): judged as bob
    judged = engine.judge("n-2", "reject", token=bob, reason="not today")
    assert judged.by == "bob"
    people.administer(store, "rotate", "bob", token=root, at=at)
    with pytest.raises(Refused) as refused:
        asyncio.run(engine.decide(judged))
    assert refused.value.code == "unauthenticated", refused.value
    assert store.load("n-2").status == "waiting_for_approval" and ledger_entries(state_dir) == []


def test_the_repair_of_a_failed_task_needs_an_approval_on_record_for_a_humans_entry(state_dir):
    """A task ended ``failed`` (its last event ``fail``'s) with no approval on record: an entry of
    its very content that says a human approved it proves no approval of this task's, so neither
    the repair nor ``doctor --repair`` ends it ``completed``; it stays for a human."""
    from workflow import reconcile
    from workflow.ops.doctor import doctor

    store = Store(state_dir)
    cp = _start(store)
    store.save_revision(cp, failpoint="checkpoint:outcome", status="failed", pending=[], expires_at=None,
                        failure="ended by bob: gave up",
                        event=("failed", {"by": "bob", "reason": "gave up", "status": "failed"}))
    store.ledger_record(key="n-1", task_id="n-1", action="send_note", title="Note to ops",
                        content_sha256=cp.content_sha256, channel="notes", approval="human", result="sent")
    assert reconcile.ended_by_fail(store.load("n-1"))
    assert reconcile.executed_after_fail(store, "n-1") == []
    assert doctor(store, repair=True)["repairs"] == [] and store.load("n-1").status == "failed"


def test_a_decision_naming_no_call_is_for_the_call_waiting_when_it_was_judged_never_a_later_one(state_dir):
    """Two reviewers reject a proposed call at once, neither naming it. The first's reject goes back
    to the model, whose new call waits. The second was judged while the first call waited: under
    the lock it is for that call (rejected already: the task unchanged), never for the model's new
    call, which nobody has seen yet. The same reviewer's reject again is the first one repeated;
    another's, judged after the new call came, must name it."""
    from workflow import Engine, effect_tool, start

    @effect_tool
    def post(effect: Any, text: str) -> str:
        """Post a line to the team's channel.

        Args:
            text: The line.
        """
        return "posted"

    def respond(call: Any) -> ModelStep:
        answers = [i for i in call.input if isinstance(i, dict) and i.get("type") == "function_call_output"]
        if len(answers) < 2:  # its first proposal, then a shorter one after a reject
            return ModelStep(output=[function_call("post", {"text": "hi all" if answers else "hello everyone"},
                                                   call_id=f"call_post_{len(answers) + 1}")])
        return ModelStep(output=[assistant_message("not posted")])

    app = Application(build_agent=lambda model: Agent(name="Poster", instructions="Post.", tools=[post],
                                                      model=model),
                      offline_model=lambda: ScriptedModel([ModelStep.respond(respond) for _ in range(4)]))
    store = Store(state_dir)
    asyncio.run(start(store, app, task_id="p-1", title="A post", input="Greet the team."))
    engine = Engine(store, app)
    second = engine.judge("p-1", "reject", by="bob", reason="too long")  # judged while call_post_1 waits
    first = asyncio.run(engine.decide(engine.judge("p-1", "reject", by="ann", reason="too long")))
    assert [p["call_id"] for p in first.pending] == ["call_post_2"]
    after = asyncio.run(engine.decide(second))
    assert after.status == "waiting_for_approval" and after.revision == first.revision
    assert [p["call_id"] for p in after.pending] == ["call_post_2"] and len(after.decisions) == 1
    again = asyncio.run(engine.decide(engine.judge("p-1", "reject", by="ann", reason="too long")))
    assert again.revision == first.revision and len(again.decisions) == 1
    with pytest.raises(Refused) as unnamed:  # judged now: it may be meant for call_post_1, seen before
        engine.judge("p-1", "reject", by="bob", reason="too long")
    assert unnamed.value.code == "usage" and "call_post_2" in str(unnamed.value)
    last = asyncio.run(engine.decide(engine.judge("p-1", "reject", by="bob", reason="too long",
                                                  call_id="call_post_2")))
    assert [d["call_id"] for d in last.decisions] == ["call_post_1", "call_post_2"]
    assert last.status == "cancelled" and ledger_entries(state_dir) == []


def test_each_command_builds_a_new_scripted_model_and_one_step_answers_each_request(state_dir):
    """What docs/api.md says of an offline ``ScriptedModel``: ``call.input`` is a list of input
    items starting with the user's input; ``offline_model`` is called for each command (and for
    each run of an approval with edits), each request taking one step; one step too few in a
    decision leaves it recorded, and the same decision again finishes it."""
    from workflow import Approve, decide, effect_tool, read_task, start

    @effect_tool
    def post(effect: Any, text: str) -> str:
        """Post a line.

        Args:
            text: The line.
        """
        return f"posted {text}"

    seen: list[Any] = []

    def respond(call: Any) -> ModelStep:
        seen.append(call.input)
        last = call.input[-1]
        if last.get("type") != "function_call_output":
            return ModelStep(output=[function_call("post", {"text": "hi"}, call_id="c1")])
        if "edits" in str(last["output"]):
            return ModelStep(output=[function_call("post", {"text": "hello"}, call_id="c2")])
        return ModelStep(output=[assistant_message(f"done: {last['output']}")])

    steps = [1, 1, 1, 1, 0, 1]  # per model built: start, two runs with edits; start, a decision short, again
    app = Application(build_agent=lambda model: Agent(name="Poster", instructions="Post.", tools=[post],
                                                      model=model),
                      offline_model=lambda: ScriptedModel([ModelStep.respond(respond)] * steps.pop(0)))
    store = Store(state_dir)
    asyncio.run(start(store, app, task_id="p-1", title="A post", input="Greet the team."))
    assert seen[0] == [{"role": "user", "content": "Greet the team."}]
    done = asyncio.run(decide(store, app, "p-1", {"c1": Approve(edits={"text": "hello"})}, by="ann"))
    assert done.status == "completed" and done.final_output == "done: posted hello" and steps == [1, 0, 1]
    assert [i.get("type") for i in seen[-1][-2:]] == ["function_call", "function_call_output"]
    asyncio.run(start(store, app, task_id="p-2", title="A post", input="Greet the team."))
    with pytest.raises(Refused, match="UnexpectedModelCall.*; the same decision again finishes it"):
        asyncio.run(decide(store, app, "p-2", {"c1": Approve()}, by="ann"))
    assert read_task(store, "p-2").decisions[0]["decision"] == "approved"
    assert asyncio.run(decide(store, app, "p-2", {"c1": Approve()}, by="ann")).status == "completed"
    assert steps == []
