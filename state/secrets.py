"""The secret values this program knows (``OPENAI_API_KEY``, ``HITL_SIGNING_KEY``) and how to keep
them out of every record it writes: checkpoints (:mod:`state.files.store`), ledger entries
(``state.files.ledger``), rejection records (:mod:`state.files.rejections`) and traces (``workflow.observe.trace_log``).

A model or a proxy can echo the API key back, and the SDK then keeps that text in the RunState,
the final output and the history. Nothing of the kind may be saved. The rule, applied by one walker
(:func:`redact`) to the *parsed values* of a record before it is serialised, never to its text:

- **structural fields** (a fixed allow-list per record type, :data:`CHECKPOINT`, :data:`LEDGER`,
  :data:`REJECTION`, :data:`RUN_STATE`, :data:`TRACE`) are never altered:

  - *closed* ones (statuses, actions, events, hashes, timestamps, revisions, versions, task IDs,
    names from our code) are written as they are, whatever the secret. Their value does not depend
    on the secret, so writing it reveals nothing: ``OPENAI_API_KEY=completed`` still lets a task be
    ``completed``;
  - *open* ones (identifiers and bound data that come from outside: a call ID or call arguments
    from the model, a reviewer name, a model name) are refused with :class:`Refused` when they hold
    a secret, before anything is written: altering them would break what they bind;

- **free text** (title, reason, final output, model messages, tool output, trace bodies …): a
  value that holds a secret is replaced *whole* by :data:`REDACTED` (never a substring edit); an
  object key likewise.

A secret is found raw and in its JSON-escaped forms (``"`` as ``\\"``, ``é`` as ``\\u00e9``, and
twice escaped, as inside the ``arguments`` JSON text stored in the RunState JSON text).

Short secrets: in checkpoints, ledger entries, rejection records and user input only values of
:data:`MIN_CHARS` (8) or more characters are searched for: a placeholder key such as ``local``
(docs/real-model.md suggests it for local servers) would otherwise redact every text mentioning
``localhost``. Traces search for secrets of any length.
"""

from __future__ import annotations

import functools
import json
from typing import Any, Callable, Iterable, Literal, Sequence

from state.errors import Part, Refused
from state.settings import SECRET_ENVS, memo, secret_pairs  # noqa: F401  (SECRET_ENVS: the variables it scrubs)

REDACTED = "[redacted]"
#: Secrets shorter than this are not searched for in stored records and input (see module doc).
MIN_CHARS = 8

Kind = Literal["closed", "open"]
Path_ = tuple[Any, ...]


def named(min_chars: int = 1) -> list[tuple[str, str]]:
    """``[(variable, value)]`` for each set variable of :data:`SECRET_ENVS` (its value as set and
    stripped, as ``agent.models`` sends the API key) of at least ``min_chars`` characters, longest
    first. Inside an operation whose settings are read (:func:`state.settings.operation`: every
    trace record asks), computed once from them."""
    held = memo()
    if held is None or "settings" not in held:
        return _named(min_chars)
    slot = ("secrets.named", min_chars)
    found = held.get(slot)
    if found is None:
        found = held[slot] = tuple(_named(min_chars))
    return list(found)


def _named(min_chars: int) -> list[tuple[str, str]]:
    """:func:`named` of the settings now."""
    found: dict[str, str] = {}
    for name, value in secret_pairs():
        for v in (value, value.strip()):
            if len(v) >= max(min_chars, 1):
                found.setdefault(v, name)
    return sorted(((n, v) for v, n in found.items()), key=lambda nv: len(nv[1]), reverse=True)


def values(min_chars: int = 1) -> list[str]:
    """The values of :func:`named` only, longest first."""
    return [v for _, v in named(min_chars)]


@functools.lru_cache(maxsize=32)
def _forms(secret: str) -> frozenset[str]:
    out = {secret}
    level = {secret}
    for _ in range(2):
        level = {json.dumps(s, ensure_ascii=a)[1:-1] for s in level for a in (False, True)}
        out |= level
    return frozenset(out)


def forms(secret: str) -> set[str]:
    """``secret`` as it can appear inside a parsed string: raw, JSON-escaped with and without
    ``\\u`` escapes, and escaped twice (JSON text inside JSON text). (A pure function of
    ``secret``: computed once per value.)"""
    return set(_forms(secret))


