"""Keep every file this program writes inside the state dir (fail closed on a hostile layout).

Task IDs and keys are already restricted to ``A-Za-z0-9._:-`` (``state.schema.KEY_PATTERN``), so a
name can never climb out of its folder. What is left is the layout on disk: a state dir path that
runs through a regular file, or a ``tasks``/``ledger``/``locks`` entry that is a file or a symlink
to a folder elsewhere. Writing through such a symlink would put checkpoints or ledger entries
outside the state dir, so we refuse it before any file is touched (issue 3, item 5: "the state dir
path resolved and checked so nothing is written outside it").

Never imports the SDK.
"""

from __future__ import annotations

from pathlib import Path

from .errors import Stopped

#: The folders a state dir may hold (see ``state.storage``); each must be a plain folder inside it.
SUBDIRS = ("tasks", "ledger", "locks")


def check_state_dir(root: Path) -> Path:
    """Check the resolved state dir ``root`` and return it unchanged.

    Raises :class:`Stopped` if ``root`` (or the nearest part of it that exists) is not a folder,
    if one of :data:`SUBDIRS` exists but is not a folder or resolves outside ``root`` (a symlink
    elsewhere), or if ``signing.key`` exists but is not a regular file. Touches nothing on disk.
    """
    probe = root
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir():
        if probe == root:
            raise Stopped(f"state dir {root} is not a directory")
        raise Stopped(f"state dir {root} cannot be used: {probe} is not a directory")
    if probe != root:
        return root  # nothing of it exists yet; the first write creates plain folders
    real_root = root.resolve()
    for name in SUBDIRS:
        sub = root / name
        if not (sub.exists() or sub.is_symlink()):
            continue
        if not sub.is_dir():
            raise Stopped(f"state dir {root}: {name} is not a directory")
        if not sub.resolve().is_relative_to(real_root):
            raise Stopped(
                f"state dir {root}: {name} points outside the state dir ({sub.resolve()}); "
                "refusing to write there"
            )
    key = root / "signing.key"
    if key.exists() and not key.is_file():
        raise Stopped(f"state dir {root}: signing.key is not a regular file")
    return root


def inside(root: Path, path: Path, what: str) -> Path:
    """Return ``path`` if it resolves to a location inside ``root``; else raise :class:`Stopped`.

    ``what`` names the file in the message (e.g. ``"checkpoint for task 'k-1'"``).
    """
    if not path.resolve().is_relative_to(root.resolve()):
        raise Stopped(f"refusing to use a path outside the state dir for the {what}")
    return path
