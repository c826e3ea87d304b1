"""Team mode: reviewers who are who they say (a token each, only its hash stored), the policy's
quorum before the SDK's ``state.approve``, roles, the requester kept out, a veto, and a policy
changed under a waiting task. Through the command line (in process) unless a race needs processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, RUN_PY, checkpoint_file, ledger_entries, snapshot

POLICY = """
[default]
approvals = 2
roles = ["editor"]
requester_may_approve = false
"""


def _add(cli, name: str, *roles: str) -> str:
    args = ["reviewers", "add", name]
    for role in roles:
        args += ["--role", role]
    r = cli(*args, "--json")
    assert r.code == 0, r.err
    return r.json()["token"]


@pytest.fixture
def team(cli, state_dir, tmp_path, monkeypatch):
    """Three editors and one writer, the policy above in force; returns name → token."""
    tokens = {name: _add(cli, name, "editor") for name in ("alice", "bob", "carol")}
    tokens["wendy"] = _add(cli, "wendy", "writer")
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY, encoding="utf-8")
    monkeypatch.setenv("HITL_POLICY", str(policy))
    return tokens


def _as(monkeypatch, token: str | None) -> None:
    if token is None:
        monkeypatch.delenv("HITL_REVIEWER_TOKEN", raising=False)
    else:
        monkeypatch.setenv("HITL_REVIEWER_TOKEN", token)


def _start(cli, monkeypatch, token: str, key: str = "t1", by: str | None = None) -> dict:
    _as(monkeypatch, token)
    r = cli("start", "--key", key, "--draft", "A draft.", *(["--by", by] if by else []), "--json")
    assert r.code == 0, r.err
    return r.json()


def _approve(cli, monkeypatch, token: str | None, key: str = "t1", *extra: str):
    _as(monkeypatch, token)
    return cli("resume", "--task", key, "--decision", "approve", *extra, "--json")


def test_the_token_is_shown_once_and_never_stored(cli, state_dir, team):
    everything = b"".join(v for v in snapshot(state_dir).values() if isinstance(v, bytes))
    for token in team.values():
        assert token.encode() not in everything
        assert token.split("_", 2)[2].encode() not in everything  # not even the secret part
    listed = cli("reviewers", "list", "--json").json()["reviewers"]
    assert [r["name"] for r in listed] == ["alice", "bob", "carol", "wendy"]
    assert all("token" not in r and "token_hash" not in r for r in listed)


def test_missing_forged_and_wrong_tokens_are_refused_with_nothing_changed(cli, state_dir, team, monkeypatch):
    _start(cli, monkeypatch, team["wendy"])
    forged = "hitl_" + team["alice"].split("_")[1] + "_" + "A" * 43  # alice's token ID, another secret
    for token in (None, "", "not-a-token", forged, team["alice"][:-1] + ("B" if team["alice"][-1] != "B" else "C")):
        before = snapshot(state_dir)
        r = _approve(cli, monkeypatch, token)
        assert r.code == 1 and r.err.startswith("STOPPED: team mode") and "Traceback" not in r.err, r.err
        assert "nothing changed" in r.err
        assert snapshot(state_dir) == before


def test_by_is_bound_to_the_token(cli, state_dir, team, monkeypatch):
    _start(cli, monkeypatch, team["wendy"])
    before = snapshot(state_dir)
    r = _approve(cli, monkeypatch, team["bob"], "t1", "--by", "alice")
    assert r.code == 1 and "not 'alice'" in r.err and "'bob'" in r.err
    assert snapshot(state_dir) == before
    r = _approve(cli, monkeypatch, team["bob"], "t1", "--by", "bob")
    assert r.code == 0, r.err
    assert r.json()["approvals"][0]["approved_by"] == ["bob"]


def test_start_by_is_authenticated_and_recorded_as_the_requester(cli, state_dir, team, monkeypatch):
    _as(monkeypatch, team["wendy"])
    r = cli("start", "--key", "t1", "--draft", "A draft.", "--by", "alice")
    assert r.code == 1 and "not 'alice'" in r.err
    assert not (state_dir / "checkpoints").exists() or not list((state_dir / "checkpoints").rglob("*.json"))
    _as(monkeypatch, None)  # the policy keeps the requester out, so who asks must be known
    r = cli("start", "--key", "t1", "--draft", "A draft.")
    assert r.code == 1 and "HITL_REVIEWER_TOKEN" in r.err
    view = _start(cli, monkeypatch, team["wendy"])
    assert view["requested_by"] == "wendy"


def test_two_of_three_each_approval_recorded_and_the_same_reviewer_counts_once(cli, state_dir, team, monkeypatch):
    _start(cli, monkeypatch, team["wendy"])
    first = _approve(cli, monkeypatch, team["alice"])
    assert first.code == 0, first.err
    assert first.json()["status"] == "waiting_for_approval" and ledger_entries(state_dir) == []
    assert first.json()["approvals"][0] | {} == {**first.json()["approvals"][0], "approved_by": ["alice"],
                                                 "required": 2, "missing": 1}
    again = _approve(cli, monkeypatch, team["alice"])  # the same reviewer twice counts once
    assert again.code == 0 and again.json()["status"] == "waiting_for_approval"
    assert again.json()["revision"] == first.json()["revision"] and ledger_entries(state_dir) == []
    done = _approve(cli, monkeypatch, team["bob"])
    assert done.code == 0, done.err
    assert done.json()["status"] == "completed" and len(ledger_entries(state_dir)) == 1
    cp = json.loads(checkpoint_file(state_dir, "t1").read_text(encoding="utf-8"))
    assert [a["by"] for a in cp["approvals"]] == ["alice", "bob"]
    assert [h["detail"]["by"] for h in cp["history"] if h["event"] == "approval_recorded"] == ["alice", "bob"]
    assert cp["decision"]["by"] == "bob"


def test_a_reviewer_without_the_role_is_refused(cli, state_dir, team, monkeypatch):
    _start(cli, monkeypatch, team["alice"])
    _add(cli, "rex", "reader")
    token = json.loads(cli("reviewers", "rotate", "rex", "--json").out)["token"]
    before = snapshot(state_dir)
    r = _approve(cli, monkeypatch, token)
    assert r.code == 1 and "decided by editor" in r.err and "'rex' has role reader" in r.err
    assert snapshot(state_dir) == before


def test_the_requester_may_not_approve(cli, state_dir, team, monkeypatch):
    _start(cli, monkeypatch, team["alice"])
    before = snapshot(state_dir)
    r = _approve(cli, monkeypatch, team["alice"])
    assert r.code == 1 and "asked for it" in r.err
    assert snapshot(state_dir) == before


def test_a_reject_by_an_allowed_reviewer_vetoes_after_an_approval(cli, state_dir, team, monkeypatch):
    _start(cli, monkeypatch, team["wendy"])
    assert _approve(cli, monkeypatch, team["alice"]).code == 0
    _as(monkeypatch, team["carol"])
    r = cli("resume", "--task", "t1", "--decision", "reject", "--reason", "no", "--json")
    assert r.code == 0, r.err
    assert r.json()["status"] == "cancelled" and ledger_entries(state_dir) == []
    assert _approve(cli, monkeypatch, team["bob"]).code == 1  # a rejected call is never approved later


def test_a_reviewer_removed_after_signing_in_cannot_decide(cli, state_dir, team, monkeypatch):
    """The token is checked first (the CLI, the page); the reviewer is looked up again under the
    task's lock, right before the SDK is told: one removed in between is refused."""
    from state.files.store import Store
    from workflow import team as quorum

    _start(cli, monkeypatch, team["wendy"])
    store = Store(state_dir)
    by = quorum.decider(store, None, team["alice"], store.load("t1"))
    assert cli("reviewers", "remove", "alice").code == 0
    from state.errors import Refused

    with pytest.raises(Refused) as caught:
        quorum.check_before(store, store.load("t1"), None, "approve", by)
    assert caught.value.code == "unauthenticated"
    assert _approve(cli, monkeypatch, team["alice"]).code == 1


