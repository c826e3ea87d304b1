"""The records both stores keep beside the checkpoint: ledger entries and rejection records.

One model each, shared by the file store (``state/files/``) and PostgreSQL (``state/postgres/``), so a
record means the same wherever it is kept, and the rules every store applies before it records or
accepts a ledger entry (:func:`check_ledger_key`, :func:`check_same_entry`); each store decides
only how a record is written exclusively. Every store keeps each record signed, as whatever the
model dumps (:mod:`state.record_seal`): the models themselves know nothing of signatures.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from state.errors import Refused
from state.schema import ACTION_FIELD, CHANNEL_FIELD, MAX_NAME_CHARS, MAX_REASON_CHARS, valid_key

#: How :mod:`state.effects` names the creation of a rejection record.
RECORDED = "rejection record written"
#: The call ID of the rejection record ``fail`` creates for a whole task (``workflow.settlement``):
#: no model's call ID holds ``~`` (:data:`state.schema.CALL_ID_PATTERN`), so it is never a reject's.
#: Kept under the task's own key (the record of a one-channel task's reject), it outlives any
#: older copy of the checkpoint: an end that is not in the checkpoint refuses every decision.
ENDED_CALL = "~ended"


def is_end_mark(record: Optional["RejectionRecord"]) -> bool:
    """True if ``record`` (a rejection record, or None) is ``fail``'s end mark (:data:`ENDED_CALL`),
    not a human's reject."""
    return record is not None and record.call_id == ENDED_CALL


def _allowed_key(value: str) -> str:
    """``value`` if it is an allowed task ID (:func:`state.schema.valid_key`); the one key rule of
    both records' ``task_id``."""
    if not valid_key(value):
        raise ValueError("not an allowed key")
    return value


class LedgerEntry(BaseModel):
    """One executed action: ``{"idempotency_key", "task_id", "action", "title", "content_sha256",
    "published_at", "channel", "approval", "result"}`` (``published_at`` ISO-8601 UTC).

    ``idempotency_key`` is ``task_id`` (a one-channel task) or ``<task_id>#<channel>``
    (:func:`state.schema.effect_key`). ``channel`` and ``approval`` (``"human"``: a person's
    approval was on record; ``"not_needed"``: the approval rule let the call run without one, e.g.
    the private ``preview`` channel) are optional: entries written before they existed lack them.
    ``result`` is what the effect's function returned the first time (any JSON value,
    :func:`workflow.effect.effect_tool`), so a repeat of the call answers with it without running
    the function again; absent when it returned None (the publisher's) and in older entries.
    """

    # defer_build: the validator is built on first use, so commands that never read the ledger
    # (status, list) do not pay for it at startup (read-only commands stay fast).
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, defer_build=True)

    idempotency_key: str
    task_id: str
    #: The tool whose call this entry records (the task's action, ``Checkpoint.action``).
    action: str = Field(pattern=ACTION_FIELD)
    title: str = Field(max_length=200)
    content_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    published_at: str = Field(min_length=1, max_length=40)
    channel: Optional[str] = Field(default=None, pattern=CHANNEL_FIELD)
    approval: Optional[Literal["human", "not_needed"]] = None
    result: Optional[Any] = None
    #: Set when a human settled an effect that was in doubt (a settle with the outcome published,
    #: :mod:`workflow.settlement`):
    #: who found it published, and why; absent for an effect whose outcome the program saw.
    settled_by: Optional[str] = Field(default=None, min_length=1, max_length=MAX_NAME_CHARS)
    settle_reason: Optional[str] = Field(default=None, max_length=MAX_REASON_CHARS)

    @field_validator("task_id")
    @classmethod
    def _key(cls, v: str) -> str:
        return _allowed_key(v)

    @model_validator(mode="after")
    def _key_is_task(self) -> "LedgerEntry":
        # The key is the task ID, or the task ID and the channel (docs/several-calls.md):
        # any other pairing was not ours.
        if self.idempotency_key not in (self.task_id, f"{self.task_id}#{self.channel}"):
            raise ValueError("idempotency_key and task_id differ (nor is it task_id#channel)")
        # Entries written before channels existed have neither field; every later one has both.
        if (self.channel is None) != (self.approval is None):
            raise ValueError("channel and approval come together (or, in an older entry, neither)")
        return self


#: The most attempts one effect may have (each a human's ``settle --outcome not-published`` apart).
MAX_ATTEMPTS = 100
#: :attr:`EffectIntent.service` of a local effect: the tool's own function, not a service (a URL
#: always has ``://``); its intent is written right before the function is called
#: (``workflow.effect``), and its ``request_key`` is never sent anywhere.
LOCAL_EFFECT = "local"


