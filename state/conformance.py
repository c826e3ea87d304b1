"""The conformance suite every :class:`state.store.TaskStore` must pass (docs/stores.md).

A store conforms when it passes these tests unchanged. They are plain functions named ``test_*``
taking ``store_factory`` (a :class:`StoreFactory`) and ``tmp_path`` (a fresh, empty folder), so
pytest collects them from any test module that imports them and defines a ``store_factory``
fixture; this module itself never imports pytest (any runner can call them)::

    # tests/test_my_store.py
    import pytest
    from state.conformance import *  # noqa: F401,F403  (the suite's tests, collected here)
    from state.conformance import StoreFactory

    @pytest.fixture
    def store_factory():
        return StoreFactory("mine", make=lambda tmp: MyStore(tmp / "state"))

Every test builds a fresh, empty store with ``store_factory.make(tmp_path)``. The checkpoint
bodies are :func:`sample_body`: a complete envelope written in the oldest schema version this
program reads and brought to the current one by :data:`state.schema.MIGRATIONS`, so they stay
valid as the schema grows. No SDK, no network, no clock: deterministic. The lock test holds the
lock in this thread and asks for it from another one with a timeout of 0.2 s (no timing race: the
holder never lets go during the wait); the intent race starts 8 threads at one barrier. A test that
cannot apply to a store raises :class:`unittest.SkipTest` (pytest reports it as skipped).
"""

from __future__ import annotations

import re
import secrets
import threading
import unittest
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from state.errors import Refused
from state.revisions import every_checkpoint
from state.schema import Checkpoint, Decision, migrate

__all__ = [
    "StoreFactory", "sample_body",
    "test_it_is_a_task_store", "test_load_of_a_missing_task_stops", "test_save_creates_exclusively",
    "test_save_revision_bumps_the_revision_and_keeps_history",
    "test_stale_checkpoint_is_refused_and_nothing_changes", "test_checkpoints_sorted_by_task_id",
    "test_checkpoints_fail_closed_on_a_damaged_one", "test_ledger_records_once",
    "test_ledger_refuses_other_content", "test_ledger_entries_oldest_first",
    "test_ledger_keeps_the_first_result_and_the_action",
    "test_rejection_record_is_idempotent",
    "test_rejection_remove", "test_task_lock_excludes_a_second_holder",
    "test_task_lock_without_waiting_refuses_a_second_holder_at_once_even_in_its_own_thread",
    "test_ledger_keeps_each_channel_apart", "test_rejection_records_are_per_channel",
    "test_inspect_lists_each_task_under_its_lock",
    "test_ledger_keeps_who_settled_it", "test_intent_is_created_once",
    "test_intent_get_gives_the_latest_attempt", "test_next_attempt_needs_a_settlement",
    "test_settlement_needs_an_intent_and_is_created_once", "test_intents_latest_per_key_oldest_first",
    "test_intent_key_must_be_its_task", "test_racing_intents_create_one",
    "test_the_reviewer_list_is_versioned_and_changed_by_compare_and_swap",
    "test_an_older_reviewer_list_put_back_is_refused",
    "test_another_deployments_key_cannot_read_or_change_the_reviewer_list",
    "test_records_that_decide_an_effect_are_read_only_if_they_verify",
    "test_policy_versions_only_grow_and_every_version_stays_readable", "test_racing_policy_sets_store_one_version",
]


@dataclass(frozen=True)
class StoreFactory:
    """How the suite gets a store. ``make(folder)`` returns a fresh, empty
    :class:`state.store.TaskStore` whose state dir (signing key, traces) is below ``folder``;
    ``make`` called again with the same folder gives another handle on the same storage (as a
    second process would: the race test uses one per thread); ``damage(store, task_id)``, if
    given, corrupts the stored checkpoint of ``task_id`` behind the store's back (so that it no
    longer verifies); a store without such a hook skips the fail-closed test.
    ``read_reviewers(store, version)`` and ``write_reviewers(store, version, data)``, if given,
    read and replace, behind the store's back, the stored form of version ``version`` of the
    reviewer list (:mod:`state.reviewers`: the signed envelope as a dict); ``data`` None removes
    that version, as a restore of an older backup would.
    ``read_record(store, kind, key)`` and ``write_record(store, kind, key, data)``, if given, read
    and replace, behind the store's back, the stored form of a record that decides an effect
    (:mod:`state.record_seal`: ``kind`` ``ledger_entry``, ``effect_intent``, ``settlement``,
    ``rejection`` or ``policy``; ``key`` ``(idempotency_key,)``, ``(idempotency_key, attempt)``,
    ``(task_id, channel)`` or ``(version,)``): the signed envelope as a dict, or, written without
    ``mac``, the plain fields an earlier version kept. ``make_other(folder)``: a fresh, empty store
    of *other* storage (another state dir, another database) on this machine; default ``make``.
    ``another_key()``: a context manager in which this process signs with another signing key than
    the store's (another deployment's machine, e.g. another ``HITL_SIGNING_KEY``)."""

    name: str
    make: Callable[[Path], Any]
    damage: Optional[Callable[[Any, str], None]] = None
    read_reviewers: Optional[Callable[[Any, int], dict[str, Any]]] = None
    write_reviewers: Optional[Callable[[Any, int, Optional[dict[str, Any]]], None]] = None
    read_record: Optional[Callable[[Any, str, tuple[Any, ...]], dict[str, Any]]] = None
    write_record: Optional[Callable[[Any, str, tuple[Any, ...], dict[str, Any]], None]] = None
    make_other: Optional[Callable[[Path], Any]] = None
    another_key: Optional[Callable[[], Any]] = None


