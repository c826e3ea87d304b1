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
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT

REQUEST = "order 4417: refund 19.99, the parcel arrived broken"
START = ["start", "--key", "r-1", "--request", REQUEST, "--json"]
APPROVE = ["decide", "--key", "r-1", "--decision", "approve", "--by", "alice", "--json"]
CAPPED = ["decide", "--key", "r-1", "--decision", "reject", "--by", "alice", "--reason",
          "at most 15.00: the box was fine", "--json"]
PROPOSED = {"order_id": "4417", "amount_cents": 1999, "reason": "the parcel arrived broken"}


def call_of(arguments: dict[str, Any]) -> str:
    """The call ID the offline model gives a call with ``arguments``."""
    return "call_" + hashlib.sha256(json.dumps(arguments, sort_keys=True).encode()).hexdigest()[:16]
WHERE = ("import atexit, runpy, sys; atexit.register(lambda: print('FROM', sys.modules['workflow'].__file__, "
         "sys.modules['state'].__file__, file=sys.stderr)); sys.argv = ['examples/refund_agent.py', *sys.argv[1:]]; "
         "runpy.run_path('examples/refund_agent.py', run_name='__main__')")


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project folder with only ``state/``, ``workflow/`` and ``examples/refund_agent.py`` (copied)."""
    project = tmp_path_factory.mktemp("refund-project")
    for package in ("state", "workflow"):
        shutil.copytree(ROOT / package, project / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (project / "examples").mkdir()
    shutil.copy2(ROOT / "examples" / "refund_agent.py", project / "examples" / "refund_agent.py")
    return project


@pytest.fixture
def project(template: Path, tmp_path: Path) -> Path:
    """A fresh copy of :func:`template` for one test (its state dir: ``<project>/state-dir``)."""
    folder = tmp_path / "project"
    shutil.copytree(template, folder)
    return folder


def run(project: Path, *args: str, env: dict[str, str] | None = None,
        code: str | None = None) -> subprocess.CompletedProcess[str]:
    """``python examples/refund_agent.py ARGS`` in ``project``, a new process (no HITL_ or OPENAI_
    variable but ``HITL_STATE_DIR`` and ``env``); ``code``: run that ``-c`` program instead."""
    full = {k: v for k, v in os.environ.items()
            if not k.startswith(("HITL_", "OPENAI_")) and k != "PYTHONPATH"}
    full.update({"HITL_STATE_DIR": str(project / "state-dir"), **(env or {})})
    argv = [sys.executable, *(["-c", code] if code else ["examples/refund_agent.py"]), *args]
    return subprocess.run(argv, capture_output=True, text=True, encoding="utf-8", env=full,
                          timeout=180, cwd=project)


def ok(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout)


def stopped(proc: subprocess.CompletedProcess[str]) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1 and lines[0].startswith("STOPPED: "), proc.stderr
    return lines[0]


def refunds(project: Path) -> list[dict[str, Any]]:
    """The refunds made, read without the example's code."""
    folder = project / "state-dir" / "refunds"
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.json"))] \
        if folder.exists() else []


def test_refund_agent_runs_from_a_copy_of_the_library_alone(project):
    proc = run(project, "refunds", "--json", code=WHERE)
    assert ok(proc) == {"refunds": []}
    where = proc.stderr.split("FROM ", 1)[1].split()
    assert [Path(p).resolve() for p in where] == [project.resolve() / "workflow" / "__init__.py",
                                                  project.resolve() / "state" / "__init__.py"]


def test_the_model_proposes_the_arguments_and_the_task_waits_with_them(project):
    task = ok(run(project, *START))
    assert task["status"] == "waiting_for_approval" and refunds(project) == []
    [pending] = task["pending"]
    assert pending["tool"] == "issue_refund" and pending["arguments"] == PROPOSED


def test_approve_refunds_exactly_what_was_proposed_once_and_again_nothing(project):
    ok(run(project, *START))
    done = ok(run(project, *APPROVE))
    assert done["status"] == "completed" and done["pending"] == []
    assert refunds(project) == [{"idempotency_key": "r-1", **PROPOSED}]
    again = ok(run(project, *APPROVE))
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
    done = ok(run(project, *APPROVE))
    assert done["status"] == "completed"
    assert refunds(project) == [{"idempotency_key": "r-1", **PROPOSED, "amount_cents": 1500}]
    ok(run(project, *APPROVE))
    assert len(refunds(project)) == 1


