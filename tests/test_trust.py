"""Trust in the state dir and its inputs: who may have written it, how strong the key is, and which
names are safe on every OS.

* Keys (task IDs, idempotency keys) whose name before the first ``.`` is a Windows device name.
"""

from __future__ import annotations

import pytest

from conftest import checkpoint_file, resign


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

    from state.rejections import RejectionRecord
    from tools.ledger import LedgerEntry

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
    from state.environment import check_environment
    from state.integrity import load_key

    monkeypatch.setenv("HITL_SIGNING_KEY", value)
    check_environment()
    assert load_key(tmp_path, create=False) == value.encode("utf-8")


def test_load_key_applies_the_rule_to_the_env_var_too(monkeypatch, tmp_path):
    """Not only the up-front check: a library caller of load_key gets the same refusal."""
    from state.errors import Stopped
    from state.integrity import load_key

    monkeypatch.setenv("HITL_SIGNING_KEY", " ")
    with pytest.raises(Stopped, match="HITL_SIGNING_KEY is empty or only whitespace"):
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