_AT = "2100-01-01T00:00:00.000000Z"
_SHA = "0" * 64
#: A checkpoint of schema version 1 (one call waiting for approval), without ``mac`` and
#: ``state_id``: what :func:`sample_body` migrates to the current version.
_V1: dict[str, Any] = {
    "schema_version": 1, "task_id": "", "idempotency_key": "", "action": "publish_draft",
    "title": "Contract", "content_sha256": _SHA, "status": "waiting_for_approval",
    "decision": None, "decisions": [],
    "pending": [{"call_id": "call-1", "tool": "publish_draft",
                 "arguments": {"title": "Contract", "body": "A draft for the store contract."}}],
    "final_output": None, "revision": 1, "sdk_version": "0.24.0", "run_state_schema_version": "1.21",
    "agent": {"name": "Contract", "instructions_sha256": _SHA,
              "tools": {"publish_draft": {"position": 0, "schema_sha256": _SHA, "needs_approval": True}}},
    "run_state": '{"$schemaVersion": "1.21"}',
    "history": [{"at": _AT, "event": "started", "revision": 1, "detail": {}}],
    "created_at": _AT, "updated_at": _AT, "expires_at": None, "approval_ttl_s": 3600,
    "model": {"name": "offline", "api": "offline", "base_url": None},
    "budget": {"max_turns": 6, "max_tokens": 20000, "max_cost_usd": 0.05,
               "price_in_per_mtok": None, "price_out_per_mtok": None},
    "spend": {"turns": 1, "requests": 1, "input_tokens": 0, "output_tokens": 0,
              "total_tokens": 0, "cost_usd": 0.0},
}


def sample_body(task_id: str) -> dict[str, Any]:
    """A complete revision-1 checkpoint body of the current schema version (no ``mac``, no
    ``state_id``) for ``task_id``, ready for ``store.save``. The stores never run the RunState it
    carries; they only sign, keep and verify it."""
    return migrate({**_V1, "task_id": task_id, "idempotency_key": task_id})


def _decision(by: str = "alice", channel: str = "blog") -> Decision:
    return Decision(decision="rejected", by=by, at="2025-01-01T00:00:00Z", reason="no",
                    call_id="call-1", tool="publish_draft", arguments_sha256="0" * 64,
                    channel=channel, always=False, source="human")


@contextmanager
def _raises(kind: type[BaseException], match: Optional[str] = None, *,
            code: Optional[str] = None) -> Iterator[None]:
    """Fail unless the block raises ``kind`` (whose message matches the regex ``match``, and whose
    :attr:`state.errors.Refused.code` is ``code``)."""
    try:
        yield
    except kind as exc:
        if match is not None and not re.search(match, str(exc)):
            raise AssertionError(f"{type(exc).__name__} {str(exc)!r} does not match {match!r}") from exc
        if code is not None and getattr(exc, "code", None) != code:
            raise AssertionError(f"{type(exc).__name__} has code {getattr(exc, 'code', None)!r}, "
                                 f"not {code!r}") from exc
        return
    raise AssertionError(f"{kind.__name__} was not raised")


def test_it_is_a_task_store(store_factory: StoreFactory, tmp_path: Path) -> None:
    """The store implements the whole :class:`state.store.TaskStore` Protocol itself."""
    from state.store import TaskStore

    assert isinstance(store_factory.make(tmp_path), TaskStore)


def test_load_of_a_missing_task_stops(store_factory: StoreFactory, tmp_path: Path) -> None:
    """A task that is not there: ``exists`` is False and ``load`` refuses."""
    store = store_factory.make(tmp_path)
    assert store.exists("t-missing") is False
    with _raises(Refused, code="not_found"):
        store.load("t-missing")


def test_save_creates_exclusively(store_factory: StoreFactory, tmp_path: Path) -> None:
    """``save`` without ``expect`` creates a task once; a second create is refused."""
    store = store_factory.make(tmp_path)
    first = store.save(sample_body("t-1"), failpoint="test")
    assert isinstance(first, Checkpoint) and first.revision == 1 and store.exists("t-1")
    with _raises(Refused, match="created by another process", code="stale_revision"):
        store.save(sample_body("t-1"), failpoint="test")
    assert store.load("t-1") == first


def test_save_revision_bumps_the_revision_and_keeps_history(store_factory: StoreFactory, tmp_path: Path) -> None:
    """The next revision: one more, the change applied, one history event appended."""
    store = store_factory.make(tmp_path)
    cp = store.save(sample_body("t-1"), failpoint="test")
    new = store.save_revision(cp, failpoint="test", event=("resumed", {"n": 1}), title="Renamed")
    assert (new.revision, new.title) == (2, "Renamed")
    assert [h.event for h in new.history] == [*(h.event for h in cp.history), "resumed"]
    assert new.history[-1].revision == 2
    assert store.load("t-1") == new


def test_stale_checkpoint_is_refused_and_nothing_changes(store_factory: StoreFactory, tmp_path: Path) -> None:
    """Compare-and-swap: a write after a stale checkpoint is refused and changes nothing."""
    store = store_factory.make(tmp_path)
    cp = store.save(sample_body("t-1"), failpoint="test")
    new = store.save_revision(cp, failpoint="test", event=("resumed", {}))
    with _raises(Refused, match="changed", code="stale_revision"):
        store.save_revision(cp, failpoint="test", event=("interrupted", {}), title="lost update")
    with _raises(Refused):
        store.save(sample_body("t-1"), failpoint="test", expect=cp)
    assert store.load("t-1") == new


def test_checkpoints_sorted_by_task_id(store_factory: StoreFactory, tmp_path: Path) -> None:
    """``scan`` lists every task, sorted by task ID (:func:`state.revisions.every_checkpoint`)."""
    store = store_factory.make(tmp_path)
    assert every_checkpoint(store) == []
    for task_id in ("t-b", "t-c", "t-a"):
        store.save(sample_body(task_id), failpoint="test")
    assert [cp.task_id for cp in every_checkpoint(store)] == ["t-a", "t-b", "t-c"]


