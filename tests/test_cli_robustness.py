"""The command line against hostile surroundings: an output that cannot be written, a damaged or
hostile trace file, out-of-range or non-UTF-8 arguments, bad environment variables, secrets of any
length in a trace, and text that could disguise what a reviewer sees.

Every case ends in the contract: exit 0, or one ``STOPPED:`` line and exit 1, or an argparse usage
error and exit 2; never a traceback, and a refusal changes nothing on disk.
"""

from __future__ import annotations

import io
import json
import os
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import CliResult, run_subprocess, snapshot

EXAMPLES = int(os.environ.get("HITL_FUZZ_EXAMPLES", "60"))


pytestmark = pytest.mark.usefixtures("tracing_on")  # traces are the point here (conftest)


def _start(cli, key="k-1", draft="Hello world", *extra):
    r = cli("start", "--key", key, "--title", "Title", "--draft", draft, *extra)
    assert r.code == 0, r.err
    return r


def _usage_error(r: CliResult, *needles: str) -> None:
    assert r.code == 2, (r.code, r.out, r.err)
    assert "Traceback" not in r.err and r.out == ""
    for needle in needles:
        assert needle in r.err, r.err


# -- 1. the output cannot be written ----------------------------------------------------------


class _FullStream(io.TextIOBase):
    """A stdout whose every write fails like ``>/dev/full``."""

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        raise OSError(28, "No space left on device")


def _main_with_full_stdout(state_dir: Path, *args: str) -> CliResult:
    import run

    err = io.StringIO()
    with redirect_stdout(_FullStream()), redirect_stderr(err):
        code = run.main(["--state-dir", str(state_dir), *args])
    return CliResult(code, "", err.getvalue())


def test_full_output_on_start_says_the_start_completed(state_dir, cli):
    r = _main_with_full_stdout(state_dir, "start", "--key", "k-1", "--draft", "Hello")
    r.assert_stopped()
    assert "the output could not be written (No space left on device)" in r.err
    assert (f"the start itself completed and is saved: see python run.py --state-dir {state_dir} status --task k-1"
            in r.err)  # the state dir it was given, repeated: the command acts on the same store
    assert cli("status", "--task", "k-1", "--json").json()["status"] == "waiting_for_approval"


def test_full_output_on_resume_and_json_status(state_dir, cli):
    _start(cli)
    r = _main_with_full_stdout(state_dir, "--json", "status", "--task", "k-1")
    r.assert_stopped()
    assert "itself completed" not in r.err  # status has no effect to report
    r = _main_with_full_stdout(state_dir, "resume", "--task", "k-1", "--decision", "approve")
    r.assert_stopped()
    assert "the resume itself completed and is saved" in r.err
    assert cli("status", "--task", "k-1", "--json").json()["status"] == "completed"


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_status_to_dev_full_in_a_real_process_has_no_traceback(state_dir, cli):
    import subprocess

    _start(cli)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HITL_", "OPENAI_"))}
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, str(Path(__file__).parents[1] / "run.py"),
                               "--state-dir", str(state_dir), "status", "--task", "k-1"],
                              stdout=full, stderr=subprocess.PIPE, text=True, env=env, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        "STOPPED: the output could not be written (No space left on device)"], proc.stderr


# -- 2. a damaged or hostile trace file ------------------------------------------------------

