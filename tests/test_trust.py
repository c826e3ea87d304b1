"""Trust in the state dir and its inputs: who may have written it, how strong the key is, and which
names are safe on every OS.

* A state dir another local user could write (POSIX ``StrictModes``): refused before anything is
  read or written, by every command. Tests run as root in CI: owners are simulated with
  ``os.chown`` to an unused uid (skipped when not root); mode bits are checked, not access.
* ``doctor`` on a read-only state dir: checks everything without locks, says so, repairs nothing.
* Weak signing keys: one rule for ``HITL_SIGNING_KEY`` and ``signing.key``.
* Keys (task IDs, idempotency keys) whose name before the first ``.`` is a Windows device name.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from conftest import checkpoint_file, resign
from state.files.store import file_name


# -- keys that are Windows device names ---------------------------------------------------------

RESERVED = ("con", "CON.txt", "nul", "com1", "lpt9.x", "Aux", "prn.json.bak", "COM0", "lPt1.a:b")
ALLOWED = ("console", "com10", "con-1", "nul_x", "lpt", "a.con", "auxiliary.txt", "com1-x", "con:1")


@pytest.mark.parametrize("key", RESERVED)
def test_windows_device_names_are_not_allowed_keys(key):
    from state.schema import key_problem, valid_key

    assert not valid_key(key)
    assert "reserved device name on Windows" in key_problem(key)


@pytest.mark.parametrize("key", ALLOWED)
def test_names_that_only_resemble_device_names_stay_allowed(key):
    from state.schema import key_problem, valid_key

    assert valid_key(key), key_problem(key)


@pytest.mark.parametrize("argv", [
    ("start", "--key", "con.txt", "--draft", "x"),
    ("resume", "--task", "NUL", "--decision", "approve"),
    ("status", "--task", "com1"),
    ("show", "--task", "lpt9.x"),
])
def test_device_name_key_is_a_usage_error_that_says_why(cli, state_dir, argv):
    r = cli(*argv)
    assert r.code == 2, r
    assert "is a reserved device name on Windows" in r.err
    assert not state_dir.exists()  # usage errors touch nothing


def test_record_naming_a_device_name_key_is_refused(cli, state_dir):
    """Every record validator uses the same rule: a (re-signed) checkpoint whose task is ``con``."""
    assert cli("start", "--key", "k-1", "--draft", "x").code == 0
    path = checkpoint_file(state_dir, "k-1")
    resign(state_dir, path, lambda d: d.update(task_id="con", idempotency_key="con"))
    r = cli("status", "--task", "k-1")
    r.assert_stopped()
    assert "task_id: Value error, not an allowed key ('con' is a reserved device name" in r.err


def test_ledger_and_rejection_records_use_the_same_key_rule():
    from pydantic import ValidationError

    from state.records import RejectionRecord
    from state.records import LedgerEntry

    entry = {"idempotency_key": "aux.md", "task_id": "aux.md", "action": "publish_draft",
             "title": "t", "content_sha256": "0" * 64, "published_at": "2030-01-01T00:00:00Z"}
    with pytest.raises(ValidationError, match="not an allowed key"):
        LedgerEntry.model_validate(entry)
    with pytest.raises(ValidationError, match="not an allowed key"):
        RejectionRecord.model_validate({"task_id": "Com3", "content_sha256": "0" * 64,
                                        "call_id": "c", "by": "b", "at": "2030"})


# -- weak signing keys: one rule for HITL_SIGNING_KEY and signing.key -------------------------

WEAK_ENV = {
    "a space": (" ", "HITL_SIGNING_KEY is empty or only whitespace"),
    "whitespace": (" \t\n" * 8, "HITL_SIGNING_KEY is empty or only whitespace"),
    "short": ("short", "HITL_SIGNING_KEY is too short"),
    "15 bytes": ("x" * 15, "HITL_SIGNING_KEY is too short"),
    "7 non-ASCII characters, 14 bytes": ("é" * 7, "HITL_SIGNING_KEY is too short"),
    "empty": ("", "HITL_SIGNING_KEY is set but empty"),
}


@pytest.mark.parametrize("value, message", WEAK_ENV.values(), ids=list(WEAK_ENV))
@pytest.mark.parametrize("command", [("list",), ("status", "--task", "k-1"),
                                     ("start", "--key", "k-2", "--draft", "x"),
                                     ("resume", "--task", "k-1", "--decision", "approve"),
                                     ("doctor",)])
def test_weak_signing_key_in_env_is_refused_up_front(cli, state_dir, monkeypatch, value, message,
                                                      command):
    from conftest import snapshot

    assert cli("start", "--key", "k-1", "--draft", "x").code == 0
    before = snapshot(state_dir)
    monkeypatch.setenv("HITL_SIGNING_KEY", value)
    r = cli(*command)
    r.assert_stopped()
    assert message in r.err
    if value.strip():
        assert value not in r.err.replace("too short", "")  # the value is never echoed
    assert snapshot(state_dir) == before


@pytest.mark.parametrize("value", ["x" * 16, "é" * 8, "k" * 15 + "é", " padded key 16b "])
def test_signing_key_of_16_bytes_is_accepted(monkeypatch, tmp_path, value):
    """16 UTF-8 bytes pass; non-ASCII characters count by their bytes; nothing is stripped."""
    from state.settings import check_environment
    from state.integrity import load_key

    monkeypatch.setenv("HITL_SIGNING_KEY", value)
    check_environment()
    assert load_key(tmp_path, create=False) == value.encode("utf-8")


def test_load_key_applies_the_rule_to_the_env_var_too(monkeypatch, tmp_path):
    """Not only the up-front check: a library caller of load_key gets the same refusal."""
    from state.errors import Refused
    from state.integrity import load_key

    monkeypatch.setenv("HITL_SIGNING_KEY", " ")
    with pytest.raises(Refused, match="HITL_SIGNING_KEY is empty or only whitespace"):
        load_key(tmp_path, create=True)
    assert list(tmp_path.iterdir()) == []  # no key file was created instead


@pytest.mark.parametrize("contents, message", [
    (b"00" * 15 + b"\n", "signing key signing.key is too short"),
    (b"20" * 32 + b"\n", "signing key signing.key is empty or only whitespace"),
])
def test_weak_key_file_is_refused_by_the_same_rule(cli, state_dir, contents, message):
    assert cli("start", "--key", "k-1", "--draft", "x").code == 0
    (state_dir / "signing.key").write_bytes(contents)
    r = cli("status", "--task", "k-1")
    r.assert_stopped()
    assert message in r.err


def test_a_short_key_file_in_a_fresh_state_dir_signs_nothing(cli, state_dir):
    """The rule holds where the key is used to sign, not only where it is read back: a key file
    of 15 bytes put in a state dir with no checkpoint yet (nothing signed with it, so no MAC can
    fail) is refused before the first checkpoint is written, with nothing written."""
    import secrets

    from conftest import snapshot

    state_dir.mkdir(mode=0o700)
    key = state_dir / "signing.key"
    key.write_bytes(secrets.token_hex(15).encode("ascii") + b"\n")
    key.chmod(0o600)
    before = snapshot(state_dir)
    r = cli("start", "--key", "k-1", "--draft", "x")
    r.assert_stopped()
    assert "signing key signing.key is too short" in r.err
    assert snapshot(state_dir) == before


# -- a state dir another user could write (POSIX StrictModes) ----------------------------------

POSIX_UIDS = pytest.mark.skipif(not hasattr(os, "geteuid"), reason="no uids or mode bits on this OS")
AS_ROOT = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                             reason="simulating another owner needs os.chown, i.e. root")
OTHER_UID = 12345
COMMANDS = {
    "status": ("status", "--task", "k-1"),
    "list": ("list",),
    "resume": ("resume", "--task", "k-1", "--decision", "approve"),
    "start": ("start", "--key", "k-3", "--draft", "x"),
    "doctor": ("doctor",),
}


def tree(folder: Path) -> dict[str, object]:
    """Every entry below ``folder`` (folders too, so an empty folder or lock file counts) → its
    bytes (files) or None (anything else), plus each entry's mode bits."""
    if not folder.exists():
        return {}
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() and not p.is_symlink()
                                         else None, stat.S_IMODE(p.lstat().st_mode))
            for p in sorted(folder.rglob("*"))}


