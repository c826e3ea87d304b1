"""The checkpoint envelope: our own, versioned record around the SDK's serialized RunState.

The SDK's ``RunState`` (``result.to_state().to_string()``) knows how to resume a run, but not which
task it belongs to, which idempotency key guards the side effect, what a human decided, or whether
the file was edited. The envelope below carries those facts. It is validated with pydantic on every
load: an unknown ``schema_version`` or any invalid field is refused (fail closed).

The rules: a checkpoint without a schema version cannot be read safely after the next deploy
(没有 schema／程序版本的 checkpoint，隔天部署新程序后可能无法安全读取), and the state never holds API keys
or passwords.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any, Literal, Optional, Union
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: Our envelope's schema version. Bump it whenever a field changes meaning or is added/removed, and
#: either migrate older files explicitly (:data:`MIGRATIONS`) or refuse them by name (see
#: ``state.files.store``). What each version added: 1, the envelope; 2, ``channels`` and, in every
#: decision, ``channel``, ``always``, ``source`` (several calls per task, sticky decisions) and
#: ``edits`` (approve with edits); 3, ``action`` is any tool name (:data:`ACTION_FIELD`), the
#: application's data rather than one fixed name, and ``edits`` holds any content (:class:`Edits`).
SCHEMA_VERSION = 3
#: The largest checkpoint file read, in bytes (a bigger one is refused, never parsed).
MAX_CHECKPOINT_BYTES = 8 * 1024 * 1024

#: Channel names (``start --channel``): 1-32 of ``a-z0-9-``. A task has 1 to :data:`MAX_CHANNELS`.
CHANNEL_PATTERN = re.compile(r"^[a-z0-9-]{1,32}\Z")
#: The same rule for pydantic fields (its regex engine has no ``\Z``; ``$`` there is the end).
CHANNEL_FIELD = r"^[a-z0-9-]{1,32}$"
MAX_CHANNELS = 8
#: The publisher's channel when its command line names none (``run.py start`` without
#: ``--channel``), and the channel of every schema_version 1 task.
DEFAULT_CHANNEL = "blog"
#: The one channel of a task started through the library without ``channels``: a task with one
#: effect needs no channel named (its ledger key is the task ID alone, :func:`effect_key`).
UNNAMED_CHANNEL = "default"
#: The private preview channel: the approval rule (``tools.publish.needs_publish_approval``) lets
#: its calls run without a human; every other channel is public and needs an approval.
PREVIEW_CHANNEL = "preview"

#: Task IDs and idempotency keys: 1–100 characters of ``A-Za-z0-9._:-``, starting with a letter or a
#: digit (so ``.``/``..`` and hidden names are impossible).
KEY_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,99}\Z")

#: Call IDs, as a model chooses them: 1-:data:`MAX_CALL_ID_CHARS` of ``A-Za-z0-9_.:-``. OpenAI's
#: Responses and Chat Completions APIs send ``call_`` and 24 letters and digits (item IDs ``fc_…``),
#: other providers e.g. ``toolu_…`` or ``chatcmpl-tool-…``; every one is a plain word. A call ID is
#: printed and pasted into commands (``resume --call``), so one that is not plain (a space, a ``$``,
#: a newline, an escape sequence) is refused where it enters: :func:`call_id_problem`.
MAX_CALL_ID_CHARS = 200
CALL_ID_PATTERN = re.compile(rf"^[A-Za-z0-9_.:-]{{1,{MAX_CALL_ID_CHARS}}}\Z")

#: A task's action: the name of the agent's tool it gates, one declared through the effect gate
#: (``workflow.effect``), a plain word like a call ID (the SDK's tool names are ``[A-Za-z0-9_-]``).
#: Stored so a checkpoint whose action is not the agent's tool is refused rather than resumed
#: ("key/action mismatch → stop"). For pydantic fields (no ``\Z`` there).
ACTION_FIELD = r"^[A-Za-z0-9_.:-]{1,200}$"

#: Bounds on what a user may submit (characters).
MAX_TITLE_CHARS = 200
MAX_DRAFT_CHARS = 20_000
MAX_REASON_CHARS = 1_000
#: The longest ``Application.command`` a checkpoint records (characters, one line).
MAX_COMMAND_CHARS = 200
MAX_NAME_CHARS = 100
#: Upper bound of ``Budget.max_turns`` (and of ``--max-turns``).
MAX_TURNS_LIMIT = 1000

Status = Literal["waiting_for_approval", "completed", "cancelled", "budget_exceeded", "expired", "failed"]
DecisionKind = Literal["approved", "rejected"]

_SHA256 = re.compile(r"^[0-9a-f]{64}\Z")
#: C0 and C1 control characters and DEL; multi-line text keeps tab and newline.
_CONTROL_ONE_LINE = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
#: Bidirectional embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069): they reorder
#: what a terminal shows, so a reviewer could read something other than what is stored
#: ("Trojan Source", CVE-2021-42574).
_BIDI = re.compile(r"[\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]")
#: Invisible characters that hide text from a reviewer: zero-width space, word joiner and the
#: invisible operators (U+2060-U+2064), byte order mark. (ZWJ/ZWNJ stay allowed: emoji and scripts
#: such as Persian need them.)
_INVISIBLE = re.compile(r"[\u200b\u2060-\u2064\ufeff]")
#: Lone surrogates: what Python makes of command-line bytes that are not valid UTF-8.
_SURROGATE = re.compile(r"[\ud800-\udfff]")


#: Device names Windows reserves in every folder, with any extension and in any case: a file named
#: ``con.txt--….json`` or ``nul.json`` opens the console or the null device on older Windows
#: instead of a file. A key whose part before the first ``.`` is one of these is refused.
#: (The superscript forms ``COM¹``… are outside :data:`KEY_PATTERN` anyway.)
WINDOWS_RESERVED_NAMES = frozenset(
    {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(10)), *(f"LPT{i}" for i in range(10))}
)
#: Why a key outside :data:`KEY_PATTERN` is refused (the usage error and record validators say it).
KEY_RULE = "use 1-100 of A-Za-z0-9._:- starting with a letter or digit"


def key_problem(value: object) -> str | None:
    """Why ``value`` is not an allowed task ID / idempotency key, as one line; None if it is allowed.

    The one rule for keys (the CLI's ``--key``/``--task`` and every record validator use it through
    :func:`valid_key`): a ``str`` matching :data:`KEY_PATTERN` whose part before the first ``.``,
    compared case-insensitively, is not a Windows device name (:data:`WINDOWS_RESERVED_NAMES`):
    ``con``, ``CON.txt``, ``lpt9.x`` are refused; ``console``, ``com10``, ``con-1`` are allowed.
    """
    if not isinstance(value, str) or not KEY_PATTERN.match(value):
        return KEY_RULE
    stem = value.split(".", 1)[0]
    if stem.upper() in WINDOWS_RESERVED_NAMES:
        return (f"{stem!r} is a reserved device name on Windows (CON, PRN, AUX, NUL, COM0-9, "
                "LPT0-9, with any extension)")
    return None


def call_id_problem(value: object) -> str | None:
    """Why ``value`` is not an allowed call ID (:data:`CALL_ID_PATTERN`), as one line with the
    value shown escaped and cut to 60 characters; None if it is allowed."""
    if isinstance(value, str) and CALL_ID_PATTERN.match(value):
        return None
    shown = ascii(value[:60]) + ("…" if len(value) > 60 else "") if isinstance(value, str) else repr(value)
    length = f" ({len(value)} characters)" if isinstance(value, str) else ""
    return (f"call ID {shown}{length} is not a plain call ID (1-{MAX_CALL_ID_CHARS} of "
            "A-Za-z0-9_.:-)")


def valid_key(value: str) -> bool:
    """Return True if ``value`` is an allowed task ID / idempotency key (see :func:`key_problem`)."""
    return key_problem(value) is None


def valid_channel(value: object) -> bool:
    """True if ``value`` is a channel name: a ``str`` of 1-32 of ``a-z0-9-``."""
    return isinstance(value, str) and bool(CHANNEL_PATTERN.match(value))


def effect_key(task_id: str, channel: str, channels: list[str]) -> str:
    """The idempotency key of the effect of ``task_id`` on ``channel``: the task key itself for a
    task with one channel (the one-channel contract), ``<task key>#<channel>`` for a task with
    several. Raises ``ValueError`` if ``channel`` is not one of ``channels``."""
    if channel not in channels:
        raise ValueError(f"channel {channel!r} is not one of the task's channels")
    return task_id if len(channels) == 1 else f"{task_id}#{channel}"


def channel_scope(channel: str, channels: list[str]) -> str | None:
    """The ``channel`` argument the ledger and the rejection records take for a call on
    ``channel``: None for a one-channel task (its records are keyed by the task key alone, as
    before channels existed), else ``channel``."""
    return None if len(channels) == 1 else channel


def call_scope(channel: str, call_id: str) -> str:
    """The ``channel`` argument the rejection records take for a reject of one call
    (``call_id`` on ``channel``) in a task whose model proposes the arguments
    (:meth:`Checkpoint.proposed`): a reject there answers that call only, so each call has its own
    record. ``r`` and 31 hex characters of SHA-256 of the channel and the call ID: a valid channel
    name, since a call ID is the model's text."""
    return "r" + sha256_hex(f"{channel}\n{call_id}".encode())[:31]