HOSTILE_LINES = [
    '{"kind":"span","type":"function","data":{"input":{"b":{"sha256":1}}},'
    '"started_at":"2020-01-01T00:00:00Z"}',
    '{"kind":"run","at":123}',
    '{"kind":"span","type":"turn","data":"x"}',
    '{"kind":"span","type":"turn","data":{"data":{"usage":{"input_tokens":"abc"}}}}',
    '{"kind":"span","type":"turn","data":{"data":{"usage":{"input_tokens":true}}}}',
    '{"kind":"span","type":"turn","data":{"data":{"usage":{"output_tokens":1' + "0" * 4000 + '}}}}',
    '{"kind":"run_end","outcome":"error","error":{"x":1},"at":[]}',
    '{"kind":"span","type":"function","started_at":"9999-12-31T23:59:59-23:59","ended_at":"0001-01-01T00:00:00+23:59"}',
    '{"kind":"span","type":"guardrail","data":{"x":NaN},"name":"\\u001b[2J\\u202e"}',
    '{"kind":"span","type":"guardrail","name":"\\u001b[2J\\u202e\\u0085\\u2028x"}',
    '{"kind":"span","type":"function","name":"\\u001b[2J\\u202eevil"}',
    '{"kind":"run_end","phase":"\\u009b2J","outcome":"error","error":"\\u001b]0;x\\u0007\\u2066"}',
    '{"kind":"span","data":' + "[" * 5000 + "]" * 5000 + "}",
    '{"kind":"span","type":"turn","span_id":"s","data":{"data":{"usage":{"input_tokens":' + "9" * 4200 + "}}}}",
]


def _facts(receipt: dict) -> dict:
    """What the receipt takes from the signed checkpoint and the ledger (a trace cannot change it)."""
    return {k: receipt[k] for k in ("task_id", "idempotency_key", "action", "outcome", "approval",
                                    "checkpoint")}


def _trace_file(state_dir: Path, task_id: str) -> Path:
    from state.files.store import file_name

    return state_dir / "traces" / (file_name(task_id) + ".jsonl")


@pytest.fixture
def task_with_trace(cli, state_dir):
    _start(cli)
    baseline = cli("show", "--task", "k-1", "--json").json()
    path = _trace_file(state_dir, "k-1")
    return path, path.read_bytes(), _facts(baseline)


