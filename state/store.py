"""The store interface the workflow needs, its optional capabilities, and :func:`open_store`.

:class:`TaskStore` is the whole contract between the workflow (``workflow.hitl``, ``guards``,
``reconcile``) and wherever state lives: checkpoints with compare-and-swap, a per-task lock, the
ledger and rejection records, the records of effects, reviewers, the policy and notifications.
The file store
(:class:`state.files.store.Store`, exported here as :data:`FileStore`: the state dir on disk) and
:class:`state.postgres.store.PostgresStore` (a shared database) implement it directly; both pass the
conformance suite :mod:`state.conformance`. docs/stores.md says what a store must guarantee.

What only some stores can do is a *capability*: a small runtime-checkable Protocol a caller tests
with ``isinstance`` before it uses it, never a member faked to look alike.

- :class:`FileBacked`: the store keeps each task in files below ``root`` (lock files, revision
  files): a refused ``start`` removes the lock file it created; the inbox caches rows by file.
- :class:`Inspectable`: the store lists what ``doctor`` judges (:meth:`Inspectable.inspect`).
- :class:`Relocatable`: the same kind of store in another state dir, and how a child process
  selects it (``demo``).
- :class:`Labelled`: where the store keeps things, for messages and views only
  (:func:`location_of`, :func:`checkpoint_label`).

This module never imports the SDK (read-only commands stay fast), nor psycopg unless a
``postgresql://`` URL asks for it (``state.postgres.store``, imported in :func:`open_store`).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Protocol, Union, runtime_checkable

from state.errors import Refused
from state.inspection import Inspected
from state.records import EffectIntent, LedgerEntry, RejectionRecord, Settlement
from state.notify import Progress
from state.policy import PolicyRecord
from state.reviewers import ReviewerList
from state.schema import Checkpoint, Decision
from state.settings import settings
from state.files.store import Store, resolve_state_dir  # noqa: F401  (run.py takes both from here)

#: The file store under the name the library gives it (:class:`state.files.store.Store`).
FileStore = Store


@runtime_checkable
class TaskStore(Protocol):
    """What the workflow reads and writes. Every error is :class:`state.errors.Refused` (one line,
    fail closed: nothing half-written); no method ever returns data it could not verify."""

    #: This machine's state dir (the signing key and the traces live there, whatever the store).
    root: Path

    def scan(self) -> tuple[list[Checkpoint], list[dict[str, str]]]:
        """Every checkpoint once: ``(those that verify, sorted by task ID, [{"file", "error"}] for
        each that does not)``. Never raises for a damaged checkpoint (``list`` shows the others and
        names it)."""
        ...

    def check_writable(self, task_id: str) -> None:
        """Pre-flight for ``start`` and ``resume``: raise ``Refused``, before anything is written,
        for what would stop the command half-way (a signing key that cannot be used or created,
        a hostile file where one will be written). Writes nothing."""
        ...

    def exists(self, task_id: str) -> bool:
        """True if a checkpoint exists under ``task_id`` (even one :meth:`load` would refuse)."""
        ...

    def load(self, task_id: str) -> Checkpoint:
        """The verified latest checkpoint of ``task_id``. Raises ``Refused`` if there is none, or it
        fails its MAC, schema, or names another task."""
        ...

    def save(self, body: dict[str, Any], *, failpoint: str,
             expect: Optional[Checkpoint] = None) -> Checkpoint:
        """Sign, validate and write ``body`` (a checkpoint envelope without ``mac``) atomically;
        return the saved :class:`Checkpoint`.

        Compare-and-swap: ``expect=None`` creates the task exclusively (``Refused`` "created by
        another process" if it exists already); otherwise the write happens only if the stored
        checkpoint still has ``expect.revision`` and ``expect.mac``, checked atomically with the
        write (``Refused``, nothing written, on a conflict). ``failpoint`` names the write for
        crash tests."""
        ...

    def save_revision(self, cp: Checkpoint, *, failpoint: str, event: tuple[str, dict[str, Any]],
                      **changes: Any) -> Checkpoint:
        """Write revision ``cp.revision + 1`` with ``changes`` (field → value) and one ``history``
        event ``(name, detail)`` appended; compare-and-swap against ``cp`` as :meth:`save`
        (``Refused`` on a stale ``cp``, nothing changed). Returns the new checkpoint."""
        ...

    def task_lock(self, task_id: str, *, timeout: Optional[float] = None) -> AbstractContextManager[None]:
        """A context manager holding the per-task lock: excludes every other holder (other
        processes too) and is released if the holder dies. Raises ``Refused`` after ``timeout``
        seconds of waiting (default ``$HITL_LOCK_TIMEOUT``; 0: do not wait). Correctness never
        depends on it alone (every write is a compare-and-swap); it makes conflicts rare."""
        ...

    def ledger_get(self, key: str) -> Optional[LedgerEntry]:
        """The ledger entry for ``key`` (the proof the action ran), or None. Raises ``Refused`` if
        what is stored is damaged or names another key."""
        ...

    def ledger_entries(self) -> list[LedgerEntry]:
        """Every ledger entry, oldest first (by ``published_at``, then key). Fail closed: raises
        ``Refused`` on the first one that is damaged (never a silent partial list)."""
        ...

    def ledger_record(self, *, key: str, task_id: str, action: str, title: str, content_sha256: str,
                      channel: Optional[str] = None, approval: Optional[str] = None,
                      result: Any = None, settled_by: Optional[str] = None,
                      settle_reason: Optional[str] = None) -> tuple[LedgerEntry, bool]:
        """Record the action for ``key`` (``task_id``, or ``<task_id>#<channel>`` for a task with
        several channels) exactly once, a call of ``action`` (the task's): ``(entry, created)``;
        ``created`` is False when the same task and content was recorded before (that first entry is
        returned, with its first ``result``).
        ``channel`` and ``approval`` (``"human"`` / ``"not_needed"``) are stored in the entry when
        given, ``result`` (any JSON value: what the effect's function returned) when not None. Raises
        ``Refused`` if ``key`` is recorded for another task or other content. Never overwrites.
        ``settled_by``/``settle_reason``: a human found the effect done (``settle``), stored when given."""
        ...

    def intent_get(self, key: str) -> Optional[EffectIntent]:
        """The write-ahead intent of ``key``'s latest attempt (:class:`state.records.EffectIntent`),
        or None if no effect through a service was ever begun for it. Raises ``Refused`` if damaged."""
        ...

    def intent_record(self, intent: EffectIntent) -> tuple[EffectIntent, bool]:
        """Create ``intent`` (its key and attempt) exactly once, durably, before the request it
        announces: ``(the stored intent, created)``; another process's intent of the same attempt
        is returned with ``created`` False. Raises ``Refused`` if attempt ``n - 1`` is not settled."""
        ...

    def settlement_get(self, key: str, attempt: int) -> Optional[Settlement]:
        """The settlement of ``key``'s ``attempt`` (it did not happen), or None. Raises ``Refused`` if damaged."""
        ...

    def settlement_record(self, settlement: Settlement) -> tuple[Settlement, bool]:
        """Create ``settlement`` exactly once: ``(the stored one, created)``. Raises ``Refused`` if
        its attempt has no intent."""
        ...

    def intents(self) -> list[EffectIntent]:
        """The latest intent of every key, oldest first (by ``at``, then key). Fail closed: raises
        ``Refused`` on the first damaged record."""
        ...

    def rejection_get(self, task_id: str, channel: Optional[str] = None) -> Optional[RejectionRecord]:
        """The rejection record of ``task_id`` (of its ``channel``, for a task with several:
        :func:`state.schema.channel_scope`), or None. Raises ``Refused`` if it is damaged."""
        ...

    def rejection_record(self, task_id: str, content_sha256: str, decision: Decision,
                         channel: Optional[str] = None) -> tuple[RejectionRecord, bool]:
        """Create the rejection record of ``task_id`` (and ``channel``) exactly once: ``(record,
        created)``; a second call returns the first record with ``created`` False. Raises
        ``Refused`` if a record for other content exists."""
        ...

    def reviewer_list(self) -> ReviewerList:
        """The newest reviewer list (:class:`state.reviewers.ReviewerList`), verified: its signature
        under the store's key, its binding to this store (``state_id``), its version where it was
        found, and none of its tokens revoked (an older list put back is refused);
        :data:`state.reviewers.EMPTY` (version 0) if the store has none. Fail closed: raises
        ``Refused`` (``integrity``, naming ``HITL_SIGNING_KEY`` for a list signed with another key;
        ``foreign_state`` for one copied from another store), never a partial or older list."""
        ...

    def reviewer_save(self, expect: ReviewerList, new: ReviewerList) -> None:
        """Write ``new`` as the reviewer list, compare-and-swap: only if the stored list is still
        ``expect`` (its version), and ``new`` may follow it (:func:`state.reviewers.check_successor`:
        the next version, an admin in it, every token that leaves it revoked). Each token ``new``
        revokes gets a signed revocation record that is never deleted. Signed with the store's key
        (created in a new state dir), bound to the store. Raises ``Refused``, nothing written:
        ``stale_revision`` (another change won), ``not_allowed`` (no admin), a key that is not
        this store's (naming ``HITL_SIGNING_KEY``), as :meth:`reviewer_list` does."""
        ...

    def rejection_remove(self, task_id: str, channel: Optional[str] = None) -> None:
        """Remove the rejection record of ``task_id`` (and ``channel``; only to undo one this
        process just created for a refused command); no error if there is none."""
        ...

    def policy_get(self, version: Optional[int] = None) -> Optional[PolicyRecord]:
        """Version ``version`` of the approval policy (:class:`state.policy.PolicyRecord`; None:
        the latest), or None if there is no such version (``None`` with no version stored: no
        policy was ever set). Each record's signature is verified, and that it is the version it is
        stored as: raises ``Refused`` (``integrity``, ``foreign_state``) otherwise."""
        ...

    def policy_record(self, record: PolicyRecord) -> None:
        """Store ``record`` (signed with the store's key) as the next version of the policy,
        exactly once. Compare-and-swap: raises ``Refused`` (``policy_changed``), nothing written,
        unless ``record.version`` is one more than the latest version stored (1 for the first)
        and no other writer stored that version first. No version is ever changed or removed."""
        ...

    def notify_get(self, task_id: str) -> Optional[Progress]:
        """How far the webhook notifications of ``task_id`` got (:class:`state.notify.Progress`), or
        None if none was delivered or tried yet. Raises ``Refused`` (``integrity``) for a record
        that is damaged or names another task or version."""
        ...

    def notify_save(self, expect: Optional[Progress], new: Progress) -> None:
        """Write ``new`` as the progress of its task, compare-and-swap: only if the stored record is
        still ``expect`` (its version; None: there is none) and ``new`` is the next version.
        Raises ``Refused`` (``stale_revision``), nothing written, if another writer came first.
        ``notify:progress`` names the write for crash tests."""
        ...


@runtime_checkable
class Labelled(Protocol):
    """Capability: the store names where things are, for messages and views only (nothing decides
    on them). Use :func:`location_of` and :func:`checkpoint_label`, which name a store without it
    by its class."""

    @property
    def location(self) -> str:
        """Where the tasks are (a folder, or a URL without user or password)."""
        ...

    def checkpoint_path(self, task_id: str) -> Union[Path, str]:
        """Where the checkpoint of ``task_id`` is (for the file store: its newest revision file)."""
        ...


def location_of(store: Any) -> str:
    """Where ``store`` keeps its tasks, for a message: its ``location`` (:class:`Labelled`), else
    ``"a <class name> store"``."""
    return str(store.location) if isinstance(store, Labelled) else f"a {type(store).__name__} store"


def checkpoint_label(store: Any, task_id: str) -> str:
    """Where the checkpoint of ``task_id`` is, for a view: ``checkpoint_path`` (:class:`Labelled`),
    else ``"task <ID> in <location_of(store)>"``."""
    if isinstance(store, Labelled):
        return str(store.checkpoint_path(task_id))
    return f"task {task_id} in {location_of(store)}"


@runtime_checkable
class FileBacked(Protocol):
    """Capability: the store keeps each task in files below ``root`` (the file store)."""

    #: The state dir every file of the store is below.
    root: Path
    #: The folder of the per-task lock files.
    locks_dir: Path

    def lock_path(self, owner: str) -> Path:
        """The lock file guarding every file whose stem is ``owner``."""
        ...

    def task_files(self) -> list[tuple[str, Path]]:
        """``[(stem, newest checkpoint file)]`` of every task, by stem."""
        ...

    def iter_task_files(self, hints: Optional[dict[str, Path]] = None) -> Iterator[tuple[str, Path]]:
        """The same pairs one at a time, in no particular order; ``hints`` (stem → the newest file
        a previous call found) spares listing a task's folder that did not change."""
        ...

    def load_newest(self, stem: str, path: Optional[Path] = None) -> Optional[tuple[Path, Checkpoint]]:
        """``(file, verified checkpoint)`` of the newest revision of ``stem``, or None."""
        ...


@runtime_checkable
class Inspectable(Protocol):
    """Capability: the store lists what ``doctor`` judges (``workflow.ops.doctor``), so doctor
    needs no knowledge of how a store keeps its records."""

    def inspect(self, *, repair: bool = False, adopt: Iterable[str] = ()) -> Iterator[Inspected]:
        """The store's own findings and every task to judge, as :mod:`state.inspection` records,
        in the order a report lists them: :class:`state.inspection.Problem` (something the store
        found: an unreadable record, an unsigned one, a busy task, a leftover temp file),
        :class:`state.inspection.Repaired` (with ``repair``: what it repaired, only what is
        provable, and the unsigned records a person named in ``adopt``: :mod:`state.adoption`),
        :class:`state.inspection.TaskCheck` (a verified checkpoint, held under its task lock until
        the next record is asked for), and last one :class:`state.inspection.Counted`.
        Never raises ``Refused`` for a damaged record (it becomes a ``Problem``); without
        ``repair`` it writes nothing but lock files of tasks that have one already."""
        ...


@runtime_checkable
class Relocatable(Protocol):
    """Capability: the same kind of store in another state dir, and how a child process selects
    it (``demo`` runs in a state dir of its own)."""

    def with_root(self, root: Path) -> TaskStore:
        """The same store with ``root`` as its state dir."""
        ...

    def child_url(self) -> Optional[str]:
        """The store URL a child process opens this same store with (with its password, if it
        has one: never printed), or None for the default store of a state dir (the file store)."""
        ...


def open_store(url: Optional[str], state_dir: Optional[str]) -> TaskStore:
    """The store a command works on: PostgreSQL for a ``postgresql://`` ``url`` (``--store``),
    else for ``$HITL_STORE_URL``, else the file store. The state dir (``state_dir``, else
    ``$HITL_STATE_DIR``, else ``.cache``) holds the file store, or for PostgreSQL this machine's
    signing key and traces. Raises ``Refused`` for an unusable state dir or URL (a URL is never
    repeated: it may hold a password). Contacts no server: the first method call does."""
    url = url or settings().store_url
    root = resolve_state_dir(state_dir)
    if not url:
        return Store(root)
    from state.settings import store_url_problem

    problem = store_url_problem(url)
    if problem is not None:
        raise Refused("usage", f"the store URL {problem}")
    from state.postgres.store import PostgresStore  # psycopg: only when a URL asks for it

    return PostgresStore(url, root)
