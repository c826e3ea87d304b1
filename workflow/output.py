"""What the command line prints: the one JSON object, or text for a person; and what it says when
the output itself cannot be written. Never imports the SDK.
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any, Callable

from workflow import inbox
from workflow.views import one_line, task_text


#: Escaped in ``--json`` output (valid JSON either way): C1 controls and U+2028/U+2029 (line breaks
#: to ``str.splitlines``, so the one object stays on one line), bidi controls, lone surrogates.
_JSON_UNSAFE = re.compile(r"[\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def json_line(value: Any) -> str:
    """``value`` as one line of JSON (non-ASCII kept, the characters above escaped)."""
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(value, ensure_ascii=False))


def event_printer(as_json: bool) -> Callable[[dict[str, Any]], None]:
    """What ``--stream`` prints for each event of :mod:`workflow.streaming`, as it arrives and
    flushed at once: one JSON line each (``as_json``: JSON Lines, the task object comes last), or
    text: deltas as they come (newlines kept, other unprintable characters shown escaped), every
    other event on a line of its own starting with ``> ``."""
    mid_text = False

    def show(event: dict[str, Any]) -> None:
        nonlocal mid_text
        if as_json:
            print(json_line(event), flush=True)
            return
        if event["event"] == "text_delta":
            text = "\n".join(one_line(part) for part in event["delta"].split("\n"))
            sys.stdout.write(text)
            sys.stdout.flush()
            mid_text = not text.endswith("\n")
            return
        if mid_text:
            print()
            mid_text = False
        print(f"> {_event_text(event)}", flush=True)

    return show


def _event_text(event: dict[str, Any]) -> str:
    kind = event["event"]
    args = one_line(json.dumps(event.get("arguments"), ensure_ascii=False))
    args = args if len(args) <= 160 else args[:157] + "..."
    if kind == "tool_call_requested":
        return f"tool call requested: {event['tool']} {args} (call_id={event['call_id']})"
    if kind == "approval_needed":
        return (f"approval needed: {event['tool']} {args} (call_id={event['call_id']}, "
                f"agent {event['agent']})")
    if kind == "tool_output":
        return f"tool output (call_id={event['call_id']}): {one_line(str(event['output']))}"
    if kind == "handoff":
        return f"handoff: {event['from_agent']} -> {event['to_agent']}"
    if kind == "final_output":
        return f"final output: {one_line(str(event['output']))}"
    return one_line(json.dumps(event, ensure_ascii=False))


def problem_after(command: str, result: Any) -> str | None:
    """What ``command``, having printed ``result``, still reports as one ``STOPPED:`` line (exit
    1), or None: ``doctor`` that found the store inconsistent; ``list`` with checkpoints it could not
    verify (:func:`workflow.inbox.unverified_summary`)."""
    if command == "doctor" and result is not None and not result["consistent"]:
        from workflow.doctor import summary

        return summary(result)
    if command == "list" and result is not None:
        return inbox.unverified_summary(result)
    return None


def print_result(command: str, result: dict[str, Any], as_json: bool,
                 extra: list[str] | None = None) -> None:
    """Print ``result`` of ``command``: one JSON object (``as_json``), else its text; ``extra``
    lines (the budget) go before a task's ``next:`` line."""
    if as_json:
        print(json_line(result))
    elif command == "list":
        print(inbox.inbox_text(result))
    elif command == "show":
        from workflow.receipt import receipt_text

        print(receipt_text(result))
    elif command == "expire":
        print(f"expired: {', '.join(result['expired'])}" if result["expired"] else "nothing expired")
        if result.get("busy"):
            print(f"skipped (another process is working on them; run expire again): "
                  f"{', '.join(result['busy'])}")
    elif command == "ledger":
        n = len(result["entries"])
        print(f"ledger: {result['path']} ({n} {'entry' if n == 1 else 'entries'})")
        for e in result["entries"]:
            print(f"  {e['published_at']}  {e['idempotency_key']}  {e['title']!r}  "
                  f"sha256={e['content_sha256'][:12]}…")
    elif command == "traps":
        from workflow.traps import traps_text

        print(traps_text(result))
    elif command == "doctor":
        from workflow.doctor import doctor_text

        print(doctor_text(result))
    else:
        lines = task_text(result).splitlines()
        at = len(lines) - 1 if lines[-1].startswith("  next:") else len(lines)
        print("\n".join([*lines[:at], *(extra or []), *lines[at:]]))


def output_failed(command: str, result: dict[str, Any], exc: OSError) -> None:
    """Say (on stderr, if it still works) that the output could not be written, and whether the
    command's effect already happened; keep Python's flush at exit from raising again."""
    cause = exc.strerror or type(exc).__name__
    line = f"STOPPED: the output could not be written ({cause})"
    if command in ("start", "resume") and isinstance(result.get("task_id"), str):
        line += (f"; the {command} itself completed and is saved: see python run.py status "
                 f"--task {result['task_id']}")
    elif command in ("expire", "doctor"):
        line += f"; the {command} itself completed (changes, if any, are saved)"
    silence_stdout()
    try:
        print(line, file=sys.stderr)
        sys.stderr.flush()
    except OSError:
        pass


def silence_stdout() -> None:
    """Point file descriptor 1 at the null device, so the interpreter's final flush of what is
    still buffered cannot raise (the Python docs' SIGPIPE recipe). A no-op for an in-memory stdout."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def unexpected(exc: Exception) -> str:
    """The one line for an error no check foresaw (``STOPPED: unexpected error (Type: text)``, at
    most 300 characters of it); a missing package (``ModuleNotFoundError``, e.g. ``agents`` when
    the venv is not active) names it and says how to install or activate."""
    if isinstance(exc, ModuleNotFoundError):
        return (f"the package {exc.name!r} is not installed in this Python ({sys.executable}); "
                "activate the venv (source .venv/bin/activate, or .venv\\Scripts\\Activate.ps1) or "
                "install: python -m pip install \".[test]\"")
    return f"unexpected error ({' '.join(f'{type(exc).__name__}: {exc}'.split())[:300]})"
