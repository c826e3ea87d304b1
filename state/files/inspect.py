"""What the file store hands ``doctor``: :meth:`state.files.store.Store.inspect`.

It reads every checkpoint (the newest revision file of each task: its folder in ``checkpoints/``,
or ``tasks/``, the layouts before per-task folders), every ledger
entry (``ledger/*.json``), every effect intent and settlement (``effects/*.json``: one that
cannot be read, a symlink or FIFO included, is an ``unreadable_effect_record`` problem), the lock
files (``locks/*.lock``) and temp files (``.tmp-*.part``) of the state dir, and yields
:mod:`state.inspection` records. Each task is read under its own lock, taken without waiting, so a
task a live process is working on is a ``busy`` problem instead of a half-finished write; the lock
is held while ``doctor`` judges the task.

A read-only state dir (``chmod -R a-w``, a read-only mount, a backup) is read all the same:
opening a lock file for writing fails with a permission error (``EACCES``/``EPERM``) or
``EROFS``, and then every checkpoint, ledger entry and rejection record is read without its lock,
and one ``not_locked`` problem says so. Without the lock a task a live process is writing could
look half-finished; on a state dir nobody can write, nobody is writing. ``repair`` repairs
nothing there. A lock file that is a symlink or a folder is an ``unusable_lock`` problem.

Unsigned records (``ledger/``, ``rejections/``, ``effects/``: a valid record without a signature,
written by an earlier version or by hand) are handed to :func:`state.adoption.review` first: each is
a finding, and with ``repair`` the ones a signed checkpoint proves (and those a person named in
``adopt``) are signed in place (a temp file, then ``os.replace``), under the task's lock.

Repairs (``repair``): deleting leftover temp files, clearing (to 0 bytes, under the task's lock)
older revision files that a crash left whole between a write and its cleanup, and moving each task
still in ``tasks/`` into its folder (:func:`_move_old`, under the task's lock; then ``tasks/``
itself is removed once empty). Without ``repair`` a state dir with files in ``tasks/`` gets one
``old_layout`` note (a task of ``tasks/`` is found by listing that whole folder until it moves);
a file of ``tasks/`` newer than its task's checkpoint in ``checkpoints/`` (or of the same
revision with other bytes) is an ``old_layout_conflict``, never removed. Every write
of a task's files happens under that task's lock (``locks/<owner>.lock``; the signing key under
``locks/signing.key.lock``, ``state.id`` under ``locks/state.id.lock``), so a temp file whose
owner's lock is held here belongs to no live process: deleting it is provably safe. Lock files
are never deleted (filelock's OS locks are dropped when the holder dies; deleting a file others
may wait on is never safe).

Never imports the SDK; imports ``state`` and filelock only.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Generator, Iterable, Iterator, Optional

from filelock import FileLock, Timeout

from state.adoption import Unsigned, review
from state.durable import create_exclusive
from state.errors import Refused
from state.fileio import TEMP_NAME, fsync_dir, make_dirs, parse_json_object, remove_temp, write_temp
from state.files import intents, rejections
from state.files.ledger import MAX_ENTRY_BYTES, Ledger
from state.files.sealing import sealed_bytes
from state.inspection import Counted, Inspected, Problem, Records, Repaired, TaskCheck, unapproved_entry
from state.integrity import KEY_FILE, load_key
from state.paths import file_name, read_regular
from state.record_seal import is_unsigned, legacy_fields
from state.records import LedgerEntry
from state.schema import MAX_CHECKPOINT_BYTES, Checkpoint
from state.signing import verify_envelope
from state.state_id import STATE_ID_FILE

if TYPE_CHECKING:  # the store calls this module with itself
    from state.files.store import Store

#: ``errno`` values meaning "this lock file cannot be opened for writing here" (a read-only state dir).
_READ_ONLY_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})
#: How a person restores a checkpoint of this store that cannot be read.
RESTORE = "restore the file from a backup, or move it away"


class _Probe:
    """Hold a task's lock without waiting, never creating or deleting a lock file in read-only mode.

    After ``__enter__``: ``lock`` is set if the lock is held; ``error`` if the lock file itself is
    unusable (a symlink, a folder); ``read_only`` (the OS's reason, e.g. ``Permission denied``) if
    it could not be opened for writing because the state dir cannot be written.
    """

    def __init__(self, store: "Store", owner: str, *, create: bool) -> None:
        self.path = store.lock_path(owner)
        self.create = create
        self.lock: FileLock | None = None
        self.error: str | None = None  # set when the lock file itself is unusable
        self.read_only: str | None = None  # set when the state dir cannot be written

    def __enter__(self) -> bool:
        """True if we hold the lock, or no lock file exists and we may not create one, or the lock
        cannot be taken because the state dir is read-only (``read_only`` set: check unlocked)."""
        if not os.path.lexists(self.path) and not self.create:
            return True  # nobody holds a lock whose file does not exist
        try:
            make_dirs(self.path.parent)  # owner-only (0o700)
            try:
                lock = FileLock(str(self.path), timeout=0, mode=0o600, preserve_lock_file=True)
            except TypeError:  # filelock < 4 has no preserve_lock_file
                lock = FileLock(str(self.path), timeout=0, mode=0o600)
            lock.acquire()
        except Timeout:  # (a TimeoutError, so an OSError: caught first)
            return False
        except OSError as exc:  # read-only state dir; a lock file that is a symlink, a folder …
            reason = exc.strerror or type(exc).__name__
            if exc.errno in _READ_ONLY_ERRNOS and self._plain_or_missing():
                self.read_only = reason
                return True
            self.error = f"lock file {self.path.name} cannot be used ({reason})"
            return False
        self.lock = lock
        return True

    def _plain_or_missing(self) -> bool:
        """True if the lock file is a regular file or does not exist (so a permission error means
        the state dir cannot be written, not that the lock file was replaced by something else)."""
        try:
            return stat.S_ISREG(os.lstat(self.path).st_mode)
        except FileNotFoundError:
            return True
        except OSError:
            return False

    def __exit__(self, *exc: object) -> None:
        if self.lock is not None:
            self.lock.release()


#: How a person removes a record of this store that nothing proves (a finding's remedy).
REMOVE = "otherwise move the file away"


def inspect(store: "Store", *, repair: bool = False, adopt: Iterable[str] = ()) -> Iterator[Inspected]:
    """The records of :meth:`state.store.Inspectable.inspect` for the file store ``store`` (module
    docstring); ``adopt``: the paths of unsigned records a person vouched for
    (:func:`state.adoption.review`). Never raises :class:`Refused` for a damaged file."""
    reported: set[str] = set()  # unsigned records, named once (not again as unreadable)
    for item in review(store, list(_unsigned(store)), repair=repair, adopt=adopt,
                       sign=lambda u: _sign(store, u), remedy=REMOVE):
        if isinstance(item, Problem):
            reported.add(item.path)
        yield item
    entries: dict[str, tuple[LedgerEntry, Path]] = {}
    ledger = Ledger(store.ledger_dir)
    n_entries = 0
    if ledger.folder.is_dir():
        for path in sorted(ledger.folder.glob("*.json")):
            n_entries += 1
            try:
                entry = ledger.read_path(path)  # a regular file only (a FIFO would block)
            except Refused as exc:
                if str(path) not in reported:
                    yield Problem("unreadable_ledger_entry", str(path), str(exc))
                continue
            entries[path.stem] = (entry, path)
    yield from (p for p in _effect_problems(store) if p.path not in reported)
    seen_stems: set[str] = set()
    unlocked: list[str] = []  # the OS's reasons, when a lock could not be taken (read-only)
    n_tasks = 0

    old_files = store.old_task_files()  # tasks/: the layouts before per-task folders
    for stem, path in store.task_files():  # each task's newest revision file
        n_tasks += 1
        seen_stems.add(stem)
        moving = repair and stem in old_files  # a write: the lock is taken, its file created if need be
        probe = _Probe(store, stem, create=moving)
        with probe as held:
            if probe.read_only:
                unlocked.append(probe.read_only)
            if not held:
                yield (Problem("unusable_lock", str(probe.path), probe.error) if probe.error else
                       Problem("busy", str(path), "a live process holds this task's lock"))
                continue
            try:
                path, cp = store.load_newest(stem) or (path, store.load_path(path))
            except Refused as exc:
                yield Problem("unreadable_checkpoint", str(path), str(exc), remedy=RESTORE)
                continue
            if repair and not probe.read_only:  # a crash between a write and its cleanup
                cleared = store.clear_older(cp.task_id, every=True)
                if cleared:
                    yield Repaired("older_revision", str(path),
                                   f"cleared {cleared} older revision file(s)")
            if stem in old_files and not (repair and not probe.read_only):
                yield from _old_conflicts(store, stem, cp, path, old_files[stem])
            elif stem in old_files:
                moved = yield from _move_old(store, stem, cp, path, old_files[stem])
                path = moved or path
            yield TaskCheck(cp, str(path), records=lambda cp=cp: _records(store, cp, entries),
                            claim=lambda keys: seen_stems.update(file_name(k) for k in keys))

    for stem, (entry, path) in sorted(entries.items()):
        if stem not in seen_stems:
            yield Problem("entry_without_task", str(path),
                          f"the ledger shows key {entry.idempotency_key!r} executed, but no task "
                          "checkpoint exists", task_id=entry.task_id, remedy=unapproved_entry(entry))

    lock_files = sum(1 for _ in store.locks_dir.glob("*.lock")) if store.locks_dir.is_dir() else 0

    for tmp in _temp_files(store):
        match = TEMP_NAME.match(tmp.name)
        if match is None:
            yield Problem("unknown_temp", str(tmp), "a temp file not named by this program's writer")
            continue
        owner = match["owner"]
        if not (owner in (KEY_FILE, STATE_ID_FILE) or _is_stem(owner)):
            yield Problem("unknown_temp", str(tmp), f"temp file for unknown owner {owner!r}")
            continue
        detail = f"left by a process that died while writing {owner}"
        if not repair:
            yield Problem("leftover_temp", str(tmp), detail)
            continue
        probe = _Probe(store, owner, create=True)
        with probe as held:
            if probe.read_only:
                unlocked.append(probe.read_only)
                yield Problem("leftover_temp", str(tmp), detail +
                              f"; not repaired: its lock could not be taken ({probe.read_only})")
                continue
            if not held:
                yield Problem("busy", str(tmp), f"a live process is writing {owner}")
                continue
            try:
                tmp.unlink()
                yield Repaired("leftover_temp", str(tmp), "deleted")
            except FileNotFoundError:
                yield Repaired("leftover_temp", str(tmp), "already gone")
            except OSError as exc:
                yield Problem("leftover_temp", str(tmp),
                              detail + f"; delete failed: {exc.strerror or type(exc).__name__}")
    yield from _old_layout_left(store, repair=repair and not unlocked)
    if unlocked:
        yield Problem("not_locked", str(store.locks_dir),
                      f"the state dir cannot be written ({unlocked[0]}), so no lock could be taken: "
                      "every task was checked read-only, without its lock, and nothing was repaired")
    yield Counted(tasks=n_tasks, ledger_entries=n_entries, lock_files=lock_files)


def _records(store: "Store", cp: Checkpoint, entries: dict[str, tuple[LedgerEntry, Path]]) -> Records | Problem:
    """The one-call task ``cp``'s ledger entry (re-read under the lock: a resume may have finished
    since the scan) and rejection record, or the problem that stops reading them."""
    task_id = cp.task_id
    found = _read_one(store, task_id, entries)
    try:
        rejected = rejections.get(store, task_id)
    except Refused as exc:
        return Problem("unreadable_rejection_record", str(rejections.path_for(store, task_id)),
                       str(exc), task_id=task_id)
    entry, path = found if found is not None else (None, None)
    return Records(entry=entry, entry_name=path.name if path is not None else "", rejection=rejected)


def _effect_problems(store: "Store") -> Iterator[Problem]:
    """An ``unreadable_effect_record`` problem for each file of ``effects/`` that is not a valid
    intent or settlement named for its own key and attempt (a symlink, a FIFO, damaged JSON …)."""
    folder = intents.folder(store)
    if not folder.is_dir():
        return
    for path in sorted(folder.glob("*.json")):
        try:
            intents.read_path(path)
        except Refused as exc:
            yield Problem("unreadable_effect_record", str(path), str(exc))


def _unsigned(store: "Store") -> Iterator[Unsigned]:
    """Every valid record of ``ledger/``, ``rejections/`` and ``effects/`` that carries no signature
    (:func:`state.record_seal.is_unsigned`) and is named for its own key: what an earlier version
    wrote. A file that cannot be read, or is not a valid record of its kind, is left to the scans
    that report it as unreadable."""
    folders = ((store.ledger_dir, lambda name: "ledger_entry"), (rejections.folder(store), lambda name: "rejection"),
               (intents.folder(store), lambda name: intents.FILE_KINDS.get(name.rsplit(".", 2)[-2], "")))
    for folder, kind_of in folders:
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.json")):
            kind = kind_of(path.name)
            try:
                raw = read_regular(path, f"record {path.name}", limit=MAX_ENTRY_BYTES)
                data = parse_json_object(raw or b"", f"record {path.name}")
            except Refused:
                continue
            record = legacy_fields(kind, data) if kind and is_unsigned(data) else None
            if record is not None and path.name == _file_name(kind, record):
                yield Unsigned(kind, str(path), record, locator=(path, raw))


def _file_name(kind: str, record: object) -> str:
    """The name the file of ``record`` (of ``kind``) has in its folder."""
    if kind == "ledger_entry":
        return file_name(getattr(record, "idempotency_key")) + ".json"
    if kind == "rejection":
        return rejections.path_for_key(getattr(record, "task_id"), getattr(record, "channel"))
    name = "intent" if kind == "effect_intent" else "settled"
    return f"{file_name(getattr(record, 'idempotency_key'))}.{getattr(record, 'attempt')}.{name}.json"


def _sign(store: "Store", item: Unsigned) -> None:
    """Replace the unsigned record of ``item`` with its signed envelope (:mod:`state.record_seal`):
    a temp file, then ``os.replace``, then an fsync of the folder. Raises :class:`Refused` if the
    file changed since it was read (nothing replaced), or cannot be replaced."""
    path, raw = item.locator
    data = sealed_bytes(item.kind, item.record, store.root)
    if read_regular(path, f"record {path.name}", limit=MAX_ENTRY_BYTES) != raw:
        raise Refused("refused", f"{path.name} changed while doctor read it; run doctor again")
    rec = item.record
    owner = file_name(getattr(rec, "idempotency_key", None) or rejections.key_of(getattr(rec, "task_id"),
                                                                                 getattr(rec, "channel")))
    try:
        tmp = write_temp(path.parent, data, owner=owner)
        try:
            os.replace(tmp, path)
        except BaseException:
            remove_temp(tmp)
            raise
    except OSError as exc:
        raise Refused("refused", f"{path.name} cannot be replaced ({exc.strerror or type(exc).__name__})") from None
    fsync_dir(path.parent)


def _temp_files(store: "Store") -> Iterator[Path]:
    task_folders = sorted(p for p in store.checkpoints_dir.iterdir() if p.is_dir() and not p.is_symlink()) \
        if store.checkpoints_dir.is_dir() else []
    for folder in (store.root, store.tasks_dir, store.ledger_dir, rejections.folder(store), intents.folder(store),
                   *task_folders):
        if folder.is_dir():
            yield from sorted(folder.glob(".tmp-*"))


def _revision_of(revision: int, path: Path) -> Optional[int]:
    """The revision a file of ``tasks/`` holds: the one its name says; for a ``<stem>.json``
    (``revision`` 0) the one in its content, 0 if it is empty (cleared: older than two revisions),
    None if it cannot be read."""
    if revision:
        return revision
    try:
        raw = read_regular(path, f"checkpoint {path.name}", limit=MAX_CHECKPOINT_BYTES)
        if not raw:
            return 0
        found = parse_json_object(raw, f"checkpoint {path.name}").get("revision")
    except Refused:
        return None
    return found if isinstance(found, int) and not isinstance(found, bool) else None


def _same_bytes(a: Path, b: Path) -> bool:
    """True if files ``a`` and ``b`` can both be read and hold the same bytes."""
    try:
        first = read_regular(a, a.name, limit=MAX_CHECKPOINT_BYTES)
        return first is not None and first == read_regular(b, b.name, limit=MAX_CHECKPOINT_BYTES)
    except Refused:
        return False


def _removable(store: "Store", newest: Path, checkpoint: int, revision: int, old: Path) -> bool:
    """True if file ``old`` of ``tasks/`` (``revision`` as :meth:`Store.old_revisions` names it)
    holds nothing the task's checkpoint ``newest`` (revision ``checkpoint``, in the task's folder)
    does not supersede: an older revision, an emptied one, or the same revision with the same bytes."""
    held = _revision_of(revision, old)
    if held is None:
        return False
    if held < checkpoint:
        return True
    try:
        empty = os.lstat(old).st_size == 0
    except OSError:
        return False
    return held == checkpoint and (empty or _same_bytes(old, newest))


def _old_conflicts(store: "Store", stem: str, cp: Checkpoint, path: Path,
                   old: list[tuple[int, Path]]) -> Iterator[Problem]:
    """An ``old_layout_conflict`` for each file of ``tasks/`` that the task's checkpoint ``cp``
    (file ``path``) does not supersede; none while the checkpoint is itself in ``tasks/``."""
    if not store._in_folder(path):
        return
    for revision, old_path in old:
        if not _removable(store, path, cp.revision, revision, old_path):
            yield _conflict(store, cp, path, old_path)


def _conflict(store: "Store", cp: Checkpoint, path: Path, old_path: Path) -> Problem:
    """The ``old_layout_conflict`` of file ``old_path`` of ``tasks/`` that task ``cp``'s checkpoint
    (file ``path``, in its folder) does not supersede."""
    folder = f"{store.checkpoints_dir.name}/{path.parent.name}/"
    return Problem("old_layout_conflict", str(old_path),
                   f"{old_path.name} in {store.tasks_dir.name}/ is newer than the task's checkpoint "
                   f"{store.label(path)} (revision {cp.revision}) or differs from it; the checkpoint is the one "
                   f"in {folder} (written by an older version after the upgrade, or a backup put back into "
                   f"{store.tasks_dir.name}/?)", task_id=cp.task_id,
                   remedy=f"move it away, or put it into {folder} under the name of its own revision with every "
                          "newer revision file removed")


def _move_old(store: "Store", stem: str, cp: Checkpoint, path: Path,
              old: list[tuple[int, Path]]) -> Generator[Inspected, None, Optional[Path]]:
    """Move task ``stem`` out of ``tasks/`` (its files ``old``), its lock held: if its folder holds
    no revision yet, copy its checkpoint ``cp`` (read from ``path``, the newest file of ``tasks/``)
    into it under the name of its own revision (exclusive create, failpoint ``checkpoint:migrate``),
    then remove each file of ``tasks/`` the folder's checkpoint supersedes (:func:`_removable`).
    A crash at any point leaves a readable task (``state.files.store``). Yields a ``Repaired`` or
    the problems found; returns the task's checkpoint file in its folder (None if not moved)."""
    if not store._in_folder(path):
        where = f"checkpoint {path.name}"
        try:  # the bytes copied are the checkpoint verified as cp, or nothing is copied
            raw = read_regular(path, where, limit=MAX_CHECKPOINT_BYTES) or b""
            again = verify_envelope(parse_json_object(raw, where), load_key(store.root, create=False),
                                    where=where, name=path.name)
            if (again.task_id, again.revision, again.mac) != (cp.task_id, cp.revision, cp.mac):
                raise Refused("integrity", f"{where} changed while it was being moved; a human must check")
        except Refused as exc:
            yield Problem("unreadable_checkpoint", str(path), str(exc), remedy=RESTORE)
            return None
        target = store.revision_path(cp.task_id, cp.revision)
        create_exclusive(target, raw, owner=stem, failpoint="checkpoint:migrate")  # False: it is there
    found = store.folder_revisions(stem)
    if not found:
        return None
    newest_revision, newest = found[-1]
    try:
        moved = store.load_path(newest)  # what every reader now takes: it must verify
    except Refused as exc:
        yield Problem("unreadable_checkpoint", str(newest), str(exc), remedy=RESTORE)
        return None
    removed, kept = 0, []
    for revision, old_path in old:
        if not _removable(store, newest, newest_revision, revision, old_path):
            yield _conflict(store, moved, newest, old_path)
            continue
        try:
            old_path.unlink()
            removed += 1
        except FileNotFoundError:
            pass
        except OSError as exc:  # e.g. in use on Windows: the next repair removes it
            kept.append(f"{old_path.name} ({exc.strerror or type(exc).__name__})")
    yield Repaired("old_layout", str(newest),
                   f"moved task {cp.task_id} from {store.tasks_dir.name}/ ({removed} file(s) removed)"
                   + (f"; left {', '.join(kept)} for the next repair" if kept else ""))
    return newest


