"""The state dir's identity: a random ID in ``<state dir>/state.id`` that every checkpoint carries.

Every signed record (ledger entry, effect intent, settlement, rejection record:
:mod:`state.record_seal`) carries it too, so a record copied from another state dir that shares the
key is refused like a copied checkpoint. A record is always written after ``state.id`` exists
(:func:`ensure` creates it if a record comes first).

Why: the MAC proves a checkpoint was signed with our key, not *where* it belongs. With
``HITL_SIGNING_KEY`` shared by several state dirs (a secret-store key, docs/threat-model.md), a checkpoint
copied from one state dir into another verified, so the same task could be approved in both and
published twice (one entry in each ledger). Each checkpoint therefore records its state dir's ID in
the signed envelope (``Checkpoint.state_id``), and every load compares it with ``state.id``
(:func:`check_bound`): a copied checkpoint is refused. Moving or renaming a whole state dir keeps
``state.id`` with it, so nothing changes; copying a whole state dir copies its identity too (no file
can tell a copy from a move).

File: JSON ``{"state_id": 32 hex, "created_at": ISO-8601 UTC, "adopted": {file name: mac}}``, created
by the first checkpoint write (``Store.save``) exclusively: temp file → ``os.link`` (fails if another
process linked first: use theirs), under ``locks/state.id.lock``, between failpoints
``state_id:before`` / ``state_id:after``, like ``signing.key``. It is not a secret and not signed.

Checkpoints without ``state_id`` (written before this field existed, e.g.
``tests/fixtures/checkpoint_v1.json``) are *legacy*: accepted while the state dir has no
``state.id``; when ``state.id`` is created, every legacy checkpoint then in the state dir is
*adopted* (its file name and MAC recorded in ``adopted``; a file of a task's folder
``checkpoints/<name>/r<N>.json`` under the name it had before per-task folders,
``<name>.r<N>.json``) and stays readable, wherever ``doctor --repair`` moves it; its next revision
carries the ID.
A legacy checkpoint that arrives later (copied in) is refused. If ``state.id`` is missing while a
checkpoint carrying an ID exists, a new ID is never created (every such checkpoint would become
unreadable): restore ``state.id``.

Never imports the SDK.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from state.clock import now_iso
from state.durable import create_exclusive
from state.errors import Refused
from state.fileio import owner_lock, parse_json_object
from state.paths import CHECKPOINTS_DIR, OLD_TASKS_DIR, read_regular
from state.schema import MAX_CHECKPOINT_BYTES
from state.settings import memo

STATE_ID_FILE = "state.id"
STATE_ID_PATTERN = re.compile(r"^[0-9a-f]{32}\Z")
DEFAULT_LOCK_TIMEOUT_S = 10.0
_MAX_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class StateIdentity:
    """The parsed ``state.id``: ``state_id`` (32 hex) and ``adopted`` legacy checkpoints
    (file name → MAC)."""

    state_id: str
    adopted: dict[str, str] = field(default_factory=dict)


def read(root: Path) -> StateIdentity | None:
    """The identity of state dir ``root``, or None if ``state.id`` does not exist.

    Raises :class:`Refused` if it is not a regular file or not of the shape above. Read once per
    top-level operation (:func:`state.settings.memo`: ``start``, ``resume``, ``decide``) once it
    exists; read again by every other caller.
    """
    held, slot = memo(), (STATE_ID_FILE, str(root))
    if held is not None and slot in held:
        return held[slot]
    raw = read_regular(root / STATE_ID_FILE, STATE_ID_FILE, limit=_MAX_BYTES)
    if raw is None:
        return None
    data = parse_json_object(raw, STATE_ID_FILE)
    sid, adopted = data.get("state_id"), data.get("adopted", {})
    if not (isinstance(sid, str) and STATE_ID_PATTERN.match(sid)) or not isinstance(adopted, dict) \
            or not all(isinstance(v, str) for v in adopted.values()):
        raise Refused("integrity", f"{STATE_ID_FILE} is not valid (corrupted); restore it from a backup")
    ident = StateIdentity(sid, dict(adopted))
    if held is not None:
        held[slot] = ident
    return ident


def check_bound(ident: StateIdentity | None, file: str, state_id: str | None, mac: str,
                *, adopted_as: tuple[str, ...] = ()) -> None:
    """Raise :class:`Refused` unless checkpoint ``file`` (its envelope's ``state_id`` and ``mac``)
    belongs to the state dir whose identity is ``ident`` (None: no ``state.id`` yet). Rules: module
    docstring. ``adopted_as``: the other names it may have been adopted under (the names a file of
    a task's folder had in ``tasks/``); the MAC must match the one adopted under that name."""
    if state_id is None:
        if ident is None or any(ident.adopted.get(name) == mac for name in (file, *adopted_as)):
            return
        raise Refused("foreign_state",
            f"checkpoint {file} belongs to another state dir (it carries no state ID and was not "
            f"here when this state dir got its {STATE_ID_FILE}); refusing a copied checkpoint"
        )
    if ident is None:
        raise Refused("foreign_state",
            f"checkpoint {file} belongs to another state dir (state ID {state_id[:8]}…; this state "
            f"dir has no {STATE_ID_FILE}: restore it if it was lost)"
        )
    if ident.state_id != state_id:
        raise Refused("foreign_state",
            f"checkpoint {file} belongs to another state dir (state ID {state_id[:8]}…, this "
            f"one is {ident.state_id[:8]}…); refusing a copied checkpoint"
        )


def _checkpoint_files(root: Path) -> list[tuple[str, Path]]:
    """``[(name, file)]`` of every checkpoint file of state dir ``root``: each ``*.json`` of
    ``tasks/`` under its own name, and each ``checkpoints/<stem>/r<N>.json`` under the name it would
    have had in ``tasks/`` (``<stem>.r<N>.json``). Lists every task's folder: used only when
    ``state.id`` is missing or created."""
    found: list[tuple[str, Path]] = []
    old = root / OLD_TASKS_DIR
    if old.is_dir():
        found += [(path.name, path) for path in sorted(old.glob("*.json"))]
    folders = root / CHECKPOINTS_DIR
    if folders.is_dir():
        for folder in sorted(folders.iterdir()):
            if folder.is_dir() and not folder.is_symlink():
                found += [(f"{folder.name}.{path.name}", path) for path in sorted(folder.glob("r*.json"))]
    return found


def _scan(root: Path) -> tuple[dict[str, str], int]:
    """``({file name: mac} of legacy checkpoints, number of checkpoints carrying a state ID)`` of
    state dir ``root`` (:func:`_checkpoint_files`). Files that cannot be read or parsed are
    skipped (every load refuses them anyway)."""
    legacy: dict[str, str] = {}
    bound = 0
    for name, path in _checkpoint_files(root):
        try:
            raw = read_regular(path, f"checkpoint {name}", limit=MAX_CHECKPOINT_BYTES)
            data = parse_json_object(raw or b"", f"checkpoint {name}")
        except Refused:
            continue
        if data.get("state_id") is not None:
            bound += 1
        elif isinstance(data.get("mac"), str):
            legacy[name] = data["mac"]
    return legacy, bound


def check_creatable(root: Path) -> None:
    """Raise :class:`Refused` if ``state.id`` is missing but a checkpoint carrying a state ID exists
    (creating a new ID would make each of them unreadable). Touches nothing on disk."""
    if os.path.lexists(root / STATE_ID_FILE):
        return
    _, bound = _scan(root)
    if bound:
        raise Refused("foreign_state",
            f"{STATE_ID_FILE} missing but {bound} checkpoint{'s carry' if bound != 1 else ' carries'} "
            f"a state ID in {root}; restore {STATE_ID_FILE} from a backup"
        )


def ensure(root: Path) -> StateIdentity:
    """The identity of ``root``, creating ``state.id`` if it does not exist (see module docstring).

    Raises :class:`Refused` as :func:`read` and :func:`check_creatable` do.
    """
    ident = read(root)
    if ident is not None:
        return ident
    check_creatable(root)
    path = root / STATE_ID_FILE
    with owner_lock(root, STATE_ID_FILE, timeout=DEFAULT_LOCK_TIMEOUT_S,
                    what=f"the state dir's {STATE_ID_FILE}"):
        ident = read(root)
        if ident is not None:
            return ident  # another process created it first; use theirs
        check_creatable(root)
        legacy, _ = _scan(root)
        data = {"state_id": secrets.token_hex(16), "created_at": now_iso(), "adopted": legacy}
        # False if another process linked first (without our lock: a foreign writer): read theirs
        create_exclusive(path, (json.dumps(data, indent=2) + "\n").encode("ascii"),
                         owner=STATE_ID_FILE, failpoint="state_id")
    ident = read(root)
    if ident is None:
        raise Refused("refused", f"{STATE_ID_FILE} could not be created in {root}")
    return ident
