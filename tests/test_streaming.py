"""``--stream``: ``Runner.run_streamed``, events printed as they arrive, saved exactly like a
non-streamed run; the budget and Ctrl-C leave the saved RunState as it was before the run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import RUN_PY, ROOT, checkpoint_file, ledger_entries, snapshot
from loopback_provider import LoopbackProvider

from test_cli_contract import TASK_KEYS  # the task object of the contract
FAKE_KEY = "sk-test-FAKEKEY-stream-0123456789abcdef"
REASON = "no, the numbers in the second paragraph are wrong and need a source"


def _lines(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def _cp(state_dir: Path, key: str = "t-1") -> dict[str, Any]:
    return json.loads(checkpoint_file(state_dir, key).read_text(encoding="utf-8"))


def _comparable_run_state(state_dir: Path, key: str = "t-1") -> dict[str, Any]:
    """The saved RunState without what differs between any two runs: the trace ID, the state
    store and run tokens, the time the ledger entry was written (the model quotes the tool's output).
    After a run that finished, the trace itself: the SDK keeps it in a finished streamed run's
    state and drops it from a finished non-streamed one (nothing resumes a finished task)."""
    text = _cp(state_dir, key)["run_state"]
    for entry in ledger_entries(state_dir):
        text = text.replace(entry["published_at"], "<published_at>")
    data = json.loads(text)
    if data.get("trace"):
        data["trace"].pop("id", None)
    if data["current_step"] is None or data["current_step"].get("type") != "next_step_interruption":
        data.pop("trace", None)
    data["context"]["context"].pop("store")  # a process-local token (state/open_stores.py)
    data["context"]["context"].pop("run", None)  # the resume's token, process-local too
    return data


def test_stream_json_prints_json_lines_events_then_the_task_object(cli, state_dir):
    r = cli("start", "--key", "t-1", "--title", "T", "--draft", "Body text", "--stream", "--json")
    assert r.code == 0, r.err
    lines = _lines(r.out)
    assert [e.get("event") for e in lines[:-1]] == ["tool_call_requested", "approval_needed"]
    call = lines[0]
    assert call["tool"] == "publish_draft" and call["arguments"] == {"title": "T", "body": "Body text"}
    assert lines[1]["call_id"] == call["call_id"] and lines[1]["agent"] == "Publisher"
    assert set(lines[-1]) == TASK_KEYS and lines[-1]["status"] == "waiting_for_approval"

    r = cli("resume", "--task", "t-1", "--decision", "approve", "--by", "alice", "--stream", "--json")
    assert r.code == 0, r.err
    lines = _lines(r.out)
    kinds = [e.get("event") for e in lines[:-1]]
    assert kinds[0] == "tool_output" and kinds[-1] == "final_output" and "text_delta" in kinds
    assert json.loads(lines[0]["output"])["result"] == "published"
    text = "".join(e["delta"] for e in lines if e.get("event") == "text_delta")
    assert text == lines[-2]["output"] == lines[-1]["final_output"]
    assert lines[-1]["status"] == "completed" and len(ledger_entries(state_dir)) == 1


def test_stream_text_prints_each_event_on_its_own_line_before_the_task(cli):
    r = cli("start", "--key", "t-1", "--title", "T", "--draft", "Body", "--stream")
    assert r.code == 0, r.err
    out = r.out.splitlines()
    assert out[0].startswith('> tool call requested: publish_draft {"title": "T", "body": "Body"}')
    assert out[1].startswith("> approval needed: publish_draft") and "agent Publisher" in out[1]
    assert out[2] == "task t-1: waiting_for_approval (revision 1)"
    r = cli("resume", "--task", "t-1", "--decision", "reject", "--reason", "not today", "--stream")
    assert r.code == 0, r.err
    out = r.out.splitlines()
    assert out[:3] == ["> tool output (call_id=" + _cp_call(r) + "): not today",
                       "> model text: publish_draft answered: not today",
                       "task t-1: cancelled (revision 3)"]
    assert "  final output: (streamed above)" in out  # the model's text was the final output


def test_stream_text_shows_the_final_output_once_and_text_over_lines(cli):
    """A streamed run's final output is printed once (as the model's text; the task text after it
    says ``(streamed above)``), and a tool output over several lines goes on lines of its own
    starting ``| ``, never as a literal backslash-n."""
    r = cli("start", "--key", "t-1", "--title", "T", "--draft", "Body", "--stream")
    assert r.code == 0, r.err
    r = cli("resume", "--task", "t-1", "--decision", "reject", "--reason", "not today:\nfix the title",
            "--stream")
    assert r.code == 0, r.err
    assert r.out.count("publish_draft answered: not today:") == 1, r.out
    assert not [line for line in r.out.splitlines() if "\\n" in line and "reason=" not in line], r.out
    out = r.out.splitlines()
    assert out[1:3] == ["| fix the title", "> model text: publish_draft answered: not today:"], out
    assert out[3] == "| fix the title" and "  final output: (streamed above)" in out, out
    status = cli("status", "--task", "t-1").out.splitlines()  # no stream: the output itself
    assert "  final output: publish_draft answered: not today:" in status
    assert "    | fix the title" in status


def _cp_call(r: Any) -> str:
    return r.out.split("call_id=", 1)[1].split(")", 1)[0]


def test_a_streamed_start_is_saved_exactly_like_a_non_streamed_one(tmp_path):
    from conftest import run_in_process

    for name, extra in (("streamed", ["--stream"]), ("plain", [])):
        r = run_in_process(tmp_path / name, "start", "--key", "t-1", "--draft", "D", *extra)
        assert r.code == 0, r.err
    assert _comparable_run_state(tmp_path / "streamed") == _comparable_run_state(tmp_path / "plain")
    a, b = _cp(tmp_path / "streamed"), _cp(tmp_path / "plain")
    for field in ("status", "pending", "spend", "budget", "run_state_schema_version", "agent"):
        assert a[field] == b[field], field


@pytest.mark.parametrize("start_flags, resume_flags", [(["--stream"], []), ([], ["--stream"])],
                         ids=["streamed-start-plain-resume", "plain-start-streamed-resume"])
def test_stream_and_non_stream_resume_each_other(tmp_path, start_flags, resume_flags):
    """Both directions end exactly as a task never streamed does (same RunState, same ledger)."""
    from conftest import run_in_process

    for name, s, r_ in (("mixed", start_flags, resume_flags), ("plain", [], [])):
        assert run_in_process(tmp_path / name, "start", "--key", "t-1", "--draft", "D", *s).code == 0
        r = run_in_process(tmp_path / name, "resume", "--task", "t-1", "--decision", "approve",
                           "--by", "alice", *r_, "--json")
        assert r.code == 0, r.err
        assert _lines(r.out)[-1]["status"] == "completed"
        assert len(ledger_entries(tmp_path / name)) == 1
    assert _comparable_run_state(tmp_path / "mixed") == _comparable_run_state(tmp_path / "plain")


def test_stream_cut_by_the_budget_leaves_the_run_state_as_before(state_dir, monkeypatch):
    """The pre-check (``blocked``) switched off, so the in-run guard is what stops the streamed
    run: the SDK's turn limit ends the stream after the tool ran; the task is saved
    ``budget_exceeded`` with the RunState of before the call, and a larger budget finishes it
    without publishing twice."""
    import asyncio

    from agent import application
    from workflow import hitl
    from state.store import FileStore

    store = FileStore(state_dir)
    asyncio.run(application.start(store, task_id="t-1", title="T", draft="D",
                           budget=hitl.make_budget(hitl.ModelSpec(), max_turns=1)))
    before = _cp(state_dir)
    monkeypatch.setattr(hitl, "blocked", lambda *a: None)
    events: list[dict[str, Any]] = []
    cp = asyncio.run(application.resume(store, task_id="t-1", decision="approve", by="alice",
                                 on_event=events.append))
    assert cp.status == "budget_exceeded" and cp.run_state == before["run_state"]
    assert [e["event"] for e in events] == ["tool_output"]  # the stream was cut before the model call
    assert len(ledger_entries(state_dir)) == 1
    monkeypatch.undo()
    cp = asyncio.run(application.resume(store, task_id="t-1", decision="approve", by="alice",
                                 budget_changes={"max_turns": 3}, on_event=events.append))
    assert cp.status == "completed" and len(ledger_entries(state_dir)) == 1
    assert "already published" in cp.final_output


def test_streamed_start_the_budget_cannot_pay_sends_nothing_and_saves_nothing(cli, state_dir,
                                                                            monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    with LoopbackProvider() as provider:
        r = cli("start", "--key", "t-1", "--draft", "D", "--model", "gpt-4.1-mini", "--base-url",
                provider.base_url, "--max-cost-usd", "0.00001", "--price-per-mtok", "1,1", "--stream")
    r.assert_stopped()
    assert "budget exceeded" in r.err and provider.bodies == [] and not state_dir.exists()


def test_a_secret_echoed_in_a_streamed_reply_is_never_printed(cli, state_dir, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    with LoopbackProvider() as provider:
        provider.echo_key = True
        assert cli("start", "--key", "t-1", "--draft", "D", "--model", "gpt-4.1-mini",
                   "--base-url", provider.base_url).code == 0
        for flags in (["--json"], []):
            r = cli("resume", "--task", "t-1", "--decision", "reject", "--reason", "no", "--stream",
                    *flags)
            assert r.code == 0, r.err
            assert FAKE_KEY not in r.out and FAKE_KEY[:12] not in r.out and "[redacted]" in r.out
    assert FAKE_KEY not in json.dumps(_cp(state_dir))


# -- Ctrl-C during a stream: a real process, a real SIGINT ----------------------------------------

def _popen(state_dir: Path, *args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HITL_", "OPENAI_"))}
    env["OPENAI_API_KEY"] = FAKE_KEY
    return subprocess.Popen([sys.executable, str(RUN_PY), "--state-dir", str(state_dir), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            encoding="utf-8", env=env, cwd=ROOT)


def _interrupt(proc: subprocess.Popen[str], provider: LoopbackProvider,
               seen: str | None = None) -> tuple[int, str, str]:
    """SIGINT once the provider's stream is open and stalled mid-answer (and, with ``seen``, once
    the process printed a line holding it: the part before the stall really arrived)."""
    import threading

    lines: list[str] = []
    printed = threading.Event()

    def read() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            lines.append(line)
            if seen is not None and seen in line:
                printed.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert provider.stalled.wait(120), "the stream never started"
    if seen is not None:
        assert printed.wait(120), f"never printed {seen!r}: {lines}"
    proc.send_signal(signal.SIGINT)
    err = proc.stderr.read()  # type: ignore[union-attr]
    proc.wait(timeout=120)
    reader.join(timeout=120)
    return proc.returncode, "".join(lines), err


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process is POSIX")
def test_ctrl_c_during_a_streamed_start_leaves_nothing(state_dir):
    with LoopbackProvider(stall_after={0: 3}) as provider:
        proc = _popen(state_dir, "start", "--key", "t-1", "--draft", "D", "--model", "gpt-4.1-mini",
                      "--base-url", provider.base_url, "--stream")
        code, out, err = _interrupt(proc, provider)
    assert code == 1 and err == "STOPPED: interrupted\n", err
    assert not state_dir.exists()  # no checkpoint, lock file, trace file or folder


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process is POSIX")
@pytest.mark.parametrize("decision", ["reject", "approve"])
def test_ctrl_c_during_a_streamed_resume_leaves_the_run_as_before(cli, state_dir, monkeypatch,
                                                                  decision):
    """Mid-way through the model's streamed reply: the saved RunState, status and spend are those
    of before the run (the decision, written before any effect, stays recorded); the next resume
    finishes it, and an approval publishes once."""
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    with LoopbackProvider(stall_after={1: 8}) as provider:  # stalls 5 words into the reply
        assert cli("start", "--key", "t-1", "--draft", "D", "--model", "gpt-4.1-mini",
                   "--base-url", provider.base_url).code == 0
        before = _cp(state_dir)
        proc = _popen(state_dir, "resume", "--task", "t-1", "--decision", decision,
                      "--reason", REASON, "--stream", "--json")
        code, out, err = _interrupt(proc, provider, seen='"text_delta"')
        assert code == 1 and err.startswith("STOPPED: interrupted"), err
        assert [e["event"] for e in _lines(out)][:2] == ["tool_output", "text_delta"]  # it streamed
        after = _cp(state_dir)
        for field in ("run_state", "status", "spend", "pending", "final_output"):
            assert after[field] == before[field], field
        assert after["decision"]["decision"] == {"approve": "approved", "reject": "rejected"}[decision]
        assert len(ledger_entries(state_dir)) == (1 if decision == "approve" else 0)
        frozen = snapshot(state_dir / "checkpoints")
        r = cli("resume", "--task", "t-1", "--decision", decision, "--reason", REASON, "--json")
        assert r.code == 0, r.err
    assert r.json()["status"] == ("completed" if decision == "approve" else "cancelled")
    assert snapshot(state_dir / "checkpoints") != frozen
    assert len(ledger_entries(state_dir)) == (1 if decision == "approve" else 0)