@pytest.fixture
def used(cli, state_dir):
    """A state dir with every folder: k-1 waiting, k-2 approved (ledger), k-4 rejected."""
    for key in ("k-1", "k-2", "k-4"):
        assert cli("start", "--key", key, "--draft", f"draft {key}").code == 0
    assert cli("resume", "--task", "k-2", "--decision", "approve").code == 0
    assert cli("resume", "--task", "k-4", "--decision", "reject").code == 0
    for name in ("checkpoints", "ledger", "locks", "traces", "rejections"):
        assert (state_dir / name).is_dir(), name
    return state_dir


@POSIX_UIDS
@pytest.mark.parametrize("command", COMMANDS.values(), ids=list(COMMANDS))
@pytest.mark.parametrize("folder, mode", [("", 0o777), ("checkpoints", 0o777), ("ledger", 0o777),
                                          ("checkpoints", 0o770), ("", 0o775)])
def test_group_or_world_writable_state_dir_or_folder_stops_every_command(cli, used, folder, mode,
                                                                          command):
    target = used / folder if folder else used
    target.chmod(mode)
    before = tree(used)
    r = cli(*command)
    r.assert_stopped()
    name = f": {folder}" if folder else ""
    assert f"state dir {used}{name} is writable by group or others (mode {mode:04o})" in r.err
    assert tree(used) == before  # not even a lock file or a trace line


