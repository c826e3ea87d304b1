"""Reviewers: who may decide in team mode, each known by a token only they hold, and who may change
who they are (admins).

A reviewer is a :class:`Reviewer` ``{"name", "roles", "token_id", "token_hash", "added_at",
"rotated_at"}``. Its token (:func:`new_token`: ``hitl_<token_id>_<secret>``) is shown once, when the
reviewer is added or rotated; only a slow hash of it is stored (:func:`hash_token`: scrypt from the
standard library, RFC 7914, n=2**14, r=8, p=1, a 16-byte salt).

**The list.** The store keeps every reviewer in one record, the :class:`ReviewerList`
``{"version", "reviewers", "revoked", "changed_by", "changed_at"}``, signed with the store's signing
key and bound to the store (``state.id`` / the database's ``store_identity``) like every other
signed record (:func:`seal_list`, :func:`unseal_list`). Each change writes version N+1 by
compare-and-swap against version N (files: ``reviewers/r<N+1>.json`` created exclusively;
PostgreSQL: the row of version N+1 inserted once), so two admins changing the list at once never
both win, and a version is never written twice.

**Revocations.** A token that leaves the list (its reviewer removed, or the token rotated) is
revoked: it goes into the list's ``revoked`` and into a signed revocation record of its own
(:func:`seal_revocation`; files: ``reviewers/revoked/<token_id>.json``, created exclusively;
PostgreSQL: a ``reviewer_revocations`` row), which is never deleted. Every read of the list looks
each listed token up among the revocations: an older list put back (a file restored from a backup,
a row restored from a dump) lists a revoked token, and is refused (:func:`refuse_revived`), so an
old record can never make a rotated or removed token valid again.

**Admins.** The first reviewer registered on a store must have the role :data:`ADMIN`; from then on
every change (add, remove, rotate) needs the token of a reviewer with that role
(:func:`administer`), and the last admin cannot be removed (:func:`check_successor`, which the
stores run before every write), so the list, once begun, is never empty again. The same check
(:func:`admin_in`, on the list as read here) keeps ``policy set`` and ``expire`` to admins.

Team mode is on while one reviewer is registered (:func:`team_mode`): every decision is then
authenticated by a token (:func:`authenticate`), and its ``by`` is that reviewer's name. A task
started in team mode stays a team task (its checkpoint's ``team``), whatever happens to the list:
its decisions are refused, never opened to anyone, when no reviewer can authenticate (fail closed).

Never imports the SDK; imports ``state`` only.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets as _random
import unicodedata
from typing import TYPE_CHECKING, Any, Iterable, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from state.errors import Next, Refused
from state.integrity import compute_mac, envelope_signed
from state.schema import MAX_NAME_CHARS, check_text, valid_channel, validation_message

if TYPE_CHECKING:
    from state.store import TaskStore

#: ``hitl_<token_id: 16 hex>_<secret: 43 URL-safe base64 characters (32 random bytes)>``.
TOKEN_PATTERN = re.compile(r"^hitl_(?P<id>[0-9a-f]{16})_(?P<secret>[A-Za-z0-9_-]{43})\Z")
#: scrypt's cost (RFC 7914): about 16 MiB and 50 ms per hash on a laptop.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2 ** 14, 8, 1
_HASH = re.compile(r"^scrypt\$(?P<n>[0-9]+)\$(?P<r>[0-9]+)\$(?P<p>[0-9]+)"
                   r"\$(?P<salt>[0-9a-f]{32})\$(?P<hash>[0-9a-f]{64})\Z")
#: What a signed reviewer list and a signed revocation say they are (so no other signed record, a
#: checkpoint included, can ever pass for one).
LIST_RECORD = "reviewer_list"
REVOCATION_RECORD = "reviewer_revocation"
#: The envelope's own fields.
ENVELOPE_FIELDS = ("record", "state_id", "mac")
#: The role that may change the reviewer list.
ADMIN = "admin"
MAX_ROLES = 16
#: The most reviewers one list holds, and the most bytes its stored form may have (a reader's limit).
MAX_REVIEWERS = 500
MAX_LIST_BYTES = 1024 * 1024
#: How the store's signing key is named in a refusal (every machine on one store needs the same).
_KEY_HINT = ("edited by hand, or written with another signing key (another deployment with another "
             "HITL_SIGNING_KEY on this store? every machine on one store needs the same key)")


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

    @property
    def is_admin(self) -> bool:
        """True if this reviewer may change the reviewer list (role :data:`ADMIN`)."""
        return ADMIN in self.roles

    def public(self) -> dict[str, Any]:
        """What ``reviewers list`` shows: ``{"name", "roles", "added_at", "rotated_at"}`` (no hash)."""
        return {"name": self.name, "roles": list(self.roles), "added_at": self.added_at,
                "rotated_at": self.rotated_at}


class Revoked(BaseModel):
    """A token that left the list (its reviewer removed, or the token rotated): ``token_id`` (16
    hex) and the ``name`` of the reviewer it was. Its signed record (:func:`seal_revocation`) is
    never deleted; a list that names the token again is refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    token_id: str = Field(pattern=r"^[0-9a-f]{16}$")
    name: str = Field(min_length=1, max_length=MAX_NAME_CHARS)


