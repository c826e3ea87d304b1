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