def test_checkpoints_fail_closed_on_a_damaged_one(store_factory: StoreFactory, tmp_path: Path) -> None:
    """A checkpoint damaged behind the store's back stops the listing and its load, not the others."""
    store = store_factory.make(tmp_path)
    if store_factory.damage is None:
        raise unittest.SkipTest(f"{store_factory.name}: no hook to damage a stored checkpoint")
    store.save(sample_body("t-a"), failpoint="test")
    store.save(sample_body("t-b"), failpoint="test")
    store_factory.damage(store, "t-b")
    with _raises(Refused):
        every_checkpoint(store)
    with _raises(Refused):
        store.load("t-b")
    assert store.load("t-a").task_id == "t-a"


def test_ledger_records_once(store_factory: StoreFactory, tmp_path: Path) -> None:
    """The same key and content twice: one entry, the first returned."""
    store = store_factory.make(tmp_path)
    assert store.ledger_get("t-1") is None
    entry, created = store.ledger_record(key="t-1", task_id="t-1", action="publish_draft", title="T",
                                         content_sha256="a" * 64)
    assert created is True and entry.idempotency_key == "t-1"
    again, created = store.ledger_record(key="t-1", task_id="t-1", action="publish_draft", title="T",
                                         content_sha256="a" * 64)
    assert created is False and again == entry
    assert store.ledger_get("t-1") == entry


def test_ledger_keeps_the_first_result_and_the_action(store_factory: StoreFactory, tmp_path: Path) -> None:
    """The effect gate answers a repeat with the first result: a store keeps ``result`` (any JSON
    value) and ``action`` exactly, never rewrites them, and refuses the key for another action."""
    store = store_factory.make(tmp_path)
    result = {"sent_to": "ana@example.com", "n": [1, 2.5, None, True], "text": "é"}
    entry, created = store.ledger_record(key="m-1", task_id="m-1", title="T", content_sha256="a" * 64,
                                         channel="email", approval="human", action="send_email",
                                         result=result)
    assert created and (entry.action, entry.result) == ("send_email", result)
    again, created = store.ledger_record(key="m-1", task_id="m-1", title="T", content_sha256="a" * 64,
                                         channel="email", approval="human", action="send_email",
                                         result={"other": 1})
    assert not created and again.result == result and store.ledger_get("m-1").result == result
    with _raises(Refused, match="action", code="ledger_mismatch"):
        store.ledger_record(key="m-1", task_id="m-1", title="T", content_sha256="a" * 64,
                            channel="email", approval="human", action="refund")
    plain, _ = store.ledger_record(key="p-1", task_id="p-1", action="publish_draft", title="T",
                                   content_sha256="a" * 64)
    assert (plain.action, plain.result) == ("publish_draft", None)


def test_ledger_refuses_other_content(store_factory: StoreFactory, tmp_path: Path) -> None:
    """The same key with other content is refused; the first entry stays."""
    store = store_factory.make(tmp_path)
    entry, _ = store.ledger_record(key="t-1", task_id="t-1", action="publish_draft", title="T", content_sha256="a" * 64)
    with _raises(Refused):
        store.ledger_record(key="t-1", task_id="t-1", action="publish_draft", title="T", content_sha256="b" * 64)
    assert store.ledger_get("t-1") == entry


def test_ledger_entries_oldest_first(store_factory: StoreFactory, tmp_path: Path) -> None:
    """``ledger_entries`` is oldest first (by the time recorded), not by key."""
    store = store_factory.make(tmp_path)
    from datetime import datetime, timedelta, timezone

    from state import clock

    assert store.ledger_entries() == []
    made = []
    start = datetime(2025, 1, 1, tzinfo=timezone.utc)
    wall = clock.wall
    try:
        for n, key in enumerate(("t-b", "t-a", "t-c")):  # recorded a second apart, not in key order
            clock.wall = lambda n=n: start + timedelta(seconds=n)  # type: ignore[assignment]
            made.append(store.ledger_record(key=key, task_id=key, action="publish_draft", title="T",
                        content_sha256="a" * 64)[0])
    finally:
        clock.wall = wall  # type: ignore[assignment]
    assert [e.idempotency_key for e in store.ledger_entries()] == ["t-b", "t-a", "t-c"]
    assert store.ledger_entries() == made


def test_rejection_record_is_idempotent(store_factory: StoreFactory, tmp_path: Path) -> None:
    """A rejection record is made once: the first reviewer stays on record; other content is refused."""
    store = store_factory.make(tmp_path)
    assert store.rejection_get("t-1") is None
    rec, created = store.rejection_record("t-1", "a" * 64, _decision("alice"))
    assert created is True and (rec.task_id, rec.by) == ("t-1", "alice")
    again, created = store.rejection_record("t-1", "a" * 64, _decision("bob"))
    assert created is False and again == rec  # the first reviewer stays on record
    with _raises(Refused):
        store.rejection_record("t-1", "b" * 64, _decision("carol"))
    assert store.rejection_get("t-1") == rec


def test_rejection_remove(store_factory: StoreFactory, tmp_path: Path) -> None:
    """``rejection_remove`` deletes a record, and is a no-op without one."""
    store = store_factory.make(tmp_path)
    store.rejection_remove("t-1")  # none: nothing to do
    store.rejection_record("t-1", "a" * 64, _decision())
    store.rejection_remove("t-1")
    assert store.rejection_get("t-1") is None


