"""``examples/own_tool.py``: another project's agent and effectful tool (``send_email``) on the public
API, run from a folder holding only copies of ``state/``, ``workflow/`` and that one file.

Proves the library is reusable by copy, unedited: the same guarantees as the publisher's (no
approval, no effect; one effect per idempotency key; a reject reaches the model; a tampered or
rolled-back checkpoint cannot cause a second effect; a crash at any durable write, then the same
command, leaves exactly one outbox entry).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

import example_copies as copies
from example_copies import copied_from, make_template, ok, stopped, where_code

START = ["start", "--key", "mail-1", "--to", "ana@example.com", "--subject", "Launch", "--body",
         "We launch on Monday.", "--json"]
APPROVE = ["decide", "--key", "mail-1", "--decision", "approve", "--by", "alice", "--json"]
WHERE = where_code("own_tool.py")


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project folder with only ``state/``, ``workflow/`` and ``examples/own_tool.py`` (copied)."""
    return make_template(tmp_path_factory.mktemp("own-project"), "own_tool.py")


@pytest.fixture
def project(template: Path, tmp_path: Path) -> Path:
    """A fresh copy of :func:`template` for one test (its state dir: ``<project>/state-dir``)."""
    folder = tmp_path / "project"
    shutil.copytree(template, folder)
    return folder


def run(project: Path, *args: str, env: dict[str, str] | None = None,
        code: str | None = None) -> subprocess.CompletedProcess[str]:
    """``python examples/own_tool.py ARGS`` in ``project`` (:func:`example_copies.run`)."""
    return copies.run(project, "own_tool.py", *args, env=env, code=code)


def outbox(project: Path) -> list[dict[str, Any]]:
    """The outbox entries, read without the example's code."""
    folder = project / "state-dir" / "outbox"
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.json"))] \
        if folder.exists() else []


def test_own_tool_runs_from_a_copy_of_the_library_alone(project):
    """The imported ``workflow`` and ``state`` are the copies: nothing comes from the repository."""
    proc = run(project, "outbox", "--json", code=WHERE)
    assert ok(proc) == {"entries": []}
    assert copied_from(proc, project)


def test_pause_then_approve_in_a_new_process_sends_once_and_again_sends_nothing(project):
    task = ok(run(project, *START))
    assert task["status"] == "waiting_for_approval" and outbox(project) == []
    [pending] = task["pending"]
    assert pending["tool"] == "send_email" and pending["arguments"]["to"] == "ana@example.com"
    assert Path(task["checkpoint_path"]).exists()
    done = ok(run(project, *APPROVE))
    assert done["status"] == "completed" and done["pending"] == []
    assert "ana@example.com" in done["final_output"]
    assert [(e["idempotency_key"], e["to"], e["subject"]) for e in outbox(project)] == [
        ("mail-1", "ana@example.com", "Launch")]
    again = ok(run(project, *APPROVE))
    assert again["status"] == "completed" and len(outbox(project)) == 1
    listed = ok(run(project, "outbox", "--json"))
    assert listed == {"entries": [{"idempotency_key": "mail-1", "to": "ana@example.com", "subject": "Launch"}]}


def test_reject_sends_nothing_and_the_reason_reaches_the_models_final_output(project):
    ok(run(project, *START))
    task = ok(run(project, "decide", "--key", "mail-1", "--decision", "reject", "--by", "bob",
                  "--reason", "wrong date, say Tuesday", "--json"))
    assert task["status"] == "cancelled" and outbox(project) == []
    assert "wrong date, say Tuesday" in task["final_output"]
    stopped(run(project, *APPROVE))  # a rejected call can never be approved
    assert outbox(project) == []


def test_tampered_checkpoint_is_refused_and_sends_nothing(project):
    task = ok(run(project, *START))
    path = Path(task["checkpoint_path"])
    path.write_text(path.read_text(encoding="utf-8").replace("ana@example.com", "eve@example.com"),
                    encoding="utf-8")
    before = path.read_bytes()
    stopped(run(project, *APPROVE))
    assert outbox(project) == [] and path.read_bytes() == before


def test_pre_approval_checkpoint_put_back_after_the_effect_still_one_entry(project):
    ok(run(project, *START))
    tasks = project / "state-dir" / "checkpoints"
    backup = project / "backup"
    shutil.copytree(tasks, backup)
    ok(run(project, *APPROVE))
    shutil.rmtree(tasks)
    shutil.copytree(backup, tasks)  # the task's files restored from a backup made before the approval
    task = ok(run(project, *APPROVE))
    assert task["status"] == "completed" and len(outbox(project)) == 1


@pytest.mark.parametrize("command", ["start", "approve"])
def test_crash_at_every_durable_write_then_the_same_command_leaves_exactly_one_entry(template, tmp_path,
                                                                                    command):
    """kill -9 (``HITL_FAILPOINT``: ``os._exit``, no cleanup) at each boundary the flow reaches,
    enumerated by ``HITL_FAILPOINT_LOG`` (each name once: the first time it is reached); then the
    same command (then, after a crash in ``start``, approve): completed, exactly one outbox entry."""
    args = START if command == "start" else APPROVE
    probe = tmp_path / "probe"
    shutil.copytree(template, probe)
    if command == "approve":
        ok(run(probe, *START))
        shutil.copytree(probe / "state-dir", tmp_path / "started")
    names = copies.boundaries(probe, "own_tool.py", *args)
    assert any(n.startswith("ledger:record") for n in names) == (command == "approve"), names
    for name in names:
        project = tmp_path / name.replace(":", "-")
        shutil.copytree(template, project)
        if command == "approve":
            shutil.copytree(tmp_path / "started", project / "state-dir")
        crashed = run(project, *args, env={"HITL_FAILPOINT": name})
        assert crashed.returncode == 86, (name, crashed.stderr)
        again = ok(run(project, *args))  # the same command finishes what the crash interrupted
        final = again if command == "approve" else ok(run(project, *APPROVE))
        assert final["status"] == "completed", (name, final)
        assert len(outbox(project)) == 1, name


def test_the_size_docs_api_states_for_the_example_is_its_size():
    """docs/api.md says how many lines the whole application takes: the file's count."""
    import re

    from conftest import ROOT

    said = re.search(r"a command line\) in (\d+) lines", (ROOT / "docs" / "api.md").read_text(encoding="utf-8"))
    assert said is not None
    assert int(said[1]) == len((ROOT / "examples" / "own_tool.py").read_text(encoding="utf-8").splitlines())