@functools.lru_cache(maxsize=32)
def escaped_forms(secret: str) -> frozenset[str]:
    """Each of :func:`forms` as ``json.dumps(..., ensure_ascii=False)`` writes it inside a string:
    a JSON text holding a string that holds one of :func:`forms` holds one of these."""
    return frozenset(json.dumps(f, ensure_ascii=False)[1:-1] for f in _forms(secret))


class _Finder:
    """Which secret (by variable name) a string holds, in any of its :func:`forms`."""

    def __init__(self, secrets: list[tuple[str, str]]) -> None:
        self.table = [(name, f) for name, value in secrets for f in sorted(forms(value), key=len, reverse=True)]

    def __bool__(self) -> bool:
        return bool(self.table)

    def find(self, text: str) -> str | None:
        for name, form in self.table:
            if form in text:
                return name
        return None


def _match(pattern: Path_, path: Path_) -> bool:
    return len(pattern) == len(path) and all(p == "*" or p == x for p, x in zip(pattern, path))


def by_path(closed: Iterable[Path_], open_: Iterable[Path_]) -> Callable[[Path_], Kind | None]:
    """A classifier for :func:`redact` from path patterns (``"*"``: any key or list index).

    ``classify(path)`` is ``"closed"`` if a pattern of ``closed`` matches ``path`` (same length,
    each part equal or ``"*"``), else ``"open"`` if one of ``open_`` does, else None. The patterns
    are grouped by length once, and those without ``"*"`` looked up in a set, so a call costs a
    few dictionary lookups, not a scan of every pattern (each trace record and checkpoint asks it
    for every key it holds)."""
    def group(patterns: Iterable[Path_]) -> dict[int, tuple[frozenset[Path_], tuple[Path_, ...]]]:
        by_len: dict[int, tuple[set[Path_], list[Path_]]] = {}
        for p in patterns:
            exact, wild = by_len.setdefault(len(p), (set(), []))
            if "*" in p:
                wild.append(p)
            else:
                exact.add(p)
        return {n: (frozenset(exact), tuple(wild)) for n, (exact, wild) in by_len.items()}

    tables = ((group(closed), "closed"), (group(open_), "open"))
    empty: tuple[frozenset[Path_], tuple[Path_, ...]] = (frozenset(), ())

    def classify(path: Path_) -> Kind | None:
        for table, kind in tables:
            exact, wild = table.get(len(path), empty)
            if path in exact or any(_match(p, path) for p in wild):
                return kind  # type: ignore[return-value]
        return None

    return classify


def by_key(closed: Iterable[str], open_: Iterable[str]) -> Callable[[Path_], Kind | None]:
    """A classifier for :func:`redact` from the last key of the path (for the SDK's RunState)."""
    closed, open_ = frozenset(closed), frozenset(open_)

    def classify(path: Path_) -> Kind | None:
        last = path[-1] if path else None
        if last in closed:
            return "closed"
        if last in open_:
            return "open"
        return None

    return classify


class SecretInStructure(Refused):
    """A secret in a structural field that must not be altered (see module docstring); its code is
    always ``secret``."""

    def __init__(self, message: str) -> None:
        super().__init__("secret", message)