def test_ledger_keeps_each_channel_apart(store_factory: StoreFactory, tmp_path: Path) -> None:
    """A task with several channels: one entry per ``<task>#<channel>`` key, carrying task_id,
    channel and approval; recording one channel never creates or blocks another."""
    store = store_factory.make(tmp_path)
    blog, created = store.ledger_record(key="t-1#blog", task_id="t-1", action="publish_draft", title="T",
                                        content_sha256="a" * 64, channel="blog", approval="human")
    assert created and (blog.task_id, blog.channel, blog.approval) == ("t-1", "blog", "human")
    assert store.ledger_get("t-1#news") is None and store.ledger_get("t-1") is None
    preview, created = store.ledger_record(key="t-1#preview", task_id="t-1", action="publish_draft", title="T",
                                           content_sha256="a" * 64, channel="preview",
                                           approval="not_needed")
    assert created and preview.approval == "not_needed"
    assert store.ledger_get("t-1#blog") == blog
    with _raises(Refused):  # a key naming another channel than the entry says
        store.ledger_record(key="t-1#blog", task_id="t-1", action="publish_draft", title="T", content_sha256="a" * 64,
                            channel="news")


def test_rejection_records_are_per_channel(store_factory: StoreFactory, tmp_path: Path) -> None:
    """A rejection record belongs to one (task, channel): another channel, or the task's
    one-channel record, is not it; removing it removes only it."""
    store = store_factory.make(tmp_path)
    rec, created = store.rejection_record("t-1", "a" * 64, _decision("alice", "news"), channel="news")
    assert created and rec.channel == "news"
    assert store.rejection_get("t-1") is None and store.rejection_get("t-1", channel="blog") is None
    assert store.rejection_get("t-1", channel="news") == rec
    store.rejection_remove("t-1", channel="news")
    assert store.rejection_get("t-1", channel="news") is None


def test_task_lock_excludes_a_second_holder(store_factory: StoreFactory, tmp_path: Path) -> None:
    """The task lock excludes a second holder (who waits its timeout, then is refused), is free
    again once released, and is per task."""
    store = store_factory.make(tmp_path)
    outcome: list[str] = []

    def second() -> None:
        try:
            with store.task_lock("t-1", timeout=0.2):
                outcome.append("acquired")
        except Refused as exc:
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


def test_task_lock_without_waiting_refuses_a_second_holder_at_once_even_in_its_own_thread(
        store_factory: StoreFactory, tmp_path: Path) -> None:
    """``task_lock(task_id, timeout=0)`` tries once: held by anyone, the same thread included, it
    is refused (``locked``) at once, never waited on or entered again. A coroutine's wait for the
    lock (``workflow.locking.task_lock``) rests on both: it tries without waiting and sleeps
    between tries, so that two decisions of one event loop take turns."""
    import time

    store = store_factory.make(tmp_path)
    with store.task_lock("t-1"):
        began = time.monotonic()
        try:
            with store.task_lock("t-1", timeout=0):
                raise AssertionError("a second holder entered the lock, in the holder's own thread")
        except Refused as exc:
            assert exc.code == "locked", exc
        assert time.monotonic() - began < 5, "timeout=0 waited"
    with store.task_lock("t-1", timeout=0):  # released: free again, at once
        pass


def test_inspect_lists_each_task_under_its_lock(store_factory: StoreFactory, tmp_path: Path) -> None:
    """For a store with the ``Inspectable`` capability (``doctor``): a consistent store lists each
    checkpoint once as a ``TaskCheck``, held under its task lock while it is being judged (another
    holder is refused meanwhile; the tasks are written under their lock, as the workflow writes
    them), no problem, and ``Counted`` last. Skipped for other stores."""
    from state.inspection import Counted, Problem, TaskCheck
    from state.store import Inspectable

    store = store_factory.make(tmp_path)
    if not isinstance(store, Inspectable):
        raise unittest.SkipTest(f"{store_factory.name}: not Inspectable")
    # Task IDs of this run only: a database's locks may be shared with other schemas, other runs.
    tasks = [f"t-{secrets.token_hex(4)}-{n}" for n in ("b", "a")]
    for task_id in tasks:
        with store.task_lock(task_id):  # as every write of the workflow is made
            store.save(sample_body(task_id), failpoint="test")
    seen: list[str] = []
    refused: list[bool] = []
    items = list(_each_held(store, seen, refused))
    assert sorted(seen) == sorted(tasks) and refused == [True, True]
    assert not any(isinstance(item, Problem) for item in items)
    assert isinstance(items[-1], Counted) and (items[-1].tasks, items[-1].ledger_entries) == (2, 0)
    assert sum(isinstance(item, TaskCheck) for item in items) == 2


def _each_held(store: Any, seen: list[str], refused: list[bool]) -> Iterator[Any]:
    """The records of ``store.inspect()``; for each task, whether another holder of its lock was
    refused while the record was held (recorded in ``refused``)."""
    from state.inspection import TaskCheck

    for item in store.inspect():
        if isinstance(item, TaskCheck):
            seen.append(item.checkpoint.task_id)
            outcome: list[bool] = []

            def second(task_id: str = item.checkpoint.task_id) -> None:
                try:
                    with store.task_lock(task_id, timeout=0.2):
                        outcome.append(False)
                except Refused:
                    outcome.append(True)

            waiter = threading.Thread(target=second)
            waiter.start()
            waiter.join(timeout=30)
            refused.append(outcome == [True])
        yield item


def _intent(key: str = "t-1", attempt: int = 1, *, task_id: str = "t-1", at: str = _AT,
            request_key: str = "0" * 32, channel: str = "blog") -> Any:
    from state.records import EffectIntent

    return EffectIntent(idempotency_key=key, attempt=attempt, task_id=task_id, channel=channel,
                        call_id="call-1", action="publish_draft", content_sha256="a" * 64,
                        request_key=request_key, service="https://publish.example/api",
                        deduplicates=True, at=at)


def _settlement(key: str = "t-1", attempt: int = 1, *, by: str = "alice", reason: Optional[str] = "not there",
                task_id: str = "t-1") -> Any:
    from state.records import Settlement

    return Settlement(idempotency_key=key, attempt=attempt, task_id=task_id, by=by, at=_AT,
                      reason=reason, source="human")


