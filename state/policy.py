"""The approval policy: how many distinct reviewers must approve a call, who may decide it, and
whether the one who asked may approve, per channel. It lives in the store, signed, one version
after another (``policy set FILE``, an admin's token; never read from a process's environment)::

    [default]
    approvals = 1
    [channels.news]
    approvals = 2              # distinct reviewers
    roles = ["editor"]         # who may approve (and reject)
    requester_may_approve = false

A channel's table names only what differs from ``[default]``; the rest is the default's. A file is
read with :mod:`tomllib` and validated with pydantic (:class:`Policy`: unknown keys refused):
anything wrong is one :class:`Refused` (``policy``) naming every error found (:func:`parse`); an
empty file, or one nested deeper than a policy can be, is refused too.

A stored version is a :class:`PolicyRecord` (``version`` from 1, only growing; the rules; their
:func:`fingerprint`; who set it and when), signed like every record that decides an effect
(:mod:`state.record_seal`, kind ``policy``). Every version is kept: a task records the version it
was started under (``state.schema.Team.policy_version``) and is decided under it, whatever
version is set later (``workflow.team``).

Never imports the SDK; imports ``state`` only.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from state.errors import Refused
from state.schema import MAX_NAME_CHARS, PREVIEW_CHANNEL, ApprovalRule, check_text, valid_channel

#: The largest policy file read, bytes.
MAX_POLICY_BYTES = 64 * 1024
MAX_APPROVALS = 10
#: The most ``[channels.NAME]`` tables a policy holds (a stored version stays under 64 KiB).
MAX_CHANNELS = 64
#: The most errors one refusal names (a hostile file could hold thousands); it says how many more.
MAX_NAMED_ERRORS = 50


#: One channel's rule (kept in :mod:`state.schema`, where a checkpoint records it).
Rule = ApprovalRule


class _Partial(BaseModel):
    """A ``[channels.X]`` table: only what differs from ``[default]``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    approvals: Optional[int] = Field(None, ge=1, le=MAX_APPROVALS)
    roles: Optional[list[str]] = Field(None, min_length=1, max_length=16)
    requester_may_approve: Optional[bool] = None


class Policy(BaseModel):
    """The rules: ``default`` (:class:`Rule`) and ``channels`` (channel name → the fields that
    differ). Role and channel names are 1-32 of ``a-z0-9-`` (checked by :func:`parse`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    default: Rule = Rule()
    channels: dict[str, _Partial] = Field(default_factory=dict, max_length=MAX_CHANNELS)

    def rule_for(self, channel: str) -> Rule:
        """The rule of ``channel``: its table over ``[default]``."""
        own = self.channels.get(channel)
        if own is None:
            return self.default
        return self.default.model_copy(update=own.model_dump(exclude_none=True))


class PolicyRecord(BaseModel):
    """One stored version of the policy: ``version`` (1, 2, …: each ``policy set`` adds the next),
    ``rules`` (:class:`Policy`), ``sha256`` (:func:`fingerprint` of ``rules``), ``set_by`` (the
    admin who set it) and ``set_at`` (ISO-8601 UTC). Signed by the store (:mod:`state.record_seal`,
    kind ``policy``); a record whose ``sha256`` is not its rules' is not valid."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: int = Field(ge=1, le=10**9)
    rules: Policy
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    set_by: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    set_at: str = Field(min_length=1, max_length=40)

    @field_validator("set_by")
    @classmethod
    def _name(cls, v: str) -> str:
        check_text(v, what="the admin's name", limit=MAX_NAME_CHARS, single_line=True)
        return v

    @model_validator(mode="after")
    def _fingerprint(self) -> "PolicyRecord":
        if fingerprint(self.rules) != self.sha256:
            raise ValueError("sha256 is not the fingerprint of the rules")
        return self

    def public(self) -> dict[str, Any]:
        """What ``policy show --json`` prints: ``{"version", "sha256", "set_by", "set_at", "rules"}``."""
        return {"version": self.version, "sha256": self.sha256, "set_by": self.set_by, "set_at": self.set_at,
                "rules": self.rules.model_dump(mode="json")}


def new_record(policy: Policy, version: int, by: str, at: str) -> PolicyRecord:
    """The :class:`PolicyRecord` of ``policy`` as version ``version``, set by ``by`` at ``at``.
    Raises :class:`Refused` (``unsafe_input``) for a name a record cannot hold."""
    try:
        return PolicyRecord.model_validate({"version": version, "rules": policy.model_dump(mode="json"),
                                            "sha256": fingerprint(policy), "set_by": by, "set_at": at})
    except ValidationError as exc:
        raise Refused("unsafe_input", f"the policy record is not valid ({_errors(exc)[0]}); nothing written") from None


def raced(version: int, latest: int) -> Refused:
    """The refusal of a store asked to write policy ``version`` while version ``latest`` is the
    latest stored (another ``policy set`` came first): ``policy_changed``, nothing written."""
    return Refused("policy_changed", f"policy version {version} cannot be written: version {latest} is the "
                   "latest stored (another policy set came first); nothing written: look at the policy now, "
                   "then set yours again")


def _loc(parts: tuple[Any, ...]) -> str:
    """A pydantic error location as ``default.approvals`` (each part cut to 40 characters)."""
    shown = []
    for part in parts:
        text = str(part)
        shown.append(text if valid_channel(text) or text.replace("_", "").isalnum() and len(text) <= 40
                     else repr(text[:40]))
    return ".".join(shown) or "(the file)"