class ReviewerList(BaseModel):
    """The whole reviewer list of a store, one signed record. ``version``: 0 for a store with no
    list yet (never stored), then 1, 2, … (each change writes the next); ``reviewers``: by name, no
    name or token ID twice; ``revoked``: every token that ever left the list, by token ID (none of
    them listed); ``changed_by``: the admin who wrote this version (None for the first);
    ``changed_at``: when (ISO-8601 UTC; None for version 0)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: int = Field(ge=0)
    reviewers: list[Reviewer] = Field(default_factory=list, max_length=MAX_REVIEWERS)
    revoked: list[Revoked] = Field(default_factory=list)
    changed_by: Optional[str] = Field(None, max_length=MAX_NAME_CHARS)
    changed_at: Optional[str] = None

    @model_validator(mode="after")
    def _consistent(self) -> "ReviewerList":
        names = [r.name for r in self.reviewers]
        if names != sorted(set(names)):
            raise ValueError("reviewers must be sorted by name, no name twice")
        tokens = [r.token_id for r in self.reviewers]
        if len(set(tokens)) != len(tokens):
            raise ValueError("a token ID is listed twice")
        gone = [r.token_id for r in self.revoked]
        if gone != sorted(set(gone)):
            raise ValueError("revoked tokens must be sorted by token ID, none twice")
        if set(gone) & set(tokens):
            raise ValueError("a listed token is revoked")
        if self.version == 0 and (self.reviewers or self.revoked):
            raise ValueError("version 0 is the empty list")
        return self

    def find(self, name: str) -> Optional[Reviewer]:
        """The reviewer named ``name``, or None."""
        return next((r for r in self.reviewers if r.name == name), None)

    def admins(self) -> list[str]:
        """The names of the reviewers with the role :data:`ADMIN`."""
        return [r.name for r in self.reviewers if r.is_admin]


#: The list of a store that has none (version 0): single-user mode.
EMPTY = ReviewerList(version=0)


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


# -- the signed records ------------------------------------------------------------------------
def _seal(kind: str, fields: dict[str, Any], key: bytes, state_id: str) -> dict[str, Any]:
    body = {"record": kind, "state_id": state_id, **fields}
    return {**body, "mac": compute_mac(body, key)}


def _unseal(kind: str, label: str, data: Any, key: bytes, state_id: Optional[str], where: str) -> dict[str, Any]:
    """The fields of ``data`` (a parsed envelope of ``kind``) once its MAC verifies under ``key`` and
    it is bound to the store whose ID is ``state_id``. Raises :class:`Refused` naming ``where``."""
    if not isinstance(data, dict) or data.get("record") != kind or not isinstance(data.get("mac"), str):
        raise Refused("integrity", f"{where} is not a signed {label}; it is not trusted")
    if not envelope_signed(data, key):
        raise Refused("integrity", f"{where} does not verify with this signing key: {_KEY_HINT}; nothing changed")
    found = data.get("state_id")
    if state_id is None or found != state_id:
        here = (f"this one is {state_id[:8]}…" if state_id else
                "this state dir has no state.id: restore it if it was lost")
        raise Refused("foreign_state", f"{where} belongs to another state dir or store (state ID "
                      f"{str(found)[:8]}…, {here}); refusing a copied {label}")
    return {k: v for k, v in data.items() if k not in ENVELOPE_FIELDS}


def seal_list(lst: ReviewerList, key: bytes, state_id: str) -> dict[str, Any]:
    """The signed envelope a store keeps of ``lst``: ``{"record": "reviewer_list", "state_id",
    **fields, "mac"}`` (``mac``: :func:`state.integrity.compute_mac` of the rest under the store's
    signing ``key``; ``state_id``: the store's ID, 32 hex). Touches nothing."""
    return _seal(LIST_RECORD, lst.model_dump(mode="json"), key, state_id)


def unseal_list(data: Any, key: bytes, state_id: Optional[str], *, where: str) -> ReviewerList:
    """The :class:`ReviewerList` in ``data`` (a parsed envelope) if its MAC verifies under ``key``,
    it belongs to the store whose ID is ``state_id`` (None: the state dir has no ``state.id``) and
    it validates. Raises :class:`Refused` naming ``where``: ``integrity`` for a list that is not
    signed, is edited, or was signed with another key (the message names ``HITL_SIGNING_KEY``);
    ``foreign_state`` for one copied from another store."""
    fields = _unseal(LIST_RECORD, "reviewer list", data, key, state_id, where)
    try:
        lst = ReviewerList.model_validate(fields)
    except ValidationError as exc:
        raise Refused("integrity", f"{where} is not a valid reviewer list: {validation_message(exc)}") from None
    if lst.version < 1:
        raise Refused("integrity", f"{where} is not a valid reviewer list: version {lst.version}")
    return lst


def seal_revocation(revoked: Revoked, key: bytes, state_id: str) -> dict[str, Any]:
    """The signed envelope of a revocation: ``{"record": "reviewer_revocation", "state_id",
    "token_id", "name", "mac"}``. Touches nothing."""
    return _seal(REVOCATION_RECORD, revoked.model_dump(mode="json"), key, state_id)


def unseal_revocation(data: Any, key: bytes, state_id: Optional[str], *, where: str) -> Revoked:
    """The :class:`Revoked` in ``data`` (a parsed envelope), verified as :func:`unseal_list`
    verifies a list. Raises :class:`Refused` naming ``where``."""
    fields = _unseal(REVOCATION_RECORD, "revocation record", data, key, state_id, where)
    try:
        return Revoked.model_validate(fields)
    except ValidationError as exc:
        raise Refused("integrity", f"{where} is not a valid revocation record: {validation_message(exc)}") from None


def refuse_revived(lst: ReviewerList, where: str, found: dict[str, Optional[Revoked]]) -> None:
    """Raise :class:`Refused` (``integrity``) if ``found`` (token ID → its verified revocation, or
    None for a revocation record that does not verify) holds a token that ``lst`` (read at
    ``where``) lists: an older list put back (restored from a backup or a dump) would make a rotated
    or removed token valid again. Does nothing when ``found`` is empty."""
    hits = [r for r in lst.reviewers if r.token_id in found]
    if not hits:
        return
    first = hits[0]
    signed = found[first.token_id] is not None
    raise Refused("integrity", f"{where} (version {lst.version}) lists reviewer {first.name!r} with a token that "
                  f"was revoked ({'removed or rotated' if signed else 'its revocation record does not verify'}): "
                  "an older reviewer list put back (a file restored from a backup, a row from a dump)? It is not "
                  "trusted: put the newest list back; a human must check; nothing changed")


def check_successor(expect: ReviewerList, new: ReviewerList) -> None:
    """Raise :class:`Refused` unless ``new`` may follow ``expect`` (what a store checks before it
    writes a list, whoever calls it): ``new.version`` is ``expect.version + 1``; ``new`` has an
    admin (``not_allowed``: the first reviewer must be one, the last one cannot be removed); every
    token of ``expect`` that ``new`` does not list is revoked in ``new``, and every revoked token
    stays revoked (``integrity``: a token leaving the list unrevoked could come back). Pure."""
    if new.version != expect.version + 1:
        raise Refused("stale_revision", f"reviewer list version {new.version} cannot follow version "
                      f"{expect.version}; nothing written")
    if not new.admins():
        what = ("the first reviewer registered must have the role admin: from then on every change to the "
                "reviewer list needs an admin's token" if not expect.reviewers else
                "the last admin cannot be removed (nor lose the role): register another admin first")
        raise Refused("not_allowed", f"{what}; nothing written")
    kept = {r.token_id for r in new.reviewers}
    revoked = {r.token_id for r in new.revoked}
    if not {r.token_id for r in expect.revoked} <= revoked:
        raise Refused("integrity", "a revoked reviewer token would be forgotten; nothing written")
    if any(r.token_id not in kept and r.token_id not in revoked for r in expect.reviewers):
        raise Refused("integrity", "a token that leaves the reviewer list must be revoked; nothing written")


# -- reading and deciding --------------------------------------------------------------------
def registered(store: "TaskStore") -> list[Reviewer]:
    """Every reviewer ``store`` lists now, by name (those of its verified
    :meth:`state.store.TaskStore.reviewer_list`); ``[]``: not team mode. Raises :class:`Refused`
    as that does."""
    return list(store.reviewer_list().reviewers)


def team_mode(store: "TaskStore") -> bool:
    """True while ``store`` has one reviewer registered (every decision is then authenticated).
    Raises :class:`Refused` if the list is damaged, foreign or an older one put back (fail closed)."""
    return bool(registered(store))


def find(store: "TaskStore", name: str) -> Optional[Reviewer]:
    """The reviewer named ``name`` in ``store``, or None."""
    return next((r for r in registered(store) if r.name == name), None)


def authenticate(store: "TaskStore", token: Optional[str]) -> Reviewer:
    """The reviewer whose token ``token`` is (``HITL_REVIEWER_TOKEN``, or the inbox's sign-in),
    among those ``store`` lists now (:func:`authenticate_in`). Raises :class:`Refused`."""
    if not token:  # before the list is read: no key needed to say so
        authenticate_in([], token)
    return authenticate_in(registered(store), token)


def authenticate_in(reviewers: list[Reviewer], token: Optional[str]) -> Reviewer:
    """The one of ``reviewers`` whose token ``token`` is. Raises :class:`Refused`
    (``unauthenticated``) for no token, a malformed one, an unknown ``token_id`` (removed, rotated)
    or a wrong secret; the message never repeats the token."""
    if not token:
        raise Refused("unauthenticated", ["team mode: this needs the reviewer's token in HITL_REVIEWER_TOKEN",
                                          Next("reviewers_list"), "; nothing changed"])
    match = TOKEN_PATTERN.match(token)
    if match is not None:
        for reviewer in reviewers:
            if reviewer.token_id == match["id"] and token_matches(reviewer, token):
                return reviewer
    raise Refused("unauthenticated", "team mode: the reviewer token is not valid (unknown, removed, rotated or "
                  "mistyped); nothing changed")


def fingerprint(reviewer: Reviewer) -> str:
    """A name for the token ``reviewer`` holds now, without the token: SHA-256 (hex) of its stored
    hash (:attr:`Reviewer.token_hash`, salted: a new token, even the same one again, never has the
    same). The browser inbox keeps it with a session (:func:`still_current`)."""
    return hashlib.sha256(reviewer.token_hash.encode("ascii")).hexdigest()


def still_current(reviewers: list[Reviewer], name: str, token_id: str, token_fingerprint: str) -> Reviewer:
    """The one of ``reviewers`` (the list as the store verifies it now) named ``name`` whose token
    is still the one a session was signed in with (its ``token_id`` and :func:`fingerprint`): a
    session of the browser inbox is checked so at every request, so a reviewer removed, or whose
    token was rotated, is out at their next request. Raises :class:`Refused` (``unauthenticated``)
    otherwise; the message never holds a token."""
    for reviewer in reviewers:
        if (reviewer.name == name and reviewer.token_id == token_id
                and hmac.compare_digest(fingerprint(reviewer), token_fingerprint)):
            return reviewer
    raise Refused("unauthenticated", f"team mode: reviewer {name[:100]!r} signed in with a token that is no longer "
                  "theirs (removed or rotated since): sign in again; nothing changed")


def admin_in(reviewers: list[Reviewer], token: Optional[str], what: str, *,
             nothing: str = "nothing changed") -> Reviewer:
    """The one of ``reviewers`` (a verified list: :meth:`state.store.TaskStore.reviewer_list`) whose
    token ``token`` is, if they are an admin (:attr:`Reviewer.is_admin`, the role :data:`ADMIN`).
    The one notion of admin: every change of the reviewer list (:func:`administer`), and what else
    only an admin may do in team mode (``policy set``, ``expire``: ``workflow.team.require_admin``).
    ``what`` names the action and ``nothing`` ends the message (e.g. ``nothing written``). Raises
    :class:`Refused`: ``unauthenticated`` (no token, or not the token of one of ``reviewers``),
    ``not_allowed`` (a reviewer who is not an admin); the message never repeats the token."""
    needs = f"{what} needs an admin's token (a reviewer with the role {ADMIN}) in HITL_REVIEWER_TOKEN"
    if not token:
        raise Refused("unauthenticated", f"{needs}; {nothing}")
    admin = authenticate_in(reviewers, token)
    if not admin.is_admin:
        raise Refused("not_allowed", f"{needs}; {admin.name!r} has "
                      f"{'role ' + ', '.join(admin.roles) if admin.roles else 'no role'}; {nothing}")
    return admin


def record(name: str, roles: list[str], token: str, token_id: str, at: str,
           rotated_at: Optional[str] = None) -> Reviewer:
    """A :class:`Reviewer` for ``name`` with ``roles`` and the hash of ``token``. Raises
    :class:`Refused` (``unsafe_input``) if ``name`` is not an allowed reviewer name."""
    try:
        return Reviewer(name=name, roles=roles, token_id=token_id, token_hash=hash_token(token), added_at=at,
                        rotated_at=rotated_at)
    except ValidationError as exc:
        raise Refused("unsafe_input", f"{validation_message(exc)}; nothing written") from None


def _next(lst: ReviewerList, reviewers: list[Reviewer], gone: list[Reviewer], by: Optional[str],
          at: str) -> ReviewerList:
    """Version ``lst.version + 1`` with ``reviewers`` listed and the tokens of ``gone`` revoked."""
    revoked = {r.token_id: r for r in lst.revoked}
    revoked.update({r.token_id: Revoked(token_id=r.token_id, name=r.name) for r in gone})
    if len(reviewers) > MAX_REVIEWERS:
        raise Refused("unsafe_input", f"at most {MAX_REVIEWERS} reviewers; nothing written")
    return ReviewerList(version=lst.version + 1, reviewers=sorted(reviewers, key=lambda r: r.name),
                        revoked=[revoked[t] for t in sorted(revoked)], changed_by=by, changed_at=at)


def _script(char: str) -> str:
    """The script of a letter as the first word of its Unicode name (``LATIN``, ``CYRILLIC``,
    ``CJK``, ``HIRAGANA`` …); ``""`` for what has no name."""
    return unicodedata.name(char, "").split(" ", 1)[0]


def skeleton(name: str) -> str:
    """What two names that look alike share: NFKC, case folded, a dotless ``ı`` read as ``i``."""
    return unicodedata.normalize("NFKC", name).casefold().replace("\u0131", "i")


def check_new_name(name: str, registered: list[str]) -> None:
    """Refuse a reviewer name a person could mistake for another (``reviewers add``): one that
    NFKC changes (fullwidth ``ａlice``), with a space at either end, with letters of more than one
    script (a Cyrillic ``а`` in ``аlice``), or whose :func:`skeleton` is a registered name's
    (``ALICE``, ``alıce``). Names in one script of any kind (``李雷``) are fine. Raises
    :class:`Refused` (``unsafe_input``), nothing written. Names already registered are kept as
    they are: the check is made when a name is added."""
    shown = ascii(name)[:120]
    if unicodedata.normalize("NFKC", name) != name or name != name.strip():
        raise Refused("unsafe_input", f"reviewer name {shown} has characters that look like others (full-width "
                      "letters, a space at either end …): give it as plain text; nothing written")
    scripts = {_script(c) for c in name if unicodedata.category(c).startswith("L")}
    if len(scripts) > 1:
        raise Refused("unsafe_input", f"reviewer name {shown} mixes letters of {len(scripts)} scripts "
                      f"({', '.join(sorted(scripts))}), so it can pass for another name; use one script; "
                      "nothing written")
    twin = next((other for other in registered if skeleton(other) == skeleton(name)), None)
    if twin is not None:
        raise Refused("reviewer_exists", f"reviewer name {shown} reads as {ascii(twin)[:120]}, who is registered "
                      "already (names are compared without case): choose another; nothing written")


def list_lost(store: "TaskStore", tasks: Optional[Iterable[Any]] = None) -> Optional[str]:
    """For a store whose reviewer list is empty: what shows it once had one, or None. A policy
    (``"a policy"``), or a task started in team mode (``"task 'K', started in team mode"``) among
    ``tasks`` (checkpoints; None: every readable one of ``store``): a list never goes back to empty
    (its last admin is never removed), so it was deleted or lost. Reads the policy and, without
    one, the checkpoints (call it only while no reviewer is listed)."""
    if store.policy_get() is not None:
        return "a policy"
    found = store.scan()[0] if tasks is None else tasks
    return next((f"task {cp.task_id!r}, started in team mode" for cp in found if cp.team is not None), None)


def lost_list_problem(found: str) -> str:
    """The sentence for a reviewer list :func:`list_lost` found lost (``found``: what it found)."""
    return (f"the reviewer list is missing, but this store has {found}: a list never goes back to empty (its "
            "last admin is never removed), so it was deleted or lost; a human must restore the reviewer list "
            "from a backup")


def _never_had_a_team(store: "TaskStore") -> None:
    """Before a first reviewer is registered without a token: raise :class:`Refused` (``integrity``)
    if ``store`` once had a reviewer list (:func:`list_lost`): whoever deleted it must not register
    a team of their own."""
    found = list_lost(store)
    if found is not None:
        raise Refused("integrity", lost_list_problem(found) + "; nothing written")


def administer(store: "TaskStore", action: str, name: str, *, token: Optional[str], at: str,
               roles: Optional[list[str]] = None) -> dict[str, Any]:
    """Change the reviewer list of ``store``: ``action`` ``add`` (``name`` with ``roles``),
    ``remove`` or ``rotate`` (a new token for ``name``, the same roles), as the admin whose token
    is ``token`` (``HITL_REVIEWER_TOKEN``), at ``at`` (ISO-8601 UTC). The first ``add`` on a store
    needs no token and must give the role :data:`ADMIN`. Returns ``{"action", "name", "roles",
    "version"}`` plus ``"token"`` (``add``, ``rotate``: the new token, to be shown this once).

    Everything is checked before anything is written: raises :class:`Refused`, nothing written:
    ``unauthenticated`` (no token, or not a registered reviewer's); ``not_allowed`` (the token is
    not an admin's; the first reviewer without ``--role admin``; the last admin removed);
    ``reviewer_exists`` / ``no_reviewer``; ``unsafe_input``; what the store raises (a list that
    does not verify, another deployment's key, another admin's change meanwhile:
    ``stale_revision``)."""
    current = store.reviewer_list()
    admin: Optional[Reviewer] = None
    if current.reviewers:
        admin = admin_in(current.reviewers, token, "changing the reviewer list", nothing="nothing written")
    old = current.find(name)
    if action == "add":
        roles = clean_roles(roles)
        if old is not None:
            raise Refused("reviewer_exists", f"reviewer {name!r} is registered already; nothing written")
        check_new_name(name, [r.name for r in current.reviewers])
        if not current.reviewers and ADMIN not in roles:
            raise Refused("not_allowed", [f"the first reviewer registered must have the role {ADMIN}",
                                          Next("reviewers_add_admin"), ": from then on every change to the "
                                          "reviewer list needs an admin's token; nothing written"])
        if not current.reviewers:
            _never_had_a_team(store)
        token_id, new_secret = new_token()
        added = record(name, roles, new_secret, token_id, at)
        new = _next(current, [*current.reviewers, added], [], admin.name if admin else None, at)
        store.reviewer_save(current, new)
        return {"action": action, "name": name, "roles": roles, "version": new.version, "token": new_secret}
    if old is None:
        raise Refused("no_reviewer", f"no reviewer {name!r} is registered; nothing written")
    others = [r for r in current.reviewers if r.name != name]
    if action == "remove":
        new = _next(current, others, [old], admin.name if admin else None, at)
        store.reviewer_save(current, new)
        return {"action": action, "name": name, "roles": list(old.roles), "version": new.version}
    if action != "rotate":
        raise ValueError(f"unknown action {action!r}: add, remove or rotate")
    token_id, new_secret = new_token()
    rotated = record(name, list(old.roles), new_secret, token_id, old.added_at, at)
    new = _next(current, [*others, rotated], [old], admin.name if admin else None, at)
    store.reviewer_save(current, new)
    return {"action": action, "name": name, "roles": list(old.roles), "version": new.version, "token": new_secret}
