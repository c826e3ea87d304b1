"""What the command line prints: the one JSON object, or text for a person; and what it says when
the output itself cannot be written. Never imports the SDK.
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any

from workflow import inbox
from workflow.views import task_text


#: Escaped in ``--json`` output (valid JSON either way): C1 controls and U+2028/U+2029 (line breaks
#: to ``str.splitlines``, so the one object stays on one line), bidi controls, lone surrogates.
_JSON_UNSAFE = re.compile(r"[\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def print_result(command: str, result: dict[str, Any], as_json: bool,
                 extra: list[str] | None = None) -> None:
    """Print ``result`` of ``command``: one JSON object (``as_json``), else its text; ``extra``
    lines (the budget) go before a task's ``next:`` line."""
    if as_json:
        print(_JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(result, ensure_ascii=False)))
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
