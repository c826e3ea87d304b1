"""Local traces, execution receipts (show), the inbox (list), review, approval expiry,
and read-only commands that never import the SDK."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import subprocess
import sys
from datetime import timedelta

import pytest

from conftest import ROOT, checkpoint_file, ledger_entries, resign, snapshot

LONG_DRAFT = "Version 1.2 fixes the login bug and adds a dark mode. SECRET-MARKER-7 stays private."


pytestmark = pytest.mark.usefixtures("tracing_on")  # traces are the point here (conftest)


def _start(cli, key="t-1", draft=LONG_DRAFT, title="Release notes", *extra):
    r = cli("start", "--key", key, "--title", title, "--draft", draft, *extra, "--json")
    assert r.code == 0, r.err
    return r.json()


def _trace(state_dir, task_id):
    from state.files.store import Store
    from workflow.observe import trace_log
    path = trace_log.trace_path(Store(state_dir), task_id)
    return path, [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _cp(state_dir, task_id):
    return json.loads(checkpoint_file(state_dir, task_id).read_text(encoding="utf-8"))


def _iso(dt):
    from state import clock

    return clock.iso(dt)


def _at(state_dir, task_id, delta):
    """The ISO time ``delta`` after the task's current approval request was made."""
    from state import clock

    return _iso(clock.parse_iso(_cp(state_dir, task_id)["history"][0]["at"]) + delta)


# --------------------------------------------------------------------------------------- traces
def test_trace_records_start_and_every_resume_under_one_task_group(cli, state_dir):
    _start(cli)
    assert cli("resume", "--task", "t-1", "--decision", "approve", "--by", "alice").code == 0
    _, records = _trace(state_dir, "t-1")
    runs = [r["phase"] for r in records if r["kind"] == "run"]
    assert runs == ["start", "resume"]
    starts = [r for r in records if r["kind"] == "trace_start"]
    assert [s["metadata"] for s in starts] == [{"task_id": "t-1", "phase": "start"},
                                               {"task_id": "t-1", "phase": "decision"},  # hitl.decision
                                               {"task_id": "t-1", "phase": "resume"}]
    assert {s["group_id"] for s in starts} == {"t-1"}
    spans = [r for r in records if r["kind"] == "span"]
    assert {"agent", "generation", "function", "turn", "task"} <= {s["type"] for s in spans}
    assert len({r["trace_id"] for r in records if "trace_id" in r}) == 1  # the SDK reattaches it
    assert [r["outcome"] for r in records if r["kind"] == "run_end"] == ["ok", "ok"]


def test_trace_files_are_separate_per_task(cli, state_dir):
    _start(cli, key="a-1")
    _start(cli, key="b-1", draft="Other draft")
    for task in ("a-1", "b-1"):
        _, records = _trace(state_dir, task)
        assert {r["group_id"] for r in records if r["kind"] == "trace_start"} == {task}


def test_trace_redacts_draft_body_by_default(cli, state_dir):
    _start(cli)
    path, records = _trace(state_dir, "t-1")
    text = path.read_text(encoding="utf-8")
    assert "SECRET-MARKER-7" not in text and LONG_DRAFT not in text
    call = next(r for r in records if r["kind"] == "span" and r["type"] == "function")
    body = call["data"]["input"]["body"]
    assert body["sha256"] == hashlib.sha256(LONG_DRAFT.encode()).hexdigest()
    assert body["chars"] == len(LONG_DRAFT) and LONG_DRAFT.startswith(body["preview"].rstrip("…"))


def test_trace_content_flag_writes_the_full_draft(cli, state_dir):
    _start(cli, "t-1", LONG_DRAFT, "Release notes", "--trace-content")
    path, records = _trace(state_dir, "t-1")
    call = next(r for r in records if r["kind"] == "span" and r["type"] == "function")
    assert call["data"]["input"]["body"] == LONG_DRAFT
    assert records[0]["kind"] == "run" and records[0]["content"] is True


def test_trace_never_holds_secret_values(cli, state_dir, monkeypatch):
    from agent import models
    import dataclasses

    from agents.testing import assistant_message

    api_key = "sk-test-0123456789abcdef"
    monkeypatch.setenv("OPENAI_API_KEY", api_key)
    monkeypatch.setenv("HITL_SIGNING_KEY", "signing-secret-value-42")
    real = models.offline_responder

    def echoing(call):  # a model that repeats both secrets next to its answer
        step = real(call)
        echo = assistant_message(f"Leaked {api_key} and signing-secret-value-42 here.")
        return dataclasses.replace(step, output=[echo, *step.output])

    monkeypatch.setattr(models, "offline_responder", echoing)
    _start(cli, "t-1", "A draft without secrets.", "T", "--trace-content")
    assert cli("resume", "--task", "t-1", "--decision", "approve").code == 0
    path, _ = _trace(state_dir, "t-1")
    text = path.read_text(encoding="utf-8")
    assert api_key not in text and "signing-secret-value-42" not in text
    assert "[redacted]" in checkpoint_file(state_dir, "t-1").read_text(encoding="utf-8")


