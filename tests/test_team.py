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

from tests.conftest import ROOT, RUN_PY, TeamAdmin, add_reviewer, checkpoint_file, ledger_entries, snapshot

POLICY = """
[default]
approvals = 2
roles = ["editor"]
requester_may_approve = false
"""


def _set_policy(cli, monkeypatch, admin: str, text: str, tmp_path: Path, name: str = "policy.toml") -> dict:
    """``policy set`` of ``text`` (written to ``name`` in ``tmp_path``) with the admin token ``admin``."""
    policy = tmp_path / name
    policy.write_text(text, encoding="utf-8")
    _as(monkeypatch, admin)
    r = cli("policy", "set", str(policy), "--json")
    assert r.code == 0, r.err
    return r.json()


@pytest.fixture
def team(cli, state_dir, tmp_path, monkeypatch, team_admin: TeamAdmin):
    """An admin (root), three editors and one writer, the policy above set by the admin (version
    1); returns name → token of the editors and the writer (root's: ``team_admin.token``)."""
    tokens = {name: team_admin.add(name, "editor") for name in ("alice", "bob", "carol")}
    tokens["wendy"] = team_admin.add("wendy", "writer")
    assert _set_policy(cli, monkeypatch, team_admin.token, POLICY, tmp_path)["version"] == 1
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


def test_the_token_is_shown_once_and_never_stored(cli, state_dir, team, team_admin):
    everything = b"".join(v for v in snapshot(state_dir).values() if isinstance(v, bytes))
    for token in [*team.values(), team_admin.token]:
        assert token.encode() not in everything
        assert token.split("_", 2)[2].encode() not in everything  # not even the secret part
    listed = cli("reviewers", "list", "--json").json()["reviewers"]
    assert [r["name"] for r in listed] == ["alice", "bob", "carol", "root", "wendy"]
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
    assert r.code == 1 and "belongs to 'bob', but the name given is 'alice'" in r.err, r.err
    assert snapshot(state_dir) == before
    r = _approve(cli, monkeypatch, team["bob"], "t1", "--by", "bob")
    assert r.code == 0, r.err
    assert r.json()["approvals"][0]["approved_by"] == ["bob"]


def test_start_by_is_authenticated_and_recorded_as_the_requester(cli, state_dir, team, monkeypatch):
    _as(monkeypatch, team["wendy"])
    r = cli("start", "--key", "t1", "--draft", "A draft.", "--by", "alice")
    assert r.code == 1 and "belongs to 'wendy', but the name given is 'alice'" in r.err, r.err
    assert not (state_dir / "checkpoints").exists() or not list((state_dir / "checkpoints").rglob("*.json"))
    _as(monkeypatch, None)  # the policy keeps the requester out, so who asks must be known
    r = cli("start", "--key", "t1", "--draft", "A draft.")
    assert r.code == 1 and "HITL_REVIEWER_TOKEN" in r.err
    view = _start(cli, monkeypatch, team["wendy"])
    assert view["requested_by"] == "wendy"


def test_a_team_task_is_never_started_anonymously_even_where_the_requester_may_approve(cli, state_dir, tmp_path,
                                                                                       monkeypatch, team_admin):
    """Under a policy that lets the requester approve, ``start`` with no token used to be accepted
    and recorded no requester: nobody could tell who asked. In team mode every start is
    authenticated, whatever the rule."""
    token = team_admin.add("alice")
    _set_policy(cli, monkeypatch, team_admin.token, "[default]\napprovals = 1\n", tmp_path)
    _as(monkeypatch, None)
    before = snapshot(state_dir)
    r = cli("start", "--key", "t1", "--draft", "A draft.")
    assert r.code == 1 and "HITL_REVIEWER_TOKEN" in r.err and snapshot(state_dir) == before, r.err
    _as(monkeypatch, token)
    assert cli("start", "--key", "t1", "--draft", "A draft.").code == 0
    assert cli("status", "--task", "t1", "--json").json()["requested_by"] == "alice"


def test_two_of_three_each_approval_recorded_and_the_same_reviewer_counts_once(cli, state_dir, team, monkeypatch):
    _start(cli, monkeypatch, team["wendy"])
    first = _approve(cli, monkeypatch, team["alice"])
    assert first.code == 0, first.err
    assert first.json()["status"] == "waiting_for_approval" and ledger_entries(state_dir) == []
    assert first.json()["approvals"][0] | {} == {**first.json()["approvals"][0], "approved_by": ["alice"],
                                                 "required": 2, "missing": 1}
    before = snapshot(state_dir)
    again = _approve(cli, monkeypatch, team["alice"])  # the same reviewer twice counts once, and is told so
    again.assert_stopped()
    assert "'alice' approved call" in again.err and "already (1 of 2)" in again.err, again.err
    assert snapshot(state_dir) == before and ledger_entries(state_dir) == []
    done = _approve(cli, monkeypatch, team["bob"])
    assert done.code == 0, done.err
    assert done.json()["status"] == "completed" and len(ledger_entries(state_dir)) == 1
    cp = json.loads(checkpoint_file(state_dir, "t1").read_text(encoding="utf-8"))
    assert [a["by"] for a in cp["approvals"]] == ["alice", "bob"]
    assert [h["detail"]["by"] for h in cp["history"] if h["event"] == "approval_recorded"] == ["alice", "bob"]
    assert cp["decision"]["by"] == "bob"


def test_a_reviewer_without_the_role_is_refused(cli, state_dir, team, monkeypatch, team_admin):
    _start(cli, monkeypatch, team["alice"])
    team_admin.add("rex", "reader")
    token = json.loads(team_admin.run("reviewers", "rotate", "rex", "--json").out)["token"]
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


