"""``examples/refund_agent.py``: an agent that composes its own arguments (``issue_refund``), gated by a
human who approves the call as the model proposed it, run from a folder holding only copies of
``state/``, ``workflow/`` and that one file.

No content is given at start. The checks: the proposed arguments wait in ``pending``; approve runs
exactly those, once; a reject's reason goes back to the model, whose new call waits for a human
again and, approved, refunds once; approve twice is one refund; a crash at every durable write of
start and of each decision (naming the call it decides), then the same command, leaves exactly one
refund; a tampered checkpoint
is refused; a checkpoint put back from before the approval, or from before a reject, never makes a
second refund or runs the rejected call.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

import example_copies as copies
from example_copies import copied_from, make_template, ok, stopped, where_code

REQUEST = "order 4417: refund 19.99, the parcel arrived broken"
START = ["start", "--key", "r-1", "--request", REQUEST, "--json"]
APPROVE = ["decide", "--key", "r-1", "--decision", "approve", "--by", "alice", "--json"]  # then: --call
CAPPED = ["decide", "--key", "r-1", "--decision", "reject", "--by", "alice", "--reason",
          "at most 15.00: the box was fine", "--json"]
PROPOSED = {"order_id": "4417", "amount_cents": 1999, "reason": "the parcel arrived broken"}


def call_of(arguments: dict[str, Any]) -> str:
    """The call ID the offline model gives a call with ``arguments``."""
    return "call_" + hashlib.sha256(json.dumps(arguments, sort_keys=True).encode()).hexdigest()[:16]


#: Approve the call the reviewer saw (an approval names it): the first proposal, or the capped one.
FIRST = [*APPROVE, "--call", call_of(PROPOSED)]
SECOND = [*APPROVE, "--call", call_of({**PROPOSED, "amount_cents": 1500})]
WHERE = where_code("refund_agent.py")


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project folder with only ``state/``, ``workflow/`` and ``examples/refund_agent.py`` (copied)."""
    return make_template(tmp_path_factory.mktemp("refund-project"), "refund_agent.py")


@pytest.fixture
def project(template: Path, tmp_path: Path) -> Path:
    """A fresh copy of :func:`template` for one test (its state dir: ``<project>/state-dir``)."""
    folder = tmp_path / "project"
    shutil.copytree(template, folder)
    return folder


def run(project: Path, *args: str, env: dict[str, str] | None = None,
        code: str | None = None) -> subprocess.CompletedProcess[str]:
    """``python examples/refund_agent.py ARGS`` in ``project`` (:func:`example_copies.run`)."""
    return copies.run(project, "refund_agent.py", *args, env=env, code=code)


def refunds(project: Path) -> list[dict[str, Any]]:
    """The refunds made, read without the example's code."""
    folder = project / "state-dir" / "refunds"
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.json"))] \
        if folder.exists() else []


def test_doctor_of_the_library_names_the_applications_own_command_in_its_next_steps(project):
    """A decision recorded and then a crash before the refund (``checkpoint:decision`` written):
    ``python -m workflow doctor``, run with the library alone, tells the person to decide that call
    again and names the command the application gave (``Application.command``), recorded in the
    task's signed checkpoint at start; the same command then refunds once."""
    ok(run(project, *START))
    crashed = run(project, *FIRST, env={"HITL_FAILPOINT": "checkpoint:decision:after"})
    assert crashed.returncode == 86, crashed.stderr
    doctor = run(project, code="import runpy, sys; sys.argv = ['workflow', 'doctor', '--json']; "
                 "runpy.run_module('workflow', run_name='__main__', alter_sys=True)")
    assert doctor.returncode == 1 and doctor.stderr.startswith("STOPPED: doctor found 1 inconsistency")
    [finding] = json.loads(doctor.stdout)["findings"]
    assert finding["kind"] == "decision_not_finished", finding
    assert finding["action"] == (f"decide call {call_of(PROPOSED)} of task r-1: approve (with the application's "
                                 "own command: python examples/refund_agent.py)"), finding
    assert ok(run(project, *FIRST))["status"] == "completed" and len(refunds(project)) == 1


def test_refund_agent_runs_from_a_copy_of_the_library_alone(project):
    proc = run(project, "refunds", "--json", code=WHERE)
    assert ok(proc) == {"refunds": []}
    assert copied_from(proc, project)


