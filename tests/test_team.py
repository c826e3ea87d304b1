"""Team mode: reviewers who are who they say (a token each, only its hash stored), the policy's
quorum before the SDK's ``state.approve``, roles, the requester kept out, a veto, and the policy
in the store (set by an admin, versioned; a task decided under the version it started under).
Through the command line (in process) unless a race needs processes. tests/test_team_policy.py
runs what involves a store (settle, fail, expire, the requester's environment) on both stores."""

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


def _set_policy(cli, monkeypatch, admin: str, text: str, tmp_path: Path, name: str = "policy.toml") -> dict:
    """``policy set`` of ``text`` (written to ``name`` in ``tmp_path``) with the admin token ``admin``."""
    policy = tmp_path / name
    policy.write_text(text, encoding="utf-8")
    _as(monkeypatch, admin)
    r = cli("policy", "set", str(policy), "--json")
    assert r.code == 0, r.err
    return r.json()


@pytest.fixture
def team(cli, state_dir, tmp_path, monkeypatch):
    """An admin, three editors and one writer, the policy above set by the admin (version 1);
    returns name → token."""
    tokens = {"ada": _add(cli, "ada", "admin")}
    tokens.update({name: _add(cli, name, "editor") for name in ("alice", "bob", "carol")})
    tokens["wendy"] = _add(cli, "wendy", "writer")
    assert _set_policy(cli, monkeypatch, tokens["ada"], POLICY, tmp_path)["version"] == 1
    _as(monkeypatch, None)
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
    assert [r["name"] for r in listed] == ["ada", "alice", "bob", "carol", "wendy"]
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


def test_a_policy_set_after_start_does_not_strand_a_waiting_task_it_decides_under_its_version(cli, state_dir, team,
                                                                                               monkeypatch, tmp_path):
    """A task records the policy version it started under and is decided under it: a later
    ``policy set`` (here one approval, by anyone) neither strands it nor lowers its quorum; a task
    started after it is decided under the new version."""
    _start(cli, monkeypatch, team["wendy"])
    assert _set_policy(cli, monkeypatch, team["ada"], "[default]\napprovals = 1\n", tmp_path, "v2.toml")["version"] == 2
    first = _approve(cli, monkeypatch, team["alice"])
    assert first.code == 0 and first.json()["status"] == "waiting_for_approval", first.err  # still 2 of 2
    assert ledger_entries(state_dir) == []
    assert _approve(cli, monkeypatch, team["wendy"]).code == 1  # still editors only
    done = _approve(cli, monkeypatch, team["bob"])
    assert done.code == 0 and done.json()["status"] == "completed", done.err
    _start(cli, monkeypatch, team["wendy"], "t2")
    r = _approve(cli, monkeypatch, team["wendy"], "t2")  # version 2: one approval, anyone
    assert r.code == 0 and r.json()["status"] == "completed", r.err
    cps = [json.loads(checkpoint_file(state_dir, t).read_text(encoding="utf-8"))["team"] for t in ("t1", "t2")]
    assert [c["policy_version"] for c in cps] == [1, 2]


def test_a_policy_version_removed_or_rewritten_under_a_waiting_task_is_refused(cli, state_dir, team, monkeypatch):
    """Every version is kept: a task whose version is gone from the store, or holds other rules
    (re-signed by a key holder), is refused, never decided under another version."""
    from state.policy import Policy, fingerprint
    from tests.conftest import sign_record

    _start(cli, monkeypatch, team["wendy"])
    path = state_dir / "policies" / "v000001.json"
    original = path.read_bytes()
    data = json.loads(original)
    data["rules"]["default"]["approvals"] = 1
    data["sha256"] = fingerprint(Policy.model_validate(data["rules"]))
    fields = {k: v for k, v in data.items() if k not in ("record", "state_id", "mac")}
    for damage in ("removed", "rewritten"):
        if damage == "removed":
            path.unlink()
        else:
            path.write_text(json.dumps(sign_record(state_dir, "policy", fields)), encoding="utf-8")
        before = snapshot(state_dir)
        r = _approve(cli, monkeypatch, team["alice"])
        assert r.code == 1 and "policy version 1" in r.err and "a human must check" in r.err, r.err
        assert snapshot(state_dir) == before
        path.write_bytes(original)
    assert _approve(cli, monkeypatch, team["alice"]).json()["status"] == "waiting_for_approval"


def test_a_task_started_before_the_policy_moved_into_the_store_is_approved_only_under_the_same_rules(
        cli, state_dir, team, monkeypatch, tmp_path):
    """A task an earlier version started (its rules from a file the requester's environment named;
    no policy version recorded) cannot be approved unless a stored version has the same rules; it
    may still be rejected."""
    from tests.conftest import resign

    for key in ("old-1", "old-2"):
        _start(cli, monkeypatch, team["wendy"], key)
        resign(state_dir, checkpoint_file(state_dir, key), lambda d: (
            d["team"].pop("policy_version"), d["team"].update(policy_sha256="a" * 64,
                                                              rules={"blog": {"approvals": 1, "roles": None,
                                                                              "requester_may_approve": True}})))
    before = snapshot(state_dir)
    r = _approve(cli, monkeypatch, team["wendy"], "old-1")
    assert r.code == 1 and "before the approval policy moved into the store" in r.err, r.err
    assert snapshot(state_dir) == before
    _as(monkeypatch, team["carol"])
    r = cli("resume", "--task", "old-2", "--decision", "reject", "--reason", "start it again", "--json")
    assert r.code == 0 and r.json()["status"] == "cancelled", r.err