def test_ledger_keeps_who_settled_it(store_factory: StoreFactory, tmp_path: Path) -> None:
    """An entry a human settled keeps ``settled_by`` and ``settle_reason``; one without has neither."""
    store = store_factory.make(tmp_path)
    entry, created = store.ledger_record(key="t-1", task_id="t-1", action="publish_draft", title="T",
                                         content_sha256="a" * 64, settled_by="alice",
                                         settle_reason="seen on the site")
    assert created and (entry.settled_by, entry.settle_reason) == ("alice", "seen on the site")
    assert store.ledger_get("t-1") == entry
    plain, _ = store.ledger_record(key="t-2", task_id="t-2", action="publish_draft", title="T",
                                   content_sha256="a" * 64)
    assert (plain.settled_by, plain.settle_reason) == (None, None)
    assert store.ledger_get("t-2") == plain


def test_intent_is_created_once(store_factory: StoreFactory, tmp_path: Path) -> None:
    """An intent of one (key, attempt) is created once: a second one (even with another request
    key) is not written, and the first is returned with ``created`` False."""
    store = store_factory.make(tmp_path)
    assert store.intent_get("t-1") is None
    first, created = store.intent_record(_intent(request_key="1" * 32))
    assert created is True and first == _intent(request_key="1" * 32)
    again, created = store.intent_record(_intent(request_key="2" * 32))
    assert created is False and again == first
    assert store.intent_get("t-1") == first


def test_intent_get_gives_the_latest_attempt(store_factory: StoreFactory, tmp_path: Path) -> None:
    """``intent_get`` is the intent of the highest attempt of that key, and only of that key."""
    store = store_factory.make(tmp_path)
    store.intent_record(_intent(attempt=1))
    store.settlement_record(_settlement(attempt=1))
    second, _ = store.intent_record(_intent(attempt=2, request_key="2" * 32))
    assert store.intent_get("t-1") == second and second.attempt == 2
    assert store.intent_get("t-1#blog") is None and store.intent_get("t-2") is None


def test_next_attempt_needs_a_settlement(store_factory: StoreFactory, tmp_path: Path) -> None:
    """Attempt 2 is refused while attempt 1 has no settlement (it may have happened), and
    allowed once it has; attempt 3 needs attempt 2's settlement in turn."""
    store = store_factory.make(tmp_path)
    with _raises(Refused, match="never settled", code="ledger_mismatch"):
        store.intent_record(_intent(attempt=2))  # no attempt 1 at all
    store.intent_record(_intent(attempt=1))
    with _raises(Refused, match="never settled", code="ledger_mismatch"):
        store.intent_record(_intent(attempt=2))
    assert store.intent_get("t-1").attempt == 1
    store.settlement_record(_settlement(attempt=1))
    second, created = store.intent_record(_intent(attempt=2, request_key="2" * 32))
    assert created and second.attempt == 2
    with _raises(Refused, match="never settled", code="ledger_mismatch"):
        store.intent_record(_intent(attempt=3))


def test_settlement_needs_an_intent_and_is_created_once(store_factory: StoreFactory, tmp_path: Path) -> None:
    """A settlement of an attempt without an intent is refused; one with is created once (the
    first finder stays on record)."""
    store = store_factory.make(tmp_path)
    with _raises(Refused, match="no intent", code="ledger_mismatch"):
        store.settlement_record(_settlement())
    assert store.settlement_get("t-1", 1) is None
    store.intent_record(_intent())
    with _raises(Refused, match="no intent", code="ledger_mismatch"):
        store.settlement_record(_settlement(attempt=2))
    first, created = store.settlement_record(_settlement(by="alice"))
    assert created is True and first == _settlement(by="alice")
    again, created = store.settlement_record(_settlement(by="bob", reason=None))
    assert created is False and again == first
    assert store.settlement_get("t-1", 1) == first and store.settlement_get("t-1", 2) is None
    store.intent_record(_intent("t-2", task_id="t-2"))
    bare, _ = store.settlement_record(_settlement("t-2", task_id="t-2", reason=None))
    assert bare.reason is None and store.settlement_get("t-2", 1) == bare


def test_intents_latest_per_key_oldest_first(store_factory: StoreFactory, tmp_path: Path) -> None:
    """``intents`` lists the latest attempt of every key once, oldest first (by ``at``), not by key."""
    store = store_factory.make(tmp_path)
    assert store.intents() == []
    b, _ = store.intent_record(_intent("t-b", task_id="t-b", at="2100-01-01T00:00:03Z"))
    a, _ = store.intent_record(_intent("t-a#news", task_id="t-a", channel="news", at="2100-01-01T00:00:01Z"))
    c1, _ = store.intent_record(_intent("t-c", task_id="t-c", at="2100-01-01T00:00:00Z"))
    store.settlement_record(_settlement("t-c", task_id="t-c"))
    c2, _ = store.intent_record(_intent("t-c", 2, task_id="t-c", at="2100-01-01T00:00:02Z"))
    assert store.intents() == [a, c2, b]


def test_intent_key_must_be_its_task(store_factory: StoreFactory, tmp_path: Path) -> None:
    """An intent's key is its task or ``<task>#<channel>``: one for another task's key (or another
    channel's) cannot even be made, so no store is ever asked to hold it."""
    store = store_factory.make(tmp_path)
    for key, channel in (("t-2", "blog"), ("t-1#news", "blog"), ("t-2#blog", "blog")):
        with _raises(ValueError, match="idempotency_key"):
            _intent(key, task_id="t-1", channel=channel)
    assert _intent("t-1#news", channel="news").idempotency_key == "t-1#news"
    assert store.intent_get("t-2") is None and store.intents() == []


