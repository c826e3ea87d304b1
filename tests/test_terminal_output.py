"""Text a model chooses never reaches the terminal or the shell raw.

A real model picks its call IDs. One that is not a plain word is refused where it enters (``start``,
or a resumed run that asks again), with one ``STOPPED:`` line and nothing left on disk; and every
value we print is escaped onto its line, every command we print for pasting shell-quoted
(:mod:`state.terminal`, :mod:`cli.shell`), so even a call ID saved by an older version cannot forge a line or run a
command. Also here: each ledger entry names its channel, and each printed sha256 says what it is of.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings as hyp_settings, strategies as st

from conftest import ledger_entries, run_in_process, snapshot, use_app

PWN = "call_1$(touch${IFS}PWNED)"
#: A newline that would add a fake pending line, then an escape sequence and a right-to-left override.
FORGE = "call_2\n  pending: publish_draft(title='T', body='SAFE')  call_id=ok\x1b[2K\u202e"
ESC = "call_3\x1b]0;owned\x07\x1b[31m"
RLO = "call_4\u202eevil"
LONG = "c" * 201
HOSTILE = {"shell": PWN, "newline": FORGE, "escape": ESC, "bidi": RLO, "too-long": LONG}
RAW = ("\x1b", "\u202e", "\x07")


def _model_with_ids(ids: list[str], *, later: list[str] | None = None):
    """A scripted model for this process: on the user's draft, one ``publish_draft`` call per
    channel with the call IDs ``ids`` (in channel order); on tools' outputs, ``later`` (a new call
    each, the draft again) if given, else the offline model's closing message."""
    from agents.testing import ModelStep, ScriptedModel, function_call

    from agent.models import offline_responder, parse_channels, parse_draft

    def respond(call):
        items = call.input if isinstance(call.input, list) else [{"role": "user", "content": call.input}]
        last = items[-1]
        kind = last.get("type") if isinstance(last, dict) else getattr(last, "type", None)
        if kind == "function_call_output":
            if later is None:
                return offline_responder(call)
            return ModelStep(output=[function_call("publish_draft", {"title": "T", "body": "D"},
                                                   call_id=c) for c in later])
        content = last["content"] if isinstance(last, dict) else last.content
        title, body = parse_draft(content)
        channels = parse_channels(content)
        if len(channels) <= 1:
            return ModelStep(output=[function_call("publish_draft", {"title": title, "body": body},
                                                   call_id=ids[0])])
        return ModelStep(output=[function_call("publish_draft", {"title": title, "body": body,
                                                                  "channel": c}, call_id=i)
                                 for c, i in zip(channels, ids)])

    return ScriptedModel([ModelStep.respond(respond) for _ in range(8)])


def _use_model(monkeypatch, ids: list[str], **kw) -> None:
    use_app(monkeypatch, offline_model=lambda: _model_with_ids(ids, **kw))


def _as_an_older_version(monkeypatch) -> None:
    """Save call IDs as a version without the entry check would have (the files are then ours,
    signed: only the printing stands between them and the terminal)."""
    from workflow import guards

    monkeypatch.setattr(guards, "call_id_problem", lambda value: None)


def _base(cli, state_dir: Path) -> None:
    """A waiting and a completed task, then locks/ and traces/ removed."""
    assert cli("start", "--key", "w-1", "--title", "T", "--draft", "D1").code == 0
    assert cli("start", "--key", "c-1", "--title", "T", "--draft", "D2").code == 0
    assert cli("resume", "--task", "c-1", "--decision", "approve").code == 0
    for name in ("locks", "traces"):
        shutil.rmtree(state_dir / name, ignore_errors=True)


def _no_raw(text: str) -> None:
    for ch in RAW:
        assert ch not in text, (ch, text)


def _stopped_line(r) -> str:
    r.assert_stopped()
    line = r.err.rstrip("\n")
    assert "\n" not in line and "\r" not in line
    _no_raw(line)
    return line