def test_a_reviewer_removed_after_signing_in_cannot_decide(cli, state_dir, team, monkeypatch, team_admin):
    """The token is checked first (the CLI, the page); the reviewer is looked up again under the
    task's lock, right before the SDK is told: one removed in between is refused."""
    from state.files.store import Store
    from workflow import team as quorum

    _start(cli, monkeypatch, team["wendy"])
    store = Store(state_dir)
    by = quorum.decider(store, None, team["alice"], store.load("t1"))
    assert team_admin.run("reviewers", "remove", "alice").code == 0
    from state.errors import Refused

    with pytest.raises(Refused) as caught:
        quorum.check_before(store, store.load("t1"), None, "approve", by)
    assert caught.value.code == "unauthenticated"
    assert _approve(cli, monkeypatch, team["alice"]).code == 1


def test_a_policy_set_after_start_does_not_strand_a_waiting_task_it_decides_under_its_version(cli, state_dir, team,
                                                                                               monkeypatch, tmp_path,
                                                                                               team_admin):
    """A task records the policy version it started under and is decided under it: a later
    ``policy set`` (here one approval, by anyone) neither strands it nor lowers its quorum; a task
    started after it is decided under the new version."""
    _start(cli, monkeypatch, team["wendy"])
    assert _set_policy(cli, monkeypatch, team_admin.token, "[default]\napprovals = 1\n", tmp_path,
                       "v2.toml")["version"] == 2
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
                                                                                      monkeypatch, tmp_path,
                                                                                      team_admin):
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
    _as(monkeypatch, team_admin.token)
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


def test_only_an_admin_sets_the_policy_and_show_shows_every_version(cli, state_dir, team, monkeypatch, tmp_path,
                                                                    team_admin):
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
    _as(monkeypatch, team_admin.token)
    second = cli("policy", "set", str(policy), "--json").json()
    assert (second["version"], second["changed"], second["set_by"]) == (2, True, "root")
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


def test_a_policy_that_needs_reviewers_is_refused_once_they_are_all_gone(cli, state_dir, team, monkeypatch):
    """The last admin cannot be removed, so only a reviewer folder deleted by hand leaves the stored
    policy, which needs reviewers, without any: a new task is refused, nothing written."""
    import shutil

    shutil.rmtree(state_dir / "reviewers")
    before = snapshot(state_dir)
    r = cli("start", "--key", "t1", "--draft", "A draft.")
    assert r.code == 1 and "register one first" in r.err
    assert snapshot(state_dir) == before


@pytest.mark.parametrize("evidence", ["a policy", "a task started in team mode"])
def test_a_reviewer_list_deleted_by_hand_cannot_be_registered_anew_without_a_token(cli, state_dir, tmp_path,
                                                                                 monkeypatch, team_admin, evidence):
    """The last admin is never removed, so an empty reviewer list in a store that has a policy, or
    a task started in team mode, was deleted or lost. Registering a first reviewer without a token
    would let whoever deleted it make a quorum of their own: refused, nothing written; a store that
    never had a team still registers its first admin without a token."""
    import shutil

    alice = team_admin.add("alice", "editor")
    _set_policy(cli, monkeypatch, team_admin.token, POLICY, tmp_path)
    if evidence != "a policy":  # the task stays; every policy version is deleted too
        _start(cli, monkeypatch, alice)
        shutil.rmtree(state_dir / "policies")
    _as(monkeypatch, None)
    shutil.rmtree(state_dir / "reviewers")
    before = snapshot(state_dir)
    r = cli("reviewers", "add", "eve", "--role", "admin", "--role", "editor")
    assert r.code == 1 and r.err.startswith("STOPPED: the reviewer list is missing, but this store has "), r.err
    assert "restore the reviewer list from a backup; nothing written" in r.err, r.err
    # nor is the store shown as one in single-user mode: the list and doctor name the lost list
    listed = cli("reviewers", "list")
    assert listed.code == 1 and listed.err.startswith("STOPPED: the reviewer list is missing, but this store "
                                                      "has "), listed.err
    [finding] = [f for f in cli("doctor", "--json").json()["findings"] if f["kind"] == "reviewers_missing"]
    assert finding["detail"] == listed.err.strip().removeprefix("STOPPED: "), finding
    assert "a task started in team mode cannot be decided" in finding["action"], finding
    # an admin's act then names the lost list, not a first admin to register (that add is refused)
    r = cli("policy", "set", str(tmp_path / "policy.toml"))
    assert r.code == 1 and r.err.startswith("STOPPED: setting the policy needs an admin's token, and the reviewer "
                                            "list is missing, but this store has "), r.err
    assert r.err.strip().endswith("; nothing changed") and "reviewers add" not in r.err, r.err
    assert snapshot(state_dir) == before
    fresh = tmp_path / "fresh"
    from tests.conftest import run_in_process

    assert run_in_process(fresh, "reviewers", "list").out.strip() == "no reviewers: single-user mode (any --by decides)"
    assert "reviewers_missing" not in run_in_process(fresh, "doctor", "--json").out
    assert run_in_process(fresh, "reviewers", "add", "eve", "--role", "admin").code == 0


def test_single_user_mode_stays_without_reviewers(cli, state_dir):
    assert cli("start", "--key", "t1", "--draft", "A draft.").code == 0
    r = cli("resume", "--task", "t1", "--decision", "approve", "--by", "anyone", "--json")
    assert r.code == 0 and r.json()["status"] == "completed"