@POSIX_UIDS
@pytest.mark.parametrize("folder", ["locks", "traces", "rejections"])
def test_every_writable_sub_folder_is_refused(cli, used, folder):
    (used / folder).chmod(0o777)
    r = cli("status", "--task", "k-1")
    r.assert_stopped()
    assert f": {folder} is writable by group or others (mode 0777)" in r.err


@POSIX_UIDS
@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o620])
def test_signing_key_readable_by_group_or_others_stops(cli, used, mode):
    (used / "signing.key").chmod(mode)
    before = tree(used)
    for command in COMMANDS.values():
        r = cli(*command)
        r.assert_stopped()
        assert f"signing.key is readable or writable by group or others (mode {mode:04o}); " \
               "a signing key must be 0600" in r.err
    assert tree(used) == before


@POSIX_UIDS
def test_load_key_itself_refuses_a_readable_key_file(used):
    """Library callers that skip check_state_dir get the key-file part of the rule too."""
    from state.errors import Refused
    from state.integrity import load_key

    (used / "signing.key").chmod(0o644)
    with pytest.raises(Refused, match="signing key signing.key is readable or writable by group"):
        load_key(used, create=False)


@POSIX_UIDS
def test_writable_state_id_stops_but_a_readable_one_is_fine(cli, used):
    (used / "state.id").chmod(0o644)  # not a secret: readable is fine
    (used / "signing.key").chmod(0o400)  # stricter than 0600 is fine
    assert cli("status", "--task", "k-1").code == 0
    (used / "state.id").chmod(0o666)
    r = cli("status", "--task", "k-1")
    r.assert_stopped()
    assert "state.id is writable by group or others (mode 0666)" in r.err


@AS_ROOT
@pytest.mark.parametrize("name", ["", "checkpoints", "ledger", "locks", "signing.key", "state.id"])
def test_entry_owned_by_another_user_stops(cli, used, name):
    target = used / name if name else used
    os.chown(target, OTHER_UID, -1)
    before = tree(used)
    for command in COMMANDS.values():
        r = cli(*command)
        r.assert_stopped()
        assert f"is owned by uid {OTHER_UID}, not by this user (uid 0)" in r.err
    assert tree(used) == before


def _plant(victim: Path, attacker: Path, tmp_path: Path, *, chown: bool) -> None:
    """Another user, who cannot read the victim's signing.key, replaces it with their own and
    plants a state.id and a checkpoint for the same key with their content (the victim's dir and
    its task folders are 0777)."""
    from conftest import run_in_process

    assert run_in_process(attacker, "start", "--key", "k-1", "--title", "T",
                          "--draft", "ATTACKER CONTENT").code == 0
    victim.chmod(0o777)
    (victim / "checkpoints").chmod(0o777)
    checkpoint_file(victim, "k-1").parent.chmod(0o777)
    for rel in ("signing.key", "state.id", str(checkpoint_file(attacker, "k-1").relative_to(attacker))):
        (victim / rel).unlink()  # allowed: the folder is world-writable, no sticky bit
        shutil.copy2(attacker / rel, victim / rel)
        if chown:
            os.chown(victim / rel, OTHER_UID, -1)


@AS_ROOT
def test_planted_key_state_id_and_checkpoint_are_refused_end_to_end(cli, used, tmp_path):
    _plant(used, tmp_path / "attacker", tmp_path, chown=True)
    before = tree(used)
    r = cli("resume", "--task", "k-1", "--decision", "approve")
    r.assert_stopped()
    assert "writable by group or others" in r.err
    assert tree(used) == before
    assert not (used / "ledger" / (file_name("k-1") + ".json")).exists()
    # the owner tightens the modes but the planted files stay: still refused, by owner
    used.chmod(0o700)
    (used / "checkpoints").chmod(0o700)
    (used / "checkpoints" / file_name("k-1")).chmod(0o700)
    r = cli("resume", "--task", "k-1", "--decision", "approve")
    r.assert_stopped()
    assert f"signing.key is owned by uid {OTHER_UID}" in r.err
    assert not (used / "ledger" / (file_name("k-1") + ".json")).exists()