def test_a_policy_changed_under_a_waiting_task_is_refused(cli, state_dir, team, monkeypatch, tmp_path):
    _start(cli, monkeypatch, team["wendy"])
    changed = tmp_path / "policy.toml"
    changed.write_text(POLICY.replace("approvals = 2", "approvals = 1"), encoding="utf-8")
    before = snapshot(state_dir)
    r = _approve(cli, monkeypatch, team["alice"])
    assert r.code == 1 and "another policy" in r.err
    monkeypatch.delenv("HITL_POLICY")
    r = _approve(cli, monkeypatch, team["alice"])
    assert r.code == 1 and "HITL_POLICY is unset" in r.err
    assert snapshot(state_dir) == before
    changed.write_text("# the same rules, other spacing and comments\n" + POLICY.replace(" = ", "="), encoding="utf-8")
    monkeypatch.setenv("HITL_POLICY", str(changed))
    assert _approve(cli, monkeypatch, team["alice"]).code == 0  # the fingerprint is of the rules


def test_a_bad_policy_file_is_one_stopped_line(cli, state_dir, tmp_path, monkeypatch):
    bad = tmp_path / "bad.toml"
    for text, words in (("[default]\napprovals = 0\n", "not a valid policy"), ("[default\n", "not valid TOML"),
                        ("[default]\nquorum = 2\n", "not a valid policy"),
                        ('[channels."Bad Name"]\napprovals = 2\n', "not a valid policy")):
        bad.write_text(text, encoding="utf-8")
        monkeypatch.setenv("HITL_POLICY", str(bad))
        r = cli("start", "--key", "t1", "--draft", "A draft.")
        assert r.code == 1 and words in r.err and "Traceback" not in r.err, r.err
        assert snapshot(state_dir) == {}
    monkeypatch.setenv("HITL_POLICY", str(tmp_path / "missing.toml"))
    assert "does not exist" in cli("start", "--key", "t1", "--draft", "A draft.").err


