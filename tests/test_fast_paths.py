"""Every shortcut taken for speed gives exactly the answer of the full path it skips.

``benchmarks/roundtrip.py --profile`` shows what each costs; these tests pin that none of them
weakens a check: a classifier looked up instead of scanned, a trace record walked for secrets only
when its text could hold one, a path checked by ``lstat`` instead of resolved, a checkpoint's bytes
verified once per process, a compare-and-swap answered from the bytes this process wrote, the
environment read once per operation, and the refusals that need no SDK answered before it is
imported.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT, checkpoint_file, resign
from state import secrets
from state.errors import Refused

POSIX = os.name != "nt"

# -- secrets.by_path ------------------------------------------------------------------------------

_PARTS = st.sampled_from(["history", "*", "detail", "calls", "tool", "call_id", "kind", "data", 0, 1])
_PATTERNS = st.lists(st.lists(_PARTS, max_size=4).map(tuple), max_size=8)


def _scan(closed, open_):
    """The classifier as a scan of every pattern (what by_path answered before it grouped them)."""
    def match(p, path):
        return len(p) == len(path) and all(a == "*" or a == b for a, b in zip(p, path))

    def classify(path):
        if any(match(p, path) for p in closed):
            return "closed"
        if any(match(p, path) for p in open_):
            return "open"
        return None
    return classify


@settings(max_examples=200, deadline=None)
@given(_PATTERNS, _PATTERNS, st.lists(st.lists(_PARTS.filter(lambda p: p != "*"), max_size=4).map(tuple),
                                      max_size=20))
def test_by_path_classifier_answers_as_a_scan_of_every_pattern(closed, open_, paths):
    fast, slow = secrets.by_path(closed, open_), _scan(closed, open_)
    for path in paths:
        assert fast(path) == slow(path), (closed, open_, path)


def test_the_checkpoint_and_trace_allow_lists_answer_as_before():
    assert secrets.CHECKPOINT(("history", 3, "detail", "calls", 0, "tool")) == "closed"
    assert secrets.CHECKPOINT(("pending", 0, "call_id")) == "open"
    assert secrets.CHECKPOINT(("title",)) is None
    assert secrets.TRACE(("data", "name")) == "closed" and secrets.TRACE(("data", "input")) is None


# -- trace_log._line --------------------------------------------------------------------------------

def _line_full_walk(record):
    """The trace line as written before the fast path: always parsed back and walked."""
    from workflow.observe import trace_log
    data = json.loads(json.dumps(record, ensure_ascii=False, default=str))
    try:
        data = secrets.redact(trace_log._redact_echo(data), secrets.TRACE, what="trace record",
                              min_chars=1, numbers=True)
    except secrets.SecretInStructure:
        data = {"kind": "redacted"}
    return (json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


SECRET = 'sk-te"st\\é12'
_TEXT = st.lists(st.sampled_from(list('ab "\\é\n:-*') + ["sk-te", 'st\\é12', SECRET, "12",
                                                          "API key provided: ", "NaN"]),
                 max_size=8).map("".join)
_SCALAR = st.one_of(_TEXT, st.integers(), st.floats(allow_nan=True, allow_infinity=True),
                    st.none(), st.booleans())
_VALUE = st.recursive(_SCALAR, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(_TEXT, inner, max_size=4)),
                      max_leaves=12)
_RECORD = st.fixed_dictionaries({"kind": st.sampled_from(["span", "log"])},
                                optional={"data": _VALUE, "message": _TEXT, "name": _TEXT, "pid": st.integers()})


@pytest.mark.parametrize("secret", [None, SECRET, "12"])
def test_trace_line_is_what_the_full_redaction_walk_writes(monkeypatch, secret):
    from workflow.observe import trace_log
    if secret is not None:
        monkeypatch.setenv("OPENAI_API_KEY", secret)

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(_RECORD)
    def check(record):
        assert trace_log._line(record) == _line_full_walk(record)

    check()


def test_trace_line_with_a_secret_in_a_number_or_an_echoed_key_still_takes_the_walk(monkeypatch):
    from workflow.observe import trace_log
    monkeypatch.setenv("OPENAI_API_KEY", "4242")
    assert trace_log._line({"kind": "span", "data": {"n": 1424242}}) == b'{"kind":"redacted"}\n'
    monkeypatch.delenv("OPENAI_API_KEY")
    line = json.loads(trace_log._line({"kind": "log", "message": "Incorrect API key provided: sk-ab**cd"}))
    assert line["message"] == secrets.REDACTED
    assert math.isnan(json.loads(trace_log._line({"kind": "span", "data": {"x": float("nan")}}))["data"]["x"])


# -- state.paths.inside ---------------------------------------------------------------------------

@pytest.mark.skipif(not POSIX, reason="the lstat path is POSIX only; Windows always resolves")
def test_inside_agrees_with_resolving_both_paths(tmp_path):
    from state.paths import inside

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    real = tmp_path / "real-root"
    real.mkdir()
    (tmp_path / "root-link").symlink_to(real)  # a state dir reached through a symlink: fine
    for root in (real, tmp_path / "root-link", tmp_path / "missing-root"):
        layouts = {
            "plain": lambda r: (r / "tasks").mkdir(),
            "missing": lambda r: None,
            "tasks-links-out": lambda r: (r / "tasks").symlink_to(outside),
            "tasks-links-in": lambda r: ((r / "other").mkdir(), (r / "tasks").symlink_to(r / "other")),
            "file-links-out": lambda r: ((r / "tasks").mkdir(), (r / "tasks" / "x.json").symlink_to(outside / "x")),
            "tasks-is-a-file": lambda r: (r / "tasks").write_text("x"),
            "dangling": lambda r: (r / "tasks").symlink_to(tmp_path / "nowhere"),
        }
        for name, make in layouts.items():
            if root.name == "missing-root" and name != "missing":
                continue
            for child in list(real.iterdir()):
                child.unlink() if child.is_symlink() or child.is_file() else _rmtree(child)
            if root.exists():
                make(root)
            for path in (root / "tasks" / "x.json", root / "tasks" / ".." / ".." / "x.json", root / "tasks",
                         tmp_path / "x.json"):
                expected = path.resolve().is_relative_to(root.resolve())
                try:
                    inside(root, path, "test")
                    got = True
                except Refused:
                    got = False
                assert got == expected, (root, name, path)


def _rmtree(folder: Path) -> None:
    import shutil

    shutil.rmtree(folder)


# -- Store: verified bytes, compare-and-swap, one validation per save -----------------------------

def _round_trip(state_dir: Path, key: str = "t-1"):
    from state.files.store import Store
    from agent import application

    store = Store(state_dir)
    asyncio.run(application.start(store, task_id=key, title="T", draft="Draft body."))
    return store, asyncio.run(application.resume(store, task_id=key, decision="approve", by="alice"))


def test_resume_verifies_each_checkpoint_file_once_per_distinct_bytes(state_dir, monkeypatch):
    """resume reads the task's file in its pre-flight, again under the lock, and in the tool right
    before the effect (by then revision 2, holding the decision): the pre-flight's bytes are read
    again under the lock but MAC-checked and validated once, so two verifications, not three.
    (Bytes this process wrote are never taken as verified: the tool's read is checked in full.)"""
    from state import integrity
    from state.files.store import Store
    from agent import application

    store = Store(state_dir)
    asyncio.run(application.start(store, task_id="t-1", title="T", draft="Draft body."))
    calls = []
    real = integrity.verify_mac  # what every envelope check calls (integrity.envelope_signed)
    # checkpoints only: a signed record (its "record" field: state/record_seal.py) is verified apart
    monkeypatch.setattr(integrity, "verify_mac", lambda *a: ("record" not in a[0] and calls.append(1)) or real(*a))
    cp = asyncio.run(application.resume(store, task_id="t-1", decision="approve", by="alice"))
    assert cp.status == "completed" and len(calls) == 2


def test_bytes_changed_or_read_with_another_key_are_verified_again(state_dir, monkeypatch):
    from state.files.store import Store

    store, _ = _round_trip(state_dir)
    path = checkpoint_file(state_dir, "t-1")
    good = path.read_bytes()
    assert store.load("t-1").title == "T"  # remembered as verified
    path.write_bytes(good.replace(b'"title": "T"', b'"title": "X"'))  # hand edit, not re-signed
    with pytest.raises(Refused, match="integrity check failed"):
        store.load("t-1")
    path.write_bytes(good)
    assert Store(state_dir).load("t-1").title == "T"
    resign(state_dir, path, lambda d: d.update(title="Re-signed"))
    assert store.load("t-1").title == "Re-signed"
    path.write_bytes(good)
    monkeypatch.setenv("HITL_SIGNING_KEY", "another key of enough bytes")
    with pytest.raises(Refused, match="integrity check failed"):
        store.load("t-1")


def test_compare_and_swap_refuses_a_file_changed_after_this_process_wrote_it(state_dir):
    from state.files.store import Store
    from agent import application

    store = Store(state_dir)
    first = asyncio.run(application.start(store, task_id="t-1", title="T", draft="Draft body."))
    path = checkpoint_file(state_dir, "t-1")
    data = json.loads(path.read_bytes())
    path.write_text(json.dumps(data, indent=4), encoding="utf-8")  # same revision and MAC, other bytes
    second = store.save_revision(first, failpoint="test", event=("resumed", {}))  # accepted, as before
    assert second.revision == 2
    resign(state_dir, checkpoint_file(state_dir, "t-1"), lambda d: d.update(revision=7))  # another process wrote it
    with pytest.raises(Refused, match="changed on disk"):
        store.save_revision(second, failpoint="test", event=("resumed", {}))


def test_saved_file_is_the_json_of_the_checkpoint_save_returns(state_dir):
    from state.files.store import Store
    from agent import application

    store = Store(state_dir)
    steps = (lambda: application.start(store, task_id="t-1", title="Tïtle ✓", draft="Draft\nbody."),
             lambda: application.resume(store, task_id="t-1", decision="approve", by="alice"))
    for step in steps:
        cp = asyncio.run(step())
        raw = checkpoint_file(state_dir, "t-1").read_bytes()
        assert raw == (json.dumps(cp.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n").encode()
        assert Store(state_dir).load("t-1") == cp


def test_one_operation_reads_the_environment_once_and_the_next_reads_it_again(monkeypatch):
    from state.settings import memo, operation, settings, values

    @operation
    async def read_twice() -> tuple:
        first = (settings().lock_timeout, values("lock_timeout"))
        monkeypatch.setenv("HITL_LOCK_TIMEOUT", "7")  # within the operation: its snapshot holds
        assert memo() is not None
        return first, (settings().lock_timeout, values("lock_timeout"))

    monkeypatch.setenv("HITL_LOCK_TIMEOUT", "3")
    assert asyncio.run(read_twice()) == ((3, (3,)), (3, (3,)))
    assert settings().lock_timeout == 7 and memo() is None  # outside any operation: read now
    monkeypatch.setenv("HITL_LOCK_TIMEOUT", "4")
    assert asyncio.run(read_twice()) == ((4, (4,)), (4, (4,)))  # the next operation reads it again


def test_settings_follow_the_environment_at_once_even_when_it_is_not_the_standard_mapping(monkeypatch):
    from state.settings import settings

    monkeypatch.setenv("HITL_LOCK_TIMEOUT", "3")
    assert settings().lock_timeout == 3
    monkeypatch.setenv("HITL_LOCK_TIMEOUT", "4")
    assert settings().lock_timeout == 4
    monkeypatch.setattr(os, "environ", {**os.environ, "HITL_LOCK_TIMEOUT": "5"})
    assert settings().lock_timeout == 5
    os.environ["HITL_LOCK_TIMEOUT"] = "6"
    assert settings().lock_timeout == 6


# -- refusals answered before the SDK is imported -----------------------------------------------------

def _probe(state: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    code = ("import sys, run; rc = run.main(sys.argv[1:]); "
            "print('SDK-IMPORTED' if 'agents' in sys.modules else 'NO-SDK', file=sys.stderr); sys.exit(rc)")
    full = {k: v for k, v in os.environ.items() if not k.startswith(("HITL_", "OPENAI_"))}
    return subprocess.run([sys.executable, "-c", code, "--state-dir", str(state), *args],
                          capture_output=True, text=True, cwd=ROOT, env={**full, **(env or {})}, timeout=120)


def test_more_refusals_that_need_no_sdk_answer_before_it_is_imported(cli, state_dir, monkeypatch):
    """Beyond an unknown task, a reject of a completed task and a late approval
    (tests/test_cli_robustness.py): an approval of a cancelled or expired task, a reject of a task
    the ledger shows executed, and a reviewer name or reason holding a secret."""
    from agents.testing import ScriptedModel

    from state import clock
    from state.files.store import Store
    from agent import application

    assert cli("start", "--key", "gone", "--draft", "D").code == 0
    assert cli("resume", "--task", "gone", "--decision", "reject").code == 0
    assert cli("start", "--key", "late", "--draft", "D", "--expires-in", "90s").code == 0
    assert cli("start", "--key", "half", "--draft", "D").code == 0
    with pytest.raises(Refused, match="the decision is recorded"):  # the tool ran, then the model failed
        asyncio.run(application.resume(Store(state_dir), task_id="half", decision="approve", by="alice",
                                model=ScriptedModel([])))
    later = {"HITL_NOW": clock.iso(clock.wall() + timedelta(hours=1))}
    monkeypatch.setenv("HITL_NOW", later["HITL_NOW"])
    assert cli("expire", "--task", "late").code == 0
    monkeypatch.delenv("HITL_NOW")
    secret = {"OPENAI_API_KEY": "sk-abcdefghijkl"}
    cases = [
        (["--task", "gone", "--decision", "approve"], {}, "was rejected"),
        (["--task", "late", "--decision", "approve"], later, "approval expired"),
        (["--task", "half", "--decision", "reject"], {}, "the ledger shows task half was already executed"),
        (["--task", "half", "--decision", "approve", "--by", secret["OPENAI_API_KEY"]], secret,
         "reviewer name (--by) contains the value of OPENAI_API_KEY"),
        (["--task", "half", "--decision", "approve", "--reason", "x" + secret["OPENAI_API_KEY"]], secret,
         "reason contains the value of OPENAI_API_KEY"),
    ]
    for args, env, message in cases:
        proc = _probe(state_dir, "resume", *args, env=env)
        lines = proc.stderr.splitlines()
        assert proc.returncode == 1 and lines[0].startswith("STOPPED: ") and message in lines[0], (args, proc.stderr)
        assert lines[-1] == "NO-SDK", (args, proc.stderr)
