"""Write-ahead intents and settlements of effects through a service, one file each, created exclusively.

Layout: ``<state dir>/effects/<file_name(key)>.<attempt>.intent.json`` (an
:class:`state.records.EffectIntent`, written and fsynced before the request is sent) and
``<state dir>/effects/<file_name(key)>.<attempt>.settled.json`` (a
:class:`state.records.Settlement`: that attempt did not happen). Each is created with
:func:`state.durable.create_exclusive` (temp file, fsync, ``os.link``), so two processes can never
both write attempt ``n`` of a key: the one that loses reads the winner's. Nothing is ever rewritten
or removed (but by ``doctor --repair``, which signs an unsigned record of an earlier version that a
signed checkpoint proves: :mod:`state.adoption`). The ledger entry (``ledger/``) stays the one proof
that an effect happened.

Each file is a signed envelope (:mod:`state.record_seal`, kinds ``effect_intent`` and
``settlement``): one that does not verify, was written without a signature, belongs to another state
dir, or is named for another key, attempt or kind is refused (fail closed), so a hand edit can
neither make a call be sent again nor block it silently.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Optional, TypeVar

from pydantic import BaseModel

from state import effects, secrets
from state.durable import create_exclusive
from state.errors import Refused
from state.fileio import parse_json_object
from state.paths import file_name, inside, read_regular
from state.files.sealing import sealed_bytes, unsealed, verifying
from state.records import MAX_ATTEMPTS, EffectIntent, Settlement

if TYPE_CHECKING:  # the file store calls these with itself
    from state.files.store import Store

MAX_RECORD_BYTES = 64 * 1024
_NAME = re.compile(r"^(?P<stem>.+)\.(?P<attempt>[1-9][0-9]{0,2})\.(?P<kind>intent|settled)\.json$")
M = TypeVar("M", bound=BaseModel)


def folder(store: "Store") -> Path:
    """``<state dir>/effects``."""
    return store.root / "effects"


def path_for(store: "Store", key: str, attempt: int, kind: str) -> Path:
    """``effects/<file_name(key)>.<attempt>.<kind>.json`` (``kind``: ``intent`` or ``settled``);
    raises :class:`Refused` if it resolves outside the state dir."""
    return inside(store.root, folder(store) / f"{file_name(key)}.{attempt}.{kind}.json", f"{kind} record of {key!r}")


#: The record kind of each model's signed envelope (:data:`state.record_seal.KINDS`).
KINDS: dict[type[BaseModel], str] = {EffectIntent: "effect_intent", Settlement: "settlement"}
#: The record kind of each file kind (the name's ``intent`` / ``settled``).
FILE_KINDS = {"intent": "effect_intent", "settled": "settlement"}


def _parse(path: Path, model: type[M], keys: Optional[tuple[bytes, Optional[str]]] = None) -> Optional[M]:
    """The verified record of ``model`` in ``effects/`` file ``path`` (``keys``:
    :func:`state.files.sealing.verifying` of its state dir, if read already), or None if there is
    no such file."""
    raw = read_regular(path, f"effect record {path.name}", limit=MAX_RECORD_BYTES)
    if raw is None:
        return None
    data = parse_json_object(raw, f"effect record {path.name}")
    rec: M = unsealed(KINDS[model], data, path.parent.parent, f"effect record {path.name}", keys)
    return rec


def _read(path: Path, model: type[M], key: str, attempt: int) -> Optional[M]:
    rec = _parse(path, model)
    if rec is None:
        return None
    if (getattr(rec, "idempotency_key"), getattr(rec, "attempt")) != (key, attempt):
        raise Refused("ledger_mismatch", f"effect record {path.name} names key {getattr(rec, 'idempotency_key')!r} "
                      f"attempt {getattr(rec, 'attempt')}, not {key!r} attempt {attempt} (key mismatch)")
    return rec


def read_path(path: Path) -> EffectIntent | Settlement:
    """The intent or settlement in ``effects/`` file ``path`` (``doctor``). Raises :class:`Refused`
    if it is missing, not a regular file, damaged, or not named ``<file_name(key)>.<attempt>.<kind>.json``
    for the key and attempt it holds."""
    match = _NAME.match(path.name)
    if match is None:
        raise Refused("ledger_mismatch", f"effect record {path.name} is not named <key>.<attempt>.<kind>.json")
    rec: Optional[EffectIntent | Settlement] = _parse(path, EffectIntent if match["kind"] == "intent" else Settlement)
    if rec is None:
        raise Refused("ledger_mismatch", f"effect record {path.name} cannot be read (removed meanwhile?)")
    if (file_name(rec.idempotency_key), rec.attempt) != (match["stem"], int(match["attempt"])):
        raise Refused("ledger_mismatch", f"effect record {path.name} names key {rec.idempotency_key!r} "
                      f"attempt {rec.attempt} (key mismatch)")
    return rec


def _attempts(store: "Store", key: str, kind: str) -> list[int]:
    """The attempts of ``key`` that have a ``kind`` record (``intent`` or ``settled``), lowest
    first. Attempt 1, 2, … is probed by name (``lstat``) up to the first that has neither an intent
    nor a settlement (attempt n is begun only after n - 1 is settled, so attempts have no gaps), at
    most :data:`state.records.MAX_ATTEMPTS`: the cost is the key's own attempts, however many
    records ``effects/`` holds. Raises :class:`Refused` if a path resolves outside the state dir."""
    out = []
    for attempt in range(1, MAX_ATTEMPTS + 1):
        here = [k for k in ("intent", "settled") if os.path.lexists(path_for(store, key, attempt, k))]
        if not here:
            break
        if kind in here:
            out.append(attempt)
    return out


def intent_get(store: "Store", key: str) -> Optional[EffectIntent]:
    """The intent of ``key``'s latest attempt, or None. Raises :class:`Refused` if a file is damaged."""
    found = _attempts(store, key, "intent")
    if not found:
        return None
    return _read(path_for(store, key, found[-1], "intent"), EffectIntent, key, found[-1])


