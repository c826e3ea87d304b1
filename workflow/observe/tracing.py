"""Local tracing: the SDK's traces and spans, written to the state dir instead of a hosted service.

SDK: a ``TracingProcessor`` receives ``on_trace_start/on_trace_end/on_span_start/on_span_end``
(OpenAI Agents SDK docs, "Tracing" → "Custom tracing processors"); ``set_trace_processors([...])``
*replaces* the default processor, whose exporter would send traces to OpenAI (and print
"OPENAI_API_KEY is not set, skipping trace export" offline). After :func:`install` nothing leaves
the machine.

Routing: :func:`recording` (used by ``workflow.hitl`` around each ``Runner.run``) sets the current
task's sink in a context variable; :meth:`LocalTraceProcessor.on_trace_start` binds the SDK's
``trace_id`` to that sink, and each finished span goes to the sink of its ``trace_id``. A resumed
run keeps the saved run's ``trace_id`` (the SDK reattaches it from the RunState) and starts it again
with the resume's metadata, so start and every resume of a task land in one file and one trace
group (``group_id`` = task ID). Spans of runs that are not ours (no sink) are dropped.

File format and redaction: :mod:`workflow.observe.trace_log`.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Literal

from agents import RunConfig
from agents.tracing import Span, Trace, TracingProcessor, set_trace_processors

from state.clock import now_iso
from state.store import TaskStore
from workflow.observe import trace_log
Phase = Literal["start", "resume"]
TRACE_CONTENT_ENV = "HITL_TRACE_CONTENT"


@dataclass
class _Sink:
    """Where one run's records go: an ``O_APPEND`` descriptor, open for the run only."""

    task_id: str
    path: Path
    content: bool
    fd: int | None = None


_current: contextvars.ContextVar[_Sink | None] = contextvars.ContextVar("hitl_trace_sink", default=None)


def _span_record(span: Span[Any], content: bool) -> dict[str, Any]:
    data = span.span_data.export()
    kind = data.get("type", "")
    if kind == "function":
        raw = data.get("input")
        try:
            args: Any = json.loads(raw) if isinstance(raw, str) and raw else raw
        except ValueError:
            args = raw
        data["input"] = args if content else trace_log.redact(args)
        if not content:
            data["output"] = trace_log.redact(data.get("output"), trace_log.OUTPUT_CHARS)
    elif not content:
        for field in ("input", "output"):  # generation (and any other span) bodies
            if field in data:
                data[field] = trace_log.redact(data[field])
    error = span.error
    return {
        "kind": "span",
        "trace_id": span.trace_id,
        "span_id": span.span_id,
        "parent_id": span.parent_id,
        "started_at": span.started_at,
        "ended_at": span.ended_at,
        "type": kind if kind != "custom" else data.get("name", "custom"),
        "name": data.get("name") if kind != "custom" else (data.get("data") or {}).get("name"),
        "data": data,
        "error": trace_log.redact(dict(error)) if error else None,
    }


class LocalTraceProcessor(TracingProcessor):
    """Writes each task's traces and finished spans to ``<state dir>/traces/<task>.jsonl``.

    Thread-safe (a lock guards the ``trace_id`` → sink map). Never raises into the SDK: a failed
    write is dropped (a trace is diagnostics; the checkpoint is the record).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sinks: dict[str, _Sink] = {}

    def _sink_for(self, trace_id: str) -> _Sink | None:
        with self._lock:
            sink = self._sinks.get(trace_id)
        return sink or _current.get()

    def _write(self, sink: _Sink | None, record: dict[str, Any]) -> None:
        if sink is None or sink.fd is None:
            return
        try:
            trace_log.write(sink.fd, record)
        except OSError:
            pass

    def on_trace_start(self, trace: Trace) -> None:
        sink = _current.get()
        if sink is None:
            return
        with self._lock:
            self._sinks[trace.trace_id] = sink
        exported = trace.export() or {}
        self._write(sink, {"kind": "trace_start", "at": now_iso(), "trace_id": trace.trace_id,
                           "workflow_name": exported.get("workflow_name"),
                           "group_id": exported.get("group_id"),
                           "metadata": exported.get("metadata")})

    def on_trace_end(self, trace: Trace) -> None:
        with self._lock:
            sink = self._sinks.pop(trace.trace_id, None)
        self._write(sink, {"kind": "trace_end", "at": now_iso(), "trace_id": trace.trace_id})

    def on_span_start(self, span: Span[Any]) -> None:
        return None

    def on_span_end(self, span: Span[Any]) -> None:
        sink = self._sink_for(span.trace_id)
        if sink is not None:
            self._write(sink, _span_record(span, sink.content))

    def shutdown(self) -> None:
        return None

    def force_flush(self) -> None:
        return None


_PROCESSOR = LocalTraceProcessor()


#: The SDK logs a failed model call, then raises it: the log goes to the trace (:func:`recording`),
#: not stderr (a logger with a handler of its own never falls back to Python's last resort).
_QUIET = logging.NullHandler()


def install() -> LocalTraceProcessor:
    """Make :class:`LocalTraceProcessor` the SDK's only trace processor (no hosted export), and keep
    the SDK's log off stderr (:data:`_QUIET`). Idempotent."""
    set_trace_processors([_PROCESSOR])
    logging.getLogger(SDK_LOGGER).addHandler(_QUIET)
    return _PROCESSOR