# ------------------------------------------------------------------------- refused at entry
@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_start_refuses_a_call_id_that_is_not_plain_and_leaves_nothing(cli, state_dir, monkeypatch,
                                                                        tmp_path, kind):
    _base(cli, state_dir)
    monkeypatch.chdir(tmp_path)
    _use_model(monkeypatch, [HOSTILE[kind]])
    before = snapshot(state_dir)
    r = cli("start", "--key", "n-1", "--title", "T", "--draft", "D")
    line = _stopped_line(r)
    assert "is not a plain call ID (1-200 of A-Za-z0-9_.:-); nothing saved" in line
    assert "ValidationError" not in line and "pydantic" not in line
    assert snapshot(state_dir) == before
    assert not (state_dir / "locks").exists() and not (state_dir / "traces").exists()
    assert not (tmp_path / "PWNED").exists()


def test_a_call_id_with_a_trailing_newline_is_refused_at_entry(cli, state_dir, monkeypatch):
    """The pattern must match the whole ID: a ``$`` would match before a final newline, and
    ``call_5`` plus one newline would pass as a plain word and break every line it is printed on."""
    from state.schema import call_id_problem

    assert call_id_problem("call_5") is None
    assert "'call_5\\n' (7 characters) is not a plain call ID" in call_id_problem("call_5\n")
    _use_model(monkeypatch, ["call_5\n"])
    r = cli("start", "--key", "n-1", "--title", "T", "--draft", "D")
    assert "is not a plain call ID" in _stopped_line(r)
    assert snapshot(state_dir) == {}


def test_an_over_long_call_id_on_a_fresh_state_dir_leaves_no_folder(cli, state_dir, monkeypatch):
    _use_model(monkeypatch, [LONG])
    r = cli("start", "--key", "n-1", "--title", "T", "--draft", "D")
    assert "(201 characters) is not a plain call ID" in _stopped_line(r)
    assert snapshot(state_dir) == {}


def test_a_plain_200_character_call_id_is_accepted(cli, monkeypatch):
    cid = "call_" + "a" * 195
    _use_model(monkeypatch, [cid])
    r = cli("start", "--key", "n-1", "--title", "T", "--draft", "D", "--json")
    assert r.code == 0, r.err
    assert r.json()["pending"][0]["call_id"] == cid


@pytest.mark.parametrize("kind", ["shell", "too-long", "newline"])
def test_a_resumed_run_asking_again_with_such_a_call_id_saves_no_new_call(cli, state_dir,
                                                                           monkeypatch, kind):
    _use_model(monkeypatch, ["call_first"], later=[HOSTILE[kind]])
    assert cli("start", "--key", "k-1", "--title", "T", "--draft", "D").code == 0
    r = cli("resume", "--task", "k-1", "--decision", "approve")
    line = _stopped_line(r)
    assert "is not a plain call ID" in line and "the new call was not saved" in line
    assert "already done:" in line and "task k-1: ran publish_draft (ledger entry written)" in line
    status = cli("status", "--task", "k-1", "--json").json()
    assert [p["call_id"] for p in status["pending"]] == ["call_first"]
    saved = b"".join(p.read_bytes() for p in (state_dir / "checkpoints").rglob("*.json"))
    assert saved
    assert HOSTILE[kind][:20].encode() not in saved.replace(b"\\n", b"\n")


# ------------------------------------------------- printed escaped, commands quoted (defence in depth)
def _two_hostile_calls(cli, monkeypatch) -> dict:
    _as_an_older_version(monkeypatch)
    _use_model(monkeypatch, [PWN, FORGE])
    r = cli("start", "--key", "h-1", "--title", "T", "--draft", "D", "--channel", "blog",
            "--channel", "news")
    assert r.code == 0, r.err
    return {"start": r.out}


def _pending_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.lstrip().startswith("pending:")]


def test_start_and_status_print_saved_call_ids_escaped_and_the_hint_quoted(cli, monkeypatch, tmp_path):
    out = _two_hostile_calls(cli, monkeypatch)["start"]
    status = cli("status", "--task", "h-1")
    assert status.code == 0, status.err
    for text in (out, status.out):
        _no_raw(text)
        assert len(_pending_lines(text)) == 2  # the newline in a call ID forged no third
        assert "body='SAFE'" not in "\n".join(_pending_lines(text)[:1])
        (hint,) = [line for line in text.splitlines() if line.startswith("  next: ")]
        argv = shlex.split(hint[len("  next: "):].split(" (or reject")[0])
        assert argv == ["python", "run.py", "resume", "--task", "h-1", "--call", PWN,
                        "--decision", "approve"]


