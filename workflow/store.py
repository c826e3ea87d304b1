"""The store interface the workflow needs, and the file store that implements it.

:class:`TaskStore` is the whole contract between the workflow (``workflow.hitl``, ``guards``,
``reconcile``) and wherever state lives: checkpoints with compare-and-swap, a per-task lock, the
ledger and rejection records. :class:`FileStore` is the state dir on disk (:class:`state.storage.Store`
plus the ledger of :mod:`tools.ledger` and the records of :mod:`state.rejections`). Another store
(e.g. PostgreSQL) must pass the conformance suite in ``tests/store_contract.py``; docs/stores.md
says what it must guarantee.

This module never imports the SDK (read-only commands stay fast). It imports ``state`` and
``tools`` only, so ``state`` (the bottom layer) stays free of both.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Optional, Protocol, runtime_checkable

from state import rejections
from state.rejections import RejectionRecord
from state.schema import Checkpoint, Decision
from state.storage import Store, resolve_state_dir  # noqa: F401  (run.py takes both from here)
from tools.ledger import Ledger, LedgerEntry


@runtime_checkable
class TaskStore(Protocol):
    """What the workflow reads and writes. Every error is :class:`state.errors.Stopped` (one line,
    fail closed: nothing half-written); no method ever returns data it could not verify."""

    def exists(self, task_id: str) -> bool:
        """True if a checkpoint exists under ``task_id`` (even one :meth:`load` would refuse)."""
        ...

    def load(self, task_id: str) -> Checkpoint:
        """The verified latest checkpoint of ``task_id``. Raises ``Stopped`` if there is none, or it
        fails its MAC, schema, or names another task."""
        ...

    def checkpoints(self) -> list[Checkpoint]:
        """Every checkpoint, sorted by task ID. Fail closed: raises ``Stopped`` naming the first
        one that cannot be read and verified (never a silent partial list)."""
        ...

    def save(self, body: dict[str, Any], *, failpoint: str,
             expect: Optional[Checkpoint] = None) -> Checkpoint:
        """Sign, validate and write ``body`` (a checkpoint envelope without ``mac``) atomically;
        return the saved :class:`Checkpoint`.

        Compare-and-swap: ``expect=None`` creates the task exclusively (``Stopped`` "created by
        another process" if it exists already); otherwise the write happens only if the stored
        checkpoint still has ``expect.revision`` and ``expect.mac``, checked atomically with the
        write (``Stopped``, nothing written, on a conflict). ``failpoint`` names the write for
        crash tests."""
        ...

    def save_revision(self, cp: Checkpoint, *, failpoint: str, event: tuple[str, dict[str, Any]],
                      **changes: Any) -> Checkpoint:
        """Write revision ``cp.revision + 1`` with ``changes`` (field → value) and one ``history``
        event ``(name, detail)`` appended; compare-and-swap against ``cp`` as :meth:`save`
        (``Stopped`` on a stale ``cp``, nothing changed). Returns the new checkpoint."""
        ...

    def task_lock(self, task_id: str) -> AbstractContextManager[None]:
        """A context manager holding the per-task lock: excludes every other holder (other
        processes too) and is released if the holder dies. Raises ``Stopped`` after
        ``$HITL_LOCK_TIMEOUT`` seconds of waiting. Correctness never depends on it alone (every
        write is a compare-and-swap); it makes conflicts rare."""
        ...

    def ledger_get(self, key: str) -> Optional[LedgerEntry]:
        """The ledger entry for ``key`` (the proof the action ran), or None. Raises ``Stopped`` if
        what is stored is damaged or names another key."""
        ...

    def ledger_record(self, *, key: str, task_id: str, title: str, content_sha256: str,
                      channel: Optional[str] = None,
                      approval: Optional[str] = None) -> tuple[LedgerEntry, bool]:
        """Record the action for ``key`` (``task_id``, or ``<task_id>#<channel>`` for a task with
        several channels) exactly once: ``(entry, created)``; ``created`` is False when the same
        task and content was recorded before (that first entry is returned). ``channel`` and
        ``approval`` (``"human"`` / ``"not_needed"``) are stored in the entry when given. Raises
        ``Stopped`` if ``key`` is recorded for another task or other content. Never overwrites."""
        ...

    def rejection_get(self, task_id: str, channel: Optional[str] = None) -> Optional[RejectionRecord]:
        """The rejection record of ``task_id`` (of its ``channel``, for a task with several:
        :func:`state.schema.channel_scope`), or None. Raises ``Stopped`` if it is damaged."""
        ...

    def rejection_record(self, task_id: str, content_sha256: str, decision: Decision,
                         channel: Optional[str] = None) -> tuple[RejectionRecord, bool]:
        """Create the rejection record of ``task_id`` (and ``channel``) exactly once: ``(record,
        created)``; a second call returns the first record with ``created`` False. Raises
        ``Stopped`` if a record for other content exists."""
        ...

    def rejection_remove(self, task_id: str, channel: Optional[str] = None) -> None:
        """Remove the rejection record of ``task_id`` (and ``channel``; only to undo one this
        process just created for a refused command); no error if there is none."""
        ...


class FileStore(Store):
    """The state dir on disk as a :class:`TaskStore`: checkpoints, locks, ``ledger/`` and
    ``rejections/`` under ``root``. ``FileStore(root)`` does not touch the disk."""

    def ledger_get(self, key: str) -> Optional[LedgerEntry]:
        """See :meth:`TaskStore.ledger_get` (:meth:`tools.ledger.Ledger.get`)."""
        return Ledger(self.ledger_dir).get(key)

    def ledger_record(self, *, key: str, task_id: str, title: str, content_sha256: str,
                      channel: Optional[str] = None,
                      approval: Optional[str] = None) -> tuple[LedgerEntry, bool]:
        """See :meth:`TaskStore.ledger_record` (:meth:`tools.ledger.Ledger.record`)."""
        return Ledger(self.ledger_dir).record(key=key, task_id=task_id, title=title,
                                              content_sha256=content_sha256, channel=channel,
                                              approval=approval)

    def rejection_get(self, task_id: str, channel: Optional[str] = None) -> Optional[RejectionRecord]:
        """See :meth:`TaskStore.rejection_get` (:func:`state.rejections.get`)."""
        return rejections.get(self, task_id, channel)

    def rejection_record(self, task_id: str, content_sha256: str, decision: Decision,
                         channel: Optional[str] = None) -> tuple[RejectionRecord, bool]:
        """See :meth:`TaskStore.rejection_record` (:func:`state.rejections.record`)."""
        return rejections.record(self, task_id, content_sha256, decision, channel)

    def rejection_remove(self, task_id: str, channel: Optional[str] = None) -> None:
        """See :meth:`TaskStore.rejection_remove` (:func:`state.rejections.remove`)."""
        rejections.remove(self, task_id, channel)


def as_task_store(store: Any) -> TaskStore:
    """``store`` as a :class:`TaskStore`: itself if it already is one, a :class:`FileStore` over
    the same root if it is a plain :class:`state.storage.Store` (callers and tests that build
    ``Store(path)`` keep working; both read and write the same files). Raises ``TypeError``
    for anything else."""
    if isinstance(store, TaskStore):
        return store
    if isinstance(store, Store):
        wrapped = FileStore(store.root)
        wrapped._ident = store._ident  # the state.id already read (it never changes once made)
        return wrapped
    raise TypeError(f"not a store: {type(store).__name__}")
