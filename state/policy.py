"""The approval policy: how many distinct reviewers must approve a call, who may decide it, and
whether the one who asked may approve, per channel (``HITL_POLICY``, a TOML file)::

    [default]
    approvals = 1
    [channels.news]
    approvals = 2              # distinct reviewers
    roles = ["editor"]         # who may approve (and reject)
    requester_may_approve = false

A channel's table names only what differs from ``[default]``; the rest is the default's. The file
is read with :mod:`tomllib` and validated with pydantic (:class:`Policy`: unknown keys refused);
anything wrong is one :class:`Refused` (``policy``). Its :func:`fingerprint` and the rules of a
task's channels are recorded in the task's checkpoint at start (``team``): a task is decided under
the policy it was started with, and one started under another policy is refused
(``policy_changed``), like a changed agent.

Never imports the SDK; imports ``state`` only.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from pathlib import Path
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from state.errors import Refused
from state.schema import ApprovalRule, valid_channel, validation_message

#: The largest policy file read, bytes.
MAX_POLICY_BYTES = 64 * 1024
MAX_APPROVALS = 10


#: One channel's rule (kept in :mod:`state.schema`, where a checkpoint records it).
Rule = ApprovalRule


class _Partial(BaseModel):
    """A ``[channels.X]`` table: only what differs from ``[default]``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    approvals: Optional[int] = Field(None, ge=1, le=MAX_APPROVALS)
    roles: Optional[list[str]] = Field(None, min_length=1, max_length=16)
    requester_may_approve: Optional[bool] = None


class Policy(BaseModel):
    """The whole file: ``default`` (:class:`Rule`) and ``channels`` (channel name → the fields that
    differ). Role and channel names are 1-32 of ``a-z0-9-``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    default: Rule = Rule()
    channels: dict[str, _Partial] = Field(default_factory=dict)

    def rule_for(self, channel: str) -> Rule:
        """The rule of ``channel``: its table over ``[default]``."""
        own = self.channels.get(channel)
        if own is None:
            return self.default
        return self.default.model_copy(update=own.model_dump(exclude_none=True))


def _check_names(policy: Policy) -> None:
    """Channel and role names follow the channel rule (:func:`state.schema.valid_channel`)."""
    for channel in policy.channels:
        if not valid_channel(channel):
            raise ValueError(f"channel {channel[:40]!r} is not 1-32 of a-z, 0-9 and -")
    for rule in [policy.default, *policy.channels.values()]:
        for role in rule.roles or []:
            if not valid_channel(role):
                raise ValueError(f"role {str(role)[:40]!r} is not 1-32 of a-z, 0-9 and -")


def parse(text: str, *, where: str = "the policy") -> Policy:
    """The :class:`Policy` in TOML ``text``. Raises :class:`Refused` (``policy``) with one line
    naming ``where`` and the first problem."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise Refused("policy", f"{where} is not valid TOML ({exc})") from None
    try:
        policy = Policy.model_validate(data)
        _check_names(policy)
    except ValidationError as exc:
        raise Refused("policy", f"{where} is not a valid policy: {validation_message(exc)}") from None
    except ValueError as exc:
        raise Refused("policy", f"{where} is not a valid policy: {exc}") from None
    return policy


def load(path: str) -> Policy:
    """The policy in file ``path`` (``HITL_POLICY``). Raises :class:`Refused` (``policy``) if it
    is missing, not a regular file, over :data:`MAX_POLICY_BYTES`, not UTF-8 or not valid."""
    file = Path(path)
    where = f"HITL_POLICY file {file.name!r}"
    try:
        if not file.is_file():
            raise Refused("policy", f"{where} does not exist or is not a regular file")
        raw = file.read_bytes()
    except OSError as exc:
        raise Refused("policy", f"{where} cannot be read ({exc.strerror or type(exc).__name__})") from None
    if len(raw) > MAX_POLICY_BYTES:
        raise Refused("policy", f"{where} is over {MAX_POLICY_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Refused("policy", f"{where} is not UTF-8") from None
    return parse(text, where=where)


def fingerprint(policy: Optional[Policy]) -> Optional[str]:
    """SHA-256 (hex) of the canonical JSON of ``policy`` as validated (so comments, spacing and
    key order do not count; a channel table equal to the default still does); None for no policy."""
    if policy is None:
        return None
    data = json.dumps(policy.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(data.encode("utf-8")).hexdigest()


def current() -> Optional[Policy]:
    """The policy in force: the file ``HITL_POLICY`` names (read now), or None if it is unset."""
    from state.settings import settings

    path = settings().policy
    return None if path is None else load(path)