def redact(value: Any, classify: Callable[[Path_], Kind | None], *, what: str,
           min_chars: int = MIN_CHARS, numbers: bool = False, closed_keys: bool = False,
           secrets: list[tuple[str, str]] | None = None) -> Any:
    """``value`` (JSON-like data: one record, not yet serialised) with every free-text string (and
    object key) holding a secret replaced whole by :data:`REDACTED`.

    ``classify(path)`` (``path``: tuple of keys and list indices from the record's root) says
    whether a field is ``"closed"`` (kept, not searched), ``"open"`` (kept; a secret there raises)
    or free text (``None``); a field inherits its parent's class unless classified itself.
    ``numbers``: a number whose digits hold a secret raises too (for traces, where any length is
    searched). ``closed_keys``: object keys are never altered outside open fields (the keys of our
    records are their schema's field names; the RunState's are the SDK's field names, agent names
    from our code, and call IDs that also appear as open ``call_id`` values); a key in an open field
    holding a secret raises, and a closed field's own key is never altered. Returns ``value``
    itself (same object) when nothing needed redacting.

    Raises :class:`SecretInStructure` (a :class:`Refused`) naming ``what``, the field and the
    variable, never the value.
    """
    finder = _Finder(named(min_chars) if secrets is None else secrets)
    if not finder:
        return value

    def refuse(path: Path_, name: str) -> None:
        field = ".".join(str(p) for p in path) or "(root)"
        raise SecretInStructure(
            f"{what}: field {field} holds the value of {name}; secrets are never saved and this "
            "field cannot be redacted; nothing written"
        )

    def walk(v: Any, path: Path_, mode: Kind | None) -> Any:
        if mode == "closed" and not numbers:
            return v
        if isinstance(v, str):
            if mode == "closed" or v == REDACTED:
                return v
            name = finder.find(v)
            if name is None:
                return v
            if mode == "open":
                refuse(path, name)
            return REDACTED
        if isinstance(v, bool) or v is None:
            return v
        if isinstance(v, (int, float)):
            name = finder.find(str(v)) if numbers else None
            if name is not None:
                refuse(path, name)
            return v
        if isinstance(v, dict):
            out: dict[Any, Any] = {}
            changed = False
            for k, x in v.items():
                sub = path + (k,)
                kind = classify(sub) or mode
                key = k
                free_key = mode == "open" or not (closed_keys or classify(sub) == "closed")
                if isinstance(k, str) and mode != "closed" and free_key and k != REDACTED:
                    name = finder.find(k)
                    if name is not None:
                        if mode == "open":
                            refuse(sub, name)
                        key = REDACTED
                        while key in out:
                            key += "#"
                new = walk(x, sub, kind)
                changed = changed or new is not x or key != k
                out[key] = new
            return out if changed else v
        if isinstance(v, (list, tuple)):
            items = [walk(x, path + (i,), classify(path + (i,)) or mode) for i, x in enumerate(v)]
            return items if any(a is not b for a, b in zip(items, v)) else v
        return v

    return walk(value, (), classify(()))


# -- the allow-lists, one per record type ---------------------------------------------------------

def _decision(prefix: Path_) -> tuple[list[Path_], list[Path_]]:
    return ([prefix + (k,) for k in ("decision", "at", "tool", "arguments_sha256", "channel",
                                     "always", "source")],
            [prefix + (k,) for k in ("by", "call_id")])


_D1, _D1o = _decision(("decision",))
_D2, _D2o = _decision(("decisions", "*"))
_H = ("history", "*")
_HD = _H + ("detail",)

#: The checkpoint envelope (``state.schema.Checkpoint``); ``run_state`` is walked as :data:`RUN_STATE`.
CHECKPOINT = by_path(
    closed=[(k,) for k in ("schema_version", "task_id", "idempotency_key", "action", "content_sha256",
                           "status", "revision", "sdk_version", "run_state_schema_version", "agent",
                           "created_at", "updated_at", "expires_at", "approval_ttl_s", "budget",
                           "spend", "state_id", "mac", "channels", "service")]
    + _D1 + _D2 + [("pending", "*", "tool"), _H + ("at",), _H + ("event",), _H + ("revision",),
                   _HD + ("calls", "*", "tool")]
    + [_HD + (k,) for k in ("expires_at", "schema_version", "sdk_version", "run_state_schema_version",
                            "ledger", "decision", "at", "tool")],
    open_=_D1o + _D2o + [("model",), ("pending", "*", "call_id"), ("pending", "*", "arguments"),
                         _HD + ("pending",), _HD + ("by",), _HD + ("call_id",),
                         _HD + ("calls", "*", "call_id"), _HD + ("calls", "*", "arguments")],
)

#: A ledger entry (``state.files.ledger.LedgerEntry``): only ``title`` is free text.
LEDGER = by_path(closed=[(k,) for k in ("idempotency_key", "task_id", "action", "content_sha256",
                                        "published_at", "channel", "approval")], open_=[])

#: A rejection record (``state.files.rejections.RejectionRecord``): only ``reason`` is free text.
REJECTION = by_path(closed=[("task_id",), ("content_sha256",), ("at",), ("channel",)],
                    open_=[("call_id",), ("by",)])

#: An effect's write-ahead intent (``state.records.EffectIntent``): no free text; the call ID is open.
INTENT = by_path(closed=[(k,) for k in ("idempotency_key", "attempt", "task_id", "channel", "action",
                                        "content_sha256", "request_key", "service", "deduplicates", "at",
                                        "window_ends")],
                 open_=[("call_id",)])

