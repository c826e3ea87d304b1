"""The outcome and trajectory evaluation (``run.py eval``, ``workflow.evaluate``): a status is not
the outcome. Each grader has a passing case and a planted failure, named by the check it must
report; the service's graders ask a real publishing service (in this process's thread).

Planted failures are written as a key holder would (signed records, re-signed checkpoints): the
graders check what the world and the records hold, behind every signature.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from conftest import checkpoint_file, ledger_entries, plant_record, record_path, resign, snapshot

KEY = "ev-1"
START = ("start", "--key", KEY, "--title", "Notes", "--draft", "Graded by its outcome.")
APPROVE = ("resume", "--task", KEY, "--decision", "approve", "--by", "ann")
REJECT = ("resume", "--task", KEY, "--decision", "reject", "--by", "ann", "--reason", "Not this week, please.")


def _eval(cli, *extra: str) -> tuple[int, dict[str, Any]]:
    r = cli("eval", "--json", *extra)
    return r.code, r.json()


def _only(result: dict[str, Any]) -> dict[str, Any]:
    assert len(result["tasks"]) == 1, result
    return result["tasks"][0]


def _checks(result: dict[str, Any]) -> list[str]:
    return [f["check"] for t in result["tasks"] for f in t["findings"]]


def _finish(cli, decision: tuple[str, ...]) -> None:
    assert cli(*START).code == 0
    assert cli(*decision).code == 0


def _entry(state_dir: Path, key: str = KEY, **changes: Any) -> Path:
    """A signed ledger entry for ``key`` (the fields of a real one, with ``changes``)."""
    fields = {"idempotency_key": key, "task_id": KEY, "action": "publish_draft", "title": "Notes",
              "content_sha256": "c" * 64, "published_at": "2026-01-01T00:00:00.000000Z", "channel": "blog",
              "approval": "human", "result": None, **changes}
    return plant_record(state_dir, "ledger_entry", fields)


def _resign_checkpoint(state_dir: Path, mutate) -> None:
    resign(state_dir, checkpoint_file(state_dir, KEY), mutate)


# --- passing cases -----------------------------------------------------------------------------

def test_an_approved_task_passes_and_eval_changes_nothing(cli, state_dir):
    _finish(cli, APPROVE)
    before = snapshot(state_dir)
    code, result = _eval(cli)
    assert code == 0 and _only(result)["result"] == "PASS" and _only(result)["status"] == "completed"
    assert result["summary"] == {"pass": 1, "fail": 0, "in_doubt": 0, "not_finished": 0}
    assert snapshot(state_dir) == before


def test_a_rejected_task_passes_and_the_text_is_one_line_per_task(cli, state_dir):
    _finish(cli, REJECT)
    r = cli("eval")
    assert r.code == 0, r.err
    assert r.out.splitlines() == [f"PASS     {KEY} (cancelled)",
                                  "1 passed, 0 failed, 0 in doubt; 0 not finished (not graded)"]


def test_a_waiting_task_is_not_graded(cli, state_dir):
    assert cli(*START).code == 0
    code, result = _eval(cli)
    assert code == 0 and result["tasks"] == [] and result["summary"]["not_finished"] == 1


def test_approved_with_edits_passes_with_the_edited_content(cli, state_dir):
    assert cli(*START).code == 0
    assert cli(*APPROVE, "--edit-body", "Graded by its edited outcome.").code == 0
    code, result = _eval(cli)
    assert code == 0 and _only(result)["result"] == "PASS", result


def test_two_channels_one_approved_one_rejected_pass(cli, state_dir):
    from conftest import start_calls

    calls = start_calls(cli, KEY, "Notes", "Two channels.", "blog", "news")
    assert cli("resume", "--task", KEY, "--call", calls["news"], "--decision", "reject", "--by", "ann").code == 0
    assert cli("resume", "--task", KEY, "--call", calls["blog"], "--decision", "approve", "--by", "ann").code == 0
    code, result = _eval(cli)
    assert code == 0 and _only(result)["result"] == "PASS", result


# --- outcome: planted failures -------------------------------------------------------------------

def test_a_completed_task_whose_ledger_entry_was_deleted_fails_the_outcome(cli, state_dir):
    _finish(cli, APPROVE)
    record_path(state_dir, "ledger_entry", {"idempotency_key": KEY}).unlink()
    r = cli("eval")
    assert r.code == 1 and r.err.startswith("STOPPED: the evaluation found 1 failed")
    assert r.out.splitlines()[0] == (f"FAIL     {KEY} (completed): outcome: approved effect recorded: blog: approved, "
                                     f"but the ledger has no entry under '{KEY}'")


def test_an_entry_with_other_content_than_approved_fails_the_outcome(cli, state_dir):
    _finish(cli, APPROVE)
    published_at = ledger_entries(state_dir)[0]["published_at"]
    _entry(state_dir, published_at=published_at)  # the same key, signed, another content
    code, result = _eval(cli)
    assert code == 1 and _checks(result) == ["outcome: approved content"]


def test_an_effect_after_a_reject_fails_the_outcome(cli, state_dir):
    _finish(cli, REJECT)
    _entry(state_dir)
    code, result = _eval(cli)
    assert code == 1 and "outcome: nothing after a reject" in _checks(result)


def test_an_effect_nobody_approved_in_an_expired_task_fails_the_outcome(cli, state_dir, monkeypatch):
    assert cli(*START, "--expires-in", "90s").code == 0
    monkeypatch.setenv("HITL_NOW", "2099-01-01T00:00:00Z")
    assert cli("expire").code == 0
    monkeypatch.delenv("HITL_NOW")
    code, result = _eval(cli)
    assert code == 0 and _only(result)["status"] == "expired" and _only(result)["result"] == "PASS"
    _entry(state_dir)
    code, result = _eval(cli)
    assert code == 1 and _checks(result) == ["outcome: nothing without an approval"]


def test_a_stray_entry_of_the_task_fails_the_outcome(cli, state_dir):
    _finish(cli, APPROVE)
    _entry(state_dir, key=f"{KEY}#elsewhere", channel="elsewhere")
    code, result = _eval(cli)
    assert code == 1 and _checks(result) == ["outcome: no stray entry"]


# --- trajectory: planted failures ----------------------------------------------------------------

def test_an_effect_dated_before_its_approval_fails_the_trajectory(cli, state_dir):
    _finish(cli, APPROVE)
    _resign_checkpoint(state_dir, lambda d: [x.update(at="2099-01-01T00:00:00.000000Z") for x in d["decisions"]])
    code, result = _eval(cli)
    assert code == 1 and _checks(result) == ["trajectory: effect after its approvals"]


def test_an_effect_short_of_the_quorum_fails_the_trajectory(cli, state_dir):
    _finish(cli, APPROVE)
    team = {"requested_by": "ann", "policy_sha256": None, "authenticated": False, "policy_version": 0,
            "rules": {"blog": {"approvals": 2, "roles": None, "requester_may_approve": False}}}
    _resign_checkpoint(state_dir, lambda d: d.update(team=team, approvals=[]))
    code, result = _eval(cli)
    assert code == 1 and _checks(result) == ["trajectory: quorum before the effect",
                                             "trajectory: not approved by the requester"]


def test_an_effect_after_a_veto_fails_the_trajectory(cli, state_dir):
    _finish(cli, APPROVE)

    def vetoed(d):
        veto = {**d["decisions"][0], "decision": "rejected", "by": "bob", "at": "2000-01-01T00:00:00.000000Z"}
        d["decisions"] = [veto, *d["decisions"]]
    _resign_checkpoint(state_dir, vetoed)
    code, result = _eval(cli)
    assert code == 1 and "trajectory: nothing after a veto" in _checks(result)


def test_a_reject_whose_message_never_reached_the_model_fails_the_trajectory(cli, state_dir):
    _finish(cli, REJECT)
    _resign_checkpoint(state_dir, lambda d: d.update(run_state=d["run_state"].replace("Not this week", "Fine")))
    code, result = _eval(cli)
    assert code == 1 and _checks(result) == ["trajectory: reject reached the model"]

    def unanswered(d):
        state = json.loads(d["run_state"])
        for part in ("generated_items", "session_items"):
            state[part] = [i for i in state.get(part, [])
                           if i.get("raw_item", {}).get("type") != "function_call_output"]
        d["run_state"] = json.dumps(state)
    _resign_checkpoint(state_dir, unanswered)
    code, result = _eval(cli)
    assert code == 1 and "no answer to it" in result["tasks"][0]["findings"][0]["what"]


def test_a_call_never_decided_in_a_finished_task_fails_the_trajectory(cli, state_dir):
    _finish(cli, APPROVE)

    def extra_call(d):
        started = d["history"][0]["detail"]
        started["calls"] = [*started["calls"], {**started["calls"][0], "call_id": "call-never"}]
    _resign_checkpoint(state_dir, extra_call)
    code, result = _eval(cli)
    assert code == 1 and _checks(result) == ["trajectory: every call decided or ended"]


@pytest.mark.parametrize("mutate, check", [
    (lambda d: d["history"][0].update(event="resumed"), "trajectory: starts with its request"),
    (lambda d: d["history"][1].update(revision=1), "trajectory: revisions in order"),
], ids=["a history that does not start with the request", "revisions out of order"])
def test_a_history_out_of_shape_fails_the_trajectory(cli, state_dir, mutate, check):
    _finish(cli, APPROVE)
    _resign_checkpoint(state_dir, mutate)
    code, result = _eval(cli)
    assert code == 1 and check in _checks(result)


def test_an_ending_that_is_not_last_fails_the_trajectory(cli, state_dir):
    _finish(cli, APPROVE)
    _resign_checkpoint(state_dir, lambda d: d["history"].insert(1, {**d["history"][-1]}))
    code, result = _eval(cli)
    assert code == 1 and "trajectory: ends once, last" in _checks(result)


# --- selection and refusals ------------------------------------------------------------------------

def test_task_and_since_select_what_is_graded(cli, state_dir):
    _finish(cli, APPROVE)
    code, result = _eval(cli, "--since", "2099-01-01T00:00:00Z")
    assert code == 0 and result["tasks"] == []
    code, result = _eval(cli, "--since", "2000-01-01T00:00:00+02:00", "--task", KEY)
    assert code == 0 and _only(result)["task_id"] == KEY


def test_an_unknown_task_is_one_stopped_line_and_nothing_written(cli, state_dir):
    _finish(cli, APPROVE)
    before = snapshot(state_dir)
    r = cli("eval", "--task", "nope")
    assert r.code == 1 and r.err.startswith("STOPPED: ") and "no task 'nope'" in r.err and r.out == ""
    assert snapshot(state_dir) == before


@pytest.mark.parametrize("value, says", [
    ("yesterday", "not a time: 'yesterday'"),
    ("2026-12-04T12:46:20", "not a time with its time zone (Z or +01:00): '2026-12-04T12:46:20'"),
])
def test_a_bad_since_is_a_usage_error_before_any_file_is_read(cli, state_dir, value, says):
    r = cli("eval", "--since", value)
    assert r.code == 2 and says in r.err and not state_dir.exists()


def test_since_takes_a_date_as_its_midnight_utc(cli, state_dir):
    from workflow.ops.evaluate import since_time

    assert since_time("2026-01-31").isoformat() == "2026-01-31T00:00:00+00:00"
    _finish(cli, APPROVE)
    code, result = _eval(cli, "--since", "2000-01-01")
    assert code == 0 and _only(result)["task_id"] == KEY


def test_an_unreadable_ledger_fails_closed_and_names_it(cli, state_dir):
    _finish(cli, APPROVE)
    entry = record_path(state_dir, "ledger_entry", {"idempotency_key": KEY})
    entry.write_text(entry.read_text(encoding="utf-8").replace("Notes", "Notez"), encoding="utf-8")
    r = cli("eval")
    assert r.code == 1 and r.out.splitlines()[0].startswith("FAIL     unreadable ledger, nothing graded: ")


def test_an_empty_store_says_there_is_nothing_to_grade(cli, state_dir):
    r = cli("eval")
    assert r.code == 0 and r.out.splitlines()[0] == f"no task to grade in {state_dir}"
    assert not state_dir.exists()


def test_the_public_api_evaluates_the_same(cli, state_dir):
    from workflow import evaluate, open_store

    _finish(cli, APPROVE)
    assert evaluate(open_store(state_dir))["tasks"][0]["result"] == "PASS"


# --- through a service ------------------------------------------------------------------------------

@pytest.fixture
def published(cli, state_dir, tmp_path, monkeypatch):
    """A task approved and published through a deduplicating publishing service; the service."""
    from test_external_effects import Service, env_for

    svc = Service(tmp_path / "svc")
    for name, value in env_for(svc.url).items():
        monkeypatch.setenv(name, value)
    yield svc
    svc.stop()


def test_a_task_published_at_the_service_passes_when_asked(cli, state_dir, published):
    _finish(cli, APPROVE)
    code, result = _eval(cli)
    assert code == 0 and _only(result) == {"task_id": KEY, "status": "completed", "result": "PASS",
                                           "findings": [], "notes": []}


@pytest.mark.parametrize("sql, check", [
    ("UPDATE publications SET body = 'Something else.'", "outcome: service holds the approved content"),
    ("DELETE FROM publications", "outcome: one publication at the service"),
], ids=["a service holding other content", "a completed task whose service record was removed"])
def test_a_service_record_changed_behind_a_completed_task_fails_the_outcome(cli, state_dir, published, sql, check):
    _finish(cli, APPROVE)
    with sqlite3.connect(published.data_dir / "publications.sqlite3") as db:
        db.execute(sql)
    code, result = _eval(cli)
    assert code == 1 and _checks(result) == [check]


def test_a_publication_at_the_service_with_no_approval_fails_the_outcome(cli, state_dir, published):
    from state.integrity import load_key
    from state.state_id import ensure
    from test_external_effects import publish_directly
    from workflow.external import request_key

    _finish(cli, REJECT)
    key = request_key(load_key(state_dir, create=False), ensure(state_dir).state_id, KEY, 1)
    publish_directly(published, "Notes", "Graded by its outcome.", key=key)
    code, result = _eval(cli)
    assert code == 1 and _checks(result) == ["outcome: nothing at the service"]


def test_a_service_that_cannot_be_asked_leaves_a_note_not_a_pass_by_silence(cli, state_dir, published, monkeypatch):
    _finish(cli, APPROVE)
    monkeypatch.delenv("HITL_PUBLISH_URL")
    r = cli("eval")
    assert r.code == 0
    assert f"not asked at the service {published.url}: the service configured here is none" in r.out
    assert r.out.splitlines()[-1].endswith("; 1 graded on the ledger only (see its note)")


def test_an_effect_in_doubt_is_in_doubt_never_a_pass_until_settled(tmp_path, state_dir):
    """A lost answer from a provider that cannot deduplicate: ``IN DOUBT`` (exit 1); settled as
    published by a person, the task passes on the ledger, with a note that the service, which has
    no lookup by key, was not asked."""
    import test_external_effects as ext

    svc = ext.Service(tmp_path / "svc", dedup=False, lose_answer=1)
    try:
        ext._in_doubt(state_dir, svc)
        r = ext.cli(state_dir, svc.url, "eval", idempotency="none")
        assert r.code == 1 and r.out.splitlines()[0] == (
            "IN DOUBT ext-1 (in_doubt): outcome: confirmed: an effect of task ext-1 is in_doubt: wait for "
            "its window or settle it (docs/external-effects.md)")
        assert r.err.startswith("STOPPED: the evaluation found 0 failed and 1 in-doubt task(s) of 1 graded")
        r = ext.cli(state_dir, svc.url, "settle", "--task", "ext-1", "--outcome", "published", "--by", "ann",
                    "--reason", "seen at the service", idempotency="none")
        assert r.code == 0, r.err
        r = ext.cli(state_dir, svc.url, "eval", "--json", idempotency="none")
        graded = r.json()["tasks"][0]
        assert r.code == 0 and graded["result"] == "PASS", r.out
        assert graded["notes"] == [f"blog: not asked at the service {svc.url}: it has no lookup by key "
                                   "(no deduplication)"]
    finally:
        svc.stop()


def test_the_scenario_suite_grades_every_scenario_as_expected_and_docs_show_its_table():
    """``benchmarks/eval_scenarios.py``: 14 scripted scenarios (approve, reject, edits, two
    channels partial and sticky, a crash, a lost answer in doubt then settled, a 2-of-2 quorum, a
    veto, a model that ignores edits or a rejection, an expiry, a private channel) all grade as
    expected, and each of the four planted faults fails with its check; docs/eval.md shows exactly
    the table it prints."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, str(root / "benchmarks" / "eval_scenarios.py")], capture_output=True,
                          text=True, encoding="utf-8", cwd=root, timeout=300,
                          env={k: v for k, v in __import__("os").environ.items()
                               if not k.startswith(("HITL_", "OPENAI_"))})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    printed = [line for line in proc.stdout.splitlines() if line.startswith("|")]
    assert len(printed) == 2 + 14 + 2 + 4 and "(expected" not in proc.stdout
    assert proc.stdout.splitlines()[-1] == "14 scenarios, 4 planted faults: every one graded as expected"
    page = (root / "docs" / "eval.md").read_text(encoding="utf-8")
    assert proc.stdout.strip() in page  # the page shows exactly what the script prints