def run_config(task_id: str, phase: Phase, action: str,
               rejection_text: Callable[[Any], str | None]) -> RunConfig:
    """The ``RunConfig`` for one run of a task: ``workflow_name`` ``"<action> approval"``,
    ``group_id`` = task ID, metadata ``{task_id, phase}``.

    ``trace_include_sensitive_data`` stays the SDK default; our processor redacts what it writes.
    ``tool_error_formatter`` is ``rejection_text``, the run-wide text a rejected call sends the
    model (the application's ``Application.rejection_text``); a per-call reason wins over it.
    """
    return RunConfig(workflow_name=f"{action} approval", group_id=task_id,
                     trace_metadata={"task_id": task_id, "phase": phase},
                     tool_error_formatter=rejection_text)


#: The SDK's logger. Its warnings (e.g. "Tool name collision detected") go to the task's trace
#: during a run (:func:`recording`); stderr keeps only our one ``STOPPED:`` line.
SDK_LOGGER = "openai.agents"


class _TraceLogHandler(logging.Handler):
    """Writes each SDK log record of WARNING and above to one run's trace as ``{"kind": "log",
    "at", "level", "logger", "message"}`` (redacted like every trace record, ``workflow.observe.trace_log``)."""

    def __init__(self, sink: _Sink) -> None:
        super().__init__(level=logging.WARNING)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = " ".join(record.getMessage().split())[:2000]
        except Exception:  # a record whose arguments do not format: keep the template
            message = str(record.msg)[:2000]
        _PROCESSOR._write(self.sink, {"kind": "log", "at": now_iso(), "level": record.levelname,
                                      "logger": record.name, "message": message})


@contextmanager
def routed(store: TaskStore, task_id: str, *, content: bool = False) -> Iterator[_Sink]:
    """Route the SDK traces started inside this block to the task's trace file (``content``:
    unredacted); yields the sink (its ``fd`` None when the file cannot be opened: no trace is
    better than no run, the checkpoint stays the record). Writes no record of its own: a decision
    step (:mod:`workflow.observe.decisions`) is not a run; :func:`recording` adds the run's.
    :func:`install` first: a command that never imports :mod:`workflow.hitl` (``settle`` with
    ``not_published`` from an application that imported the SDK) exports nothing either."""
    install()
    sink = _Sink(task_id, trace_log.trace_path(store, task_id), content)
    try:
        sink.fd = trace_log.open_append(sink.path)
    except OSError:
        sink.fd = None
    token = _current.set(sink)
    try:
        yield sink
    finally:
        _current.reset(token)
        if sink.fd is not None:
            os.close(sink.fd)
            sink.fd = None


@contextmanager
def recording(store: TaskStore, task_id: str, phase: Phase, *, content: bool = False) -> Iterator[None]:
    """Route the traces of the ``Runner.run`` inside this block to the task's trace file.

    Writes a ``run`` record before and a ``run_end`` record after (``outcome`` ``ok`` or ``error``
    with the exception's one-line text), and every warning of the SDK's logger (``openai.agents``,
    WARNING and above) logged meanwhile as a ``log`` record; re-raises whatever the block raises.
    """
    with routed(store, task_id, content=content) as sink:
        _PROCESSOR._write(sink, {"kind": "run", "phase": phase, "at": now_iso(), "pid": os.getpid(),
                                 "content": content})
        sdk_logger = logging.getLogger(SDK_LOGGER)
        handler = _TraceLogHandler(sink)
        sdk_logger.addHandler(handler)
        try:
            yield
        except BaseException as exc:
            msg = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
            _PROCESSOR._write(sink, {"kind": "run_end", "phase": phase, "at": now_iso(),
                                     "outcome": "error", "error": msg})
            raise
        else:
            _PROCESSOR._write(sink, {"kind": "run_end", "phase": phase, "at": now_iso(),
                                     "outcome": "ok", "error": None})
        finally:
            sdk_logger.removeHandler(handler)
