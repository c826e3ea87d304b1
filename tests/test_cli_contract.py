"""The command-line contract: commands, JSON shapes, exit codes and semantics."""

from __future__ import annotations

import asyncio
import sys

import pytest

from conftest import ledger_entries, run_in_process, run_py, run_subprocess, snapshot

TASK_KEYS = {"task_id", "idempotency_key", "status", "decision", "pending", "final_output",
             "schema_version", "revision", "checkpoint_path", "decisions", "channels"}


def _start(cli, key="k-1", draft="Hello world", title="Title"):
    r = cli("start", "--key", key, "--title", title, "--draft", draft, "--json")
    assert r.code == 0, r.err
    return r.json()


def test_task_json_shape(cli):
    task = _start(cli)
    assert set(task) == TASK_KEYS
    assert task["task_id"] == task["idempotency_key"] == "k-1"
    assert task["decision"] is None and task["final_output"] is None
    assert task["schema_version"] == 3 and task["revision"] == 1
    assert set(task["pending"][0]) == {"call_id", "tool", "arguments"}


def test_every_command_prints_one_json_object(cli):
    _start(cli)
    for args in (("status", "--task", "k-1"), ("list",), ("ledger",),
                 ("resume", "--task", "k-1", "--decision", "approve")):
        r = cli(*args, "--json")
        assert r.code == 0, r.err
        assert isinstance(r.json(), dict)
    assert set(cli("list", "--json").json()) == {"tasks"}
    assert set(cli("ledger", "--json").json()) == {"path", "entries"}


def test_json_flag_accepted_before_subcommand(cli):
    _start(cli)
    r = cli("--json", "status", "--task", "k-1")
    assert r.code == 0 and r.json()["task_id"] == "k-1"


def test_start_without_key_generates_one(cli):
    r = cli("start", "--draft", "Some text", "--json")
    assert r.code == 0, r.err
    task = r.json()
    assert task["task_id"].startswith("task-") and task["status"] == "waiting_for_approval"


def test_start_same_key_same_draft_is_unchanged_without_model_call(state_dir, cli):
    from agents.testing import ScriptedModel

    from state.files.store import Store
    from agent import application

    _start(cli)
    before = snapshot(state_dir)
    no_calls = ScriptedModel([])  # any model call would raise UnexpectedModelCall
    cp = asyncio.run(application.start(Store(state_dir), task_id="k-1", title="Title",
                                draft="Hello world", model=no_calls))
    assert cp.revision == 1 and no_calls.calls == ()
    assert snapshot(state_dir) == before
    assert cli("start", "--key", "k-1", "--title", "Title", "--draft", "Hello world").code == 0


def test_start_same_key_different_draft_stops(cli, state_dir):
    _start(cli)
    before = snapshot(state_dir)
    cli("start", "--key", "k-1", "--title", "Title", "--draft", "Other text").assert_stopped()
    assert snapshot(state_dir) == before


def test_approve_on_completed_is_unchanged(cli, state_dir):
    _start(cli)
    done = cli("resume", "--task", "k-1", "--decision", "approve", "--json").json()
    again = cli("resume", "--task", "k-1", "--decision", "approve", "--json")
    assert again.code == 0 and again.json() == done
    assert len(ledger_entries(state_dir)) == 1


def test_reject_on_completed_stops(cli):
    _start(cli)
    cli("resume", "--task", "k-1", "--decision", "approve")
    cli("resume", "--task", "k-1", "--decision", "reject").assert_stopped()


def test_approve_on_cancelled_stops(cli, state_dir):
    _start(cli)
    cli("resume", "--task", "k-1", "--decision", "reject")
    before = snapshot(state_dir)
    r = cli("resume", "--task", "k-1", "--decision", "approve")
    r.assert_stopped()
    assert snapshot(state_dir) == before and ledger_entries(state_dir) == []


def test_reject_on_cancelled_is_unchanged(cli, state_dir):
    _start(cli)
    first = cli("resume", "--task", "k-1", "--decision", "reject", "--json").json()
    again = cli("resume", "--task", "k-1", "--decision", "reject", "--json")
    assert again.code == 0 and again.json() == first


def test_reject_reason_reaches_model_verbatim(state_dir):
    from agent.models import build_offline_model
    from state.files.store import Store
    from agent import application

    store = Store(state_dir)
    asyncio.run(application.start(store, task_id="k-1", title="T", draft="D"))
    model = build_offline_model()
    reason = "Nope — 标题有错字; fix \"it\"\nthen retry."
    cp = asyncio.run(application.resume(store, task_id="k-1", decision="reject", by="bob",
                                 reason=reason, model=model))
    outputs = [item for item in model.calls[-1].input
               if isinstance(item, dict) and item.get("type") == "function_call_output"]
    assert [o["output"] for o in outputs] == [reason]
    assert cp.status == "cancelled" and reason in cp.final_output