def test_a_pasted_hint_runs_exactly_the_command_shown(cli, monkeypatch, tmp_path):
    """The ``next:`` line, pasted into a POSIX shell, passes the call ID as one argument and runs
    nothing it holds (``$(…)`` stays text)."""
    sh = shutil.which("sh")
    if sh is None:
        pytest.skip("no POSIX shell here")
    out = _two_hostile_calls(cli, monkeypatch)["start"]
    (hint,) = [line for line in out.splitlines() if line.startswith("  next: ")]
    pasted = hint[len("  next: "):].split(" (or reject")[0]
    assert _pasted(sh, pasted, tmp_path) == ["resume", "--task", "h-1", "--call", PWN,
                                             "--decision", "approve"]
    assert not (tmp_path / "PWNED").exists()


def test_list_show_and_review_print_saved_call_ids_escaped(cli, state_dir, monkeypatch):
    _two_hostile_calls(cli, monkeypatch)
    listed = cli("list")
    assert listed.code == 0, listed.err
    _no_raw(listed.out)
    assert len(listed.out.splitlines()) == 1
    shown = cli("show", "--task", "h-1")
    assert shown.code == 0, shown.err
    _no_raw(shown.out)
    assert not any(line.lstrip().startswith("pending:") for line in shown.out.splitlines())
    assert "call_id=ok" not in [line.strip() for line in shown.out.splitlines()]
    from state.files.store import Store
    from workflow.review import inbox
    said: list[str] = []
    inbox.review(Store(state_dir), ask=lambda _: "q", say=said.append, decide=lambda *a: {})
    text = "\n".join(said)
    _no_raw(text)
    assert not any(line.lstrip().startswith("pending:") for line in text.splitlines())


def test_a_refusal_naming_saved_call_ids_is_one_escaped_line(cli, monkeypatch):
    _two_hostile_calls(cli, monkeypatch)
    r = cli("resume", "--task", "h-1", "--decision", "approve")  # two pending, no --call
    assert "2 pending calls" in _stopped_line(r)


def _pasted(sh: str, command: str, cwd: Path) -> list[str]:
    """The arguments a POSIX shell passes for ``command`` (``python run.py ARGS``) pasted."""
    args = command[len("python run.py "):]
    done = subprocess.run([sh, "-c", f"printf '%s\\n' {args}"], cwd=cwd, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_doctor_prints_saved_call_ids_escaped_and_its_actions_quoted(cli, state_dir, monkeypatch,
                                                                    tmp_path):
    """A decision recorded, then a crash (the failpoint raises here, in-process), once per task:
    doctor's finding names the call escaped; its action, pasted, passes exactly that call ID."""
    _two_hostile_calls(cli, monkeypatch)  # h-1: blog PWN, news FORGE
    _use_model(monkeypatch, [FORGE, PWN])
    assert cli("start", "--key", "h-2", "--title", "T", "--draft", "D", "--channel", "blog",
               "--channel", "news").code == 0
    from state import failpoints
    from state.files.store import Store
    from agent import application

    real = failpoints.hit

    def crash(name: str) -> None:
        if name == "checkpoint:decision:after":
            raise RuntimeError("crash after the decision")
        real(name)

    monkeypatch.setattr(failpoints, "hit", crash)
    for task, call in (("h-1", PWN), ("h-2", FORGE)):
        with pytest.raises(RuntimeError):
            asyncio.run(application.resume(Store(state_dir), task_id=task, decision="approve", by="alice",
                                    call_id=call))
    monkeypatch.setattr(failpoints, "hit", real)
    r = cli("doctor")
    assert r.code == 1
    _no_raw(r.out)
    assert not any(line.lstrip().startswith("pending:") for line in r.out.splitlines())
    actions = [line[len("    action: "):] for line in r.out.splitlines()
               if line.startswith("    action: python")]
    assert len(actions) == 2
    pwn = next(a for a in actions if "h-1" in a)
    assert shlex.split(pwn) == ["python", "run.py", "resume", "--task", "h-1", "--call", PWN,
                                "--decision", "approve"]
    monkeypatch.chdir(tmp_path)
    sh = shutil.which("sh")
    if sh is not None:
        assert _pasted(sh, pwn, tmp_path) == ["resume", "--task", "h-1", "--call", PWN,
                                              "--decision", "approve"]
        assert not (tmp_path / "PWNED").exists()


@hyp_settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=60))
def test_a_printed_command_is_one_line_and_round_trips_when_printable(value):
    from cli.hints import command

    printed = command("resume", "--call", value)
    assert "\n" not in printed and "\r" not in printed
    for ch in RAW:
        assert ch not in printed
    if value.isprintable():
        assert shlex.split(printed)[-1] == value and len(shlex.split(printed)) == 5


