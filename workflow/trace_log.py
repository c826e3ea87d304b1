"""The local trace file of a task: where it is, how a line is appended, how it is read back.

Never imports the SDK (``show`` reads traces without paying for ``import agents``); the SDK side,
the :class:`~workflow.tracing.LocalTraceProcessor`, writes through :func:`append`.

File: ``<state dir>/traces/<file_name(task_id)>.jsonl``, one JSON object per line, appended across
``start`` and every ``resume`` of the task. Records (``kind``):

- ``run``: ``{"kind": "run", "phase": "start"|"resume", "at", "pid", "content": bool}`` — written
  just before ``Runner.run``;
- ``trace_start`` / ``trace_end``: ``{"kind", "at", "trace_id", "workflow_name", "group_id",
  "metadata"}`` — the SDK's trace (``group_id`` and ``metadata.task_id`` are the task ID);
- ``span``: ``{"kind": "span", "trace_id", "span_id", "parent_id", "started_at", "ended_at", "type",
  "name", "data", "error"}`` — one finished SDK span (agent, generation, function, guardrail, custom
  ``task``/``turn`` with usage …);
- ``run_end``: ``{"kind": "run_end", "phase", "at", "outcome": "ok"|"error", "error": str|None}``.

Traces are diagnostics, not the record: they are not signed, and a crash may cut the last line
(reading skips lines that do not parse and counts them). The signed checkpoint stays the source of
truth for status and decisions. Writes happen only under the task's lock (``start``/``resume``), so
one writer per file; each record is one ``os.write`` on an ``O_APPEND`` descriptor.

Nothing secret is written: unless a run asks for ``--trace-content``, every string of a model's
input/output and of a tool's arguments longer than :data:`PREVIEW_CHARS` becomes ``{"sha256",
"preview", "chars"}`` (a tool's output, a status and not the draft, only beyond
:data:`OUTPUT_CHARS`); the
values of ``OPENAI_API_KEY`` and ``HITL_SIGNING_KEY``, if set (whatever their length), and the token
an API echoes after ``API key provided:`` are replaced by ``[redacted]`` in every line whatever the
mode.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from state import failpoints, secrets
from state.environment import SECRET_ENVS  # noqa: F401  (the variables whose values are scrubbed)
from state.paths import inside, make_dirs, open_regular, read_regular
from state.storage import Store, file_name

TRACES_DIR = "traces"
PREVIEW_CHARS = 24
OUTPUT_CHARS = 300


def trace_path(store: Store, task_id: str) -> Path:
    """``<state dir>/traces/<file_name(task_id)>.jsonl``; raises :class:`~state.errors.Stopped` if it
    resolves outside the state dir (``traces`` a symlink elsewhere)."""
    return inside(store.root, store.root / TRACES_DIR / (file_name(task_id) + ".jsonl"),
                  f"trace of task {task_id!r}")


def _what(path: Path) -> str:
    return f"trace file {TRACES_DIR}/{path.name}"


def redact(value: Any, limit: int = PREVIEW_CHARS) -> Any:
    """``value`` with every string longer than ``limit`` characters replaced by
    ``{"sha256": hex, "preview": first PREVIEW_CHARS chars + "…", "chars": n}`` (recursively)."""
    if isinstance(value, str):
        value = secrets.scrub(value, secrets.values())  # before the preview cuts a secret in half
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


#: What the OpenAI API echoes on a refused key (``Incorrect API key provided: sk-ab***cd.``): the
#: token is replaced whatever key it was, even one that did not come from our environment.
_ECHOED_KEY = re.compile(r"(API key provided: )[A-Za-z0-9_*\-]+")
REDACTED = secrets.REDACTED


def _secrets() -> list[str]:
    """The secret values to scrub, whatever their length (see :mod:`state.secrets`)."""
    return secrets.values()


_scrub_value = secrets.scrub


def _scrub(line: str) -> str:
    """``line`` (one JSON record) with secrets replaced by ``[redacted]``, still one JSON record.

    Every value of ``OPENAI_API_KEY``/``HITL_SIGNING_KEY`` (any length, >= 1 character) inside any
    string or object key, and the token after ``API key provided:``, become ``[redacted]``. The
    replacement is made on the parsed strings, so a secret holding a quote or a backslash cannot
    break the line. Should a secret still appear in the line outside any string (a short key of
    digits inside a number), the record is replaced by ``{"kind": "redacted"}`` (diagnostics lost,
    never the secret written).
    """
    line = _ECHOED_KEY.sub(lambda m: m.group(1) + REDACTED, line)
    known = _secrets()
    escaped = [json.dumps(secret, ensure_ascii=False)[1:-1] for secret in known]  # as in the line
    if not any(secret in line for secret in known + escaped):
        return line
    try:
        record = json.loads(line)
    except ValueError:
        return json.dumps({"kind": "redacted"})
    line = json.dumps(_scrub_value(record, known), ensure_ascii=False, separators=(",", ":"))
    skeleton = line.replace(REDACTED, "")
    if any(secret in skeleton for secret in known if secret not in REDACTED):
        return json.dumps({"kind": "redacted"})
    return line


def _line(record: dict[str, Any]) -> bytes:
    line = _scrub(json.dumps(record, ensure_ascii=False, default=str, separators=(",", ":"))) + "\n"
    return line.encode("utf-8")


def open_append(path: Path) -> int:
    """An ``O_APPEND`` descriptor on ``path`` (created 0o600, folder created if missing).

    Opened with :func:`state.paths.open_regular`: a symlink at ``path`` is never followed (a trace,
    possibly holding the full draft, must never land in a file elsewhere) and a FIFO never blocks;
    either raises :class:`~state.errors.Stopped` naming the file.
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
    Raises :class:`~state.errors.Stopped` if ``path`` is not a regular file (a FIFO would block).
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
