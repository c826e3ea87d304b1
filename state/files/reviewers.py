"""The file store's reviewer list (:mod:`state.reviewers`).

Layout::

    reviewers/r<N>.json                 version N of the list: a signed ReviewerList envelope
                                        (state.reviewers.seal_list), N with 6 digits or more
    reviewers/revoked/<token_id>.json   one signed revocation per token that left the list
                                        (state.reviewers.seal_revocation)

The newest version (the highest N) is the list. Version N+1 is written only by the process whose
``os.link`` created ``r<N+1>.json`` (temp file, fsync, exclusive link: :func:`state.durable.create_exclusive`),
after it checked that the newest on disk is still the N it read: a compare-and-swap, as for a
checkpoint's revisions. Names are never removed, so a writer that read an old version can never
create a name that was there; no file is ever changed in place.

A revocation is created exclusively after the list that revoked it, under ``locks/reviewers.lock``,
and never removed. Every read looks each listed token up in ``revoked/`` (one ``lstat`` per
reviewer): a list that names a revoked token (an older version put back under the newest name, or
every newer version removed and an old one restored) is refused. A crash between the list and its
revocations leaves them to the next change of the list, which creates every revocation its list
names that is missing.

What is read: the newest ``r<N>.json`` only if its MAC verifies under the state dir's key, it is
bound to the state dir (``state.id``) and the version it holds is the one its name says. Any other
name in ``reviewers/`` (a reviewer record of an earlier version of this program, ``<32 hex>.json``,
or a file put there by hand) stops every read: it is named, never ignored, never trusted.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from state import state_id
from state.durable import create_exclusive
from state.errors import Refused
from state.fileio import owner_lock, parse_json_object
from state.integrity import KEY_FILE, check_key_creatable, load_key
from state.paths import check_own_folder, inside, read_regular
from state.reviewers import (EMPTY, MAX_LIST_BYTES, ReviewerList, Revoked, check_successor, refuse_revived,
                             seal_list, seal_revocation, unseal_list, unseal_revocation)

if TYPE_CHECKING:
    from state.files.store import Store

OWNER = "reviewers"
REVOKED_DIR = "revoked"
MAX_REVOCATION_BYTES = 4 * 1024
_REVISION = re.compile(r"^r(?P<n>[0-9]{6,})\.json\Z")


def folder(store: "Store") -> Path:
    """``<state dir>/reviewers``."""
    return store.root / "reviewers"


def revision_path(store: "Store", version: int) -> Path:
    """``reviewers/r<version, 6 digits or more>.json``."""
    return folder(store) / f"r{version:06d}.json"


def revocation_path(store: "Store", token_id: str) -> Path:
    """``reviewers/revoked/<token_id>.json`` (``token_id``: 16 hex, from a signed list)."""
    return inside(store.root, folder(store) / REVOKED_DIR / f"{token_id}.json", "a revocation record")


def _versions(store: "Store") -> list[tuple[int, Path]]:
    """``[(version, file)]`` of the list's revision files, lowest first. Raises :class:`Refused` for
    ``reviewers/`` or ``revoked/`` that is not a plain folder of ours, and for any other name in
    ``reviewers/`` (hidden temp files aside)."""
    where = folder(store)
    if not check_own_folder(where, "folder reviewers"):
        return []
    check_own_folder(where / REVOKED_DIR, "folder reviewers/revoked")
    found = []
    for name in sorted(os.listdir(where)):
        if name.startswith(".") or name == REVOKED_DIR:
            continue
        match = _REVISION.match(name)
        if match is None or f"r{int(match['n']):06d}.json" != name:
            raise Refused("integrity", f"reviewers/{name[:80]!r} is not a version of the reviewer list (r<N>.json): a "
                          "reviewer record of an earlier version of this program, or a file put there by hand; it "
                          "is not trusted. Move it out of reviewers/ (the reviewers of an earlier version are "
                          "registered again, an admin first); nothing changed")
        found.append((int(match["n"]), where / name))
    return sorted(found)


def _revocations(store: "Store") -> list[str]:
    """The names in ``reviewers/revoked/`` (hidden temp files aside)."""
    try:
        return [n for n in os.listdir(folder(store) / REVOKED_DIR) if not n.startswith(".")]
    except (FileNotFoundError, NotADirectoryError):
        return []


def newest_version(store: "Store") -> int:
    """The version of the newest list on disk, by its file name (0: none). Lists ``reviewers/``."""
    found = _versions(store)
    return found[-1][0] if found else 0


def reviewer_list(store: "Store") -> ReviewerList:
    """The newest list, verified (module docstring); :data:`state.reviewers.EMPTY` if there is none.
    Reads no key while there is none. Raises :class:`Refused`: ``integrity`` for a list that does
    not verify (edited, or signed with another ``HITL_SIGNING_KEY``), holds another version than
    its name, lists a revoked token, or is missing while revocations exist; ``foreign_state`` for a
    list of another state dir."""
    found = _versions(store)
    if not found:
        if not os.path.isdir(folder(store)):
            return EMPTY  # no reviewers/ at all: nothing to list (and no revocation to look for)
        gone = _revocations(store)
        if gone:
            raise Refused("integrity", f"the reviewer list (reviewers/r<N>.json) is missing although {len(gone)} "
                          "reviewer token(s) were revoked: removed by hand? Restore reviewers/ from a backup; a "
                          "human must check; nothing changed")
        return EMPTY
    version, path = found[-1]
    where = f"reviewer list reviewers/{path.name}"
    raw = read_regular(path, where, limit=MAX_LIST_BYTES)
    if not raw:
        raise Refused("integrity", f"{where} is empty or gone; a human must check")
    data = parse_json_object(raw, where)
    key = load_key(store.root, create=False)
    ident = state_id.read(store.root)
    lst = unseal_list(data, key, ident.state_id if ident else None, where=where)
    if lst.version != version:
        raise Refused("integrity", f"{where} holds version {lst.version}, not the version its name says "
                      f"({version}): an older list put back under a newer name? a human must check")
    hits: dict[str, Optional[Revoked]] = {}
    for reviewer in lst.reviewers:
        gone_path = revocation_path(store, reviewer.token_id)
        if os.path.lexists(gone_path):
            hits[reviewer.token_id] = _revocation(gone_path, key, ident.state_id if ident else None)
    refuse_revived(lst, where, hits)
    return lst


def _revocation(path: Path, key: bytes, sid: Optional[str]) -> Optional[Revoked]:
    """The verified revocation in ``path``, or None if it does not verify (it revokes all the same)."""
    where = f"revocation record reviewers/{REVOKED_DIR}/{path.name}"
    try:
        raw = read_regular(path, where, limit=MAX_REVOCATION_BYTES)
        rec = unseal_revocation(parse_json_object(raw or b"", where), key, sid, where=where)
    except Refused:
        return None
    return rec if f"{rec.token_id}.json" == path.name else None


def _check_key(store: "Store", expect: ReviewerList) -> None:
    """Before anything is written: the list in ``expect`` is still the one on disk, read and
    verified with this key (a list signed with another ``HITL_SIGNING_KEY`` is refused, naming
    it); for the first list, the key would sign here (``Store.check_key_signs_here``:
    a key that signed none of the checkpoints is another deployment's). Writes nothing."""
    now = reviewer_list(store)
    if now != expect:
        raise _changed(expect.version, now.version)
    if expect.version == 0:
        check_key_creatable(store.root)  # a key lost next to checkpoints is never replaced
        if store_has_key(store):
            store.check_key_signs_here(load_key(store.root, create=False))
        if store.identity() is None:
            state_id.check_creatable(store.root)
            store._check_links()


def store_has_key(store: "Store") -> bool:
    """True if a signing key is given (``HITL_SIGNING_KEY``) or kept (``signing.key``) for the store."""
    from state.settings import settings

    return settings().signing_key is not None or os.path.lexists(store.root / KEY_FILE)


def _changed(expected: int, now: int) -> Refused:
    return Refused("stale_revision", f"the reviewer list changed since it was read (version {expected} -> {now}): "
                   "another admin changed it; nothing written; run the command again")


def _bytes(envelope: dict) -> bytes:  # type: ignore[type-arg]
    return (json.dumps(envelope, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def save(store: "Store", expect: ReviewerList, new: ReviewerList) -> None:
    """Write ``new`` as the next version after ``expect`` (compare-and-swap; module docstring),
    then a revocation for every token ``new`` revokes that has none yet. Raises :class:`Refused`,
    nothing written: as :func:`state.reviewers.check_successor`; ``stale_revision`` if the list on
    disk is no longer ``expect``; what :func:`reviewer_list` raises (another deployment's key);
    ``unsafe_input`` for a list larger than a reader accepts."""
    check_successor(expect, new)
    _check_key(store, expect)
    key = load_key(store.root, create=True)
    sid = state_id.ensure(store.root).state_id
    data = _bytes(seal_list(new, key, sid))
    if len(data) > MAX_LIST_BYTES:
        raise Refused("unsafe_input", f"the reviewer list would be {len(data)} bytes, more than the {MAX_LIST_BYTES} a "
                      "reader accepts; nothing written")
    path = inside(store.root, revision_path(store, new.version), "the reviewer list")
    from state.settings import settings

    def still() -> None:
        now = newest_version(store)
        if now != expect.version:
            raise _changed(expect.version, now)

    with owner_lock(store.root, OWNER, timeout=settings().lock_timeout, what="the reviewer list"):
        if not create_exclusive(path, data, owner=OWNER, failpoint="reviewers:list", precondition=still):
            raise _changed(expect.version, newest_version(store))
        for gone in new.revoked:  # those of this change, and any a crash left unwritten before
            target = revocation_path(store, gone.token_id)
            if not os.path.lexists(target):
                create_exclusive(target, _bytes(seal_revocation(gone, key, sid)), owner=OWNER,
                                 failpoint="reviewers:revoke")