def test_local_processor_replaces_the_hosted_exporter():
    from agents.tracing import get_trace_provider

    from workflow import hitl  # noqa: F401  (importing hitl installs the processor)
    from workflow.observe import tracing

    processors = get_trace_provider()._multi_processor._processors
    assert len(processors) == 1 and isinstance(processors[0], tracing.LocalTraceProcessor)


def test_start_in_a_new_process_prints_no_trace_export_warning(state_dir):
    from conftest import run_subprocess

    r = run_subprocess(state_dir, "start", "--key", "p-1", "--draft", "D")
    assert r.code == 0 and r.err == "", r.err
    assert (state_dir / "traces").is_dir()


# -------------------------------------------------------------------------------------- receipt
def test_show_receipt_of_an_approved_task(cli, state_dir):
    _start(cli)
    cli("resume", "--task", "t-1", "--decision", "approve", "--by", "alice", "--reason", "LGTM")
    before = snapshot(state_dir)
    r = cli("show", "--task", "t-1", "--json")
    assert r.code == 0, r.err
    rec = r.json()
    assert snapshot(state_dir) == before  # show only reads
    assert rec["task_id"] == "t-1" and rec["outcome"]["status"] == "completed"
    assert rec["outcome"]["executed"] is True
    assert rec["outcome"]["ledger"]["idempotency_key"] == "t-1"
    d = rec["approval"]["decision"]
    assert (d["decision"], d["by"], d["reason"]) == ("approved", "alice", "LGTM") and d["at"]
    assert rec["approval"]["tool"] == "publish_draft" and rec["approval"]["expires_at"]
    assert rec["approval"]["arguments"]["title"] == "Release notes"
    kinds = [(s["step"], s.get("phase") or s.get("event") or s.get("ran")) for s in rec["trajectory"]]
    assert kinds == [
        ("run", "start"), ("model_call", None), ("tool_call", False),
        ("checkpoint", "started"), ("approval_requested", None),
        ("decision", None), ("checkpoint", "decision_recorded"),
        ("run", "resume"), ("tool_call", True), ("ledger_entry", None), ("model_call", None),
        ("checkpoint", "completed"),
    ]
    for step in rec["trajectory"]:
        if step["step"] == "checkpoint":
            assert step["schema_version"] == 3 and step["run_state_schema_version"]
            assert step["sdk_version"]
        if step["step"] == "model_call":
            assert step["latency_ms"] is not None
    t = rec["totals"]
    assert (t["runs"], t["model_calls"], t["tool_calls"]) == (2, 2, 2)
    assert t["elapsed_s"] >= 0 and t["run_time_ms"] > 0
    assert rec["checkpoint"]["revision"] == 3 and rec["errors"] == []


def test_show_receipt_of_a_rejected_task_has_no_ledger_entry(cli, state_dir):
    _start(cli)
    cli("resume", "--task", "t-1", "--decision", "reject", "--by", "bob", "--reason", "Typo.")
    rec = cli("show", "--task", "t-1", "--json").json()
    assert rec["outcome"] == {"status": "cancelled", "executed": False, "ledger": None,
                              "final_output": rec["outcome"]["final_output"]}
    assert rec["approval"]["decision"]["reason"] == "Typo."
    assert not [s for s in rec["trajectory"] if s["step"] == "tool_call" and s["ran"]]
    text = cli("show", "--task", "t-1").out
    assert "outcome: cancelled; ledger: no entry (nothing done)" in text and "rejected by bob" in text


def test_show_counts_tokens_and_latency_of_each_model_call(state_dir):
    from agents.testing import ModelStep, ScriptedModel
    from agents.usage import Usage

    from agent.models import offline_responder
    from state.files.store import Store
    from agent import application
    from workflow.observe.receipt import build_receipt

    def model():
        return ScriptedModel([ModelStep.respond(offline_responder) for _ in range(3)], emit_traces=True,
                             default_usage=Usage(requests=1, input_tokens=120, output_tokens=30,
                                                 total_tokens=150))

    store = Store(state_dir)
    asyncio.run(application.start(store, task_id="tok-1", title="T", draft="D", model=model()))
    asyncio.run(application.resume(store, task_id="tok-1", decision="approve", by="a", model=model()))
    rec = build_receipt(store, "tok-1")
    calls = [s for s in rec["trajectory"] if s["step"] == "model_call"]
    assert [(c["input_tokens"], c["output_tokens"]) for c in calls] == [(120, 30), (120, 30)]
    assert all(c["latency_ms"] is not None and c["latency_ms"] >= 0 for c in calls)
    assert (rec["totals"]["input_tokens"], rec["totals"]["output_tokens"],
            rec["totals"]["total_tokens"]) == (240, 60, 300)


