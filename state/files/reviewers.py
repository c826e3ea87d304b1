"""The file store's reviewer records.

Layout: ``<state dir>/reviewers/<sha256(name)[:32]>.json``, one signed :class:`state.reviewers.Reviewer`
envelope each (:func:`state.reviewers.seal`), created exclusively (``add``), replaced atomically
(``rotate``: a temp file then ``os.replace``) or removed, each under the lock
``locks/reviewers.lock``. A record is read only if its MAC verifies and its file name is its name's:
one written, copied or renamed by hand is refused (fail closed), never trusted.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from state.durable import create_exclusive
from state.errors import Refused
from state.fileio import fsync_dir, owner_lock, parse_json_object, remove_temp, write_temp
from state.integrity import load_key
from state.paths import inside, read_regular
from state.reviewers import Reviewer, seal, unseal

if TYPE_CHECKING:
    from state.files.store import Store

MAX_RECORD_BYTES = 16 * 1024
OWNER = "reviewers"


def folder(store: "Store") -> Path:
    """``<state dir>/reviewers``."""
    return store.root / "reviewers"


def path_for(store: "Store", name: str) -> Path:
    """``reviewers/<sha256(name)[:32]>.json``: any name, one file name safe everywhere."""
    stem = hashlib.sha256(name.encode("utf-8")).hexdigest()[:32]
    return inside(store.root, folder(store) / f"{stem}.json", "a reviewer record")


def reviewers(store: "Store") -> list[Reviewer]:
    """Every reviewer, by name. Raises :class:`Refused` (``integrity``) for a record that does not
    verify, or is not where its name puts it. Reads no key while there is no record."""
    where = folder(store)
    if not where.is_dir():
        return []
    paths = sorted(p for p in where.iterdir() if p.name.endswith(".json") and not p.name.startswith("."))
    if not paths:
        return []
    key = load_key(store.root, create=False)
    out = []
    for path in paths:
        raw = read_regular(path, f"reviewer record {path.name}", limit=MAX_RECORD_BYTES)
        if raw is None:
            continue  # removed meanwhile
        rec = unseal(parse_json_object(raw, f"reviewer record {path.name}"), key, where=f"reviewer record {path.name}")
        if path_for(store, rec.name) != path:
            raise Refused("integrity", f"reviewer record {path.name} holds another name's record")
        out.append(rec)
    return sorted(out, key=lambda r: r.name)


def _data(store: "Store", reviewer: Reviewer) -> bytes:
    key = load_key(store.root, create=True)
    return (json.dumps(seal(reviewer, key), indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def _lock(store: "Store"):  # type: ignore[no-untyped-def]
    from state.settings import settings

    return owner_lock(store.root, OWNER, timeout=settings().lock_timeout, what="the reviewer list")


def add(store: "Store", reviewer: Reviewer) -> None:
    """Register ``reviewer``. Raises :class:`Refused` (``reviewer_exists``) if the name is taken,
    with nothing written (checked before the lock, and again under it)."""
    if path_for(store, reviewer.name).exists():
        raise Refused("reviewer_exists", f"reviewer {reviewer.name!r} is registered already; nothing written")
    with _lock(store):
        created = create_exclusive(path_for(store, reviewer.name), _data(store, reviewer), owner=OWNER,
                                   failpoint="reviewer:add")
    if not created:
        raise Refused("reviewer_exists", f"reviewer {reviewer.name!r} is registered already; nothing written")


def replace(store: "Store", reviewer: Reviewer) -> None:
    """Replace the record of ``reviewer.name`` (a rotated token). Raises :class:`Refused`
    (``no_reviewer``) if there is none, with nothing written."""
    path = path_for(store, reviewer.name)
    if not path.exists():
        raise Refused("no_reviewer", f"no reviewer {reviewer.name!r} is registered; nothing written")
    with _lock(store):
        if not path.exists():
            raise Refused("no_reviewer", f"no reviewer {reviewer.name!r} is registered; nothing written")
        tmp = write_temp(path.parent, _data(store, reviewer), owner=OWNER)
        try:
            os.replace(tmp, path)
        except BaseException:
            remove_temp(tmp)
            raise
        fsync_dir(path.parent)


def remove(store: "Store", name: str) -> None:
    """Remove reviewer ``name``. Raises :class:`Refused` (``no_reviewer``) if there is none."""
    path = path_for(store, name)
    if not path.exists():
        raise Refused("no_reviewer", f"no reviewer {name!r} is registered; nothing changed")
    with _lock(store):
        try:
            path.unlink()
        except FileNotFoundError:
            raise Refused("no_reviewer", f"no reviewer {name!r} is registered; nothing changed") from None
        fsync_dir(path.parent)