@pytest.mark.parametrize("request_text", ["", "   "])
def test_an_empty_request_is_one_stopped_line_and_nothing_saved(project, request_text):
    """A request with no text: the model finds no refund to propose; one ``STOPPED:`` line, exit
    1, no traceback, and no task saved."""
    proc = run(project, "start", "--key", "r-9", "--request", request_text)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("STOPPED: ") and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert not (project / "state-dir" / "checkpoints").exists() or not any(
        (project / "state-dir" / "checkpoints").iterdir())


def test_the_model_proposes_the_arguments_and_the_task_waits_with_them(project):
    task = ok(run(project, *START))
    assert task["status"] == "waiting_for_approval" and refunds(project) == []
    [pending] = task["pending"]
    assert pending["tool"] == "issue_refund" and pending["arguments"] == PROPOSED


def test_approve_refunds_exactly_what_was_proposed_once_and_again_nothing(project):
    ok(run(project, *START))
    assert "names the call it approves" in stopped(run(project, *APPROVE))  # which call did you see?
    done = ok(run(project, *FIRST))
    assert done["status"] == "completed" and done["pending"] == []
    assert refunds(project) == [{"idempotency_key": "r-1", **PROPOSED}]
    again = ok(run(project, *FIRST))
    assert again["status"] == "completed" and len(refunds(project)) == 1
    assert ok(run(project, "refunds", "--json")) == {"refunds": [{"idempotency_key": "r-1", **PROPOSED}]}


def test_a_reject_goes_back_to_the_model_whose_new_call_waits_and_approved_refunds_once(project):
    ok(run(project, *START))
    first = ok(run(project, "refunds", "--json"))
    task = ok(run(project, *CAPPED))
    assert task["status"] == "waiting_for_approval" and refunds(project) == [] and first == {"refunds": []}
    [pending] = task["pending"]
    assert pending["arguments"] == {**PROPOSED, "amount_cents": 1500}
    assert [d["decision"] for d in task["decisions"]] == ["rejected"]
    assert pending["call_id"] != task["decisions"][0]["call_id"]  # a new call, decided anew
    done = ok(run(project, *SECOND))
    assert done["status"] == "completed"
    assert refunds(project) == [{"idempotency_key": "r-1", **PROPOSED, "amount_cents": 1500}]
    ok(run(project, *SECOND))
    assert len(refunds(project)) == 1


def test_the_same_reject_twice_is_the_decision_made_and_the_models_new_call_still_waits(project):
    """A reject naming no call, given twice (after a crash, or a double click): the second is the
    first again, not a reject of the capped call the model made since, which nobody has seen.
    Another reviewer's reject naming no call, or the same reviewer's with another reason, may have
    been meant for the first call (looked at before the first reject): it is refused, nothing
    decided, and asked to name the call; named, it rejects the capped call."""
    ok(run(project, *START))
    first = ok(run(project, *CAPPED))
    again = ok(run(project, *CAPPED))
    assert again["status"] == "waiting_for_approval" and again["pending"] == first["pending"]
    assert again["revision"] == first["revision"] and len(again["decisions"]) == 1
    capped = call_of({**PROPOSED, "amount_cents": 1500})
    for other in ([*CAPPED[:6], "bob", *CAPPED[7:]], [*CAPPED[:8], "at most 10.00", "--json"]):
        refused = stopped(run(project, *other))
        assert "names the call it rejects" in refused and capped in refused, refused
    bob = ok(run(project, *CAPPED[:6], "bob", *CAPPED[7:], "--call", capped))
    assert len(bob["decisions"]) == 2 and bob["decisions"][-1]["by"] == "bob"
    assert bob["decisions"][-1]["call_id"] == capped and refunds(project) == []


def test_a_reject_the_model_accepts_ends_cancelled_with_no_refund(project):
    ok(run(project, *START))
    task = ok(run(project, "decide", "--key", "r-1", "--decision", "reject", "--by", "bob", "--reason",
                  "no refund: the order was never paid", "--json"))
    assert task["status"] == "cancelled" and refunds(project) == []
    assert "never paid" in task["final_output"]
    stopped(run(project, *FIRST))  # the rejected call can never be approved
    assert refunds(project) == []


def test_approve_with_edits_refunds_the_edited_amount_once(project):
    ok(run(project, *START))
    task = ok(run(project, *FIRST[:-3], "--call", call_of(PROPOSED), "--edit", "amount_cents=1000", "--json"))
    assert task["status"] == "completed"
    assert refunds(project) == [{"idempotency_key": "r-1", **PROPOSED, "amount_cents": 1000}]