def test_show_without_a_trace_still_reports_outcome_and_checkpoint_history(cli, state_dir):
    _start(cli)
    cli("resume", "--task", "t-1", "--decision", "approve")
    path, _ = _trace(state_dir, "t-1")
    path.unlink()
    rec = cli("show", "--task", "t-1", "--json").json()
    assert rec["outcome"]["status"] == "completed" and rec["outcome"]["ledger"]
    assert [s["event"] for s in rec["trajectory"] if s["step"] == "checkpoint"] == [
        "started", "decision_recorded", "completed"]
    assert rec["trace"]["records"] == 0


def test_show_reports_a_cut_trace_line_as_an_error(cli, state_dir):
    _start(cli)
    path, _ = _trace(state_dir, "t-1")
    with open(path, "ab") as fh:
        fh.write(b'{"kind":"span","trace_')  # a crash mid-line
    rec = cli("show", "--task", "t-1", "--json").json()
    assert rec["trace"]["unreadable_lines"] == 1
    assert any("unreadable line" in e for e in rec["errors"])


def test_show_reports_a_failed_run(cli, state_dir, monkeypatch):
    """A resume whose run fails (here: the tool refuses) leaves a run_failed step and an error."""
    _start(cli)
    from state.files.ledger import Ledger

    def refuse(self, **kwargs):
        from state.errors import Refused

        raise Refused("ledger disk full (simulated)")

    monkeypatch.setattr(Ledger, "record", refuse)
    cli("resume", "--task", "t-1", "--decision", "approve").assert_stopped()
    monkeypatch.undo()
    rec = cli("show", "--task", "t-1", "--json").json()
    assert any("ledger disk full" in e for e in rec["errors"])
    assert any(s["step"] == "run_failed" for s in rec["trajectory"])


# ---------------------------------------------------------------------------------------- inbox
def test_list_shows_waiting_first_with_age_and_summary(cli, state_dir, monkeypatch):
    _start(cli, key="done-1", draft="Done draft")
    cli("resume", "--task", "done-1", "--decision", "approve")
    _start(cli, key="wait-1")
    monkeypatch.setenv("HITL_NOW", _at(state_dir, "wait-1", timedelta(hours=1, minutes=5)))
    tasks = cli("list", "--json").json()["tasks"]
    assert [t["task_id"] for t in tasks] == ["wait-1", "done-1"]
    wait = tasks[0]
    assert wait["age_s"] == 3900 and wait["overdue"] is False
    assert wait["summary"].startswith("publish_draft(title='Release notes', body='Version 1.2")
    assert f"({len(LONG_DRAFT)} chars)" in wait["summary"]
    assert tasks[1]["age_s"] is None
    text = cli("list").out.splitlines()
    assert text[0].startswith("WAITING    wait-1  [blog]  1h05m ago, expires in 22h55m  publish_draft(")
    assert text[1].startswith("completed  done-1  [blog]  rev 3")


def test_list_status_filter(cli):
    _start(cli, key="w-1")
    _start(cli, key="c-1", draft="x")
    cli("resume", "--task", "c-1", "--decision", "reject", "--reason", "no")
    assert [t["task_id"] for t in cli("list", "--status", "cancelled", "--json").json()["tasks"]] == ["c-1"]
    assert [t["task_id"] for t in cli("list", "--status", "waiting_for_approval", "--json").json()["tasks"]] == ["w-1"]
    assert cli("list", "--status", "bogus").code == 2


# --------------------------------------------------------------------------------------- review
def _scripted(answers):
    it = iter(answers)
    shown: list[str] = []

    def ask(prompt):
        shown.append(prompt)
        try:
            return next(it)
        except StopIteration:
            raise EOFError from None

    return ask, shown


def _decide(state_dir, by="rita"):
    from cli import commands
    from state.files.store import Store

    store = Store(state_dir)
    return lambda t, d, r, call=None: commands.decide(store, t, d, r, by=by, call_id=call,
                                                      trace_content=False).to_json()