def test_a_task_started_in_team_mode_stays_one_when_every_reviewer_is_removed(cli, state_dir, team, monkeypatch,
                                                                             team_admin):
    """Every reviewer but the last admin is removed (the last admin cannot be), then the whole
    reviewer folder is deleted by hand: team mode is off for new tasks, never for this one."""
    import shutil

    _start(cli, monkeypatch, team["wendy"])
    for name in team:
        assert team_admin.run("reviewers", "remove", name).code == 0
    r = team_admin.run("reviewers", "remove", "root")
    assert r.code == 1 and "last admin" in r.err, r.err
    shutil.rmtree(state_dir / "reviewers")
    r = cli("reviewers", "list", "--json")  # a list deleted, not single-user mode
    assert r.code == 1 and r.err.startswith("STOPPED: the reviewer list is missing, but this store has "), r.err
    before = snapshot(state_dir)
    r = _approve(cli, monkeypatch, None, "t1", "--by", "anyone")
    assert r.code == 1 and "team mode" in r.err
    assert snapshot(state_dir) == before


def test_the_browser_inbox_refuses_one_reviewer_name_in_team_mode(cli, state_dir, team):
    """``serve --reviewer NAME`` would decide as one name for everyone with the URL: in team mode
    it is one STOPPED line before anything listens (each reviewer signs in instead:
    tests/test_web_team.py)."""
    before = snapshot(state_dir)
    r = cli("serve", "--port", "0", "--reviewer", "alice")
    r.assert_stopped()
    assert "a reviewer name given to the inbox would decide as one name for everyone" in r.err, r.err
    assert snapshot(state_dir) == before


def test_reviewers_add_refuses_a_taken_name_and_bad_roles_with_nothing_written(cli, state_dir, team, team_admin):
    before = snapshot(state_dir)
    for args, words in ((("alice",), "registered already"), (("zed", "--role", "Bad Role"), "is not 1-32")):
        r = team_admin.run("reviewers", "add", *args)
        assert r.code == 1 and words in r.err, r.err
        assert snapshot(state_dir) == before
    assert team_admin.run("reviewers", "remove", "nobody").code == 1
    assert team_admin.run("reviewers", "rotate", "nobody").code == 1
    assert snapshot(state_dir) == before


@pytest.mark.parametrize("name, words", [
    ("\u0430lice", "mixes letters of 2 scripts"),  # a Cyrillic a
    ("\uff41lice", "look like others"),  # a full-width a
    ("alice ", "look like others"),
    (" alice", "look like others"),
    ("ALICE", "reads as 'alice'"),
    ("al\u0131ce", "reads as 'alice'"),  # a dotless i
])
def test_reviewers_add_refuses_a_name_that_passes_for_another(cli, state_dir, team, team_admin, name, words):
    """A lookalike of a registered name (another script's letter, a full-width letter, a space,
    another case) was registered and shown as if it were that person: "approved by аlice" reads as
    alice. Refused now, nothing written; a name in one script of any kind is fine."""
    before = snapshot(state_dir)
    r = team_admin.run("reviewers", "add", name, "--role", "editor")
    r.assert_stopped()
    assert words in r.err and snapshot(state_dir) == before, r.err
    assert team_admin.run("reviewers", "add", "\u674e\u96f7", "--role", "editor").code == 0  # Li Lei, in Chinese


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


def test_always_cannot_carry_an_approval_past_another_channels_quorum(cli, state_dir, tmp_path, monkeypatch,
                                                                      team_admin):
    """The sticky rule decides the tool's calls on every channel: approving the blog call (one
    approval needed) with always must not approve the news call (two needed)."""
    from tests.conftest import start_calls

    tokens = {name: team_admin.add(name) for name in ("alice", "bob")}
    _set_policy(cli, monkeypatch, team_admin.token, "[default]\napprovals = 1\n[channels.news]\napprovals = 2\n",
                tmp_path)
    _as(monkeypatch, tokens["alice"])  # in team mode a task names who asked
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
                                                                                             monkeypatch, team_admin):
    """The command line checks the policy before it takes the lock; a caller of the API
    (``workflow.decide``) has only the check under the lock, right before the SDK is told: a
    reviewer whose role the rule does not allow is refused there, with nothing changed."""
    import asyncio

    from agent.application import APP
    from state.errors import Refused
    from state.files.store import Store
    from workflow import Approve, Reject, decide

    _start(cli, monkeypatch, team["wendy"])
    token = team_admin.add("rex", "reader")
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


def test_a_change_to_a_channels_table_alone_is_a_new_policy_version(cli, state_dir, team, monkeypatch, tmp_path,
                                                                    team_admin):
    """The fingerprint of a version is of the whole policy: changing only ``[channels.news]`` (here
    not even a channel of the task) stores a new version, and a task started under the earlier one
    keeps it."""
    assert _set_policy(cli, monkeypatch, team_admin.token, POLICY + "[channels.news]\napprovals = 3\n", tmp_path)[
        "version"] == 2
    _start(cli, monkeypatch, team["wendy"])
    changed = _set_policy(cli, monkeypatch, team_admin.token, POLICY + "[channels.news]\napprovals = 2\n", tmp_path)
    assert (changed["version"], changed["changed"]) == (3, True)
    view = _approve(cli, monkeypatch, team["alice"]).json()
    assert view["status"] == "waiting_for_approval" and view["approvals"][0]["required"] == 2
    cp = json.loads(checkpoint_file(state_dir, "t1").read_text(encoding="utf-8"))
    assert cp["team"]["policy_version"] == 2


def test_always_cannot_carry_an_approval_past_another_channels_role_rule(cli, state_dir, tmp_path, monkeypatch,
                                                                         team_admin):
    """The sticky rule decides the tool's calls on every channel: approving the blog call (anyone)
    with always must not approve the news call, which only a reviewer with the role ``legal`` may
    decide, even though both need one approval."""
    from tests.conftest import start_calls

    tokens = {"alice": team_admin.add("alice"), "lee": team_admin.add("lee", "legal")}
    _set_policy(cli, monkeypatch, team_admin.token, '[default]\napprovals = 1\n[channels.news]\nroles = ["legal"]\n',
                tmp_path)
    _as(monkeypatch, tokens["alice"])  # in team mode a task names who asked
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