def test_a_reject_the_model_accepts_ends_cancelled_with_no_refund(project):
    ok(run(project, *START))
    task = ok(run(project, "decide", "--key", "r-1", "--decision", "reject", "--by", "bob", "--reason",
                  "no refund: the order was never paid", "--json"))
    assert task["status"] == "cancelled" and refunds(project) == []
    assert "never paid" in task["final_output"]
    stopped(run(project, *APPROVE))  # the rejected call can never be approved
    assert refunds(project) == []


def test_approve_with_edits_refunds_the_edited_amount_once(project):
    ok(run(project, *START))
    task = ok(run(project, *APPROVE[:-1], "--edit", "amount_cents=1000", "--json"))
    assert task["status"] == "completed"
    assert refunds(project) == [{"idempotency_key": "r-1", **PROPOSED, "amount_cents": 1000}]


def test_tampered_checkpoint_is_refused_and_refunds_nothing(project):
    task = ok(run(project, *START))
    path = Path(task["checkpoint_path"])
    path.write_text(path.read_text(encoding="utf-8").replace("1999", "9999"), encoding="utf-8")
    before = path.read_bytes()
    stopped(run(project, *APPROVE))
    assert refunds(project) == [] and path.read_bytes() == before


def test_pre_approval_checkpoint_put_back_after_the_effect_still_one_refund(project):
    ok(run(project, *START))
    tasks = project / "state-dir" / "checkpoints"
    backup = project / "backup"
    shutil.copytree(tasks, backup)
    ok(run(project, *APPROVE))
    shutil.rmtree(tasks)
    shutil.copytree(backup, tasks)
    task = ok(run(project, *APPROVE))
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
    assert "rejected" in stopped(run(project, *APPROVE))
    assert refunds(project) == []


def test_a_sticky_approval_is_refused_where_the_model_proposes(project):
    ok(run(project, *START))
    code = ("import asyncio, sys; sys.argv = ['x']; sys.path.insert(0, 'examples'); import refund_agent as r; "
            "from workflow import Approve, decide, open_store; "
            "asyncio.run(decide(open_store(r.STATE_DIR), r.APP, 'r-1', Approve(always=True), by='alice'))")
    proc = run(project, code=code)
    assert proc.returncode != 0 and "without" in proc.stderr and refunds(project) == []


def _boundaries(project: Path, *args: str) -> list[str]:
    log = project / "failpoints.log"
    ok(run(project, *args, env={"HITL_FAILPOINT_LOG": str(log)}))
    names = list(dict.fromkeys(log.read_text(encoding="utf-8").split()))
    log.unlink()
    return names


@pytest.mark.parametrize("command", ["start", "reject", "approve"])
def test_crash_at_every_durable_write_then_the_same_command_leaves_exactly_one_refund(template, tmp_path,
                                                                                     command):
    """kill -9 (``HITL_FAILPOINT``: ``os._exit``) at each boundary the command reaches, then the same
    command: it finishes what the crash interrupted. ``reject`` is the capped reject (the model's new
    call waits); ``approve`` approves that new call. Then an approval of the call waiting, if any:
    exactly one refund, of the amount that call carried."""
    steps = {"start": START, "reject": [*CAPPED, "--call", call_of(PROPOSED)],  # the call as shown
             "approve": [*APPROVE, "--call", call_of({**PROPOSED, "amount_cents": 1500})]}
    order = ["start", "reject", "approve"]
    probe = tmp_path / "probe"
    shutil.copytree(template, probe)
    for earlier in order[:order.index(command)]:
        ok(run(probe, *steps[earlier]))
    (probe / "state-dir").mkdir(exist_ok=True)  # before start: an empty store
    shutil.copytree(probe / "state-dir", tmp_path / "before")
    names = _boundaries(probe, *steps[command])
    assert any(n.startswith("ledger:record") for n in names) == (command == "approve"), names
    for name in names:
        project = tmp_path / name.replace(":", "-")
        shutil.copytree(template, project)
        shutil.copytree(tmp_path / "before", project / "state-dir")
        crashed = run(project, *steps[command], env={"HITL_FAILPOINT": name})
        assert crashed.returncode == 86, (name, crashed.stderr)
        again = ok(run(project, *steps[command]))  # the same command finishes what the crash interrupted
        assert again["status"] == ("completed" if command == "approve" else "waiting_for_approval"), (name, again)
        final = again if command == "approve" else ok(run(project, *APPROVE))  # the call waiting now
        assert final["status"] == "completed", (name, final)
        cents = 1999 if command == "start" else 1500
        assert refunds(project) == [{"idempotency_key": "r-1", **PROPOSED, "amount_cents": cents}], name