def test_review_walks_waiting_tasks_approve_reject_skip(cli, state_dir):
    from state.files.store import Store
    from workflow.review.inbox import review

    _start(cli, key="r-1", draft="First draft")
    _start(cli, key="r-2", draft="Second draft")
    _start(cli, key="r-3", draft="Third draft")
    ask, prompts = _scripted(["a", "r", "Needs a source.", "s"])
    said: list[str] = []
    out = review(Store(state_dir), ask=ask, say=said.append, decide=_decide(state_dir))
    assert [(x["task_id"], x["action"], x.get("status")) for x in out["reviewed"]] == [
        ("r-1", "approve", "completed"), ("r-2", "reject", "cancelled"),
        ("r-3", "skip", "waiting_for_approval")]
    assert out["remaining"] == 1
    text = "\n".join(said)
    assert "tool: publish_draft" in text and "title: 'Release notes'" in text
    assert "    | First draft" in text and "    | Third draft" in text  # the draft itself
    status = {t["task_id"]: t for t in cli("list", "--json").json()["tasks"]}
    assert status["r-2"]["decision"] == {"decision": "rejected", "by": "rita",
                                         "at": status["r-2"]["decision"]["at"],
                                         "reason": "Needs a source."}
    assert [e["idempotency_key"] for e in ledger_entries(state_dir)] == ["r-1"]


def test_review_reject_needs_a_reason_and_bad_answers_are_asked_again(cli, state_dir):
    from state.files.store import Store
    from workflow.review.inbox import review

    _start(cli, key="r-1")
    # an empty reason asks for the reason again (not the a/r/s/q question)
    ask, prompts = _scripted(["maybe", "r", "", "Off topic."])
    said: list[str] = []
    out = review(Store(state_dir), ask=ask, say=said.append, decide=_decide(state_dir))
    assert out["reviewed"][0]["status"] == "cancelled"
    assert "  please answer a, r, s or q" in said and "  a reject needs a reason" in said
    assert cli("status", "--task", "r-1", "--json").json()["decision"]["reason"] == "Off topic."
    # two empty reasons in a row: back to the question, and "s" skips
    _start(cli, key="r-2")
    ask, _ = _scripted(["r", "", "", "s"])
    out = review(Store(state_dir), ask=ask, say=lambda s: None, decide=_decide(state_dir))
    assert [x["action"] for x in out["reviewed"]] == ["skip"] and out["remaining"] == 1


def test_review_end_of_input_stops_without_deciding(cli, state_dir):
    from state.files.store import Store
    from workflow.review.inbox import review

    _start(cli, key="r-1")
    before = snapshot(state_dir)
    out = review(Store(state_dir), ask=_scripted([])[0], say=lambda s: None, decide=_decide(state_dir))
    assert out == {"reviewed": [], "remaining": 1} and snapshot(state_dir) == before


def test_review_refuses_approve_of_an_expired_request(cli, state_dir, monkeypatch):
    from state.files.store import Store
    from workflow.review.inbox import review

    _start(cli, "r-1", LONG_DRAFT, "T", "--expires-in", "90s")
    monkeypatch.setenv("HITL_NOW", _at(state_dir, "r-1", timedelta(minutes=2)))
    ask, _ = _scripted(["a", "r", "Too late."])
    said: list[str] = []
    out = review(Store(state_dir), ask=ask, say=said.append, decide=_decide(state_dir))
    assert "  approval expired: this request can only be rejected or skipped" in said
    assert out["reviewed"][0]["status"] == "cancelled" and ledger_entries(state_dir) == []


def test_review_without_a_terminal_refuses_with_a_hint(cli, state_dir, monkeypatch):
    _start(cli, key="r-1")
    monkeypatch.setattr(sys, "stdin", io.StringIO("a\n"))
    before = snapshot(state_dir)
    r = cli("review")
    r.assert_stopped()
    assert "not a tty" in r.err and "python run.py resume --task ID" in r.err
    assert snapshot(state_dir) == before


# --------------------------------------------------------------------------------------- expiry
def test_start_expires_in_sets_the_deadline(cli, state_dir):
    from state import clock

    _start(cli, "e-1", "D", "T", "--expires-in", "90s")
    cp = _cp(state_dir, "e-1")
    started = clock.parse_iso(cp["history"][0]["at"])
    assert 89 <= (clock.parse_iso(cp["expires_at"]) - started).total_seconds() <= 91
    assert cp["approval_ttl_s"] == 90
    _start(cli, "e-2", "D")
    assert _cp(state_dir, "e-2")["approval_ttl_s"] == 24 * 3600  # documented default


@pytest.mark.parametrize("bad", ["10x", "0s", "-5m", "1.5h", "", "400d"])
def test_bad_expires_in_is_a_usage_error(cli, state_dir, bad):
    r = cli("start", "--key", "e-1", "--draft", "D", "--expires-in", bad)
    assert r.code == 2 and not state_dir.exists()