# ------------------------------------------------------------------- ledger channel, sha256 labels
def _approve_one(cli, *start_extra: str) -> None:
    assert cli("start", "--key", "one-1", "--title", "Notes", "--draft", "Body text",
               *start_extra).code == 0
    r = cli("resume", "--task", "one-1", "--decision", "approve", "--json")
    assert r.code == 0 and r.json()["status"] == "completed", r.err


@pytest.mark.parametrize("extra,channel", [((), "blog"), (("--channel", "news"), "news")])
def test_a_one_channel_entry_names_its_channel_under_the_task_key(cli, state_dir, extra, channel):
    _approve_one(cli, *extra)
    (entry,) = ledger_entries(state_dir)
    assert entry["idempotency_key"] == "one-1" and entry["task_id"] == "one-1"
    assert entry["channel"] == channel and entry["approval"] == "human"
    (shown,) = cli("ledger", "--json").json()["entries"]
    assert shown["channel"] == channel
    assert f"  one-1  {channel}  'Notes'  " in cli("ledger").out
    assert f"ledger: {channel}: 1 entry" in cli("show", "--task", "one-1").out
    final = json.loads(cli("status", "--task", "one-1", "--json").json()["final_output"]
                       .split("publish_draft answered: ", 1)[1])
    assert final["channel"] == channel and final["idempotency_key"] == "one-1"


def test_a_one_channel_entry_names_its_channel_on_postgresql(pg_url, tmp_path):
    def cli(*args):
        return run_in_process(tmp_path / "state", "--store", pg_url, *args)

    _approve_one(cli)
    (entry,) = cli("ledger", "--json").json()["entries"]
    assert entry["idempotency_key"] == "one-1" and entry["channel"] == "blog"
    assert entry["approval"] == "human"


def test_an_entry_written_before_channels_reads_as_before(cli, state_dir):
    from state.files.ledger import Ledger

    from state.schema import content_sha256

    Ledger(state_dir / "ledger").record(key="old-1", task_id="old-1", action="publish_draft", title="T",
                                        content_sha256=content_sha256("T", "D"))
    (entry,) = ledger_entries(state_dir)
    assert "channel" not in entry and "approval" not in entry
    assert "  old-1  (no channel)  'T'  " in cli("ledger").out
    r = cli("start", "--key", "old-1", "--title", "T", "--draft", "D")
    assert "already in the ledger" in _stopped_line(r)


def test_ledger_and_show_say_which_sha256_they_print(cli):
    from state.schema import content_sha256

    body = "A body long enough to be redacted in the trace. " * 3
    assert cli("start", "--key", "sha-1", "--title", "Notes", "--draft", body).code == 0
    assert cli("resume", "--task", "sha-1", "--decision", "approve").code == 0
    both = content_sha256("Notes", body)[:12]
    assert f"sha256(title+body)={both}…" in cli("ledger").out
    shown = cli("show", "--task", "sha-1").out
    assert f"content sha256 {both}…" in shown
    body_only = hashlib.sha256(body.encode()).hexdigest()[:12]
    assert f"sha256(body) {body_only}…" in shown
    assert shown.count(f"sha256 {both}") == shown.count(f"content sha256 {both}")  # always labelled
    assert f"sha256 {body_only}" not in shown