# -- who may change the list, a removed reviewer, an old record put back, another deployment's key --
# Each on the file store and on PostgreSQL (a fresh schema of the session's server), through the CLI.
ANOTHER_KEY = "another-deployment-signing-key-0123456789"
_TABLES = ("reviewer_lists", "reviewer_revocations", "reviewers", "policies", "checkpoints", "history", "ledger",
           "key_fingerprint")


class OnStore:
    """The CLI on one store (``kind``: ``file`` or ``postgres``) from the state dir ``state_dir``,
    and what is stored, read without our code."""

    def __init__(self, kind: str, state_dir: Path, url: str | None) -> None:
        self.kind, self.state_dir, self.url = kind, state_dir, url

    def cli(self, *args: str, state_dir: Path | None = None):
        from tests.conftest import run_in_process

        return run_in_process(state_dir or self.state_dir, *(["--store", self.url] if self.url else []), *args)

    def _rows(self, sql: str, args: tuple = ()) -> list[tuple]:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            cur = conn.execute(sql, args)
            return cur.fetchall() if cur.description else []

    def snap(self) -> dict:
        """Every file of the state dir and, on PostgreSQL, every row of the tables that matter."""
        out: dict = {"files": snapshot(self.state_dir)}
        if self.url:
            for table in _TABLES:  # a table not created yet (a fresh schema) holds no row
                there = self._rows("SELECT to_regclass(%s) IS NOT NULL", (table,))[0][0]
                out[table] = sorted(map(repr, self._rows(f"SELECT * FROM {table}"))) if there else []
        return out

    def ledger(self) -> list:
        return ledger_entries(self.state_dir) if not self.url else self._rows("SELECT idempotency_key FROM ledger")

    def lists(self) -> dict[int, bytes]:
        """Every stored version of the reviewer list: version → its file's bytes / its row's envelope."""
        if self.url:
            return {v: e.encode() for v, e in self._rows("SELECT version, envelope FROM reviewer_lists")}
        folder = self.state_dir / "reviewers"
        return {int(p.name[1:-5]): p.read_bytes() for p in folder.glob("r*.json")}

    def put_lists(self, lists: dict[int, bytes]) -> None:
        """Make the stored versions exactly ``lists``, as a restore of the files from a backup (or of
        the rows from a dump) would."""
        if self.url:
            self._rows("DELETE FROM reviewer_lists")
            for v, data in lists.items():
                self._rows("INSERT INTO reviewer_lists (version, envelope) VALUES (%s, %s)", (v, data.decode()))
            return
        folder = self.state_dir / "reviewers"
        for path in folder.glob("r*.json"):
            path.unlink()
        for v, data in lists.items():
            (folder / f"r{v:06d}.json").write_bytes(data)


@pytest.fixture(params=["file", "postgres"])
def on_store(request, state_dir) -> OnStore:
    if request.param == "file":
        return OnStore("file", state_dir, None)
    return OnStore("postgres", state_dir, request.getfixturevalue("pg_url"))


def _as_token(token: str | None):
    """A context: ``HITL_REVIEWER_TOKEN`` set to ``token`` (None: unset) for the block."""
    import contextlib
    import os

    @contextlib.contextmanager
    def held():
        was = os.environ.pop("HITL_REVIEWER_TOKEN", None)
        if token is not None:
            os.environ["HITL_REVIEWER_TOKEN"] = token
        try:
            yield
        finally:
            os.environ.pop("HITL_REVIEWER_TOKEN", None)
            if was is not None:
                os.environ["HITL_REVIEWER_TOKEN"] = was
    return held()


def _team_on(s: OnStore, tmp_path: Path, monkeypatch) -> dict[str, str]:
    """root (admin), alice, bob, carol (editors), wendy (writer) on ``s``, the 2-editor policy set
    by root (``policy set``, version 1); name → token."""
    r = add_reviewer(s.cli, "root", "admin")
    assert r.code == 0, r.err
    tokens = {"root": r.json()["token"]}
    for name, role in (("alice", "editor"), ("bob", "editor"), ("carol", "editor"), ("wendy", "writer")):
        r = add_reviewer(s.cli, name, role, token=tokens["root"])
        assert r.code == 0, r.err
        tokens[name] = r.json()["token"]
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY, encoding="utf-8")
    with _as_token(tokens["root"]):
        r = s.cli("policy", "set", str(policy), "--json")
    assert r.code == 0 and r.json()["version"] == 1, r.err
    return tokens


def test_the_first_reviewer_must_be_an_admin_and_every_change_then_needs_an_admins_token(on_store):
    """Team mode begins with an admin: a first ``reviewers add`` without ``--role admin`` is
    refused (nothing written: not even the state dir). From then on every add, remove and rotate
    needs ``HITL_REVIEWER_TOKEN`` of a reviewer with the role admin: none, a forged one and an
    editor's are each one STOPPED line, nothing written."""
    s = on_store
    empty = s.snap()
    r = s.cli("reviewers", "add", "alice", "--role", "editor")
    r.assert_stopped()
    assert "first reviewer registered must have the role admin" in r.err and s.snap() == empty
    root = add_reviewer(s.cli, "root", "admin").json()["token"]
    alice = add_reviewer(s.cli, "alice", "editor", token=root).json()["token"]
    before = s.snap()
    forged = "hitl_" + root.split("_")[1] + "_" + "A" * 43  # root's token ID, another secret
    for token, says in ((None, "HITL_REVIEWER_TOKEN"), (forged, "not valid"), (alice, "role admin")):
        for args in (("add", "dave", "--role", "admin"), ("remove", "root"), ("rotate", "alice"),
                     ("rotate", "root")):
            with _as_token(token):
                r = s.cli("reviewers", *args)
            r.assert_stopped()
            assert says in r.err, (args, r.err)
            assert s.snap() == before, args
    with _as_token(root):
        assert s.cli("reviewers", "add", "dave", "--role", "editor").code == 0
    assert [x["name"] for x in s.cli("reviewers", "list", "--json").json()["reviewers"]] == ["alice", "dave", "root"]


