"""Approve with edits (workflow/edits.py): the reviewer approves a changed draft; the model is told
exactly what to publish; only a call carrying exactly that is approved, through our decision path."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from agents.testing import ModelCall, ModelStep, ScriptedModel, function_call

from conftest import checkpoint_file, ledger_entries, snapshot
from agent.models import offline_responder
from agent.publisher import EDIT_HEADER
from state.schema import content_sha256

TITLE, BODY = "Relase notes", "Version 1.2 fixes the login bug."


def _cp(state_dir: Path) -> dict[str, Any]:
    return json.loads(checkpoint_file(state_dir, "t-1").read_text(encoding="utf-8"))


def _start(cli) -> None:
    r = cli("start", "--key", "t-1", "--title", TITLE, "--draft", BODY)
    assert r.code == 0, r.err


def test_approve_with_edits_publishes_exactly_the_edited_draft(cli, state_dir):
    _start(cli)
    original = _cp(state_dir)["pending"][0]
    r = cli("resume", "--task", "t-1", "--decision", "approve", "--by", "alice",
            "--edit-title", "Release notes", "--json")
    assert r.code == 0, r.err
    task = r.json()
    assert task["status"] == "completed" and "published" in task["final_output"]
    edited_sha = content_sha256("Release notes", BODY)
    [entry] = ledger_entries(state_dir)
    assert entry["content_sha256"] == edited_sha and entry["title"] == "Release notes"
    cp = _cp(state_dir)
    first, second = cp["decisions"]
    assert first["call_id"] == original["call_id"] and first["by"] == "alice"
    assert first["edits"]["original_sha256"] == content_sha256(TITLE, BODY)
    assert first["edits"]["edited_sha256"] == edited_sha
    assert (second["decision"], second["by"], second["edits"]) == ("approved", "alice", None)
    assert second["call_id"] != original["call_id"]  # the model's new call, not the original
    # expected per call, in the decision record: the task's own draft stays the one it started with
    assert cp["content_sha256"] == content_sha256(TITLE, BODY) and cp["title"] == TITLE
    from state.schema import Checkpoint

    assert Checkpoint.model_validate(cp).expected_sha256("blog") == edited_sha
    run_state = json.loads(cp["run_state"])  # the original call was answered, never run
    outputs = [i for i in run_state["generated_items"] if i["type"] == "tool_call_output_item"]
    assert outputs[0]["output"].startswith(EDIT_HEADER)


@pytest.mark.parametrize("point", ["checkpoint:outcome:after", "ledger:record:before", "ledger:record:after"])
@pytest.mark.parametrize("action", ["publish_draft", "send_summary"])
def test_the_same_approval_with_edits_after_a_crash_finishes_the_task_once(cli, state_dir, point, action):
    """A crash cuts an approval with edits off after the model's call with the edited draft was
    saved (before or after its entry): the same command again, edits and all, finishes that call
    (the decision on record is this one), exactly once; it is never read as new edits that change
    nothing."""
    from conftest import run_subprocess

    r = cli("start", "--key", "t-1", "--title", TITLE, "--draft", BODY, "--action", action)
    assert r.code == 0, r.err
    decide = ("resume", "--task", "t-1", "--decision", "approve", "--by", "alice", "--edit-body", "Edited.")
    crashed = run_subprocess(state_dir, *decide, env={"HITL_FAILPOINT": point})
    assert crashed.code == 86, crashed.err
    again = cli(*decide, "--json")
    assert again.code == 0, again.err
    assert again.json()["status"] == "completed"
    [entry] = ledger_entries(state_dir)
    assert entry["content_sha256"] == content_sha256(TITLE, "Edited.") and entry["action"] == action
    assert cli(*decide, "--json").json()["status"] == "completed" and len(ledger_entries(state_dir)) == 1


def test_status_of_an_approval_with_edits_cut_after_its_decision_names_the_approve_that_finishes_it(cli, state_dir):
    """A crash right after an approval with edits was recorded: ``status`` prints the task and names
    the plain approve (one line, no traceback), and that command finishes it, once."""
    from conftest import run_subprocess

    assert cli("start", "--key", "t-1", "--title", TITLE, "--draft", BODY).code == 0
    crashed = run_subprocess(state_dir, "resume", "--task", "t-1", "--decision", "approve", "--by", "alice",
                             "--edit-body", "Edited.", env={"HITL_FAILPOINT": "checkpoint:decision:after"})
    assert crashed.code == 86, crashed.err
    shown = cli("status", "--task", "t-1")
    assert shown.code == 0 and shown.err == "", shown.err
    assert shown.out.splitlines()[-1] == ("  next: python run.py resume --task t-1 --decision approve (it finishes "
                                          "the decision on record; python run.py doctor explains)"), shown.out
    done = cli("resume", "--task", "t-1", "--decision", "approve", "--json")
    assert done.code == 0 and done.json()["status"] == "completed", done.err
    [entry] = ledger_entries(state_dir)
    assert entry["content_sha256"] == content_sha256(TITLE, "Edited.")


def test_an_approval_of_the_edited_call_recorded_in_earlier_words_is_still_finished_once(cli, state_dir):
    """A task cut off after the program approved the edited call, recorded by a version whose
    reason for it said "draft" (:data:`workflow.edits.AUTO_REASONS`): the same command again
    still finishes it, with one entry."""
    from conftest import resign, run_subprocess
    from workflow.edits import AUTO_REASON, AUTO_REASONS

    _start(cli)
    decide = ("resume", "--task", "t-1", "--decision", "approve", "--by", "alice", "--edit-body", "Edited.")
    assert run_subprocess(state_dir, *decide, env={"HITL_FAILPOINT": "ledger:record:before"}).code == 86

    def earlier(d: dict[str, Any]) -> None:
        for rec in [d["decision"], *d["decisions"]]:
            if rec and rec["reason"] == AUTO_REASON:
                rec["reason"] = AUTO_REASONS[1]

    resign(state_dir, checkpoint_file(state_dir, "t-1"), earlier)
    assert AUTO_REASONS[1] in checkpoint_file(state_dir, "t-1").read_text(encoding="utf-8")
    again = cli(*decide, "--json")
    assert again.code == 0 and again.json()["status"] == "completed", again.err
    [entry] = ledger_entries(state_dir)
    assert entry["content_sha256"] == content_sha256(TITLE, "Edited.")


def test_status_shows_approved_with_edits_and_show_prints_the_diff(cli, state_dir):
    _start(cli)
    r = cli("resume", "--task", "t-1", "--decision", "approve", "--edit-body", "Version 1.2.1 fixes it.")
    assert r.code == 0, r.err
    text = cli("show", "--task", "t-1").out
    assert "approved with edits by" in text and "original vs approved" in text
    assert f"-{BODY}" in text and "+Version 1.2.1 fixes it." in text and " Title: Relase notes" in text
    assert "human decision: approved_with_edits" in text
    edits = cli("show", "--task", "t-1", "--json").json()["approval"]["edits"]
    assert [e["body"] for e in edits] == ["Version 1.2.1 fixes it."]


def _ignores_edits(call: ModelCall) -> ModelStep:
    """A model that does not comply: asked to publish the edited draft, it sends the original."""
    last = call.input[-1] if isinstance(call.input, list) else {}
    if isinstance(last, dict) and str(last.get("output", "")).startswith(EDIT_HEADER):
        return ModelStep(output=[function_call("publish_draft", {"title": TITLE, "body": BODY},
                                               call_id="call_not_the_edit")])
    return offline_responder(call)


def test_edit_then_a_model_that_does_not_comply_pauses_and_publishes_nothing(cli, state_dir):
    from agent import application
    from workflow import edits
    from state.store import FileStore

    _start(cli)
    model = ScriptedModel([ModelStep.respond(_ignores_edits) for _ in range(8)])
    cp = asyncio.run(application.decide(FileStore(state_dir), task_id="t-1", decision="approve", by="alice",
                                 edit=edits.Edit(title="Release notes"), model=model))
    assert cp.status == "waiting_for_approval" and cp.decision is None
    assert [p.call_id for p in cp.pending] == ["call_not_the_edit"]
    assert ledger_entries(state_dir) == []
    before = snapshot(state_dir)
    r = cli("resume", "--task", "t-1", "--decision", "approve")  # content the reviewer did not approve
    r.assert_stopped()
    assert "not the content the reviewer approved with edits" in r.err and snapshot(state_dir) == before
    r = cli("resume", "--task", "t-1", "--decision", "reject", "--reason", "still wrong", "--json")
    assert r.code == 0, r.err
    assert r.json()["status"] == "cancelled" and ledger_entries(state_dir) == []


def test_edits_are_refused_with_reject_always_when_they_change_nothing_or_name_another_call(cli, state_dir):
    _start(cli)
    before = snapshot(state_dir)
    for args, words in ((["--decision", "reject", "--edit-title", "X"], "go with --decision approve"),
                        (["--decision", "approve", "--edit-title", TITLE], "change nothing"),
                        (["--decision", "approve", "--always", "--edit-title", "X"], "do not go with --always"),
                        (["--decision", "approve", "--call", "call_other", "--edit-title", "X"],
                         "has no pending call 'call_other'")):
        r = cli("resume", "--task", "t-1", *args)
        r.assert_stopped()
        assert words in r.err and snapshot(state_dir) == before


def test_a_forged_approval_of_the_call_answered_with_edits_is_refused(cli, state_dir):
    """Crash right after the edit decision (the RunState still pauses at the original call): a file
    re-signed to approve that call is refused; the recorded edits are replayed instead."""
    from conftest import resign

    _start(cli)
    call_id = _cp(state_dir)["pending"][0]["call_id"]
    r = cli("resume", "--task", "t-1", "--decision", "approve", "--edit-title", "Release notes")
    assert r.code == 0, r.err
    # put back the decision-recorded revision by hand: decision with edits, original RunState
    cp = _cp(state_dir)
    first = cp["decisions"][0]

    def forge(d: dict[str, Any]) -> None:
        state = json.loads(d["run_state"])
        state["context"]["function_tool_approvals"] = [{"agent": {"name": "Publisher"},
            "tool_key": "publish_draft", "decision": {"approved": [call_id], "rejected": []}}]
        d["run_state"] = json.dumps(state)
        d["decisions"] = [first]

    resign(state_dir, checkpoint_file(state_dir, "t-1"), forge)
    r = cli("status", "--task", "t-1")
    assert r.code == 0
    from workflow.trust import check_approvals
    from state.schema import Checkpoint

    forged = Checkpoint.model_validate(_cp(state_dir))
    try:
        check_approvals(json.loads(forged.run_state), forged)
    except Exception as exc:
        assert "not recorded through our decision path" in str(exc)
    else:
        raise AssertionError("an approval of the call answered with edits was accepted")


def test_edits_are_part_of_schema_version_2_and_a_v1_decision_migrates_to_none(cli, state_dir):
    """Every schema_version 2 decision carries ``edits`` (null: none): a file without it is refused
    like any missing field; a schema_version 1 file (no edits, no channels) still loads, migrated
    (``state.schema.MIGRATIONS``), its decisions plain ones."""
    from conftest import resign

    _start(cli)
    r = cli("resume", "--task", "t-1", "--decision", "reject", "--reason", "no")
    assert r.code == 0, r.err
    path = checkpoint_file(state_dir, "t-1")
    good = path.read_bytes()
    resign(state_dir, path, lambda d: d["decisions"][0].pop("edits"))
    r = cli("status", "--task", "t-1")
    r.assert_stopped()
    assert "decisions.0.edits: Field required" in r.err
    path.write_bytes(good)

    def to_v1(d: dict[str, Any]) -> None:
        d["schema_version"] = 1
        d.pop("channels")
        for later in ("effects", "failure", "command", "input_sha256"):  # no v1 writer wrote them
            d.pop(later)
        for rec in [d["decision"], *d["decisions"]]:
            for field in ("edits", "channel", "always", "source"):
                rec.pop(field)

    resign(state_dir, path, to_v1)
    r = cli("status", "--task", "t-1", "--json")
    assert r.code == 0, r.err
    task = r.json()
    assert task["schema_version"] == 3 and task["decision"]["decision"] == "rejected"
    assert [(d["decision"], d["channel"]) for d in task["decisions"]] == [("rejected", "blog")]


@pytest.mark.parametrize("other", ["approve", "reject"])
@pytest.mark.parametrize("edit_first", [True, False], ids=["edit-first", "edit-second"])
def test_edit_with_two_channels(cli, state_dir, other, edit_first):
    """Edit one call of a two-channel task (``--call``), approve or reject the other, in either
    order: exactly the edited draft is published on the edited channel, the other channel gets
    the draft as started (approved) or nothing (rejected), and nothing else is published."""
    r = cli("start", "--key", "t-2", "--title", TITLE, "--draft", BODY, "--channel", "blog",
            "--channel", "news", "--json")
    assert r.code == 0, r.err
    calls = {p["arguments"]["channel"]: p["call_id"] for p in r.json()["pending"]}
    before = snapshot(state_dir)
    r = cli("resume", "--task", "t-2", "--decision", "approve", "--edit-title", "Release notes")
    r.assert_stopped()  # two pending calls: the edit must name one, like any decision
    assert "--call" in r.err and snapshot(state_dir) == before
    edit = ["--call", calls["blog"], "--decision", "approve", "--by", "alice", "--edit-title", "Release notes"]
    plain = ["--call", calls["news"], "--decision", other, "--by", "bob"]
    for args in ([edit, plain] if edit_first else [plain, edit]):
        r = cli("resume", "--task", "t-2", *args, "--json")
        assert r.code == 0, r.err
    task = r.json()
    assert task["status"] == "completed" and task["pending"] == []
    published = {e["channel"]: (e["title"], e["content_sha256"]) for e in ledger_entries(state_dir)}
    want = {"blog": ("Release notes", content_sha256("Release notes", BODY))}
    if other == "approve":
        want["news"] = (TITLE, content_sha256(TITLE, BODY))
    assert published == want
    kinds = [(d["channel"], d["decision"], d["by"]) for d in task["decisions"]]
    assert ("blog", "approved_with_edits", "alice") in kinds and ("blog", "approved", "alice") in kinds
    assert ("news", "approved" if other == "approve" else "rejected", "bob") in kinds
    cp = json.loads(checkpoint_file(state_dir, "t-2").read_text(encoding="utf-8"))
    assert cp["content_sha256"] == content_sha256(TITLE, BODY)  # the task's draft is unchanged
    assert cli("doctor", "--json").json()["findings"] == []


def test_edits_and_a_sticky_approval_do_not_mix(cli, state_dir):
    """A sticky ``--always`` approval would let the SDK run the model's new call without a pause:
    refused while a call approved with edits waits, and edits are refused while one is in force."""
    r = cli("start", "--key", "t-3", "--title", TITLE, "--draft", BODY, "--channel", "blog",
            "--channel", "news", "--channel", "site", "--json")
    assert r.code == 0, r.err
    calls = {p["arguments"]["channel"]: p["call_id"] for p in r.json()["pending"]}
    r = cli("resume", "--task", "t-3", "--call", calls["blog"], "--decision", "approve",
            "--edit-title", "Release notes")
    assert r.code == 0, r.err
    before = snapshot(state_dir)
    r = cli("resume", "--task", "t-3", "--call", calls["news"], "--decision", "approve", "--always")
    r.assert_stopped()
    assert "decide this call without --always" in r.err and snapshot(state_dir) == before
    from cli import hints
    from state.schema import Checkpoint
    from workflow import edits

    cp = Checkpoint.model_validate(json.loads(checkpoint_file(state_dir, "t-3").read_text(encoding="utf-8")))
    sticky = cp.decisions[0].model_copy(update={"edits": None, "always": True, "call_id": calls["news"],
                                                "channel": "news"})
    try:  # the other way round: edits while a sticky approval is in force
        edits.check_sticky(cp.model_copy(update={"decisions": [*cp.decisions, sticky]}), "approved",
                           edits.Edit(title="X"), False)
    except edits.Refused as exc:
        assert "a sticky approval is in force" in str(exc)  # the library names no flag; the CLI adds it
        assert "a sticky approval (--always) is in force" in hints.text(exc)
    else:
        raise AssertionError("edits were accepted while a sticky approval is in force")


def test_the_programs_approval_of_the_edited_call_is_labelled_auto_not_a_typed_reason(cli, state_dir):
    """The approval the program makes of the model's new call (it carries exactly the edited
    draft) shows as ``(auto: complies with the edits by NAME)`` in the status text, never as a
    ``reason=`` the reviewer typed; on a two-channel task on that call's own line. A human's own
    reason with the same words, on a call nobody approved with edits, is shown as typed."""
    from workflow.edits import AUTO_REASON

    _start(cli)
    r = cli("resume", "--task", "t-1", "--decision", "approve", "--by", "carol", "--edit-title", "Release notes")
    assert r.code == 0, r.err
    for out in (r.out, cli("status", "--task", "t-1").out):
        [line] = [line for line in out.splitlines() if line.startswith("  decision:")]
        assert line.startswith("  decision: approved by carol at ")
        assert line.endswith(" (auto: complies with the edits by carol)") and AUTO_REASON not in out, out
    r = cli("start", "--key", "t-2", "--title", TITLE, "--draft", BODY, "--channel", "blog",
            "--channel", "news", "--json")
    calls = {p["arguments"]["channel"]: p["call_id"] for p in r.json()["pending"]}
    cli("resume", "--task", "t-2", "--call", calls["news"], "--decision", "reject", "--by", "bob",
        "--reason", AUTO_REASON)
    r = cli("resume", "--task", "t-2", "--call", calls["blog"], "--decision", "approve", "--by", "alice",
            "--edit-title", "Release notes")
    assert r.code == 0, r.err
    lines = [line for line in r.out.splitlines() if line.startswith("  call ")]
    assert f"  call {calls['blog']} on blog: approved_with_edits by alice (human)" in lines, lines
    assert [line for line in lines if " on blog: approved by alice " in line][0].endswith(
        " (auto: complies with the edits by alice)"), lines
    assert f"  call {calls['news']} on news: rejected by bob (human) reason={AUTO_REASON!r}" in lines
    r = cli("start", "--key", "t-3", "--title", TITLE, "--draft", BODY)
    r = cli("resume", "--task", "t-3", "--decision", "approve", "--by", "dave", "--reason", AUTO_REASON)
    assert r.code == 0 and "  decision: approved by dave at " in r.out, r.err
    assert f" reason={AUTO_REASON!r}" in r.out and "(auto:" not in r.out  # typed by a human: shown as such


def test_edits_on_the_second_channel_keep_a_sticky_approval_out_too(cli, state_dir):
    """The check that keeps ``--always`` out while a call approved with edits waits looks at every
    channel of the task, not only its first: edits given on ``news`` (the second channel) refuse a
    sticky approve of ``blog``, with nothing changed; decided one by one, exactly the edited draft
    is published on ``news`` and the draft as started on ``blog``."""
    r = cli("start", "--key", "t-4", "--title", TITLE, "--draft", BODY, "--channel", "blog",
            "--channel", "news", "--json")
    assert r.code == 0, r.err
    calls = {p["arguments"]["channel"]: p["call_id"] for p in r.json()["pending"]}
    r = cli("resume", "--task", "t-4", "--call", calls["news"], "--decision", "approve", "--by", "alice",
            "--edit-title", "Release notes")
    assert r.code == 0, r.err
    before = snapshot(state_dir)
    r = cli("resume", "--task", "t-4", "--call", calls["blog"], "--decision", "approve", "--always")
    r.assert_stopped()
    assert "decide this call without --always" in r.err and snapshot(state_dir) == before
    assert ledger_entries(state_dir) == []
    r = cli("resume", "--task", "t-4", "--call", calls["blog"], "--decision", "approve", "--by", "bob", "--json")
    assert r.code == 0 and r.json()["status"] == "completed", r.err
    published = {e["channel"]: e["content_sha256"] for e in ledger_entries(state_dir)}
    assert published == {"blog": content_sha256(TITLE, BODY), "news": content_sha256("Release notes", BODY)}


def test_show_prints_the_edits_of_any_call_each_argument_named_and_escaped():
    """``show``'s diff of an approval with edits: a call that is not a draft shows each argument as
    ``name: value`` (a number as JSON, even as the last argument, which once raised
    ``AttributeError``), a value's further lines indented under its name, and a model's escape
    sequence escaped; a draft keeps its ``Title:`` line and its body's own lines."""
    from workflow.edits import diff_lines

    keys = {"original_sha256": "0" * 64, "edited_sha256": "1" * 64}
    lines = diff_lines({"with_whom": "bo", "when": 11, "original_with_whom": "bo\x1b[2J\nand al",
                        "original_when": 10, **keys})
    assert lines[3:] == ["-with_whom: bo\\x1b[2J", "-  and al", "-when: 10", "+with_whom: bo", "+when: 11"]
    draft = diff_lines({"title": "T", "body": "a\nc", "original_title": "T", "original_body": "a\nb", **keys})
    assert draft[3:] == [" Title: T", " a", "-b", "+c"]


@pytest.mark.parametrize("point", ["checkpoint:decision:after", "ledger:record:before"])
def test_other_edits_after_a_crash_are_refused_never_dropped_in_silence(cli, state_dir, point):
    """A crash cut an approval with edits off; the same reviewer then asks for other edits. The
    decision on record stands: the request is refused, naming it, and nothing changes; the same
    edits again then finish it, once."""
    from conftest import run_subprocess

    _start(cli)
    decide = ("resume", "--task", "t-1", "--decision", "approve", "--by", "alice", "--edit-body")
    assert run_subprocess(state_dir, *decide, "Edited.", env={"HITL_FAILPOINT": point}).code == 86
    before = snapshot(state_dir)
    other = cli(*decide, "Other.")
    other.assert_stopped()
    assert "has its decision on record (approved" in other.err and "edits given now are not its edits" in other.err
    assert snapshot(state_dir) == before and ledger_entries(state_dir) == []
    again = cli(*decide, "Edited.", "--json")
    assert again.code == 0 and again.json()["status"] == "completed", again.err
    [entry] = ledger_entries(state_dir)
    assert entry["content_sha256"] == content_sha256(TITLE, "Edited.")