def test_bad_policy_files_are_one_stopped_line_naming_every_error_and_nothing_is_stored(cli, state_dir, team,
                                                                                      monkeypatch, tmp_path):
    """Each bad file is one ``STOPPED:`` line (code ``policy``) and nothing is stored: every error
    of a file is named (here two), a file nested deeper than Python's TOML parser follows is
    refused (it used to be ``unexpected error (RecursionError)``), and so is an empty one (it used
    to be taken as the default policy)."""
    from state import policy as policies
    from state.errors import Refused

    bad = tmp_path / "bad.toml"
    cases = [("[default]\napprovals = 0\nquorum = 2\n", ["2 errors", "default.approvals", "default.quorum"]),
             ('[default]\nroles = ["Bad Role", "ok"]\n[channels."Bad Name"]\napprovals = 11\n',
              ["3 errors", "channels.'Bad Name'.approvals", "role 'Bad Role'", "a channel name is 1-32"]),
             ("x = " + "[" * 5000 + "]" * 5000 + "\n", ["nests tables or arrays too deeply"]),
             ("[default]\napprovals = " + "[" * 900 + "]" * 900 + "\n", ["nests tables or arrays too deeply"]),
             ("", ["is empty"]), ("# only a comment\n\n", ["is empty"]), ("[default\n", ["not valid TOML"])]
    _as(monkeypatch, team["ada"])
    before = snapshot(state_dir)
    for text, words in cases:
        bad.write_text(text, encoding="utf-8")
        r = cli("policy", "set", str(bad))
        r.assert_stopped()
        assert all(w in r.err for w in words), (words, r.err)
        assert snapshot(state_dir) == before
        with pytest.raises(Refused) as refused:
            policies.parse(text)
        assert refused.value.code == "policy"
    bad.write_bytes(b"[default]\napprovals = 1\n" + b"#" * policies.MAX_POLICY_BYTES)
    assert "is over" in cli("policy", "set", str(bad)).err
    assert "does not exist" in cli("policy", "set", str(tmp_path / "missing.toml")).err
    assert snapshot(state_dir) == before
    assert cli("policy", "show", "--json").json()["version"] == 1


def test_only_an_admin_sets_the_policy_and_show_shows_every_version(cli, state_dir, team, monkeypatch, tmp_path):
    """``policy set`` needs an admin's token (none, or an editor's, is refused with nothing
    stored); the same rules again store nothing; a change in a channel's table alone is a new
    version; ``policy show`` shows the latest, ``--version N`` an earlier one."""
    policy = tmp_path / "p.toml"
    policy.write_text(POLICY + "[channels.news]\napprovals = 3\n", encoding="utf-8")
    before = snapshot(state_dir)
    for token, words in ((None, "HITL_REVIEWER_TOKEN"), (team["alice"], "needs an admin")):
        _as(monkeypatch, token)
        r = cli("policy", "set", str(policy))
        r.assert_stopped()
        assert words in r.err, r.err
        assert snapshot(state_dir) == before
    _as(monkeypatch, team["ada"])
    second = cli("policy", "set", str(policy), "--json").json()
    assert (second["version"], second["changed"], second["set_by"]) == (2, True, "ada")
    again = cli("policy", "set", str(policy), "--json").json()
    assert (again["version"], again["changed"]) == (2, False)
    policy.write_text(POLICY + "[channels.news]\napprovals = 2\n", encoding="utf-8")  # only a channel's table
    assert cli("policy", "set", str(policy), "--json").json()["version"] == 3
    _as(monkeypatch, None)
    shown = cli("policy", "show", "--json").json()
    assert shown["version"] == 3 and shown["rules"]["channels"]["news"]["approvals"] == 2
    assert cli("policy", "show", "--version", "2", "--json").json()["rules"]["channels"]["news"]["approvals"] == 3
    text = cli("policy", "show", "--version", "1").out
    assert "policy version 1" in text and "default: 2 approvals by editor, not the requester" in text
    assert cli("policy", "show", "--version", "9").code == 1


def test_hitl_policy_in_the_environment_stops_every_command_saying_where_the_policy_is(cli, state_dir, team,
                                                                                       monkeypatch, tmp_path):
    own = tmp_path / "mine.toml"
    own.write_text("[default]\napprovals = 1\n", encoding="utf-8")
    monkeypatch.setenv("HITL_POLICY", str(own))
    before = snapshot(state_dir)
    for args in (("start", "--key", "t9", "--draft", "A draft."), ("status",), ("policy", "show")):
        r = cli(*args)
        r.assert_stopped()
        assert "HITL_POLICY is set, but it is no longer read" in r.err and "policy set FILE" in r.err, r.err
    assert snapshot(state_dir) == before