def test_approve_after_expiry_is_refused_and_nothing_changes(cli, state_dir, monkeypatch):
    _start(cli, "e-1", "D", "T", "--expires-in", "30m")
    monkeypatch.setenv("HITL_NOW", _at(state_dir, "e-1", timedelta(minutes=29)))
    assert cli("list", "--json").json()["tasks"][0]["overdue"] is False
    monkeypatch.setenv("HITL_NOW", _at(state_dir, "e-1", timedelta(minutes=31)))
    before = snapshot(state_dir)
    r = cli("resume", "--task", "e-1", "--decision", "approve")
    r.assert_stopped()
    assert r.err.startswith("STOPPED: approval expired")
    assert snapshot(state_dir) == before and ledger_entries(state_dir) == []
    assert cli("list", "--json").json()["tasks"][0]["overdue"] is True


def test_approve_before_expiry_still_works(cli, state_dir, monkeypatch):
    _start(cli, "e-1", "D", "T", "--expires-in", "30m")
    monkeypatch.setenv("HITL_NOW", _at(state_dir, "e-1", timedelta(minutes=29)))
    assert cli("resume", "--task", "e-1", "--decision", "approve", "--json").json()["status"] == "completed"


def test_reject_after_expiry_is_accepted(cli, state_dir, monkeypatch):
    _start(cli, "e-1", "D", "T", "--expires-in", "90s")
    monkeypatch.setenv("HITL_NOW", _at(state_dir, "e-1", timedelta(hours=3)))
    r = cli("resume", "--task", "e-1", "--decision", "reject", "--reason", "Expired; redo.", "--json")
    assert r.code == 0 and r.json()["status"] == "cancelled" and ledger_entries(state_dir) == []


def test_expire_marks_overdue_tasks_and_they_never_execute(cli, state_dir, monkeypatch):
    _start(cli, "e-1", "D", "T", "--expires-in", "90s")
    _start(cli, "e-2", "D2", "T", "--expires-in", "24h")
    monkeypatch.setenv("HITL_NOW", _at(state_dir, "e-1", timedelta(minutes=5)))
    out = cli("status", "--task", "e-1").out  # its approve is refused now: the next step is not one
    expires_at = _cp(state_dir, "e-1")["expires_at"]
    assert ('  next: python run.py resume --task e-1 --decision reject --reason "..." (the request expired at '
            f"{expires_at}: it can only be rejected, or marked expired: python run.py expire)") in out, out
    r = cli("expire", "--json")
    assert r.code == 0 and r.json() == {"expired": ["e-1"]}
    tasks = {t["task_id"]: t for t in cli("list", "--json").json()["tasks"]}
    assert tasks["e-1"]["status"] == "expired" and tasks["e-1"]["pending"] == []
    assert tasks["e-2"]["status"] == "waiting_for_approval"
    assert [t["task_id"] for t in cli("list", "--status", "expired", "--json").json()["tasks"]] == ["e-1"]
    monkeypatch.delenv("HITL_NOW")  # even "back in time", an expired task stays expired
    before = snapshot(state_dir)
    r = cli("resume", "--task", "e-1", "--decision", "approve")
    r.assert_stopped()
    assert "approval expired" in r.err and snapshot(state_dir) == before
    assert cli("resume", "--task", "e-1", "--decision", "reject", "--json").json()["status"] == "expired"
    assert ledger_entries(state_dir) == []
    rec = cli("show", "--task", "e-1", "--json").json()
    assert rec["trajectory"][-1]["event"] == "expired" and rec["outcome"]["executed"] is False
    assert cli("expire", "--task", "e-2").code == 1  # not overdue: refused by name


def test_a_decision_recorded_before_expiry_still_completes_after_it(cli, state_dir, monkeypatch):
    """The approval came in time; a crash before the run finished must not lose it."""
    from state import failpoints

    class Crash(BaseException):
        pass

    _start(cli, "e-1", "D", "T", "--expires-in", "90s")
    real = failpoints.hit

    def hit(point):
        real(point)
        if point == "checkpoint:decision:after":
            raise Crash(point)

    monkeypatch.setattr(failpoints, "hit", hit)
    with pytest.raises(Crash):
        cli("resume", "--task", "e-1", "--decision", "approve")
    monkeypatch.setattr(failpoints, "hit", real)
    monkeypatch.setenv("HITL_NOW", _at(state_dir, "e-1", timedelta(hours=1)))
    assert cli("expire", "--json").json() == {"expired": []}
    r = cli("resume", "--task", "e-1", "--decision", "approve", "--json")
    assert r.code == 0 and r.json()["status"] == "completed" and len(ledger_entries(state_dir)) == 1