@pytest.mark.parametrize("edit", ["amount_cents=100.5", "amount_cents=true", "order_id=4417", 'amount_cents="5"',
                                  "amount_cents=-5", "amount_cents=0"])
def test_an_edit_that_does_not_fit_the_tools_parameters_is_refused_before_it_is_recorded(project, edit):
    """An edited value of the wrong type (a fraction of a cent, a boolean, a number for the order
    ID, text for the amount) could never be carried by the model's call: the SDK would refuse the
    call, and a task with that edit on record would be stuck. An amount of 0 or less breaks the
    parameter's own bound (``Field(gt=0)``). Each is refused against the tool's JSON
    schema before anything is recorded (one ``STOPPED:`` line naming the argument); the same call
    then takes a fitting edit and refunds once."""
    ok(run(project, *START))
    refused = stopped(run(project, *FIRST, "--edit", edit))
    assert "the edits do not fit the parameters of issue_refund" in refused and "nothing recorded" in refused
    again = ok(run(project, *FIRST, "--edit", "amount_cents=500"))
    assert again["status"] == "completed" and [d["by"] for d in again["decisions"]] == ["alice", "alice"]
    assert refunds(project) == [{"idempotency_key": "r-1", **PROPOSED, "amount_cents": 500}]


def test_an_edit_of_one_field_given_twice_is_refused_not_the_last_one_kept(project):
    ok(run(project, *START))
    refused = stopped(run(project, *FIRST, "--edit", "amount_cents=500", "--edit", "amount_cents=700"))
    assert "given twice" in refused and refunds(project) == []
    done = ok(run(project, *FIRST))  # nothing was recorded: the call is still there to approve
    assert len(done["decisions"]) == 1 and refunds(project) == [{"idempotency_key": "r-1", **PROPOSED}]


def test_tampered_checkpoint_is_refused_and_refunds_nothing(project):
    task = ok(run(project, *START))
    path = Path(task["checkpoint_path"])
    path.write_text(path.read_text(encoding="utf-8").replace("1999", "9999"), encoding="utf-8")
    before = path.read_bytes()
    stopped(run(project, *FIRST))
    assert refunds(project) == [] and path.read_bytes() == before


def test_pre_approval_checkpoint_put_back_after_the_effect_still_one_refund(project):
    ok(run(project, *START))
    tasks = project / "state-dir" / "checkpoints"
    backup = project / "backup"
    shutil.copytree(tasks, backup)
    ok(run(project, *FIRST))
    shutil.rmtree(tasks)
    shutil.copytree(backup, tasks)
    task = ok(run(project, *FIRST))
    assert task["status"] == "completed" and len(refunds(project)) == 1


def test_pre_reject_checkpoint_put_back_never_runs_the_rejected_call(project):
    """The reject of one call is kept where no restored checkpoint can undo it (its own rejection
    record): approving that call from an older copy is refused, and nothing is refunded."""
    ok(run(project, *START))
    tasks = project / "state-dir" / "checkpoints"
    backup = project / "backup"
    shutil.copytree(tasks, backup)
    ok(run(project, *CAPPED))
    shutil.rmtree(tasks)
    shutil.copytree(backup, tasks)  # the task waits again at the call that was rejected
    assert "rejected" in stopped(run(project, *FIRST))
    assert refunds(project) == []


@pytest.mark.parametrize("edit", [[], ["--edit", "amount_cents=500"]])
def test_a_failed_task_put_back_to_before_its_approval_never_refunds(project, edit):
    """The approval (as proposed, or with edits) recorded and its run cut before the refund; a person
    ends the task with ``fail``; the checkpoint from before the approval is put back. Neither the
    approval of the original call, nor a reject whose reason would make the model propose a new
    call, runs anything: the task's end mark outlives the older copy, and the same ``fail`` ends it
    again. Nothing is refunded."""
    ok(run(project, *START))
    tasks = project / "state-dir" / "checkpoints"
    backup = project / "backup"
    shutil.copytree(tasks, backup)
    cut = run(project, *FIRST, *edit, env={"HITL_FAILPOINT": "effect:intent:before"})
    assert cut.returncode == 86, cut.stderr
    ended = run(project, "fail", "--key", "r-1", "--by", "bob", "--reason", "refunded by phone")
    assert ended.returncode == 0 and ended.stdout == "task r-1: failed\n", ended.stderr
    shutil.rmtree(tasks)
    shutil.copytree(backup, tasks)  # the task waits again at the call as first proposed
    for args in (FIRST, CAPPED):
        assert "was ended by bob at" in stopped(run(project, *args))
    assert refunds(project) == []
    again = run(project, "fail", "--key", "r-1", "--by", "bob", "--reason", "put back by mistake")
    assert again.returncode == 0 and again.stdout == "task r-1: failed\n", again.stderr
    assert refunds(project) == []