def _errors(exc: ValidationError) -> list[str]:
    """Every error of ``exc`` as ``<where>: <what>`` (never the value given: it may be huge)."""
    return [f"{_loc(tuple(e['loc']))}: {e['msg']}" for e in exc.errors(include_input=False, include_url=False)]


def _name_problems(data: dict[str, Any]) -> list[str]:
    """The channel and role names in ``data`` (a parsed file) that are not 1-32 of ``a-z0-9-``
    (:func:`state.schema.valid_channel`); what is not even of the right type is left to pydantic."""
    out = []
    channels = data.get("channels")
    tables: list[tuple[str, Any]] = [("default", data.get("default"))]
    if isinstance(channels, dict):
        for name, table in channels.items():
            if not valid_channel(name):
                out.append(f"channels.{name[:40]!r}: a channel name is 1-32 of a-z, 0-9 and -")
            tables.append((f"channels.{_loc((name,))}", table))
    for where, table in tables:
        roles = table.get("roles") if isinstance(table, dict) else None
        for i, role in enumerate(roles if isinstance(roles, list) else []):
            if isinstance(role, str) and not valid_channel(role):
                out.append(f"{where}.roles.{i}: role {role[:40]!r} is not 1-32 of a-z, 0-9 and -")
    return out


def _table_problems(data: dict[str, Any]) -> list[str]:
    """The tables in ``data`` that set nothing (``[default]`` alone would read as one approval by
    anyone, the requester included: a half-written file, never a policy), and a ``[channels.preview]``
    table (the preview channel is local and needs no approval: its ledger entry is written at
    ``start`` and never reaches a service, so a rule for it would be shown and never applied)."""
    out = []
    tables: list[tuple[str, Any]] = [("default", data.get("default"))] if "default" in data else []
    channels = data.get("channels")
    if isinstance(channels, dict):
        tables += [(f"channels.{_loc((name,))}", table) for name, table in channels.items()]
        if PREVIEW_CHANNEL in channels:
            out.append(f"channels.{PREVIEW_CHANNEL}: the preview channel needs no approval (its entry is written "
                       "at start and never sent), so a rule for it would never apply; remove the table")
    out += [f"{where}: an empty table sets nothing; give approvals, roles or requester_may_approve"
            for where, table in tables if isinstance(table, dict) and not table]
    return out


def parse(text: str, *, where: str = "the policy") -> Policy:
    """The :class:`Policy` in TOML ``text``. Raises :class:`Refused` (``policy``), one line naming
    ``where``: for text that is not TOML (the parser's first error), nested too deeply (TOML
    tables or arrays inside each other beyond what Python's parser can follow: a policy is two
    levels deep), empty (no table at all, or a table that sets nothing: neither is ever taken as a
    policy), with a ``[channels.preview]`` table (that channel needs no approval), or with
    anything a policy may not hold (every error, up to :data:`MAX_NAMED_ERRORS`, and how many more)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise Refused("policy", f"{where} is not valid TOML ({exc}); nothing written") from None
    except RecursionError:
        raise Refused("policy", f"{where} nests tables or arrays too deeply to be a policy (a policy is a "
                      "[default] table and [channels.NAME] tables); nothing written") from None
    if not data:
        raise Refused("policy", f"{where} is empty (no [default] or [channels.NAME] table): an empty file is "
                      "not a policy; nothing written")
    problems = _name_problems(data) + _table_problems(data)
    try:
        policy = Policy.model_validate(data)
    except ValidationError as exc:
        problems = _errors(exc) + problems
    except RecursionError:  # pydantic follows what tomllib could: never expected, still one line
        problems = ["(the file): nested too deeply"] + problems
    if problems:
        shown = problems[:MAX_NAMED_ERRORS]
        more = f"; and {len(problems) - len(shown)} more" if len(problems) > len(shown) else ""
        raise Refused("policy", f"{where} is not a valid policy ({len(problems)} error"
                      f"{'s' if len(problems) != 1 else ''}: {'; '.join(shown)}{more}); nothing written")
    return policy


def load(path: str) -> Policy:
    """The policy in file ``path`` (``policy set FILE``). Raises :class:`Refused` (``policy``) if
    it is missing, not a regular file, over :data:`MAX_POLICY_BYTES`, not UTF-8 (a byte order mark is
    skipped; UTF-16 with its byte order mark is read too) or not a valid
    policy (:func:`parse`)."""
    file = Path(path)
    where = f"policy file {file.name!r}"
    try:
        if not file.is_file():
            raise Refused("policy", f"{where} does not exist or is not a regular file; nothing written")
        with file.open("rb") as handle:
            raw = handle.read(MAX_POLICY_BYTES + 1)
    except OSError as exc:
        raise Refused("policy", f"{where} cannot be read ({exc.strerror or type(exc).__name__}); "
                      "nothing written") from None
    if len(raw) > MAX_POLICY_BYTES:
        raise Refused("policy", f"{where} is over {MAX_POLICY_BYTES} bytes; nothing written")
    try:  # a byte order mark (Notepad) is not part of the TOML; Windows PowerShell 5.1's ">" writes UTF-16
        text = raw.decode("utf-16") if raw[:2] in (b"\xff\xfe", b"\xfe\xff") else raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise Refused("policy", f"{where} is not UTF-8; nothing written") from None
    return parse(text, where=where)


def fingerprint(policy: Optional[Policy]) -> Optional[str]:
    """SHA-256 (hex) of the canonical JSON of ``policy`` as validated (so comments, spacing and
    key order do not count; a channel table equal to the default still does); None for no policy."""
    if policy is None:
        return None
    data = json.dumps(policy.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(data.encode("utf-8")).hexdigest()