def rejection_scope(channel: str, call_id: str, channels: list[str], proposed: bool) -> str | None:
    """The ``channel`` argument of the rejection record of a reject of ``call_id`` on ``channel``
    in a task with ``channels``: the call's own (:func:`call_scope`) in a task whose model proposes
    the arguments (``proposed``, :meth:`Checkpoint.proposed`), else the channel's
    (:func:`channel_scope`)."""
    return call_scope(channel, call_id) if proposed else channel_scope(channel, channels)


def valid_effect_key(value: object) -> bool:
    """True if ``value`` is an allowed key or ``<allowed key>#<channel>`` (:func:`effect_key`)."""
    if not isinstance(value, str):
        return False
    task_id, sep, channel = value.partition("#")
    return valid_key(task_id) and (not sep or valid_channel(channel))


def check_text(value: str, *, what: str, limit: int, single_line: bool) -> str:
    """Return ``value`` if it is within ``limit`` characters, valid UTF-8 text and free of control
    characters (C0, DEL, C1 U+0080-U+009F) and bidirectional overrides/isolates.

    ``single_line`` also forbids newlines and tabs. Raises ``ValueError`` with a one-line message.
    """
    if _SURROGATE.search(value):  # first: such a value cannot even be printed in a message
        raise ValueError(f"{what} is not valid UTF-8")
    if len(value) > limit:
        raise ValueError(f"{what} is {len(value)} characters; the limit is {limit}")
    if (_CONTROL_ONE_LINE if single_line else _CONTROL).search(value):
        raise ValueError(f"{what} contains control characters")
    bidi = _BIDI.search(value)
    if bidi:
        raise ValueError(f"{what} contains a bidirectional text control (U+{ord(bidi.group()):04X}), "
                         "which can disguise what a reviewer sees")
    hidden = _INVISIBLE.search(value)
    if hidden:
        raise ValueError(f"{what} contains an invisible character (U+{ord(hidden.group()):04X}), "
                         "which can hide text from a reviewer")
    return value