def test_a_sticky_approval_is_refused_where_the_model_proposes(project):
    ok(run(project, *START))
    code = ("import asyncio, sys; sys.argv = ['x']; sys.path.insert(0, 'examples'); import refund_agent as r; "
            "from workflow import Approve, decide, open_store; "
            f"asyncio.run(decide(open_store(r.STATE_DIR), r.APP, 'r-1', Approve(always=True), by='alice', "
            f"call_id={call_of(PROPOSED)!r}))")
    proc = run(project, code=code)
    assert proc.returncode != 0 and "without" in proc.stderr and refunds(project) == []


@pytest.mark.parametrize("command", ["start", "reject", "reject-unnamed", "approve", "edit"])
def test_crash_at_every_durable_write_then_the_same_command_leaves_exactly_one_refund(template, tmp_path,
                                                                                     command):
    """kill -9 (``HITL_FAILPOINT``: ``os._exit``) at each boundary the command reaches, then the same
    command: it finishes what the crash interrupted. ``reject`` is the capped reject (the model's new
    call waits); ``reject-unnamed`` the same without ``--call`` (the contract's form: repeated, it is
    the decision already made, never one on the model's new call); ``approve`` approves that new
    call; ``edit`` approves the first call with an
    edited amount (the model's call carrying it is approved for the reviewer and run). Then an
    approval of the call waiting, if any: exactly one refund, of the amount that call carried."""
    steps = {"start": START, "reject": [*CAPPED, "--call", call_of(PROPOSED)],  # the call as shown
             "reject-unnamed": CAPPED, "approve": SECOND, "edit": [*FIRST, "--edit", "amount_cents=500"]}
    order = {"edit": ["start", "edit"], "reject-unnamed": ["start", "reject-unnamed"]}.get(
        command, ["start", "reject", "approve"])
    probe = tmp_path / "probe"
    shutil.copytree(template, probe)
    for earlier in order[:order.index(command)]:
        ok(run(probe, *steps[earlier]))
    (probe / "state-dir").mkdir(exist_ok=True)  # before start: an empty store
    shutil.copytree(probe / "state-dir", tmp_path / "before")
    names = copies.boundaries(probe, "refund_agent.py", *steps[command])
    assert any(n.startswith("ledger:record") for n in names) == (command in ("approve", "edit")), names
    for name in names:
        project = tmp_path / name.replace(":", "-")
        shutil.copytree(template, project)
        shutil.copytree(tmp_path / "before", project / "state-dir")
        crashed = run(project, *steps[command], env={"HITL_FAILPOINT": name})
        assert crashed.returncode == 86, (name, crashed.stderr)
        again = ok(run(project, *steps[command]))  # the same command finishes what the crash interrupted
        finishes = command in ("approve", "edit")
        assert again["status"] == ("completed" if finishes else "waiting_for_approval"), (name, again)
        waiting = FIRST if command == "start" else SECOND  # approve the call waiting now
        final = again if finishes else ok(run(project, *waiting))
        assert final["status"] == "completed", (name, final)
        cents = {"start": 1999, "edit": 500}.get(command, 1500)
        assert refunds(project) == [{"idempotency_key": "r-1", **PROPOSED, "amount_cents": cents}], name


#: A ``-c`` program run in a project: ``fail`` of task r-1 through the library, then
#: ``settle``/``fail`` as asked by ``argv``; prints each outcome (the status, or ``refused: CODE``).
LIBRARY = """
import asyncio, runpy, sys
sys.argv = ['x']
from workflow import Refused, fail, open_store, read_task, settle
app = runpy.run_path('examples/refund_agent.py')['APP']
store = open_store('state-dir')
for step in STEPS:
    try:
        if step == 'fail':
            print(fail(store, 'r-1', reason='gave up', by='bob').status)
        else:
            call = read_task(store, 'r-1').pending[0]['call_id']
            print(asyncio.run(settle(store, app, 'r-1', step, by='bob', call_id=call, reason='looked')).status)
    except Refused as exc:
        print('refused:', exc.code)
"""


def library(project: Path, *steps: str) -> list[str]:
    """:data:`LIBRARY` with ``steps`` (``fail``, ``not_published``, ``published``): each printed line."""
    proc = run(project, code=f"STEPS = {list(steps)!r}\n" + LIBRARY)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    return proc.stdout.splitlines()


