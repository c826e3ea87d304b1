"""The file store's versions of the approval policy (:mod:`state.policy`).

Layout: ``<state dir>/policies/v<version, 6 digits or more>.json`` (``v000001.json``, …), one signed
:class:`state.policy.PolicyRecord` envelope each (:mod:`state.record_seal`, kind ``policy``: the
state dir's signing key, bound to its ``state.id``). Version N + 1 is written only by the process
that read N as the highest version and then created its file exclusively
(:func:`state.durable.create_exclusive`: ``os.link`` fails if the name exists): two ``policy set``
that read the same N race for one name and exactly one wins; the other is refused, nothing written.
No version is ever rewritten or removed, so every task's version stays readable. A record is read
only if it verifies and holds the version its name says: one written, edited, copied from another
state dir or renamed by hand is refused (fail closed).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from state.durable import create_exclusive
from state.errors import Refused
from state.fileio import parse_json_object
from state.files.sealing import sealed_bytes, unsealed
from state.paths import check_own_folder, inside, read_regular
from state.policy import PolicyRecord, raced

if TYPE_CHECKING:
    from state.files.store import Store

#: The largest record file read (a policy file is at most 64 KiB of TOML).
MAX_RECORD_BYTES = 256 * 1024
OWNER = "policies"
_NAME = re.compile(r"^v(?P<version>[0-9]{6,})\.json\Z")


def folder(store: "Store") -> Path:
    """``<state dir>/policies``."""
    return store.root / "policies"


def path_for(store: "Store", version: int) -> Path:
    """``policies/v<version:06d>.json``."""
    return inside(store.root, folder(store) / f"v{version:06d}.json", "a policy record")


def versions(store: "Store") -> list[int]:
    """The versions stored, lowest first (file names only: nothing is read). Raises
    :class:`Refused` for ``policies/`` that is not a plain folder of ours (a symbolic link, even
    to a folder inside the state dir, would read as "no policy set"), and for any other name in it
    (hidden temp files aside): a version renamed or planted by hand is never skipped in silence."""
    where = folder(store)
    if not check_own_folder(where, "folder policies"):
        return []
    found = []
    for name in sorted(os.listdir(where)):
        if name.startswith("."):
            continue
        match = _NAME.match(name)
        if match is None or name != f"v{int(match['version']):06d}.json":
            raise Refused("integrity", f"policies/{name[:80]!r} is not a version of the policy (v<N>.json, N of six "
                          "digits or more): put there or renamed by hand? It is not trusted; move it out of "
                          "policies/ (a human must check); nothing changed")
        found.append(int(match["version"]))
    return sorted(found)


def get(store: "Store", version: Optional[int] = None) -> Optional[PolicyRecord]:
    """Version ``version`` of the policy (None: the latest), or None if there is no such version
    (no policy set yet). Raises :class:`Refused` (``integrity``, ``foreign_state``) for a record
    that does not verify or is not the version its name says."""
    if version is None:
        stored = versions(store)
        if not stored:
            return None
        version = stored[-1]
    path = path_for(store, version)
    where = f"policy record {path.name}"
    raw = read_regular(path, where, limit=MAX_RECORD_BYTES)
    if raw is None:
        return None
    rec: PolicyRecord = unsealed("policy", parse_json_object(raw, where), store.root, where)
    if rec.version != version:
        raise Refused("integrity", f"{where} holds version {rec.version}, not the version its name says")
    return rec


def record(store: "Store", rec: PolicyRecord) -> None:
    """Store ``rec`` as the next version. Raises :class:`Refused` (``policy_changed``), nothing
    written, unless ``rec.version`` is one more than the latest stored version (0: none) and its
    file is created by this call (another ``policy set`` may have come first)."""
    latest = (versions(store) or [0])[-1]
    if rec.version != latest + 1:
        raise raced(rec.version, latest)
    created = create_exclusive(path_for(store, rec.version), sealed_bytes("policy", rec, store.root), owner=OWNER,
                               failpoint="policy:set")
    if not created:
        raise raced(rec.version, rec.version)
