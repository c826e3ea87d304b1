"""The store interface the workflow needs, and the file store that implements it.

:class:`TaskStore` is the whole contract between the workflow (``workflow.hitl``, ``guards``,
``reconcile``) and wherever state lives: checkpoints with compare-and-swap, a per-task lock, the
ledger and rejection records. :class:`FileStore` is the state dir on disk (:class:`state.files.store.Store`
plus the ledger of :mod:`state.files.ledger` and the records of :mod:`state.files.rejections`);
:class:`state.postgres.store.PostgresStore` is the shared database. Both pass the conformance suite in
``tests/store_contract.py``; docs/stores.md says what a store must guarantee. :func:`open_store`
picks one for the command line.

This module never imports the SDK (read-only commands stay fast), nor psycopg unless a
``postgresql://`` URL asks for it. It imports ``state`` and ``tools`` only (and
``state.postgres.store`` on demand), so ``state`` (the bottom layer) stays free of both.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Optional, Protocol, runtime_checkable

from state.files import rejections
from state.errors import Stopped
from state.records import RejectionRecord
from state.schema import Checkpoint, Decision
from state.settings import settings
from state.files.store import Store, resolve_state_dir  # noqa: F401  (run.py takes both from here)
from state.files.ledger import Ledger, LedgerEntry


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

    def ledger_entries(self) -> list[LedgerEntry]:
        """Every ledger entry, oldest first (by ``published_at``, then key). Fail closed: raises
        ``Stopped`` on the first one that is damaged (never a silent partial list)."""
        ...

    def ledger_record(self, *, key: str, task_id: str, action: str, title: str, content_sha256: str,
                      channel: Optional[str] = None, approval: Optional[str] = None,
                      result: Any = None) -> tuple[LedgerEntry, bool]:
        """Record the action for ``key`` (``task_id``, or ``<task_id>#<channel>`` for a task with
        several channels) exactly once, a call of ``action`` (the task's): ``(entry, created)``;
        ``created`` is False when the same task and content was recorded before (that first entry is
        returned, with its first ``result``).
        ``channel`` and ``approval`` (``"human"`` / ``"not_needed"``) are stored in the entry when
        given, ``result`` (any JSON value: what the effect's function returned) when not None. Raises
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

    @property
    def location(self) -> str:
        """Where the tasks are, for messages: the state dir."""
        return str(self.root)

    def with_root(self, root: Path) -> "FileStore":
        """A file store in another state dir (``demo`` runs in a state dir of its own)."""
        return FileStore(root)

    def cli_args(self) -> list[str]:
        """The ``run.py`` arguments that select this kind of store in a child process (none: the
        file store is the default)."""
        return []

    def ledger_entries(self) -> list[LedgerEntry]:
        """See :meth:`TaskStore.ledger_entries` (:meth:`state.files.ledger.Ledger.entries`)."""
        return Ledger(self.ledger_dir).entries()

    def ledger_get(self, key: str) -> Optional[LedgerEntry]:
        """See :meth:`TaskStore.ledger_get` (:meth:`state.files.ledger.Ledger.get`)."""
        return Ledger(self.ledger_dir).get(key)

    def ledger_record(self, *, key: str, task_id: str, action: str, title: str, content_sha256: str,
                      channel: Optional[str] = None, approval: Optional[str] = None,
                      result: Any = None) -> tuple[LedgerEntry, bool]:
        """See :meth:`TaskStore.ledger_record` (:meth:`state.files.ledger.Ledger.record`)."""
        return Ledger(self.ledger_dir).record(key=key, task_id=task_id, action=action, title=title,
                                              content_sha256=content_sha256, channel=channel,
                                              approval=approval, result=result)

    def rejection_get(self, task_id: str, channel: Optional[str] = None) -> Optional[RejectionRecord]:
        """See :meth:`TaskStore.rejection_get` (:func:`state.files.rejections.get`)."""
        return rejections.get(self, task_id, channel)

    def rejection_record(self, task_id: str, content_sha256: str, decision: Decision,
                         channel: Optional[str] = None) -> tuple[RejectionRecord, bool]:
        """See :meth:`TaskStore.rejection_record` (:func:`state.files.rejections.record`)."""
        return rejections.record(self, task_id, content_sha256, decision, channel)

    def rejection_remove(self, task_id: str, channel: Optional[str] = None) -> None:
        """See :meth:`TaskStore.rejection_remove` (:func:`state.files.rejections.remove`)."""
        rejections.remove(self, task_id, channel)


def as_task_store(store: Any) -> TaskStore:
    """``store`` as a :class:`TaskStore`: itself if it already is one, a :class:`FileStore` over
    the same root if it is a plain :class:`state.files.store.Store` (callers and tests that build
    ``Store(path)`` keep working; both read and write the same files). Raises ``TypeError``
    for anything else."""
    if isinstance(store, TaskStore):
        return store
    if isinstance(store, Store):
        wrapped = getattr(store, "_as_task_store", None)
        if wrapped is None:  # one wrapper per Store, kept with it (the run context's token names it)
            wrapped = FileStore(store.root)
            wrapped._ident = store._ident  # the state.id already read (it never changes once made)
            store._as_task_store = wrapped  # type: ignore[attr-defined]
        return wrapped
    raise TypeError(f"not a store: {type(store).__name__}")


def open_store(url: Optional[str], state_dir: Optional[str]) -> Any:
    """The store a command works on: PostgreSQL for a ``postgresql://`` ``url`` (``--store``),
    else for ``$HITL_STORE_URL``, else the file store. The state dir (``state_dir``, else
    ``$HITL_STATE_DIR``, else ``.cache``) holds the file store, or for PostgreSQL this machine's
    signing key and traces. Raises ``Stopped`` for an unusable state dir or URL (a URL is never
    repeated: it may hold a password). Contacts no server: the first method call does."""
    url = url or settings().store_url
    root = resolve_state_dir(state_dir)
    if not url:
        return FileStore(root)
    from state.settings import store_url_problem

    problem = store_url_problem(url)
    if problem is not None:
        raise Stopped(f"the store URL {problem}")
    from state.postgres.store import PostgresStore  # psycopg: only when a URL asks for it

    return PostgresStore(url, root)