def settlement_get(store: "Store", key: str, attempt: int) -> Optional[Settlement]:
    """The settlement of ``key``'s ``attempt``, or None. Raises :class:`Refused` if it is damaged."""
    return _read(path_for(store, key, attempt, "settled"), Settlement, key, attempt)


def _create(store: "Store", rec: M, kind: str, spec: object, failpoint: str) -> tuple[M, bool]:
    key, attempt = getattr(rec, "idempotency_key"), getattr(rec, "attempt")
    body = secrets.redact(rec.model_dump(exclude_unset=True), spec, what=f"{kind} record of key {key!r}",
                          closed_keys=True)
    data = sealed_bytes(KINDS[type(rec)], type(rec).model_validate(body), store.root)  # signed: state.record_seal
    created = create_exclusive(path_for(store, key, attempt, kind), data, owner=file_name(key), failpoint=failpoint)
    if created:
        effects.note(getattr(rec, "task_id"), "wrote the effect's intent" if kind == "intent"
                     else "recorded that the effect did not happen")
    back = _read(path_for(store, key, attempt, kind), type(rec), key, attempt)
    if back is None:
        raise Refused("ledger_mismatch", f"{kind} record of key {key!r} attempt {attempt} cannot be read back")
    return back, created


def intent_record(store: "Store", intent: EffectIntent) -> tuple[EffectIntent, bool]:
    """Create ``intent`` (its key and attempt) exactly once: ``(the record stored, created)``; when
    another process wrote that attempt first, theirs is returned with ``created`` False. Raises
    :class:`Refused` if attempt ``n - 1`` has no settlement (only a settled attempt may be followed)."""
    if intent.attempt > 1 and settlement_get(store, intent.idempotency_key, intent.attempt - 1) is None:
        raise Refused("ledger_mismatch", f"attempt {intent.attempt} of key {intent.idempotency_key!r} follows an "
                      "attempt that was never settled; refusing")
    return _create(store, intent, "intent", secrets.INTENT, "effect:intent")


def settlement_record(store: "Store", settlement: Settlement) -> tuple[Settlement, bool]:
    """Create ``settlement`` exactly once: ``(the record stored, created)``. Raises
    :class:`Refused` if its attempt has no intent."""
    key, attempt = settlement.idempotency_key, settlement.attempt
    if not path_for(store, key, attempt, "intent").exists():
        raise Refused("ledger_mismatch", f"no intent of key {key!r} attempt {attempt} to settle")
    return _create(store, settlement, "settled", secrets.SETTLEMENT, "effect:settle")


def intents(store: "Store") -> list[EffectIntent]:
    """The latest intent of every key, oldest first. Raises :class:`Refused` on a damaged file."""
    if not folder(store).is_dir():
        return []
    latest: dict[str, tuple[int, Path]] = {}
    for path in folder(store).glob("*.intent.json"):
        match = _NAME.match(path.name)
        if match is None:
            raise Refused("ledger_mismatch", f"effect record {path.name} is not named <key>.<attempt>.intent.json")
        attempt = int(match["attempt"])
        if attempt > latest.get(match["stem"], (0, path))[0]:
            latest[match["stem"]] = (attempt, path)
    out = []
    keys = verifying(store.root) if latest else None  # read once, not once per record
    for attempt, path in latest.values():
        rec = _parse(path, EffectIntent, keys)
        if rec is None:
            raise Refused("ledger_mismatch", f"effect record {path.name} cannot be read (removed meanwhile?)")
        if f"{file_name(rec.idempotency_key)}.{rec.attempt}.intent.json" != path.name:
            raise Refused("ledger_mismatch",
                          f"effect record {path.name} names key {rec.idempotency_key!r} (key mismatch)")
        out.append(rec)
    return sorted(out, key=lambda i: (i.at, i.idempotency_key))