def test_racing_intents_create_one(store_factory: StoreFactory, tmp_path: Path) -> None:
    """Eight threads (each with its own handle on the same store) create attempt 1 of one key at
    once, each with its own request key: exactly one is created, and every thread gets that one."""
    stores = [store_factory.make(tmp_path) for _ in range(8)]
    gate = threading.Barrier(len(stores), timeout=30)
    results: list[Any] = []
    errors: list[BaseException] = []

    def create(n: int) -> None:
        try:
            gate.wait()
            results.append(stores[n].intent_record(_intent(request_key=f"{n:032x}")))
        except BaseException as exc:  # reported below, with the thread's own error
            errors.append(exc)

    threads = [threading.Thread(target=create, args=(n,)) for n in range(len(stores))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for store in stores:
        getattr(store, "close", lambda: None)()
    assert not errors, errors
    assert sorted(created for _, created in results) == [False] * 7 + [True]
    winner = next(rec for rec, created in results if created)
    assert all(rec == winner for rec, _ in results)
    assert store_factory.make(tmp_path).intent_get("t-1") == winner


def _team(store: Any) -> dict[str, str]:
    """An admin ``root`` and an editor ``bob`` registered in ``store`` (versions 1 and 2): name → token."""
    from state import reviewers as people

    root = people.administer(store, "add", "root", token=None, at=_AT, roles=["admin"])["token"]
    bob = people.administer(store, "add", "bob", token=root, at=_AT, roles=["editor"])["token"]
    return {"root": root, "bob": bob}


def test_the_reviewer_list_is_versioned_and_changed_by_compare_and_swap(store_factory: StoreFactory,
                                                                        tmp_path: Path) -> None:
    """The reviewer list is one record with a version: empty (version 0) until the first reviewer,
    who must be an admin; each change writes the next version, only if the stored one is still the
    version it follows (two writers from one version: one wins, the other is ``stale_revision``,
    nothing changed). A reviewer is found by their token only; a rotated or removed token stops
    working; every change needs an admin's token; the last admin cannot be removed; a list without
    an admin, or one that drops a token without revoking it, is never written."""
    from state import reviewers as people

    store = store_factory.make(tmp_path)
    assert store.reviewer_list() == people.EMPTY and people.registered(store) == [] and not people.team_mode(store)
    with _raises(Refused, "first reviewer registered must have the role admin", code="not_allowed"):
        people.administer(store, "add", "bob", token=None, at=_AT, roles=["editor"])
    assert store.reviewer_list() == people.EMPTY
    tokens = _team(store)
    v2 = store.reviewer_list()
    assert v2.version == 2 and [(r.name, r.roles) for r in people.registered(store)] == [("bob", ["editor"]),
                                                                                  ("root", ["admin"])]
    assert v2.changed_by == "root" and people.team_mode(store)
    assert people.authenticate(store, tokens["bob"]).name == "bob"
    for token, code in ((None, "unauthenticated"), (tokens["bob"], "not_allowed")):  # no token; not an admin's
        with _raises(Refused, code=code):
            people.administer(store, "add", "carol", token=token, at=_AT, roles=["admin"])
    with _raises(Refused, code="reviewer_exists"):
        people.administer(store, "add", "bob", token=tokens["root"], at=_AT)
    with _raises(Refused, "last admin", code="not_allowed"):
        people.administer(store, "remove", "root", token=tokens["root"], at=_AT)
    assert store.reviewer_list() == v2
    v3 = v2.model_copy(update={"version": 3})
    with _raises(Refused, code="stale_revision"):  # it follows version 0: the list moved on
        store.reviewer_save(people.EMPTY, v3.model_copy(update={"version": 1}))
    store.reviewer_save(v2, v3)
    with _raises(Refused, code="stale_revision"):  # a second writer from version 2
        store.reviewer_save(v2, v3)
    no_admin = people.ReviewerList(version=4, reviewers=[v3.find("bob")],
                                   revoked=[people.Revoked(token_id=v3.find("root").token_id, name="root")])
    with _raises(Refused, code="not_allowed"):
        store.reviewer_save(v3, no_admin)
    with _raises(Refused, "must be revoked", code="integrity"):
        store.reviewer_save(v3, v3.model_copy(update={"version": 4, "reviewers": [v3.find("root")]}))
    assert store.reviewer_list() == v3
    rotated = people.administer(store, "rotate", "bob", token=tokens["root"], at=_AT)
    with _raises(Refused, code="unauthenticated"):
        people.authenticate(store, tokens["bob"])
    assert people.authenticate(store, rotated["token"]).name == "bob" and rotated["roles"] == ["editor"]
    people.administer(store, "remove", "bob", token=tokens["root"], at=_AT)
    with _raises(Refused, code="unauthenticated"):
        people.authenticate(store, rotated["token"])
    with _raises(Refused, code="no_reviewer"):
        people.administer(store, "remove", "bob", token=tokens["root"], at=_AT)
    last = store.reviewer_list()
    assert last.version == 5 and [r.name for r in last.reviewers] == ["root"]
    assert {r.name for r in last.revoked} == {"bob"} and len(last.revoked) == 2  # both of bob's tokens
    assert people.authenticate(store, tokens["root"]).name == "root"
    getattr(store, "close", lambda: None)()


def test_an_older_reviewer_list_put_back_is_refused(store_factory: StoreFactory, tmp_path: Path) -> None:
    """The stored list is read only if it verifies, is bound to this store and is the newest version
    it says it is, and lists no revoked token. Put back behind the store's back, each is refused:
    an older version restored as it was (every newer one removed, as a restore from a backup or a
    dump), an older version under the newest one's name or row, a list edited by hand (its roles),
    and a list copied from another store that uses the same key; for a removed and for a rotated
    token alike. Put back, the newest reads again. Skipped without the ``read_reviewers`` /
    ``write_reviewers`` hooks."""
    import shutil

    from state import reviewers as people
    from state.integrity import KEY_FILE

    if store_factory.read_reviewers is None or store_factory.write_reviewers is None:
        raise unittest.SkipTest(f"{store_factory.name}: no hooks to read and write the stored reviewer list")
    read, write = store_factory.read_reviewers, store_factory.write_reviewers
    store = store_factory.make(tmp_path / "a")
    other = (store_factory.make_other or store_factory.make)(tmp_path / "b")
    tokens = _team(store)
    other.root.mkdir(mode=0o700, parents=True, exist_ok=True)
    shutil.copy(store.root / KEY_FILE, other.root / KEY_FILE)  # the same signing key
    _team(other)
    for action in ("remove", "rotate"):
        before = store.reviewer_list()
        old = read(store, before.version)
        done = people.administer(store, action, "bob", token=tokens["root"], at=_AT)
        tokens["bob"] = done.get("token", tokens["bob"])
        newest = store.reviewer_list()
        stored = {v: read(store, v) for v in range(before.version + 1, newest.version + 1)}
        edited = {**stored[newest.version], "reviewers": [{**r, "roles": ["admin", "editor"]}
                                                          for r in stored[newest.version]["reviewers"]]}
        cases = {
            "restored": ("revoked", "integrity"),
            "renamed": (f"holds version {before.version}", "integrity"),
            "edited": ("does not verify with this signing key", "integrity"),
            "copied": ("belongs to another state dir or store", "foreign_state"),
        }
        for case, (says, code) in cases.items():
            if case == "restored":
                for v in stored:
                    write(store, v, None)
                write(store, before.version, old)
            else:
                data = {"renamed": old, "edited": edited, "copied": read(other, 1)}[case]
                write(store, newest.version, data)
            try:
                with _raises(Refused, says, code=code):
                    people.registered(store)
                with _raises(Refused, code=code):
                    people.authenticate(store, tokens["root"])
            except AssertionError as exc:
                raise AssertionError(f"{store_factory.name}, {action}, {case}: {exc}") from None
            for v, data in stored.items():  # put back: the newest reads again
                write(store, v, data)
            assert store.reviewer_list() == newest, (action, case)
        if action == "remove":  # bob is back for the rotate round
            tokens["bob"] = people.administer(store, "add", "bob", token=tokens["root"], at=_AT,
                                              roles=["editor"])["token"]
    assert people.authenticate(store, tokens["bob"]).name == "bob"
    for s in (store, other):
        getattr(s, "close", lambda: None)()


def test_another_deployments_key_cannot_read_or_change_the_reviewer_list(store_factory: StoreFactory,
                                                                         tmp_path: Path) -> None:
    """A machine whose ``HITL_SIGNING_KEY`` is not the store's (another deployment on the same
    store) is refused before anything is written, with a message naming ``HITL_SIGNING_KEY``: the
    first list of a store whose checkpoints another key signed, and every read and change of a list
    another key signed. The store's own key then finds everything as it was. Skipped without the
    ``another_key`` hook."""
    from state import reviewers as people

    if store_factory.another_key is None:
        raise unittest.SkipTest(f"{store_factory.name}: no hook to sign with another key")
    first = store_factory.make(tmp_path / "a")
    first.save(sample_body("t-1"), failpoint="test")
    getattr(first, "close", lambda: None)()
    with store_factory.another_key():
        with _raises(Refused, "HITL_SIGNING_KEY"):
            people.administer(store_factory.make(tmp_path / "a"), "add", "eve", token=None, at=_AT, roles=["admin"])
    store = store_factory.make(tmp_path / "a")
    assert store.reviewer_list() == people.EMPTY
    tokens = _team(store)
    before = store.reviewer_list()
    getattr(store, "close", lambda: None)()
    with store_factory.another_key():
        foreign = store_factory.make(tmp_path / "a")  # the same store, on a machine with another key
        with _raises(Refused, "HITL_SIGNING_KEY"):
            foreign.reviewer_list()
        for action, name in (("add", "eve"), ("remove", "bob"), ("rotate", "root")):
            with _raises(Refused, "HITL_SIGNING_KEY"):
                people.administer(foreign, action, name, token=tokens["root"], at=_AT, roles=["admin"])
        with _raises(Refused, "HITL_SIGNING_KEY"):
            foreign.reviewer_save(before, before.model_copy(update={"version": before.version + 1}))
        getattr(foreign, "close", lambda: None)()
    store = store_factory.make(tmp_path / "a")
    assert store.reviewer_list() == before and people.authenticate(store, tokens["root"]).name == "root"
    getattr(store, "close", lambda: None)()


#: Each record kind: how the suite writes one for task ``t`` (into ``store``), its key, and how it
#: is read back (the read a command makes before it decides whether an effect runs).
_RECORDS: dict[str, tuple[Callable[[Any, str], Any], Callable[[str], tuple[Any, ...]], Callable[[Any, str], Any]]] = {
    "ledger_entry": (lambda s, t: s.ledger_record(key=t, task_id=t, action="publish_draft", title="T",
                                                  content_sha256="a" * 64),
                     lambda t: (t,), lambda s, t: s.ledger_get(t)),
    "effect_intent": (lambda s, t: s.intent_record(_intent(t, task_id=t)), lambda t: (t, 1),
                      lambda s, t: s.intent_get(t)),
    "settlement": (lambda s, t: s.settlement_record(_settlement(t, task_id=t)), lambda t: (t, 1),
                   lambda s, t: s.settlement_get(t, 1)),
    "rejection": (lambda s, t: s.rejection_record(t, "a" * 64, _decision()), lambda t: (t, None),
                  lambda s, t: s.rejection_get(t)),
    "policy": (lambda s, t: s.policy_record(_policy(int(t[-1]))), lambda t: (int(t[-1]),),
               lambda s, t: s.policy_get(int(t[-1]))),
}


def test_records_that_decide_an_effect_are_read_only_if_they_verify(store_factory: StoreFactory,
                                                                     tmp_path: Path) -> None:
    """Every record that decides whether an effect runs (ledger entry, effect intent, settlement,
    rejection record, a version of the approval policy) is signed with the store's key, bound to
    its store and its own key: one with a field edited behind the store's back, one without a
    signature (as an earlier version wrote it), a valid one moved to another task's key, and one
    copied from another state dir or database that uses the same signing key are each refused
    where they are read (and so is a listing that holds it); put back, the record reads again.
    Skipped for a store without the ``read_record``/``write_record`` hooks."""
    import shutil

    from state.integrity import KEY_FILE

    if store_factory.read_record is None or store_factory.write_record is None:
        raise unittest.SkipTest(f"{store_factory.name}: no hooks to read and write a stored record")
    read, write = store_factory.read_record, store_factory.write_record
    store = store_factory.make(tmp_path / "a")
    other = (store_factory.make_other or store_factory.make)(tmp_path / "b")
    for t in ("t-1", "t-2"):
        store.intent_record(_intent(t, task_id=t))  # a settlement needs its intent
    other.root.mkdir(mode=0o700, parents=True, exist_ok=True)
    shutil.copy(store.root / KEY_FILE, other.root / KEY_FILE)  # the same signing key (and its 0600 mode)
    other.intent_record(_intent("t-1"))
    edits = {"ledger_entry": {"content_sha256": "b" * 64}, "effect_intent": {"request_key": "f" * 32},
             "settlement": {"by": "mallory"}, "rejection": {"by": "mallory"}, "policy": {"set_by": "mallory"}}
    for kind, (make, key_of, get) in _RECORDS.items():
        for t in ("t-1", "t-2"):
            if kind != "effect_intent":
                make(store, t)
        if kind != "effect_intent":
            make(other, "t-1")
        key = key_of("t-1")
        original = read(store, kind, key)
        good = get(store, "t-1")
        assert good is not None and original.get("record") == kind and "mac" in original, original
        cases = {
            "edited": ({**original, **edits[kind]}, "integrity", "integrity check failed"),
            "unsigned": ({k: v for k, v in original.items() if k not in ("record", "state_id", "mac")},
                         "integrity", "is not signed"),
            "moved": (read(store, kind, key_of("t-2")), None, ""),
            "copied": (read(other, kind, key), "foreign_state", "belongs to another state dir or store"),
        }
        for case, (data, code, says) in cases.items():
            write(store, kind, key, data)
            try:
                with _raises(Refused, says, code=code):
                    get(store, "t-1")
                if kind == "ledger_entry":
                    with _raises(Refused):
                        store.ledger_entries()
                if kind == "effect_intent":
                    with _raises(Refused):
                        store.intents()
            except AssertionError as exc:
                raise AssertionError(f"{store_factory.name}, {kind}, {case}: {exc}") from None
            write(store, kind, key, original)
            assert get(store, "t-1") == good, (kind, case)  # put back: it reads again
    for s in (store, other):
        getattr(s, "close", lambda: None)()


def _policy(version: int, approvals: int = 2) -> Any:
    """A policy record of ``version`` (its default: ``approvals`` approvals by an editor)."""
    from state.policy import new_record, parse

    rules = parse(f'[default]\napprovals = {approvals}\nroles = ["editor"]\n[channels.news]\napprovals = 1\n')
    return new_record(rules, version, "ada", _AT)


def test_policy_versions_only_grow_and_every_version_stays_readable(store_factory: StoreFactory,
                                                                    tmp_path: Path) -> None:
    """No policy until one is stored; versions are 1, 2, … (one that is not the next is refused,
    ``policy_changed``, nothing written); the latest is the one without a version asked for; every
    version stays readable as it was stored."""
    store = store_factory.make(tmp_path)
    assert store.policy_get() is None and store.policy_get(1) is None
    with _raises(Refused, code="policy_changed"):
        store.policy_record(_policy(2))  # not the next: 1 is
    assert store.policy_get() is None
    first, second = _policy(1), _policy(2, approvals=3)
    store.policy_record(first)
    with _raises(Refused, code="policy_changed"):
        store.policy_record(_policy(1, approvals=1))  # version 1 is taken: never replaced
    store.policy_record(second)
    with _raises(Refused, code="policy_changed"):
        store.policy_record(_policy(4))
    again = store_factory.make(tmp_path)  # another handle, as another process
    assert again.policy_get() == second and again.policy_get(2) == second and again.policy_get(1) == first
    assert again.policy_get(1).rules.rule_for("blog").approvals == 2 and again.policy_get(3) is None
    for s in (store, again):
        getattr(s, "close", lambda: None)()


def test_racing_policy_sets_store_one_version(store_factory: StoreFactory, tmp_path: Path) -> None:
    """Eight writers that read the same latest version store the next one at once: exactly one
    does, the others are refused (``policy_changed``), and the stored version is the winner's."""
    store = store_factory.make(tmp_path)
    store.policy_record(_policy(1))
    barrier = threading.Barrier(8)
    results: list[Any] = []
    errors: list[BaseException] = []

    def write(i: int) -> None:
        mine = store_factory.make(tmp_path)
        try:
            rec = _policy(2, approvals=i + 1)
            barrier.wait(timeout=30)
            try:
                mine.policy_record(rec)
                results.append(rec)
            except Refused as exc:
                results.append(exc.code)
        except BaseException as exc:  # noqa: BLE001  (reported below)
            errors.append(exc)
        finally:
            getattr(mine, "close", lambda: None)()

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    won = [r for r in results if not isinstance(r, str)]
    assert len(won) == 1 and sorted(r for r in results if isinstance(r, str)) == ["policy_changed"] * 7, results
    assert store_factory.make(tmp_path).policy_get() == won[0]
    getattr(store, "close", lambda: None)()
