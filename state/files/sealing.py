"""The file store's side of signed records (:mod:`state.record_seal`): which key and state ID sign
and verify them, and the bytes of an envelope on disk.

A record file (``ledger/``, ``effects/``, ``rejections/``) is the signed envelope itself, as
indented JSON: a person still reads every field, and ``python run.py ledger`` shows them. The key is
the state dir's signing key (:func:`state.integrity.load_key`), the state ID its ``state.id``
(:mod:`state.state_id`), created with the first record if no checkpoint made it before (the
conformance suite writes records into an empty store).

Never imports the SDK.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel

from state import state_id
from state.integrity import load_key
from state.record_seal import check_signed, seal_record, unseal_record


def sealed_bytes(kind: str, model: BaseModel, root: Path) -> bytes:
    """The file content of ``model`` (a record of ``kind``) signed for state dir ``root``: the
    envelope of :func:`state.record_seal.seal_record` as indented UTF-8 JSON. Creates the signing
    key and ``state.id`` if the state dir has none yet (as the first checkpoint would). Raises
    :class:`state.errors.Refused` as :func:`state.integrity.load_key` and
    :func:`state.state_id.ensure` do."""
    key = load_key(root, create=True)
    envelope = seal_record(kind, model, key, state_id.ensure(root).state_id)
    return (json.dumps(envelope, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def verifying(root: Path) -> tuple[bytes, Optional[str]]:
    """``(signing key, state ID or None)`` of state dir ``root``, what :func:`unsealed` verifies
    with (read once for a listing of many records). Raises :class:`state.errors.Refused` if there
    is no usable key or ``state.id`` is damaged."""
    ident: Optional[state_id.StateIdentity] = state_id.read(root)
    return load_key(root, create=False), ident.state_id if ident else None


def unsealed(kind: str, data: dict[str, Any], root: Path, where: str,
             keys: Optional[tuple[bytes, Optional[str]]] = None) -> Any:
    """The verified record of ``kind`` in ``data`` (a parsed file of state dir ``root``): see
    :func:`state.record_seal.unseal_record`; ``keys``: :func:`verifying` of ``root`` if the caller
    read it already. An unsigned record is refused before any key is read. Raises
    :class:`state.errors.Refused` (no signing key included)."""
    check_signed(data, where, kind)  # before the key: an unsigned record is named as such
    key, sid = keys if keys is not None else verifying(root)
    return unseal_record(kind, data, key, sid, where)