def test_a_requester_cannot_register_editors_to_approve_her_own_task(on_store, tmp_path, monkeypatch):
    """The attack: a writer whose policy wants two editors, and keeps her out, registers two editors
    of her own and approves with both. Without an admin's token she cannot register anyone: each
    try is refused, nothing written, and her task goes on waiting for the real editors."""
    s = on_store
    tokens = _team_on(s, tmp_path, monkeypatch)
    with _as_token(tokens["wendy"]):
        assert s.cli("start", "--key", "t1", "--draft", "A draft.").code == 0
    before = s.snap()
    for token in (tokens["wendy"], None):
        for name in ("dave", "erin"):
            r = add_reviewer(s.cli, name, "editor", token=token)
            r.assert_stopped()
            assert s.snap() == before
    with _as_token(tokens["wendy"]):
        r = s.cli("resume", "--task", "t1", "--decision", "approve")
    r.assert_stopped()
    assert s.snap() == before and s.ledger() == []


def test_the_last_admin_cannot_be_removed(on_store, tmp_path, monkeypatch):
    """Another admin may be removed, the last one never: the list, once begun, always has someone
    who can change it, and never becomes empty (which would turn team mode off)."""
    s = on_store
    tokens = _team_on(s, tmp_path, monkeypatch)
    with _as_token(tokens["root"]):
        ada = s.cli("reviewers", "add", "ada", "--role", "admin", "--role", "editor", "--json").json()["token"]
    with _as_token(ada):
        assert s.cli("reviewers", "remove", "root").code == 0
        before = s.snap()
        r = s.cli("reviewers", "remove", "ada")
    r.assert_stopped()
    assert "last admin" in r.err and s.snap() == before
    assert "ada" in [x["name"] for x in s.cli("reviewers", "list", "--json").json()["reviewers"]]


def test_a_reviewer_removed_after_approving_is_not_counted(on_store, tmp_path, monkeypatch):
    """bob approves, bob is removed, carol approves: two of two are needed and only carol is still
    registered, so nothing is published and the task waits; status shows bob as not counted.
    alice's approval then reaches the quorum; the approval log still lists bob's approval, marked
    as not counted, in ``status`` and ``show``."""
    s = on_store
    tokens = _team_on(s, tmp_path, monkeypatch)
    with _as_token(tokens["wendy"]):
        assert s.cli("start", "--key", "t1", "--draft", "A draft.").code == 0
    with _as_token(tokens["bob"]):
        assert s.cli("resume", "--task", "t1", "--decision", "approve").code == 0
    with _as_token(tokens["root"]):
        assert s.cli("reviewers", "remove", "bob").code == 0
    with _as_token(tokens["carol"]):
        r = s.cli("resume", "--task", "t1", "--decision", "approve", "--json")
    assert r.code == 0, r.err
    assert r.json()["status"] == "waiting_for_approval" and s.ledger() == []
    shown = s.cli("status", "--task", "t1", "--json").json()["approvals"][0]
    assert shown["approved_by"] == ["carol"] and shown["not_counted"] == ["bob"] and shown["missing"] == 1
    with _as_token(tokens["alice"]):
        r = s.cli("resume", "--task", "t1", "--decision", "approve", "--json")
    assert r.code == 0 and r.json()["status"] == "completed", r.err
    assert len(s.ledger()) == 1
    log = s.cli("status", "--task", "t1", "--json").json()["approval_log"]
    assert [(a["by"], a["counted"]) for a in log] == [("bob", False), ("carol", True), ("alice", True)]
    assert s.cli("show", "--task", "t1", "--json").json()["approval"]["approvals"] == log
    line = f"by bob at {log[0]['at']} (not counted), carol at {log[1]['at']}, alice at {log[2]['at']}"
    for args in (("status", "--task", "t1"), ("show", "--task", "t1")):
        assert line in s.cli(*args).out, args


@pytest.mark.parametrize("action", ["remove", "rotate"])
def test_an_old_reviewer_record_put_back_does_not_revive_its_token(on_store, tmp_path, monkeypatch, action):
    """bob's token is revoked (bob removed, or his token rotated). Putting an old record of the list
    back, as a restore from a backup (files) or a dump (rows) would, never makes bob's old token
    valid again: the old version restored as it was (every newer one gone), or its record under the
    newest version's name, is refused by every command that reads the list, with nothing written."""
    s = on_store
    tokens = _team_on(s, tmp_path, monkeypatch)
    with _as_token(tokens["wendy"]):
        assert s.cli("start", "--key", "t1", "--draft", "A draft.").code == 0
    old = s.lists()
    with _as_token(tokens["root"]):
        assert s.cli("reviewers", action, "bob").code == 0
    new = s.lists()
    newest = max(new)
    for case, lists in (("restored", old), ("renamed", {**new, newest: old[max(old)]})):
        s.put_lists(lists)
        before = s.snap()
        with _as_token(tokens["bob"]):
            r = s.cli("resume", "--task", "t1", "--decision", "approve")
        r.assert_stopped()
        says = "revoked" if case == "restored" else f"holds version {max(old)}, not the version"
        assert says in r.err, (case, r.err)
        assert s.snap() == before and s.ledger() == []
        for args in (("reviewers", "list"), ("reviewers", "add", "mallory", "--role", "admin")):
            with _as_token(tokens["root"]):
                s.cli(*args).assert_stopped()
        assert s.snap() == before
        s.put_lists(new)
    with _as_token(tokens["bob"]):
        r = s.cli("resume", "--task", "t1", "--decision", "approve")
    r.assert_stopped()
    assert "not valid" in r.err  # the newest list back: bob's old token is simply not valid