def test_new_interruption_after_resume_waits_again(state_dir):
    """If the resumed run stops at a new approval request, the task waits again with that call."""
    from agents.testing import ModelStep, ScriptedModel, function_call

    from agent.models import offline_responder
    from state.files.store import Store
    from agent import application

    store = Store(state_dir)
    asyncio.run(application.start(store, task_id="k-1", title="T", draft="D"))
    second = ScriptedModel([ModelStep(output=[function_call(
        "publish_draft", {"title": "T", "body": "D"}, call_id="call_second")])])
    cp = asyncio.run(application.resume(store, task_id="k-1", decision="approve", by="a", model=second))
    assert cp.status == "waiting_for_approval" and cp.decision is None
    assert [p.call_id for p in cp.pending] == ["call_second"]
    assert len(cp.decisions) == 1
    # the second call is answered like the first; the ledger still holds one entry
    final = ScriptedModel([ModelStep.respond(offline_responder)])
    cp = asyncio.run(application.resume(store, task_id="k-1", decision="approve", by="a", model=final))
    assert cp.status == "completed" and len(ledger_entries(state_dir)) == 1
    assert "already published" in cp.final_output


def test_resume_without_task_picks_the_one_waiting(cli):
    _start(cli, key="only-one")
    r = cli("resume", "--decision", "approve", "--json")
    assert r.code == 0 and r.json()["task_id"] == "only-one"


def test_resume_without_task_stops_naming_candidates(cli):
    _start(cli, key="a-1")
    _start(cli, key="b-2", draft="other")
    r = cli("resume", "--decision", "approve")
    r.assert_stopped()
    assert "a-1" in r.err and "b-2" in r.err


@pytest.mark.parametrize("key", ["../evil", "a/b", "a\\b", "..", ".hidden", "x" * 101, "a b", "ключ", "a\x07"])
def test_bad_key_is_usage_error_before_any_file(cli, state_dir, key):
    r = cli("start", "--key", key, "--draft", "x")
    assert r.code == 2 and "Traceback" not in r.err
    assert not state_dir.exists()


def test_oversized_draft_is_usage_error(cli, state_dir):
    r = cli("start", "--key", "k", "--draft", "x" * 20_001)
    assert r.code == 2 and not state_dir.exists()


def test_unknown_task_stops(cli):
    cli("status", "--task", "nope").assert_stopped()


def test_start_then_resume_in_separate_processes(state_dir):
    """The resume provably comes from disk alone: two processes, nothing shared but files."""
    started = run_subprocess(state_dir, "start", "--key", "proc-1", "--title", "T", "--draft", "D", "--json")
    assert started.code == 0, started.err
    assert started.json()["status"] == "waiting_for_approval"
    resumed = run_subprocess(state_dir, "resume", "--task", "proc-1", "--decision", "approve", "--json")
    assert resumed.code == 0, resumed.err
    assert resumed.json()["status"] == "completed"
    assert len(ledger_entries(state_dir)) == 1


def test_demo_is_quiet_and_tells_the_story(tmp_path):
    """``demo --json``: the narration on stderr, one JSON summary on stdout (one run for both)."""
    r = run_subprocess(tmp_path / "demo", "demo", "--json")
    assert r.code == 0, r.err
    text = r.out + r.err
    assert "OPENAI_API_KEY" not in text and "Traceback" not in text and "skipping trace" not in text
    assert r.err.count("completed") >= 3 and "cancelled" in r.err and "(3 entries)" in r.err
    assert "> approval needed: publish_draft" in r.err  # the approve-with-edits step streams
    summary = r.json()
    assert [t["status"] for t in summary["tasks"]] == ["completed", "cancelled", "completed", "completed"]
    channels, edited = summary["tasks"][2], summary["tasks"][3]  # two channels: one rejected, one approved
    assert sorted((d["channel"], d["decision"]) for d in channels["decisions"]) == [
        ("blog", "approved"), ("news", "rejected")]
    entries = summary["ledger"]["entries"]
    service = summary["service"]  # through the reference service, its first answer lost
    assert [e["idempotency_key"] for e in entries] == [
        summary["tasks"][0]["task_id"], channels["task_id"] + "#blog", edited["task_id"], service["task"]["task_id"]]
    assert entries[2]["title"] == "Release notes 1.3"  # as edited
    assert service["publications"] == 1 and service["task"]["status"] == "completed"  # counted at the service
    (effect,) = service["task"]["effects"]
    assert effect["state"] == "published" and effect["publication_id"] == entries[3]["result"]["id"]
    assert "1 publication, though its first answer was lost" in r.err
    # each next: line is what a person would type after the narration's command: no --state-dir
    nexts = [line for line in r.err.splitlines() if line.strip().startswith("next: python run.py")]
    assert len(nexts) >= 5 and not any("--state-dir" in line for line in nexts), nexts
    # the demo keeps to a state dir of its own: the user's tasks and ledger stay untouched
    assert not (tmp_path / "demo" / "checkpoints").exists() and not (tmp_path / "demo" / "ledger").exists()
    _demo_narration_reads_correctly(r.err)
    # eval over the demo's state dir: every task passes (its service is gone now: graded on the ledger)
    [run_dir] = (tmp_path / "demo" / "demo").iterdir()
    graded = run_in_process(run_dir, "eval", "--json")
    assert graded.code == 0, graded.out + graded.err
    assert [t["result"] for t in graded.json()["tasks"]] == ["PASS"] * 5