def test_eval_grades_tasks_on_postgresql_too(cli, pg_url, monkeypatch):
    """The same graders on the PostgreSQL store: an approved and a rejected task pass; the
    approved one's ledger row deleted, it fails the outcome."""
    import psycopg

    monkeypatch.setenv("HITL_SIGNING_KEY", "eval-pg-signing-key-0123456789abcdef")
    for key, decision in (("pg-a", "approve"), ("pg-r", "reject")):
        assert cli("--store", pg_url, "start", "--key", key, "--title", "T", "--draft", "On PostgreSQL.").code == 0
        assert cli("--store", pg_url, "resume", "--task", key, "--decision", decision, "--by", "ann").code == 0
    r = cli("--store", pg_url, "eval", "--json")
    assert r.code == 0, r.err
    assert [(t["task_id"], t["result"]) for t in r.json()["tasks"]] == [("pg-a", "PASS"), ("pg-r", "PASS")]
    with psycopg.connect(pg_url) as db:
        db.execute("DELETE FROM ledger WHERE idempotency_key = 'pg-a'")
    r = cli("--store", pg_url, "eval", "--json")
    assert r.code == 1 and _checks(r.json()) == ["outcome: approved effect recorded"]


def test_a_task_approved_with_edits_at_the_service_passes_with_the_edited_content(cli, state_dir, published):
    assert cli(*START).code == 0
    assert cli(*APPROVE, "--edit-body", "Graded by its edited outcome.").code == 0
    assert [p["body"] for p in published.publications()] == ["Graded by its edited outcome."]
    code, result = _eval(cli)
    assert code == 0 and _only(result)["result"] == "PASS" and _only(result)["notes"] == [], result


