"""``python -m workflow``: the read-only commands (``list``, ``status``, ``show``, ``ledger``,
``doctor``) over any application's store, with no application code and without the SDK: their
``--json`` is what ``run.py``'s prints for the same store, ``ledger`` names each entry's action,
and a refusal is one ``STOPPED:`` line that leaves the disk as it was."""

from __future__ import annotations

import json
import re
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, snapshot

#: Runs ``python -m workflow ARGS`` and says, on stderr, whether the SDK or the publisher was imported.
PROBE = ("import atexit, runpy, sys; atexit.register(lambda: print('IMPORTED', 'agents' in sys.modules, "
         "'agent' in sys.modules, 'cli' in sys.modules, file=sys.stderr)); sys.argv = ['workflow', *sys.argv[1:]]; "
         "runpy.run_module('workflow', run_name='__main__', alter_sys=True)")


def workflow_cli(state_dir: Path, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HITL_", "OPENAI_"))}
    return subprocess.run([sys.executable, "-c", PROBE, "--store", str(state_dir), *args], capture_output=True,
                          text=True, encoding="utf-8", env={**env, "PYTHONPATH": str(ROOT)}, timeout=120, cwd=cwd)


@pytest.fixture
def two_tasks(cli):
    """A completed task and a waiting one, started and decided by the publisher's command line."""
    assert cli("start", "--key", "a-1", "--title", "One", "--draft", "First.", "--json").code == 0
    assert cli("resume", "--task", "a-1", "--decision", "approve", "--by", "ann", "--json").code == 0
    assert cli("start", "--key", "a-2", "--title", "Two", "--draft", "Second.", "--json").code == 0


@pytest.mark.parametrize("command", [["list"], ["status", "--task", "a-2"], ["show", "--task", "a-1"], ["ledger"],
                                     ["doctor"]])
def test_the_json_is_run_pys_for_the_same_store_and_neither_sdk_nor_application_is_imported(
        cli, state_dir, two_tasks, command, tmp_path):
    mine = workflow_cli(state_dir, *command, "--json", cwd=tmp_path)  # no publisher code beside it
    assert mine.returncode == 0, mine.stderr
    assert "IMPORTED False False False" in mine.stderr
    theirs = cli(*command, "--json")
    drop = {"elapsed_s", "totals"} if command[0] == "show" else set()
    mine_json, theirs_json = json.loads(mine.stdout), theirs.json()
    assert {k: v for k, v in mine_json.items() if k not in drop} == {k: v for k, v in theirs_json.items()
                                                                     if k not in drop}


@pytest.mark.parametrize("command", [["list"], ["ledger"], ["doctor"], ["status"]])
def test_a_store_folder_that_does_not_exist_is_refused_not_read_as_empty(tmp_path, command):
    """``--store`` naming no folder (a typo) is one ``STOPPED:`` line, exit 1, and creates
    nothing, never an empty ledger or list printed as if the store were empty."""
    missing = tmp_path / "nope"
    r = workflow_cli(missing, *command)
    assert r.returncode == 1 and r.stdout == "", (r.stdout, r.stderr)
    assert r.stderr.startswith(f"STOPPED: no store at {str(missing)!r}: no such folder, and not a "
                               "postgresql:// URL; nothing read")
    assert not missing.exists()


def test_a_store_that_is_a_file_is_refused_as_not_a_folder(tmp_path):
    (tmp_path / "a-file").write_text("x", encoding="utf-8")
    r = workflow_cli(tmp_path / "a-file", "list")
    assert r.returncode == 1 and r.stdout == "", (r.stdout, r.stderr)
    assert r.stderr.startswith(f"STOPPED: no store at {str(tmp_path / 'a-file')!r}: not a folder, and not a "
                               "postgresql:// URL; nothing read"), r.stderr


@pytest.mark.parametrize("store", ["POSTGRESQL://u:hunter2pass@localhost/db", "postgresql:/u:hunter2pass@h/db"])
def test_a_store_that_is_neither_a_folder_nor_a_url_is_refused_without_repeating_it(tmp_path, store):
    """A mistyped URL may hold a password: the refusal names no part of it."""
    r = workflow_cli(Path(store), "ledger", cwd=tmp_path)
    assert r.returncode == 1 and "hunter2pass" not in r.stderr + r.stdout
    assert r.stderr.startswith("STOPPED: no store at the --store given: no such folder, and not a postgresql:// URL")


def test_an_empty_store_is_a_usage_error_never_the_default_store(tmp_path):
    """``--store "$UNSET"``: a usage error, never ``$HITL_STATE_DIR`` or ``.cache`` read instead."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HITL_", "OPENAI_"))}
    r = subprocess.run([sys.executable, "-m", "workflow", "--store", "", "ledger"], capture_output=True, text=True,
                       encoding="utf-8", env={**env, "PYTHONPATH": str(ROOT)}, timeout=120, cwd=tmp_path)
    assert r.returncode == 2 and "argument --store: must not be empty" in r.stderr and r.stdout == ""


def test_ledger_names_each_entrys_action(state_dir, two_tasks):
    out = workflow_cli(state_dir, "ledger").stdout
    assert out.splitlines()[0].endswith("(1 entry)")
    assert "  a-1  publish_draft  blog  'One'  content sha256=" in out


def test_status_shows_the_waiting_call_with_its_arguments_and_who_decides_it_how(state_dir, two_tasks):
    out = workflow_cli(state_dir, "status", "--task", "a-2").stdout
    assert out.splitlines()[0] == "task a-2: waiting_for_approval (revision 1, channels blog)"
    assert '"title": "Two", "body": "Second."' in out
    from state.files.store import Store

    call = Store(state_dir).load("a-2").pending[0].call_id
    assert out.splitlines()[-1] == (f"  next: decide call {call} of task a-2: approve or reject (the "
                                    "application's decide)"), out
    assert "next:" not in workflow_cli(state_dir, "status", "--task", "a-1").stdout  # completed


def test_a_refusal_is_one_line_and_leaves_the_disk_as_it_was(state_dir, two_tasks, tmp_path):
    before = snapshot(state_dir)
    proc = workflow_cli(state_dir, "status")
    assert proc.returncode == 1 and proc.stdout == ""
    [line] = [x for x in proc.stderr.splitlines() if not x.startswith("IMPORTED")]
    assert line == "STOPPED: 2 tasks (a-1, a-2); give --task ID"
    missing = tmp_path / "nowhere"
    for args in (["list"], ["ledger"], ["doctor"], ["status", "--task", "x"]):
        workflow_cli(missing, *args)
    assert not missing.exists() and snapshot(state_dir) == before


def test_an_invalid_task_id_is_a_usage_error(state_dir):
    proc = workflow_cli(state_dir, "status", "--task", "bad key")
    assert proc.returncode == 2 and "not an allowed task ID" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("command", [["list"], ["show", "--task", "a-1"], ["ledger"],
                                     ["status", "--task", "a-2", "--json"]])
def test_a_reader_that_goes_away_ends_the_output_quietly(state_dir, two_tasks, command):
    """``python -m workflow show | head -1``: the reader closes the pipe before the output is
    written; the command ends with exit 1 and no traceback, as ``run.py`` does."""
    proc = subprocess.Popen([sys.executable, "-m", "workflow", "--store", str(state_dir), *command],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    proc.stdout.close()  # before the command prints anything
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 1
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_the_list_line_of_a_call_with_a_body_shows_every_argument_unless_it_is_a_draft():
    """``list``'s one line per task: a call whose arguments are exactly a title and a body (the
    publisher's draft) shows them as a draft; a call of another shape that also has a ``body``
    (an e-mail: ``to``, ``subject``, ``body``) shows every argument it has, none made up."""
    from workflow.review.inbox import summary

    mail = {"tool": "send_email", "arguments": {"to": "ana@example.com", "subject": "Kick-off",
                                                "body": "Hi Ana, shall we meet on Monday at ten to plan it?"}}
    assert summary([mail]) == ("send_email(to='ana@example.com', subject='Kick-off', "
                               "body='Hi Ana, shall we meet on Monday at ten …')")
    draft = {"tool": "publish_draft", "arguments": {"title": "One", "body": "First."}}
    assert summary([draft]) == "publish_draft(title='One', body='First.' (6 chars))"


def test_list_and_doctor_on_a_damaged_store_print_what_they_can_then_stop_with_exit_1(state_dir, two_tasks):
    """A checkpoint cut short: ``list`` leaves the task out and ``doctor`` counts an inconsistency,
    and each then ends with one ``STOPPED:`` line and exit 1, as ``run.py`` does for the same store
    (exit 0 would tell a script that all is well). Nothing on disk changes."""
    [cut] = sorted(state_dir.glob("checkpoints/a-2--*/r000001.json"))
    cut.write_bytes(cut.read_bytes()[:10])
    before = snapshot(state_dir)
    listed = workflow_cli(state_dir, "list")
    assert listed.returncode == 1 and "a-2" not in listed.stdout, listed.stdout
    [line] = [x for x in listed.stderr.splitlines() if not x.startswith("IMPORTED")]
    assert line.startswith("STOPPED: 1 checkpoint is not listed: not verified") and line.endswith(
        f"(python -m workflow --store {state_dir} doctor)"), line
    doctor = workflow_cli(state_dir, "doctor")
    assert doctor.returncode == 1 and "Traceback" not in doctor.stderr
    assert "STOPPED: doctor found 1 inconsistency (see the report above)" in doctor.stderr
    healthy = workflow_cli(state_dir, "ledger")
    assert healthy.returncode == 0, healthy.stderr
    assert snapshot(state_dir) == before


def test_a_store_url_in_a_printed_command_has_no_password():
    """The commands ``python -m workflow`` prints to paste repeat ``--store``, a URL without its
    password (a folder as given, shell-quoted)."""
    import argparse

    from workflow.__main__ import command

    assert command(argparse.Namespace(store="postgresql://ann:secret@db/hitl"), "doctor") == (
        "python -m workflow --store postgresql://ann@db/hitl doctor")
    assert command(argparse.Namespace(store="/tmp/a b"), "status", "--task", "k") == (
        "python -m workflow --store '/tmp/a b' status --task k")


def test_show_of_another_applications_task_with_one_effect_names_no_channel_and_no_publishing(state_dir):
    """A task of an application whose tool names no channel (its one effect's key is the task ID):
    the receipt's ledger line is ``1 entry, written AT``, with no channel named and no publisher's
    word."""
    import asyncio

    from agents import Agent
    from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

    from state.files.store import Store
    from workflow import Application, Approve, Effect, decide, effect_tool, start

    @effect_tool(done="noted")
    def note(effect: Effect, text: str) -> str:
        """Write a note."""
        return "noted"

    def respond(call: object) -> ModelStep:
        items = getattr(call, "input", None)
        if isinstance(items, list) and items and items[-1].get("type") == "function_call_output":
            return ModelStep(output=[assistant_message("done")])
        return ModelStep(output=[function_call("note", {"text": "hello"}, call_id="call-1")])

    app = Application(build_agent=lambda model: Agent(name="Notes", instructions="Note it.", tools=[note],
                                                      model=model),
                      offline_model=lambda: ScriptedModel([ModelStep.respond(respond) for _ in range(4)]),
                      command="python notes.py")
    store = Store(state_dir)
    asyncio.run(start(store, app, task_id="n-1", title="Note", input="note hello"))
    assert asyncio.run(decide(store, app, "n-1", Approve(), by="ann", call_id="call-1")).status == "completed"
    out = workflow_cli(state_dir, "show", "--task", "n-1").stdout
    [line] = [x for x in out.splitlines() if x.startswith("outcome: ")]
    assert line.startswith("outcome: completed; ledger: 1 entry, written "), line
    assert "publish" not in line and "default" not in line
    asyncio.run(start(store, app, task_id="n-2", title="Note", input="note hello"))
    out = workflow_cli(state_dir, "status", "--task", "n-2").stdout
    assert out.splitlines()[-1] == ("  next: decide call call-1 of task n-2: approve or reject (with the "
                                    "application's own command: python notes.py)"), out
    shown = workflow_cli(state_dir, "show", "--task", "n-2").stdout
    assert "s (to the last record, still waiting for a human), agent run time" in shown, shown
    assert "s (human wait included), agent run time" in workflow_cli(state_dir, "show", "--task", "n-1").stdout


def test_status_of_a_decision_a_crash_cut_off_points_to_doctor(cli, state_dir):
    from conftest import run_subprocess

    assert cli("start", "--key", "c-1", "--title", "One", "--draft", "First.", "--json").code == 0
    crashed = run_subprocess(state_dir, "resume", "--task", "c-1", "--decision", "approve", "--by", "ann",
                             env={"HITL_FAILPOINT": "checkpoint:decision:after"})
    assert crashed.code == 86, crashed.err
    out = workflow_cli(state_dir, "status", "--task", "c-1").stdout
    assert out.splitlines()[-1].startswith("  next: a decision on record did not finish: python -m workflow --store ")
    assert out.splitlines()[-1].endswith(" doctor says how") and "approve or reject" not in out, out


def test_list_shows_a_waiting_task_whose_decision_a_crash_cut_off_as_decided_not_finished(cli, state_dir):
    from conftest import run_subprocess

    for key in ("c-1", "c-2"):
        assert cli("start", "--key", key, "--title", "One", "--draft", "First.", "--json").code == 0
    crashed = run_subprocess(state_dir, "resume", "--task", "c-1", "--decision", "approve", "--by", "ann",
                             env={"HITL_FAILPOINT": "checkpoint:decision:after"})
    assert crashed.code == 86, crashed.err
    lines = {line.split()[1]: line for line in workflow_cli(state_dir, "list").stdout.splitlines()}
    assert "ago, decided, not finished (doctor says how)  publish_draft(" in lines["c-1"], lines
    assert "ago, expires in " in lines["c-2"] and "decided" not in lines["c-2"], lines
    ages = lambda text: [re.sub(r"\d+", "N", line) for line in text.splitlines()]  # noqa: E731  (a second apart)
    assert ages(cli("list").out) == ages(workflow_cli(state_dir, "list").stdout)


def test_doctor_names_its_own_repair_and_the_repair_needs_no_application_code(cli, state_dir, two_tasks, tmp_path):
    """A crash's leftover temp file in any application's store: ``python -m workflow doctor`` names a
    command that exists (``python -m workflow --store … doctor --repair``), and that command, with no
    application code beside it, deletes the leftover as ``run.py doctor --repair`` does and leaves
    the store consistent; without ``--repair`` nothing changes on disk."""
    from state.files.store import file_name

    leftover = state_dir / "checkpoints" / file_name("a-2") / f".tmp-{file_name('a-2')}.abcd1234.part"
    leftover.write_bytes(b'{"half": ')
    before = snapshot(state_dir)
    found = workflow_cli(state_dir, "doctor", "--json", cwd=tmp_path)
    assert found.returncode == 1 and snapshot(state_dir) == before, found.stderr
    (finding,) = json.loads(found.stdout)["findings"]
    assert finding["kind"] == "leftover_temp", finding
    assert finding["action"] == f"python -m workflow --store {state_dir} doctor --repair deletes it", finding
    repaired = workflow_cli(state_dir, "doctor", "--repair", "--json", cwd=tmp_path)
    assert repaired.returncode == 0, repaired.stderr
    assert "IMPORTED False False False" in repaired.stderr
    assert [r["result"] for r in json.loads(repaired.stdout)["repairs"]] == ["deleted"]
    assert not leftover.exists() and cli("doctor", "--json").json()["consistent"]


def test_adopt_without_repair_is_refused_before_anything_is_read(state_dir, two_tasks, tmp_path):
    before = snapshot(state_dir)
    r = workflow_cli(state_dir, "doctor", "--adopt", "ledger/x.json", cwd=tmp_path)
    assert r.returncode == 1 and r.stderr.startswith("STOPPED: adopting unsigned records is a repair"), r.stderr
    assert snapshot(state_dir) == before


def test_status_of_a_task_whose_fail_did_not_finish_names_the_fail_not_a_refused_decision(cli, state_dir, tmp_path):
    """A ``fail`` cut by a crash after its end mark: every decision is refused, so the library's
    ``status`` names the same fail (as ``run.py status`` and doctor do), never "approve or reject"."""
    from conftest import run_subprocess

    assert cli("start", "--key", "f-1", "--title", "One", "--draft", "First.", "--json").code == 0
    assert run_subprocess(state_dir, "resume", "--task", "f-1", "--decision", "approve",
                          env={"HITL_FAILPOINT": "checkpoint:decision:after"}).code == 86
    assert run_subprocess(state_dir, "fail", "--task", "f-1", "--by", "bob", "--reason", "gone",
                          env={"HITL_FAILPOINT": "checkpoint:outcome:before"}).code == 86
    shown = workflow_cli(state_dir, "status", "--task", "f-1", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    last = shown.stdout.splitlines()[-1]
    assert last.startswith("  next: the task was ended by bob at ") and last.endswith(
        "no decision runs; end task f-1 again, by a person, with a reason (workflow.fail), and it is "
        "finished"), last


def _inbox_pages(state_dir: Path, *paths: str) -> list[str]:
    """The browser inbox's pages at ``paths`` (single-user mode, signed in with its URL token), as
    ``run.py serve`` serves them."""
    from starlette.testclient import TestClient

    from agent.application import APP
    from cli.hints import hint
    from state.store import FileStore
    from workflow.review.web import create_app

    token, host = "k" * 43, "127.0.0.1:8765"
    app = create_app(FileStore(state_dir), APP, reviewer="ann", token=token, hosts={host}, cookie="c", hint=hint)
    with TestClient(app, base_url=f"http://{host}") as client:
        assert client.get(f"/?token={token}").status_code == 200
        return [client.get(path).text for path in paths]


def test_a_task_a_fail_ended_unfinished_is_listed_as_ended_and_its_given_up_call_is_named(cli, state_dir, tmp_path):
    """Two calls: one executed, the other approved and cut before its effect; a ``fail`` cut after
    its end mark. ``list`` (both command lines) says who ended the task, never "expires in";
    ``status`` names the same fail without "as failed" (that fail ends the task ``completed``: a
    call ran); once it has, the library's ``status`` names the approval the fail gave up."""
    from conftest import run_subprocess

    started = cli("start", "--key", "g-1", "--draft", "d", "--channel", "a", "--channel", "b", "--json").json()
    first, second = (p["call_id"] for p in started["pending"])
    assert cli("resume", "--task", "g-1", "--call", first, "--decision", "approve").code == 0
    assert run_subprocess(state_dir, "resume", "--task", "g-1", "--call", second, "--decision", "approve",
                          env={"HITL_FAILPOINT": "effect:intent:before"}).code == 86
    assert run_subprocess(state_dir, "fail", "--task", "g-1", "--by", "bob", "--reason", "stop",
                          env={"HITL_FAILPOINT": "checkpoint:outcome:before"}).code == 86
    for listed in (workflow_cli(state_dir, "list", cwd=tmp_path).stdout, cli("list").out):
        (line,) = [x for x in listed.splitlines() if " g-1 " in x]
        assert "ENDED by bob, not finished (the same fail finishes it)" in line and "expires" not in line, line
    assert workflow_cli(state_dir, "list", "--json", cwd=tmp_path).stdout.count('"ended": {"by": "bob"') == 1
    for page in _inbox_pages(state_dir, "/", "/task/g-1"):  # the browser inbox: its list and the task page
        assert "ended by bob, not finished (the same fail finishes it)" in page and "no expiry" not in page, page
    shown = workflow_cli(state_dir, "status", "--task", "g-1", cwd=tmp_path).stdout
    assert "end task g-1 again, by a person" in shown and "as failed" not in shown, shown
    assert cli("fail", "--task", "g-1", "--by", "bob", "--reason", "stop", "--json").json()["status"] == "completed"
    lines = workflow_cli(state_dir, "status", "--task", "g-1", cwd=tmp_path).stdout.splitlines()
    assert [x for x in lines if x.endswith(", given up by the fail: never carried out")] == [
        x for x in lines if f"({second})" in x], lines
    assert not [x for x in lines if f"({first})" in x and "given up" in x], lines


def test_a_reject_cut_after_its_record_is_named_by_status_and_by_the_refusals(cli, state_dir, tmp_path):
    """A crash between the rejection record and the checkpoint: the call waits with no decision on
    record, and an approve (or a ``fail``) is refused. Both ``status`` commands name the same reject,
    never "approve or reject"; the refusals name it too; and that reject finishes the task."""
    from conftest import run_subprocess

    assert cli("start", "--key", "j-1", "--draft", "d", "--json").code == 0
    assert run_subprocess(state_dir, "resume", "--task", "j-1", "--decision", "reject", "--reason", "no",
                          env={"HITL_FAILPOINT": "rejection:record:after"}).code == 86
    mine = workflow_cli(state_dir, "status", "--task", "j-1", cwd=tmp_path).stdout.splitlines()[-1]
    assert ": reject (it was rejected by " in mine and "the same reject finishes it; an approve is refused" in mine
    theirs = cli("status", "--task", "j-1").out.splitlines()[-1]
    assert theirs.endswith("python run.py resume --task j-1 --decision reject finishes it; an approve is "
                           "refused"), theirs
    for args in (["resume", "--task", "j-1", "--decision", "approve"], ["fail", "--task", "j-1", "--by", "b",
                                                                        "--reason", "x"]):
        before = snapshot(state_dir)
        r = cli(*args)
        assert r.code == 1 and r.err.rstrip().endswith(
            "the checkpoint does not say so yet: the same reject finishes it (python run.py resume --task j-1 "
            "--decision reject)"), r.err
        assert snapshot(state_dir) == before
    before = snapshot(state_dir)  # another reason would be dropped: the model is told the recorded one
    other = cli("resume", "--task", "j-1", "--decision", "reject", "--reason", "too long", "--by", "carol")
    assert other.code == 1 and "with the reason 'no'; another reason cannot replace it" in other.err, other.err
    assert snapshot(state_dir) == before
    assert cli("resume", "--task", "j-1", "--decision", "reject", "--json").json()["status"] == "cancelled"
    assert "next: python run.py resume" not in cli("status", "--task", "j-1").out
    # cut after the checkpoint recorded the reject: the checkpoint says so, the decision on record is named
    assert cli("start", "--key", "j-2", "--draft", "d", "--json").code == 0
    assert run_subprocess(state_dir, "resume", "--task", "j-2", "--decision", "reject", "--reason", "no",
                          env={"HITL_FAILPOINT": "checkpoint:decision:after"}).code == 86
    theirs = cli("status", "--task", "j-2").out.splitlines()[-1]
    assert theirs.startswith("  next: python run.py resume --task j-2 --decision reject (it finishes the decision "
                             "on record"), theirs
    mine = workflow_cli(state_dir, "status", "--task", "j-2", cwd=tmp_path).stdout.splitlines()[-1]
    assert mine.startswith("  next: a decision on record did not finish"), mine
    # another reviewer's reject with another reason would be dropped without a word: refused
    before = snapshot(state_dir)
    other = cli("resume", "--task", "j-2", "--decision", "reject", "--reason", "too long", "--by", "carol")
    assert other.code == 1 and "with the reason 'no'; another reason cannot replace it" in other.err, other.err
    assert snapshot(state_dir) == before
    done = cli("resume", "--task", "j-2", "--decision", "reject", "--by", "carol", "--json").json()
    assert done["status"] == "cancelled" and done["decision"]["reason"] == "no", done


def test_status_still_shows_a_task_one_of_whose_rejection_records_is_damaged(cli, state_dir, tmp_path):
    """The reads added for a reject that did not finish (its record) must not stop ``status``: a
    damaged rejection record of one channel leaves the task shown (doctor names the record), and
    ``run.py status`` never takes it for team mode."""
    from conftest import run_subprocess

    started = cli("start", "--key", "d-1", "--draft", "d", "--channel", "blog", "--channel", "news", "--json").json()
    blog = next(p["call_id"] for p in started["pending"] if p["arguments"]["channel"] == "blog")
    assert run_subprocess(state_dir, "resume", "--task", "d-1", "--call", blog, "--decision", "reject", "--reason",
                          "no", env={"HITL_FAILPOINT": "rejection:record:after"}).code == 86
    (record,) = (state_dir / "rejections").glob("d-1#blog--*.json")
    record.write_text('{"x": 1', encoding="utf-8")
    mine = workflow_cli(state_dir, "status", "--task", "d-1", cwd=tmp_path)
    assert mine.returncode == 0 and mine.stdout.startswith("task d-1: waiting_for_approval"), mine.stderr
    theirs = cli("status", "--task", "d-1")
    assert theirs.code == 0 and "team mode" not in theirs.out, theirs.out


def test_status_of_an_expired_request_names_only_the_reject(cli, state_dir, tmp_path, monkeypatch):
    """Past the deadline an approve is refused: the library's ``status`` names the reject alone for
    the call still waiting (a call of the task decided: ``expire`` skips it too), and ``list`` says so."""
    from datetime import timedelta

    from state import clock

    r = cli("start", "--key", "e-1", "--title", "T", "--draft", "D.", "--channel", "a", "--channel", "b", "--json")
    first, second = (p["call_id"] for p in r.json()["pending"])
    assert cli("resume", "--task", "e-1", "--call", first, "--decision", "approve").code == 0
    later = clock.iso(clock.wall() + timedelta(days=3))
    monkeypatch.setenv("HITL_NOW", later)
    env_run = subprocess.run([sys.executable, "-c", PROBE, "--store", str(state_dir), "status", "--task", "e-1"],
                             capture_output=True, text=True, encoding="utf-8", timeout=120, cwd=tmp_path,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert env_run.returncode == 0, env_run.stderr
    assert env_run.stdout.splitlines()[-1].startswith(f"  next: decide call {second} of task e-1: reject (the "
                                                      "request expired at "), env_run.stdout
    assert "EXPIRED (reject only)" in cli("list").out