@AS_ROOT
def test_planted_key_would_publish_without_the_check(cli, used, tmp_path, monkeypatch):
    """The scenario above is real: with the check switched off (as on an OS without uids), the
    planted content is published. (The MAC cannot help: the key was planted too.)"""
    import state.paths

    _plant(used, tmp_path / "attacker", tmp_path, chown=True)
    monkeypatch.setattr(state.paths, "_owner_uid", lambda: None)
    r = cli("resume", "--task", "k-1", "--decision", "approve")
    assert r.code == 0, r.err
    from conftest import ledger_entries

    assert any(e["task_id"] == "k-1" for e in ledger_entries(used))


@POSIX_UIDS
def test_world_writable_parent_without_sticky_bit_stops(tmp_path):
    parent = tmp_path / "shared"
    parent.mkdir()
    state = parent / "state"
    from conftest import run_in_process

    assert run_in_process(state, "start", "--key", "k-1", "--draft", "x").code == 0
    parent.chmod(0o777)
    r = run_in_process(state, "list")
    r.assert_stopped()
    assert f"its parent {parent} is writable by every user without the sticky bit (mode 0777)" in r.err
    new = parent / "new" / "state"
    r = run_in_process(new, "start", "--key", "k-1", "--draft", "x")
    r.assert_stopped()
    assert not (parent / "new").exists()  # nothing created
    parent.chmod(0o1777)  # like /tmp: others cannot rename our state dir away
    assert run_in_process(state, "list").code == 0


@POSIX_UIDS
def test_folders_are_created_owner_only_whatever_the_umask(tmp_path):
    from conftest import run_in_process

    state = tmp_path / "a" / "b" / "state"  # missing parents are created too
    old = os.umask(0)
    try:
        assert run_in_process(state, "start", "--key", "k-1", "--draft", "x").code == 0
        assert run_in_process(state, "resume", "--task", "k-1", "--decision", "approve").code == 0
        assert run_in_process(state, "start", "--key", "k-2", "--draft", "y").code == 0
        assert run_in_process(state, "resume", "--task", "k-2", "--decision", "reject").code == 0
        assert run_in_process(state, "status", "--task", "k-1").code == 0  # it still passes its own check
    finally:
        os.umask(old)
    entries = [tmp_path / "a", tmp_path / "a" / "b", state, *state.rglob("*")]
    assert {p.name for p in state.iterdir()} >= {"checkpoints", "ledger", "locks", "traces", "rejections"}
    for p in entries:
        mode = stat.S_IMODE(p.stat().st_mode)
        assert mode & 0o077 == 0, (str(p), oct(mode))
        assert mode == (0o700 if p.is_dir() else 0o600), (str(p), oct(mode))


@POSIX_UIDS
def test_without_uids_the_check_is_skipped(cli, used, monkeypatch):
    """Where the OS has no ``os.geteuid`` (Windows), the folder's ACL decides: no refusal."""
    used.chmod(0o777)
    (used / "signing.key").chmod(0o644)
    monkeypatch.delattr(os, "geteuid")
    assert cli("status", "--task", "k-1").code == 0


# -- doctor on a read-only state dir -----------------------------------------------------------

NOBODY = 65534


def _read_only_tree(base: Path, uid: int) -> None:
    """Give everything below ``base`` (and ``base``) to ``uid``, folders 0500, files 0400."""
    for p in [base, *base.rglob("*")]:
        os.chown(p, uid, uid)
        if p != base:
            p.chmod(0o500 if p.is_dir() else 0o400)


def _doctor_as(uid: int, state: Path, tmp_path: Path, *args: str):
    """``run.py doctor`` in a forked child that drops to ``uid`` first (so the kernel, not a
    mock, refuses every write); returns a ``CliResult``."""
    from conftest import CliResult

    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 70
        try:
            import run

            for fd, path in ((1, out), (2, err)):
                f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
                os.dup2(f, fd)
                os.close(f)
            os.setgid(uid)
            os.setuid(uid)
            import sys
            sys.stdout = open(1, "w", closefd=False)
            sys.stderr = open(2, "w", closefd=False)
            code = run.main(["--state-dir", str(state), "doctor", *args])
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return CliResult(os.waitstatus_to_exitcode(status), out.read_text(), err.read_text())


@pytest.fixture
def read_only_state(tmp_path):
    """A used state dir (k-1 waiting, k-2 completed with its ledger entry) below a folder of its
    own in /tmp that ``nobody`` can reach; returns ``(state dir, make it read-only for nobody)``."""
    import tempfile

    from conftest import run_in_process

    base = Path(tempfile.mkdtemp())
    state = base / "state"
    assert run_in_process(state, "start", "--key", "k-1", "--draft", "x").code == 0
    assert run_in_process(state, "start", "--key", "k-2", "--draft", "y").code == 0
    assert run_in_process(state, "resume", "--task", "k-2", "--decision", "approve").code == 0
    yield state, lambda: _read_only_tree(base, NOBODY)
    shutil.rmtree(base)