def test_a_crash_after_the_refund_before_its_ledger_entry_is_never_failed_the_same_approve_finishes(project):
    """The refund is made, then the process dies before its ledger entry (``ledger:record:before``).
    The call's write-ahead intent, recorded before the function was called, says it may have acted:
    ``fail`` is refused (``begun``), never ending as ``failed`` a task whose refund was made;
    ``python -m workflow doctor`` says the function was begun with no ledger entry after it, and
    names the same approve, which runs the function again under the same key: one refund."""
    ok(run(project, *START))
    crashed = run(project, *FIRST, env={"HITL_FAILPOINT": "ledger:record:before"})
    assert crashed.returncode == 86, crashed.stderr
    assert len(refunds(project)) == 1  # the function ran; no ledger entry says so
    assert library(project, "fail") == ["refused: begun"]
    doctor = run(project, code="import runpy, sys; sys.argv = ['workflow', 'doctor', '--json']; "
                 "runpy.run_module('workflow', run_name='__main__', alter_sys=True)")
    [finding] = json.loads(doctor.stdout)["findings"]
    assert finding["kind"] == "effect_unconfirmed", finding
    assert "its function (a local effect) was begun" in finding["detail"], finding
    assert finding["action"].startswith(f"decide call {call_of(PROPOSED)} of task r-1: approve"), finding
    assert finding["action"].endswith(
        f"settle call {call_of(PROPOSED)} of task r-1 as a person who checked found it: its effect done (outcome "
        "published) or not done (not_published) (with the application's own command: python "
        "examples/refund_agent.py)"), finding
    done = ok(run(project, *FIRST))
    assert done["status"] == "completed" and refunds(project) == [{"idempotency_key": "r-1", **PROPOSED}]
    assert library(project, "fail") == ["refused: executed"]


def test_a_local_effect_begun_is_settled_by_a_person_then_ended_or_recorded(project):
    """After that crash, when the function cannot finish: a person who looked settles it. Found not
    done, the task may then be ended ``failed``; found done, the ledger entry is written and the run
    finishes ``completed`` without calling the function again."""
    ok(run(project, *START))
    assert run(project, *FIRST, env={"HITL_FAILPOINT": "ledger:record:before"}).returncode == 86
    other = project.parent / "other"
    shutil.copytree(project, other)
    assert library(project, "not_published", "fail") == ["waiting_for_approval", "failed"]
    assert library(other, "published") == ["completed"]
    assert len(refunds(other)) == 1


def test_the_settle_and_fail_doctor_names_are_the_examples_own_commands(project):
    """doctor names ``settle`` and ``fail`` with the application's own command after that crash:
    the example has both. ``settle --outcome not-done`` then ``fail`` ends the task failed;
    in a copy, ``settle --outcome done`` records the refund made and finishes completed
    without a second refund. Neither prints anything on stderr: the settlement's trace record
    stays in the state dir (no hosted export, no warning about a missing API key)."""
    ok(run(project, *START))
    assert run(project, *FIRST, env={"HITL_FAILPOINT": "ledger:record:before"}).returncode == 86
    other = project.parent / "other-own"
    shutil.copytree(project, other)
    call = call_of(PROPOSED)
    found = run(project, "settle", "--key", "r-1", "--call", call, "--outcome", "not-done", "--by", "bob", "--json")
    assert ok(found)["status"] == "waiting_for_approval" and found.stderr == "", found.stderr
    ended = run(project, "fail", "--key", "r-1", "--by", "bob", "--reason", "the provider shows no refund", "--json")
    assert ok(ended)["status"] == "failed" and ended.stderr == "", ended.stderr
    done = run(other, "settle", "--key", "r-1", "--call", call, "--outcome", "done", "--by", "bob", "--json")
    assert ok(done)["status"] == "completed" and done.stderr == "", done.stderr
    assert len(refunds(other)) == 1
    assert run(other, "fail", "--key", "r-1", "--by", "bob", "--reason", "x").stderr.startswith("STOPPED: ")


