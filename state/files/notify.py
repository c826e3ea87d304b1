"""The file store's notification progress (:mod:`state.notify`).

Layout: ``<state dir>/notify/<task stem>/p<version, 6 digits or more>.json``, one
:class:`state.notify.Progress` each (plain JSON: it holds no secret and decides no effect). The
newest version is the record. Version N + 1 is written only by the process that read N as the
newest and then created its file exclusively (:func:`state.durable.create_exclusive`: ``os.link``
fails if the name exists), so two ``notify`` processes never both write it: the loser is refused
(``stale_revision``), nothing written. Versions below N are removed after the write (best effort:
a file left behind is only an older record, never read). Windows-safe: no file is replaced in
place, no ``fcntl``.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from pydantic import ValidationError

from state.durable import create_exclusive
from state.errors import Refused
from state.fileio import parse_json_object
from state.notify import Progress, check_successor, raced
from state.paths import file_name, inside, read_regular

if TYPE_CHECKING:
    from state.files.store import Store

#: The largest progress file read.
MAX_RECORD_BYTES = 4 * 1024 * 1024
OWNER = "notify"
_NAME = re.compile(r"^p(?P<version>[0-9]{6,})\.json\Z")


def folder(store: "Store", task_id: str) -> Path:
    """``<state dir>/notify/<stem of task_id>``."""
    return inside(store.root, store.root / "notify" / file_name(task_id), "a notification progress folder")


def _versions(where: Path) -> list[int]:
    """The versions stored in ``where``, lowest first (file names only)."""
    if not where.is_dir():
        return []
    found = []
    for path in where.iterdir():
        match = _NAME.match(path.name)
        if match is not None and path.name == f"p{int(match['version']):06d}.json":
            found.append(int(match["version"]))
    return sorted(found)


def get(store: "Store", task_id: str) -> Optional[Progress]:
    """The newest progress of ``task_id``, or None (nothing delivered or tried yet). Raises
    :class:`Refused` (``integrity``) for a record that is not one, names another task or another
    version than its file name says."""
    where = folder(store, task_id)
    stored = _versions(where)
    if not stored:
        return None
    path = where / f"p{stored[-1]:06d}.json"
    what = f"notification progress {path.parent.name}/{path.name}"
    raw = read_regular(path, what, limit=MAX_RECORD_BYTES)
    if raw is None:
        return None
    try:
        rec = Progress.model_validate(parse_json_object(raw, what))
    except ValidationError as exc:
        raise Refused("integrity", f"{what} is not a notification progress record "
                      f"({exc.errors()[0]['msg']})") from None
    if rec.task_id != task_id or rec.version != stored[-1]:
        raise Refused("integrity", f"{what} holds task {rec.task_id!r} version {rec.version}, not what its "
                      "name says")
    return rec


def save(store: "Store", expect: Optional[Progress], new: Progress) -> None:
    """Write ``new`` as the progress of its task, compare-and-swap against ``expect`` (None: no
    record yet). Raises :class:`Refused` (``stale_revision``), nothing written, if ``new`` is not
    the next version of the newest record stored, or another process created it first."""
    task_id = new.task_id
    current = get(store, task_id)
    if (current.version if current else 0) != (expect.version if expect else 0):
        raise raced(task_id, current.version if current else 0)
    check_successor(task_id, expect, new)
    where = folder(store, task_id)
    data = new.model_dump_json(indent=1).encode("utf-8")
    if not create_exclusive(where / f"p{new.version:06d}.json", data, owner=OWNER, failpoint="notify:progress"):
        raise raced(task_id, new.version)
    for old in _versions(where):
        if old < new.version - 1:
            with contextlib.suppress(OSError):  # an older record is never read; doctor may see it
                (where / f"p{old:06d}.json").unlink()