def test_a_policy_that_needs_reviewers_is_refused_without_them(cli, state_dir, tmp_path, monkeypatch):
    policy = tmp_path / "p.toml"
    policy.write_text(POLICY, encoding="utf-8")
    monkeypatch.setenv("HITL_POLICY", str(policy))
    r = cli("start", "--key", "t1", "--draft", "A draft.")
    assert r.code == 1 and "register one first" in r.err
    assert snapshot(state_dir) == {}


def test_single_user_mode_stays_without_reviewers(cli, state_dir):
    assert cli("start", "--key", "t1", "--draft", "A draft.").code == 0
    r = cli("resume", "--task", "t1", "--decision", "approve", "--by", "anyone", "--json")
    assert r.code == 0 and r.json()["status"] == "completed"


def test_a_task_started_in_team_mode_stays_one_when_every_reviewer_is_removed(cli, state_dir, team, monkeypatch):
    _start(cli, monkeypatch, team["wendy"])
    for name in team:
        assert cli("reviewers", "remove", name).code == 0
    monkeypatch.delenv("HITL_POLICY")
    before = snapshot(state_dir)
    r = _approve(cli, monkeypatch, None, "t1", "--by", "anyone")
    assert r.code == 1 and "team mode" in r.err
    assert snapshot(state_dir) == before


def test_the_browser_inbox_refuses_to_serve_in_team_mode(cli, state_dir, team):
    r = cli("serve", "--port", "0")
    assert r.code == 1 and "does not sign reviewers in" in r.err


def test_reviewers_add_refuses_a_taken_name_and_bad_roles_with_nothing_written(cli, state_dir, team):
    before = snapshot(state_dir)
    for args, words in ((("alice",), "registered already"), (("zed", "--role", "Bad Role"), "is not 1-32")):
        r = cli("reviewers", "add", *args)
        assert r.code == 1 and words in r.err, r.err
        assert snapshot(state_dir) == before
    assert cli("reviewers", "remove", "nobody").code == 1
    assert cli("reviewers", "rotate", "nobody").code == 1
    assert snapshot(state_dir) == before


