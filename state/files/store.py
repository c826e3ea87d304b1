"""Where state lives on disk, and how it is written and read.

Layout of a state dir (default ``.cache/`` under the current directory, or ``--state-dir`` /
``HITL_STATE_DIR``)::

    checkpoints/<name>/r<N>.json  revision N of a task's checkpoint envelope (state.schema.Checkpoint);
                          N has 6 digits or more (r000001, r000002 …); the highest N is the checkpoint.
                          One folder per task: loading or saving a task lists its own folder only
    ledger/<name>.json    one ledger entry per idempotency key (state.files.ledger)
    rejections/<name>.json  one rejection record per task and channel (state.files.rejections)
    policies/v<N>.json    version N of the approval policy, signed, never rewritten (state.files.policies)
    effects/<name>.<N>.intent.json / .settled.json  attempt N of an effect through a service
                          (state.files.intents); each record file is signed (state.record_seal)
    reviewers/r<N>.json   version N of the reviewer list (team mode); reviewers/revoked/<token ID>.json:
                          each token that left it (state.files.reviewers)
    locks/<name>.lock     one lock file per task (filelock; held only while a process works on it)
    traces/<name>.jsonl   the local trace of each task (workflow.observe.trace_log)
    signing.key           the MAC key, unless HITL_SIGNING_KEY is set
    state.id              the state dir's random ID, carried by every checkpoint (state.state_id)
    tasks/<name>.r<N>.json, tasks/<name>.json   the layouts before per-task folders: read, never
                          written, moved into ``checkpoints/`` by ``doctor --repair`` (below)

``<name>`` is the key made safe for every file system (see :func:`file_name`).

Every write creates a new file and never changes one in place: temp file in the same folder →
write → flush → fsync → ``os.link`` to the final name (fails if that name exists) → fsync of the
folder where the OS allows it. A reader therefore sees no file or the whole file, never half.

A checkpoint's compare-and-swap is that exclusive create: revision N+1 is written only by the
process whose ``os.link`` created ``checkpoints/<name>/r<N+1>.json``, one system call, after it
checked that the highest revision on disk is still exactly the N it read. Every writer names its
file after the revision it read plus one, in the task's one folder, so two writers that read the
same N race for the same name and exactly one wins; the other is refused (nothing written),
however the two are interleaved. The content of revisions older than the newest two is cleared
(the file becomes 0 bytes, :data:`KEPT_REVISIONS`), but the names stay: a removed name could be
created again by a writer that read an old revision long ago (its compare passed then; its link
would succeed now). A crash before the clearing leaves an older revision whole, which nobody
reads; ``doctor --repair`` clears it. Old names cost only their own task: a load lists the task's
folder, never another task's.

The layouts before per-task folders (a state dir written by an older version): ``tasks/`` holding
``<name>.r<N>.json`` revision files side by side, or one ``<name>.json`` per task (older still,
counted as revision 0 among a task's files, its revision in its content). They are read, never
written: a task whose folder holds no revision file is read from ``tasks/`` (a listing of that
whole folder, as before), and its next write creates revision N+1 in its folder, which from then
on is the checkpoint (the folder wins; every writer races for that one name, whatever layout it
read N from). ``doctor --repair`` moves the rest, one task at a time under its lock: it copies the
task's newest file from ``tasks/`` into its folder under the name of its own revision (exclusive
create, failpoint ``checkpoint:migrate``), then removes the task's files from ``tasks/``, and last
removes ``tasks/`` once it is empty. Each step leaves a readable, consistent task: before the copy
``tasks/`` is read; after it both places hold the same bytes and the folder wins; a file of
``tasks/`` newer than the folder's checkpoint is never removed (a human must look). Without
``tasks/`` a task with no folder is known to have no checkpoint with one ``lstat``.

Every read goes through :func:`state.paths.read_regular`: a symlink, FIFO or device where a file
should be is refused by name instead of followed or blocked on; a task folder that is not a plain
folder is refused too. This module never imports the SDK, so read-only commands stay fast.
"""

from __future__ import annotations

import hmac
import json
import os
import re
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

from state import effects, state_id

from state import fileio as files
from state.errors import Next, Refused
from state.integrity import KEY_FILE, check_key_creatable, load_key
from state.paths import (CHECKPOINTS_DIR, OLD_TASKS_DIR, check_own_folder, check_regular, check_state_dir, inside,
                         open_regular, read_regular)
from state.schema import MAX_CHECKPOINT_BYTES, Checkpoint, Decision
from state.inspection import Inspected
from state.records import MAX_ATTEMPTS, EffectIntent, LedgerEntry, RejectionRecord, Settlement
from state.notify import Progress
from state.policy import PolicyRecord
from state.reviewers import ReviewerList
from state.files import intents, rejections
from state.files import policies as policy_files
from state.files import reviewers as reviewer_files
from state.files.ledger import Ledger
# Helpers that live in other modules (no import cycle); their names stay importable from here.
from state.paths import file_name  # noqa: F401
from state.revisions import every_or_stop, next_revision  # noqa: F401
from state.signing import seal, signed_by_any, verify_envelope  # noqa: F401
from state.durable import check_links, create_exclusive  # noqa: F401
from state.fileio import TEMP_NAME, fsync_dir, parse_json_object, write_temp  # noqa: F401
from state.settings import DEFAULT_LOCK_TIMEOUT_S, settings  # noqa: F401  (the default, for callers)

STATE_DIR_ENV = "HITL_STATE_DIR"