def test_a_checkpoint_without_expires_at_is_refused_even_re_signed(cli, state_dir, monkeypatch):
    """Removing the deadline must not remove the expiry: ``expires_at`` has no default, so a file
    without it is refused, even when re-signed with the key (found by tests/test_fuzz_state.py)."""
    _start(cli, "old-1", "D", "T", "--expires-in", "90s")
    path = checkpoint_file(state_dir, "old-1")

    def strip(data):
        del data["expires_at"]

    resign(state_dir, path, strip)
    monkeypatch.setenv("HITL_NOW", _at(state_dir, "old-1", timedelta(days=30)))
    before = snapshot(state_dir)
    r = cli("resume", "--task", "old-1", "--decision", "approve")
    r.assert_stopped()
    assert "expires_at" in r.err and "Field required" in r.err
    assert snapshot(state_dir) == before and ledger_entries(state_dir) == []


def test_removing_expires_at_without_the_key_breaks_the_mac(cli, state_dir):
    _start(cli, "e-1", "D", "T", "--expires-in", "90s")
    path = checkpoint_file(state_dir, "e-1")
    data = json.loads(path.read_text(encoding="utf-8"))
    del data["expires_at"]
    path.write_text(json.dumps(data), encoding="utf-8")
    r = cli("resume", "--task", "e-1", "--decision", "approve")
    r.assert_stopped()
    assert "integrity" in r.err


# ----------------------------------------------------------------------------------------- speed
#: Every command that only reads files. Another branch adds ``doctor``: append it here.
READ_ONLY_COMMANDS = [
    ["status", "--task", "s-1"],
    ["list"],
    ["list", "--status", "completed"],
    ["ledger"],
    ["show", "--task", "s-1"],
    ["doctor"],
]


