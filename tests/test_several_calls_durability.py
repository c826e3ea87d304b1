"""Several calls per task under crashes and racing resumers, through the real command line.

A two-channel task (``blog``, ``news``: two ``publish_draft`` calls in one model turn) is decided
call by call. The crash points are ENUMERATED, as in tests/test_crash_recovery.py: each decision
runs once with ``HITL_FAILPOINT_LOG`` and every name it logs becomes a crash point, so a durable
write added later is covered without editing this file.

For every plan (each call approved or rejected) and every point of the first, partial decision
(the run pauses again on the other call) and of the last one (the run ends): end the process there
(``os._exit(86)``), check that ``doctor`` recommends only the resume of that call with that
decision, recover, decide the rest; the end state is checked by :func:`_assert_end_state`.
Recovery is tried both ways: repeating the interrupted decision first, or deciding the other call
first (the recorded decision is replayed with it).

The race: four processes approve and four reject, each on its own call of one eight-channel task,
released together (tests/forking.py). Also pinned: a call already answered while another waits is
judged as ended (file store), and the PostgreSQL store's ``doctor`` judges each call too.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import ledger_entries, snapshot
from forking import HAS_FORK, in_process, run_cli, spawn_together, step

KEY = "crash-mc"
CHANNELS = ("blog", "news")
START = ["start", "--key", KEY, "--title", "T", "--draft", "Two channels, one turn.",
         "--channel", "blog", "--channel", "news"]
PLANS = [(a, b) for a in ("approve", "reject") for b in ("approve", "reject")]
#: Boundaries each first decision must log (so a broken enumeration cannot pass vacuously).
MUST = {"approve": {"checkpoint:decision:before", "checkpoint:decision:after", "ledger:record:before",
                    "ledger:record:after", "checkpoint:outcome:before", "checkpoint:outcome:after"},
        "reject": {"rejection:record:before", "rejection:record:after", "checkpoint:decision:after",
                   "checkpoint:outcome:before", "checkpoint:outcome:after"}}
#: Without fork (each process ~2 s), only these run.
SUBSET = {"checkpoint:decision:after", "ledger:record:after", "rejection:record:after",
          "checkpoint:outcome:before"}


def _decide(channel_call: str, decision: str) -> list[str]:
    return ["resume", "--task", KEY, "--call", channel_call, "--decision", decision, "--by", "ops",
            "--reason", f"{decision} {channel_call}"]


def _logged(state_dir: Path, args: list[str], log: Path) -> list[str]:
    r = run_cli(state_dir, *args, env={"HITL_FAILPOINT_LOG": str(log)})
    assert r.code == 0, r.err
    names = log.read_text(encoding="utf-8").split()
    log.unlink()
    return list(dict.fromkeys(names))


@pytest.fixture(scope="module")
def flows(tmp_path_factory):
    """``base``: the state dir with the task started; ``calls``: channel → call_id; ``first[d]``:
    the points of deciding ``blog`` with ``d`` (``news`` still pending); ``last[(d1, d2)]``: the
    points of deciding ``news`` with ``d2`` after ``blog`` was decided ``d1`` (the run ends)."""
    root = tmp_path_factory.mktemp("mc-flows")
    base, log = root / "base", root / "fp.log"
    r = run_cli(base, *START, "--json")
    assert r.code == 0, r.err
    task = r.json()
    calls = {p["arguments"]["channel"]: p["call_id"] for p in task["pending"]}
    assert sorted(calls) == list(CHANNELS)
    first, last = {}, {}
    for d1 in ("approve", "reject"):
        work = root / d1
        shutil.copytree(base, work)
        first[d1] = _logged(work, _decide(calls["blog"], d1), log)
        assert MUST[d1] <= set(first[d1]), (d1, first[d1])
        for d2 in ("approve", "reject"):
            work2 = root / f"{d1}-{d2}"
            shutil.copytree(work, work2)
            last[(d1, d2)] = _logged(work2, _decide(calls["news"], d2), log)
            assert MUST[d2] <= set(last[(d1, d2)]), (d1, d2, last[(d1, d2)])
    return {"base": base, "calls": calls, "first": first, "last": last}


def _pick(names: list[str]) -> list[str]:
    return names if HAS_FORK else [n for n in names if n in SUBSET]


def _status(state_dir: Path) -> dict:
    r = in_process(state_dir, "status", "--task", KEY, "--json")
    assert r.code == 0, r.err
    return r.json()


def _never_cancelled_with_an_entry(state_dir: Path, where: str) -> None:
    if ledger_entries(state_dir):
        assert _status(state_dir)["status"] != "cancelled", f"{where}: cancelled with a ledger entry"


def _doctor_recommends_only(state_dir: Path, commands: set[str], where: str) -> None:
    r = in_process(state_dir, "doctor", "--json")
    report = r.json()
    assert r.code == (0 if report["consistent"] else 1), (where, r.err)
    for f in report["findings"]:
        if f["kind"] == "leftover_temp" and commands:  # a write cut short (the SDK runs approved
            continue  # calls of one turn concurrently): the next write of that file replaces it
        # after a local effect's intent, doctor names the same command, then how a person settles it
        first, _, then = f["action"].partition("; if the function cannot finish, ")
        assert first in commands and (not then or f["kind"] == "effect_unconfirmed"), (where, f)


def _rejected_channels(state_dir: Path) -> list[str]:
    folder = state_dir / "rejections"
    records = [json.loads(p.read_text(encoding="utf-8")) for p in folder.glob("*.json")] \
        if folder.exists() else []
    return sorted(r["channel"] for r in records)


def _assert_end_state(state_dir: Path, calls: dict[str, str], plan: dict[str, str], where: str,
                      sticky: tuple[str, ...] = ()) -> None:
    """Exactly one ledger entry per approved channel (carrying task and channel), a rejection
    record per rejected one and no other; each call decided exactly once; ``completed`` iff a
    call executed; doctor consistent; deciding again changes nothing on disk."""
    approved = sorted(c for c in plan if plan[c] == "approve")
    entries = ledger_entries(state_dir)
    assert sorted(e["idempotency_key"] for e in entries) == [f"{KEY}#{c}" for c in approved], where
    assert all(e["task_id"] == KEY and e["idempotency_key"] == f"{KEY}#{e['channel']}"
               for e in entries), where
    assert _rejected_channels(state_dir) == sorted(c for c in plan if plan[c] == "reject"), where
    task = _status(state_dir)
    assert task["status"] == ("completed" if approved else "cancelled"), (where, task["status"])
    assert task["pending"] == [], where
    for channel, call_id in calls.items():
        mine = [d for d in task["decisions"] if d["call_id"] == call_id]
        assert len(mine) == 1, (where, channel, task["decisions"])
        assert (mine[0]["channel"], mine[0]["decision"], mine[0]["source"]) == (
            channel, "approved" if plan[channel] == "approve" else "rejected",
            "sticky" if channel in sticky else "human"), where
    _doctor_recommends_only(state_dir, set(), where)
    before = snapshot(state_dir)
    for channel, call_id in calls.items():
        if channel in sticky:
            continue  # decided by the rule, not by a command to repeat
        again = step(state_dir, *_decide(call_id, plan[channel]), "--json")
        assert again.code == 0 and again.json()["status"] == task["status"], (where, again.err)
    assert snapshot(state_dir) == before, f"{where}: a further resume changed the state dir"
    assert not list(state_dir.rglob(".tmp-*")), f"{where}: temp files left behind"


def _run(state_dir: Path, args: list[str], where: str) -> dict:
    r = step(state_dir, *args, "--json")
    assert r.code == 0, f"{where}: {args}: {r.err}"
    _never_cancelled_with_an_entry(state_dir, where)
    return r.json()


def _command(call_id: str, decision: str) -> str:
    return f"python run.py resume --task {KEY} --call {call_id} --decision {decision}"


@pytest.mark.parametrize("recovery", ["repeat-first", "other-first"])
@pytest.mark.parametrize("plan", PLANS, ids="-".join)
def test_crash_at_every_point_of_a_partial_decision_then_decide_the_rest(flows, tmp_path, plan, recovery):
    """Crash while deciding ``blog`` (``news`` stays pending); recover by repeating that decision
    or by deciding ``news`` first (the recorded ``blog`` decision is replayed with it)."""
    calls, d1, d2 = flows["calls"], plan[0], plan[1]
    points = _pick(flows["first"][d1])
    assert points
    for point in points:
        where = f"blog {d1} crashed at {point}, then {recovery}, news {d2}"
        work = tmp_path / point.replace(":", "_")
        shutil.copytree(flows["base"], work)
        r = run_cli(work, *_decide(calls["blog"], d1), env={"HITL_FAILPOINT": point})
        assert r.code == 86, f"{where}: exit {r.code}: {r.err}"
        _never_cancelled_with_an_entry(work, where)
        _doctor_recommends_only(work, {_command(calls["blog"], d1)}, where)
        if recovery == "repeat-first":
            task = _run(work, _decide(calls["blog"], d1), where)
            assert task["status"] == "waiting_for_approval", where
            assert [p["call_id"] for p in task["pending"]] == [calls["news"]], where
            _run(work, _decide(calls["news"], d2), where)
        else:
            task = _run(work, _decide(calls["news"], d2), where)
            if task["pending"]:  # the crash came before blog's decision was on record
                assert [p["call_id"] for p in task["pending"]] == [calls["blog"]], where
                assert task["status"] == "waiting_for_approval", where
                _run(work, _decide(calls["blog"], d1), where)
        _assert_end_state(work, calls, dict(zip(CHANNELS, plan)), where)


@pytest.mark.parametrize("plan", PLANS, ids="-".join)
def test_crash_at_every_point_of_the_last_decision_then_resume_recovers(flows, tmp_path, plan):
    """``blog`` decided; crash while deciding ``news`` (the run ends there); resume recovers."""
    calls, d1, d2 = flows["calls"], plan[0], plan[1]
    decided = tmp_path / "decided"
    shutil.copytree(flows["base"], decided)
    _run(decided, _decide(calls["blog"], d1), "first decision")
    points = _pick(flows["last"][(d1, d2)])
    assert points
    for point in points:
        where = f"blog {d1}, news {d2} crashed at {point}"
        work = tmp_path / point.replace(":", "_")
        shutil.copytree(decided, work)
        r = run_cli(work, *_decide(calls["news"], d2), env={"HITL_FAILPOINT": point})
        assert r.code == 86, f"{where}: exit {r.code}: {r.err}"
        _never_cancelled_with_an_entry(work, where)
        _doctor_recommends_only(work, {_command(calls["news"], d2)}, where)
        _run(work, _decide(calls["news"], d2), where)
        _assert_end_state(work, calls, dict(zip(CHANNELS, plan)), where)


def _repair_temps_of_concurrent_writes(state_dir: Path, where: str) -> None:
    """Two approved calls of one turn run concurrently (the SDK gathers them), so a crash at one
    call's failpoint can cut the other's ledger write short, leaving its temp file (``*.part``):
    ``doctor`` reports it and ``doctor --repair`` deletes it, touching nothing else."""
    found = [f for f in in_process(state_dir, "doctor", "--json").json()["findings"]
             if f["kind"] == "leftover_temp"]
    if found:
        ledger = snapshot(state_dir / "ledger")
        r = in_process(state_dir, "doctor", "--repair", "--json")
        assert r.code == 0 and r.json()["consistent"], (where, r.out, r.err)
        assert {k: v for k, v in ledger.items() if not k.endswith(".part")} == snapshot(
            state_dir / "ledger"), where


@pytest.mark.parametrize("recovery", ["repeat", "follow-doctor"])
@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_crash_at_every_point_of_a_sticky_decision_then_resume_recovers(flows, tmp_path, decision,
                                                                         recovery):
    """``blog`` decided with ``--always`` (the SDK's sticky rule decides ``news``, recorded with
    ``source: sticky``); crash at every point of that resume. Recovery: the same command again, or
    the commands ``doctor`` recommends, literally. A crash before the decision was on record (only
    a reject's rejection records were written) loses the rule on the doctor path (its commands
    are plain decisions, one per call), never a decision: ``news`` is rejected by its own."""
    calls, log = flows["calls"], tmp_path / "fp.log"
    logged = tmp_path / "logged"
    shutil.copytree(flows["base"], logged)
    args = [*_decide(calls["blog"], decision), "--always"]
    points = _pick(_logged(logged, args, log))
    assert MUST[decision] <= set(points) or not HAS_FORK, points
    for point in points:
        where = f"blog {decision} --always crashed at {point}, then {recovery}"
        work = tmp_path / point.replace(":", "_")
        shutil.copytree(flows["base"], work)
        r = run_cli(work, *args, env={"HITL_FAILPOINT": point})
        assert r.code == 86, f"{where}: exit {r.code}: {r.err}"
        _never_cancelled_with_an_entry(work, where)
        _doctor_recommends_only(work, {_command(c, decision) for c in calls.values()}, where)
        rule_on_record = any(d["call_id"] == calls["blog"] for d in _status(work)["decisions"])
        lost = False
        if recovery == "follow-doctor":
            for _ in range(len(CHANNELS)):
                findings = [f for f in in_process(work, "doctor", "--json").json()["findings"]
                            if f["action"].startswith("python run.py resume")]
                if not findings:
                    break
                _run(work, findings[0]["action"].split(";")[0].split()[2:], where)  # its first command
                lost = not rule_on_record  # doctor's command is a plain decision: no rule
            left = [p["call_id"] for p in _status(work)["pending"]]
            if calls["blog"] in left:  # nothing was on record: the reviewer's command again
                _run(work, args, where)
            elif left:
                assert lost and left == [calls["news"]], (where, left)
                # a reject of news may find the sticky rule's rejection record of news (cut before its
                # checkpoint), with blog's reason: it is finished with that reason, another is refused
                _run(work, _decide(calls["news"], decision)[:-2 if decision == "reject" else None], where)
        else:
            _run(work, args, where)
        _repair_temps_of_concurrent_writes(work, where)
        _assert_end_state(work, calls, {c: decision for c in CHANNELS}, where,
                          sticky=() if lost else ("news",))


# -- racing resumers on different calls of one task ------------------------------------------------

RACE_CHANNELS = [f"ch-{i}" for i in range(8)]


def test_four_approvers_and_four_rejecters_on_different_calls_of_one_task(tmp_path):
    """Eight processes, each deciding its own call of one eight-channel task, released together:
    each waits on the task lock and goes on, or is refused with one STOPPED line (under load, it
    waited too long for it); whoever was refused tries again. Each call ends decided exactly once, with
    a ledger entry exactly for the approved ones and a rejection record exactly for the rejected
    ones, and the task completes (at least one call executed)."""
    state_dir = tmp_path / "s"
    args = ["start", "--key", KEY, "--title", "T", "--draft", "Eight channels, one turn.", "--json"]
    for c in RACE_CHANNELS:
        args += ["--channel", c]
    r = step(state_dir, *args)
    assert r.code == 0, r.err
    calls = {p["arguments"]["channel"]: p["call_id"] for p in r.json()["pending"]}
    assert sorted(calls) == RACE_CHANNELS
    plan = {c: ("approve" if i % 2 == 0 else "reject") for i, c in enumerate(RACE_CHANNELS)}
    jobs = [(state_dir, [*_decide(calls[c], plan[c]), "--json"]) for c in RACE_CHANNELS]
    results = [p.wait() for p in spawn_together(jobs)]
    retried = []
    for (_, job), res in zip(jobs, results):
        assert res.code in (0, 1) and "Traceback" not in res.err, (res.code, res.err)
        if res.code == 1:
            lines = [x for x in res.err.splitlines() if x.strip()]
            assert len(lines) == 1 and lines[0].startswith("STOPPED: "), res.err
            # only the bounded wait for the task lock may refuse: each call is its own decision
            assert "being worked on by another process" in res.err, res.err
            retried.append(job)
        _never_cancelled_with_an_entry(state_dir, "during the race")
    assert any(res.code == 0 for res in results)
    for job in retried:  # a refused reviewer tries again once the race is over
        again = step(state_dir, *job)
        assert again.code == 0, again.err
    _assert_end_state(state_dir, calls, plan, "after the race")
    print(f"\nrace 4 approve / 4 reject on different calls: exit codes "
          f"{sorted(res.code for res in results)}, retried {len(retried)}")


# -- a call the run already answered, while another still waits -----------------------------------


@pytest.mark.parametrize("first", ["approve", "reject"])
def test_an_answered_call_is_judged_ended_while_another_waits(cli, state_dir, first):
    """After ``blog`` is decided and answered (``news`` still pending): ``doctor`` finds the task
    consistent (no "crash after the decision" finding whose command would be refused), the same
    decision again returns the task unchanged (a retry after a lost output or a crash right after
    the outcome was written), and the other decision is refused, changing nothing."""
    r = cli(*START, "--json")
    assert r.code == 0, r.err
    calls = {p["arguments"]["channel"]: p["call_id"] for p in r.json()["pending"]}
    r = cli(*_decide(calls["blog"], first), "--json")
    assert r.code == 0 and r.json()["status"] == "waiting_for_approval", r.err
    report = cli("doctor", "--json")
    assert report.code == 0 and report.json()["findings"] == [], report.out
    before = snapshot(state_dir)
    again = cli(*_decide(calls["blog"], first), "--json")
    assert again.code == 0, again.err
    assert again.json()["revision"] == r.json()["revision"] and snapshot(state_dir) == before
    other = cli(*_decide(calls["blog"], "reject" if first == "approve" else "approve"))
    other.assert_stopped()
    assert ("already executed" if first == "approve" else "can never be approved") in other.err
    assert "finish recording" not in other.err
    assert snapshot(state_dir) == before
    done = cli(*_decide(calls["news"], "approve"), "--json")
    assert done.code == 0 and done.json()["status"] == "completed", done.err


# -- the same judgement on the PostgreSQL store ----------------------------------------------------

PG_SIGNING = {"HITL_SIGNING_KEY": "pg-tests-signing-key-0123456789abcdef"}


def test_doctor_on_postgresql_judges_each_call_of_a_several_channel_task(pg_url, tmp_path):
    """The database doctor applies the table per call, as the file doctor does: a task with one
    call approved and one rejected is consistent (not "completed, yet rejected"), and a crash after
    a partial decision is found on that call, with the command that finishes it."""
    state_dir = tmp_path / "s"

    def pg(*args: str, env: dict[str, str] | None = None):
        return run_cli(state_dir, *args, env={**PG_SIGNING, "HITL_STORE_URL": pg_url, **(env or {})})

    r = pg(*START, "--json")
    assert r.code == 0, r.err
    calls = {p["arguments"]["channel"]: p["call_id"] for p in r.json()["pending"]}
    crashed = pg(*_decide(calls["blog"], "approve"), env={"HITL_FAILPOINT": "checkpoint:decision:after"})
    assert crashed.code == 86, crashed.err
    report = pg("doctor", "--json")
    assert report.code == 1, report.err
    assert [(f["kind"], f["action"]) for f in report.json()["findings"]] == [
        ("decision_not_finished", _command(calls["blog"], "approve"))]
    assert pg(*_decide(calls["blog"], "approve")).code == 0
    assert pg(*_decide(calls["news"], "reject")).code == 0
    report = pg("doctor", "--json")
    assert report.code == 0 and report.json()["findings"] == [], report.out
