"""Keep every file this program writes inside the state dir (fail closed on a hostile layout).

Task IDs and keys are already restricted to ``A-Za-z0-9._:-`` (``state.schema.KEY_PATTERN``), so a
name can never climb out of its folder. What is left is the layout on disk: a state dir path that
runs through a regular file, or a ``checkpoints``/``ledger``/``locks``/``traces`` entry that is a file or
a symlink to a folder elsewhere. Writing through such a symlink would put checkpoints, ledger entries
or traces outside the state dir, so we refuse it before any file is touched: the state dir path is
resolved and checked so that nothing is written outside it.

Single files are untrusted too: a checkpoint, ledger entry, trace file, ``signing.key`` or
``state.id`` may have been replaced by a symlink (writing through it would change a file elsewhere)
or by a FIFO or device (reading it would block forever). :func:`open_regular` is the one way this
program opens such a file: it never follows a symlink and never blocks, and hands back only a
regular file; :func:`read_regular` reads one with it, :func:`check_regular` is the same test by
``lstat`` for a pre-flight check before anything is written.

Who may have written the state dir (POSIX, modelled on OpenSSH's ``StrictModes``): the MAC proves a
checkpoint was signed with the key found in the state dir, so whoever can put files into that dir
can plant a key, a ``state.id`` and a checkpoint of their own that all agree. :func:`check_owner_only`
therefore refuses a state dir, one of its :data:`SUBDIRS`, ``signing.key`` or ``state.id`` that is
owned by another user or writable by group or others, a ``signing.key`` readable by group or others,
and a state dir whose parent every user may write without the sticky bit (anyone could rename the
state dir away and put their own in its place). Folders this program creates are ``0o700``
(:func:`make_dirs`), files ``0o600``. Where the OS has no owners or mode bits (Windows: no
``os.geteuid``), the check is skipped and the folder's ACL decides. Threat model:
``docs/threat-model.md``.

Never imports the SDK.
"""

from __future__ import annotations

import functools
import hashlib
import os
import stat
from pathlib import Path

from state.errors import Refused
from state.fileio import make_dirs  # noqa: F401  (paths.make_dirs: owner-only folders, state.fileio)
from state.schema import valid_effect_key

#: The folder of the per-task checkpoint folders (``checkpoints/<name>/r<N>.json``), and the folder of
#: the layouts before them (``tasks/<name>.r<N>.json``, ``tasks/<name>.json``: read, never written),
#: see ``state.files.store``.
CHECKPOINTS_DIR = "checkpoints"
OLD_TASKS_DIR = "tasks"
#: The folders a state dir may hold (see ``state.files.store``); each must be a plain folder inside it.
SUBDIRS = (CHECKPOINTS_DIR, OLD_TASKS_DIR, "ledger", "locks", "traces", "rejections", "effects", "reviewers",
           "policies")
#: Single files at the top of a state dir; each must be a regular file (not a symlink) if present.
TOP_FILES = ("signing.key", "state.id")

#: Where the OS has them: never follow a symlink in the last path component, never block on open
#: (a FIFO with no writer, a device). Elsewhere (Windows) :func:`open_regular` checks with ``lstat``.
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


def file_name(key: str) -> str:
    """File stem for ``key``, safe and distinct on Windows, macOS and Linux.

    ``:`` is not allowed in Windows file names and those file systems ignore case, so the stem is
    the key with ``:`` replaced by ``_`` plus 12 hex characters of SHA-256 of the exact key, e.g.
    ``demo-001`` → ``demo-001--0b1e2a3c4d5e``; an effect key ``demo-001#news``
    (:func:`state.schema.effect_key`) keeps its ``#``, allowed on all three. Raises ``ValueError``
    for a key outside the pattern. (A pure function of ``key``: a string's stem is computed once;
    a refusal is raised again each time.)
    """
    if type(key) is str:
        return _stem(key)
    if not valid_effect_key(key):
        raise ValueError(f"not an allowed key: {key!r}")
    return _stem(str(key))


@functools.lru_cache(maxsize=1024)
def _stem(key: str) -> str:
    """:func:`file_name` of the string ``key``."""
    if not valid_effect_key(key):
        raise ValueError(f"not an allowed key: {key!r}")
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:12]
    return f"{key.replace(':', '_')}--{digest}"


