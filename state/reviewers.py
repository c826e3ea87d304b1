"""Reviewers: who may decide in team mode, each known by a token only they hold.

A reviewer is a :class:`Reviewer` record ``{"name", "roles", "token_id", "token_hash", "added_at",
"rotated_at"}`` kept by the store (files: ``reviewers/``; PostgreSQL: table ``reviewers``), signed
with the store's signing key like a checkpoint (:func:`seal`, :func:`unseal`), so a record written
by hand is refused, never trusted. Its token (:func:`new_token`: ``hitl_<token_id>_<secret>``) is
shown once, when the reviewer is added or rotated; only a slow hash of it is stored
(:func:`hash_token`: scrypt from the standard library, RFC 7914, n=2**14, r=8, p=1, a 16-byte salt).

Team mode is on while one reviewer is registered (:func:`team_mode`): every decision is then
authenticated by a token (:func:`authenticate`), and its ``by`` is that reviewer's name. A task
started in team mode stays a team task (its checkpoint's ``team``), even if every reviewer record
is deleted later: its decisions are then refused, never opened to anyone (fail closed).

Never imports the SDK; imports ``state`` only.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets as _random
from typing import TYPE_CHECKING, Any, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from state.errors import Next, Refused
from state.integrity import compute_mac, verify_mac
from state.schema import MAX_NAME_CHARS, check_text, valid_channel, validation_message

if TYPE_CHECKING:
    from state.store import TaskStore

#: ``hitl_<token_id: 16 hex>_<secret: 43 URL-safe base64 characters (32 random bytes)>``.
TOKEN_PATTERN = re.compile(r"^hitl_(?P<id>[0-9a-f]{16})_(?P<secret>[A-Za-z0-9_-]{43})\Z")
#: scrypt's cost (RFC 7914): about 16 MiB and 50 ms per hash on a laptop.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2 ** 14, 8, 1
_HASH = re.compile(r"^scrypt\$(?P<n>[0-9]+)\$(?P<r>[0-9]+)\$(?P<p>[0-9]+)"
                   r"\$(?P<salt>[0-9a-f]{32})\$(?P<hash>[0-9a-f]{64})\Z")
#: What a signed reviewer record says it is (so a checkpoint's MAC can never pass for one).
RECORD = "reviewer"
MAX_ROLES = 16


class Reviewer(BaseModel):
    """One registered reviewer. ``name``: one line, at most :data:`state.schema.MAX_NAME_CHARS`
    characters (it is the ``by`` of their decisions); ``roles``: role names (``a-z0-9-``), sorted,
    no repeats; ``token_id``: 16 hex, the public part of the token (finds the record);
    ``token_hash``: :func:`hash_token` of the whole token; ``added_at``/``rotated_at``: ISO-8601
    UTC (``rotated_at`` None until the first rotate)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    roles: list[str] = Field(default_factory=list, max_length=MAX_ROLES)
    token_id: str = Field(pattern=r"^[0-9a-f]{16}$")
    token_hash: str
    added_at: str
    rotated_at: Optional[str] = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        check_text(v, what="the reviewer name", limit=MAX_NAME_CHARS, single_line=True)
        if not v.strip():
            raise ValueError("the reviewer name is blank")
        return v

    @field_validator("roles")
    @classmethod
    def _roles(cls, v: list[str]) -> list[str]:
        for role in v:
            if not valid_channel(role):  # role names follow the channel rule
                raise ValueError(f"role {role[:40]!r} is not 1-32 of a-z, 0-9 and -")
        if sorted(set(v)) != v:
            raise ValueError("roles must be sorted, without repeats")
        return v

    @field_validator("token_hash")
    @classmethod
    def _hash(cls, v: str) -> str:
        if not _HASH.match(v):
            raise ValueError("is not scrypt$n$r$p$<salt hex>$<hash hex>")
        return v

    def public(self) -> dict[str, Any]:
        """What ``reviewers list`` shows: ``{"name", "roles", "added_at", "rotated_at"}`` (no hash)."""
        return {"name": self.name, "roles": list(self.roles), "added_at": self.added_at,
                "rotated_at": self.rotated_at}


def clean_roles(roles: Optional[list[str]]) -> list[str]:
    """``roles`` (e.g. from ``--role``, repeatable) sorted, without repeats. Raises
    :class:`Refused` (``unsafe_input``) for a role that is not 1-32 of ``a-z0-9-``."""
    out = sorted(set(roles or []))
    for role in out:
        if not valid_channel(role):
            raise Refused("unsafe_input", f"role {role[:40]!r} is not 1-32 of a-z, 0-9 and -; nothing written")
    if len(out) > MAX_ROLES:
        raise Refused("unsafe_input", f"at most {MAX_ROLES} roles; nothing written")
    return out


