"""Signing the records that decide whether an effect runs: the one wrapper both stores use.

A ledger entry (the effect happened), an effect intent (an attempt was begun), a settlement (an
attempt did not happen), a rejection record (a human rejected) and a version of the approval policy
(who must approve: :mod:`state.policy`) each decide what the next command does: send, send again,
never send, or refuse. So each is signed with the store's signing key, like
a checkpoint, in a record type of its own: the envelope a store keeps is

``{"record": <kind>, "state_id": <the store's ID>, **<the model's fields>, "mac": <hex HMAC-SHA256>}``

(:func:`seal_record`), the MAC over the canonical JSON of everything but ``mac``
(:func:`state.integrity.compute_mac`). What it binds:

- ``record``: the kind (:data:`KINDS`), so one kind can never pass for another (an intent for a
  settlement, a ledger entry for a rejection), nor a record for a checkpoint or a reviewer record;
- ``state_id``: the state dir (``state.id``, :mod:`state.state_id`) or PostgreSQL database
  (``store_identity``) it was written in, so a record copied into another store that uses the same
  key is refused (``foreign_state``);
- the model's own key fields (``idempotency_key`` and ``attempt``, ``task_id`` and ``channel``, or a
  policy's ``version``):
  the store compares them with where it found the record (the file name, the row's key columns), so
  a valid record renamed or moved to another key is refused.

Whatever the model dumps is signed (``model_dump(mode="json", exclude_unset=True)``), so a field
added to a model later is signed without a change here. :func:`unseal_record` reads an envelope
back: every failure is a :class:`Refused` naming the record. A record without a ``mac`` was
written by an earlier version of this program (or by hand): it is refused as *unsigned*
(:func:`is_unsigned`), never trusted silently; ``doctor`` names each, and ``doctor --repair`` signs
only those a signed checkpoint proves (:mod:`state.adoption`).

Never imports the SDK; imports ``state`` only.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, TypeVar

from pydantic import BaseModel, ValidationError

from state.errors import Next, Refused
from state.policy import PolicyRecord
from state.integrity import compute_mac, envelope_signed
from state.records import EffectIntent, LedgerEntry, RejectionRecord, Settlement
from state.schema import validation_message

#: Each record kind → its model, how a message names it, and the refusal code of one that is
#: signed but not a valid record (the codes each kind had before it was signed).
KINDS: Mapping[str, tuple[type[BaseModel], str, str]] = {
    "ledger_entry": (LedgerEntry, "ledger entry", "ledger_mismatch"),
    "effect_intent": (EffectIntent, "effect intent", "ledger_mismatch"),
    "settlement": (Settlement, "settlement", "ledger_mismatch"),
    "rejection": (RejectionRecord, "rejection record", "integrity"),
    "policy": (PolicyRecord, "policy record", "integrity"),
}
#: The envelope's own fields: a model may not have a field of these names.
ENVELOPE_FIELDS = ("record", "state_id", "mac")
M = TypeVar("M", bound=BaseModel)


def _kind(kind: str) -> tuple[type[BaseModel], str, str]:
    if kind not in KINDS:
        raise ValueError(f"unknown record kind {kind!r}; the kinds are state.record_seal.KINDS")
    return KINDS[kind]


def seal_record(kind: str, model: BaseModel, key: bytes, state_id: str) -> dict[str, Any]:
    """The signed envelope of ``model`` (a record of ``kind``, one of :data:`KINDS`, already
    redacted by the caller) for the store whose ID is ``state_id`` (32 hex), signed with ``key``:
    ``{"record", "state_id", **fields, "mac"}``. Raises ``ValueError`` for an unknown kind, a model
    of another class, or a model with a field named like an envelope field. Touches nothing."""
    cls, _, _ = _kind(kind)
    if not isinstance(model, cls):
        raise ValueError(f"a {kind} record is a {cls.__name__}, not a {type(model).__name__}")
    fields = model.model_dump(mode="json", exclude_unset=True)
    clash = [name for name in ENVELOPE_FIELDS if name in fields]
    if clash:
        raise ValueError(f"{cls.__name__} has a field named {clash[0]!r}, which the signed envelope uses")
    body = {"record": kind, "state_id": state_id, **fields}
    return {**body, "mac": compute_mac(body, key)}


def is_unsigned(data: Any) -> bool:
    """True if ``data`` (a parsed record) carries no signature at all: a JSON object with neither
    ``mac`` nor ``record`` (what an earlier version of this program wrote, or a hand-written
    record). Such a record is never trusted; ``doctor`` names it (:mod:`state.adoption`)."""
    return isinstance(data, dict) and "mac" not in data and "record" not in data


#: Kinds no earlier version wrote unsigned: ``doctor`` has nothing to say about one, so a refusal
#: of an unsigned one does not send the reader there.
NEVER_UNSIGNED = frozenset({"policy"})


def check_signed(data: Any, where: str, kind: Optional[str] = None) -> None:
    """Raise :class:`Refused` (``integrity``) naming ``where`` unless ``data`` is a JSON object that
    carries a ``mac``: a record without one was written by an earlier version of this program (or
    by hand) and is never trusted. Reads no key, so it is checked first. ``kind``: the record's
    kind, if known (one of :data:`NEVER_UNSIGNED` can only have been put there by hand)."""
    if not isinstance(data, dict):
        raise Refused("integrity", f"{where} is not a JSON object")
    if "mac" not in data and kind in NEVER_UNSIGNED:
        raise Refused("integrity", f"{where} is not signed: no version of this program writes it so, so it was "
                      "put there by hand; it is not trusted: a human must check (restore it from a backup)")
    if "mac" not in data:
        raise Refused("integrity", [f"{where} is not signed (written by an earlier version of this program, or "
                                    "by hand); it is not trusted", Next("doctor_unsigned")])


def legacy_fields(kind: str, data: Any) -> Optional[BaseModel]:
    """The model of ``kind`` in an unsigned record ``data`` (:func:`is_unsigned`), validated as the
    earlier version wrote it, or None if it is not even a valid record of that kind. For ``doctor``
    only: never a reason to trust it."""
    cls, _, _ = _kind(kind)
    if not is_unsigned(data):
        return None
    try:
        return cls.model_validate(data)
    except ValidationError:
        return None


def unseal_record(kind: str, data: Any, key: bytes, state_id: Optional[str], where: str) -> Any:
    """The model of ``kind`` in ``data`` (a parsed envelope read at ``where``, e.g. ``ledger entry
    <file>``) if it is a signed record of that kind, its MAC verifies under ``key``, it was written
    in the store whose ID is ``state_id`` (None: a state dir without ``state.id``: nothing written
    here can carry it), and its fields make a valid model. The caller then checks that its key
    fields are where it was found.

    Raises :class:`Refused` naming ``where``: ``integrity`` for a record without a signature
    (written by an earlier version, or by hand: :func:`is_unsigned`), of another kind, or whose MAC
    does not verify (edited, or signed with another key); ``foreign_state`` for a record of another
    state dir or database; the kind's code (:data:`KINDS`) for a signed record that is not a valid
    one."""
    cls, label, invalid = _kind(kind)
    check_signed(data, where, kind)
    if data.get("record") != kind:
        raise Refused("integrity", f"{where} is not a signed {label} (it says {str(data.get('record'))[:40]!r})")
    if not envelope_signed(data, key):
        raise Refused("integrity", f"{label} integrity check failed for {where} (edited, or signed with another "
                      "key)")
    found = data.get("state_id")
    if found != state_id:
        here = (f"this one is {state_id[:8]}…" if state_id else
                "this state dir has no state.id: restore it if it was lost")
        raise Refused("foreign_state", f"{where} belongs to another state dir or store (state ID "
                      f"{str(found)[:8]}…, {here}); refusing a copied record")
    try:
        return cls.model_validate({k: v for k, v in data.items() if k not in ENVELOPE_FIELDS})
    except ValidationError as exc:
        raise Refused(invalid, f"{where} is not valid: {validation_message(exc)}") from None