def test_another_deployment_cannot_change_the_reviewer_list(on_store, tmp_path, monkeypatch):
    """A machine with another HITL_SIGNING_KEY on the same store (its own state dir for PostgreSQL,
    the same state dir for files) is refused before it writes, by every change of the list (even
    with the admin's token), and by the first list of a store whose checkpoints another key
    signed; each refusal names HITL_SIGNING_KEY. The team goes on as before."""
    s = on_store
    elsewhere = tmp_path / "b" if s.url else s.state_dir
    with _as_token(None):
        assert s.cli("start", "--key", "t0", "--draft", "Before the team.").code == 0
    before = s.snap()
    monkeypatch.setenv("HITL_SIGNING_KEY", ANOTHER_KEY)
    r = s.cli("reviewers", "add", "eve", "--role", "admin", state_dir=elsewhere)
    r.assert_stopped()
    assert "HITL_SIGNING_KEY" in r.err and s.snap() == before
    monkeypatch.delenv("HITL_SIGNING_KEY")
    tokens = _team_on(s, tmp_path, monkeypatch)
    before = s.snap()
    monkeypatch.setenv("HITL_SIGNING_KEY", ANOTHER_KEY)
    for args in (("add", "eve", "--role", "admin"), ("remove", "alice"), ("rotate", "root")):
        for token in (tokens["root"], None):
            with _as_token(token):
                r = s.cli("reviewers", *args, state_dir=elsewhere)
            r.assert_stopped()
            assert "HITL_SIGNING_KEY" in r.err, (args, r.err)
            assert s.snap() == before
    lax = tmp_path / "lax.toml"
    lax.write_text("[default]\napprovals = 1\n", encoding="utf-8")
    with _as_token(tokens["root"]):  # policy set reads the admins from the list, which that key cannot verify
        r = s.cli("policy", "set", str(lax), state_dir=elsewhere)
    r.assert_stopped()
    assert "HITL_SIGNING_KEY" in r.err and s.snap() == before, r.err
    monkeypatch.delenv("HITL_SIGNING_KEY")
    listed = s.cli("reviewers", "list", "--json").json()
    assert [x["name"] for x in listed["reviewers"]] == ["alice", "bob", "carol", "root", "wendy"]


def test_policy_set_and_expire_know_admins_as_the_reviewer_list_does(on_store, tmp_path, monkeypatch):
    """``policy set`` and ``expire`` are an admin's by the check every change of the reviewer list
    makes, on the list as the store verifies it: with no reviewer they are refused, naming how to
    register the first admin; a second admin's token, once rotated, is refused; put back by an
    older list (a restore), it is refused as revoked; each with nothing written. The rotated
    admin's new token sets the policy."""
    s = on_store
    lax = tmp_path / "lax.toml"
    lax.write_text("[default]\napprovals = 1\n", encoding="utf-8")
    empty = s.snap()
    with _as_token(None):
        r = s.cli("policy", "set", str(lax))
    r.assert_stopped()
    assert "no reviewer is registered" in r.err and "reviewers add NAME --role admin" in r.err, r.err
    assert s.snap() == empty
    tokens = _team_on(s, tmp_path, monkeypatch)
    with _as_token(tokens["root"]):
        ada = s.cli("reviewers", "add", "ada", "--role", "admin", "--json").json()["token"]
    old = s.lists()
    with _as_token(tokens["root"]):
        rotated = s.cli("reviewers", "rotate", "ada", "--json").json()["token"]
    new = s.lists()
    for lists, says in ((new, "not valid"), (old, "revoked")):
        s.put_lists(lists)
        before = s.snap()
        for args in (("policy", "set", str(lax)), ("expire",)):
            with _as_token(ada):
                r = s.cli(*args)
            r.assert_stopped()
            assert says in r.err, (args, r.err)
            assert s.snap() == before, args
    s.put_lists(new)
    with _as_token(rotated):
        r = s.cli("policy", "set", str(lax), "--json")
    assert r.code == 0 and (r.json()["version"], r.json()["set_by"]) == (2, "ada"), r.err


def test_a_reviewer_registered_again_without_the_role_is_not_counted(cli, state_dir, team, monkeypatch, team_admin):
    """The quorum counts a reviewer still registered with a role the rule allows: bob approves as an
    editor, is removed and registered again as a writer; his approval no longer counts."""
    _start(cli, monkeypatch, team["wendy"])
    assert _approve(cli, monkeypatch, team["bob"]).code == 0
    assert team_admin.run("reviewers", "remove", "bob").code == 0
    team_admin.add("bob", "writer")
    r = _approve(cli, monkeypatch, team["carol"])
    assert r.code == 0 and r.json()["status"] == "waiting_for_approval", r.err
    shown = r.json()["approvals"][0]
    assert shown["approved_by"] == ["carol"] and shown["not_counted"] == ["bob"] and ledger_entries(state_dir) == []
    assert _approve(cli, monkeypatch, team["alice"]).json()["status"] == "completed"