def test_an_unreadable_checkpoint_is_a_failure_named_and_the_others_are_graded(cli, state_dir):
    _finish(cli, APPROVE)
    assert cli("start", "--key", "ev-2", "--title", "T", "--draft", "Another.").code == 0
    assert cli("resume", "--task", "ev-2", "--decision", "reject", "--by", "ann").code == 0
    checkpoint_file(state_dir, "ev-2").write_text("{ not json", encoding="utf-8")
    r = cli("eval", "--json")
    assert r.code == 1
    assert [(t["task_id"], t["result"]) for t in r.json()["tasks"]] == [(KEY, "PASS")]
    [problem] = r.json()["problems"]
    assert problem.startswith("unreadable checkpoint: ") and r.json()["summary"]["fail"] == 1


# --- legitimate flows that must pass (each once graded as a failure) --------------------------------

def test_an_expired_task_with_its_private_preview_published_passes(cli, state_dir, monkeypatch):
    """The preview channel needs no human: its entry is written at start; the task then expires."""
    assert cli(*START, "--channel", "preview", "--channel", "blog", "--expires-in", "90s").code == 0
    monkeypatch.setenv("HITL_NOW", "2099-01-01T00:00:00Z")
    assert cli("expire").code == 0
    monkeypatch.delenv("HITL_NOW")
    code, result = _eval(cli)
    assert code == 0 and _only(result)["status"] == "expired" and _only(result)["result"] == "PASS", result