#: Revisions of a task whose content is kept: the newest (the checkpoint) and the one before it (a
#: reader that listed the folder just before a write still reads a whole file). Older ones are
#: cleared to 0 bytes; their names are never removed (module docstring).
KEPT_REVISIONS = 2
#: How often a reader lists a task's revisions again when the one it chose could not be read
#: because a newer one was written meanwhile.
_READ_TRIES = 3

#: ``r<N>.json`` in a task's folder.
_FOLDER_REVISION = re.compile(r"^r(?P<rev>[0-9]{6,})\.json\Z")
#: ``<stem>.r<N>.json`` in ``tasks/`` (the layout before per-task folders): a stem is
#: ``file_name(key)`` (it ends in ``--`` and 12 hex characters).
_REVISION_NAME = re.compile(r"^(?P<stem>.+--[0-9a-f]{12})\.r(?P<rev>[0-9]{6,})\.json\Z")


def revision_name(revision: int) -> str:
    """``r<revision, 6 digits or more>.json``, e.g. ``r000003.json``: a revision's file in its task's folder."""
    return f"r{revision:06d}.json"


def parse_folder_revision(name: str) -> int | None:
    """The revision of a file name written by :func:`revision_name`, or None (any other name, a
    non-canonical spelling such as ``r0000003.json`` included: one revision, one name)."""
    found = _FOLDER_REVISION.match(name)
    if found is None:
        return None
    revision = int(found["rev"])
    return revision if revision_name(revision) == name else None


def revision_file_name(stem: str, revision: int) -> str:
    """``<stem>.r<revision, 6 digits or more>.json``, e.g. ``demo-001--0b1e2a3c4d5e.r000003.json``:
    the name revision ``revision`` had in ``tasks/`` before per-task folders (also the name
    ``state.id`` adopted a checkpoint under, :mod:`state.state_id`)."""
    return f"{stem}.r{revision:06d}.json"


def parse_revision_name(name: str) -> tuple[str, int] | None:
    """``(stem, revision)`` of a file name written by :func:`revision_file_name`, or None
    (any other name, a non-canonical spelling such as ``r0000003`` included: one revision, one name)."""
    found = _REVISION_NAME.match(name)
    if found is None:
        return None
    stem, revision = found["stem"], int(found["rev"])
    return (stem, revision) if revision_file_name(stem, revision) == name else None


def resolve_state_dir(raw: str | None) -> Path:
    """The state dir as an absolute, resolved path: ``raw``, else ``$HITL_STATE_DIR``, else ``.cache``.

    Raises :class:`Refused` if it is not a usable folder (see :func:`state.paths.check_state_dir`),
    or if ``HITL_STATE_DIR`` (or another variable) is refused by :mod:`state.settings`.
    """
    chosen = raw or settings().state_dir or ".cache"  # a blank HITL_STATE_DIR is refused there
    try:
        return check_state_dir(Path(chosen).expanduser().resolve())
    except OSError as exc:  # e.g. a path too long for the file system
        raise Refused("unsafe_state_dir",
                      f"state dir {chosen[:80]!r} cannot be used ({exc.strerror or type(exc).__name__})") from None


