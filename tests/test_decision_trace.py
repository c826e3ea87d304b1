"""Decisions in the trace: each approval, rejection, quorum step and settlement is a custom span
(``hitl.decision``, ``hitl.approval``, ``hitl.settlement``) in the task's own SDK trace, written by
our local processor to the task's trace file: who, which call, the rule; never the reason's text."""

from __future__ import annotations

import json
import os

import pytest

from conftest import TeamAdmin

pytestmark = pytest.mark.usefixtures("tracing_on")  # traces are the point here (conftest)

KEY = "dt-1"
START = ("start", "--key", KEY, "--title", "Notes", "--draft", "A decision in the trace.")


def _records(state_dir, task_id=KEY):
    from state.files.store import Store
    from workflow.observe import trace_log

    records, _ = trace_log.read(trace_log.trace_path(Store(state_dir), task_id))
    return records


def _steps(state_dir, step):
    """The ``hitl.<step>`` spans of the task's trace: their data, oldest first."""
    return [r["data"]["data"] for r in _records(state_dir)
            if r.get("kind") == "span" and r.get("type") == f"hitl.{step}"]


def test_an_approval_is_a_custom_span_in_the_tasks_own_sdk_trace(cli, state_dir):
    assert cli(*START).code == 0
    assert cli("resume", "--task", KEY, "--decision", "approve", "--by", "ann").code == 0
    [step] = _steps(state_dir, "decision")
    call = step["call_id"]
    assert step == {"task_id": KEY, "call_id": call, "channel": "blog", "tool": "publish_draft",
                    "decision": "approved", "by": "ann", "at": step["at"], "source": "human", "always": False,
                    "edits": False, "has_reason": False, "sticky": [], "rule": "1 approval"}
    span = next(r for r in _records(state_dir) if r.get("type") == "hitl.decision")
    starts = [r for r in _records(state_dir) if r.get("kind") == "trace_start"]
    assert [(s["metadata"]["phase"], s["trace_id"] == span["trace_id"]) for s in starts] == [
        ("start", True), ("decision", True), ("resume", True)]  # one trace: the task's
    assert {s["group_id"] for s in starts} == {KEY}


def test_a_reject_is_in_the_trace_without_its_reason(cli, state_dir):
    assert cli(*START).code == 0
    reason = "Wrong figures on page two."
    assert cli("resume", "--task", KEY, "--decision", "reject", "--by", "bob", "--reason", reason).code == 0
    [step] = _steps(state_dir, "decision")
    assert (step["decision"], step["by"], step["has_reason"]) == ("rejected", "bob", True)
    assert not any(reason in json.dumps(r) for r in _records(state_dir) if r.get("type", "").startswith("hitl."))


def test_a_sticky_decision_names_the_calls_it_decided_each_with_its_own_span(cli, state_dir):
    from conftest import start_calls

    calls = start_calls(cli, KEY, "Notes", "Two channels.", "blog", "news")
    assert cli("resume", "--task", KEY, "--call", calls["blog"], "--decision", "approve", "--by", "ann",
               "--always").code == 0
    steps = _steps(state_dir, "decision")
    assert [(s["call_id"], s["source"]) for s in steps] == [(calls["blog"], "human"), (calls["news"], "sticky")]
    assert steps[0]["sticky"] == [calls["news"]]


def test_a_quorum_step_is_an_approval_span_then_the_decision(cli, state_dir, tmp_path):
    team = TeamAdmin(cli)
    ann, bob = team.add("ann", "editor"), team.add("bob", "editor")
    policy = tmp_path / "policy.toml"
    policy.write_text('[default]\napprovals = 2\nroles = ["editor"]\n', encoding="utf-8")
    assert team.run("policy", "set", str(policy)).code == 0
    assert team.run(*START, "--by", "root").code == 0
    for token in (ann, bob):
        os.environ["HITL_REVIEWER_TOKEN"] = token
        try:
            assert cli("resume", "--task", KEY, "--decision", "approve").code == 0
        finally:
            os.environ.pop("HITL_REVIEWER_TOKEN")
    approvals = _steps(state_dir, "approval")  # each approval counted, the one reaching the quorum too
    assert [(a["by"], a["approvals"], a["required"], a["rule"]) for a in approvals] == [
        ("ann", 1, 2, "2 approvals by editor"), ("bob", 2, 2, "2 approvals by editor")]
    assert [(s["by"], s["rule"]) for s in _steps(state_dir, "decision")] == [("bob", "2 approvals by editor")]


def test_a_settlement_is_a_span_naming_who_found_what(state_dir, tmp_path):
    import test_external_effects as ext

    svc = ext.Service(tmp_path / "svc", dedup=False, lose_answer=1)
    try:
        ext._in_doubt(state_dir, svc)
        r = ext.cli(state_dir, svc.url, "settle", "--task", "ext-1", "--outcome", "published", "--by", "bea",
                    idempotency="none")
        assert r.code == 0, r.err
    finally:
        svc.stop()
    [step] = [r["data"]["data"] for r in _records(state_dir, "ext-1") if r.get("type") == "hitl.settlement"]
    assert (step["by"], step["outcome"], step["channel"], step["attempt"]) == ("bea", "published", "blog", 1)


def test_a_finding_of_not_published_is_in_the_trace_without_loading_the_sdk(state_dir, tmp_path):
    """``settle --outcome not-published`` records only and imports no SDK: its step is written to the
    trace file directly, in the shape the processor writes (no SDK trace, ``trace_id`` null)."""
    import test_external_effects as ext

    import time

    svc = ext.Service(tmp_path / "svc", dedup=False, lose_answer=1)
    try:
        ext.start(state_dir, svc.url, idempotency="none")
        r = ext.cli(state_dir, svc.url, *ext.APPROVE, idempotency="none", **ext.SHORT_WINDOW)
        assert r.code == 1 and "in doubt" in r.err
        time.sleep(0.3)  # past the attempt's window: it may be settled
        from conftest import run_subprocess  # a new interpreter: no SDK loaded before the command

        r = run_subprocess(state_dir, "settle", "--task", "ext-1", "--outcome", "not-published", "--by", "bea",
                           "--reason", "not in the provider's list", env=ext.env_for(svc.url, idempotency="none"))
        assert r.code == 0, r.err
    finally:
        svc.stop()
    [span] = [r for r in _records(state_dir, "ext-1") if r.get("type") == "hitl.settlement"]
    assert span["trace_id"] is None and span["data"]["data"]["outcome"] == "not_published"
    assert span["data"]["data"]["by"] == "bea"