def test_every_approval_is_shown_with_who_and_when_after_completion(cli, state_dir, team, monkeypatch):
    """``status --json`` and ``show`` name each reviewer whose approval counted, with when, not
    only the last approver (the decision)."""
    _start(cli, monkeypatch, team["wendy"])
    _approve(cli, monkeypatch, team["alice"])
    assert _approve(cli, monkeypatch, team["bob"]).json()["status"] == "completed"
    _as(monkeypatch, None)
    log = cli("status", "--task", "t1", "--json").json()["approval_log"]
    assert [a["by"] for a in log] == ["alice", "bob"] and all(a["at"] for a in log)
    receipt = cli("show", "--task", "t1", "--json").json()
    assert [(a["by"], a["at"]) for a in receipt["approval"]["approvals"]] == [(a["by"], a["at"]) for a in log]
    for text in (cli("status", "--task", "t1").out, cli("show", "--task", "t1").out):
        assert f"by alice at {log[0]['at']}, bob at {log[1]['at']}" in text, text


def test_the_next_line_says_a_token_is_needed_in_team_mode_only(cli, state_dir, team, monkeypatch, tmp_path):
    _start(cli, monkeypatch, team["wendy"])
    _as(monkeypatch, None)
    line = [x for x in cli("status", "--task", "t1").out.splitlines() if x.startswith("  next:")]
    assert line and "HITL_REVIEWER_TOKEN" in line[0], line
    from tests.conftest import run_in_process

    alone = tmp_path / "alone"
    assert run_in_process(alone, "start", "--key", "s1", "--draft", "A draft.").code == 0
    assert "HITL_REVIEWER_TOKEN" not in run_in_process(alone, "status", "--task", "s1").out


def test_a_policy_that_needs_reviewers_is_refused_once_they_are_all_removed(cli, state_dir, team, monkeypatch):
    for name in team:
        assert cli("reviewers", "remove", name).code == 0
    before = snapshot(state_dir)
    r = cli("start", "--key", "t1", "--draft", "A draft.")
    assert r.code == 1 and "register one first" in r.err
    assert snapshot(state_dir) == before


def test_single_user_mode_stays_without_reviewers(cli, state_dir):
    assert cli("start", "--key", "t1", "--draft", "A draft.").code == 0
    r = cli("resume", "--task", "t1", "--decision", "approve", "--by", "anyone", "--json")
    assert r.code == 0 and r.json()["status"] == "completed"


def test_a_task_started_in_team_mode_stays_one_when_every_reviewer_is_removed(cli, state_dir, team, monkeypatch):
    _start(cli, monkeypatch, team["wendy"])
    for name in team:
        assert cli("reviewers", "remove", name).code == 0
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

    tokens = {name: _add(cli, name, *(["admin"] if name == "ada" else [])) for name in ("ada", "alice", "bob")}
    _set_policy(cli, monkeypatch, tokens["ada"], "[default]\napprovals = 1\n[channels.news]\napprovals = 2\n",
                tmp_path)
    _as(monkeypatch, None)
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


def test_a_change_to_a_channels_table_alone_is_a_new_policy_version(cli, state_dir, team, monkeypatch, tmp_path):
    """The fingerprint of a version is of the whole policy: changing only ``[channels.news]`` (here
    not even a channel of the task) stores a new version, and a task started under the earlier one
    keeps it."""
    assert _set_policy(cli, monkeypatch, team["ada"], POLICY + "[channels.news]\napprovals = 3\n", tmp_path)[
        "version"] == 2
    _start(cli, monkeypatch, team["wendy"])
    changed = _set_policy(cli, monkeypatch, team["ada"], POLICY + "[channels.news]\napprovals = 2\n", tmp_path)
    assert (changed["version"], changed["changed"]) == (3, True)
    view = _approve(cli, monkeypatch, team["alice"]).json()
    assert view["status"] == "waiting_for_approval" and view["approvals"][0]["required"] == 2
    cp = json.loads(checkpoint_file(state_dir, "t1").read_text(encoding="utf-8"))
    assert cp["team"]["policy_version"] == 2


def test_always_cannot_carry_an_approval_past_another_channels_role_rule(cli, state_dir, tmp_path, monkeypatch):
    """The sticky rule decides the tool's calls on every channel: approving the blog call (anyone)
    with always must not approve the news call, which only a reviewer with the role ``legal`` may
    decide, even though both need one approval."""
    from tests.conftest import start_calls

    tokens = {"ada": _add(cli, "ada", "admin"), "alice": _add(cli, "alice"), "lee": _add(cli, "lee", "legal")}
    _set_policy(cli, monkeypatch, tokens["ada"], '[default]\napprovals = 1\n[channels.news]\nroles = ["legal"]\n',
                tmp_path)
    _as(monkeypatch, None)
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