def _demo_narration_reads_correctly(text: str) -> None:
    """What a new user reads in the demo: no literal backslash-n; in the streamed step with edits,
    the final output once and the program's approval labelled ``auto``, not shown as a reason the
    reviewer typed; in the two-channel step, each call's answer on a line of its own."""
    from workflow.edits import AUTO_REASON

    assert "\\n" not in text and AUTO_REASON not in text
    channels = text[text.index("   Approve the blog call"):text.index("\n6. ")]
    [answer] = [line for line in channels.splitlines() if "final output:" in line]
    assert answer.endswith("final output: publish_draft answered, one line per call:")
    assert "      | news: Not news yet." in channels.splitlines()
    assert not any("Not news yet." in line and "published" in line for line in channels.splitlines())
    streamed = text[text.index("--stream\n"):text.index("\n7. ")]
    assert streamed.count("publish_draft answered:") == 1, streamed  # the final output, once
    assert "    final output: (streamed above)" in streamed.splitlines()
    assert "  | Title: Release notes 1.3" in streamed.splitlines()  # the edit message, line by line
    [decision] = [line for line in streamed.splitlines() if "decision:" in line]
    assert decision.endswith("(auto: complies with the edits by carol)") and "reason=" not in decision


def test_read_only_commands_do_not_import_the_sdk(cli, state_dir):
    import subprocess

    _start(cli)
    code = ("import sys, run; "
            f"rc = [run.main(['--state-dir', {str(state_dir)!r}, *a]) for a in "
            "(['status','--task','k-1'], ['list'], ['ledger'])]; "
            "print(rc, 'agents' in sys.modules, 'openai' in sys.modules, 'psycopg' in sys.modules)")
    from conftest import ROOT

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    # nor psycopg: the file store's commands never pay for the PostgreSQL store
    assert out.stdout.strip().splitlines()[-1] == "[0, 0, 0] False False False", out.stdout + out.stderr


def test_closed_pipe_ends_quietly(cli, state_dir):
    """``run.py list | head -1``: the reader goes away; no traceback, nothing else breaks."""
    import subprocess

    from conftest import ROOT

    _start(cli)
    proc = subprocess.Popen([sys.executable, str(ROOT / "run.py"), "--state-dir", str(state_dir), "list"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    proc.stdout.close()  # before the command prints anything
    err = proc.stderr.read().decode()
    proc.wait(timeout=60)
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_every_command_printed_to_paste_repeats_the_state_dir_it_was_given(tmp_path, monkeypatch):
    """``run.py --state-dir DIR``: the ``next:`` line and every hint name the same DIR
    (shell-quoted), so the command a person pastes acts on the task just shown, not on a task of
    the same key in ``$HITL_STATE_DIR`` or ``.cache``. Without the option nothing is added."""
    import shlex

    folder = tmp_path / "my store"
    monkeypatch.setenv("HITL_STATE_DIR", str(tmp_path / "other"))  # where a pasted command without it acts

    started = run_py("--state-dir", str(folder), "start", "--key", "t-1", "--title", "T", "--draft", "D")
    assert started.code == 0, started.err
    [next_line] = [line for line in started.out.splitlines() if line.strip().startswith("next:")]
    pasted = shlex.split(next_line.split("next:", 1)[1].split(" (or ")[0])
    assert pasted == ["python", "run.py", "--state-dir", str(folder), "resume", "--task", "t-1", "--decision",
                      "approve"], next_line
    [cut] = folder.glob("checkpoints/t-1--*/r000001.json")
    cut.write_bytes(b"{")
    listed = run_py("--state-dir", str(folder), "list")
    assert listed.code == 1 and f"(python run.py --state-dir {shlex.quote(str(folder))} doctor" in listed.err, \
        listed.err
    plain = run_py("start", "--key", "t-2", "--title", "T", "--draft", "D")
    assert plain.code == 0 and "next: python run.py resume --task t-2 --decision approve" in plain.out, plain.out


def test_a_store_url_is_repeated_without_its_password():
    """``--store postgresql://ann:secret@db/hitl``: the commands printed to paste repeat the URL
    without the password (a password never reaches the terminal); the client takes it from
    ``PGPASSWORD`` or its password file."""
    from cli import shell

    try:
        shell.use_store(None, "postgresql://ann:s%40cret@db.example:5432/hitl?sslmode=require")
        assert shell.command("list") == ("python run.py --store "
                                         "'postgresql://ann@db.example:5432/hitl?sslmode=require' list")
        shell.use_store("state dir", "postgresql://db.example/hitl")
        assert shell.program() == "python run.py --state-dir 'state dir' --store postgresql://db.example/hitl"
    finally:
        shell.use_store(None, None)
    assert shell.program() == "python run.py"