def test_a_rejected_call_is_never_settled_in_place_of_the_capped_call_whose_effect_was_cut(project):
    """A reject with a cap, then the capped call's approve cut after its effect's intent: both calls
    share the channel's ledger key. Settling the rejected call (done or not done) is refused before
    anything is written; it never records the capped call's effect as made, nor its attempt as not
    done. The capped call's own settle then leads to one refund of the capped amount."""
    from conftest import snapshot

    ok(run(project, *START))
    ok(run(project, *CAPPED))
    assert run(project, *SECOND, env={"HITL_FAILPOINT": "effect:intent:after"}).returncode == 86
    state = project / "state-dir"
    for outcome in ("done", "not-done"):
        before = snapshot(state)
        line = stopped(run(project, "settle", "--key", "r-1", "--call", call_of(PROPOSED), "--outcome", outcome,
                           "--by", "carol", "--reason", "looked"))
        assert f"call {call_of(PROPOSED)} of task r-1 is not in doubt" in line, line
        assert snapshot(state) == before and refunds(project) == []
    capped = call_of({**PROPOSED, "amount_cents": 1500})
    # a call the task never had is named as such, with the task's calls, not as one out of doubt
    line = stopped(run(project, "settle", "--key", "r-1", "--call", "call_typo", "--outcome", "done", "--by", "carol"))
    assert line.startswith(f"STOPPED: task r-1 has no call 'call_typo' (its calls: {call_of(PROPOSED)}, {capped}); "
                           "nothing recorded"), line
    assert snapshot(state) == before and refunds(project) == []
    ok(run(project, "settle", "--key", "r-1", "--call", capped, "--outcome", "not-done", "--by", "carol", "--json"))
    assert ok(run(project, *SECOND))["status"] == "completed"
    assert [r["amount_cents"] for r in refunds(project)] == [1500]


def test_arguments_the_tool_refuses_are_refused_at_the_approve_with_nothing_recorded(project):
    """The model proposes a refund of 0.00, which the tool's own parameters refuse (``gt=0``): the
    SDK would end every run of that approval with ``ModelBehaviorError``. The approve is refused
    before anything is recorded, naming the argument, and a reject ends the task with no refund.
    An approval of such a call already on record (recorded by a version without this check: here
    the check is switched off in that one process) names ``fail``, which ends the task."""
    from conftest import snapshot

    for key in ("r-0", "r-1"):
        ok(run(project, "start", "--key", key, "--request", "order 1: refund 0.00, free", "--json"))
    call = call_of({**PROPOSED, "order_id": "1", "amount_cents": 0, "reason": "free"})
    state = project / "state-dir"
    before = snapshot(state)
    line = stopped(run(project, "decide", "--key", "r-0", "--decision", "approve", "--by", "alice", "--call", call))
    assert line == (f"STOPPED: task r-0: the arguments of call {call} do not fit the parameters of issue_refund "
                    "(amount_cents: Input should be greater than 0): the tool would refuse them when it runs; "
                    "reject it with a reason (the model proposes again), or approve it with edits that fit; "
                    "nothing recorded"), line
    assert snapshot(state) == before
    done = ok(run(project, "decide", "--key", "r-0", "--decision", "reject", "--by", "alice", "--call", call,
                  "--reason", "no refund of nothing", "--json"))
    assert done["status"] == "cancelled" and refunds(project) == []
    unchecked = ("import runpy, sys; import workflow.edits as e; e.check_runnable = lambda *a: None; "
                 "sys.argv = ['refund_agent.py', *sys.argv[1:]]; "
                 "runpy.run_path('examples/refund_agent.py', run_name='__main__')")
    approve = ["decide", "--key", "r-1", "--decision", "approve", "--by", "alice", "--call", call]
    assert "the model's response was malformed" in stopped(run(project, *approve, code=unchecked))
    line = stopped(run(project, *approve))
    assert "so the approval on record cannot be carried out; end the task with a fail, by a person, with a " \
           "reason" in line, line
    assert ok(run(project, "fail", "--key", "r-1", "--by", "bob", "--reason", "refund of nothing", "--json"))[
        "status"] == "failed"
    assert refunds(project) == []


