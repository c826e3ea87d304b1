"""The clock: one clock for every timestamp, a test seam that only moves it forward, and a suite
that does not depend on today's date."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any, Iterator

import pytest

from conftest import checkpoint_file, ledger_entries, resign, snapshot
from state import clock

FIXTURES = Path(__file__).resolve().parent / "fixtures"
#: No committed fixture may carry a deadline before this: a test reading it must never expire.
EARLIEST_FIXTURE_DEADLINE = "2100-01-01T00:00:00Z"


def _deadlines(value: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """Every ``(path, value)`` of a field named like a deadline (``expires_at``, ``deadline``…),
    in nested objects and lists too, and inside JSON text held in a string (the RunState)."""
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, str) and ("expire" in k.lower() or "deadline" in k.lower()):
                yield f"{where}.{k}", v
            yield from _deadlines(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _deadlines(v, f"{where}[{i}]")
    elif isinstance(value, str) and value.lstrip().startswith("{"):
        try:
            inner = json.loads(value)
        except ValueError:
            return
        yield from _deadlines(inner, f"{where}<json>")


def test_every_committed_fixture_has_no_deadline_before_2100():
    found = 0
    for path in sorted(FIXTURES.rglob("*.json")) + sorted(FIXTURES.rglob("*.id")):
        for where, value in _deadlines(json.loads(path.read_text(encoding="utf-8"))):
            found += 1
            assert clock.parse_iso(value) >= clock.parse_iso(EARLIEST_FIXTURE_DEADLINE), (
                f"{path.name}{where} = {value}: a committed deadline that can pass; regenerate "
                "the fixture (tests/fixtures/make_checkpoint_v1.py) or set the test's clock")
    assert found >= 2  # the v1 checkpoint's expires_at and its history's copy were checked


def test_the_deadline_check_catches_a_fixture_that_would_expire():
    data = {"expires_at": "2099-12-31T23:59:59Z", "history": [{"detail": {"expires_at": "2101-01-01T00:00:00Z"}}],
            "run_state": json.dumps({"deadline": "2030-01-01T00:00:00Z"})}
    early = [w for w, v in _deadlines(data)
             if clock.parse_iso(v) < clock.parse_iso(EARLIEST_FIXTURE_DEADLINE)]
    assert early == [".expires_at", ".run_state<json>.deadline"]


def test_hitl_now_moves_the_clock_forward(monkeypatch):
    ahead = clock.wall() + timedelta(days=5 * 366)
    monkeypatch.setenv("HITL_NOW", clock.iso(ahead))
    assert clock.now() == ahead


def test_hitl_now_never_moves_the_clock_back_even_unchecked(monkeypatch):
    """Called without the command line's up-front check, a past value still cannot turn the clock
    back: an expired request stays expired."""
    monkeypatch.setenv("HITL_NOW", "2001-01-01T00:00:00Z")
    assert clock.now() >= clock.wall() - timedelta(seconds=1)
    assert clock.now().year >= 2026


@pytest.mark.parametrize("past", ["2001-01-01T00:00:00Z", "2020-06-01T12:00:00+02:00"])
def test_hitl_now_in_the_past_is_refused_before_anything_is_touched(cli, state_dir, monkeypatch, past):
    cli("start", "--key", "c-1", "--title", "T", "--draft", "D")
    before = snapshot(state_dir)
    monkeypatch.setenv("HITL_NOW", past)
    r = cli("resume", "--task", "c-1", "--decision", "approve")
    r.assert_stopped()
    assert "is in the past; it can only move the clock forward" in r.err
    assert snapshot(state_dir) == before and ledger_entries(state_dir) == []


def test_an_expired_request_cannot_be_approved_by_setting_the_clock_back(cli, state_dir, monkeypatch):
    """A request whose deadline has passed on the wall clock (re-signed to one minute ago, as if
    the task had waited) stays expired whatever ``HITL_NOW`` says."""
    cli("start", "--key", "c-2", "--title", "T", "--draft", "D", "--expires-in", "90s")
    path = checkpoint_file(state_dir, "c-2")
    gone = clock.wall() - timedelta(minutes=1)
    resign(state_dir, path, lambda d: d.update(expires_at=clock.iso(gone)))
    before = snapshot(state_dir)
    for when in (gone - timedelta(seconds=30), None):
        if when is None:
            monkeypatch.delenv("HITL_NOW", raising=False)
        else:
            monkeypatch.setenv("HITL_NOW", clock.iso(when))
        r = cli("resume", "--task", "c-2", "--decision", "approve")
        r.assert_stopped()
        assert ("approval expired" in r.err) == (when is None), r.err
        assert snapshot(state_dir) == before and ledger_entries(state_dir) == []


def test_every_timestamp_written_comes_from_the_wall_clock(cli, state_dir, monkeypatch):
    """With ``HITL_NOW`` far ahead, the checkpoint, its history, the decision, the ledger entry and
    the deadline are still stamped with the real time: a receipt never mixes clocks, and the moved
    clock can never give a request more time."""
    monkeypatch.setenv("HITL_NOW", clock.iso(clock.wall() + timedelta(minutes=30)))
    assert cli("start", "--key", "c-3", "--title", "T", "--draft", "D", "--expires-in", "1h").code == 0
    assert cli("resume", "--task", "c-3", "--decision", "approve").code == 0
    cp = json.loads(checkpoint_file(state_dir, "c-3").read_text(encoding="utf-8"))
    stamps = [cp["created_at"], cp["updated_at"], cp["decision"]["at"],
              *(h["at"] for h in cp["history"]), ledger_entries(state_dir)[0]["published_at"]]
    real = clock.wall()
    assert all(abs((clock.parse_iso(s) - real).total_seconds()) < 600 for s in stamps), stamps
    started = cp["history"][0]["detail"]["expires_at"]
    assert abs((clock.parse_iso(started) - real - timedelta(hours=1)).total_seconds()) < 600


def test_a_moved_clock_only_makes_a_new_request_expire_sooner(cli, state_dir, monkeypatch):
    """``HITL_NOW`` set at ``start`` does not push the deadline out (it used to be computed from the
    moved clock, so a 90 s request stayed approvable for an hour); judged with the same moved clock,
    the request is already over."""
    monkeypatch.setenv("HITL_NOW", clock.iso(clock.wall() + timedelta(hours=1)))
    assert cli("start", "--key", "c-4", "--title", "T", "--draft", "D", "--expires-in", "90s").code == 0
    cp = json.loads(checkpoint_file(state_dir, "c-4").read_text(encoding="utf-8"))
    assert clock.parse_iso(cp["expires_at"]) < clock.wall() + timedelta(seconds=600)
    r = cli("resume", "--task", "c-4", "--decision", "approve")
    r.assert_stopped()
    assert "approval expired" in r.err and ledger_entries(state_dir) == []


def test_the_whole_flow_works_five_years_from_now(cli, state_dir, monkeypatch):
    """The product does not depend on today's date: with the real clock five years ahead (the wall
    clock itself replaced in this process, as ``faketime`` does for a whole run) start, approve,
    reject, expire and doctor behave as today."""
    ahead = timedelta(days=5 * 366)
    real_wall = clock.wall
    monkeypatch.setattr(clock, "wall", lambda: real_wall() + ahead)
    for key in ("f-1", "f-2", "f-3"):
        assert cli("start", "--key", key, "--title", "T", "--draft", key, "--expires-in", "1h").code == 0
    assert cli("resume", "--task", "f-1", "--decision", "approve", "--json").json()["status"] == "completed"
    assert cli("resume", "--task", "f-2", "--decision", "reject", "--json").json()["status"] == "cancelled"
    monkeypatch.setenv("HITL_NOW", clock.iso(real_wall() + ahead + timedelta(hours=2)))
    assert cli("expire", "--json").json() == {"expired": ["f-3"]}
    assert cli("doctor").code == 0
    assert [e["task_id"] for e in ledger_entries(state_dir)] == ["f-1"]
    cp = json.loads(checkpoint_file(state_dir, "f-1").read_text(encoding="utf-8"))
    assert clock.parse_iso(cp["created_at"]).year == (real_wall() + ahead).year
