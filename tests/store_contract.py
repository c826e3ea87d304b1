"""The conformance suite every :class:`state.store.TaskStore` must pass (docs/stores.md).

Not collected by itself (no ``test_`` prefix): a ``tests/test_*.py`` file imports these tests with
``from store_contract import *`` and defines a ``store_factory`` fixture returning a
:class:`StoreFactory` (one per store: the file store today, e.g. PostgreSQL next). Every test builds
a fresh, empty store with ``store_factory.make(tmp_path)``; the checkpoint bodies are real ones,
taken once from a task started with the offline model (:func:`template_body`). Offline and
deterministic: the lock test holds the lock in this thread and asks for it again from another one
with a short ``HITL_LOCK_TIMEOUT`` (no timing race: the holder never lets go during the wait).
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import pytest

from state.errors import Stopped
from state.schema import Checkpoint, Decision

__all__ = [
    "StoreFactory", "template_body", "store",
    "test_it_is_a_task_store", "test_load_of_a_missing_task_stops", "test_save_creates_exclusively",
    "test_save_revision_bumps_the_revision_and_keeps_history",
    "test_stale_checkpoint_is_refused_and_nothing_changes", "test_checkpoints_sorted_by_task_id",
    "test_checkpoints_fail_closed_on_a_damaged_one", "test_ledger_records_once",
    "test_ledger_refuses_other_content", "test_ledger_entries_oldest_first",
    "test_rejection_record_is_idempotent",
    "test_rejection_remove", "test_task_lock_excludes_a_second_holder",
    "test_ledger_keeps_each_channel_apart", "test_rejection_records_are_per_channel",
    "test_ledger_keeps_the_first_result_and_the_action",
]


@dataclass(frozen=True)
class StoreFactory:
    """How the suite gets a store. ``make(tmp_path)`` returns a fresh, empty
    :class:`state.store.TaskStore`; ``damage(store, task_id)``, if given, corrupts the stored
    checkpoint of ``task_id`` behind the store's back (so that it no longer verifies); stores
    without such a hook skip the fail-closed test."""

    name: str
    make: Callable[[Path], Any]
    damage: Optional[Callable[[Any, str], None]] = None


_TEMPLATE: dict[str, Any] = {}


def template_body(task_id: str) -> dict[str, Any]:
    """A real revision-1 checkpoint body (no ``mac``, no ``state_id``) for ``task_id``: the first
    call starts one task with the offline model in a scratch file store, later calls reuse it."""
    if not _TEMPLATE:
        import tempfile

        from agent import application
        from state.store import FileStore

        with tempfile.TemporaryDirectory() as tmp:
            cp = asyncio.run(application.start(FileStore(Path(tmp) / "state"), task_id="template-1",
                                        title="Contract", draft="A draft for the store contract."))
        body = cp.body()
        body.pop("state_id", None)
        _TEMPLATE.update(body)
    return {**_TEMPLATE, "task_id": task_id, "idempotency_key": task_id}


def _decision(by: str = "alice", channel: str = "blog") -> Decision:
    return Decision(decision="rejected", by=by, at="2025-01-01T00:00:00Z", reason="no",
                    call_id="call-1", tool="publish_draft", arguments_sha256="0" * 64,
                    channel=channel, always=False, source="human")


@pytest.fixture
def store(store_factory: StoreFactory, tmp_path: Path) -> Any:
    """A fresh, empty store from the parametrized factory."""
    return store_factory.make(tmp_path)


def test_it_is_a_task_store(store):
    from state.store import TaskStore

    assert isinstance(store, TaskStore)


def test_load_of_a_missing_task_stops(store):
    assert store.exists("t-missing") is False
    with pytest.raises(Stopped):
        store.load("t-missing")


def test_save_creates_exclusively(store):
    first = store.save(template_body("t-1"), failpoint="test")
    assert isinstance(first, Checkpoint) and first.revision == 1 and store.exists("t-1")
    with pytest.raises(Stopped, match="created by another process"):
        store.save(template_body("t-1"), failpoint="test")
    assert store.load("t-1") == first


def test_save_revision_bumps_the_revision_and_keeps_history(store):
    cp = store.save(template_body("t-1"), failpoint="test")
    new = store.save_revision(cp, failpoint="test", event=("resumed", {"n": 1}), title="Renamed")
    assert (new.revision, new.title) == (2, "Renamed")
    assert [h.event for h in new.history] == [*(h.event for h in cp.history), "resumed"]
    assert new.history[-1].revision == 2
    assert store.load("t-1") == new


def test_stale_checkpoint_is_refused_and_nothing_changes(store):
    cp = store.save(template_body("t-1"), failpoint="test")
    new = store.save_revision(cp, failpoint="test", event=("resumed", {}))
    with pytest.raises(Stopped, match="changed"):
        store.save_revision(cp, failpoint="test", event=("interrupted", {}), title="lost update")
    with pytest.raises(Stopped):
        store.save(template_body("t-1"), failpoint="test", expect=cp)
    assert store.load("t-1") == new


def test_checkpoints_sorted_by_task_id(store):
    assert store.checkpoints() == []
    for task_id in ("t-b", "t-c", "t-a"):
        store.save(template_body(task_id), failpoint="test")
    assert [cp.task_id for cp in store.checkpoints()] == ["t-a", "t-b", "t-c"]


def test_checkpoints_fail_closed_on_a_damaged_one(store, store_factory):
    if store_factory.damage is None:
        pytest.skip(f"{store_factory.name}: no hook to damage a stored checkpoint")
    store.save(template_body("t-a"), failpoint="test")
    store.save(template_body("t-b"), failpoint="test")
    store_factory.damage(store, "t-b")
    with pytest.raises(Stopped):
        store.checkpoints()
    with pytest.raises(Stopped):
        store.load("t-b")
    assert store.load("t-a").task_id == "t-a"


def test_ledger_records_once(store):
    assert store.ledger_get("t-1") is None
    entry, created = store.ledger_record(key="t-1", task_id="t-1", action="publish_draft", title="T", content_sha256="a" * 64)
    assert created is True and entry.idempotency_key == "t-1"
    again, created = store.ledger_record(key="t-1", task_id="t-1", action="publish_draft", title="T", content_sha256="a" * 64)
    assert created is False and again == entry
    assert store.ledger_get("t-1") == entry


def test_ledger_keeps_the_first_result_and_the_action(store):
    """The effect gate answers a repeat with the first result: a store keeps ``result`` (any JSON
    value) and ``action`` exactly, never rewrites them, and refuses the key for another action."""
    result = {"sent_to": "ana@example.com", "n": [1, 2.5, None, True], "text": "é"}
    entry, created = store.ledger_record(key="m-1", task_id="m-1", title="T", content_sha256="a" * 64,
                                         channel="email", approval="human", action="send_email",
                                         result=result)
    assert created and (entry.action, entry.result) == ("send_email", result)
    again, created = store.ledger_record(key="m-1", task_id="m-1", title="T", content_sha256="a" * 64,
                                         channel="email", approval="human", action="send_email",
                                         result={"other": 1})
    assert not created and again.result == result and store.ledger_get("m-1").result == result
    with pytest.raises(Stopped, match="action"):
        store.ledger_record(key="m-1", task_id="m-1", title="T", content_sha256="a" * 64,
                            channel="email", approval="human", action="refund")
    plain, _ = store.ledger_record(key="p-1", task_id="p-1", action="publish_draft", title="T",
                                   content_sha256="a" * 64)
    assert (plain.action, plain.result) == ("publish_draft", None)


def test_ledger_refuses_other_content(store):
    entry, _ = store.ledger_record(key="t-1", task_id="t-1", action="publish_draft", title="T", content_sha256="a" * 64)
    with pytest.raises(Stopped):
        store.ledger_record(key="t-1", task_id="t-1", action="publish_draft", title="T", content_sha256="b" * 64)
    assert store.ledger_get("t-1") == entry


def test_ledger_entries_oldest_first(store, monkeypatch):
    from datetime import datetime, timedelta, timezone

    from state import clock

    assert store.ledger_entries() == []
    made = []
    start = datetime(2025, 1, 1, tzinfo=timezone.utc)
    for n, key in enumerate(("t-b", "t-a", "t-c")):  # recorded a second apart, not in key order
        monkeypatch.setattr(clock, "wall", lambda n=n: start + timedelta(seconds=n))
        made.append(store.ledger_record(key=key, task_id=key, action="publish_draft", title="T", content_sha256="a" * 64)[0])
    assert [e.idempotency_key for e in store.ledger_entries()] == ["t-b", "t-a", "t-c"]
    assert store.ledger_entries() == made


def test_rejection_record_is_idempotent(store):
    assert store.rejection_get("t-1") is None
    rec, created = store.rejection_record("t-1", "a" * 64, _decision("alice"))
    assert created is True and (rec.task_id, rec.by) == ("t-1", "alice")
    again, created = store.rejection_record("t-1", "a" * 64, _decision("bob"))
    assert created is False and again == rec  # the first reviewer stays on record
    with pytest.raises(Stopped):
        store.rejection_record("t-1", "b" * 64, _decision("carol"))
    assert store.rejection_get("t-1") == rec


def test_rejection_remove(store):
    store.rejection_remove("t-1")  # none: nothing to do
    store.rejection_record("t-1", "a" * 64, _decision())
    store.rejection_remove("t-1")
    assert store.rejection_get("t-1") is None


def test_ledger_keeps_each_channel_apart(store):
    """A task with several channels: one entry per ``<task>#<channel>`` key, carrying task_id,
    channel and approval; recording one channel never creates or blocks another."""
    blog, created = store.ledger_record(key="t-1#blog", task_id="t-1", action="publish_draft", title="T",
                                        content_sha256="a" * 64, channel="blog", approval="human")
    assert created and (blog.task_id, blog.channel, blog.approval) == ("t-1", "blog", "human")
    assert store.ledger_get("t-1#news") is None and store.ledger_get("t-1") is None
    preview, created = store.ledger_record(key="t-1#preview", task_id="t-1", action="publish_draft", title="T",
                                           content_sha256="a" * 64, channel="preview",
                                           approval="not_needed")
    assert created and preview.approval == "not_needed"
    assert store.ledger_get("t-1#blog") == blog
    with pytest.raises(Stopped):  # a key naming another channel than the entry says
        store.ledger_record(key="t-1#blog", task_id="t-1", action="publish_draft", title="T", content_sha256="a" * 64,
                            channel="news")


def test_rejection_records_are_per_channel(store):
    rec, created = store.rejection_record("t-1", "a" * 64, _decision("alice", "news"), channel="news")
    assert created and rec.channel == "news"
    assert store.rejection_get("t-1") is None and store.rejection_get("t-1", channel="blog") is None
    assert store.rejection_get("t-1", channel="news") == rec
    store.rejection_remove("t-1", channel="news")
    assert store.rejection_get("t-1", channel="news") is None


def test_task_lock_excludes_a_second_holder(store, monkeypatch):
    monkeypatch.setenv("HITL_LOCK_TIMEOUT", "0.2")
    outcome: list[str] = []

    def second() -> None:
        try:
            with store.task_lock("t-1"):
                outcome.append("acquired")
        except Stopped as exc:
            outcome.append(f"stopped: {exc}")

    with store.task_lock("t-1"):
        waiter = threading.Thread(target=second)
        waiter.start()
        waiter.join(timeout=30)
    assert len(outcome) == 1 and outcome[0].startswith("stopped: "), outcome
    with store.task_lock("t-1"):  # released: free again
        pass
    with store.task_lock("t-2"):  # and per task: another task's lock is independent
        with store.task_lock("t-3"):
            pass