def test_a_page_rendered_before_another_reviewers_approval_still_decides():
    """A revision that only recorded an approval toward the quorum does not make the page stale
    (``guards.check_revision``); any other revision does."""
    from state.schema import HistoryEvent
    from workflow.team import only_approvals_since

    class CP:
        revision = 3
        history = [HistoryEvent(at="x", event="started", revision=1),
                   HistoryEvent(at="x", event="approval_recorded", revision=2),
                   HistoryEvent(at="x", event="approval_recorded", revision=3)]

    assert only_approvals_since(CP, 1) and only_approvals_since(CP, 2)
    CP.history[2] = HistoryEvent(at="x", event="interrupted", revision=3)
    assert not only_approvals_since(CP, 1) and not only_approvals_since(CP, 3)


def test_two_reviewers_racing_reach_the_quorum_once(state_dir, team, tmp_path):
    """Two processes approve at once (2 of 3 needed): one effect, both names recorded."""
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("HITL_", "OPENAI_"))}
    env["HITL_POLICY"] = os.environ["HITL_POLICY"]
    base = [sys.executable, str(RUN_PY), "--state-dir", str(state_dir)]
    r = subprocess.run([*base, "start", "--key", "t1", "--draft", "A draft."], cwd=ROOT, capture_output=True,
                       text=True, env={**env, "HITL_REVIEWER_TOKEN": team["wendy"]}, timeout=120)
    assert r.returncode == 0, r.stderr
    procs = [subprocess.Popen([*base, "resume", "--task", "t1", "--decision", "approve"], cwd=ROOT, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env={**env, "HITL_REVIEWER_TOKEN": team[name]}) for name in ("alice", "bob")]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert len(ledger_entries(state_dir)) == 1
    cp = json.loads(checkpoint_file(Path(state_dir), "t1").read_text(encoding="utf-8"))
    assert cp["status"] == "completed" and sorted(a["by"] for a in cp["approvals"]) == ["alice", "bob"]


def test_always_cannot_carry_an_approval_past_another_channels_quorum(cli, state_dir, tmp_path, monkeypatch):
    """The sticky rule decides the tool's calls on every channel: approving the blog call (one
    approval needed) with always must not approve the news call (two needed)."""
    from tests.conftest import start_calls

    tokens = {name: _add(cli, name) for name in ("alice", "bob")}
    policy = tmp_path / "p.toml"
    policy.write_text("[default]\napprovals = 1\n[channels.news]\napprovals = 2\n", encoding="utf-8")
    monkeypatch.setenv("HITL_POLICY", str(policy))
    calls = start_calls(cli, "t2", "Title", "A draft.", "blog", "news")
    before = snapshot(state_dir)
    r = _approve(cli, monkeypatch, tokens["alice"], "t2", "--call", calls["blog"], "--always")
    assert r.code == 1 and "always would also decide calls on channel news" in r.err, r.err
    assert snapshot(state_dir) == before
    r = _approve(cli, monkeypatch, tokens["alice"], "t2", "--call", calls["blog"])
    assert r.code == 0, r.err
    r = _approve(cli, monkeypatch, tokens["alice"], "t2", "--call", calls["news"])
    assert r.code == 0 and r.json()["status"] == "waiting_for_approval"
    assert len(ledger_entries(state_dir)) == 1  # blog only: news waits for its second reviewer
    r = _approve(cli, monkeypatch, tokens["bob"], "t2", "--call", calls["news"])
    assert r.code == 0 and r.json()["status"] == "completed" and len(ledger_entries(state_dir)) == 2


def test_a_decision_through_the_api_by_a_reviewer_without_the_role_is_refused_under_the_lock(cli, state_dir, team,
                                                                                             monkeypatch):
    """The command line checks the policy before it takes the lock; a caller of the API
    (``workflow.decide``) has only the check under the lock, right before the SDK is told: a
    reviewer whose role the rule does not allow is refused there, with nothing changed."""
    import asyncio

    from agent.application import APP
    from state.errors import Refused
    from state.files.store import Store
    from workflow import Approve, Reject, decide

    _start(cli, monkeypatch, team["wendy"])
    token = _add(cli, "rex", "reader")
    before = snapshot(state_dir)
    for decision in (Approve(), Reject(message="no")):
        with pytest.raises(Refused) as refused:
            asyncio.run(decide(Store(state_dir), APP, "t1", decision, token=token))
        assert refused.value.code == "not_allowed" and "'rex' has role reader" in str(refused.value)
        assert snapshot(state_dir) == before and ledger_entries(state_dir) == []


