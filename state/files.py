"""Low-level file helpers shared by every writer and reader of the state dir. A leaf module.

It imports nothing of ours but :mod:`state.errors`, so every other state module (storage,
integrity, state ID, rejections, ledger, doctor) can use it without an import cycle
(``tests/test_imports.py`` checks both). What is here:

- :func:`make_dirs`: owner-only folders (``0o700``);
- :func:`write_temp`: a fsynced temp file named for the file it will become (:data:`TEMP_NAME`);
- :func:`replace_atomically` and :func:`link_new`: the two durable writes (replace a file whole;
  create one that must not exist yet), each ending with :func:`fsync_dir`. The named crash points
  around them are added by :mod:`state.durable`, which is what callers use;
- :func:`owner_lock`: the per-file lock ``locks/<owner>.lock``;
- :func:`parse_json_object`: strict JSON (no duplicate keys, no ``NaN``, UTF-8 only).

Reading one file safely (no symlink followed, no FIFO blocked on) is :func:`state.paths.read_regular`
(also a leaf). Never imports the SDK; ``tempfile`` and ``filelock`` are imported only by the
functions that write or lock (read-only commands stay fast).
"""

from __future__ import annotations

import functools
import json
import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from .errors import Stopped

#: Folder of a state dir holding one lock file per owner (see :func:`owner_lock`).
LOCKS_DIR = "locks"

#: Temp files are ``.tmp-<owner>.<8 random chars>.part``; ``<owner>`` is the file stem they will
#: become (a task's file name, or ``signing.key``). ``doctor`` reads the owner back to know
#: which lock proves that no live process is still writing the file.
TEMP_NAME = re.compile(r"^\.tmp-(?P<owner>.+)\.[a-z0-9_]{8}\.part\Z")


def make_dirs(folder: Path) -> None:
    """Create ``folder`` and any missing parents with mode ``0o700`` (owner only; the umask can only
    remove bits from it), so no folder this program creates is writable, or listable, by another
    user. Existing folders are left as they are. Raises ``OSError`` as ``Path.mkdir`` does."""
    missing = []
    probe = folder
    while not probe.is_dir() and probe.parent != probe:
        missing.append(probe)
        probe = probe.parent
    for path in reversed(missing):
        path.mkdir(mode=0o700, exist_ok=True)


def fsync_dir(folder: Path) -> None:
    """fsync a directory so a rename in it is durable; a no-op where the OS does not allow it."""
    if os.name == "nt":
        return
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_temp(folder: Path, data: bytes, *, owner: str) -> Path:
    """Write ``data`` to a new temp file in ``folder`` (created ``0o700`` if missing), flushed and
    fsynced; return its path. The file is ``0o600``, named ``.tmp-<owner>.XXXXXXXX.part`` (see
    :data:`TEMP_NAME`). Raises ``OSError`` (nothing left behind) if it cannot be written."""
    import tempfile  # here, not at the top: read-only commands never write (startup time)

    make_dirs(folder)  # owner-only folders (0o700); mkstemp creates the file 0o600
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".tmp-{owner}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def replace_atomically(path: Path, data: bytes, *,
                       precondition: Callable[[], None] | None = None) -> None:
    """Replace ``path`` with ``data`` atomically: :func:`write_temp` (owner: ``path``'s stem) →
    ``os.replace`` → :func:`fsync_dir`. A reader sees the old file or the new one, never half.

    ``precondition`` (if given) runs after the temp file is written and immediately before
    ``os.replace``, so a compare-and-swap check sits as close to the swap as the file system
    allows; if it raises, the temp file is removed and nothing is replaced.
    """
    tmp = write_temp(path.parent, data, owner=path.stem)
    try:
        if precondition is not None:
            precondition()
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def link_new(path: Path, data: bytes, *, owner: str) -> bool:
    """Create ``path`` with ``data`` unless it exists; True if this call created it.

    :func:`write_temp` (named for ``owner``) → ``os.link`` to ``path``, which fails if the name
    exists (another process won: keep theirs) → unlink the temp → :func:`fsync_dir`. A reader sees
    no file or the whole file, never half, and two processes can never both create it.
    """
    tmp = write_temp(path.parent, data, owner=owner)
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)
    return True


def lock_path(root: Path, owner: str) -> Path:
    """``<root>/locks/<owner>.lock``: the lock guarding every file whose stem is ``owner``."""
    return root / LOCKS_DIR / (owner + ".lock")


@contextmanager
def owner_lock(root: Path, owner: str, *, timeout: float, what: str) -> Iterator[None]:
    """Hold ``<root>/locks/<owner>.lock`` (``filelock``, cross-platform; the OS releases it if the
    holder dies) for the duration of the block, waiting at most ``timeout`` seconds.

    Raises :class:`Stopped` naming ``what`` (e.g. ``"task t-1"``) on timeout, and naming the lock
    file if it cannot be used (a symlink, a folder, unreadable …).
    """
    from filelock import FileLock, Timeout  # ~10 ms: only commands that lock pay it

    path = lock_path(root, owner)
    make_dirs(path.parent)
    lock = FileLock(str(path), timeout=timeout, mode=0o600)
    try:
        lock.acquire()
    except Timeout:  # (a TimeoutError, so an OSError: caught first)
        raise Stopped(
            f"{what} is being worked on by another process (waited {timeout:g} s); "
            "try again when it finishes"
        ) from None
    except OSError as exc:  # a lock file that is a symlink (not followed), a folder, unreadable …
        raise Stopped(f"lock file {LOCKS_DIR}/{owner}.lock cannot be used "
                      f"({exc.strerror or type(exc).__name__}); a human must check it") from None
    try:
        yield
    finally:
        lock.release()


def _reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):  # a key repeated: name the first one that is
        keys = [k for k, _ in pairs]
        dup = next(k for k in keys if keys.count(k) > 1)
        raise ValueError(f"duplicate key {dup!r}")
    return found


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


@functools.lru_cache(maxsize=8)
def parse_shared(text: str) -> Any:
    """``json.loads(text)``, parsed once per distinct text (the last 8): a RunState is read for its
    ``$schemaVersion``, its spend and its approvals, several times per command. The result is
    shared between callers: read it, never modify it. Raises as ``json.loads``."""
    return json.loads(text)


@functools.lru_cache(maxsize=8)
def parse_object_shared(text: str, where: str) -> dict[str, Any]:
    """:func:`parse_json_object` of ``text`` (UTF-8), parsed once per distinct text (the last 8;
    a refusal is never remembered). Shared between callers: read it, never modify it."""
    return parse_json_object(text.encode("utf-8"), where)


def parse_json_object(raw: bytes, where: str) -> dict[str, Any]:
    """Parse ``raw`` as strict UTF-8 JSON whose top level is an object.

    Duplicate keys, ``NaN``/``Infinity``, bad UTF-8 and non-objects are refused with
    :class:`Stopped` naming ``where`` (corrupted JSON → stop, never guess).
    """
    try:
        text = raw.decode("utf-8")
        data = json.loads(
            text, object_pairs_hook=_reject_duplicate_keys, parse_constant=_reject_constant
        )
    except UnicodeDecodeError:
        raise Stopped(f"{where} is not valid UTF-8 (corrupted)") from None
    except (ValueError, RecursionError) as exc:
        msg = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        raise Stopped(f"{where} is not valid JSON (corrupted): {msg}") from None
    if not isinstance(data, dict):
        raise Stopped(f"{where} is not a JSON object (corrupted)")
    return data