def validation_message(exc: Any) -> str:
    """``"<field.path>: <message>"`` for the first error of a pydantic ``ValidationError``."""
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"]) or "(root)"
    return f"{loc}: {err['msg']}"


def canonical_json(value: Any) -> bytes:
    """Canonical UTF-8 JSON (sorted keys, no spaces) used for fingerprints and the MAC."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8"
    )


def sha256_hex(data: bytes) -> str:
    """Hex SHA-256 of ``data`` (64 lowercase hex characters)."""
    return hashlib.sha256(data).hexdigest()


#: What a content value may be (an argument of the gated call, but ``channel``): a JSON string,
#: number or boolean. A number keeps its type: ``1999`` and ``"1999"`` are different content.
CONTENT_VALUE_RULE = "each value a JSON string, number or boolean"


#: The largest content a task may carry, in bytes of its canonical JSON: the RunState repeats it
#: several times (the input, the call, its output), and a checkpoint over
#: :data:`MAX_CHECKPOINT_BYTES` could be written by no store and read by none.
MAX_CONTENT_BYTES = 256 * 1024


def valid_content_value(value: Any) -> bool:
    """True for a ``str``, ``bool``, ``int`` or finite ``float`` (:data:`CONTENT_VALUE_RULE`)."""
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, (str, bool, int))


#: The argument that names where a call's effect goes (optional; a task with one channel needs none).
CHANNEL_ARG = "channel"


def valid_content(value: Any) -> bool:
    """True if ``value`` is content: a ``dict`` of ``str`` arguments, none of them
    :data:`CHANNEL_ARG`, each value a :func:`valid_content_value` (the one rule of a task's
    content and of a reviewer's edits)."""
    return isinstance(value, dict) and CHANNEL_ARG not in value and all(
        isinstance(k, str) and valid_content_value(v) for k, v in value.items())


def content_of(arguments: dict[str, Any]) -> dict[str, Any]:
    """The content a call carries: its arguments minus :data:`CHANNEL_ARG`."""
    return {k: v for k, v in arguments.items() if k != CHANNEL_ARG}


def content_fingerprint(content: dict[str, Any]) -> str:
    """Fingerprint of a task's content (``{argument: text}``, what each call of its action must
    carry but ``channel``): SHA-256 of its canonical JSON (:func:`canonical_json`, keys sorted).

    The same fingerprint is computed from the model's call arguments and by ``start`` from the
    user's input; a difference means the call is not the content that was approved.
    """
    return sha256_hex(canonical_json(content))


def input_fingerprint(value: Any) -> Optional[str]:
    """Fingerprint of the input a task was started with (what ``start`` gives ``Runner.run``: a
    string or a list of input items; items that are pydantic models count as their JSON):
    SHA-256 of its canonical JSON (:func:`canonical_json`; a NaN or an infinity as Python writes
    it). None when it has no JSON form (an object of another kind, which the SDK cannot save
    either, or one nested too deep to write): a task saved with none is not compared by its input
    on a second ``start``, as one saved before inputs were fingerprinted; a second ``start`` with
    such an input differs from any task that has one."""
    def plain(item: Any) -> Any:
        if isinstance(item, BaseModel):
            return item.model_dump(mode="json")
        raise TypeError(type(item).__name__)

    try:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=plain)
    except (TypeError, ValueError, RecursionError):
        return None
    return sha256_hex(text.encode("utf-8", "surrogatepass"))