#: A settlement (``state.records.Settlement``): only ``reason`` is free text.
SETTLEMENT = by_path(closed=[(k,) for k in ("idempotency_key", "attempt", "task_id", "at", "source")],
                     open_=[("by",)])

#: The SDK's RunState JSON (``RunState.to_string()``), by field name: item types, roles, statuses,
#: names and fingerprints from our code and the SDK are closed; call/item/response IDs, call
#: arguments and approval lists are open; everything else (messages, tool output, the original
#: input) is free text. Whether the SDK still loads a redacted RunState is checked before it is
#: saved (``workflow.hitl``).
RUN_STATE = by_key(
    closed=("$schemaVersion", "type", "role", "status", "name", "tool_name", "tool_key",
            "approval_scope", "fingerprint", "kind", "original_type", "serialized_via", "task_id",
            "idempotency_key", "content_sha256", "ledger_dir", "store", "tool_use_tracker",
            "current_agent", "channels", "sticky_scope",
            "description", "usage", "trace_id", "group_id", "workflow_name", "metadata",
            "tracing_api_key_hash", "current_turn", "max_turns"),
    open_=("call_id", "id", "response_id", "arguments", "approved", "rejected",
           "previous_response_id", "conversation_id", "tracing_api_key"),
)

#: A trace record (``workflow.observe.trace_log``): its envelope fields and span type/name are closed.
TRACE = by_path(
    closed=[(k,) for k in ("kind", "at", "pid", "phase", "content", "outcome", "trace_id", "span_id",
                           "parent_id", "started_at", "ended_at", "type", "name", "group_id",
                           "workflow_name", "metadata", "level", "logger")]
    + [("data", "type"), ("data", "name")],
    open_=[],
)


def redact_run_state(text: str, *, what: str, min_chars: int = MIN_CHARS) -> str:
    """The RunState JSON text ``text`` with :data:`RUN_STATE` applied to its parsed structure;
    ``text`` itself (byte for byte) when nothing needed redacting, else re-dumped (indent 2).

    Raises :class:`SecretInStructure` as :func:`redact`, and if ``text`` is not JSON but holds a
    secret."""
    finder = _Finder(named(min_chars))
    if not finder or finder.find(text) is None:
        return text
    try:
        data = json.loads(text)
    except ValueError:
        raise SecretInStructure(f"{what}: the RunState holds the value of {finder.find(text)} and "
                                "is not JSON; nothing written") from None
    new = redact(data, RUN_STATE, what=f"{what} (RunState)", min_chars=min_chars, closed_keys=True)
    return text if new is data else json.dumps(new, indent=2, ensure_ascii=False)


def redact_checkpoint(body: dict[str, Any], *, min_chars: int = MIN_CHARS) -> dict[str, Any]:
    """A checkpoint envelope (JSON-ready dict) with :data:`CHECKPOINT` applied, its ``run_state``
    string with :func:`redact_run_state`. Raises :class:`SecretInStructure`."""
    what = f"checkpoint of task {body.get('task_id')!r}"
    out = redact(body, CHECKPOINT, what=what, min_chars=min_chars, closed_keys=True)
    run_state = body.get("run_state")
    if isinstance(run_state, str):  # only ever redacted by its own structure, never replaced whole
        out = {**out, "run_state": redact_run_state(run_state, what=what, min_chars=min_chars)}
    return out


def secret_in(text: str) -> str | None:
    """The name of the secret variable whose value (:data:`MIN_CHARS`+ characters, any escaped
    form) ``text`` holds, or None."""
    return _Finder(named(MIN_CHARS)).find(text) if text else None


def check_input(what: str | Sequence[Part], value: str | None) -> None:
    """Raise :class:`Refused` if ``value`` (user input: task ID, title, draft, reason, reviewer
    name) holds the value of a secret variable (:data:`MIN_CHARS`+ characters, any escaped form).
    ``what`` names the input: text, or text and :class:`~state.errors.Next` parts (e.g. where the
    application adds its own name for it).

    Such input would be sent to the model and saved (or, for a bound field, could not be redacted);
    it is refused before anything is written. The message names the variable, never the value.
    """
    name = secret_in(value or "")
    if name is not None:
        named_as = [what] if isinstance(what, str) else list(what)
        raise Refused("secret", [*named_as, f" contains the value of {name}; secrets are never sent to the "
                                 "model or saved: remove it and run the command again"])