def _show_both(cli) -> dict:
    text = cli("show", "--task", "k-1")
    assert text.code == 0 and "Traceback" not in text.err and text.err == "", text.err
    assert text.out.startswith("receipt: task k-1")
    assert "\x1b" not in text.out and "\u202e" not in text.out  # never sent raw to a terminal
    js = cli("show", "--task", "k-1", "--json")
    assert js.code == 0 and js.err == "", js.err
    json.loads(js.out, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    return js.json()


@pytest.mark.parametrize("line", HOSTILE_LINES, ids=range(len(HOSTILE_LINES)))
def test_show_skips_and_counts_a_hostile_trace_record(cli, task_with_trace, line):
    path, original, facts = task_with_trace
    path.write_bytes(original + line.encode() + b"\n")
    receipt = _show_both(cli)
    assert _facts(receipt) == facts
    trace = receipt["trace"]
    well_formed = any(x in line for x in ('"sha256":1', "9999-12-31", "guardrail\",\"name",
                                          "evil", "run_end\",\"phase"))
    assert trace["invalid_records"] + trace["unreadable_lines"] == (0 if well_formed else 1)
    assert receipt["totals"]["model_calls"] >= 1  # the good records still count (even next to
    # a line nested too deep for json, which trace_log.read skips as one unreadable line)


def test_show_names_invalid_records_under_errors(cli, task_with_trace):
    path, original, _ = task_with_trace
    path.write_bytes(original + b'{"kind":"run","at":123}\n{"kind":"span","type":"turn","data":"x"}\n')
    receipt = _show_both(cli)
    assert receipt["trace"]["invalid_records"] == 2
    assert "2 trace record(s) of an unexpected shape skipped" in receipt["errors"]


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
_field = st.sampled_from(["at", "phase", "pid", "outcome", "error", "span_id", "parent_id",
                          "started_at", "ended_at", "type", "name", "data", "content"])
_record = st.builds(
    lambda kind, fields, typ, data: {"kind": kind, **fields,
                                     **({"type": typ} if typ else {}),
                                     **({"data": data} if data is not None else {})},
    st.sampled_from(["run", "run_end", "span", "trace_start", "trace_end"]) | st.text(max_size=5),
    st.dictionaries(_field, _json | st.sampled_from(["2020-01-01T00:00:00Z", "x", ""]), max_size=6),
    st.sampled_from([None, "turn", "function", "generation", "guardrail", "handoff", "task"]),
    st.none() | _json | st.fixed_dictionaries({"data": st.fixed_dictionaries(
        {"turn": _json, "usage": st.dictionaries(st.sampled_from(["input_tokens", "output_tokens"]),
                                                 _json)})})
    | st.fixed_dictionaries({"input": _json, "output": _json}),
)
_line = (st.builds(lambda r: json.dumps(r).encode(), _record)
         | st.builds(lambda v: json.dumps(v).encode(), _json)
         | st.binary(max_size=60))


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(lines=st.lists(_line, min_size=1, max_size=6))
def test_show_survives_any_trace_file(cli, task_with_trace, lines):
    path, original, facts = task_with_trace
    path.write_bytes(original + b"\n".join(lines) + b"\n")
    assert _facts(_show_both(cli)) == facts


# -- 3. usage errors and environment variables ---------------------------------------------


def test_max_turns_above_the_schema_limit_is_a_usage_error(cli, state_dir):
    _usage_error(cli("start", "--draft", "x", "--max-turns", "2000"),
                 "argument --max-turns: --max-turns must be at most 1000")
    assert not state_dir.exists()
    _start(cli)
    before = snapshot(state_dir)
    _usage_error(cli("resume", "--task", "k-1", "--decision", "approve", "--max-turns", "5000"),
                 "--max-turns must be at most 1000")
    assert snapshot(state_dir) == before
    assert cli("start", "--key", "k-2", "--draft", "x", "--max-turns", "1000").code == 0


@pytest.mark.parametrize("args, name", [
    (("start", "--draft", "\udcff"), "--draft"),
    (("start", "--draft", "x", "--title", "a\udcffb"), "--title"),
    (("start", "--draft", "x", "--model", "gpt\udcff"), "--model"),
    (("start", "--draft", "x", "--model", "m", "--base-url", "http://h\udcff/v1"), "--base-url"),
    (("resume", "--task", "k", "--decision", "reject", "--reason", "no\udcff"), "--reason"),
    (("resume", "--task", "k", "--decision", "approve", "--by", "\udcffal"), "--by"),
    (("review", "--by", "\udcff"), "--by"),
])
def test_argument_that_is_not_utf8_is_a_usage_error(cli, state_dir, args, name):
    _usage_error(cli(*args), f"argument {name}:", "is not valid UTF-8")
    assert not state_dir.exists()


def test_non_utf8_bytes_on_a_real_command_line(state_dir):
    if sys.platform == "win32":
        pytest.skip("Windows command lines are UTF-16")
    r = run_subprocess(state_dir, "start", "--draft", os.fsdecode(b"\xff"))
    _usage_error(r, "argument --draft: draft is not valid UTF-8")
    assert not state_dir.exists()


@pytest.mark.parametrize("name, value, message", [
    ("HITL_LOCK_TIMEOUT", "abc", "HITL_LOCK_TIMEOUT='abc' is not a number of seconds from 0 to 86400"),
    ("HITL_LOCK_TIMEOUT", "nan", "HITL_LOCK_TIMEOUT='nan' is not a number of seconds from 0 to 86400"),
    ("HITL_LOCK_TIMEOUT", "-1", "HITL_LOCK_TIMEOUT='-1' is not a number of seconds from 0 to 86400"),
    ("HITL_LOCK_TIMEOUT", "inf", "HITL_LOCK_TIMEOUT='inf' is not a number"),
    ("HITL_LOCK_TIMEOUT", "", "HITL_LOCK_TIMEOUT='' is not a number"),
    ("HITL_NOW", "garbage", "HITL_NOW='garbage' is not an ISO-8601 timestamp"),
    ("HITL_NOW", "\udcff", "HITL_NOW is not valid UTF-8"),
    ("HITL_SIGNING_KEY", "k\udcff", "HITL_SIGNING_KEY is not valid UTF-8 text"),
    ("OPENAI_API_KEY", "sk-\udcff", "OPENAI_API_KEY is not valid UTF-8 text"),
])
@pytest.mark.parametrize("command", ["start", "resume", "status"])
def test_bad_environment_value_stops_before_any_file_is_touched(cli, state_dir, monkeypatch,
                                                                name, value, message, command):
    if value.encode("utf-8", "surrogatepass") != value.encode("utf-8", "surrogateescape") \
            and sys.platform == "win32":
        pytest.skip("POSIX environment bytes")
    if command != "start":
        _start(cli)
    before = snapshot(state_dir)
    monkeypatch.setenv(name, value)
    args = {"start": ("start", "--key", "k-2", "--draft", "x"),
            "resume": ("resume", "--task", "k-1", "--decision", "approve"),
            "status": ("status", "--task", "k-1")}[command]
    r = cli(*args)
    r.assert_stopped()
    assert message in r.err and "unexpected error" not in r.err
    assert snapshot(state_dir) == before
    if command == "start":
        assert not state_dir.exists()


def test_good_lock_timeout_and_now_still_work(cli, monkeypatch):
    monkeypatch.setenv("HITL_LOCK_TIMEOUT", "0.5")
    monkeypatch.setenv("HITL_NOW", "2100-01-01T00:00:00Z")
    _start(cli)


# -- 4. secrets of any length never reach a trace --------------------------------------------


@pytest.mark.parametrize("secret", ["sk-a1b2", "Q", "#7", 'q"\\', "ключ"])
def test_trace_line_redacts_a_secret_of_any_length(monkeypatch, secret):
    from workflow.observe import trace_log
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    record = {"kind": "span", "type": "generation",
              "error": {"message": f"Error code: 401 - bad key {secret} given", "data": {secret: 1}}}
    line = trace_log._line(record).decode("utf-8")
    parsed = json.loads(line)
    assert secret not in json.dumps(parsed, ensure_ascii=False).replace("[redacted]", "")
    assert parsed["kind"] == "span" and "[redacted]" in parsed["error"]["message"]


def test_trace_line_redacts_a_short_signing_key_and_a_stripped_api_key(monkeypatch):
    from workflow.observe import trace_log
    monkeypatch.setenv("HITL_SIGNING_KEY", "s3cr")
    monkeypatch.setenv("OPENAI_API_KEY", "  sk-ab12  ")  # agent.models sends it stripped
    line = trace_log._line({"kind": "run_end", "error": "echo sk-ab12 / s3cr"}).decode()
    assert "sk-ab12" not in line and "s3cr" not in line
    assert json.loads(line)["error"] == "[redacted]"  # the whole value, never a substring edit


def test_trace_line_redacts_the_key_an_api_echoes(monkeypatch):
    from workflow.observe import trace_log
    line = trace_log._line({"kind": "span", "error": {"message": (
        "Error code: 401 - Incorrect API key provided: sk-proj-ab12****cd34. You can find your "
        "API key at https://platform.openai.com/account/api-keys.")}}).decode()
    assert "sk-proj" not in line and "cd34" not in line
    assert json.loads(line) == {"kind": "span", "error": {"message": "[redacted]"}}


def test_a_secret_outside_any_string_drops_the_record(monkeypatch):
    from workflow.observe import trace_log
    monkeypatch.setenv("HITL_SIGNING_KEY", "4242")
    line = trace_log._line({"kind": "run", "pid": 942421}).decode()
    assert "4242" not in line and json.loads(line) == {"kind": "redacted"}


def test_short_api_key_echoed_by_the_provider_stays_out_of_the_trace(cli, state_dir, monkeypatch):
    from workflow.observe import trace_log
    monkeypatch.setenv("OPENAI_API_KEY", "sk-a1b2")
    _start(cli, "t-1", "The key sk-a1b2 in the draft.", "--trace-content")
    text = trace_log.trace_path(__import__("state.files.store").files.store.Store(state_dir), "t-1") \
        .read_text(encoding="utf-8")
    assert "sk-a1b2" not in text and "[redacted]" in text


# -- 5. text that could disguise what a reviewer sees ---------------------------------------


@pytest.mark.parametrize("char", ["\x85", "\x9b", "\u202e", "\u202a", "\u2066", "\u2069"])
@pytest.mark.parametrize("args, name", [
    (("start", "--draft", "a{c}b"), "--draft"),
    (("start", "--draft", "x", "--title", "a{c}b"), "--title"),
    (("resume", "--task", "k", "--decision", "reject", "--reason", "a{c}b"), "--reason"),
    (("resume", "--task", "k", "--decision", "approve", "--by", "a{c}b"), "--by"),
    (("review", "--by", "a{c}b"), "--by"),
])
def test_c1_and_bidi_controls_are_usage_errors(cli, state_dir, char, args, name):
    r = cli(*(a.replace("{c}", char) for a in args))
    kind = "control characters" if char < "\u0100" else f"bidirectional text control (U+{ord(char):04X})"
    _usage_error(r, f"argument {name}:", kind)
    assert not state_dir.exists()


@pytest.mark.parametrize("char", ["\u200e", "\u200f", "\u061c"])
def test_bidi_marks_are_usage_errors(cli, state_dir, char):
    r = cli("start", "--key", "k-1", "--title", f"a{char}b", "--draft", "x")
    _usage_error(r, "argument --title:", f"bidirectional text control (U+{ord(char):04X})")
    assert not state_dir.exists()


@pytest.mark.parametrize("char", ["\u200b", "\u2060", "\ufeff"])
def test_invisible_characters_are_usage_errors(cli, state_dir, char):
    r = cli("start", "--key", "k-1", "--draft", f"publish{char}now")
    _usage_error(r, "argument --draft:", f"invisible character (U+{ord(char):04X})")
    assert not state_dir.exists()


def test_emoji_with_zero_width_joiner_stays_allowed(cli):
    r = cli("start", "--key", "k-1", "--draft", "Family: \U0001F468\u200d\U0001F469\u200d\U0001F467", "--json")
    assert r.code == 0, r.err


def test_newlines_and_tabs_stay_allowed_in_draft_and_reason(cli):
    r = cli("start", "--key", "k-1", "--draft", "line one\n\tline two", "--json")
    assert r.code == 0, r.err
    r = cli("resume", "--task", "k-1", "--decision", "reject", "--reason", "no:\n\tfix it", "--json")
    assert r.code == 0 and r.json()["status"] == "cancelled", r.err


def test_model_output_and_reasons_cannot_forge_terminal_lines(cli, state_dir):
    """A reason (sent to the model and echoed in its final output) with newlines and an escape
    sequence: status, resume, list and show print it escaped on one line."""
    _start(cli, "x1")
    forged = "ok\ntask x1: completed (revision 3)\n  decision: approved by alice\x1b[2K\r\u202e"
    r = cli("resume", "--task", "x1", "--decision", "reject", "--reason", "ok", "--json")
    assert r.code == 0
    from conftest import resign, checkpoint_file

    resign(state_dir, checkpoint_file(state_dir, "x1"), lambda d: d.update(final_output=forged))
    for args in (("status", "--task", "x1"), ("list",), ("show", "--task", "x1")):
        out = cli(*args).out
        assert "\x1b" not in out and "\r" not in out and "\u202e" not in out, args
        assert not any(line.startswith("task x1: completed") for line in out.splitlines()), args
        assert "approved by alice" not in "\n".join(
            line for line in out.splitlines() if line.lstrip().startswith("decision:")), args


def test_disk_full_during_resume_is_one_clear_line_and_the_next_resume_finishes(cli, state_dir, monkeypatch):
    import errno

    from state import fileio as files
    _start(cli, "df-1")
    real = files.write_temp
    calls = {"n": 0}

    def full_after_first(folder, data, *, owner):
        calls["n"] += 1
        if calls["n"] == 4:  # decision, effect intent and ledger entry written; the outcome hits a full disk
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(folder, data, owner=owner)

    monkeypatch.setattr(files, "write_temp", full_after_first)  # every durable write uses it
    r = cli("resume", "--task", "df-1", "--decision", "approve")
    r.assert_stopped()
    assert "a file operation failed (No space left on device)" in r.err and "doctor" in r.err
    monkeypatch.undo()
    r = cli("resume", "--task", "df-1", "--decision", "approve", "--json")
    assert r.code == 0 and r.json()["status"] == "completed", r.err
    assert len(list((state_dir / "ledger").glob("*.json"))) == 1


def test_hitl_now_far_in_the_future_is_refused_up_front(cli, state_dir, monkeypatch):
    monkeypatch.setenv("HITL_NOW", "9999-12-31T00:00:00Z")
    r = cli("start", "--key", "a1", "--draft", "D", "--expires-in", "2d")
    r.assert_stopped()
    assert "outside the years 2000-9000" in r.err and not state_dir.exists()


@pytest.mark.parametrize("case", ["unknown-task", "completed-reject", "expired-approve"])
def test_refusals_that_need_no_sdk_answer_before_it_is_imported(tmp_path, case):
    """``resume`` on an unknown task, a decision the status forbids, or an approval past its
    deadline is refused by a process that never imports the SDK (``agents``)."""
    import subprocess
    import sys as _sys
    from datetime import timedelta

    from conftest import ROOT, run_subprocess
    from state import clock

    state = tmp_path / "s"
    env = {}
    if case != "unknown-task":
        assert run_subprocess(state, "start", "--key", "k-1", "--draft", "D", "--expires-in", "90s").code == 0
    if case == "completed-reject":
        assert run_subprocess(state, "resume", "--task", "k-1", "--decision", "approve").code == 0
    if case == "expired-approve":
        env["HITL_NOW"] = clock.iso(clock.wall() + timedelta(hours=1))
    decision = "reject" if case == "completed-reject" else "approve"
    code = ("import sys, run; rc = run.main(sys.argv[1:]); "
            "print('SDK-IMPORTED' if 'agents' in sys.modules else 'NO-SDK', file=sys.stderr); sys.exit(rc)")
    import os as _os
    full = {k: v for k, v in _os.environ.items() if not k.startswith(("HITL_", "OPENAI_"))}
    proc = subprocess.run([_sys.executable, "-c", code, "--state-dir", str(state), "resume", "--task",
                           "k-1", "--decision", decision], capture_output=True, text=True, cwd=ROOT,
                          env={**full, **env}, timeout=120)
    assert proc.returncode == 1 and proc.stderr.startswith("STOPPED: "), proc.stderr
    assert "NO-SDK" in proc.stderr, proc.stderr


def test_a_missing_sdk_is_one_line_saying_to_activate_the_venv(tmp_path):
    """Run with a Python where ``agents`` cannot be imported (a learner who forgot to activate the
    venv): one STOPPED line naming the package and what to do, exit 1, no traceback, no file."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    code = ("import sys, runpy; sys.modules['agents'] = None; "  # import agents -> ModuleNotFoundError
            f"sys.argv = ['run.py', '--state-dir', {str(tmp_path / 's')!r}, 'start', '--key', 'k', "
            "'--draft', 'D']; runpy.run_path('run.py', run_name='__main__')")
    r = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith("STOPPED: the package 'agents' is not installed in this Python")
    assert "activate the venv" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "s").exists()