def test_the_publishers_status_of_a_refund_task_names_the_refund_agents_command(project):
    """``run.py status`` and ``doctor`` read any store; for a task the refund agent started, whose
    decisions the publisher's commands refuse (another agent), they name the refund agent's own
    command, never ``run.py resume``."""
    from conftest import run_subprocess

    ok(run(project, *START))
    shown = run_subprocess(project / "state-dir", "status", "--task", "r-1")
    assert shown.code == 0, shown.err
    assert shown.out.splitlines()[-1] == ("  next: a task of another application (Refunds): its own command decides, "
                                          "settles and ends it: python examples/refund_agent.py"), shown.out
    assert run(project, *FIRST, env={"HITL_FAILPOINT": "checkpoint:decision:after"}).returncode == 86
    [finding] = json.loads(run_subprocess(project / "state-dir", "doctor", "--json").out)["findings"]
    assert finding["action"] == (f"decide call {call_of(PROPOSED)} of task r-1: approve (with the application's "
                                 "own command: python examples/refund_agent.py)"), finding


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_decision_of_another_applications_task_names_that_application_not_a_changed_agent(project):
    """The publisher's ``resume`` of a task the refund agent started, and the refund agent's
    ``decide`` of a task the publisher started, are refused as another application's task (its
    agent's name, and the command it recorded, if any), not as an agent that changed since the save
    (whose way out, the code that saved it or the expiry, is wrong here). Nothing is written."""
    from conftest import run_subprocess

    ok(run(project, *START))
    folder = project / "state-dir"
    assert run_subprocess(folder, "start", "--key", "p-1", "--title", "T", "--draft", "Hello.").code == 0
    before = _files(folder)
    theirs = run_subprocess(folder, "resume", "--task", "r-1", "--decision", "approve", "--by", "ann")
    assert theirs.code == 1 and theirs.err.strip() == (
        "STOPPED: task r-1 belongs to another application (Refunds), not this one; its decisions are made by "
        "its own command: python examples/refund_agent.py; nothing was decided"), theirs.err
    line = stopped(run(project, "decide", "--key", "p-1", "--decision", "approve", "--by", "ann"))
    assert line == ("STOPPED: task p-1 belongs to another application (Publisher), not this one; its decisions "
                    "are made by the application that started it; nothing was decided"), line
    assert _files(folder) == before
    # the same application, now recording a command it did not record then, with its agent changed:
    # still its own task, refused as an agent that changed (whose way out is the code that saved it)
    source = (project / "examples" / "refund_agent.py").read_text(encoding="utf-8")
    older = source.replace('    command="python examples/refund_agent.py")', ")")
    assert older != source
    (project / "examples" / "older_refunds.py").write_text(older, encoding="utf-8")
    assert copies.run(project, "older_refunds.py", "start", "--key", "o-1", "--request",
                      "order 4417: refund 19.99, the parcel arrived broken").returncode == 0
    changed = source.replace("model=model, instructions=(", "model=model, instructions=('Be brief. ' ")
    assert changed != source
    (project / "examples" / "refund_agent.py").write_text(changed, encoding="utf-8")
    line = stopped(run(project, "decide", "--key", "o-1", "--decision", "approve", "--by", "ann", "--call",
                       call_of(PROPOSED)))
    assert line.startswith("STOPPED: task o-1: the agent changed since it was saved: agent instructions changed"), line


#: ``python -m workflow doctor --json`` in the project, with the library alone.
WORKFLOW_DOCTOR = ("import runpy, sys; sys.argv = ['workflow', 'doctor', '--json']; "
                   "runpy.run_module('workflow', run_name='__main__', alter_sys=True)")


def _findings(project: Path) -> list[tuple[str, str]]:
    """(kind, the call it names or "") of each finding of the library's doctor."""
    report = json.loads(run(project, code=WORKFLOW_DOCTOR).stdout)
    return [(f["kind"], next((c for c in (call_of(PROPOSED), call_of({**PROPOSED, "amount_cents": 1500}))
                              if c in f["detail"]), "")) for f in report["findings"]]


def test_fail_after_a_reject_the_model_answered_leaves_doctor_consistent(project):
    """The first call rejected (the model proposed a capped one), then the task given up with
    ``fail``: the rejected call's part ended when the model got its answer, so a ``failed`` task
    that records that reject is no contradiction; doctor is consistent, nothing refunded."""
    ok(run(project, *START))
    ok(run(project, *CAPPED))
    ended = run(project, "fail", "--key", "r-1", "--by", "bob", "--reason", "gone", "--json")
    assert ok(ended)["status"] == "failed" and refunds(project) == []
    assert _findings(project) == []