#: The ``content_sha256`` of a task started without content (:meth:`Checkpoint.proposed`): the
#: model proposes each call's arguments and a reviewer approves each call as it was shown. It is the
#: SHA-256 of a sentence, not of canonical JSON, so no call's content has it: a program that does
#: not know this value refuses every call of such a task.
PROPOSED = sha256_hex(b"proposed by the model: no content given at start")


def content_sha256(title: str, body: str) -> str:
    """Fingerprint of a draft: :func:`content_fingerprint` of ``{"title": title, "body": body}``
    (SHA-256 of the canonical JSON ``{"body": body, "title": title}``)."""
    return content_fingerprint({"title": title, "body": body})


def arguments_sha256(arguments: dict[str, Any]) -> str:
    """Fingerprint of a pending call's parsed JSON arguments (what the reviewer saw)."""
    return sha256_hex(canonical_json(arguments))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class PendingCall(_Strict):
    """One tool call waiting for a human: ``{"call_id", "tool", "arguments": {...}}``.

    Copied from ``result.interruptions`` (each a ``ToolApprovalItem``) when the checkpoint is saved,
    so read-only commands can show it without importing the SDK.
    """

    call_id: str = Field(min_length=1, max_length=200)
    tool: str = Field(min_length=1, max_length=200)
    arguments: dict[str, Any]


class Edits(_Strict):
    """An approval with edits (schema_version 3: of any content; see workflow/edits.py): the
    reviewer approved ``content`` instead of what the call asked, ``original`` (each the call's
    arguments but ``channel``, ``{argument: text}``, at most :data:`MAX_DRAFT_CHARS` a value);
    ``edited_sha256`` and ``original_sha256`` are their :func:`content_fingerprint`. A version 2
    record (``title``, ``body``, ``original_title``, ``original_body``) is migrated to this shape."""

    content: dict[str, Union[str, bool, int, float]] = Field(min_length=1)
    original: dict[str, Union[str, bool, int, float]] = Field(min_length=1)
    original_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    edited_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")

    @field_validator("content", "original")
    @classmethod
    def _texts(cls, v: dict[str, Any]) -> dict[str, Any]:
        if not valid_content(v) or any(isinstance(x, str) and len(x) > MAX_DRAFT_CHARS for x in v.values()):
            raise ValueError(f"must be arguments but channel, {CONTENT_VALUE_RULE}, a text at most "
                             f"{MAX_DRAFT_CHARS} characters")
        return v

    def flat(self) -> dict[str, str]:
        """The record as one level, for output: each edited argument under its name, each original
        one as ``original_<name>``, then ``original_sha256`` and ``edited_sha256`` (for a draft:
        ``title``, ``body``, ``original_title``, ``original_body``, as version 2 wrote it)."""
        return {**self.content, **{f"original_{k}": v for k, v in self.original.items()},
                "original_sha256": self.original_sha256, "edited_sha256": self.edited_sha256}


