"""The hints in STOPPED lines are the command line's (``cli/hints.py``), rendered from the next steps
a refusal carries: ``run.py`` prints the same line as before, word for word, while the library's own
message (``str(exc)``) names no command and no flag."""

from __future__ import annotations

import pytest

from cli.hints import text
from state.errors import Refused
from workflow.reconcile import refusal


def _line(r) -> str:
    r.assert_stopped()
    return r.err.strip()


def test_a_key_used_for_another_draft_is_told_to_use_a_new_key(cli):
    assert cli("start", "--key", "k", "--draft", "one").code == 0
    assert _line(cli("start", "--key", "k", "--draft", "two")) == (
        "STOPPED: task k already exists and differs in its content; use a new --key")
    assert _line(cli("start", "--key", "k", "--draft", "one", "--channel", "news")) == (
        "STOPPED: task k already exists and differs in its channels; use a new --key")
    assert _line(cli("start", "--key", "k", "--draft", "one", "--title", "Other", "--channel", "news")) == (
        "STOPPED: task k already exists and differs in its title, content and channels; use a new --key")


def test_a_decision_on_several_calls_is_told_how_to_name_one(cli):
    calls = cli("start", "--key", "k2", "--draft", "d", "--channel", "blog", "--channel", "news", "--json")
    ids = [p["call_id"] for p in calls.json()["pending"]]
    assert _line(cli("resume", "--task", "k2", "--decision", "approve", "--by", "ann")) == (
        f"STOPPED: task k2 has 2 pending calls ({', '.join(ids)}); name one with --call "
        "(python run.py status --task k2 shows each)")


def test_a_command_without_a_task_is_told_to_give_one(cli, state_dir):
    line = _line(cli("resume", "--decision", "approve", "--by", "ann"))
    assert line.startswith("STOPPED: no waiting tasks in ") and line.endswith("; give --task ID")


def test_a_preview_only_task_is_told_to_add_a_public_channel(cli):
    assert _line(cli("start", "--key", "k3", "--draft", "d", "--channel", "preview")) == (
        "STOPPED: a task needs a public channel: preview alone needs no human, so there would be "
        "nothing to approve; add e.g. --channel blog")


@pytest.mark.parametrize("code, kw, library, printed", [
    ("conflict", {}, "task k: the rejection record and the ledger disagree; a human must check",
     "task k: the rejection record and the ledger disagree; a human must check (python run.py doctor)"),
    ("expired", {"status": "waiting_for_approval", "expires_at": "2030-01-01T00:00:00Z"},
     "approval expired: task k expired at 2030-01-01T00:00:00Z; it can only be rejected or marked expired",
     "approval expired: task k expired at 2030-01-01T00:00:00Z; it can only be rejected (python run.py "
     "resume --task k --decision reject) or marked expired (python run.py expire)"),
    ("executed", {"status": "waiting_for_approval"},
     "the ledger shows task k was already executed; it cannot be rejected",
     "the ledger shows task k was already executed; it cannot be rejected (resume with --decision "
     "approve to finish recording it)"),
])
def test_decision_table_refusals_keep_their_printed_hints(code, kw, library, printed):
    exc = Refused(code, refusal(code, task_id="k", **{"status": "completed", **kw}))
    assert (str(exc), text(exc)) == (library, printed)


def test_a_lost_compare_and_swap_keeps_its_printed_hint(state_dir):
    from state.files.store import Store, _changed
    from state.conformance import sample_body as template_body

    exc = _changed("k", 1, 2)
    assert exc.code == "stale_revision" and "run.py" not in str(exc)
    assert text(exc) == ("task k changed on disk since it was read (revision 1 -> 2): another process "
                         "wrote it; this write was not made; run python run.py status --task k to see "
                         "where it stands")
    store = Store(state_dir)
    store.save(template_body("t-1"), failpoint="test")
    with pytest.raises(Refused) as again:
        store.save(template_body("t-1"), failpoint="test")
    assert str(again.value) == "task t-1 was created by another process at the same time; this write was not made"
    assert text(again.value) == (f"{again.value} (python run.py status --task t-1)")


def _edit_refusal(make) -> Refused:
    with pytest.raises(Refused) as exc:
        make()
    return exc.value


@pytest.mark.parametrize("make, printed", [
    (lambda ed: ed.Edit(), "an approval with edits needs --edit-title and/or --edit-body"),
    (lambda ed: ed.Edit(title="x" * 500), "--edit-title is 500 characters; the limit is 200"),
    (lambda ed: ed.Edit(body="a\x00b"), "--edit-body contains control characters"),
    (lambda ed: ed.edits_for(ed.Edit(title="T"), {"title": "T", "body": "B"}),
     "the edits change nothing: approve without --edit-title/--edit-body"),
])
def test_edit_refusals_keep_their_printed_flags_while_the_library_names_none(make, printed):
    from workflow import edits

    exc = _edit_refusal(lambda: make(edits))
    assert text(exc) == printed
    assert "--" not in str(exc) and exc.code == "usage"


def test_a_library_caller_without_hints_reads_plain_words_where_the_cli_reads_its_flags():
    """A next step that names an input carries the library's own words (``Next(plain=…)``):
    ``str(exc)`` is a whole sentence for a caller of the API, the command line prints its flags."""
    from cli.hints import text
    from workflow.edits import Edit

    for kwargs, plain, printed in (
            ({}, "an approval with edits needs edited content",
             "an approval with edits needs --edit-title and/or --edit-body"),
            ({"title": "x" * 300}, "the edited title is 300 characters; the limit is 200",
             "--edit-title is 300 characters; the limit is 200")):
        with pytest.raises(Refused) as refused:
            Edit(**kwargs)
        assert (str(refused.value), text(refused.value)) == (plain, printed)
