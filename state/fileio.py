"""Low-level file helpers shared by every writer and reader of the state dir. A leaf module.

It imports nothing of ours but :mod:`state.errors`, so every other state module (storage,
integrity, state ID, rejections, ledger, doctor) can use it without an import cycle
(``tests/test_imports.py`` checks both). What is here:

- :func:`make_dirs`: owner-only folders (``0o700``);
- :func:`write_temp`: a fsynced temp file named for the file it will become (:data:`TEMP_NAME`);
- :func:`link_new`: the one durable write (create a file that must not exist yet: temp file, then
  ``os.link``), ending with :func:`fsync_dir`; no file is ever replaced in place. The named crash
  points around it are added by :mod:`state.durable`, which is what callers use;
- :func:`probe_links`: the check, once per state dir, that its file system can make hard links;
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

from state.errors import Next, Refused, lock_busy

#: Folder of a state dir holding one lock file per owner (see :func:`owner_lock`).
LOCKS_DIR = "locks"

#: Temp files are ``.tmp-<owner>.<8 random chars>.part``; ``<owner>`` is the file stem they will
#: become (a task's file name, or ``signing.key``). ``doctor`` reads the owner back to know
#: which lock proves that no live process is still writing the file.
TEMP_NAME = re.compile(r"^\.tmp-(?P<owner>.+)\.[a-z0-9_]{8}\.part\Z")


def make_dirs(folder: Path) -> None:
    """Create ``folder`` and any missing parents with mode ``0o700`` (owner only; the umask can only
    remove bits from it), so no folder this program creates is writable, or listable, by another
    user; the folder holding each one created is fsynced (:func:`fsync_dir`), so a file later
    made durable in a new folder (a task's first checkpoint in ``checkpoints/<name>/``) cannot be
    lost with its folder's name in a power cut. Existing folders are left as they are. Raises
    ``OSError`` as ``Path.mkdir`` does."""
    missing = []
    probe = folder
    while not probe.is_dir() and probe.parent != probe:
        missing.append(probe)
        probe = probe.parent
    for path in reversed(missing):
        path.mkdir(mode=0o700, exist_ok=True)
        fsync_dir(path.parent)


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


#: How often :func:`remove_temp` tries again when the OS says a file is in use, and the first wait
#: (seconds; doubled each time): on Windows a file that another process has open (the inbox reads
#: checkpoints every 2 s) cannot be removed for a moment; 5 tries wait 0.15 s in all.
SHARING_RETRIES = 5
SHARING_WAIT_S = 0.01


def remove_temp(tmp: Path) -> None:
    """Remove the temp file ``tmp`` (no error if it is gone). On ``PermissionError`` (Windows: the
    file is open in another process, e.g. a reader of the name it was just linked to) wait and try
    again, :data:`SHARING_RETRIES` times in all; if it still fails the temp is left where it is
    (it is never read as data, and ``doctor --repair`` removes it once its owner's lock is free).
    Any other ``OSError`` is raised."""
    import time

    wait = SHARING_WAIT_S
    for attempt in range(SHARING_RETRIES):
        try:
            tmp.unlink(missing_ok=True)
            return
        except PermissionError:
            if attempt == SHARING_RETRIES - 1:
                return
            time.sleep(wait)
            wait *= 2


def no_links(folder: Path, exc: BaseException) -> Refused:
    """The one refusal for a folder whose file system cannot make hard links (FAT, exFAT, some
    synced or network folders): the file store creates every file with ``os.link`` so that two
    processes can never both create it."""
    why = getattr(exc, "strerror", None) or type(exc).__name__
    return Refused("refused", [f"the state dir's file system does not support hard links ({folder}: {why}); "
                   "the file store needs them to create each file exclusively: use a folder on a "
                   "local disk (NTFS, ext4, APFS), or a PostgreSQL store", Next("choose_store")])


def link_new(path: Path, data: bytes, *, owner: str,
             precondition: Callable[[], None] | None = None) -> bool:
    """Create ``path`` with ``data`` unless it exists; True if this call created it.

    :func:`write_temp` (named for ``owner``) → ``precondition()`` (if given; if it raises, nothing
    is created) → ``os.link`` to ``path``, which fails if the name exists (another process won:
    keep theirs) → unlink the temp (:func:`remove_temp`) → :func:`fsync_dir`. A reader sees no file
    or the whole file, never half, and two processes can never both create it: the link is one
    system call, so a check in ``precondition`` followed by the link is a compare-and-swap when
    every writer creates the next name (see ``state.files.store``). Raises :class:`Refused`
    (:func:`no_links`) if the file system cannot make hard links; ``OSError`` otherwise.
    """
    tmp = write_temp(path.parent, data, owner=owner)
    try:
        if precondition is not None:
            precondition()
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        except (OSError, NotImplementedError) as exc:  # EPERM on FAT/exFAT: the temp was written
            raise no_links(path.parent, exc) from None
    finally:
        remove_temp(tmp)
    fsync_dir(path.parent)
    return True


def probe_links(folder: Path) -> None:
    """Check that ``folder`` (created ``0o700`` if missing) is on a file system that can make hard
    links, which :func:`link_new` needs: a probe temp file is linked to a second temp name, and
    both are removed, and so is every folder this call created: nothing is left on disk, so a
    pre-flight check may call it. Raises :class:`Refused` (:func:`no_links`) if it cannot.
    Called once per state dir, before its first checkpoint (``state.files.store.Store.save``)."""
    import secrets

    missing = []
    probe = folder
    while not probe.is_dir() and probe.parent != probe:
        missing.append(probe)
        probe = probe.parent
    try:
        tmp = write_temp(folder, b"", owner="links")
        twin = tmp.with_name(f".tmp-links.{secrets.token_hex(4)}.part")  # a TEMP_NAME too
        try:
            os.link(tmp, twin)
        except (OSError, NotImplementedError) as exc:
            raise no_links(folder, exc) from None
        finally:
            for leftover in (twin, tmp):
                remove_temp(leftover)
    finally:
        for created in missing:  # deepest first; only folders this call made, only if empty
            try:
                created.rmdir()
            except OSError:
                break


def lock_path(root: Path, owner: str) -> Path:
    """``<root>/locks/<owner>.lock``: the lock guarding every file whose stem is ``owner``."""
    return root / LOCKS_DIR / (owner + ".lock")


@contextmanager
def owner_lock(root: Path, owner: str, *, timeout: float, what: str) -> Iterator[None]:
    """Hold ``<root>/locks/<owner>.lock`` (``filelock``, cross-platform; the OS releases it if the
    holder dies) for the duration of the block, waiting at most ``timeout`` seconds.

    Raises :class:`Refused` naming ``what`` (e.g. ``"task t-1"``) on timeout, and naming the lock
    file if it cannot be used (a symlink, a folder, unreadable …).
    """
    from filelock import FileLock, Timeout  # ~10 ms: only commands that lock pay it

    path = lock_path(root, owner)
    make_dirs(path.parent)
    lock = FileLock(str(path), timeout=timeout, mode=0o600)
    try:
        lock.acquire()
    except Timeout:  # (a TimeoutError, so an OSError: caught first)
        raise lock_busy(what, timeout) from None
    except OSError as exc:  # a lock file that is a symlink (not followed), a folder, unreadable …
        raise Refused("unsafe_file", f"lock file {LOCKS_DIR}/{owner}.lock cannot be used "
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
    :class:`Refused` (``integrity``) naming ``where`` (corrupted JSON → stop, never guess): one
    sentence saying what is wrong and where (the line and column of a syntax error, e.g. a file cut
    short; the byte of bad UTF-8), that a human must check it, and ``doctor`` as the next step.
    """
    try:
        text = raw.decode("utf-8")
        data = json.loads(
            text, object_pairs_hook=_reject_duplicate_keys, parse_constant=_reject_constant
        )
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise _damaged(f"{where} is not valid UTF-8 (at byte {exc.start + 1}, on line {line})", "damaged") from None
    except (ValueError, RecursionError) as exc:
        how = "damaged or cut short" if isinstance(exc, json.JSONDecodeError) else "damaged or edited"
        raise _damaged(f"{where} is not valid JSON ({json_problem(exc)})", how) from None
    if not isinstance(data, dict):
        raise _damaged(f"{where} is not a JSON object (its top level is {type(data).__name__})", "damaged or edited")
    return data


def json_problem(exc: BaseException) -> str:
    """What ``json.loads`` (with :func:`parse_json_object`'s hooks) refused, as a phrase: a syntax
    error with its line and column (``unterminated string starting at line 1, column 2345``), a
    duplicate key, a non-standard constant, or nesting too deep."""
    if isinstance(exc, json.JSONDecodeError):  # its msg ends before the position (some with "at")
        reason = exc.msg.removesuffix(" at")
        return f"{reason[:1].lower()}{reason[1:]} at line {exc.lineno}, column {exc.colno}"
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return " ".join(str(exc).split())[:200]  # our hooks: "duplicate key 'title'", "non-standard JSON constant NaN"


def _damaged(what: str, how: str) -> Refused:
    """The refusal for a record that cannot be read: ``what`` is wrong, ``how`` it came to be (e.g.
    ``damaged or cut short``), and the next step."""
    return Refused("integrity", [f"{what}, so it was {how}; a human must check it", Next("doctor")])
