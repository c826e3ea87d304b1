"""Repeating a decision, through the real command line: every kind (plain, with edits, sticky,
reject), on one- and several-channel tasks, exits 0 and changes nothing on disk, byte for byte; a
different decision of a decided call is refused with nothing changed; the receipt shows only the
decisions that were made."""

from __future__ import annotations

import pytest

from conftest import ledger_entries, snapshot, start_calls

KEY = "rp-1"
TITLE, BODY = "T", "A draft decided twice."


def _start(cli, *channels: str) -> dict[str, str]:
    return start_calls(cli, KEY, TITLE, BODY, *channels)


#: (channels, the channel whose call is decided (None: no --call), the decision's arguments)
CASES = {
    "one-approve": ((), None, ["--decision", "approve"]),
    "one-reject": ((), None, ["--decision", "reject", "--reason", "no"]),
    "one-sticky": ((), None, ["--decision", "approve", "--always"]),
    "one-edits": ((), None, ["--decision", "approve", "--edit-body", "An edited draft."]),
    "one-edits-named-call": ((), "blog", ["--decision", "approve", "--edit-title", "T2"]),
    "two-approve": (("blog", "news"), "news", ["--decision", "approve"]),
    "two-reject": (("blog", "news"), "news", ["--decision", "reject"]),
    "two-sticky": (("blog", "news"), "news", ["--decision", "approve", "--always"]),
    "two-sticky-reject": (("blog", "news"), "news", ["--decision", "reject", "--always"]),
    "two-edits": (("blog", "news"), "news", ["--decision", "approve", "--edit-body", "An edited draft."]),
    "three-edits": (("blog", "news", "site"), "blog", ["--decision", "approve", "--edit-title", "T2"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_repeated_decision_exits_0_and_changes_nothing(cli, state_dir, case):
    channels, on, decision = CASES[case]
    calls = _start(cli, *channels)
    call = ["--call", calls[on]] if on else []
    first = cli("resume", "--task", KEY, *call, *decision, "--by", "alice")
    assert first.code == 0, first.err
    before = snapshot(state_dir)
    again = cli("resume", "--task", KEY, *call, *decision, "--by", "alice")
    assert again.code == 0, again.err
    assert snapshot(state_dir) == before
    assert again.out.splitlines()[0] == first.out.splitlines()[0]  # "task …: STATUS (revision N)"
    doctor = cli("doctor", "--json")
    assert doctor.code == 0 and doctor.json()["findings"] == []


def test_the_repeat_of_an_approval_with_edits_on_two_channels_is_unchanged_and_the_receipt_true(cli, state_dir):
    """The case first reported: --call news --edit-body twice on a blog+news task. The second exits
    0 with nothing changed; the receipt does not show the blog call, still undecided, as decided."""
    calls = _start(cli, "blog", "news")
    edit = ["--call", calls["news"], "--decision", "approve", "--by", "alice", "--edit-body", "New body"]
    assert cli("resume", "--task", KEY, *edit).code == 0
    before = snapshot(state_dir)
    r = cli("resume", "--task", KEY, *edit)
    assert r.code == 0, r.err
    assert snapshot(state_dir) == before
    receipt = cli("show", "--task", KEY, "--json").json()["approval"]
    assert receipt["call_id"] == calls["blog"] and receipt["decision"] is None
    assert [(d["call_id"], d["by"]) for d in receipt["decisions"]] == [(calls["news"], "alice")]
    text = cli("show", "--task", KEY).out
    assert f"decided: news ({calls['news']}): approved by alice" in text
    assert f"decided: {calls['blog']}: not yet" in text
    assert "\n  decided: approved by alice" not in text
    # the rest of the task goes on as usual
    r = cli("resume", "--task", KEY, "--call", calls["blog"], "--decision", "approve", "--json")
    assert r.code == 0 and r.json()["status"] == "completed"
    assert sorted(e["content_sha256"] != ledger_entries(state_dir)[0]["content_sha256"]
                  for e in ledger_entries(state_dir)) == [False, True]  # blog as given, news edited
    assert cli("doctor", "--json").json()["findings"] == []


@pytest.mark.parametrize("other", [
    ["--decision", "approve"],
    ["--decision", "approve", "--edit-body", "Another body"],
    ["--decision", "reject"],
], ids=["plain", "other-edits", "reject"])
def test_another_decision_of_a_call_answered_with_edits_is_refused(cli, state_dir, other):
    calls = _start(cli, "blog", "news")
    r = cli("resume", "--task", KEY, "--call", calls["news"], "--decision", "approve",
            "--edit-body", "New body")
    assert r.code == 0, r.err
    before = snapshot(state_dir)
    r = cli("resume", "--task", KEY, "--call", calls["news"], *other)
    r.assert_stopped()
    assert "approved with edits" in r.err or "already recorded" in r.err
    assert snapshot(state_dir) == before


def test_a_plain_approval_repeated_with_edits_is_refused(cli, state_dir):
    """An ended task approved as asked: the same approve is a no-op, an approve with edits is not
    the same decision and is refused, with nothing changed."""
    _start(cli)
    assert cli("resume", "--task", KEY, "--decision", "approve").code == 0
    before = snapshot(state_dir)
    r = cli("resume", "--task", KEY, "--decision", "approve", "--edit-title", "T2")
    r.assert_stopped()
    assert "approved as it was asked" in r.err and snapshot(state_dir) == before
