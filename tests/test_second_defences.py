"""Second lines of defence, each held by a direct test that fails when that one check is weakened.

Most safety checks sit behind another one: the MAC stops a hand edit before the RunState checks
see it, the lock stops a race before the compare-and-swap does, the reviewer's view stops a wrong
call before ``bind`` does. An end-to-end test therefore passes even when the check behind is gone.
Each test here calls the check itself (or the smallest path that reaches it with every check in
front of it passed), so it fails when that check is weakened; ``scripts/mutation_run.py`` applies
such weakenings one at a time and names the test that must catch each. Offline, deterministic.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path
from typing import Any, Optional

import pytest

from conftest import checkpoint_file, ledger_entries

KEY = "sd-1"
TITLE = "Title"
DRAFT = "Body of the draft."
AT = "2030-01-01T00:00:00+00:00"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


# -- helpers ----------------------------------------------------------------------------------------

def _sha(title: str = TITLE, body: str = DRAFT) -> str:
    from state.schema import content_sha256

    return content_sha256(title, body)


def _task(state_dir: Path, channels: Optional[list[str]] = None):
    """A real task started through the workflow (offline model): ``(FileStore, checkpoint)``."""
    from agent import application
    from state.store import FileStore

    store = FileStore(state_dir)
    cp = asyncio.run(application.start(store, task_id=KEY, title=TITLE, draft=DRAFT, channels=channels))
    return store, cp


def _call(cp: Any, channel: str) -> Any:
    """The pending call of ``cp`` on ``channel``."""
    return next(p for p in cp.pending if (p.arguments.get("channel") or cp.channels[0]) == channel)


def _decision(call: Any, channel: str, decision: str = "approved", *, edits: Any = None,
              call_id: Optional[str] = None, tool: Optional[str] = None,
              arguments: Optional[dict[str, Any]] = None) -> Any:
    from state.schema import Decision, arguments_sha256

    return Decision(decision=decision, by="alice", at=AT, reason=None,
                    call_id=call_id or call.call_id, tool=tool or call.tool,
                    arguments_sha256=arguments_sha256(call.arguments if arguments is None else arguments),
                    channel=channel, always=False, source="human", edits=edits)


def _record(store: Any, cp: Any, *decisions: Any) -> Any:
    """A new revision of ``cp`` with ``decisions`` on record (through the store's own write)."""
    return store.save_revision(cp, failpoint="checkpoint:decision", decisions=[*cp.decisions, *decisions],
                               event=("decision_recorded", {}))


def _invoke(store: Any, cp: Any, call_id: str, title: str = TITLE, body: str = DRAFT,
            channel: Optional[str] = None) -> str:
    """Run the ``publish_draft`` tool itself, as the SDK would for an approved call ``call_id``,
    with the run context our workflow builds from the verified checkpoint."""
    from agents.tool_context import ToolContext

    from tools.publish import publish_draft
    from workflow.guards import run_context

    ctx = run_context(store, cp.task_id, cp.content_sha256, cp.channels, cp.action)
    args = json.dumps({"title": title, "body": body, **({"channel": channel} if channel else {})})
    tool_ctx = ToolContext(context=ctx, tool_name="publish_draft", tool_call_id=call_id,
                           tool_arguments=args)
    return asyncio.run(publish_draft.on_invoke_tool(tool_ctx, args))


def _refused_by_tool(state_dir: Path, store: Any, cp: Any, call_id: str, says: str, **kw: Any) -> None:
    from state.errors import Refused

    with pytest.raises(Refused, match=says):
        _invoke(store, cp, call_id, **kw)
    assert ledger_entries(state_dir) == []


# -- the MAC (state/integrity.py, state/files/store.py) ----------------------------------------------------

def test_mac_is_compared_in_full_so_a_forgery_matching_its_first_characters_fails():
    """Why: a MAC checked on a prefix can be forged by trying values until the prefix matches
    (8 hex characters are 2**32 tries). Every one of the 64 hex characters must count."""
    from state.integrity import compute_mac, verify_mac

    key, body = b"k" * 32, {"task_id": KEY, "status": "waiting_for_approval"}
    mac = compute_mac(body, key)
    assert verify_mac(body, mac, key)
    last = "0" if mac[-1] != "0" else "1"
    assert not verify_mac(body, mac[:-1] + last, key)  # differs only in the last character
    assert not verify_mac(body, mac[:8] + "0" * 56, key)
    assert not verify_mac(body, mac[:8], key)


def test_mac_of_the_envelope_is_checked_in_full_by_every_reader(state_dir):
    """Why: every store reads through ``verify_envelope``; a MAC that agrees with the envelope's
    only in its first characters must be refused there too (a prefix compare anywhere is a forgery)."""
    from state.errors import Refused
    from state.integrity import load_key
    from state.signing import verify_envelope

    _task(state_dir)
    path = checkpoint_file(state_dir, KEY)
    data = json.loads(path.read_text(encoding="utf-8"))
    key = load_key(state_dir, create=False)
    assert verify_envelope(data, key, where="checkpoint", name=path.name).task_id == KEY
    last = "0" if data["mac"][-1] != "0" else "1"
    forged = {**data, "mac": data["mac"][:-1] + last}
    with pytest.raises(Refused) as refused:
        verify_envelope(forged, key, where="checkpoint", name=path.name)
    assert refused.value.code == "integrity"


def test_mac_covers_the_run_state_so_an_edit_of_it_alone_fails_the_mac(state_dir):
    """Why: the serialized RunState is what the SDK trusts (its approvals, its pending calls) and
    is not authenticated by the SDK; one word of it edited without re-signing must fail the MAC
    itself, before any check behind the MAC is reached."""
    from state.errors import Refused
    from state.files.store import Store

    _task(state_dir)
    path = checkpoint_file(state_dir, KEY)
    data = json.loads(path.read_text(encoding="utf-8"))
    assert DRAFT in data["run_state"]
    data["run_state"] = data["run_state"].replace(DRAFT, "Another body.")
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    with pytest.raises(Refused, match=f"checkpoint integrity check failed for {path.parent.name}/{path.name}"):
        Store(state_dir).load(KEY)


def test_a_lost_signing_key_is_never_replaced_while_checkpoints_exist(state_dir):
    """Why: every checkpoint was signed with the lost key; a new key made on the next write would
    leave all of them unreadable for ever. Refused with nothing created."""
    from state.errors import Refused
    from state.integrity import KEY_FILE, check_key_creatable, load_key

    _task(state_dir)
    (state_dir / KEY_FILE).unlink()
    with pytest.raises(Refused, match="signing key missing but 1 checkpoint exists"):
        check_key_creatable(state_dir)
    with pytest.raises(Refused, match="signing key missing but 1 checkpoint exists"):
        load_key(state_dir, create=True)
    assert not (state_dir / KEY_FILE).exists()


def test_load_refuses_a_checkpoint_that_names_another_task(state_dir, monkeypatch):
    """Why: ``Store.load(task_id)`` is how every command gets *its* task; whatever the file layer
    returned (a store whose file-name check is weakened, a row under another key), a checkpoint of
    another task is refused, never acted on under this task's name."""
    from state.errors import Refused
    from state.files.store import Store

    store, cp = _task(state_dir)
    other = cp.model_copy(update={"task_id": "sd-2", "idempotency_key": "sd-2"})
    monkeypatch.setattr(Store, "load_path", lambda self, path: other)
    with pytest.raises(Refused, match="names task 'sd-2', not 'sd-1'"):
        store.load(KEY)


def test_a_checkpoint_verified_once_is_verified_again_under_another_key(state_dir, monkeypatch):
    """Why: this process remembers files it verified (to skip re-parsing); that memory holds only
    for the key it verified with. A key changed meanwhile (the variable set, another deployment)
    must verify the file again, and refuse it."""
    from state.errors import Refused
    from state.files.store import Store

    _task(state_dir)
    assert Store(state_dir).load(KEY).task_id == KEY  # verified and remembered
    monkeypatch.setenv("HITL_SIGNING_KEY", "another-key-of-32-bytes-0123456789")
    with pytest.raises(Refused) as refused:
        Store(state_dir).load(KEY)
    assert refused.value.code == "integrity"


def test_every_checkpoint_write_is_redacted_whatever_the_caller_did(state_dir, monkeypatch):
    """Why: ``seal`` is the one place every store signs a checkpoint; free text holding a secret
    (a model echoing the API key into its final output) is replaced there even when no caller
    redacted it first, and a secret in a structural field refuses the write."""
    from state.errors import Refused
    from state.integrity import load_key
    from state.signing import seal

    _, cp = _task(state_dir)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    key = load_key(state_dir, create=False)
    sealed = seal({**cp.body(), "final_output": f"the key is {SECRET}"}, key)
    assert sealed.final_output == "[redacted]"
    with pytest.raises(Refused, match="holds the value of OPENAI_API_KEY"):
        seal({**cp.body(), "model": {**cp.model.model_dump(), "name": SECRET}}, key)


@pytest.fixture
def v1_envelope(monkeypatch):
    """The committed schema_version 1 checkpoint, parsed, and its signing key."""
    sys.path.insert(0, str(FIXTURES))
    import make_checkpoint_v1 as fx

    monkeypatch.setenv("HITL_SIGNING_KEY", fx.FIXTURE_KEY)
    return json.loads(Path(fx.FIXTURE).read_text(encoding="utf-8")), fx.FIXTURE_KEY.encode()


def test_mac_is_checked_for_schema_version_1_envelopes_too(v1_envelope):
    """Why: an older envelope is migrated after its MAC check; skipping the MAC for old versions
    would let anyone write ``schema_version: 1`` into a hand-edited file and have it trusted."""
    from state.errors import Refused
    from state.signing import verify_envelope

    data, key = v1_envelope
    assert data["schema_version"] == 1
    assert verify_envelope(data, key, where="checkpoint", name="v1").schema_version == 3  # migrated
    edited = {**data, "title": data["title"] + " (edited)"}
    with pytest.raises(Refused, match="checkpoint integrity check failed for v1"):
        verify_envelope(edited, key, where="checkpoint", name="v1")
    with pytest.raises(Refused, match="checkpoint integrity check failed for v1"):
        verify_envelope({k: v for k, v in data.items() if k != "mac"}, key, where="checkpoint", name="v1")


def test_a_copied_v1_checkpoint_edited_by_hand_is_refused_by_the_store(state_dir, v1_envelope):
    """Why: the same rule through ``Store.load``: a hand-edited v1 file never reaches migration."""
    import make_checkpoint_v1 as fx

    from state.errors import Refused
    from state.files.store import Store

    data, _ = v1_envelope
    checkpoint_file(state_dir, fx.TASK_ID).parent.mkdir(parents=True)
    shutil.copyfile(FIXTURES / "checkpoint_v1.state.id", state_dir / "state.id")
    data["status"] = "completed"
    checkpoint_file(state_dir, fx.TASK_ID).write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(Refused) as refused:
        Store(state_dir).load(fx.TASK_ID)
    assert refused.value.code == "integrity"


# -- the tool (tools/publish.py) -------------------------------------------------------------------

def test_tool_refuses_content_other_than_the_approved_draft_even_with_an_approval_on_record(state_dir):
    """Why: the approval is for the draft the reviewer saw; the tool recomputes the content hash
    from the call's own arguments, so a call whose arguments changed after review (a hand-edited
    RunState, a bug) never publishes other text under that approval."""
    store, cp = _task(state_dir)
    call = cp.pending[0]
    cp = _record(store, cp, _decision(call, "blog"))
    _refused_by_tool(state_dir, store, cp, call.call_id, "differs from the draft that was started",
                     body=DRAFT + " plus a line nobody approved")
    out = json.loads(_invoke(store, cp, call.call_id))  # the draft as approved does publish
    assert out["result"] == "published" and len(ledger_entries(state_dir)) == 1


def test_tool_refuses_when_only_another_call_on_the_same_channel_is_approved(state_dir):
    """Why: an approval answers one call (its call_id); the model's next call on the same channel
    is one no human has seen, and must wait for its own decision."""
    store, cp = _task(state_dir)
    call = cp.pending[0]
    cp = _record(store, cp, _decision(call, "blog"))
    _refused_by_tool(state_dir, store, cp, "call_not_reviewed", "without a human approval on record")


def test_tool_refuses_an_approval_recorded_for_the_same_call_on_another_channel(state_dir):
    """Why: the approval names its channel; a call id approved for ``news`` does not let the same
    id publish on ``blog`` (each channel is its own effect)."""
    store, cp = _task(state_dir, ["blog", "news"])
    blog, news = _call(cp, "blog"), _call(cp, "news")
    cp = _record(store, cp, _decision(news, "news", call_id=blog.call_id))
    _refused_by_tool(state_dir, store, cp, blog.call_id, "without a human approval on record",
                     channel="blog")


def test_tool_never_runs_the_call_an_approval_with_edits_answered(state_dir):
    """Why: an approval with edits approves the edited draft, not the original call: that call is
    answered with a message and must never run with its original content."""
    from state.schema import Edits

    store, cp = _task(state_dir)
    call = cp.pending[0]
    edits = Edits(content={"title": TITLE, "body": "Edited body."}, original={"title": TITLE, "body": DRAFT},
                  original_sha256=_sha(), edited_sha256=_sha(TITLE, "Edited body."))
    cp = _record(store, cp, _decision(call, "blog", edits=edits))
    _refused_by_tool(state_dir, store, cp, call.call_id, "without a human approval on record")


def test_tool_refuses_a_rejected_decision_as_approval(state_dir):
    """Why: only ``approved`` counts; a reject on record for this very call never publishes."""
    store, cp = _task(state_dir)
    call = cp.pending[0]
    cp = _record(store, cp, _decision(call, "blog", "rejected"))
    _refused_by_tool(state_dir, store, cp, call.call_id, "without a human approval on record")


def test_tool_refuses_when_a_rejection_record_exists_whatever_the_checkpoint_says(state_dir):
    """Why: a reject recorded by a process whose lock was deleted under this one wins: the
    rejection record is checked right before the effect, even with an approval on record."""
    store, cp = _task(state_dir)
    call = cp.pending[0]
    store.rejection_record(KEY, cp.content_sha256, _decision(call, "blog", "rejected"))
    cp = _record(store, cp, _decision(call, "blog"))
    _refused_by_tool(state_dir, store, cp, call.call_id, "a reject by alice")


def test_tool_refuses_when_a_rejection_record_exists_on_the_second_channel(state_dir):
    """Why: the rejection record the tool reads right before the effect is the one of the call's
    own channel, on every channel: a reject of ``news`` (the task's second channel) recorded
    meanwhile stops ``news``'s approved call too, while ``blog`` still publishes."""
    store, cp = _task(state_dir, ["blog", "news"])
    blog, news = _call(cp, "blog"), _call(cp, "news")
    store.rejection_record(KEY, cp.content_sha256, _decision(news, "news", "rejected"), "news")
    cp = _record(store, cp, _decision(blog, "blog"), _decision(news, "news"))
    _refused_by_tool(state_dir, store, cp, news.call_id, "a reject by alice", channel="news")
    out = json.loads(_invoke(store, cp, blog.call_id, channel="blog"))
    assert out["result"] == "published" and [e["channel"] for e in ledger_entries(state_dir)] == ["blog"]


def test_tool_asks_for_a_human_on_every_public_channel(state_dir):
    """Why: the approval rule decides whether the SDK pauses at all; it says "no approval needed"
    only for a well-formed call to the private preview channel of a task that has it."""
    from types import SimpleNamespace

    from tools.publish import needs_publish_approval

    ctx = SimpleNamespace(context={"channels": ["blog", "preview"]})
    ok = {"title": TITLE, "body": DRAFT}
    assert needs_publish_approval(ctx, {**ok, "channel": "blog"}, "c") is True
    assert needs_publish_approval(ctx, {**ok, "channel": "preview"}, "c") is False
    assert needs_publish_approval(None, {**ok, "channel": "preview"}, "c") is True
    assert needs_publish_approval(ctx, {**ok, "channel": None}, "c") is True
    assert needs_publish_approval(ctx, {"title": TITLE, "body": 1, "channel": "preview"}, "c") is True
    assert needs_publish_approval(ctx, {**ok, "channel": "preview", "x": 1}, "c") is True
    assert needs_publish_approval(ctx, "not a dict", "c") is True


def test_call_channel_refuses_a_channel_that_is_not_the_tasks():
    """Why: the channel comes from the model; a channel the task never named (even a valid name,
    even the private preview channel) would be an effect nobody asked for."""
    from state.errors import Refused
    from tools.publish import call_channel

    task = {"task_id": KEY, "channels": ["blog", "news"]}
    assert call_channel(task, "news") == "news"
    for bad in ("preview", "other", "BLOG", 7):
        with pytest.raises(Refused, match="not one of the task's channels"):
            call_channel(task, bad)
    with pytest.raises(Refused, match="not one of the task's channels"):
        call_channel(task, None)  # several channels: the call must name one
    assert call_channel({"task_id": KEY, "channels": ["blog"]}, None) == "blog"
    with pytest.raises(Refused, match="not one of the task's channels"):
        call_channel({"task_id": KEY, "channels": ["blog"]}, "news")


# -- the ledger (state/files/ledger.py) --------------------------------------------------------------------

def _entry(task_id: str = KEY, key: Optional[str] = None, sha: Optional[str] = None) -> Any:
    from state.records import LedgerEntry

    return LedgerEntry(idempotency_key=key or task_id, task_id=task_id, action="publish_draft",
                       title=TITLE, content_sha256=sha or _sha(), published_at=AT)


def test_check_same_compares_the_task_id():
    """Why: an entry under a key proves an effect only for the task that wrote it; an entry of
    another task (a reused key, a copied file) must never count as this task's execution."""
    from state.errors import Refused
    from state.records import check_same_entry

    check_same_entry(_entry(), key=KEY, task_id=KEY, content_sha256=_sha(), action="publish_draft")
    with pytest.raises(Refused, match="for task 'sd-1', not 'sd-2'"):
        check_same_entry(_entry(), key=KEY, task_id="sd-2", content_sha256=_sha(), action="publish_draft")


def test_check_same_compares_the_content():
    """Why: the same key with other content is not the same effect (fail closed)."""
    from state.errors import Refused
    from state.records import check_same_entry

    with pytest.raises(Refused, match="different content"):
        check_same_entry(_entry(), key=KEY, task_id=KEY, content_sha256=_sha(TITLE, "other"), action="publish_draft")


def test_ledger_record_refuses_a_key_that_names_another_channel(tmp_path):
    """Why: ``check_ledger_key`` binds the key to the task and its channel before anything is read."""
    from state.errors import Refused
    from state.files.ledger import Ledger

    ledger = Ledger(tmp_path / "ledger")
    with pytest.raises(Refused, match="names neither task"):
        ledger.record(key=f"{KEY}#news", task_id=KEY, action="publish_draft", title=TITLE, content_sha256=_sha(),
                      channel="blog", approval="human")
    assert not (tmp_path / "ledger").exists() or not list((tmp_path / "ledger").iterdir())


def test_ledger_record_with_other_content_under_a_taken_key_is_refused(tmp_path):
    """Why: the idempotency rule: same key and same content → the first entry; other content
    under the key → refuse, never a second entry nor a silent success."""
    from state.errors import Refused
    from state.files.ledger import Ledger

    ledger = Ledger(tmp_path / "ledger")
    first, created = ledger.record(key=KEY, task_id=KEY, action="publish_draft", title=TITLE, content_sha256=_sha())
    again, created_again = ledger.record(key=KEY, task_id=KEY, action="publish_draft", title=TITLE,
                                         content_sha256=_sha())
    assert created and not created_again and again == first
    with pytest.raises(Refused) as refused:
        ledger.record(key=KEY, task_id=KEY, action="publish_draft", title=TITLE, content_sha256=_sha(TITLE, "other"))
    assert refused.value.code == "ledger_mismatch"


def test_ledger_entry_file_naming_another_key_is_refused(tmp_path):
    """Why: a file copied under another key's name must not prove that key's effect."""
    from state.errors import Refused
    from state.files.store import file_name
    from state.files.ledger import Ledger

    ledger = Ledger(tmp_path / "ledger")
    ledger.record(key="sd-2", task_id="sd-2", action="publish_draft", title=TITLE, content_sha256=_sha())
    src = tmp_path / "ledger" / (file_name("sd-2") + ".json")
    shutil.copyfile(src, tmp_path / "ledger" / (file_name(KEY) + ".json"))
    with pytest.raises(Refused, match="key mismatch"):
        ledger.get(KEY)


def test_ledger_listing_refuses_a_file_named_for_another_key(tmp_path):
    """Why: ``ledger`` and ``doctor`` read every file of the folder; an entry copied under another
    key's file name would be listed (and judged) as that key's effect."""
    from state.errors import Refused
    from state.files.store import file_name
    from state.files.ledger import Ledger

    ledger = Ledger(tmp_path / "ledger")
    ledger.record(key="sd-2", task_id="sd-2", action="publish_draft", title=TITLE, content_sha256=_sha())
    assert [e.idempotency_key for e in ledger.entries()] == ["sd-2"]
    src = tmp_path / "ledger" / (file_name("sd-2") + ".json")
    shutil.copyfile(src, tmp_path / "ledger" / (file_name(KEY) + ".json"))
    with pytest.raises(Refused, match="names key 'sd-2' \\(key mismatch\\)"):
        ledger.entries()


def test_decision_table_evidence_refuses_an_entry_for_other_content(state_dir):
    """Why: ``gather`` checks that the entry under the task's key is for the task's own draft
    before the table judges it (else another draft's effect would read as this one's execution)."""
    from state.errors import Refused
    from state.files.ledger import Ledger
    from workflow import reconcile

    store, cp = _task(state_dir)
    assert reconcile.gather(store, cp)[0].entry is False
    Ledger(state_dir / "ledger").record(key=KEY, task_id=KEY, action="publish_draft", title=TITLE,
           content_sha256=_sha(TITLE, "x"))
    with pytest.raises(Refused) as refused:
        reconcile.gather(store, cp)
    assert refused.value.code == "ledger_mismatch"


# -- rejection records (state/files/rejections.py, workflow/reconcile.py) --------------------------------

def test_rejection_record_for_other_content_is_refused(state_dir):
    """Why: a rejection is of one draft; a record for other content under this key is evidence no
    table cell can judge (a human must check), never a reject of this draft."""
    from state.errors import Refused

    store, cp = _task(state_dir)
    rec = _decision(cp.pending[0], "blog", "rejected")
    store.rejection_record(KEY, _sha(TITLE, "another draft"), rec)
    with pytest.raises(Refused, match="is for other content"):
        store.rejection_record(KEY, cp.content_sha256, rec)


def test_rejection_record_for_other_content_stops_the_decision_table(state_dir):
    """Why: ``gather`` compares the record's content with the checkpoint's before judging."""
    from state.errors import Refused
    from workflow import reconcile

    store, cp = _task(state_dir)
    store.rejection_record(KEY, _sha(TITLE, "another draft"), _decision(cp.pending[0], "blog", "rejected"))
    with pytest.raises(Refused, match="the rejection record and the checkpoint disagree"):
        reconcile.gather(store, cp)


def test_rejection_record_of_another_channel_is_refused(state_dir):
    """Why: each (task, channel) has its own record; a reject of ``news`` copied to where
    ``blog``'s record goes must not block (or be read as a reject of) ``blog``."""
    from state.files import rejections
    from state.errors import Refused

    store, cp = _task(state_dir, ["blog", "news"])
    news = _call(cp, "news")
    store.rejection_record(KEY, cp.content_sha256, _decision(news, "news", "rejected"), "news")
    assert store.rejection_get(KEY, "news").channel == "news"
    assert store.rejection_get(KEY, "blog") is None
    shutil.copyfile(rejections.path_for(store, KEY, "news"), rejections.path_for(store, KEY, "blog"))
    with pytest.raises(Refused, match="channel 'news', not 'sd-1' channel 'blog'"):
        store.rejection_get(KEY, "blog")


def test_rejection_record_of_another_task_is_refused(state_dir):
    """Why: a record copied from another task under this task's name is not this task's reject."""
    from state.files import rejections
    from state.errors import Refused

    store, cp = _task(state_dir)
    store.rejection_record("sd-2", cp.content_sha256, _decision(cp.pending[0], "blog", "rejected"))
    shutil.copyfile(rejections.path_for(store, "sd-2"), rejections.path_for(store, KEY))
    with pytest.raises(Refused, match="names task 'sd-2'"):
        store.rejection_get(KEY)


# -- bind (workflow/guards.py) ------------------------------------------------------------------------

def _item(call: Any) -> Any:
    """The SDK's ``ToolApprovalItem`` for a pending call, as a RunState's interruption holds it."""
    from agents import Agent, ToolApprovalItem
    from openai.types.responses import ResponseFunctionToolCall

    raw = ResponseFunctionToolCall(type="function_call", call_id=call.call_id, name=call.tool,
                                   arguments=json.dumps(call.arguments))
    return ToolApprovalItem(agent=Agent(name="x"), raw_item=raw)


@pytest.mark.parametrize("what", ["tool", "arguments"])
def test_bind_refuses_a_recorded_decision_for_another_tool_or_other_arguments(state_dir, what):
    """Why: a decision binds the exact call the reviewer saw (call_id, tool, arguments hash); a
    record whose tool or arguments differ from the interruption's is a decision about another call
    and must never answer this one."""
    from state.errors import Refused
    from workflow import guards

    _, cp = _task(state_dir)
    call = cp.pending[0]
    items = [_item(call)]
    ok = cp.model_copy(update={"decision": _decision(call, "blog")})
    assert set(guards.bind(ok, items)) == {call.call_id}
    other = ({"tool": "send_summary"} if what == "tool"
             else {"arguments": {**call.arguments, "body": "other"}})
    bad = cp.model_copy(update={"decision": _decision(call, "blog", **other)})
    with pytest.raises(Refused, match="the recorded decision is for another call"):
        guards.bind(bad, items)
    unapplied = cp.model_copy(update={"decisions": [_decision(call, "blog", **other)]})
    with pytest.raises(Refused, match="the recorded decision is for another call"):
        guards.bind(unapplied, items)


def test_bind_refuses_interruptions_that_differ_from_the_calls_shown_for_review(state_dir):
    """Why: what the SDK will run must be exactly what the reviewer saw."""
    from state.errors import Refused
    from state.schema import PendingCall
    from workflow import guards

    _, cp = _task(state_dir)
    call = cp.pending[0]
    changed = PendingCall(call_id=call.call_id, tool=call.tool,
                          arguments={**call.arguments, "body": "other"})
    with pytest.raises(Refused, match="differs from the one shown"):
        guards.bind(cp, [_item(changed)])


def test_bind_refuses_a_decision_whose_call_id_is_not_an_interruption(state_dir):
    """Why: the call_id is what ties a decision to one call; a decision for a call id the run does
    not hold must not answer another call, even one with the same tool and arguments."""
    from state.errors import Refused
    from workflow import guards

    _, cp = _task(state_dir, ["blog", "news"])
    items = [_item(p) for p in cp.pending]
    first = cp.pending[0]
    channel = first.arguments["channel"]
    ghost = cp.model_copy(update={"decision": _decision(first, channel, call_id="call_ghost")})
    with pytest.raises(Refused, match="the recorded decision is for another call"):
        guards.bind(ghost, items)


def test_every_pending_call_must_carry_the_draft_not_only_the_first(state_dir):
    """Why: a decision on one call is written only if every pending call is the task's action
    with the draft expected on its channel; a second call whose body was changed (a re-signed
    file, a bug) must stop it as the first would."""
    from state.errors import Refused
    from workflow.trust import check_pending_is_the_draft

    _, cp = _task(state_dir, ["blog", "news"])
    check_pending_is_the_draft(cp)
    news = _call(cp, "news")
    assert cp.pending[0].call_id != news.call_id
    changed = news.model_copy(update={"arguments": {**news.arguments, "body": "Another body."}})
    forged = cp.model_copy(update={"pending": [changed if p.call_id == news.call_id else p for p in cp.pending]})
    with pytest.raises(Refused, match=f"the pending call {news.call_id} is not publish_draft of the content"):
        check_pending_is_the_draft(forged)


def _pending(call_id: str, **arguments: Any) -> dict[str, Any]:
    return {"call_id": call_id, "tool": "publish_draft",
            "arguments": {"title": TITLE, "body": DRAFT, **arguments}}


def test_first_run_saves_only_calls_of_publish_draft_with_the_draft_on_distinct_channels():
    """Why: what ``start`` saves is what a reviewer will be asked about; another tool, other text,
    another channel or one channel asked twice is not the task that was started (nothing saved)."""
    from state.errors import Refused
    from workflow.guards import check_draft_call

    sha, channels = _sha(), ["blog", "news"]
    check_draft_call([_pending("a", channel="blog"), _pending("b", channel="news")], sha, channels, "publish_draft")
    with pytest.raises(Refused) as refused:
        check_draft_call([{**_pending("a", channel="blog"), "tool": "send_summary"}], sha, channels, "publish_draft")
    assert refused.value.code == "agent"
    with pytest.raises(Refused) as refused:
        check_draft_call([_pending("a", channel="blog", body="other")], sha, channels, "publish_draft")
    assert refused.value.code == "agent"
    with pytest.raises(Refused, match="does not carry the content as given"):  # every call, not only the first
        check_draft_call([_pending("a", channel="blog"), _pending("b", channel="news", body="other")], sha, channels,
                         "publish_draft")
    with pytest.raises(Refused, match="does not carry the content as given"):
        check_draft_call([_pending("a", channel="preview")], sha, channels, "publish_draft")
    with pytest.raises(Refused) as refused:
        check_draft_call([_pending("a", channel="blog"), _pending("b", channel="blog")], sha, channels, "publish_draft")
    assert refused.value.code == "agent"


def test_outcome_refuses_an_approved_call_without_its_ledger_entry(state_dir):
    """Why: an approved call whose tool left no entry did not execute as recorded; calling the
    task ``completed`` (or ``cancelled``) would report an outcome the ledger contradicts."""
    from state.errors import Refused
    from workflow import guards

    store, cp = _task(state_dir)
    approved = cp.model_copy(update={"decisions": [_decision(cp.pending[0], "blog")]})
    with pytest.raises(Refused, match="approved, but the tool left no ledger entry"):
        guards.outcome(store, approved, "done")


def test_outcome_refuses_a_rejected_call_that_has_a_ledger_entry(state_dir):
    """Why: an executed action is never cancelled: a rejected call with an entry is a
    contradiction a human must check."""
    from state.errors import Refused
    from workflow import guards

    store, cp = _task(state_dir)
    store.ledger_record(key=KEY, task_id=KEY, action="publish_draft", title=TITLE, content_sha256=cp.content_sha256)
    rejected = cp.model_copy(update={"decisions": [_decision(cp.pending[0], "blog", "rejected")]})
    with pytest.raises(Refused, match="rejected, but the ledger shows it executed"):
        guards.outcome(store, rejected, "done")
    approved = cp.model_copy(update={"decisions": [_decision(cp.pending[0], "blog")]})
    assert guards.outcome(store, approved, "done")["status"] == "completed"


def test_outcome_checks_the_ledger_of_every_channel_not_only_the_first(state_dir):
    """Why: each channel is its own effect: with blog published as approved, an approved news call
    without its entry, or a rejected news call with one, is a contradiction all the same."""
    from state.errors import Refused
    from workflow import guards

    store, cp = _task(state_dir, ["blog", "news"])
    blog, news = _call(cp, "blog"), _call(cp, "news")
    store.ledger_record(key=f"{KEY}#blog", task_id=KEY, action="publish_draft", title=TITLE,
                        content_sha256=cp.content_sha256, channel="blog", approval="human")
    both = cp.model_copy(update={"decisions": [_decision(blog, "blog"), _decision(news, "news")]})
    with pytest.raises(Refused, match="approved, but the tool left no ledger entry"):
        guards.outcome(store, both, "done")
    store.ledger_record(key=f"{KEY}#news", task_id=KEY, action="publish_draft", title=TITLE,
                        content_sha256=cp.content_sha256, channel="news", approval="human")
    assert guards.outcome(store, both, "done")["status"] == "completed"
    rejected = cp.model_copy(update={"decisions": [_decision(blog, "blog"), _decision(news, "news", "rejected")]})
    with pytest.raises(Refused, match="rejected, but the ledger shows it executed"):
        guards.outcome(store, rejected, "done")


@pytest.mark.parametrize("channels, key", [(["blog"], KEY), (["blog", "news"], f"{KEY}#news")])
def test_start_refuses_a_key_whose_effect_is_already_in_the_ledger(state_dir, channels, key):
    """Why: a checkpoint lost or deleted does not undo an effect; a new task under a key (or a
    channel's key) the ledger already holds would look unpublished, and its approve would be
    judged against another draft's entry."""
    from state.errors import Refused
    from state.files.ledger import Ledger
    from workflow import guards
    from state.store import FileStore

    store = FileStore(state_dir)
    assert guards.existing_task(store, KEY, TITLE, _sha(), channels, "publish_draft") is None
    Ledger(state_dir / "ledger").record(key=key, task_id=KEY, action="publish_draft", title=TITLE,
           content_sha256=_sha(),
                                        **({"channel": "news", "approval": "human"} if "#" in key else {}))
    with pytest.raises(Refused) as refused:
        guards.existing_task(store, KEY, TITLE, _sha(), channels, "publish_draft")
    assert refused.value.code == "executed"


@pytest.mark.parametrize("channels, scope", [(["blog"], None), (["blog", "news"], "news")])
def test_start_refuses_a_key_rejected_before_on_any_of_its_channels(state_dir, channels, scope):
    """Why: a reject outlives the checkpoint it was recorded with; a new task under the key would
    ask again for what a human refused, on that channel as on a one-channel task."""
    from conftest import remove_checkpoint
    from state.errors import Refused
    from workflow import guards
    from state.store import FileStore

    store, cp = _task(state_dir, channels)
    call = _call(cp, scope or "blog")
    store.rejection_record(KEY, cp.content_sha256, _decision(call, scope or "blog", "rejected"), scope)
    remove_checkpoint(state_dir, KEY)  # lost: the rejection record stays
    with pytest.raises(Refused) as refused:
        guards.existing_task(FileStore(state_dir), KEY, TITLE, _sha(), channels, "publish_draft")
    assert refused.value.code == "rejected"


def test_preflight_refuses_a_reviewer_name_or_reason_holding_a_secret(state_dir, monkeypatch):
    """Why: the preflight is every decision path's first step (the command line and the inbox);
    a reviewer name is an open field (it cannot be redacted) and is refused there, before the lock."""
    from state.errors import Refused
    from workflow import reconcile

    store, _ = _task(state_dir)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    assert reconcile.preflight(store, KEY, "approve", by="alice")[1].kind == "run"
    with pytest.raises(Refused, match="the reviewer name contains the value of OPENAI_API_KEY") as refused:
        reconcile.preflight(store, KEY, "approve", by=f"x{SECRET}")
    assert refused.value.code == "secret"
    with pytest.raises(Refused, match="the reason contains the value of OPENAI_API_KEY"):
        reconcile.preflight(store, KEY, "reject", by="alice", reason=SECRET)


# -- secrets (state/secrets.py) -----------------------------------------------------------------------

SECRET = 'sk-te"st-\u00e9-0123456789'


def test_a_secret_escaped_twice_is_found(monkeypatch):
    """Why: call arguments are JSON text stored inside the RunState's JSON text, so a secret the
    model echoed into them is escaped twice; one level less searched would save it."""
    from state import secrets

    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    twice = json.dumps(json.dumps({"m": SECRET}, ensure_ascii=False), ensure_ascii=False)[1:-1]
    assert SECRET not in twice and json.dumps(SECRET, ensure_ascii=False)[1:-1] not in twice
    out = secrets.redact({"task_id": KEY, "title": f"x {twice} y"}, secrets.LEDGER, what="entry")
    assert out["title"] == "[redacted]"


def test_a_secret_escaped_with_unicode_escapes_is_found(monkeypatch):
    """Why: ``json.dumps`` writes non-ASCII as ``\\u00e9`` by default; that form holds the secret too."""
    from state import secrets

    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    once = json.dumps({"m": SECRET})  # ensure_ascii=True
    assert "\\u00e9" in once
    out = secrets.redact({"task_id": KEY, "title": once}, secrets.LEDGER, what="entry")
    assert out["title"] == "[redacted]"
    twice = json.dumps(once)
    assert secrets.redact({"title": twice}, secrets.LEDGER, what="entry")["title"] == "[redacted]"


def test_a_secret_in_an_open_field_refuses_and_in_free_text_is_replaced(monkeypatch):
    """Why: open fields bind data (a call id) and cannot be altered; free text is replaced whole."""
    from state import secrets
    from state.errors import Refused

    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    with pytest.raises(Refused, match="field call_id holds the value of OPENAI_API_KEY"):
        secrets.redact({"call_id": f"c-{SECRET}"}, secrets.REJECTION, what="record")
    assert secrets.redact({"reason": f"r {SECRET}"}, secrets.REJECTION, what="record") == {
        "reason": "[redacted]"}
    with pytest.raises(Refused, match="contains the value of OPENAI_API_KEY"):
        secrets.check_input("the reason", f"see {SECRET}")


def test_rejection_record_never_holds_a_secret(state_dir, monkeypatch):
    """Why: a reviewer's reason may quote the API key; the record lives outside the checkpoint,
    so it is redacted on its own way to disk: a reason holding it is stored ``[redacted]``, a
    reviewer name holding it refuses before the file exists."""
    from state.files import rejections
    from state.errors import Refused

    store, cp = _task(state_dir)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    call = cp.pending[0]
    rec = _decision(call, "blog", "rejected").model_copy(update={"reason": f"leaked {SECRET}"})
    stored, created = store.rejection_record(KEY, cp.content_sha256, rec)
    assert created and stored.reason == "[redacted]"
    assert b"st-" not in rejections.path_for(store, KEY).read_bytes()  # no part of the secret
    rejections.remove(store, KEY)
    with pytest.raises(Refused, match="field by holds the value of OPENAI_API_KEY"):
        store.rejection_record(KEY, cp.content_sha256, rec.model_copy(update={"by": SECRET}))
    assert not rejections.path_for(store, KEY).exists()


# -- the stored RunState (workflow/trust.py) ----------------------------------------------------------

def _approvals(call_id: str, kind: str = "approved") -> dict[str, Any]:
    return {"context": {"approvals": {"publish_draft": {"approved": [call_id] if kind == "approved" else [],
                                                        "rejected": [call_id] if kind == "rejected" else []}}}}


def test_run_state_approval_must_match_the_recorded_kind(state_dir):
    """Why: a RunState may carry only approvals our decision path recorded, with their kind: an
    approval where a reject is recorded (or none) is a hand edit the SDK would run."""
    from state.errors import Refused
    from workflow.trust import check_approvals

    _, cp = _task(state_dir)
    call = cp.pending[0]
    approved = cp.model_copy(update={"decisions": [_decision(call, "blog")]})
    check_approvals(_approvals(call.call_id), approved)
    rejected = cp.model_copy(update={"decisions": [_decision(call, "blog", "rejected")]})
    with pytest.raises(Refused, match="not recorded through our decision path"):
        check_approvals(_approvals(call.call_id), rejected)
    with pytest.raises(Refused, match="not recorded through our decision path"):
        check_approvals(_approvals(call.call_id), cp)


def test_run_state_blanket_approval_needs_a_recorded_sticky_decision(state_dir):
    """Why: ``approved: true`` is the SDK's sticky rule: every later call runs without a pause; only
    a human's recorded ``--always`` may put it there."""
    from state.errors import Refused
    from workflow.trust import check_approvals

    _, cp = _task(state_dir)
    call = cp.pending[0]
    once = cp.model_copy(update={"decisions": [_decision(call, "blog")]})
    blanket = {"context": {"approvals": {"publish_draft": {"approved": True, "rejected": []}}}}
    with pytest.raises(Refused, match="blanket 'approved' decision"):
        check_approvals(blanket, once)


def test_run_state_approval_with_edits_is_a_rejection_in_the_run_state(state_dir):
    """Why: an approval with edits answers its call with a rejection message; the RunState may
    therefore hold that call only as rejected, never approved."""
    from state.errors import Refused
    from state.schema import Edits
    from workflow.trust import check_approvals

    _, cp = _task(state_dir)
    call = cp.pending[0]
    edits = Edits(content={"title": TITLE, "body": "Edited."}, original={"title": TITLE, "body": DRAFT},
                  original_sha256=_sha(), edited_sha256=_sha(TITLE, "Edited."))
    edited = cp.model_copy(update={"decisions": [_decision(call, "blog", edits=edits)]})
    check_approvals(_approvals(call.call_id, "rejected"), edited)
    with pytest.raises(Refused, match="not recorded through our decision path"):
        check_approvals(_approvals(call.call_id), edited)


def test_run_state_hidden_approvals_are_found_in_nested_run_states():
    """Why: the SDK runs a call approved in a nested agent-as-tool RunState without anyone calling
    approve; only the user context payload is skipped."""
    from workflow.trust import hidden_approvals

    nested = {"context": {"approvals": {}},
              "last_processed_response": {"functions": [{"agent_run_state": {"context": {
                  "function_tool_approvals": [{"decision": {"approved": ["c"]}}]}}}]}}
    assert hidden_approvals(nested) == [
        "$.last_processed_response.functions[0].agent_run_state.context.function_tool_approvals"]
    payload = {"context": {"approvals": {}, "context": {"approvals": {"x": 1}}}}
    assert hidden_approvals(payload) == []


def test_carries_the_draft_checks_content_and_channel():
    """Why: a pending call is the task's only if it carries the draft as given on one of its
    channels; another channel or other text is a different action (key/action mismatch)."""
    from workflow.trust import carries_the_draft

    args = {"title": TITLE, "body": DRAFT}
    assert carries_the_draft({**args, "channel": "blog"}, _sha(), ["blog", "news"])
    assert not carries_the_draft({**args, "channel": "other"}, _sha(), ["blog", "news"])
    assert not carries_the_draft(args, _sha(), ["blog", "news"])  # several: must name one
    assert carries_the_draft(args, _sha(), ["blog"])
    assert not carries_the_draft({**args, "body": "x"}, _sha(), ["blog"])
    assert not carries_the_draft({**args, "extra": 1}, _sha(), ["blog"])


# -- several calls and edits (workflow/calls.py, workflow/edits.py) ----------------------------------

def test_sticky_decisions_cover_only_undecided_calls_of_the_same_tool(state_dir):
    """Why: a sticky rule decides what the SDK will decide by it; a call already decided keeps its
    own decision (an explicit decision beats the rule)."""
    from workflow import calls

    _, cp = _task(state_dir, ["blog", "news"])
    blog, news = _call(cp, "blog"), _call(cp, "news")
    rec = _decision(blog, "blog").model_copy(update={"always": True})
    made = calls.sticky_decisions(cp, rec)
    assert [(d.call_id, d.source, d.decision) for d in made] == [(news.call_id, "sticky", "approved")]
    decided = cp.model_copy(update={"decisions": [_decision(news, "news", "rejected")]})
    assert calls.sticky_decisions(decided, rec) == []
    assert calls.sticky_decisions(cp, _decision(blog, "blog")) == []  # not sticky: nothing more


def test_unapplied_replays_every_recorded_decision_of_a_pending_call(state_dir):
    """Why: a decision recorded before a crash (a person's, or one that ``--always`` made for
    another call pending then) must be given to the SDK again on the next resume, each for its own
    call, or the recorded decision and the run would disagree; a call no longer pending gets none."""
    from workflow import calls

    _, cp = _task(state_dir, ["blog", "news"])
    blog, news = _call(cp, "blog"), _call(cp, "news")
    one = _decision(news, "news", "rejected")
    by_rule = _decision(blog, "blog").model_copy(update={"source": "sticky"})
    both = cp.model_copy(update={"decisions": [one, by_rule]})
    assert [d.call_id for d in calls.unapplied(both)] == [news.call_id, blog.call_id]
    left = both.model_copy(update={"pending": [p for p in cp.pending if p.call_id == news.call_id]})
    assert [d.call_id for d in calls.unapplied(left)] == [news.call_id]


def test_complying_call_must_carry_exactly_the_edited_draft(state_dir):
    """Why: the model's new call is approved for the reviewer only if it carries exactly what the
    reviewer approved with edits; anything else waits for a fresh human decision."""
    from state.schema import Edits, PendingCall
    from workflow import edits as ed

    _, cp = _task(state_dir)
    call = cp.pending[0]
    edits = Edits(content={"title": TITLE, "body": "Edited."}, original={"title": TITLE, "body": DRAFT},
                  original_sha256=_sha(), edited_sha256=_sha(TITLE, "Edited."))
    rec = _decision(call, "blog", edits=edits)
    good = PendingCall(call_id="c2", tool="publish_draft", arguments={"title": TITLE, "body": "Edited."})
    bad = PendingCall(call_id="c3", tool="publish_draft", arguments={"title": TITLE, "body": "Other."})
    cp2 = cp.model_copy(update={"decisions": [rec], "pending": [good, bad]})
    assert [c for c, _ in ed.complying(cp2)] == ["c2"]
    with pytest.raises(Exception, match="not the content the reviewer approved with edits"):
        ed.check_pending(cp2, "c3", "approved", None)


def test_edits_do_not_go_with_a_sticky_approval(state_dir):
    """Why: a sticky approval runs the model's new call unpaused, so nobody would check it carries
    the edited draft."""
    from cli import hints
    from state.errors import Refused
    from workflow import edits as ed

    _, cp = _task(state_dir)
    call = cp.pending[0]
    sticky = _decision(call, "blog").model_copy(update={"always": True})
    with pytest.raises(Refused, match="sticky approval"):
        ed.check_sticky(cp.model_copy(update={"decisions": [sticky]}), "approved", ed.Edit(body="x"), False)
    with pytest.raises(Refused, match="do not go with") as exc:
        ed.with_edits(sticky, ed.Edit(body="x"), json.dumps(call.arguments))
    assert hints.text(exc.value) == "--edit-title/--edit-body decide one call: they do not go with --always"


def test_a_writer_that_read_before_a_restore_cannot_write_over_it(state_dir):
    """Why: the compare of the newest revision (its number and its MAC) before the exclusive
    create. Restoring a task from a backup removes the newer revision files (docs/checkpoint.md),
    so their names are free again: a writer that read the task before the restore must not put its
    stale view on top of the restored one, nor on top of a new revision with the same number that
    another writer made since (only the MAC tells those apart)."""
    from conftest import restore_checkpoint
    from state.errors import Refused

    store, cp1 = _task(state_dir)
    backup = checkpoint_file(state_dir, KEY).read_bytes()  # revision 1
    call = cp1.pending[0]
    cp2 = _record(store, cp1, _decision(call, "blog", "rejected"))  # revision 2
    stale = store.load(KEY)  # a writer reads revision 2, then waits
    assert stale.revision == cp2.revision == 2
    restore_checkpoint(state_dir, KEY, backup)  # an operator puts revision 1 back
    with pytest.raises(Refused, match="changed on disk since it was read"):
        _record(store, stale, _decision(call, "blog"))
    assert store.load(KEY).revision == 1 and store.load(KEY).decisions == []
    again = _record(store, store.load(KEY), _decision(call, "blog"))  # a new revision 2: approved
    assert again.revision == stale.revision and again.mac != stale.mac
    with pytest.raises(Refused, match="changed on disk since it was read"):  # same number, other content
        _record(store, stale, _decision(call, "blog", "rejected"))
    assert store.load(KEY).mac == again.mac


def test_a_sticky_decision_covers_only_calls_of_the_same_tool(state_dir):
    """Why: ``--always`` answers the other pending calls of the tool the reviewer decided; a call
    of another tool pending in the same turn was never shown under that decision."""
    from state.schema import PendingCall
    from workflow import calls

    _, cp = _task(state_dir, ["blog", "news"])
    blog, news = _call(cp, "blog"), _call(cp, "news")
    other = PendingCall(call_id="call_other", tool="send_summary", arguments={"to": "team"})
    cp2 = cp.model_copy(update={"pending": [blog, news, other]})
    rule = _decision(blog, "blog").model_copy(update={"always": True})
    assert [d.call_id for d in calls.sticky_decisions(cp2, rule)] == [news.call_id]