def test_list_shows_each_tasks_channels(cli):
    assert cli("start", "--key", "two-1", "--title", "T", "--draft", "D", "--channel", "blog",
               "--channel", "news").code == 0
    assert cli("start", "--key", "one-1", "--title", "T", "--draft", "D2").code == 0
    lines = cli("list").out.splitlines()
    assert any(line.startswith("WAITING    two-1  [blog,news]  ") for line in lines), lines
    assert any(line.startswith("WAITING    one-1  [blog]  ") for line in lines), lines


def test_a_streamed_start_prints_the_events_of_such_a_call_escaped(cli, state_dir, monkeypatch):
    """``--stream`` prints the approval request as it arrives, before the call ID is judged: the
    event line is escaped, then the one STOPPED line, and nothing is saved."""
    _use_model(monkeypatch, [FORGE])
    r = cli("start", "--key", "s-1", "--title", "T", "--draft", "D", "--stream")
    assert r.code == 1 and "is not a plain call ID" in r.err
    _no_raw(r.out + r.err)
    assert not any(line.lstrip().startswith("pending:") for line in r.out.splitlines())
    assert snapshot(state_dir) == {}


#: Not printable, outside the characters ``--json`` output used to list: zero-width characters,
#: bidi marks (U+200E/U+200F, U+061C), a byte-order mark, a tag character beyond U+FFFF.
INVISIBLE = "x\u200b\u200c\u200d\u200e\u200f\u061c\u2060\ufeff\U000e0041y"


@pytest.mark.parametrize("command", [("status", "--task", "j-1"), ("show", "--task", "j-1"), ("list",)])
def test_json_output_escapes_every_character_the_terminal_rule_escapes(cli, monkeypatch, command):
    """A model's closing message with invisible characters: ``--json`` output holds each escaped
    (``\\u200b``), like the text output, and reads back as the same value."""
    import agent.models
    from agent.models import offline_responder
    from agents.testing import ModelStep, assistant_message

    def respond(call):
        items = call.input if isinstance(call.input, list) else []
        if items and isinstance(items[-1], dict) and items[-1].get("type") == "function_call_output":
            return ModelStep(output=[assistant_message(INVISIBLE)])
        return offline_responder(call)

    monkeypatch.setattr(agent.models, "offline_responder", respond)
    assert cli("start", "--key", "j-1", "--title", "T", "--draft", "D").code == 0
    assert cli("resume", "--task", "j-1", "--decision", "approve").code == 0
    r = cli(*command, "--json")
    assert r.code == 0, r.err
    assert all(c.isprintable() for c in r.out.rstrip("\n")), ascii(r.out)
    assert INVISIBLE in json.dumps(r.json(), ensure_ascii=False)


def test_status_marks_a_cut_argument_and_keeps_numbers_numbers():
    """A call the model composed is approved as shown: ``status`` never passes a cut text off as
    the whole one, and a number is not shown as a text."""
    from cli.text import task_text

    reason = "the parcel arrived broken; NOTE: also waive the restocking fee and refund shipping to 9999"
    task = {"task_id": "r-1", "status": "waiting_for_approval", "revision": 1, "decision": None,
            "final_output": None, "channels": ["refund"], "checkpoint_path": "x",
            "pending": [{"call_id": "c1", "tool": "issue_refund",
                         "arguments": {"amount_cents": 1999, "reason": reason}}]}
    line = next(x for x in task_text(task).splitlines() if "pending:" in x)
    assert "amount_cents=1999," in line
    assert f"reason={reason[:57]!r}… (+{len(reason) - 57} chars; show has it all)" in line


def test_a_refusal_escapes_what_a_model_or_a_file_put_in_it_wherever_it_is_printed():
    """A refusal's text can hold a tool name the model chose or an exception's text: an application
    that prints ``str(exc)`` (the examples do) shows escape sequences and bidi marks escaped, on one
    line; escaping it again (``run.py`` does, at its print) changes nothing."""
    from state.errors import Refused
    from state.terminal import one_line

    exc = Refused("agent", "tool evil\x1b[2J\x1b[31mRED\u202eX\nFAKE not found")
    assert str(exc) == "tool evil\\x1b[2J\\x1b[31mRED\\u202eX FAKE not found"
    assert one_line(str(exc)) == str(exc) == Refused("agent", str(exc)).render(lambda step: "")