def test_an_entry_recorded_as_needing_no_human_on_a_channel_that_waited_for_one_fails(cli, state_dir):
    _finish(cli, REJECT)
    _entry(state_dir, approval="not_needed")
    code, result = _eval(cli)
    assert code == 1 and _checks(result) == ["outcome: nothing after a reject"]
    assert cli(*START[:2], "ev-3", *START[3:]).code == 0
    assert cli("resume", "--task", "ev-3", "--decision", "approve", "--by", "ann").code == 0
    record_path(state_dir, "ledger_entry", {"idempotency_key": "ev-3"}).unlink()
    _entry(state_dir, key="ev-3", task_id="ev-3", approval="not_needed",
           content_sha256=json.loads(checkpoint_file(state_dir, "ev-3").read_text())["content_sha256"])
    code, result = _eval(cli, "--task", "ev-3")
    assert code == 1 and _checks(result) == ["outcome: nothing without an approval"]


@pytest.mark.parametrize("second", ["approve", "reject"])
def test_a_model_that_asks_again_after_its_draft_was_published_passes(cli, state_dir, monkeypatch, second):
    """After the publication the model asks again for the same draft (a new call): the reviewer's
    second decision, either way, leaves one entry, dated after the approval that ran it."""
    from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

    from agent.models import offline_responder
    from conftest import use_app

    def again(call):
        outputs = [i for i in call.input if isinstance(call.input, list) and isinstance(i, dict)
                   and i.get("type") == "function_call_output"]
        if len(outputs) == 1:
            first = offline_responder(call.__class__(**{**call.__dict__, "input": call.input[:1]})).output[0]
            return ModelStep(output=[function_call(first.name, json.loads(first.arguments), call_id="call_again")])
        return ModelStep(output=[assistant_message("done")]) if outputs else offline_responder(call)

    use_app(monkeypatch, offline_model=lambda: ScriptedModel([ModelStep.respond(again) for _ in range(8)]))
    assert cli(*START).code == 0
    waiting = cli(*APPROVE, "--json").json()
    assert waiting["status"] == "waiting_for_approval" and waiting["pending"][0]["call_id"] == "call_again"
    assert cli("resume", "--task", KEY, "--decision", second, "--by", "bob").code == 0
    code, result = _eval(cli)
    assert code == 0 and _only(result)["result"] == "PASS", result
    assert len(ledger_entries(state_dir)) == 1