def new_token() -> tuple[str, str]:
    """A fresh ``(token_id, token)``: ``token`` is ``hitl_<token_id>_<secret>`` (32 random bytes
    from :mod:`secrets`), to be shown once and never stored."""
    token_id = _random.token_hex(8)
    return token_id, f"hitl_{token_id}_{_random.token_urlsafe(32)}"


def hash_token(token: str, *, salt: Optional[bytes] = None) -> str:
    """``scrypt$<n>$<r>$<p>$<salt hex>$<hash hex>`` of ``token`` (UTF-8; :func:`hashlib.scrypt`,
    32-byte output, a fresh 16-byte salt unless ``salt``). About 50 ms."""
    salt = salt if salt is not None else _random.token_bytes(16)
    digest = hashlib.scrypt(token.encode("utf-8"), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, dklen=32)
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${salt.hex()}${digest.hex()}"


def token_matches(reviewer: Reviewer, token: str) -> bool:
    """True if ``token`` is ``reviewer``'s: its ``token_id`` and the scrypt hash (with the stored
    parameters and salt) compared in constant time (:func:`hmac.compare_digest`)."""
    match, stored = TOKEN_PATTERN.match(token), _HASH.match(reviewer.token_hash)
    if match is None or stored is None or match["id"] != reviewer.token_id:
        return False
    n, r, p = int(stored["n"]), int(stored["r"]), int(stored["p"])
    if (n, r, p) != (SCRYPT_N, SCRYPT_R, SCRYPT_P):  # parameters come from a signed record; still, ours only
        return False
    digest = hashlib.scrypt(token.encode("utf-8"), salt=bytes.fromhex(stored["salt"]), n=n, r=r, p=p, dklen=32)
    return hmac.compare_digest(digest.hex(), stored["hash"])


def seal(reviewer: Reviewer, key: bytes) -> dict[str, Any]:
    """The signed envelope a store keeps: ``{"record": "reviewer", **fields, "mac"}`` (``mac``:
    :func:`state.integrity.compute_mac` of the rest under the store's signing ``key``)."""
    body = {"record": RECORD, **reviewer.model_dump(mode="json")}
    return {**body, "mac": compute_mac(body, key)}


def unseal(data: Any, key: bytes, *, where: str) -> Reviewer:
    """The :class:`Reviewer` in ``data`` (a parsed envelope) if its MAC verifies under ``key`` and
    it validates. Raises :class:`Refused` (``integrity``) naming ``where`` otherwise: a reviewer
    record written or edited by hand is never trusted."""
    if not isinstance(data, dict) or data.get("record") != RECORD or not isinstance(data.get("mac"), str):
        raise Refused("integrity", f"{where} is not a signed reviewer record")
    body = {k: v for k, v in data.items() if k != "mac"}
    if not verify_mac(body, data["mac"], key):
        raise Refused("integrity", f"reviewer record integrity check failed for {where}")
    try:
        return Reviewer.model_validate({k: v for k, v in body.items() if k != "record"})
    except ValidationError as exc:
        raise Refused("integrity", f"{where} is not a valid reviewer record: {validation_message(exc)}") from None


def team_mode(store: "TaskStore") -> bool:
    """True while ``store`` has one reviewer registered (every decision is then authenticated).
    Raises :class:`Refused` if a reviewer record is damaged (fail closed)."""
    return bool(store.reviewers())


def find(store: "TaskStore", name: str) -> Optional[Reviewer]:
    """The reviewer named ``name`` in ``store``, or None."""
    return next((r for r in store.reviewers() if r.name == name), None)


def authenticate(store: "TaskStore", token: Optional[str]) -> Reviewer:
    """The reviewer whose token ``token`` is (``HITL_REVIEWER_TOKEN``, or the inbox's sign-in).
    Raises :class:`Refused` (``unauthenticated``) for no token, a malformed one, an unknown
    ``token_id`` (removed, rotated) or a wrong secret; the message never repeats the token."""
    if not token:
        raise Refused("unauthenticated", ["team mode: this needs the reviewer's token in HITL_REVIEWER_TOKEN",
                                          Next("reviewers_list"), "; nothing changed"])
    match = TOKEN_PATTERN.match(token)
    if match is not None:
        for reviewer in store.reviewers():
            if reviewer.token_id == match["id"] and token_matches(reviewer, token):
                return reviewer
    raise Refused("unauthenticated", "team mode: the reviewer token is not valid (unknown, removed, rotated or "
                  "mistyped); nothing changed")


def record(name: str, roles: list[str], token: str, token_id: str, at: str,
           rotated_at: Optional[str] = None) -> Reviewer:
    """A :class:`Reviewer` for ``name`` with ``roles`` and the hash of ``token``. Raises
    :class:`Refused` (``unsafe_input``) if ``name`` is not an allowed reviewer name."""
    try:
        return Reviewer(name=name, roles=roles, token_id=token_id, token_hash=hash_token(token), added_at=at,
                        rotated_at=rotated_at)
    except ValidationError as exc:
        raise Refused("unsafe_input", f"{validation_message(exc)}; nothing written") from None