def test_a_reviewer_removed_and_registered_again_counts_only_the_approvals_given_since(cli, state_dir, team,
                                                                                     monkeypatch, team_admin):
    """A name removed and registered again is another registration: bob approves, is removed and
    registered again with the same role, and his old approval counts no more (carol's alone does
    not meet the 2-of-2 quorum, status shows bob as not counted). His approval under the new
    registration counts; a rotated token keeps the registration (alice's approval still counts)."""
    _start(cli, monkeypatch, team["wendy"])
    assert _approve(cli, monkeypatch, team["bob"]).code == 0
    assert team_admin.run("reviewers", "remove", "bob").code == 0
    bob = team_admin.add("bob", "editor")
    r = _approve(cli, monkeypatch, team["carol"])
    assert r.code == 0 and r.json()["status"] == "waiting_for_approval", r.err
    shown = r.json()["approvals"][0]
    assert shown["approved_by"] == ["carol"] and shown["not_counted"] == ["bob"] and ledger_entries(state_dir) == []
    r = _approve(cli, monkeypatch, bob)
    assert r.code == 0 and r.json()["status"] == "completed", r.err
    assert len(ledger_entries(state_dir)) == 1
    log = r.json()["approval_log"]
    assert [(a["by"], a["counted"]) for a in log] == [("bob", False), ("carol", True), ("bob", True)], log
    _start(cli, monkeypatch, team["wendy"], key="t2")
    assert _approve(cli, monkeypatch, team["alice"], "t2").code == 0
    assert team_admin.run("reviewers", "rotate", "alice").code == 0
    r = _approve(cli, monkeypatch, team["carol"], "t2")
    assert r.code == 0 and r.json()["status"] == "completed", r.err


def test_a_task_whose_approvals_an_earlier_version_recorded_is_read_and_its_approvals_count(cli, state_dir, team,
                                                                                           monkeypatch):
    """A waiting task whose approval was recorded before approvals kept their reviewer's
    registration (no ``reviewer_added_at``, signed as it was): every command reads it, bob's
    approval counts (given after he was added), and carol's completes the quorum."""
    from conftest import checkpoint_file, resign

    _start(cli, monkeypatch, team["wendy"])
    assert _approve(cli, monkeypatch, team["bob"]).code == 0

    def earlier(data: dict) -> None:
        for approval in data["approvals"]:
            del approval["reviewer_added_at"]

    resign(state_dir, checkpoint_file(state_dir, "t1"), earlier)
    _as(monkeypatch, None)
    shown = cli("status", "--task", "t1", "--json")
    assert shown.code == 0, shown.err
    assert shown.json()["approvals"][0]["approved_by"] == ["bob"]
    assert cli("doctor").code == 0
    r = _approve(cli, monkeypatch, team["carol"])
    assert r.code == 0 and r.json()["status"] == "completed", r.err


def test_an_approval_recorded_before_registrations_were_kept_counts_only_if_given_after_the_reviewer_was_added():
    """An approval without ``reviewer_added_at`` (recorded by an earlier version) counts only if
    it was given after the reviewer now listed under its name was added; one with it, only under
    that same registration; none for a reviewer removed or without the rule's role."""
    from state.reviewers import record
    from state.schema import Approval, ApprovalRule
    from workflow.team import counts

    bob = record("bob", ["editor"], "hitl_0123456789abcdef_secret", "0123456789abcdef", "2026-01-02T00:00:00.000000Z")
    rule = ApprovalRule(approvals=2, roles=["editor"])

    def given(at: str, added: str | None = None) -> Approval:
        return Approval(call_id="c1", channel="blog", arguments_sha256="0" * 64, by="bob", at=at, revision=2,
                        reviewer_added_at=added)

    assert counts(given("2026-01-03T00:00:00Z"), bob, rule)
    assert not counts(given("2026-01-01T00:00:00Z"), bob, rule)
    assert counts(given("2026-01-01T00:00:00Z", bob.added_at), bob, rule)
    assert not counts(given("2026-01-03T00:00:00Z", "2026-01-01T00:00:00.000000Z"), bob, rule)
    assert not counts(given("2026-01-03T00:00:00Z", bob.added_at), None, rule)
    assert not counts(given("2026-01-03T00:00:00Z", bob.added_at), bob, ApprovalRule(roles=["legal"]))


def test_a_crash_before_a_revocation_is_written_is_made_good_by_the_next_change(state_dir, team_admin):
    """The file store writes the new list first, then the revocation of each token it revokes. A
    process that dies in between (failpoint ``reviewers:revoke:before``) leaves the old token
    invalid (the newest list does not hold it) and its revocation missing; the next change of the
    list creates it, after which the old list put back is refused again."""
    from tests.conftest import run_subprocess

    bob = team_admin.add("bob", "editor")
    old = {p.name: p.read_bytes() for p in (state_dir / "reviewers").glob("r*.json")}
    env = {"HITL_REVIEWER_TOKEN": team_admin.token, "HITL_FAILPOINT": "reviewers:revoke:before"}
    crashed = run_subprocess(state_dir, "reviewers", "remove", "bob", env=env)
    assert crashed.code == 86, crashed.err
    revoked = state_dir / "reviewers" / "revoked"
    assert not revoked.exists() or list(revoked.glob("*.json")) == []
    token_id = bob.split("_")[1]
    team_admin.add("carol", "editor")  # the next change
    assert (revoked / f"{token_id}.json").exists()
    for path in (state_dir / "reviewers").glob("r*.json"):
        path.unlink()
    for name, data in old.items():
        (state_dir / "reviewers" / name).write_bytes(data)
    r = team_admin.cli("reviewers", "list")
    r.assert_stopped()
    assert "'bob' with a token that was revoked" in r.err


def test_a_reviewer_record_of_an_earlier_version_is_named_and_never_trusted(on_store, tmp_path, monkeypatch):
    """Before the list, each reviewer was a record of its own (``reviewers/<hash>.json``, a row of the
    table ``reviewers``), not bound to the store and with no admin. One found (left from before, or
    put back) stops every command that needs the list, naming it, with nothing written: never
    ignored, never trusted."""
    s = on_store
    tokens = _team_on(s, tmp_path, monkeypatch)
    old = {"record": "reviewer", "name": "mallory", "roles": ["admin"], "token_id": "0" * 16,
           "token_hash": "scrypt$16384$8$1$" + "0" * 32 + "$" + "0" * 64, "added_at": "2030-01-01T00:00:00Z",
           "rotated_at": None, "mac": "0" * 64}
    if s.url:
        s._rows("INSERT INTO reviewers (name, envelope) VALUES (%s, %s::jsonb)", ("mallory", json.dumps(old)))
    else:
        (s.state_dir / "reviewers" / ("ab" * 16 + ".json")).write_text(json.dumps(old), encoding="utf-8")
    before = s.snap()
    for args in (("reviewers", "list"), ("reviewers", "add", "dave", "--role", "editor"),
                 ("start", "--key", "t1", "--draft", "A draft.")):
        with _as_token(tokens["root"]):
            r = s.cli(*args)
        r.assert_stopped()
        assert "earlier version" in r.err, (args, r.err)
        assert s.snap() == before