def test_a_task_a_person_ended_while_another_call_had_run_passes_with_a_note(cli, state_dir):
    """Two channels: preview runs at start (no human); blog's approval is recorded, then the process
    dies before its effect; a person ends the task with ``fail``: it ends ``completed`` (preview
    executed), blog given up. Graded: PASS, and a note names who gave blog up."""
    from conftest import run_subprocess

    assert cli(*START, "--channel", "preview", "--channel", "blog").code == 0
    crashed = run_subprocess(state_dir, *APPROVE, env={"HITL_FAILPOINT": "checkpoint:decision:after"})
    assert crashed.code == 86, crashed.err
    assert cli("fail", "--task", KEY, "--by", "ann", "--reason", "the channel was closed").code == 0
    code, result = _eval(cli)
    assert code == 0 and _only(result)["status"] == "completed" and _only(result)["result"] == "PASS", result
    assert _only(result)["notes"] == ["blog: approved, then given up by ann (the channel was closed): no effect "
                                      "expected"]



def test_eval_of_local_tasks_never_imports_the_sdk(cli, state_dir):
    """``eval`` only reads files: with no finished task through a service it never imports the SDK
    (about 2 s), like status, list, ledger, show and doctor."""
    import subprocess
    import sys

    _finish(cli, APPROVE)
    root = Path(__file__).resolve().parents[1]
    code = ("import sys, run\n"
            f"rc = run.main(['--state-dir', {str(state_dir)!r}, 'eval'])\n"
            "assert 'agents' not in sys.modules, 'eval imported the SDK'\n"
            "sys.exit(rc)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith(f"PASS     {KEY} (completed)")