def _old_layout_left(store: "Store", *, repair: bool) -> Iterator[Inspected]:
    """One ``old_layout`` note if ``tasks/`` still holds checkpoint files; with ``repair`` and none
    left, ``tasks/`` is removed if it is empty (a stray file keeps it, harmlessly)."""
    left = store.old_task_files()
    if left:
        yield Problem("old_layout", str(store.tasks_dir),
                      f"{len(left)} task(s) still in {store.tasks_dir.name}/, the layout before one folder per "
                      f"task: a task there is found by listing that whole folder until it moves to "
                      f"{store.checkpoints_dir.name}/<name>/")
        return
    if repair and store.tasks_dir.is_dir() and not store.tasks_dir.is_symlink():
        try:
            store.tasks_dir.rmdir()  # only if empty; a folder, never replaced: safe on Windows too
        except OSError:
            return
        yield Repaired("old_layout", str(store.tasks_dir), "removed the empty folder")


def _is_stem(owner: str) -> bool:
    head, sep, digest = owner.rpartition("--")
    return bool(sep and head) and len(digest) == 12 and all(c in "0123456789abcdef" for c in digest)


def _read_one(store: "Store", task_id: str,
              entries: dict[str, tuple[LedgerEntry, Path]]) -> Optional[tuple[LedgerEntry, Path]]:
    """The ledger entry for ``task_id`` as it is now (it may have appeared since the scan)."""
    stem = file_name(task_id)
    path = store.ledger_dir / (stem + ".json")
    if stem in entries:
        return entries[stem]
    if not path.exists():
        return None
    try:
        entry = Ledger(store.ledger_dir).get(task_id)
    except Refused:
        return None  # reported when the ledger is scanned next time
    if entry is None:
        return None
    entries[stem] = (entry, path)
    return entries[stem]