class Store:
    """The file store: a state dir holding checkpoints, locks, the ledger, rejection records and
    the signing key, all below ``root``. A :class:`state.store.TaskStore` itself (the ledger is
    :class:`state.files.ledger.Ledger` over ``ledger/``, the records :mod:`state.files.rejections`),
    with the capabilities :class:`state.store.FileBacked`, :class:`state.store.Inspectable` and
    :class:`state.store.Relocatable`.

    ``Store(root)`` does not touch the disk; the first write creates the folders.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.checkpoints_dir = root / CHECKPOINTS_DIR
        self.tasks_dir = root / OLD_TASKS_DIR  # the layouts before per-task folders: read, never written
        self.locks_dir = root / files.LOCKS_DIR
        self.ledger_dir = root / "ledger"
        self.traces_dir = root / "traces"
        self._ident: state_id.StateIdentity | None = None  # state.id, once read

    # -- paths -------------------------------------------------------------------------------
    def checkpoint_path(self, task_id: str) -> Path:
        """The file holding the checkpoint of ``task_id`` now: its newest revision file
        ``checkpoints/<file_name(task_id)>/r<N>.json`` (or a file of ``tasks/``, the layouts before
        per-task folders, while its folder holds none); for a task with no file yet, the name its
        first revision will have. Guaranteed to be inside ``root``; lists the task's own folder
        only (and ``tasks/``, while it exists, for a task whose folder holds no revision).
        Raises :class:`Refused` as :meth:`task_dir` does."""
        stem = file_name(task_id)
        path = self._newest(stem) or self.task_dir(stem) / revision_name(1)
        return inside(self.root, path, f"checkpoint of task {task_id!r}")

    def revision_path(self, task_id: str, revision: int) -> Path:
        """``checkpoints/<file_name(task_id)>/r<revision>.json``, inside ``root``."""
        return self.task_dir(file_name(task_id)) / revision_name(revision)

    def task_dir(self, stem: str) -> Path:
        """``checkpoints/<stem>``: the folder of one task's revision files (it may not exist yet).
        Raises :class:`Refused` if it resolves outside ``root``, or exists but is not a plain
        folder (a symlink, a file, a FIFO …: never listed, read or written through) or (POSIX) is
        owned by another user or writable by group or others
        (:func:`state.paths.check_own_folder`). A few ``lstat`` calls; lists nothing."""
        folder = inside(self.root, self.checkpoints_dir / stem, f"checkpoint folder of {stem}")
        check_own_folder(folder, f"checkpoint folder {CHECKPOINTS_DIR}/{stem}")
        return folder

    def label(self, path: Path) -> str:
        """How messages name checkpoint file ``path``: ``<stem>/r<N>.json`` for a file of a task's
        folder, the file name for one of ``tasks/``."""
        return f"{path.parent.name}/{path.name}" if self._in_folder(path) else path.name

    def _in_folder(self, path: Path) -> bool:
        """True if ``path`` is a file of a task's folder (``checkpoints/<stem>/…``), by its path."""
        return path.parent.parent == self.checkpoints_dir

    def folder_revisions(self, stem: str) -> list[tuple[int, Path]]:
        """``[(revision, file)]`` of the revision files in ``stem``'s folder, lowest first (none if
        it has no folder). Lists that one folder (names that are not a revision's are left out).
        Raises :class:`Refused` as :meth:`task_dir` does."""
        return _revisions_in(self.task_dir(stem))

    def old_revisions(self, stem: str) -> list[tuple[int, Path]]:
        """``[(revision, file)]`` of ``stem``'s files in ``tasks/`` (the layouts before per-task
        folders), lowest first; a ``<stem>.json`` counts as revision 0. Lists all of ``tasks/``
        (one ``lstat`` when it does not exist)."""
        found = []
        for name in self._old_names():
            if name == stem + ".json":
                found.append((0, self.tasks_dir / name))
            elif name.startswith(stem + ".r"):
                parsed = parse_revision_name(name)
                if parsed is not None and parsed[0] == stem:
                    found.append((parsed[1], self.tasks_dir / name))
        return sorted(found)

    def old_task_files(self) -> dict[str, list[tuple[int, Path]]]:
        """Every file of ``tasks/`` by stem: ``{stem: [(revision, file)], lowest first}``; each
        ``*.json`` that is not a revision file counts as a ``<stem>.json`` (revision 0), so a stray
        file is read, and refused, rather than ignored. Lists ``tasks/`` once."""
        found: dict[str, list[tuple[int, Path]]] = {}
        for name in self._old_names():
            if not name.endswith(".json"):
                continue
            parsed = parse_revision_name(name)
            stem, revision = parsed if parsed is not None else (name[:-len(".json")], 0)
            found.setdefault(stem, []).append((revision, self.tasks_dir / name))
        return {stem: sorted(revisions) for stem, revisions in found.items()}

    def _old_names(self) -> list[str]:
        """The names in ``tasks/`` (none if it does not exist: one ``lstat``), hidden temp files left out."""
        if not os.path.lexists(self.tasks_dir):
            return []
        try:
            return [n for n in os.listdir(self.tasks_dir) if not n.startswith(".")]
        except (FileNotFoundError, NotADirectoryError):
            return []

    def _revisions(self, stem: str) -> list[tuple[int, Path]]:
        """``[(revision, file)]`` of ``stem``'s checkpoint files, lowest first: those of its folder;
        if it holds none, those of ``tasks/`` (module docstring: the folder wins)."""
        return self.folder_revisions(stem) or self.old_revisions(stem)

    def _newest(self, stem: str) -> Path | None:
        """The newest checkpoint file of ``stem`` (see :meth:`_revisions`), or None."""
        found = self._revisions(stem)
        return found[-1][1] if found else None

    def task_files(self) -> list[tuple[str, Path]]:
        """``[(stem, newest checkpoint file)]`` for every task, by stem (:meth:`iter_task_files`)."""
        return sorted(self.iter_task_files())

    def iter_task_files(self, hints: Optional[dict[str, Path]] = None) -> Iterator[tuple[str, Path]]:
        """``(stem, newest checkpoint file)`` of every task, in no particular order and one at a
        time (a caller may stop early): each folder of ``checkpoints/`` that holds a revision file,
        then each task of ``tasks/`` that has no such folder. An entry of ``checkpoints/`` that is
        not a plain folder (a symlink, a FIFO, a ``*.json`` file; other regular files, a note a
        person left, are ignored as in ``tasks/``) counts as a task whose file is the entry itself,
        so it is read, and refused, rather than ignored. Lists ``checkpoints/``, each task's folder
        and ``tasks/``.

        ``hints`` (stem → the newest file a previous call found, e.g. the inbox's): a hinted
        ``…/r<N>.json`` that still exists while ``…/r<N+1>.json`` does not is still the newest
        (a writer creates N+1 after reading N, and names are never removed), so that folder is not
        listed again: two ``lstat`` calls instead of a listing."""
        seen: set[str] = set()
        hints = hints or {}
        try:
            entries = os.scandir(self.checkpoints_dir)
        except (FileNotFoundError, NotADirectoryError):
            entries = None
        if entries is not None:
            with entries:
                for entry in entries:
                    if entry.name.startswith("."):
                        continue
                    if not entry.is_dir(follow_symlinks=False):
                        if entry.name.endswith(".json") or not entry.is_file(follow_symlinks=False):
                            seen.add(entry.name)  # a symlink, a FIFO, a stray checkpoint: refused by name
                            yield entry.name, self.checkpoints_dir / entry.name
                        continue
                    hinted = hints.get(entry.name)
                    if hinted is not None and _still_newest(hinted, entry.path):
                        seen.add(entry.name)
                        yield entry.name, hinted
                        continue
                    newest = _newest_name_in(entry.path)  # (names only: this runs once per task)
                    if newest is not None:
                        seen.add(entry.name)
                        yield entry.name, self.checkpoints_dir / entry.name / newest
        for stem, found in self.old_task_files().items():
            if stem not in seen:
                yield stem, found[-1][1]

    def load_newest(self, stem: str, path: Path | None = None) -> tuple[Path, Checkpoint] | None:
        """``(file, checkpoint)`` of the newest revision of ``stem`` (verified as
        :meth:`load_path`), or None if it has no file. ``path``: the newest file as a listing just
        found it (saves listing the folder again). If the file cannot be read and a newer revision
        was written meanwhile (an older one's content is cleared; ``doctor --repair`` moved a file of
        ``tasks/``), the newer one is read instead; otherwise the refusal is raised (fail closed:
        never an older revision instead, and never "no task" for a file that could not be read)."""
        if path is None:
            path = self._newest(stem)
        elif self._in_folder(path):
            self.task_dir(path.parent.name)  # a folder a listing found: checked as a load checks it
        for attempt in range(_READ_TRIES):
            if path is None:
                return None
            try:
                return path, self.load_path(path)
            except Refused as exc:
                try:
                    newer = self._newest(stem)
                except Refused:
                    newer = None
                if attempt == _READ_TRIES - 1 or newer is None or newer == path:
                    raise exc from None
                path = newer
        return None

    # -- what the commands print, and running in another state dir -------------------------
    @property
    def location(self) -> str:
        """Where the tasks are, for messages: the state dir."""
        return str(self.root)

    def with_root(self, root: Path) -> "Store":
        """A file store in another state dir (``demo`` runs in a state dir of its own)."""
        return Store(root)

    def child_url(self) -> None:
        """None: a child process opens the file store of a state dir by default
        (:meth:`state.store.Relocatable.child_url`)."""
        return None

    def ledger_entries(self) -> list[LedgerEntry]:
        """See :meth:`state.store.TaskStore.ledger_entries` (:meth:`state.files.ledger.Ledger.entries`)."""
        return Ledger(self.ledger_dir).entries()

    def ledger_get(self, key: str) -> Optional[LedgerEntry]:
        """See :meth:`state.store.TaskStore.ledger_get` (:meth:`state.files.ledger.Ledger.get`)."""
        return Ledger(self.ledger_dir).get(key)

    def ledger_record(self, *, key: str, task_id: str, action: str, title: str, content_sha256: str,
                      channel: Optional[str] = None, approval: Optional[str] = None,
                      result: Any = None, settled_by: Optional[str] = None,
                      settle_reason: Optional[str] = None) -> tuple[LedgerEntry, bool]:
        """See :meth:`state.store.TaskStore.ledger_record` (:meth:`state.files.ledger.Ledger.record`)."""
        return Ledger(self.ledger_dir).record(key=key, task_id=task_id, action=action, title=title,
                                              content_sha256=content_sha256, channel=channel,
                                              approval=approval, result=result, settled_by=settled_by,
                                              settle_reason=settle_reason)

    def intent_get(self, key: str) -> Optional[EffectIntent]:
        """See :meth:`state.store.TaskStore.intent_get` (:func:`state.files.intents.intent_get`)."""
        return intents.intent_get(self, key)

    def intent_record(self, intent: EffectIntent) -> tuple[EffectIntent, bool]:
        """See :meth:`state.store.TaskStore.intent_record` (:func:`state.files.intents.intent_record`)."""
        return intents.intent_record(self, intent)

    def settlement_get(self, key: str, attempt: int) -> Optional[Settlement]:
        """See :meth:`state.store.TaskStore.settlement_get` (:func:`state.files.intents.settlement_get`)."""
        return intents.settlement_get(self, key, attempt)

    def settlement_record(self, settlement: Settlement) -> tuple[Settlement, bool]:
        """See :meth:`state.store.TaskStore.settlement_record`
        (:func:`state.files.intents.settlement_record`)."""
        return intents.settlement_record(self, settlement)

    def intents(self) -> list[EffectIntent]:
        """See :meth:`state.store.TaskStore.intents` (:func:`state.files.intents.intents`)."""
        return intents.intents(self)

    def reviewer_list(self) -> ReviewerList:
        """See :meth:`state.store.TaskStore.reviewer_list` (:func:`state.files.reviewers.reviewer_list`)."""
        return reviewer_files.reviewer_list(self)

    def reviewer_save(self, expect: ReviewerList, new: ReviewerList) -> None:
        """See :meth:`state.store.TaskStore.reviewer_save` (:func:`state.files.reviewers.save`)."""
        reviewer_files.save(self, expect, new)

    def notify_get(self, task_id: str) -> Optional[Progress]:
        """See :meth:`state.store.TaskStore.notify_get` (:mod:`state.files.notify`)."""
        from state.files import notify

        return notify.get(self, task_id)

    def notify_save(self, expect: Optional[Progress], new: Progress) -> None:
        """See :meth:`state.store.TaskStore.notify_save` (:mod:`state.files.notify`)."""
        from state.files import notify

        notify.save(self, expect, new)

    def policy_get(self, version: Optional[int] = None) -> Optional[PolicyRecord]:
        """See :meth:`state.store.TaskStore.policy_get` (:func:`state.files.policies.get`)."""
        return policy_files.get(self, version)

    def policy_record(self, record: PolicyRecord) -> None:
        """See :meth:`state.store.TaskStore.policy_record` (:func:`state.files.policies.record`)."""
        policy_files.record(self, record)

    def rejection_get(self, task_id: str, channel: Optional[str] = None) -> Optional[RejectionRecord]:
        """See :meth:`state.store.TaskStore.rejection_get` (:func:`state.files.rejections.get`)."""
        return rejections.get(self, task_id, channel)

    def rejection_record(self, task_id: str, content_sha256: str, decision: Decision,
                         channel: Optional[str] = None) -> tuple[RejectionRecord, bool]:
        """See :meth:`state.store.TaskStore.rejection_record` (:func:`state.files.rejections.record`)."""
        return rejections.record(self, task_id, content_sha256, decision, channel)

    def rejection_remove(self, task_id: str, channel: Optional[str] = None) -> None:
        """See :meth:`state.store.TaskStore.rejection_remove` (:func:`state.files.rejections.remove`)."""
        rejections.remove(self, task_id, channel)

    def inspect(self, *, repair: bool = False, adopt: Iterable[str] = ()) -> Iterator[Inspected]:
        """See :meth:`state.store.Inspectable.inspect` (:func:`state.files.inspect.inspect`: the
        files, lock files and temp files of the state dir; ``repair`` deletes leftover temp files,
        clears older revision files a crash left whole, each under its owner's lock, and signs the
        unsigned records a signed checkpoint proves or ``adopt`` names: :mod:`state.adoption`)."""
        from state.files.inspect import inspect  # only doctor needs it

        return inspect(self, repair=repair, adopt=adopt)

    # -- locking -----------------------------------------------------------------------------
    @contextmanager
    def task_lock(self, task_id: str, *, timeout: Optional[float] = None) -> Iterator[None]:
        """Hold the per-task lock (``filelock``, cross-platform) for the duration of the block.

        The OS releases the lock if the holder dies, so a killed process never blocks forever;
        waiting is bounded by ``timeout`` seconds (default ``$HITL_LOCK_TIMEOUT``, 10; 0: try
        once). Raises :class:`Refused` on timeout.
        """
        timeout = settings().lock_timeout if timeout is None else timeout
        with self.owner_lock(file_name(task_id), timeout=timeout, what=f"task {task_id}"):
            yield

    def lock_path(self, owner: str) -> Path:
        """``locks/<owner>.lock``: the lock guarding every file whose stem is ``owner``."""
        return files.lock_path(self.root, owner)

    @contextmanager
    def owner_lock(self, owner: str, *, timeout: float, what: str) -> Iterator[None]:
        """Hold ``locks/<owner>.lock`` (``owner`` a file stem); raise :class:`Refused` after
        ``timeout`` seconds naming ``what``. Used by :meth:`task_lock` and by ``doctor``."""
        with files.owner_lock(self.root, owner, timeout=timeout, what=what):
            yield

    # -- checkpoints -------------------------------------------------------------------------
    def exists(self, task_id: str) -> bool:
        """True if a checkpoint file exists for ``task_id`` (as a name: a dangling symlink counts,
        and :meth:`load` then refuses it). Lists the task's own folder (and ``tasks/`` while it
        exists, if that folder holds no revision)."""
        return self._newest(file_name(task_id)) is not None

    def scan(self) -> tuple[list[Checkpoint], list[dict[str, str]]]:
        """Read every task's newest checkpoint file once: ``(checkpoints that verify, sorted by
        task ID, [{"file", "error"} for each that does not])``. Never raises for a bad file."""
        good: list[Checkpoint] = []
        bad: list[dict[str, str]] = []
        for stem, path in self.task_files():
            try:
                found = self.load_newest(stem, path)
            except Refused as exc:
                bad.append({"file": self.label(path), "error": str(exc)})
                continue
            if found is not None:
                good.append(found[1])
        return sorted(good, key=lambda cp: cp.task_id), bad

    def task_ids(self) -> list[str]:
        """Task IDs of every checkpoint (:func:`state.revisions.every_or_stop` over :meth:`scan`:
        raises :class:`Refused` naming the first that cannot be verified)."""
        return [cp.task_id for cp in every_or_stop(*self.scan())]

    def load(self, task_id: str) -> Checkpoint:
        """Read, validate and verify the checkpoint of ``task_id``: its newest revision file.

        Raises :class:`Refused` if it is missing, not JSON, not a valid envelope of our schema
        version, fails the MAC, or names another task or revision than its file. A newest file that
        does not verify stops (fail closed): an older revision is never read instead. Lists the
        task's own folder only (module docstring), whatever else the state dir holds.
        """
        found = self.load_newest(file_name(task_id))
        if found is None:
            raise Refused("not_found", f"no task {task_id!r} in {self.root}")
        path, cp = found
        if cp.task_id != task_id:
            raise Refused("integrity", f"checkpoint {path.name} names task {cp.task_id!r}, not {task_id!r}")
        return cp

    def load_path(self, path: Path) -> Checkpoint:
        """Read and verify one checkpoint file (see :meth:`load`): a revision file of a task's
        folder (``checkpoints/<stem>/r<N>.json``: the folder names the task, the file the
        revision) or a file of ``tasks/`` (``<stem>.r<N>.json``, or ``<stem>.json``)."""
        shown = self.label(path)
        where = f"checkpoint {shown}"
        raw = read_regular(path, where, limit=MAX_CHECKPOINT_BYTES)
        if raw is None:
            raise Refused("integrity", f"{where} cannot be read (No such file or directory)")
        if not raw:
            raise Refused("integrity", f"{where} is empty: the content of an older revision is cleared once a "
                          "newer one is written, and no newer revision file is there (removed by "
                          "hand?); a human must check")
        cp = _verified.get(path, raw, load_key, self.root)
        if cp is None:
            data = parse_json_object(raw, where)
            key = load_key(self.root, create=False)
            cp = verify_envelope(data, key, where=where, name=shown)
            _verified.put(path, raw, key, cp)
        if self._in_folder(path):
            stem, revision = path.parent.name, parse_folder_revision(path.name)
            if revision is None:
                raise Refused("integrity", f"{where} is not named r<N>.json (N: 6 digits or more); a human "
                              "must check")
            # the names it had in tasks/, under which state.id may have adopted it (state.state_id)
            adopted = (revision_file_name(stem, revision), stem + ".json")
        else:
            parsed = parse_revision_name(path.name)
            stem = parsed[0] if parsed is not None else path.name[:-len(".json")]
            revision, adopted = (parsed[1] if parsed is not None else None), ()
        if stem != file_name(cp.task_id):
            raise Refused("integrity", f"{where} holds task {cp.task_id!r}, whose file name would differ")
        if revision is not None and revision != cp.revision:
            raise Refused("integrity", f"{where} holds revision {cp.revision}, not the revision its name says "
                          f"({revision}); a human must check (a backup goes back under its own name)")
        state_id.check_bound(self.identity(), shown, cp.state_id, cp.mac, adopted_as=adopted)
        return cp

    def identity(self) -> state_id.StateIdentity | None:
        """This state dir's ``state.id`` (read once per :class:`Store`), or None if it has none yet.
        Raises :class:`Refused` if it is damaged (see :mod:`state.state_id`)."""
        if self._ident is None:
            self._ident = state_id.read(self.root)
        return self._ident

    def check_key_signs_here(self, key: bytes) -> None:
        """Raise :class:`Refused` (``foreign_state``, naming ``HITL_SIGNING_KEY``) if ``key`` signed
        none of the checkpoints of this state dir although there are some: another deployment's key
        (:func:`check_signs_here`). Reads checkpoint files until one verifies; writes nothing."""
        check_signs_here(self.root, (path for _, path in self.iter_task_files()), key)

    def check_writable(self, task_id: str) -> None:
        """Pre-flight for ``start`` and ``resume``: refuse, before anything is written for
        ``task_id``, what would stop the command half-way. Raises :class:`Refused` if the signing
        key or ``state.id`` is missing while checkpoints need it (creating a new one would orphan
        them), or if the task's ledger entry, effect records or trace file exist but are not regular files (a
        symlink would be written through; a FIFO would block), or if the signing key file exists
        but is not a usable key (checked by reading it, as the first write would), if a new task
        would be signed with a key that signed none of the checkpoints here
        (:func:`check_signs_here`), or if the state dir has no ``state.id`` yet and its file system
        cannot make hard links (a probe file is linked and both names removed:
        :func:`state.durable.check_links`). Leaves nothing on disk."""
        check_key_creatable(self.root)
        if os.path.lexists(self.root / KEY_FILE):
            load_key(self.root, create=False)
        if settings().signing_key is not None and not self.exists(task_id):
            check_signs_here(self.root, (path for _, path in self.iter_task_files()),
                             load_key(self.root, create=False))
        if self.identity() is None:
            state_id.check_creatable(self.root)
            self._check_links()
        stem = file_name(task_id)
        check_regular(self.ledger_dir / (stem + ".json"), f"ledger entry {stem}.json")
        for attempt in range(1, MAX_ATTEMPTS + 1):  # its effect records so far, probed by name:
            records = [intents.folder(self) / f"{stem}.{attempt}.{kind}.json" for kind in ("intent", "settled")]
            if not any(os.path.lexists(path) for path in records):
                break  # attempt n is begun only after n - 1 is settled: no later one
            for path in records:
                check_regular(path, f"effect record effects/{path.name}")
        check_regular(self.traces_dir / (stem + ".jsonl"), f"trace file traces/{stem}.jsonl",
                      writing=True)

    def _check_links(self) -> None:
        """:func:`state.durable.check_links` of the state dir, once per :class:`Store`."""
        if not getattr(self, "_links_ok", False):
            check_links(self.root)
            self._links_ok = True

    def save_revision(self, cp: Checkpoint, *, failpoint: str, event: tuple[str, dict[str, Any]],
                      **changes: Any) -> Checkpoint:
        """Write revision ``cp.revision + 1`` of ``cp`` with ``changes`` (field → new value; pydantic
        models are dumped) and one ``history`` event ``(name, detail)``; the detail also records the
        schema versions the revision was written with (for the receipt). Returns the saved
        checkpoint.

        Compare-and-swap: the write happens only if the file on disk is still exactly ``cp`` (same
        revision, same MAC), checked right before the swap. The task lock makes a conflict rare;
        this check makes it harmless when the lock file was deleted under a holder. Raises
        :class:`Refused` on a conflict (nothing written) and as :meth:`save` does.
        """
        body = next_revision(cp, event, changes)
        return self.save(body, failpoint=failpoint, expect=cp)

    def check_unchanged(self, cp: Checkpoint) -> None:
        """Raise :class:`Refused` unless the newest checkpoint file of ``cp.task_id`` on disk is
        still revision ``cp.revision`` with MAC ``cp.mac`` (what this process read and verified).
        Reads the file; writes nothing."""
        found = self._revisions(file_name(cp.task_id))
        if not found:
            raise _changed(cp.task_id, cp.revision, "no file")
        named, path = found[-1]
        if named not in (0, cp.revision):  # 0: a <stem>.json of tasks/, judged by its content
            raise _changed(cp.task_id, cp.revision, named)
        where = f"checkpoint {self.label(path)}"
        raw = read_regular(path, where, limit=MAX_CHECKPOINT_BYTES)
        if raw is not None and _verified.holds(path, raw, cp):
            return  # exactly the bytes this process verified or wrote for cp
        data = parse_json_object(raw, where) if raw else {}
        if data.get("revision") != cp.revision or data.get("mac") != cp.mac:
            raise _changed(cp.task_id, cp.revision, data.get("revision", "no file"))

    def save(self, body: dict[str, Any], *, failpoint: str, expect: Checkpoint | None = None) -> Checkpoint:
        """Sign ``body`` (an envelope without ``mac``), validate it, and write it as a new file.

        ``expect`` is the checkpoint this write follows (compare-and-swap, see
        :meth:`save_revision`): the new revision must be ``expect.revision + 1``, and its file
        ``checkpoints/<name>/r<revision>.json`` is created only if the newest revision on disk is
        still exactly ``expect`` (read from its folder, or from ``tasks/`` while the folder holds
        none) and no other process created that name first (``os.link``: one system call decides;
        module docstring). None means a new task: its first revision is created
        exclusively, and :class:`Refused` is raised if the task has any file already. The state
        dir's ID (``state.id``, created with the first checkpoint, after a check that the file
        system can make hard links: :func:`state.durable.check_links`) goes into the envelope's
        ``state_id``; every value is passed through :func:`state.secrets.redact_checkpoint` first
        (a free-text field holding the value of ``OPENAI_API_KEY``/``HITL_SIGNING_KEY``, 8+
        characters, becomes ``[redacted]`` whole; one in a structural field raises
        :class:`Refused` before anything is written). Returns the saved :class:`Checkpoint`.
        ``failpoint`` names this write for crash tests. Raises ``ValueError`` if ``body``'s
        revision does not follow ``expect``'s (after :class:`Refused` if ``expect`` is stale).
        """
        if expect is not None and body.get("revision") != expect.revision + 1:
            self.check_unchanged(expect)  # a stale ``expect`` is a conflict, as in every store
            raise ValueError(f"revision {body.get('revision')!r} does not follow {expect.revision}")
        if self.identity() is None:
            self._check_links()  # before the state dir's first file
        key = load_key(self.root, create=True)
        ident = self._ident = state_id.ensure(self.root)
        if body.get("state_id") not in (None, ident.state_id):
            raise Refused("foreign_state", f"checkpoint of task {body.get('task_id')!r} belongs to another state dir")
        body = {**body, "state_id": ident.state_id}  # binds a legacy checkpoint on its next write
        # A model or proxy can echo the API key (into the RunState, final output, history): never
        # saved. Structural fields are never altered (a secret in an open one refuses the write);
        # free text holding a secret is replaced whole (state.secrets).
        cp = seal(body, key)
        data = (json.dumps(cp.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n").encode("utf-8")
        if len(data) > MAX_CHECKPOINT_BYTES:  # the reader's limit: a file no command could read again
            raise Refused("unsafe_input", f"the checkpoint of task {cp.task_id} would be {len(data)} bytes, more "
                          f"than the {MAX_CHECKPOINT_BYTES} a reader accepts; nothing written")
        stem = file_name(cp.task_id)
        path = self.revision_path(cp.task_id, cp.revision)
        if expect is None:
            if self.exists(cp.task_id) or not create_exclusive(
                    path, data, owner=stem, failpoint=failpoint):
                raise Refused("stale_revision", [f"task {cp.task_id} was created by another process at the same time; "
                              "this write was not made", Next("status", cp.task_id)], task_id=cp.task_id)
        elif not create_exclusive(path, data, owner=stem, failpoint=failpoint,
                                  precondition=lambda: self.check_unchanged(expect),
                                  then=lambda: self.clear_older(cp.task_id)):
            raise _changed(cp.task_id, expect.revision, expect.revision + 1)
        _verified.wrote(path, data, cp)
        effects.note(cp.task_id, f"checkpoint saved at revision {cp.revision} ({cp.status})")
        return cp

    def clear_older(self, task_id: str, *, every: bool = False) -> int:
        """Clear the content (truncate to 0 bytes) of the revision files in ``task_id``'s folder
        older than the newest :data:`KEPT_REVISIONS`; the names stay (module docstring). After a
        write (``every`` False) it walks down from the newest of those and stops at the first one
        already empty (the ones below were cleared by earlier writes), so a write costs the same
        however many revisions the task has; ``every`` (``doctor --repair``) looks at each one.
        Returns how many files it cleared. Best effort: a file it cannot clear (gone, not a regular
        file, in use) is left for ``doctor --repair``; never raises for one."""
        found = self.folder_revisions(file_name(task_id))
        cleared = 0
        for _, path in reversed(found[:-KEPT_REVISIONS]):
            try:
                if os.lstat(path).st_size == 0:
                    if every:
                        continue
                    break
                fd = open_regular(path, f"checkpoint {self.label(path)}", os.O_WRONLY)  # never through a link
            except (OSError, Refused):
                continue
            try:
                os.ftruncate(fd, 0)
                cleared += 1
            except OSError:
                pass
            finally:
                os.close(fd)
        return cleared


def _still_newest(hinted: Path, folder: str) -> bool:
    """True if ``hinted`` is a revision file of task folder ``folder`` that exists while the next
    revision's name does not (``Store.iter_task_files``'s hints). Two ``lstat`` calls."""
    revision = parse_folder_revision(hinted.name)
    if revision is None or str(hinted.parent) != folder:
        return False
    return os.path.lexists(hinted) and not os.path.lexists(os.path.join(folder, revision_name(revision + 1)))


def _newest_name_in(folder: str) -> str | None:
    """The name of the newest revision file (``r<N>.json``) in task folder ``folder``, or None."""
    try:
        names = os.listdir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return None
    best: tuple[int, str] | None = None
    for name in names:
        if name[:1] == "r":
            revision = parse_folder_revision(name)
            if revision is not None and (best is None or revision > best[0]):
                best = (revision, name)
    return best[1] if best is not None else None


def _revisions_in(folder: Path) -> list[tuple[int, Path]]:
    """``[(revision, file)]`` of the revision files (``r<N>.json``) in task folder ``folder``,
    lowest first; none if it does not exist. Lists that folder only."""
    try:
        names = os.listdir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return []
    found = []
    for name in names:
        revision = parse_folder_revision(name)
        if revision is not None:
            found.append((revision, folder / name))
    return sorted(found)


def _envelopes(files: Iterable[Path]) -> Iterator[Any]:
    """The parsed envelope of each of ``files`` in turn (a file that cannot be read or parsed is
    skipped: it never verifies)."""
    for path in files:
        try:
            raw = read_regular(path, f"checkpoint {path.name}", limit=MAX_CHECKPOINT_BYTES)
            if raw:
                yield parse_json_object(raw, f"checkpoint {path.name}")
        except Refused:
            continue


def _changed(task_id: str, revision: int, now: Any) -> Refused:
    """The refusal of a write whose compare-and-swap failed: the task is no longer at ``revision``."""
    return Refused("stale_revision", [
        f"task {task_id} changed on disk since it was read (revision {revision} -> "
        f"{now}): another process wrote it; this write was not made", Next("see_status", task_id)],
        task_id=task_id)


def check_signs_here(root: Path, files: Iterable[Path], key: bytes) -> None:
    """Raise :class:`Refused` if ``files`` (the newest checkpoint file of each task of the state
    dir ``root``: ``Store.iter_task_files``) are some but ``key`` signed none of them: another
    deployment with another ``HITL_SIGNING_KEY`` on this state dir, whose first task would make
    every listing of the other's stop. Reads files (taken one at a time) until one verifies (the
    first, as a rule); files that cannot be read or parsed count, but never verify. Touches nothing."""
    counted: list[Path] = []

    def each() -> Iterator[Path]:
        for path in files:
            counted.append(path)
            yield path

    if signed_by_any(_envelopes(each()), key):
        return
    if counted:
        raise Refused("foreign_state", f"none of the {len(counted)} checkpoints in {root} is signed with this "
                      "HITL_SIGNING_KEY: another deployment with another key shares this state "
                      "dir? Use the key they were signed with, or another state dir; nothing was "
                      "written")


class _Verified:
    """What this process knows about checkpoint files, by path (the last :data:`SIZE` paths):
    the bytes it verified in full with a key (:func:`verify_envelope`), and the bytes it wrote.

    Everything :func:`verify_envelope` checks is a function of the file's bytes, the signing key and
    the :class:`Checkpoint` class alone, so bytes equal to verified ones, read with the same key,
    give the same checkpoint: :meth:`get` returns it instead of parsing, MAC-checking and
    validating again (``resume`` reads a task's file three times: the pre-flight, under the lock,
    and the tool before its effect). Only an exact byte comparison can hit; any other bytes, key or
    class are verified in full. Bytes this process wrote are never taken as verified; they serve
    only the compare-and-swap (:meth:`holds`).
    """

    SIZE = 64

    def __init__(self) -> None:
        self._read: dict[str, tuple[bytes, bytes, type, Checkpoint]] = {}
        self._written: dict[str, tuple[bytes, Checkpoint]] = {}
        self._lock = threading.Lock()  # a server may load checkpoints from several threads

    def _put(self, table: dict[str, Any], path: Path, value: Any) -> None:
        with self._lock:
            table.pop(str(path), None)
            table[str(path)] = value
            while len(table) > _Verified.SIZE:
                table.pop(next(iter(table)))

    def put(self, path: Path, raw: bytes, key: bytes, cp: Checkpoint) -> None:
        """Remember that ``raw`` passed every check of :func:`verify_envelope` with ``key`` as ``cp``."""
        self._put(self._read, path, (raw, key, Checkpoint, cp))

    def get(self, path: Path, raw: bytes, load_key: Any, root: Path) -> Checkpoint | None:
        """The checkpoint verified from exactly ``raw`` at ``path`` with today's signing key
        (``load_key(root, create=False)``, read again, as a full verification would), or None."""
        known = self._read.get(str(path))
        if known is None or known[0] != raw or known[2] is not Checkpoint:
            return None
        return known[3] if hmac.compare_digest(load_key(root, create=False), known[1]) else None

    def wrote(self, path: Path, data: bytes, cp: Checkpoint) -> None:
        """Remember that this process wrote ``data`` (the JSON of ``cp``) to ``path``."""
        self._put(self._written, path, (data, cp))

    def holds(self, path: Path, raw: bytes, cp: Checkpoint) -> bool:
        """True if ``raw`` is exactly the bytes this process verified or wrote for a checkpoint of
        ``cp``'s revision and MAC: what :meth:`Store.check_unchanged` would find by parsing them.
        (Written bytes that hold ``NaN``/``Infinity`` anywhere are left to the parser, which
        refuses those constants.)"""
        key = str(path)
        read, written = self._read.get(key), self._written.get(key)
        for known, parsed in ((read and (read[0], read[3]), True),
                              (written and (written[0], written[1]), False)):
            if known and known[0] == raw and (known[1].revision, known[1].mac) == (cp.revision, cp.mac):
                if parsed or (b"NaN" not in raw and b"Infinity" not in raw):
                    return True
        return False


#: The one :class:`_Verified` of this process.
_verified = _Verified()