@pytest.mark.parametrize("failpoint", ["checkpoint:approval:after", "checkpoint:decision:before"])
def test_a_quorum_reached_whose_decision_a_crash_cut_off_is_carried_out_by_an_approvers_approve_again(
        cli, state_dir, team, monkeypatch, failpoint):
    """The approval that reaches the quorum is recorded, then the process dies before the decision
    is: doctor names that state (``quorum_not_carried_out``) and the approve again, and the
    approvers' approve again carries out what the quorum decided (one entry), rather than
    refusing each of them as counted already while nobody else may approve (no way out)."""
    from tests.conftest import run_subprocess

    _start(cli, monkeypatch, team["wendy"])
    assert _approve(cli, monkeypatch, team["alice"]).code == 0
    crashed = run_subprocess(state_dir, "resume", "--task", "t1", "--decision", "approve",
                             env={"HITL_REVIEWER_TOKEN": team["bob"], "HITL_FAILPOINT": failpoint})
    assert crashed.code == 86, crashed.err
    assert ledger_entries(state_dir) == []
    _as(monkeypatch, None)
    r = cli("doctor", "--json")
    assert r.code == 1, r.out
    [finding] = r.json()["findings"]
    assert finding["kind"] == "quorum_not_carried_out", finding
    assert "approved by alice, bob, the 2 approval(s) its rule needs, and no decision recorded" in finding["detail"]
    assert finding["action"] == ("an approver's python run.py resume --task t1 --decision approve (with their "
                                 "reviewer token) carries it out"), finding
    monkeypatch.setenv("HITL_NOW", "2100-01-01T00:00:00Z")  # expired: its approve is refused, doctor names none
    assert cli("doctor", "--json").json()["findings"] == []
    monkeypatch.delenv("HITL_NOW")
    again = _approve(cli, monkeypatch, team["alice"])
    assert again.code == 0, again.err
    assert again.json()["status"] == "completed" and len(ledger_entries(state_dir)) == 1
    assert _approve(cli, monkeypatch, team["bob"]).json()["status"] == "completed"
    assert len(ledger_entries(state_dir)) == 1
    cp = json.loads(checkpoint_file(state_dir, "t1").read_text(encoding="utf-8"))
    assert sorted(a["by"] for a in cp["approvals"]) == ["alice", "bob"]
    assert cli("doctor", "--json").json()["findings"] == []


def test_every_next_line_of_a_task_started_before_team_mode_names_a_reject(cli, state_dir, monkeypatch):
    """Two channels, started in single-user mode; an admin registers and rejects blog. The
    ``resume`` output's own ``next:`` line (not only ``status``'s) names the reject of news, the
    call still waiting (its approve is refused now), and that command, pasted, ends the task."""
    import shlex

    r = cli("start", "--key", "p2", "--draft", "A draft.", "--channel", "blog", "--channel", "news", "--json")
    assert r.code == 0, r.err
    blog = next(p["call_id"] for p in r.json()["pending"] if p["arguments"]["channel"] == "blog")
    admin = TeamAdmin(cli)
    _as(monkeypatch, admin.token)
    out = cli("resume", "--task", "p2", "--call", blog, "--decision", "reject", "--reason", "no").out
    nxt = next(line for line in out.splitlines() if line.startswith("  next: "))
    assert nxt.startswith('  next: python run.py resume --task p2 --decision reject --reason "..." '
                          "(started before team mode"), out  # news alone waits: no --call needed
    done = cli(*shlex.split(nxt.removeprefix("  next: ").split(" (")[0].replace('"..."', "no"))[2:], "--json")
    assert done.code == 0 and done.json()["status"] == "cancelled", done.err


def test_a_task_started_before_team_mode_cannot_be_approved_by_its_requester_once_reviewers_exist(
        cli, state_dir, tmp_path, monkeypatch):
    """A task started in single-user mode names a requester nobody authenticated: once a reviewer is
    registered and a policy keeps requesters from approving, its approval is refused
    (``policy_changed``, nothing changed), whoever signs in; ``status`` names a reject, which still
    ends it."""
    assert cli("start", "--key", "t1", "--draft", "A draft.", "--by", "alice").code == 0
    admin = TeamAdmin(cli)
    tokens = {name: admin.add(name, "editor") for name in ("alice", "bob")}
    _set_policy(cli, monkeypatch, admin.token, POLICY, tmp_path)
    before = snapshot(state_dir)
    for name in ("alice", "bob"):
        r = _approve(cli, monkeypatch, tokens[name])
        r.assert_stopped()
        assert "started before team mode" in r.err, r.err
        assert snapshot(state_dir) == before and ledger_entries(state_dir) == []
    out = cli("status", "--task", "t1").out
    assert ('  next: python run.py resume --task t1 --decision reject --reason "..." (started before team mode, it '
            "cannot be approved now; start it again to have it approved); team mode: run it with your reviewer "
            "token in HITL_REVIEWER_TOKEN") in out, out
    _as(monkeypatch, tokens["bob"])
    r = cli("resume", "--task", "t1", "--decision", "reject", "--reason", "start it again", "--json")
    assert r.code == 0 and r.json()["status"] == "cancelled", r.err
    assert ledger_entries(state_dir) == []