@AS_ROOT
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_doctor_checks_a_read_only_state_dir_without_locks(read_only_state, tmp_path):
    """As a user who owns the state dir but cannot write it (0500/0400), doctor checks every task
    (the kernel refuses the lock files) and says once that it could not lock."""
    state, make_read_only = read_only_state
    make_read_only()
    r = _doctor_as(NOBODY, state, tmp_path, "--json")
    assert r.code == 0, (r.out, r.err)
    report = json.loads(r.out)
    assert report["checked"] == {"tasks": 2, "ledger_entries": 1, "lock_files": 4}
    assert [f["kind"] for f in report["findings"]] == ["not_locked"]
    assert "cannot be written (Permission denied)" in report["findings"][0]["detail"]
    assert report["consistent"] and report["repairs"] == []


@AS_ROOT
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_doctor_on_a_read_only_state_dir_still_reports_damage(read_only_state, tmp_path):
    state, make_read_only = read_only_state
    path = checkpoint_file(state, "k-1")
    raw = path.read_bytes()
    path.write_bytes(raw.replace(b'"revision": 1', b'"revision": 7'))  # tampered, not re-signed
    # a leftover temp: --repair must say it did not delete it
    (path.parent / f".tmp-{file_name('k-1')}.abcdefgh.part").write_bytes(b"half")
    make_read_only()
    r = _doctor_as(NOBODY, state, tmp_path, "--json", "--repair")
    assert r.code == 1
    kinds = {f["kind"]: f for f in json.loads(r.out.splitlines()[0])["findings"]}
    assert set(kinds) == {"unreadable_checkpoint", "leftover_temp", "not_locked"}
    assert "integrity check failed" in kinds["unreadable_checkpoint"]["detail"]
    assert "not repaired: its lock could not be taken (Permission denied)" in kinds["leftover_temp"]["detail"]
    assert "STOPPED: doctor found 2 inconsistencies" in r.err


@pytest.mark.parametrize("err", [errno.EACCES, errno.EPERM, errno.EROFS])
def test_doctor_checks_unlocked_when_the_lock_cannot_be_opened_for_writing(cli, used, monkeypatch,
                                                                             err):
    """The same without root: the OS's answer to opening a lock file in a read-only state dir
    (a permission error, or EROFS on a read-only mount) is simulated at the lock."""
    import state.files.inspect as inspect  # the file store's part of doctor: it takes the locks

    class ReadOnlyLock(inspect.FileLock):
        def acquire(self, *a, **k):
            raise OSError(err, os.strerror(err), self.lock_file)

    monkeypatch.setattr(inspect, "FileLock", ReadOnlyLock)
    r = cli("doctor", "--json")
    assert r.code == 0, r.err
    report = r.json()
    assert report["checked"]["tasks"] == 3
    assert [f["kind"] for f in report["findings"]] == ["not_locked"]
    assert os.strerror(err) in report["findings"][0]["detail"]
    resign(used, checkpoint_file(used, "k-2"), lambda d: d.update(status="cancelled"))
    r = cli("doctor", "--json")
    assert r.code == 1
    assert {f["kind"] for f in r.json()["findings"]} == {"cancelled_with_entry", "not_locked"}


@POSIX_UIDS
def test_owner_read_only_state_dir_passes_the_owner_check(cli, used):
    """0500 is not writable by group or others: read-only commands and doctor work on it."""
    for p in [used, *used.rglob("*")]:
        if p.is_dir():
            p.chmod(0o500)
    try:
        assert cli("status", "--task", "k-1").code == 0
        assert cli("list").code == 0
        r = cli("doctor")
        assert r.code == 0, r.err
    finally:
        for p in [used, *used.rglob("*")]:
            if p.is_dir():
                p.chmod(0o700)


@pytest.mark.parametrize("key", ["\u00a0" * 8, "\u3000" * 6, " \u2003" * 6])
def test_a_key_of_unicode_whitespace_is_refused(cli, monkeypatch, key):
    """16+ bytes, yet nothing but (Unicode) whitespace: refused like an all-space ASCII key."""
    monkeypatch.setenv("HITL_SIGNING_KEY", key)
    r = cli("list")
    r.assert_stopped()
    assert "HITL_SIGNING_KEY is empty or only whitespace" in r.err