@pytest.mark.parametrize("point, kind, after_fail", [
    ("ledger:record:after", "executed_not_recorded", "completed"),
    ("effect:intent:after", "effect_unconfirmed", "refused: begun"),
])
def test_a_crash_in_the_capped_calls_effect_is_judged_on_that_call_never_on_the_rejected_one(project, point, kind,
                                                                                              after_fail):
    """After a reject the model proposes a capped refund on the same channel; its approval is cut by a
    crash in its effect. The channel's intent and ledger entry are the capped call's: doctor names
    only that call (never "cancelled with an entry" or "with an intent" of the rejected one), and
    ``fail`` does what the table says for it (an entry: it completes; an effect begun: refused)."""
    ok(run(project, *START))
    ok(run(project, *CAPPED))
    assert run(project, *SECOND, env={"HITL_FAILPOINT": point}).returncode == 86
    assert _findings(project) == [(kind, call_of({**PROPOSED, "amount_cents": 1500}))]
    assert library(project, "fail") == [after_fail]
    if after_fail == "completed":  # and again: the task executed, whatever its rejected call says
        assert _findings(project) == [] and len(refunds(project)) == 1
        again = run(project, "fail", "--key", "r-1", "--by", "bob", "--reason", "x")
        capped = call_of({**PROPOSED, "amount_cents": 1500})
        assert again.returncode == 1 and again.stderr == (f"STOPPED: task r-1 (call {capped}) was already executed "
                                                          "(completed); an executed action is never cancelled\n"), \
            again.stderr


def test_a_capped_call_whose_function_fails_is_settled_not_done_then_failed(project):
    """After a reject, the capped call approved and its function failing (the provider gone): a person
    settles it not done, and ``fail`` ends the task, nothing refunded and doctor consistent; the
    rejected call's record is never read as evidence against that way out."""
    ok(run(project, *START))
    ok(run(project, *CAPPED))
    (project / "state-dir" / "refunds").write_text("not a folder", encoding="utf-8")  # the function raises
    assert run(project, *SECOND).returncode == 1
    (project / "state-dir" / "refunds").unlink()
    call = call_of({**PROPOSED, "amount_cents": 1500})
    found = run(project, "settle", "--key", "r-1", "--call", call, "--outcome", "not-done", "--by", "bob", "--json")
    assert ok(found)["status"] == "waiting_for_approval"
    assert _findings(project) == [("effect_not_sent", call)]
    ended = run(project, "fail", "--key", "r-1", "--by", "bob", "--reason", "the provider is gone", "--json")
    assert ok(ended)["status"] == "failed" and refunds(project) == [] and _findings(project) == []


def _unsigned(path: Path, **changes: Any) -> None:
    """Make the signed record at ``path`` what an earlier version wrote (its fields, no signature),
    with ``changes`` to its fields."""
    fields = {k: v for k, v in json.loads(path.read_text(encoding="utf-8")).items()
              if k not in ("record", "state_id", "mac")}
    path.write_text(json.dumps({**fields, **changes}), encoding="utf-8")


#: ``doctor --repair`` through the library's API: its report as JSON.
DOCTOR_REPAIR = ("import json; from workflow import open_store; from workflow.ops.doctor import doctor; "
                 "print(json.dumps(doctor(open_store('state-dir'), repair=True), default=str))")


@pytest.mark.parametrize("forged", [False, True])
def test_repair_signs_an_old_refund_exactly_as_the_model_was_told_it_and_never_a_forged_one(project, forged):
    """A refund of an order named in non-ASCII, its ledger entry and intent as an earlier version
    left them (no signature): ``doctor --repair`` (through the library) signs both, since the entry's
    result is, whole, the tool's answer in the signed saved run (however that escapes it). The same
    entry with the amount in its result forged is signed by nobody (``unsigned_unproven``), nor is
    its intent, which stands on it."""
    request = "order Zé44: refund 19.99, the parcel arrived broken"
    started = ok(run(project, "start", "--key", "r-1", "--request", request, "--json"))
    ok(run(project, *APPROVE, "--call", started["pending"][0]["call_id"]))
    [entry] = (project / "state-dir" / "ledger").glob("*.json")
    [intent] = (project / "state-dir" / "effects").glob("*.intent.json")
    result = json.loads(entry.read_text(encoding="utf-8"))["result"]
    assert result == {"refunded_cents": 1999, "order_id": "Zé44"}
    _unsigned(entry, **({"result": {**result, "refunded_cents": 999999}} if forged else {}))
    _unsigned(intent)
    report = json.loads(run(project, code=DOCTOR_REPAIR).stdout)
    if forged:
        assert report["repairs"] == [] and not report["consistent"]
        assert sorted(f["kind"] for f in report["findings"] if f["kind"] != "not_judged") == [
            "unsigned_unproven", "unsigned_unproven"]
        assert any("its result is what the signed checkpoint does not show" in f["detail"]
                   for f in report["findings"]), report
    else:
        assert [r["kind"] for r in report["repairs"]] == ["unsigned_record"] * 2 and report["consistent"], report