@pytest.mark.parametrize("argv", READ_ONLY_COMMANDS, ids=lambda a: " ".join(a))
def test_read_only_command_never_imports_the_sdk(cli, state_dir, argv):
    _start(cli, key="s-1")
    cli("resume", "--task", "s-1", "--decision", "approve")
    code = ("import sys, run; "
            f"rc = run.main(['--state-dir', {str(state_dir)!r}, *{argv!r}]); "
            "print('RESULT', rc, sorted(m for m in ('agents', 'openai') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         timeout=60)
    assert out.stdout.strip().splitlines()[-1] == "RESULT 0 []", out.stdout + out.stderr


#: Packages a read-only command has no use for, each costing it tens of ms of CPU to import:
#: the SDK's HTTP stack, the web and PostgreSQL extras. (pydantic-settings, which brings asyncio
#: and dotenv, is paid on purpose: the settings are its ``BaseSettings``, ``state/settings.py``.)
HEAVY_FOR_READS = ("agents", "openai", "httpx", "jinja2", "starlette", "psycopg")


def test_read_only_commands_import_no_heavy_package(cli, state_dir):
    """Every read-only command, run one after the other in one fresh Python, succeeds and leaves
    none of :data:`HEAVY_FOR_READS` in ``sys.modules`` (what ``benchmarks/cli_timing.py`` times)."""
    _start(cli, key="s-1")
    cli("resume", "--task", "s-1", "--decision", "approve")
    code = ("import contextlib, io, sys, run\n"
            f"for argv in {READ_ONLY_COMMANDS!r}:\n"
            "    with contextlib.redirect_stdout(io.StringIO()):\n"
            f"        rc = run.main(['--state-dir', {str(state_dir)!r}, *argv])\n"
            f"    print('RESULT', rc, sorted(m for m in {HEAVY_FOR_READS!r} if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         timeout=60)
    assert out.stdout.splitlines() == ["RESULT 0 []"] * len(READ_ONLY_COMMANDS), out.stdout + out.stderr


def test_a_command_process_freezes_what_is_alive_before_it_exits(cli, state_dir):
    """``run.py``'s entry point, after a command that succeeded and printed, hands every live object
    to ``gc.freeze`` (Python's collections at exit would walk them all: about a fifth of the CPU of
    a read-only command); the output and the exit code are those of ``main``."""
    _start(cli, key="s-1")
    code = ("import gc, sys, run\n"
            f"sys.argv = ['run.py', '--state-dir', {str(state_dir)!r}, 'status', '--task', 's-1']\n"
            "rc = run._entry_point()\n"
            "print('RESULT', rc, gc.get_freeze_count() > 0)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         timeout=60)
    lines = out.stdout.splitlines()
    assert lines[-1] == "RESULT 0 True", out.stdout + out.stderr
    assert any(line.startswith("task s-1: waiting_for_approval") for line in lines), out.stdout


def test_list_with_an_unreadable_checkpoint_names_it_and_points_to_doctor(cli, state_dir):
    """Fail closed, but not a dead end: the good task is listed, the STOPPED line names the bad
    file and the way on (exit 1)."""
    _start(cli, "good-1", "D1", "T")
    _start(cli, "bad-1", "D2", "T")
    path = checkpoint_file(state_dir, "bad-1")
    path.write_bytes(path.read_bytes().replace(b'"revision": 1', b'"revision": 7'))
    before = snapshot(state_dir)
    r = cli("list")
    assert r.code == 1 and "good-1" in r.out and "bad-1" not in r.out and "Traceback" not in r.err
    assert [line for line in r.err.splitlines() if line.strip()] == [r.err.strip()]
    assert r.err.startswith("STOPPED: 1 checkpoint is not listed")
    assert f"integrity check failed for {path.parent.name}/{path.name}" in r.err and "python run.py doctor" in r.err
    assert cli("status", "--task", "good-1").code == 0
    assert snapshot(state_dir) == before


def test_expire_sweep_skips_a_busy_task_instead_of_stopping_half_way(cli, state_dir, monkeypatch):
    from state.files.store import Store

    _start(cli, "a-1", "D1", "T", "--expires-in", "90s")
    _start(cli, "b-1", "D2", "T", "--expires-in", "90s")
    monkeypatch.setenv("HITL_NOW", "2099-01-01T00:00:00Z")
    monkeypatch.setenv("HITL_LOCK_TIMEOUT", "0.2")
    with Store(state_dir).task_lock("b-1"):  # another process is working on b-1
        r = cli("expire", "--json")
    assert r.code == 0, r.err
    assert r.json() == {"expired": ["a-1"], "busy": ["b-1"]}
    r = cli("expire", "--json")
    assert r.json() == {"expired": ["b-1"]}


def test_review_counts_a_refused_answer_as_refused_not_decided(cli, state_dir, monkeypatch, capsys):
    """``run.py review`` where the first task's decision is refused (here: it changed on disk after
    it was shown): the refusal is a ``STOPPED`` line in the walk, and the summary counts it
    refused, never decided; a task answered after it is counted decided."""
    import builtins
    import sys
    from types import SimpleNamespace

    from cli import commands
    from state.errors import Refused
    from state.files.store import Store

    _start(cli, key="r-1", draft="Changed under the reviewer")
    _start(cli, key="r-2", draft="One channel")
    ask, _ = _scripted(["a", "a"])
    monkeypatch.setattr(builtins, "input", ask)
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)

    def decide(store, task_id, *args, **kwargs):
        if task_id == "r-1":
            raise Refused("stale_revision", "task r-1 changed on disk since it was shown; nothing written")
        return commands.decide(store, task_id, *args, **kwargs)

    commands.review(Store(state_dir), SimpleNamespace(trace_content=False), decide, "rita")
    out = capsys.readouterr().out
    assert "STOPPED: task r-1 changed on disk since it was shown" in out
    assert out.rstrip().splitlines()[-1] == "reviewed: 1 decided, 1 refused, 1 still waiting"


def test_review_breaks_the_draft_only_at_a_newline_and_shows_other_separators_escaped(cli, state_dir):
    """A draft holding U+2028 (LINE SEPARATOR, which the command line accepts) is one line in
    ``review``, the separator escaped as ``status`` shows it, never a line break the draft does
    not have; a newline still breaks it, and a last newline adds no empty line."""
    from state.files.store import Store
    from workflow.review.inbox import review

    _start(cli, key="r-1", draft="one\u2028two\nthree\n")
    said: list[str] = []
    review(Store(state_dir), ask=_scripted(["s"])[0], say=said.append, decide=_decide(state_dir))
    shown = [line for text in said for line in text.split("\n") if line.startswith("    | ")]
    assert shown == ["    | one\\u2028two", "    | three"], shown


def test_review_asks_once_for_a_task_whose_calls_all_have_their_decision(cli, state_dir):
    """A task with two calls whose run stopped once both had their decision (a crash right after
    the decision was saved): nothing is left to answer call by call, so ``review`` shows the calls
    and asks once, and the same decision again finishes the run: both published, once."""
    from conftest import run_subprocess
    from state.files.store import Store
    from workflow.review.inbox import review

    two = ["--draft", "Two channels", "--channel", "blog", "--channel", "news", "--json"]
    blog = cli("start", "--key", "r-1", *two).json()["pending"][0]["call_id"]
    crashed = run_subprocess(state_dir, "resume", "--task", "r-1", "--call", blog, "--decision", "approve",
                             "--always", env={"HITL_FAILPOINT": "checkpoint:decision:after"})
    assert crashed.code == 86, crashed.err
    task = cli("status", "--task", "r-1", "--json").json()
    assert task["status"] == "waiting_for_approval" and len(task["pending"]) == 2
    ask, prompts = _scripted(["a"])
    said: list[str] = []
    out = review(Store(state_dir), ask=ask, say=said.append, decide=_decide(state_dir))
    assert len(prompts) == 1 and out["reviewed"] == [{"task_id": "r-1", "action": "approve", "status": "completed"}]
    assert sorted(e["channel"] for e in ledger_entries(state_dir)) == ["blog", "news"]


def test_review_decides_the_call_it_showed_never_one_the_model_asked_for_after(cli, state_dir, monkeypatch):
    """While the reviewer looks at a task's call, another process approves it, the call runs and
    the model asks for another. The reviewer's reject then names the call shown: it is refused
    (that call ran), and the model's new call, which nobody saw, is left waiting, undecided."""
    import agent.models
    from agents.testing import ModelStep, function_call
    from state.files.store import Store
    from workflow.review.inbox import review

    offline = agent.models.offline_responder

    def respond(call):
        items = call.input if isinstance(call.input, list) else []
        outputs = [i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
        if len(outputs) == 1:  # the first call answered: ask again, a call nobody has seen
            return ModelStep(output=[function_call("publish_draft", {"title": "T", "body": "D."},
                                                   call_id="call_next")])
        return offline(call)

    monkeypatch.setattr(agent.models, "offline_responder", respond)
    shown = cli("start", "--key", "r-1", "--title", "T", "--draft", "D.", "--json").json()["pending"][0]["call_id"]
    answers = iter(["r", "Not this one."])

    def ask(prompt):
        if prompt.startswith("  approve / reject"):  # meanwhile, someone else approves the call shown
            assert cli("resume", "--task", "r-1", "--decision", "approve", "--by", "bob").code == 0
        return next(answers)

    said: list[str] = []
    out = review(Store(state_dir), ask=ask, say=said.append, decide=_decide(state_dir))
    assert "error" in out["reviewed"][0] and f"call_id: {shown}" in "\n".join(said)
    task = cli("status", "--task", "r-1", "--json").json()
    assert task["status"] == "waiting_for_approval"
    assert [p["call_id"] for p in task["pending"]] == ["call_next"]
    assert all(d.get("call_id") != "call_next" for d in task.get("decisions", []))
    assert len(ledger_entries(state_dir)) == 1


def test_review_asks_each_call_of_a_task_with_several_channels_on_its_own(cli, state_dir, monkeypatch, capsys):
    """``run.py review`` on a task waiting at two calls (two channels): each call is shown and
    asked on its own and decided by its call ID; approve one and reject the other, and the run
    goes on once both have an answer: one entry, the approved channel's. A call another reviewer
    decided already is not asked again."""
    import builtins
    import sys
    from types import SimpleNamespace

    from cli import commands
    from state.files.store import Store

    two = ["--draft", "Two channels", "--channel", "blog", "--channel", "news", "--json"]
    pending = cli("start", "--key", "r-1", *two).json()["pending"]
    blog, news = (p["call_id"] for p in pending)
    ask, prompts = _scripted(["a", "r", "Not on news."])
    monkeypatch.setattr(builtins, "input", ask)
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    commands.review(Store(state_dir), SimpleNamespace(trace_content=False), commands.decide, "rita")
    out = capsys.readouterr().out
    assert out.index(f"call_id: {blog}") < out.index("  -> waiting_for_approval") < out.index(f"call_id: {news}")
    assert out.rstrip().splitlines()[-1] == "reviewed: 2 decided, 0 still waiting"
    task = cli("status", "--task", "r-1", "--json").json()
    assert task["status"] == "completed"
    assert [(e["task_id"], e["channel"]) for e in ledger_entries(state_dir)] == [("r-1", "blog")]
    # one call decided already (by another reviewer): only the other is asked
    pending = cli("start", "--key", "r-2", *two).json()["pending"]
    assert cli("resume", "--task", "r-2", "--call", pending[0]["call_id"], "--decision", "approve").code == 0
    ask, prompts = _scripted(["s"])
    monkeypatch.setattr(builtins, "input", ask)
    commands.review(Store(state_dir), SimpleNamespace(trace_content=False), commands.decide, "rita")
    out = capsys.readouterr().out
    assert len(prompts) == 1 and f"call_id: {pending[0]['call_id']}" not in out
    assert f"call_id: {pending[1]['call_id']}" in out
    assert f"  call {pending[0]['call_id']} on blog: approved by " in out  # what was decided, shown first
