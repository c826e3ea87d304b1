"""The local trace file of a task: where it is, how a line is appended, how it is read back.

Never imports the SDK (``show`` reads traces without paying for ``import agents``); the SDK side,
the :class:`~workflow.observe.tracing.LocalTraceProcessor`, writes through :func:`append`.

File: ``<state dir>/traces/<file_name(task_id)>.jsonl``, one JSON object per line, appended across
``start`` and every ``resume`` of the task. Records (``kind``):

- ``run``: ``{"kind": "run", "phase": "start"|"resume", "at", "pid", "content": bool}`` — written
  just before ``Runner.run``;
- ``trace_start`` / ``trace_end``: ``{"kind", "at", "trace_id", "workflow_name", "group_id",
  "metadata"}`` — the SDK's trace (``group_id`` and ``metadata.task_id`` are the task ID);
- ``span``: ``{"kind": "span", "trace_id", "span_id", "parent_id", "started_at", "ended_at", "type",
  "name", "data", "error"}`` — one finished SDK span (agent, generation, function, guardrail, custom
  ``task``/``turn`` with usage …);
- ``run_end``: ``{"kind": "run_end", "phase", "at", "outcome": "ok"|"error", "error": str|None}``;
- ``log``: ``{"kind": "log", "at", "level", "logger", "message"}`` — a warning (or worse) the SDK
  logged during the run (``workflow.observe.tracing.recording``).

Traces are diagnostics, not the record: they are not signed, and a crash may cut the last line
(reading skips lines that do not parse and counts them). The signed checkpoint stays the source of
truth for status and decisions. Writes happen only under the task's lock (``start``/``resume``), so
one writer per file; each record is one ``os.write`` on an ``O_APPEND`` descriptor.

Nothing secret is written: unless a run asks for ``--trace-content``, every string of a model's
input/output and of a tool's arguments longer than :data:`PREVIEW_CHARS` becomes ``{"sha256",
"preview", "chars"}`` (a tool's output, a status and not the draft, only beyond
:data:`OUTPUT_CHARS`). Whatever the mode, each record goes through
:func:`state.secrets.redact` (allow-list :data:`state.secrets.TRACE`) before it is serialised: a
string or object key holding the value of ``OPENAI_API_KEY`` or ``HITL_SIGNING_KEY`` (any length,
raw or JSON-escaped), or the token an API echoes after ``API key provided:``, becomes
``[redacted]`` whole; a number holding one drops the record (``{"kind": "redacted"}``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from state import failpoints, secrets
from state.settings import SECRET_ENVS  # noqa: F401  (the variables whose values are scrubbed)
from state.paths import inside, make_dirs, open_regular, read_regular
from state.paths import file_name
from state.store import TaskStore

TRACES_DIR = "traces"
PREVIEW_CHARS = 24
OUTPUT_CHARS = 300


def trace_path(store: TaskStore, task_id: str) -> Path:
    """``<state dir>/traces/<file_name(task_id)>.jsonl``; raises :class:`~state.errors.Refused` if it
    resolves outside the state dir (``traces`` a symlink elsewhere)."""
    return inside(store.root, store.root / TRACES_DIR / (file_name(task_id) + ".jsonl"),
                  f"trace of task {task_id!r}")


def _what(path: Path) -> str:
    return f"trace file {TRACES_DIR}/{path.name}"


def redact(value: Any, limit: int = PREVIEW_CHARS) -> Any:
    """``value`` with every string longer than ``limit`` characters replaced by
    ``{"sha256": hex, "preview": first PREVIEW_CHARS chars + "…", "chars": n}`` (recursively).

    A string holding a secret (or an echoed key, see :func:`_secret_text`) becomes ``[redacted]``
    first, so neither the preview nor the hash is ever computed over a secret.
    """
    if isinstance(value, str):
        if _secret_text(value):
            return REDACTED
        if len(value) <= limit:
            return value
        return {
            "sha256": hashlib.sha256(value.encode("utf-8")).hexdigest(),
            "preview": value[:PREVIEW_CHARS] + "…",
            "chars": len(value),
        }
    if isinstance(value, dict):
        return {k: redact(v, limit) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v, limit) for v in value]
    return value


#: What the OpenAI API echoes on a refused key (``Incorrect API key provided: sk-ab***cd.``): a
#: string holding it is redacted whatever key it was, even one that did not come from our environment.
_ECHOED_KEY = re.compile(r"API key provided: [A-Za-z0-9_*\-]+")
REDACTED = secrets.REDACTED


def _secret_text(text: str) -> bool:
    """True if ``text`` holds a secret value (any length, any escaped form) or an echoed key."""
    return bool(_ECHOED_KEY.search(text)) or any(
        form in text for v in secrets.values() for form in secrets.forms(v))


def _redact_echo(value: Any) -> Any:
    """``value`` with every free-text string holding an echoed key replaced whole (see TRACE)."""
    if isinstance(value, str):
        return REDACTED if _ECHOED_KEY.search(value) else value
    if isinstance(value, dict):
        return {k: (v if secrets.TRACE((k,)) == "closed" else _redact_echo(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_echo(v) for v in value]
    return value


def _line(record: dict[str, Any]) -> bytes:
    """``record`` as one JSON line, secrets redacted structurally (see module docstring). Should a
    secret still show outside any string (digits in a number), the line is ``{"kind": "redacted"}``
    (diagnostics lost, never the secret written).

    The record is serialised once; the redaction walk runs only when that text could hold what it
    looks for (:func:`_may_need_redaction`), and otherwise would have returned the record unchanged.
    """
    text = json.dumps(record, ensure_ascii=False, default=str, separators=(",", ":"))
    found = secrets.named(1)  # read once per record: the walk below searches for these
    if _may_need_redaction(text, found):
        data = json.loads(text)  # plain JSON values
        try:
            data = secrets.redact(_redact_echo(data), secrets.TRACE, what="trace record",
                                  min_chars=1, numbers=True, secrets=found)
        except secrets.SecretInStructure:
            data = {"kind": "redacted"}
        text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return (text + "\n").encode("utf-8")


def _may_need_redaction(text: str, found: list[tuple[str, str]]) -> bool:
    """False only if the redaction of :func:`_line` cannot change the record serialised as ``text``
    (``json.dumps(..., ensure_ascii=False)``): no echoed key and no form of a secret in ``found``.

    Why a search of the text suffices: JSON escapes a string character by character, so a string
    (or object key) that holds ``s`` is serialised with ``s`` escaped as a contiguous part; an echoed
    key (:data:`_ECHOED_KEY`) has no character JSON escapes; and each number is written as
    ``str()`` writes it, except NaN and the infinities (``NaN``/``Infinity`` in JSON), which send
    the record down the full walk."""
    if _ECHOED_KEY.search(text):
        return True
    if not found:
        return False
    if "NaN" in text or "Infinity" in text:
        return True
    return any(esc in text for _, value in found for esc in secrets.escaped_forms(value))


def open_append(path: Path) -> int:
    """An ``O_APPEND`` descriptor on ``path`` (created 0o600, folder created if missing).

    Opened with :func:`state.paths.open_regular`: a symlink at ``path`` is never followed (a trace,
    possibly holding the full draft, must never land in a file elsewhere) and a FIFO never blocks;
    either raises :class:`~state.errors.Refused` naming the file.
    """
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
    failpoints.hit("trace:append:before")
    try:
        fd = open_regular(path, _what(path), flags, 0o600)
    except FileNotFoundError:
        make_dirs(path.parent)  # owner-only (0o700)
        fd = open_regular(path, _what(path), flags, 0o600)
    failpoints.hit("trace:append:after")
    return fd


def write(fd: int, record: dict[str, Any]) -> None:
    """Append ``record`` as one JSON line with one ``os.write`` on ``fd`` (from :func:`open_append`).

    No fsync: a trace is diagnostics, and a run must not pay a disk flush per span. Secret values
    (see module docstring) are scrubbed from the line. A durable write like any other, so it sits
    between the ``trace:append`` failpoints (crash tests enumerate it).
    """
    line = _line(record)
    failpoints.hit("trace:append:before")
    os.write(fd, line)
    failpoints.hit("trace:append:after")


def append(path: Path, record: dict[str, Any]) -> None:
    """:func:`write` one record to ``path`` (opens and closes the file)."""
    fd = open_append(path)
    try:
        write(fd, record)
    finally:
        os.close(fd)


def read(path: Path) -> tuple[list[dict[str, Any]], int]:
    """``(records, unreadable_lines)`` of a trace file; ``([], 0)`` if it does not exist.

    A line that is not a JSON object (e.g. cut by a crash) is skipped and counted, never guessed.
    Raises :class:`~state.errors.Refused` if ``path`` is not a regular file (a FIFO would block).
    """
    raw = read_regular(path, _what(path))
    if raw is None:
        return [], 0
    records: list[dict[str, Any]] = []
    bad = 0
    for line in raw.split(b"\n"):
        if not line.strip():
            continue
        try:
            rec = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            bad += 1
            continue
        if isinstance(rec, dict) and isinstance(rec.get("kind"), str):
            records.append(rec)
        else:
            bad += 1
    return records, bad
