"""Team mode where a store is involved, on both stores (the file store, and PostgreSQL on a fresh
schema of the session's throwaway server): the policy is the store's, never the requester's
environment; ``settle`` and ``fail`` need a reviewer the rule allows (publications counted AT THE
SERVICE, tests/test_external_effects.py's ``Service``); ``expire`` needs an admin. The commands run
in this process (tests/conftest.py ``run_in_process``), ``--store URL`` selecting PostgreSQL."""

from __future__ import annotations

import shutil
import time
from datetime import timedelta
from pathlib import Path

import pytest

from conftest import run_in_process, snapshot
from test_external_effects import TOKEN, Service, free_port

EDITORS = """
[default]
approvals = 2
roles = ["editor"]
requester_may_approve = false
"""


class Team:
    """The command line on one store, as one reviewer or another (``HITL_REVIEWER_TOKEN``)."""

    def __init__(self, state_dir: Path, store: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
        self.state_dir, self.store, self.mp = state_dir, store, monkeypatch
        self.tokens: dict[str, str] = {}

    def run(self, who: str | None, *args: str):
        if who is None:
            self.mp.delenv("HITL_REVIEWER_TOKEN", raising=False)
        else:
            self.mp.setenv("HITL_REVIEWER_TOKEN", self.tokens[who])
        return run_in_process(self.state_dir, *self.store, *args)

    def add(self, name: str, *roles: str) -> None:
        r = self.run(next(iter(self.tokens), None), "reviewers", "add", name,
                     *[x for role in roles for x in ("--role", role)], "--json")
        assert r.code == 0, r.err
        self.tokens[name] = r.json()["token"]

    def task(self, key: str = "t1") -> dict:
        r = self.run(None, "status", "--task", key, "--json")
        assert r.code == 0, r.err
        return r.json()

    def history(self, key: str = "t1") -> list[dict]:
        from state.store import open_store

        url = self.store[1] if self.store else None
        store = open_store(url, str(self.state_dir))
        try:
            return [h.model_dump() for h in store.load(key).history]
        finally:
            getattr(store, "close", lambda: None)()


@pytest.fixture(params=["file", "postgres"])
def team(request, state_dir, tmp_path, monkeypatch) -> Team:
    """ada (admin), alice, bob, carol (editors), ivy (an intern, whose role decides nothing) and
    the policy above, set by ada, on the store of the parameter."""
    store = ["--store", request.getfixturevalue("pg_url")] if request.param == "postgres" else []
    t = Team(state_dir, store, monkeypatch)
    t.add("ada", "admin")
    for name in ("alice", "bob", "carol"):
        t.add(name, "editor")
    t.add("ivy", "intern")
    policy = tmp_path / "editors.toml"
    policy.write_text(EDITORS, encoding="utf-8")
    r = t.run("ada", "policy", "set", str(policy), "--json")
    assert r.code == 0 and r.json()["version"] == 1, r.err
    return t


def _publish_through(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    """Publish through ``url``, a provider without deduplication; one try, given up after 0.2 s."""
    for name, value in {"HITL_PUBLISH_URL": url, "HITL_PUBLISH_TOKEN": TOKEN, "HITL_PUBLISH_IDEMPOTENCY": "none",
                        "HITL_PUBLISH_TIMEOUT": "0.2", "HITL_PUBLISH_ATTEMPTS": "1",
                        "HITL_PUBLISH_SETTLE_AFTER": "0"}.items():
        monkeypatch.setenv(name, value)


def _approved_by_two_editors(team: Team, requester: str = "alice") -> None:
    r = team.run(requester, "start", "--key", "t1", "--draft", "Published once.", "--json")
    assert r.code == 0, r.err
    assert team.run("bob", "resume", "--task", "t1", "--decision", "approve").code == 0


def test_only_a_reviewer_the_rule_allows_settles_and_an_intern_never_causes_a_second_publication(team, tmp_path,
                                                                                                monkeypatch):
    """An intern (a role that may neither approve nor reject) settling a call in doubt as "not
    published", then resuming, used to send it again: two publications at a provider without
    deduplication. Now the intern's settle is refused either way, and so is the requester's where
    the rule keeps the requester out; an editor's is recorded with their name."""
    svc = Service(tmp_path / "svc", dedup=False, lose_answer=1)
    try:
        _publish_through(monkeypatch, svc.url)
        _approved_by_two_editors(team)
        r = team.run("carol", "resume", "--task", "t1", "--decision", "approve")
        assert r.code == 1 and "in doubt" in r.err, r.err
        assert team.task()["status"] == "in_doubt" and len(svc.publications()) == 1
        time.sleep(0.3)  # past the attempt's window: "not published" would be accepted from a reviewer allowed
        before = team.task()
        for who, words in (("ivy", "'ivy' has role intern"), ("alice", "'alice' asked for it")):
            for outcome in ("not-published", "published"):
                files = snapshot(team.state_dir)
                r = team.run(who, "settle", "--task", "t1", "--outcome", outcome, "--by", who)
                r.assert_stopped()
                assert words in r.err, r.err
                assert snapshot(team.state_dir) == files  # nothing written, not even a trace line
            r = team.run(who, "resume", "--task", "t1", "--decision", "approve")
            assert r.code == 1, r.err
        assert team.task() == before
        assert len(svc.publications()) == 1 and svc.posts() == 1
        r = team.run("bob", "settle", "--task", "t1", "--outcome", "published", "--by", "bob", "--json")
        assert r.code == 0 and r.json()["status"] == "completed", r.err
        assert team.task()["effects"][0]["settled_by"] == "bob"
        assert len(svc.publications()) == 1 and svc.posts() == 1
    finally:
        svc.stop()


def test_only_a_reviewer_the_rule_allows_ends_a_task_with_fail(team, monkeypatch):
    """``fail`` ends a task whose effect provably never ran (the service was down): in team mode
    only a reviewer the rule lets approve may end it, and the end records who did it."""
    _publish_through(monkeypatch, f"http://127.0.0.1:{free_port()}")  # nothing listens there
    _approved_by_two_editors(team)
    r = team.run("carol", "resume", "--task", "t1", "--decision", "approve")
    assert r.code == 1 and "nothing reached the service" in r.err, r.err
    before, files = team.task(), snapshot(team.state_dir)
    assert before["status"] == "publishing"
    for who, words in (("ivy", "'ivy' has role intern"), ("alice", "'alice' asked for it"), (None, "token")):
        r = team.run(who, "fail", "--task", "t1", "--reason", "the service is gone")
        r.assert_stopped()
        assert words in r.err, r.err
        assert snapshot(team.state_dir) == files  # nothing written
    assert team.task() == before
    r = team.run("bob", "fail", "--task", "t1", "--reason", "the service is gone", "--json")
    assert r.code == 0 and r.json()["status"] == "failed", r.err
    assert [h["detail"]["by"] for h in team.history() if h["event"] == "failed"] == ["bob"]


def test_expire_needs_an_admins_token_and_records_who_expired(team, monkeypatch):
    """``expire`` with no token expired any overdue task: a veto by someone with no role. Now it
    needs an admin's token (none, or an editor's, is refused with nothing changed), and the
    ``expired`` event names the admin."""
    from state import clock

    r = team.run("ivy", "start", "--key", "t1", "--draft", "A draft.", "--expires-in", "60s", "--json")
    assert r.code == 0, r.err
    monkeypatch.setenv("HITL_NOW", clock.iso(clock.wall() + timedelta(days=1)))
    before = team.task()
    files = snapshot(team.state_dir)
    for who, words in ((None, "HITL_REVIEWER_TOKEN"), ("alice", "needs an admin"), ("ivy", "needs an admin")):
        for args in (("expire",), ("expire", "--task", "t1")):
            r = team.run(who, *args)
            r.assert_stopped()
            assert words in r.err, r.err
    assert team.task() == before and snapshot(team.state_dir) == files
    r = team.run("ada", "expire", "--json")
    assert r.code == 0 and r.json() == {"expired": ["t1"]}, r.err
    assert [h["detail"]["by"] for h in team.history() if h["event"] == "expired"] == ["ada"]


def test_a_requester_who_unsets_hitl_policy_or_names_her_own_file_gains_nothing(team, tmp_path, monkeypatch):
    """``env -u HITL_POLICY … start`` (or a 1-approval file of her own) used to start a task that
    one approval completed. The rules are the store's: her task still needs two editors, and her
    own file stops the command with nothing saved."""
    own = tmp_path / "mine.toml"
    own.write_text("[default]\napprovals = 1\n", encoding="utf-8")
    monkeypatch.setenv("HITL_POLICY", str(own))
    files = snapshot(team.state_dir)
    r = team.run("ivy", "start", "--key", "t1", "--draft", "A draft.")
    r.assert_stopped()
    assert "no longer read" in r.err and snapshot(team.state_dir) == files
    monkeypatch.delenv("HITL_POLICY")
    r = team.run("ivy", "start", "--key", "t1", "--draft", "A draft.", "--json")
    assert r.code == 0, r.err
    first = team.run("alice", "resume", "--task", "t1", "--decision", "approve", "--json")
    assert first.code == 0 and first.json()["status"] == "waiting_for_approval", first.err
    assert first.json()["approvals"][0]["missing"] == 1
    done = team.run("bob", "resume", "--task", "t1", "--decision", "approve", "--json")
    assert done.code == 0 and done.json()["status"] == "completed", done.err
    assert [a["by"] for a in done.json()["approval_log"]] == ["alice", "bob"]


def test_a_policy_set_after_start_leaves_a_waiting_task_under_its_version(team, tmp_path):
    """A task is decided under the version it started under: a ``policy set`` of one approval by
    anyone neither strands it nor lets one approval complete it; ``policy show`` shows the new
    version, ``--version 1`` the task's."""
    assert team.run("ivy", "start", "--key", "t1", "--draft", "A draft.").code == 0
    lax = tmp_path / "lax.toml"
    lax.write_text("[default]\napprovals = 1\n", encoding="utf-8")
    r = team.run("ada", "policy", "set", str(lax), "--json")
    assert r.code == 0 and (r.json()["version"], r.json()["set_by"]) == (2, "ada"), r.err
    assert team.run("ivy", "resume", "--task", "t1", "--decision", "approve").code == 1  # still editors only
    first = team.run("alice", "resume", "--task", "t1", "--decision", "approve", "--json")
    assert first.code == 0 and first.json()["status"] == "waiting_for_approval", first.err
    assert team.run("bob", "resume", "--task", "t1", "--decision", "approve", "--json").json()["status"] == "completed"
    shown = team.run(None, "policy", "show", "--version", "1", "--json").json()
    assert shown["rules"]["default"] == {"approvals": 2, "roles": ["editor"], "requester_may_approve": False}
    assert team.run(None, "policy", "show", "--json").json()["version"] == 2


def _remove_every_policy_version(team: Team, tmp_path: Path) -> None:
    """Delete every stored version of the policy behind the store's back, as someone who can write
    the state dir (or the database) could: the files moved out, or the rows deleted."""
    if team.store:
        import psycopg

        with psycopg.connect(team.store[1], autocommit=True) as conn:
            conn.execute("DELETE FROM policies")
        return
    stash = tmp_path / "stash"
    stash.mkdir()
    for path in (team.state_dir / "policies").glob("v*.json"):
        path.rename(stash / path.name)


def test_with_every_policy_version_removed_a_team_task_does_not_start(team, tmp_path):
    """With every stored policy version deleted by hand, ``start`` used to record version 0, "one
    approval by anyone", and the requester then approved her own task alone. In team mode a
    missing policy fails closed: ``start`` stops with nothing saved, on both stores."""
    r = team.run("alice", "start", "--key", "t0", "--draft", "Before.", "--json")
    assert r.code == 0 and team.task("t0")["policy_version"] == 1, r.err
    shown = team.run(None, "status", "--task", "t0")
    assert "policy: version 1" in shown.out, shown.out
    _remove_every_policy_version(team, tmp_path)
    files = snapshot(team.state_dir)
    r = team.run("alice", "start", "--key", "t1", "--draft", "Nobody else looked.")
    r.assert_stopped()
    assert "team mode needs the approval policy in the store, and none is stored" in r.err, r.err
    assert snapshot(team.state_dir) == files
    assert team.run(None, "status", "--task", "t1").code == 1  # no task t1
    r = team.run("alice", "resume", "--task", "t0", "--decision", "approve")  # the waiting task: its version is gone
    r.assert_stopped()
    assert "policy version 1" in r.err, r.err


def test_a_policies_folder_that_is_a_link_or_holds_a_stray_name_is_refused(team, tmp_path):
    """A ``policies`` folder replaced by a symbolic link to another folder of the state dir (e.g.
    ``locks``) used to read as "no policy set"; a renamed version (``v1.json``) was skipped in
    silence. Both are refused now, nothing started."""
    if team.store:
        pytest.skip("the file store's folders")
    policies = team.state_dir / "policies"
    policies.rename(tmp_path / "policies")
    try:
        policies.symlink_to(team.state_dir / "locks", target_is_directory=True)
    except OSError:
        pytest.skip("this machine makes no symbolic links")
    files = snapshot(team.state_dir)
    r = team.run("alice", "start", "--key", "t1", "--draft", "A draft.")
    r.assert_stopped()
    assert "folder policies is a symbolic link" in r.err and snapshot(team.state_dir) == files, r.err
    policies.unlink()
    (tmp_path / "policies").rename(policies)
    (policies / "v000001.json").rename(policies / "v1.json")
    files = snapshot(team.state_dir)
    r = team.run("alice", "start", "--key", "t1", "--draft", "A draft.")
    r.assert_stopped()
    assert "is not a version of the policy" in r.err and snapshot(team.state_dir) == files, r.err


@pytest.mark.parametrize("text, words", [
    ("[default]\n", "default: an empty table sets nothing"),
    ("[default]\napprovals = 2\n[channels.news]\n", "channels.news: an empty table sets nothing"),
    ("[default]\napprovals = 2\n[channels.preview]\napprovals = 3\n", "channels.preview: the preview channel"),
])
def test_a_policy_that_would_be_shown_and_not_applied_is_refused(team, tmp_path, text, words):
    """A file of ``[default]`` alone was stored as "one approval by anyone"; a ``[channels.preview]``
    rule was stored and shown, and never applied (a preview entry is written at ``start`` with no
    approval). Each is refused with one line, the stored version unchanged."""
    bad = tmp_path / "bad.toml"
    bad.write_text(text, encoding="utf-8")
    files = snapshot(team.state_dir)
    r = team.run("ada", "policy", "set", str(bad))
    r.assert_stopped()
    assert words in r.err, r.err
    assert snapshot(team.state_dir) == files
    assert team.run(None, "policy", "show", "--json").json()["version"] == 1


def test_a_policy_file_saved_with_a_byte_order_mark_is_read(team, tmp_path):
    """Windows Notepad saves UTF-8 with a byte order mark; TOML does not allow one, and the file
    was refused as "Invalid statement (at line 1, column 1)". The mark is skipped."""
    bom = tmp_path / "notepad.toml"
    bom.write_bytes(b"\xef\xbb\xbf" + EDITORS.replace("approvals = 2", "approvals = 3").encode("utf-8"))
    r = team.run("ada", "policy", "set", str(bom), "--json")
    assert r.code == 0 and r.json()["version"] == 2, r.err
    assert team.run(None, "policy", "show", "--json").json()["rules"]["default"]["approvals"] == 3
    utf16 = tmp_path / "powershell.toml"  # Windows PowerShell 5.1: `... > policy.toml` writes UTF-16
    utf16.write_bytes(EDITORS.replace("approvals = 2", "approvals = 4").encode("utf-16"))
    r = team.run("ada", "policy", "set", str(utf16), "--json")
    assert r.code == 0 and r.json()["rules"]["default"]["approvals"] == 4, r.err


def test_an_unsigned_policy_version_is_refused_without_sending_the_reader_to_doctor(team):
    """A policy version without a signature (planted, or a signed one with its ``mac`` cut) was
    refused with "doctor names each unsigned record", and ``doctor`` then said nothing about it.
    No version of this program wrote a policy unsigned: the refusal says it was put there by hand."""
    import json

    if team.store:
        import psycopg

        with psycopg.connect(team.store[1], autocommit=True) as conn:
            conn.execute("UPDATE policies SET envelope = (envelope::jsonb - 'mac')::text")
    else:
        path = team.state_dir / "policies" / "v000001.json"
        data = json.loads(path.read_text(encoding="utf-8"))
        del data["mac"]
        path.write_text(json.dumps(data), encoding="utf-8")
    r = team.run(None, "policy", "show")
    r.assert_stopped()
    assert "is not signed" in r.err and "put there by hand" in r.err and "doctor" not in r.err, r.err


def test_policy_set_warns_of_a_quorum_the_registered_reviewers_cannot_reach(team, tmp_path):
    """``roles = ["nobody"]`` (a role no reviewer has), or more approvals than reviewers with the
    role, was stored in silence: every task on that channel then waited for good. It is still
    stored (reviewers may be registered next), with one warning per such rule."""
    odd = tmp_path / "odd.toml"
    odd.write_text(EDITORS + "[channels.news]\nroles = [\"nobody\"]\n[channels.blog]\napprovals = 4\n",
                   encoding="utf-8")
    r = team.run("ada", "policy", "set", str(odd), "--json")
    assert r.code == 0, r.err
    assert r.json()["warnings"] == [
        "channel blog needs 4 approval(s) by editor, and 3 registered reviewer(s) may give one: its tasks wait until "
        "more are registered",
        "channel news needs 2 approval(s) by nobody, and 0 registered reviewer(s) may give one: its tasks wait until "
        "more are registered"]
    shown = team.run(None, "policy", "show")
    assert shown.code == 0 and "warning: channel news needs 2 approval(s) by nobody" in shown.out, shown.out
    assert team.run(None, "policy", "show", "--version", "1", "--json").json()["warnings"] == []


def _editors(state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, approvals: int,
             *names: str) -> Team:
    """ada (admin) and ``names`` (editors) registered; the policy: ``approvals`` editors' approvals,
    the requester kept out."""
    team = Team(state_dir, [], monkeypatch)
    team.add("ada", "admin")
    for name in names:
        team.add(name, "editor")
    policy = tmp_path / "p.toml"
    policy.write_text(f'[default]\napprovals = {approvals}\nroles = ["editor"]\nrequester_may_approve = false\n',
                      encoding="utf-8")
    assert team.run("ada", "policy", "set", str(policy), "--json").code == 0
    return team


def _bob_approved_then_removed(state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                               failpoint: str) -> Team:
    """One approval by an editor needed, the requester excluded: alice asks, bob's approve dies at
    ``failpoint`` (his decision recorded), then an admin removes bob."""
    from conftest import run_subprocess

    team = _editors(state_dir, tmp_path, monkeypatch, 1, "alice", "bob", "carol")
    assert team.run("alice", "start", "--key", "t1", "--draft", "Mine.", "--json").code == 0
    r = run_subprocess(state_dir, "resume", "--task", "t1", "--decision", "approve",
                       env={"HITL_REVIEWER_TOKEN": team.tokens["bob"], "HITL_FAILPOINT": failpoint})
    assert r.code == 86 and [d["by"] for d in team.task()["decisions"]] == ["bob"], r.err
    assert team.run("ada", "reviewers", "remove", "bob", "--json").code == 0
    return team


def test_an_approval_on_record_of_a_reviewer_removed_since_is_not_carried_out(state_dir, tmp_path, monkeypatch):
    """One approval needed, the requester excluded: bob's approval is recorded, then the command
    dies before the effect; an admin removes bob. The same approval again (by anyone, the requester
    included) is not carried out on bob's word alone: a removed reviewer counts no more. Nothing is
    published, and the task can still be ended with ``fail``."""
    from conftest import ledger_entries

    team = _bob_approved_then_removed(state_dir, tmp_path, monkeypatch, "checkpoint:decision:after")
    out = team.run("carol", "status", "--task", "t1").out
    nxt = next(line for line in out.splitlines() if line.startswith("  next: "))
    assert "bob may approve it no longer" in nxt and "fail --task t1" in nxt and "--decision approve" not in nxt, out
    finding = team.run(None, "doctor", "--json").json()["findings"][0]
    assert "fail --task t1" in finding["action"] and "--decision approve" not in finding["action"], finding
    for who in ("alice", "ada"):
        r = team.run(who, "resume", "--task", "t1", "--decision", "approve")
        assert r.code == 1 and "bob may approve it no longer" in r.err and "fail --task t1" in r.err, r.err
    assert ledger_entries(state_dir) == [] and team.task()["status"] == "waiting_for_approval"
    r = team.run("carol", "fail", "--task", "t1", "--by", "carol", "--reason", "bob left", "--json")
    assert r.code == 0 and r.json()["status"] == "failed", r.err


def test_an_approval_whose_reviewer_left_after_its_effect_began_names_settle_then_fail(state_dir, tmp_path,
                                                                                      monkeypatch):
    """As above, but the command dies after the function began (``ledger:record:before``): ``fail``
    is refused there (the effect may have happened), so the refusal of the approval on record names
    a person's ``settle`` first, then ``fail``. Found done, ``settle`` writes the entry and says so
    (it ran nothing), and the way on it names, ``fail``, ends the task completed, the entry kept;
    found not done, ``fail`` ends it failed. Each command printed, run as printed, is accepted."""
    import shlex

    from conftest import ledger_entries

    team = _bob_approved_then_removed(state_dir, tmp_path, monkeypatch, "ledger:record:before")
    r = team.run("alice", "resume", "--task", "t1", "--decision", "approve")
    assert r.code == 1 and "bob may approve it no longer" in r.err, r.err
    call = team.task()["pending"][0]["call_id"]
    settle = f"python run.py settle --task t1 --call {call} --outcome published|not-published --by NAME"
    end = "python run.py fail --task t1 --by NAME --reason TEXT"
    assert r.err.rstrip().endswith(f"a person checks what it did and settles it ({settle}), then ends the task "
                                   f"({end})"), r.err
    other = tmp_path / "copy"
    shutil.copytree(state_dir, other)

    def pasted(command: str, **values: str) -> list[str]:
        words = shlex.split(command)[2:]
        return [values.get(w, w) for w in words]

    r = team.run("carol", *pasted(settle, **{"published|not-published": "published", "NAME": "carol"}))
    assert r.code == 1 and f"its effect is in the ledger: end the task ({end}), which ends it completed" in r.err
    assert "already done: task t1: recorded publish_draft as done on a person's finding (ledger entry written)" \
        in r.err and "run the same command again" not in r.err, r.err
    r = team.run("carol", *pasted(end, NAME="carol", TEXT="bob left"), "--json")
    assert r.code == 0 and r.json()["status"] == "completed", r.err
    assert [e["settled_by"] for e in ledger_entries(state_dir)] == ["carol"]
    team.state_dir = other
    r = team.run("carol", *pasted(settle, **{"published|not-published": "not-published", "NAME": "carol"}))
    assert r.code == 0, r.err
    r = team.run("carol", *pasted(end, NAME="carol", TEXT="bob left"), "--json")
    assert r.code == 0 and r.json()["status"] == "failed", r.err
    assert ledger_entries(other) == []


def test_an_approval_on_record_that_counts_no_more_is_not_carried_out_by_a_decision_of_another_call(
        state_dir, tmp_path, monkeypatch):
    """Two channels, two editors' approvals needed, the requester kept out: bob and carol approve
    blog, and carol's command dies after her decision is recorded; bob is removed. The run a
    decision of news would resume carries blog's approval out too, so the requester's reject of
    news is refused (``not_allowed``, nothing changed) rather than publishing blog on carol's
    approval alone; an editor's ``fail`` ends the task, nothing published."""
    from conftest import ledger_entries, run_subprocess

    team = _editors(state_dir, tmp_path, monkeypatch, 2, "bob", "carol", "wendy")
    r = team.run("wendy", "start", "--key", "t1", "--draft", "Mine.", "--channel", "blog", "--channel", "news",
                 "--json")
    assert r.code == 0, r.err
    blog, news = (next(p["call_id"] for p in r.json()["pending"] if p["arguments"]["channel"] == c)
                  for c in ("blog", "news"))
    assert team.run("bob", "resume", "--task", "t1", "--call", blog, "--decision", "approve").code == 0
    r = run_subprocess(state_dir, "resume", "--task", "t1", "--call", blog, "--decision", "approve",
                       env={"HITL_REVIEWER_TOKEN": team.tokens["carol"], "HITL_FAILPOINT": "checkpoint:decision:after"})
    assert r.code == 86, r.err
    assert team.run("ada", "reviewers", "remove", "bob", "--json").code == 0
    before = snapshot(state_dir)
    r = team.run("wendy", "resume", "--task", "t1", "--call", news, "--decision", "reject", "--reason", "no news")
    assert r.code == 1 and "bob may approve it no longer" in r.err, r.err
    assert snapshot(state_dir) == before and ledger_entries(state_dir) == []
    r = team.run("carol", "fail", "--task", "t1", "--by", "carol", "--reason", "bob left", "--json")
    assert r.code == 0 and r.json()["status"] == "failed", r.err
    assert ledger_entries(state_dir) == []


def test_a_retry_with_the_revision_seen_by_a_reviewer_whose_approval_counted_gets_the_task(team):
    """alice's approval counts toward the quorum of two; bob's completes it. alice's request,
    retried with the revision she saw (its answer lost), gets the task, completed, never a
    "look again" for what she did; carol, who approved nothing, is still told it changed."""
    import asyncio

    from agent.application import APP
    from state.errors import Refused
    from state.store import open_store
    from workflow import Approve, decide

    assert team.run("ivy", "start", "--key", "t1", "--draft", "Published once.", "--json").code == 0
    store = open_store(team.store[1] if team.store else None, str(team.state_dir))
    try:
        seen = store.load("t1").revision
        mine = asyncio.run(decide(store, APP, "t1", Approve(), token=team.tokens["alice"], expect_revision=seen))
        assert mine.status == "waiting_for_approval"
        done = asyncio.run(decide(store, APP, "t1", Approve(), token=team.tokens["bob"],
                                  expect_revision=mine.revision))
        assert done.status == "completed"
        again = asyncio.run(decide(store, APP, "t1", Approve(), token=team.tokens["alice"], expect_revision=seen))
        assert again.status == "completed" and again.revision == done.revision
        with pytest.raises(Refused) as exc:
            asyncio.run(decide(store, APP, "t1", Approve(), token=team.tokens["carol"], expect_revision=seen))
        assert exc.value.code == "stale_revision"
    finally:
        getattr(store, "close", lambda: None)()