def check_state_dir(root: Path) -> Path:
    """Check the resolved state dir ``root`` and return it unchanged.

    Raises :class:`Refused` if ``root`` (or the nearest part of it that exists) is not a folder,
    if one of :data:`SUBDIRS` exists but is not a folder or resolves outside ``root`` (a symlink
    elsewhere), or if ``signing.key`` or ``state.id`` exists but is not a regular file (a symlink
    included: see :func:`check_regular`). Touches nothing on disk.
    """
    probe = root
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir():
        if probe == root:
            raise Refused("unsafe_state_dir", f"state dir {root} is not a directory")
        raise Refused("unsafe_state_dir", f"state dir {root} cannot be used: {probe} is not a directory")
    if probe != root:
        check_owner_only(root, probe)  # nothing of it exists yet: only where it will be created
        return root  # the first write creates owner-only folders (make_dirs)
    real_root = root.resolve()
    for name in SUBDIRS:
        sub = root / name
        if not (sub.exists() or sub.is_symlink()):
            continue
        if not sub.is_dir():
            raise Refused("unsafe_state_dir", f"state dir {root}: {name} is not a directory")
        if not sub.resolve().is_relative_to(real_root):
            raise Refused("unsafe_state_dir",
                f"state dir {root}: {name} points outside the state dir ({sub.resolve()}); "
                "refusing to write there"
            )
    for name in TOP_FILES:
        check_regular(root / name, f"state dir {root}: {name}")
    check_owner_only(root)
    return root


#: Mode bits: written by group or others; any access by group or others.
_GROUP_OTHER_WRITE = stat.S_IWGRP | stat.S_IWOTH
_GROUP_OTHER_ANY = stat.S_IRWXG | stat.S_IRWXO


def _owner_uid() -> int | None:
    """The effective uid files are created with, or None where the OS has no uids (Windows)."""
    geteuid = getattr(os, "geteuid", None)
    return geteuid() if geteuid is not None else None


def _check_entry(path: Path, what: str, uid: int, *, secret: bool, follow: bool) -> None:
    """Raise :class:`Refused` if ``path`` (if it exists) is owned by another uid than ``uid``, is
    writable by group or others, or (``secret``) grants group or others any access at all."""
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise Refused("unsafe_file", f"{what} cannot be checked ({exc.strerror or type(exc).__name__})") from None
    if not follow and not stat.S_ISREG(st.st_mode):
        return  # a symlink, FIFO …: refused by name by check_regular / open_regular instead
    _check_stat(st, path, what, uid, secret=secret)