class Decision(_Strict):
    """A human's decision, recorded by our code path before the run resumes.

    ``call_id``, ``tool`` and ``arguments_sha256`` bind the decision to the exact pending call the
    reviewer saw; ``at`` is an ISO-8601 UTC timestamp; ``channel``, ``always`` and ``source``
    (schema_version 2) say where the call publishes and whether a sticky rule decided it.
    ``edits`` (schema_version 2; an approval with edits, shown as ``approved_with_edits``): the
    call is answered with a message naming the edited draft, never run; the model's next call on
    ``channel`` runs only if it carries exactly ``edits.edited_sha256``
    (:meth:`Checkpoint.expected_sha256`). Written in every decision (null: none); a file
    without it is refused like any other missing field.
    """

    decision: DecisionKind
    by: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    at: str
    reason: Optional[str] = Field(default=None, max_length=MAX_REASON_CHARS)
    call_id: str = Field(min_length=1, max_length=200)
    tool: str = Field(min_length=1, max_length=200)
    arguments_sha256: str
    #: The channel the call publishes to (one of the task's ``channels``).
    channel: str = Field(pattern=CHANNEL_FIELD)
    #: True: the human asked for the SDK's sticky rule (``always_approve``/``always_reject``).
    always: bool
    #: ``human``: this call was decided by a person; ``sticky``: by the sticky rule of an earlier
    #: ``always`` decision (``by`` is the person who gave that one).
    source: Literal["human", "sticky"]
    #: An approval with edits: what the reviewer approved instead (None: as the call asked). The
    #: default serves code that builds a decision; :mod:`state.files.store` requires it in a file.
    edits: Optional[Edits] = None
    #: In a task whose model proposes the arguments (:meth:`Checkpoint.proposed`): for an approval,
    #: :func:`content_fingerprint` of the call's arguments but ``channel`` as the reviewer saw them,
    #: what its effect must carry. None otherwise; absent in a file written before it existed.
    content_sha256: Optional[str] = None

    @field_validator("arguments_sha256", "content_sha256")
    @classmethod
    def _hex(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not _SHA256.match(v):
            raise ValueError("must be 64 lowercase hex characters")
        return v


class HistoryEvent(_Strict):
    """One line of the task's trajectory: ``{"at", "event", "revision", "detail"}``."""

    at: str
    event: Literal[
        "started", "decision_recorded", "resumed", "interrupted", "completed", "cancelled",
        "budget_exceeded",
        "expired", "approval_recorded", "effect_bound", "failed",
    ]
    revision: int = Field(ge=1)
    detail: dict[str, Any] = Field(default_factory=dict)


class AgentDefinition(_Strict):
    """What the agent was when the RunState was saved (to detect drift before resuming).

    ``tools`` maps tool name → ``{"position": int, "description_sha256": hex, "schema_sha256": hex,
    "needs_approval": bool | "callable:<module.qualname>" | "n/a", "function": "module.qualname"}``,
    in the agent's order (``workflow.agent_check.describe``). Older files hold only ``schema_sha256`` and
    ``needs_approval``; ``workflow.agent_check.drift`` refuses them by name.
    """

    name: str
    instructions_sha256: str
    tools: dict[str, dict[str, Any]]


#: Default budget for a whole task (start and every resume), small on purpose. A typical
#: run is 2 turns and under 1,000 tokens (see docs/real-model.md).
DEFAULT_MAX_TURNS = 6
DEFAULT_MAX_TOKENS = 20_000
DEFAULT_MAX_COST_USD = 0.05
#: The smallest output cap the OpenAI Responses API accepts (``max_output_tokens`` >= 16): a budget
#: with less left cannot pay for one more call.
MIN_OUTPUT_TOKENS = 16

ModelApi = Literal["offline", "responses", "chat_completions"]


def check_base_url(url: str) -> str:
    """Return ``url`` if it is an http(s) URL without credentials, query or fragment.

    Raises ``ValueError`` (one line) otherwise: the base URL is stored in the checkpoint, and a
    secret must never be (``https://user:token@host`` or ``?api_key=`` would put one there).
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"base URL {url[:100]!r} is not an http(s) URL")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ValueError("the base URL must not carry credentials, a query or a fragment")
    return url


class ModelSpec(_Strict):
    """Which model drives the task: ``{"name", "api", "base_url"}``. Never holds the API key.

    ``api`` is ``offline`` (the scripted model, ``name`` ``"offline"``), ``responses`` or
    ``chat_completions`` (the SDK's ``OpenAIResponsesModel`` / ``OpenAIChatCompletionsModel``);
    ``base_url`` is the effective API base URL of a real model, without credentials or query.
    """

    name: str = Field(default="offline", min_length=1, max_length=200)
    api: ModelApi = "offline"
    base_url: Optional[str] = Field(default=None, max_length=500)

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: Optional[str]) -> Optional[str]:
        return None if v is None else check_base_url(v)


class Budget(_Strict):
    """The budget of a whole task, across start and every resume.

    ``max_turns`` (SDK turns), ``max_tokens`` (input + output tokens), ``max_cost_usd`` (US dollars;
    null: no cost budget, e.g. a model ``genai-prices`` cannot price), and an optional explicit
    price ``price_in_per_mtok`` / ``price_out_per_mtok`` (USD per million tokens) that replaces the
    ``genai-prices`` lookup.
    """

    max_turns: int = Field(default=DEFAULT_MAX_TURNS, ge=1, le=MAX_TURNS_LIMIT)
    max_tokens: int = Field(default=DEFAULT_MAX_TOKENS, ge=MIN_OUTPUT_TOKENS)
    max_cost_usd: Optional[float] = Field(default=DEFAULT_MAX_COST_USD, gt=0)
    price_in_per_mtok: Optional[float] = Field(default=None, ge=0)
    price_out_per_mtok: Optional[float] = Field(default=None, ge=0)


class Spend(_Strict):
    """What the task has spent so far, read from the saved RunState (the SDK's ``context.usage``
    and ``current_turn``): turns, requests, tokens, and ``cost_usd`` (null if it cannot be priced)."""

    turns: int = Field(default=0, ge=0)
    requests: int = Field(default=0, ge=0)
    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)
    total_tokens: int = Field(default=0, ge=0)
    cost_usd: Optional[float] = Field(default=0.0, ge=0)


class ApprovalRule(_Strict):
    """What one channel's calls need (:mod:`state.policy`): ``approvals`` distinct reviewers
    (1-10); ``roles``: a reviewer needs one of these to approve or reject (None: any);
    ``requester_may_approve``: False, the task's requester cannot approve it."""

    approvals: int = Field(1, ge=1, le=10)
    roles: Optional[list[str]] = Field(None, min_length=1, max_length=16)
    requester_may_approve: bool = True

    def needs_team(self) -> bool:
        """True if this rule means anything only with authenticated reviewers (more than one
        approval, roles, or the requester kept out)."""
        return self.approvals > 1 or self.roles is not None or not self.requester_may_approve

    def describe(self) -> str:
        """e.g. ``2 approvals by editor, not the requester``."""
        words = f"{self.approvals} approval{'s' if self.approvals != 1 else ''}"
        if self.roles:
            words += " by " + " or ".join(self.roles)
        if not self.requester_may_approve:
            words += ", not the requester"
        return words


class Team(_Strict):
    """A task started in team mode or under a policy (``start``): ``requested_by`` (the
    authenticated requester, or the name given in single-user mode; None: nobody named),
    ``policy_version`` (the version of the store's policy in force at start, :mod:`state.policy`;
    0: none was set; None: a task started before the policy moved into the store, when it was a
    file a process's environment named), ``policy_sha256`` (:func:`state.policy.fingerprint` of
    that policy; None: no policy) and ``rules`` (channel → its :class:`ApprovalRule`, for each of
    the task's channels: the task is decided under these). ``authenticated``: True if reviewers
    were registered at start (every decision of the task needs a reviewer's token, even if the
    reviewers are removed later)."""

    requested_by: Optional[str] = Field(max_length=MAX_NAME_CHARS)
    policy_sha256: Optional[str] = Field(pattern=r"^[0-9a-f]{64}$")
    rules: dict[str, ApprovalRule]
    authenticated: bool
    policy_version: Optional[int] = Field(None, ge=0, le=10**9)


class Approval(_Strict):
    """One reviewer's approval of one pending call, counted toward its quorum (``team``): ``by``,
    ``at`` (ISO-8601 UTC), the call (``call_id``, ``channel``, ``arguments_sha256``), the
    ``revision`` it was recorded in, and ``reviewer_added_at``: the ``added_at`` of the registration
    ``by`` approved under (a task started in team mode; None otherwise, and in approvals recorded
    before it was kept). A name removed and registered again is another registration: its old
    approvals count no more (:func:`workflow.team.counts`)."""

    call_id: str = Field(min_length=1, max_length=200)
    channel: str = Field(pattern=CHANNEL_FIELD)
    arguments_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    by: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    at: str
    revision: int = Field(ge=1)
    reviewer_added_at: Optional[str] = None


class EffectBinding(_Strict):
    """One attempt of an effect through a service, bound into the signed checkpoint before any
    request of it is sent (:mod:`workflow.external`): ``idempotency_key`` (the ledger key of the
    call's effect), ``attempt`` (from 1), ``request_key`` (the ``Idempotency-Key`` its requests
    carry, 32 hex characters), ``sent_at`` (when the latest command began sending it) and
    ``window_ends`` (until when a request of it could still reach the provider and act: the
    latest command's tries, each given up after its timeout, plus the time the provider is allowed
    to act on a request it received; both ISO-8601 UTC, on the wall clock). The intent record
    written before it holds the same attempt and key: an intent missing for a bound attempt was
    deleted, and the call is never sent again. A later command that sends the attempt again never
    shortens ``window_ends``."""

    idempotency_key: str = Field(min_length=1, max_length=300)
    attempt: int = Field(ge=1, le=100)
    request_key: str = Field(pattern=r"^[0-9a-f]{32}$")
    sent_at: str = Field(min_length=1, max_length=40)
    window_ends: str = Field(min_length=1, max_length=40)


class Checkpoint(_Strict):
    """The checkpoint envelope, one JSON file per revision of a task (``tasks/<name>.r<N>.json`` in
    the state dir; the highest N is the checkpoint, ``state.files.store``).

    Fields: our ``schema_version``; ``task_id`` (== ``idempotency_key``); ``action`` (the gated
    tool's name); ``title`` (the task's label) and ``content_sha256`` (:func:`content_fingerprint`
    of its content); ``channels``; ``status``; the current ``decision`` (or null);
    ``decisions``: every decision ever recorded (their call_ids are the only approvals a stored
    RunState may carry); ``pending`` calls; ``final_output``; ``revision`` (1, 2, … one per write);
    ``sdk_version`` (``openai-agents``) and ``run_state_schema_version`` (the RunState's
    ``$schemaVersion``); ``agent`` definition fingerprint; ``run_state`` (``RunState.to_string()``,
    verbatim); ``history``; ``created_at``/``updated_at`` (ISO-8601 UTC); ``model``
    (:class:`ModelSpec`), ``budget`` (:class:`Budget`) and ``spend`` (:class:`Spend`);
    ``expires_at`` (null when nothing is pending) and ``approval_ttl_s`` (approval expiry). All of
    these are required: a file missing one is refused, never filled in with a default.
    ``state_id`` (the state dir it belongs to, see :mod:`state.state_id`; null in
    files written before it); ``mac`` (HMAC-SHA256, see :mod:`state.integrity`); ``service``
    (the URL of the service the effect goes through; null or absent: the local ledger).
    """

    schema_version: Literal[3]
    task_id: str
    idempotency_key: str
    #: The name of the tool whose calls this task gates (:data:`ACTION_FIELD`).
    action: str = Field(pattern=ACTION_FIELD)
    title: str = Field(max_length=MAX_TITLE_CHARS)
    content_sha256: str
    #: The channels the draft goes to (``start --channel``), each one effect with its own key.
    channels: list[str] = Field(min_length=1, max_length=MAX_CHANNELS)
    status: Status
    decision: Optional[Decision]
    decisions: list[Decision]
    pending: list[PendingCall]
    final_output: Optional[str]
    revision: int = Field(ge=1)
    sdk_version: str = Field(min_length=1, max_length=50)
    run_state_schema_version: str = Field(min_length=1, max_length=20)
    agent: AgentDefinition
    run_state: str = Field(min_length=2)
    history: list[HistoryEvent]
    created_at: str
    updated_at: str
    #: When the pending approval stops being valid (ISO-8601 UTC); null: no request is pending.
    #: Required, with no default: a file without it is refused, so removing the field can never
    #: remove a deadline (tests/test_fuzz_state.py found that when it had a default).
    expires_at: Optional[str]
    #: How long each new approval request stays valid, seconds (``start --expires-in``).
    approval_ttl_s: int = Field(ge=1)
    mac: str
    # Required, no defaults: a file without them is refused (a dropped budget must not come back
    # as the default one; tests/test_fuzz_state.py).
    model: ModelSpec
    budget: Budget
    spend: Spend
    #: The ID of the state dir the checkpoint belongs to (``state.id``, see ``state.state_id``);
    #: None: written before the field existed (legacy, accepted only as ``state.state_id`` says).
    state_id: Optional[str] = Field(default=None, pattern=r"^[0-9a-f]{32}$")
    #: The URL of the service the task's effect goes through (``HITL_PUBLISH_URL`` at start, no
    #: credentials: docs/external-effects.md); None: the local ledger entry is the effect. A resume
    #: under another service is refused before any request.
    service: Optional[str] = Field(default=None, min_length=1, max_length=2000)
    #: Team mode and the policy the task is decided under (:class:`Team`); None or absent: a task
    #: started with no reviewer registered and no policy (anyone may decide, one approval).
    team: Optional[Team] = None
    #: The approvals counted so far toward each pending call's quorum (:class:`Approval`); absent:
    #: none (a task without a team).
    approvals: list[Approval] = Field(default_factory=list)
    #: The latest attempt of each effect through a service, bound before its request
    #: (:class:`EffectBinding`); absent: none begun (a local-ledger task, or nothing sent yet).
    effects: list[EffectBinding] = Field(default_factory=list, max_length=MAX_CHANNELS)
    #: Why a task ended ``failed`` (no effect can have happened: the model did not carry out what
    #: was approved, or a person ended a task whose effect provably never ran); absent otherwise.
    failure: Optional[str] = Field(default=None, max_length=MAX_REASON_CHARS)
    #: How a person runs the task's application (``Application.command``, e.g. ``python pay.py``),
    #: recorded at start so that a command line with no application code (``python -m workflow
    #: doctor``) names it in its next steps; absent: the application gave none.
    command: Optional[str] = Field(default=None, min_length=1, max_length=MAX_COMMAND_CHARS)
    #: In a task whose model proposes the arguments (:meth:`proposed`), :func:`input_fingerprint`
    #: of the input it was started with, all its model is told: a second ``start`` of the key with
    #: another input is refused; absent: any other task, one saved before it was recorded, or an
    #: input with no JSON form.
    input_sha256: Optional[str] = Field(default=None, pattern=r"^[0-9a-f]{64}$")

    @field_validator("command")
    @classmethod
    def _command(cls, v: Optional[str]) -> Optional[str]:
        return None if v is None else check_text(v, what="command", limit=MAX_COMMAND_CHARS, single_line=True)

    @field_validator("task_id", "idempotency_key")
    @classmethod
    def _key(cls, v: str) -> str:
        problem = key_problem(v)
        if problem is not None:
            raise ValueError(f"not an allowed key ({problem})")
        return v

    @field_validator("content_sha256")
    @classmethod
    def _sha(cls, v: str) -> str:
        if not _SHA256.match(v):
            raise ValueError("must be 64 lowercase hex characters")
        return v

    @field_validator("channels")
    @classmethod
    def _channels(cls, v: list[str]) -> list[str]:
        if not all(valid_channel(c) for c in v) or len(set(v)) != len(v):
            raise ValueError("must be distinct channel names (1-32 of a-z0-9-)")
        return v

    def body(self) -> dict[str, Any]:
        """The envelope as a JSON-ready dict, without ``mac``.

        ``Store.save`` signs exactly this; ``Store.load_path`` verifies the MAC over the file's own
        parsed fields (before validation), so adding or removing a field breaks the MAC.
        """
        data = self.model_dump(mode="json")
        data.pop("mac")
        return data

    def binding(self, key: str) -> Optional[EffectBinding]:
        """The :class:`EffectBinding` of effect key ``key`` (its latest attempt bound), or None."""
        return next((b for b in self.effects if b.idempotency_key == key), None)

    def edited_on(self, channel: str) -> Optional[Decision]:
        """The approval with edits that governs ``channel``: the latest decision recorded for a
        call on ``channel``, if it is one (a later decision on the channel ends it); else None."""
        on = [d for d in self.decisions if d.channel == channel]
        return on[-1] if on and on[-1].edits is not None else None

    def proposed(self) -> bool:
        """True if the task was started without content (``content_sha256`` is :data:`PROPOSED`):
        the reviewer approves each call as the model proposed it."""
        return self.content_sha256 == PROPOSED

    def expected_sha256(self, channel: str, call_id: Optional[str] = None) -> str:
        """The :func:`content_sha256` a call on ``channel`` must carry: the edited draft of the
        approval with edits given on that channel (the latest one, even once a later decision
        approved the call carrying it), else the draft the task was started with
        (``content_sha256``). Per channel: an edit of one call never changes another's. In a task
        whose model proposes the arguments (:meth:`proposed`), the content of the latest approval
        on that channel (as shown, or edited); with none, the content of the pending call
        ``call_id`` (what its effect would carry: the evidence a ledger entry is judged against),
        else :data:`PROPOSED` (no call is approved yet)."""
        for d in reversed(self.decisions):
            if d.channel == channel and d.edits is not None:
                return d.edits.edited_sha256
            if self.proposed() and d.channel == channel and d.decision == "approved":
                return d.content_sha256 or PROPOSED  # none recorded: nothing can match
        waiting = [p for p in self.pending if p.call_id == call_id] if self.proposed() else []
        if waiting:
            return content_fingerprint(content_of(waiting[0].arguments))
        return self.content_sha256


def _v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    """schema_version 1 → 2: a v1 task had one channel, :data:`DEFAULT_CHANNEL` (its calls carry
    no ``channel``, which means the task's only one); every v1 decision was a person's, per call,
    and approved or rejected the call as it was (no edits)."""
    def decision(d: Any) -> Any:
        if not isinstance(d, dict):
            return d  # validation refuses it by name
        return {**d, "channel": DEFAULT_CHANNEL, "always": False, "source": "human", "edits": None}

    out = {**data, "schema_version": 2, "channels": [DEFAULT_CHANNEL],
           "decision": decision(data.get("decision"))}
    if isinstance(data.get("decisions"), list):
        out["decisions"] = [decision(d) for d in data["decisions"]]
    return out


def _v2_to_v3(data: dict[str, Any]) -> dict[str, Any]:
    """schema_version 2 → 3: a v2 ``action`` was always ``publish_draft``, which version 3 reads as
    it is (any tool name); a v2 approval with edits (``title``, ``body``, ``original_title``,
    ``original_body`` and the two fingerprints, which stay) becomes ``content`` / ``original``
    (:class:`Edits`)."""
    def decision(d: Any) -> Any:
        edits = d.get("edits") if isinstance(d, dict) else None
        if not isinstance(edits, dict) or set(edits) != {"title", "body", "original_title", "original_body",
                                                          "original_sha256", "edited_sha256"}:
            return d  # none, or not a v2 record: validation refuses it by name
        return {**d, "edits": {
            "content": {"title": edits["title"], "body": edits["body"]},
            "original": {"title": edits["original_title"], "body": edits["original_body"]},
            "original_sha256": edits["original_sha256"], "edited_sha256": edits["edited_sha256"]}}

    out = {**data, "schema_version": 3, "decision": decision(data.get("decision"))}
    if isinstance(data.get("decisions"), list):
        out["decisions"] = [decision(d) for d in data["decisions"]]
    return out


#: Older envelope versions this program reads: version → the function turning a parsed file of
#: that version into the next one. ``state.files.store`` verifies the MAC over the file as written,
#: then applies these in order, then validates; the next write saves the current version.
MIGRATIONS = {1: _v1_to_v2, 2: _v2_to_v3}


def migrate(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (a parsed, MAC-verified checkpoint of a version in :data:`MIGRATIONS` or the
    current one) as a current-version checkpoint. Pure; raises nothing (validation follows)."""
    while data.get("schema_version") in MIGRATIONS:
        data = MIGRATIONS[data["schema_version"]](data)
    return data