class EffectIntent(BaseModel):
    """The write-ahead intent of one attempt of an effect through a service, durable before the
    request is sent (:mod:`workflow.external`): ``{"idempotency_key", "attempt", "task_id",
    "channel", "call_id", "action", "content_sha256", "request_key", "service", "deduplicates",
    "at"}``.

    ``idempotency_key`` is the ledger key of the call's effect (:func:`state.schema.effect_key`);
    ``attempt`` counts from 1 (a new attempt only after a :class:`Settlement` of the one before);
    ``request_key`` is the ``Idempotency-Key`` every try of this attempt sends (32 hex characters,
    random: unique per deployment); ``service`` the provider's URL (no credentials);
    ``deduplicates`` whether that provider honours the key; ``at`` ISO-8601 UTC. An intent without a
    ledger entry is an effect not confirmed: ``publishing`` when the provider deduplicates (or the
    attempt was settled not published), else ``in_doubt``.
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, defer_build=True)

    idempotency_key: str
    attempt: int = Field(ge=1, le=MAX_ATTEMPTS)
    task_id: str
    channel: str = Field(pattern=CHANNEL_FIELD)
    call_id: str = Field(max_length=200)
    action: str = Field(pattern=ACTION_FIELD)
    content_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    request_key: str = Field(pattern=r"^[0-9a-f]{32}$")
    service: str = Field(min_length=1, max_length=2000)
    deduplicates: bool
    at: str = Field(min_length=1, max_length=40)
    #: Until when a request of this attempt, sent by the command that wrote it, could still reach the
    #: provider and act (ISO-8601 UTC; :func:`workflow.external.window_s`); a later command that sends
    #: the attempt again extends it in the checkpoint (:class:`state.schema.EffectBinding`). None in
    #: an intent of an earlier version.
    window_ends: Optional[str] = Field(default=None, min_length=1, max_length=40)

    @field_validator("task_id")
    @classmethod
    def _key(cls, v: str) -> str:
        return _allowed_key(v)

    @model_validator(mode="after")
    def _key_is_task(self) -> "EffectIntent":
        if self.idempotency_key not in (self.task_id, f"{self.task_id}#{self.channel}"):
            raise ValueError("idempotency_key and task_id differ (nor is it task_id#channel)")
        return self


class Settlement(BaseModel):
    """A finding that one attempt of an effect did NOT happen, so the next command may send it once
    more: ``{"idempotency_key", "attempt", "task_id", "by", "at", "reason", "source"}``.

    ``source`` ``"human"``: a person looked at the provider (a settle with the outcome not
    published, :mod:`workflow.settlement`; ``by`` their name); ``"not_sent"``: the program saw that nothing reached the
    service (the connection was refused), ``by`` is ``"program"``. (A finding that it DID happen is
    the ledger entry itself, with ``settled_by``.)
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, defer_build=True)

    idempotency_key: str
    attempt: int = Field(ge=1, le=MAX_ATTEMPTS)
    task_id: str
    by: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    at: str = Field(min_length=1, max_length=40)
    reason: Optional[str] = Field(default=None, max_length=MAX_REASON_CHARS)
    source: Literal["human", "not_sent"]

    @field_validator("task_id")
    @classmethod
    def _key(cls, v: str) -> str:
        return _allowed_key(v)


def check_intent_for(intent: EffectIntent, *, task_id: str, content_sha256: str, action: str) -> None:
    """Raise :class:`Refused` unless ``intent`` is for ``task_id``'s ``action`` with
    ``content_sha256`` (an intent recorded for anything else is not this call's: fail closed)."""
    if (intent.task_id, intent.action, intent.content_sha256) != (task_id, action, content_sha256):
        raise Refused("ledger_mismatch", f"the intent of key {intent.idempotency_key!r} (attempt {intent.attempt}) "
                      f"is for task {intent.task_id!r}, action {intent.action!r}, content "
                      f"{intent.content_sha256[:12]}…, not this call's; refusing")


class RejectionRecord(BaseModel):
    """One human reject, bound to the task and the draft it rejected."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    task_id: str
    content_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    call_id: str = Field(min_length=1, max_length=200)
    by: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    at: str = Field(min_length=1, max_length=40)
    reason: Optional[str] = Field(default=None, max_length=MAX_REASON_CHARS)
    channel: Optional[str] = Field(default=None, pattern=CHANNEL_FIELD)

    @field_validator("task_id")
    @classmethod
    def _key(cls, v: str) -> str:
        return _allowed_key(v)


def check_ledger_key(key: str, task_id: str, channel: Optional[str]) -> None:
    """Raise :class:`Refused` unless ``key`` is ``task_id`` or ``<task_id>#<channel>`` (checked
    before any entry is read, so a key naming another channel is refused whatever is stored)."""
    if key not in (task_id, f"{task_id}#{channel}"):
        raise Refused("ledger_mismatch", f"ledger key {key!r} names neither task {task_id!r} nor its channel "
                      f"{channel!r}; refusing")


def check_same_entry(entry: LedgerEntry, *, key: str, task_id: str, content_sha256: str,
                     action: str) -> None:
    """Raise :class:`Refused` unless ``entry`` is for ``task_id`` with ``content_sha256``, a call
    of ``action`` (the task's)."""
    if entry.task_id != task_id:
        raise Refused(
            "ledger_mismatch", f"ledger already holds key {key!r} for task {entry.task_id!r}, not {task_id!r}"
        )
    if entry.action != action:
        raise Refused("ledger_mismatch", f"ledger already holds key {key!r} for action {entry.action!r}, "
                      f"not {action!r} (key/action mismatch); refusing")
    if entry.content_sha256 != content_sha256:
        raise Refused(
            "ledger_mismatch", f"ledger already holds key {key!r} with different content "
            f"(sha256 {entry.content_sha256[:12]}… vs {content_sha256[:12]}…); refusing"
        )