def check_own_folder(path: Path, what: str) -> bool:
    """Check a folder below the state dir that this program creates (a task's folder
    ``checkpoints/<name>``): True if it exists, False if it does not. Raises :class:`Refused` naming
    ``what`` if it exists but is not a plain folder (a symlink, a file, a FIFO …: ``lstat``, never
    followed), or, where the OS has uids, is owned by another user or writable by group or others
    (:func:`check_owner_only`'s rule for the state dir's own folders). One ``lstat``."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    except OSError as exc:  # e.g. a name below a regular file
        raise Refused("unsafe_file", f"{what} cannot be checked ({exc.strerror or type(exc).__name__})") from None
    if not stat.S_ISDIR(st.st_mode):
        raise Refused("unsafe_file", f"{what} is {_kind(st.st_mode)}, not a folder; refusing to read or write "
                      "through it")
    uid = _owner_uid()
    if uid is not None:
        _check_stat(st, path, what, uid, secret=False)
    return True


def _check_stat(st: os.stat_result, path: Path, what: str, uid: int, *, secret: bool) -> None:
    """The owner and mode rules of :func:`_check_entry` for ``path`` as ``st`` describes it."""
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid != uid:
        raise Refused("unsafe_state_dir", f"{what} is owned by uid {st.st_uid}, not by this user (uid {uid}); refusing "
                      "a state dir another user could have written (see docs/threat-model.md)")
    if secret and mode & _GROUP_OTHER_ANY:
        raise Refused("unsafe_state_dir", f"{what} is readable or writable by group or others (mode {mode:04o}); "
                      f"a signing key must be 0600: chmod 600 {path}")
    if mode & _GROUP_OTHER_WRITE:
        harm = "plant files in it" if stat.S_ISDIR(st.st_mode) else "rewrite it"
        raise Refused("unsafe_state_dir", f"{what} is writable by group or others (mode {mode:04o}); another user "
                      f"could {harm}: chmod go-w {path}")


def check_owner_only(root: Path, probe: Path | None = None) -> None:
    """POSIX ``StrictModes`` check of the resolved state dir ``root`` (module docstring); a no-op
    where the OS has no uids (Windows). Raises :class:`Refused` naming the entry if:

    - the folder ``root`` will be created in (its parent; if that does not exist either, ``probe``,
      the nearest part of the path that does) is writable by every user and lacks the sticky bit;
    - ``root`` or an existing one of :data:`SUBDIRS` is not owned by the effective uid, or is
      writable by group or others;
    - ``signing.key`` or ``state.id`` (if present) is not owned by the effective uid or is writable
      by group or others; ``signing.key`` also if group or others may read it (must be 0600).

    ``probe`` given means ``root`` does not exist yet: only its future parent is checked. Cost: at
    most a dozen ``stat`` calls. Touches nothing on disk.
    """
    uid = _owner_uid()
    if uid is None:
        return
    parent = probe if probe is not None else root.parent
    try:
        pmode = os.stat(parent).st_mode
    except OSError:
        pmode = 0
    if pmode & stat.S_IWOTH and not pmode & stat.S_ISVTX:
        where = "its parent" if parent == root.parent else "the nearest existing folder above it,"
        raise Refused("unsafe_state_dir", f"state dir {root}: {where} {parent} is writable by every user without "
                      f"the sticky bit (mode {stat.S_IMODE(pmode):04o}); another user could replace "
                      f"the state dir: chmod o-w {parent} (or +t), or choose another state dir")
    if probe is not None:
        return
    _check_entry(root, f"state dir {root}", uid, secret=False, follow=True)
    for name in SUBDIRS:  # check_state_dir made sure each resolves inside root
        _check_entry(root / name, f"state dir {root}: {name}", uid, secret=False, follow=True)
    for name in TOP_FILES:
        _check_entry(root / name, f"state dir {root}: {name}", uid, secret=name == "signing.key",
                     follow=False)


def check_key_file(path: Path, what: str) -> None:
    """The ``signing.key`` part of :func:`check_owner_only` for ``path`` alone (owned by the
    effective uid, mode 0600 or stricter), for callers that load the key without resolving the
    state dir through :func:`check_state_dir`. A no-op where the OS has no uids, or if ``path``
    does not exist. Raises :class:`Refused` naming ``what``."""
    uid = _owner_uid()
    if uid is not None:
        _check_entry(path, what, uid, secret=True, follow=False)


def inside(root: Path, path: Path, what: str) -> Path:
    """Return ``path`` if it resolves to a location inside ``root``; else raise :class:`Refused`.

    ``what`` names the file in the message (e.g. ``"checkpoint for task 'k-1'"``). On POSIX a
    ``path`` that is ``root`` joined with plain names none of which is a symlink now
    (:func:`_plainly_below`) is inside by construction and costs an ``lstat`` per name; any
    other is resolved in full (two ``realpath`` calls: an ``lstat`` per component of each).
    """
    if os.name != "nt" and _plainly_below(root, path):
        return path
    if not path.resolve().is_relative_to(root.resolve()):
        raise Refused("unsafe_state_dir", f"refusing to use a path outside the state dir for the {what}")
    return path


def _plainly_below(root: Path, path: Path) -> bool:
    """True if ``path`` is ``root / rel`` (lexically) where no name of ``rel`` is ``..`` and none
    that exists is a symlink (``lstat``, left to right; a missing name ends the walk, since the
    rest cannot exist either). Then ``path`` resolves to ``root.resolve() / rel``, which is inside
    ``root.resolve()`` whatever ``root`` itself resolves to: the answer :func:`inside` would get by
    resolving both. False (resolve in full) for anything else, an ``lstat`` error included."""
    top, full = str(root), str(path)
    prefix = top if top.endswith(os.sep) else top + os.sep
    if not full.startswith(prefix) or len(full) == len(prefix):
        return False
    parts = full[len(prefix):].split(os.sep)
    if ".." in parts or "" in parts or "." in parts:  # (a Path never holds "" or ".": defensive)
        return False
    probe = prefix[:-1] if prefix != os.sep else ""
    for part in parts:
        probe = probe + os.sep + part
        try:
            mode = os.lstat(probe).st_mode
        except FileNotFoundError:
            return True
        except OSError:  # e.g. a name below a regular file, or no permission: the full check says
            return False
        if stat.S_ISLNK(mode):
            return False
    return True


def _kind(mode: int) -> str:
    """What a non-regular file is, for a message: ``a symbolic link``, ``a FIFO`` …"""
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISDIR, "a directory"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"), (stat.S_ISREG, "a regular file")):
        if test(mode):
            return name
    return "of an unknown kind"


def _refuse(what: str, kind: str, writing: bool) -> Refused:
    verb = "write through it" if writing and kind == "a symbolic link" else (
        "write to it" if writing else "read it")
    return Refused("unsafe_file", f"{what} is {kind}, not a regular file; refusing to {verb}")


def check_regular(path: Path, what: str, *, writing: bool = False) -> None:
    """Raise :class:`Refused` naming ``what`` if ``path`` exists (as a name: a dangling symlink
    counts) but is not a regular file. ``lstat`` only: never opens, follows or blocks. A pre-flight
    check; the open itself goes through :func:`open_regular` (the file may change in between)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise Refused("unsafe_file", f"{what} cannot be checked ({exc.strerror or type(exc).__name__})") from None
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(what, _kind(st.st_mode), writing)
    if writing and st.st_nlink > 1:
        raise Refused("unsafe_file", f"{what} has {st.st_nlink} hard links; refusing to write through it "
                      "(it may be a file outside the state dir)")