def test_a_reject_by_a_reviewer_without_the_role_is_refused(cli, state_dir, team, monkeypatch):
    """The roles decide who may reject as well as who may approve: a veto by a reviewer the
    policy does not allow is refused, and the task goes on waiting for the editors."""
    _start(cli, monkeypatch, team["alice"])
    _as(monkeypatch, team["wendy"])  # a writer
    before = snapshot(state_dir)
    r = cli("resume", "--task", "t1", "--decision", "reject", "--reason", "no", "--json")
    assert r.code == 1 and "decided by editor" in r.err and "'wendy' has role writer" in r.err, r.err
    assert snapshot(state_dir) == before
    assert _approve(cli, monkeypatch, team["bob"]).json()["status"] == "waiting_for_approval"


def test_a_lone_reject_under_a_quorum_of_two_cancels_at_once_and_never_counts_as_an_approval(cli, state_dir, team,
                                                                                            monkeypatch):
    """Two approvals are needed, one reject is enough: the first decision, a reject, cancels the
    call at once; it is recorded as no one's approval, and later approvals publish nothing."""
    _start(cli, monkeypatch, team["wendy"])
    _as(monkeypatch, team["carol"])
    r = cli("resume", "--task", "t1", "--decision", "reject", "--reason", "no", "--json")
    assert r.code == 0, r.err
    assert r.json()["status"] == "cancelled" and ledger_entries(state_dir) == []
    cp = json.loads(checkpoint_file(state_dir, "t1").read_text(encoding="utf-8"))
    assert cp["approvals"] == [] and cp["decision"]["decision"] == "rejected" and cp["decision"]["by"] == "carol"
    for name in ("alice", "bob"):
        assert _approve(cli, monkeypatch, team[name]).code == 1
    assert ledger_entries(state_dir) == []


def test_a_change_to_a_channels_table_of_the_policy_is_refused_like_a_change_to_the_default(cli, state_dir, team,
                                                                                           monkeypatch, tmp_path):
    """The fingerprint a task records is of the whole policy: changing only ``[channels.news]``
    (here not even a channel of the task) is another policy too."""
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY + "[channels.news]\napprovals = 3\n", encoding="utf-8")
    _start(cli, monkeypatch, team["wendy"])
    policy.write_text(POLICY + "[channels.news]\napprovals = 2\n", encoding="utf-8")
    before = snapshot(state_dir)
    r = _approve(cli, monkeypatch, team["alice"])
    assert r.code == 1 and "another policy" in r.err, r.err
    assert snapshot(state_dir) == before


def test_always_cannot_carry_an_approval_past_another_channels_role_rule(cli, state_dir, tmp_path, monkeypatch):
    """The sticky rule decides the tool's calls on every channel: approving the blog call (anyone)
    with always must not approve the news call, which only a reviewer with the role ``legal`` may
    decide, even though both need one approval."""
    from tests.conftest import start_calls

    tokens = {"alice": _add(cli, "alice"), "lee": _add(cli, "lee", "legal")}
    policy = tmp_path / "p.toml"
    policy.write_text('[default]\napprovals = 1\n[channels.news]\nroles = ["legal"]\n', encoding="utf-8")
    monkeypatch.setenv("HITL_POLICY", str(policy))
    calls = start_calls(cli, "t3", "Title", "A draft.", "blog", "news")
    before = snapshot(state_dir)
    r = _approve(cli, monkeypatch, tokens["alice"], "t3", "--call", calls["blog"], "--always")
    assert r.code == 1 and "always would also decide calls on channel news" in r.err, r.err
    assert snapshot(state_dir) == before and ledger_entries(state_dir) == []
    r = _approve(cli, monkeypatch, tokens["alice"], "t3", "--call", calls["news"])
    assert r.code == 1 and "decided by legal" in r.err
    r = _approve(cli, monkeypatch, tokens["alice"], "t3", "--call", calls["blog"])
    assert r.code == 0 and r.json()["status"] == "waiting_for_approval", r.err
    r = _approve(cli, monkeypatch, tokens["lee"], "t3", "--call", calls["news"])
    assert r.code == 0 and r.json()["status"] == "completed" and len(ledger_entries(state_dir)) == 2