def open_regular(path: Path, what: str, flags: int = os.O_RDONLY, mode: int = 0o600) -> int:
    """``os.open(path, flags, mode)`` for a regular file only; returns the descriptor.

    Never follows a symlink at ``path`` (``O_NOFOLLOW``; where the OS lacks it, ``lstat`` first)
    and never blocks (``O_NONBLOCK``: a FIFO or device opens at once, or fails), then ``fstat``
    must show a regular file. Raises :class:`Refused` naming ``what`` for a symlink (dangling or
    not), a FIFO, a device, a folder; any other ``OSError`` (``FileNotFoundError`` if ``path`` does
    not exist, a permission error …) is raised as is, for the caller to decide.
    """
    writing = bool(flags & (os.O_WRONLY | os.O_RDWR))
    if not _NOFOLLOW:
        check_regular(path, what, writing=writing)
    try:
        fd = os.open(path, flags | _NOFOLLOW | _NONBLOCK | getattr(os, "O_BINARY", 0), mode)
    except FileNotFoundError:
        raise
    except OSError:
        try:  # ELOOP (Linux, macOS) / EMLINK (FreeBSD) from O_NOFOLLOW, ENXIO from a FIFO, EISDIR …
            st_mode = os.lstat(path).st_mode
        except OSError:
            st_mode = stat.S_IFREG
        if not stat.S_ISREG(st_mode):
            raise _refuse(what, _kind(st_mode), writing) from None
        raise
    try:
        st = os.fstat(fd)
        st_mode, links = st.st_mode, st.st_nlink
    except OSError:
        st_mode, links = 0, 1
    if not stat.S_ISREG(st_mode):
        os.close(fd)
        raise _refuse(what, _kind(st_mode), writing)
    if writing and links > 1:  # a hard link to a file elsewhere: writing would change that file
        os.close(fd)
        raise Refused("unsafe_file", f"{what} has {links} hard links; refusing to write through it "
                      "(it may be a file outside the state dir)")
    return fd


def read_regular(path: Path, what: str, *, limit: int | None = None) -> bytes | None:
    """The bytes of regular file ``path`` (opened with :func:`open_regular`), or None if it does
    not exist. Raises :class:`Refused` naming ``what`` as :func:`open_regular` does, and if the
    file is larger than ``limit`` bytes (checked before reading)."""
    try:
        fd = open_regular(path, what)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise Refused("unsafe_file", f"{what} cannot be read ({exc.strerror or type(exc).__name__})") from None
    try:
        if limit is not None and os.fstat(fd).st_size > limit:
            raise Refused("integrity", f"{what} is larger than {limit} bytes")
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
            if limit is not None and sum(map(len, chunks)) > limit:
                raise Refused("integrity", f"{what} is larger than {limit} bytes")
        return b"".join(chunks)
    except OSError as exc:
        raise Refused("unsafe_file", f"{what} cannot be read ({exc.strerror or type(exc).__name__})") from None
    finally:
        os.close(fd)
