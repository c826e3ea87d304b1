"""Text for a person at a terminal: values escaped onto one line.

Two rules for everything the command line prints (docs/commands.md, "What is printed"):

- a value that comes from a model or a file (a call ID, a title, a body, a reason, a name, a
  channel, the final output, a file name) goes through :func:`one_line`, so it cannot add a line,
  move the cursor or reorder what a reviewer reads;
- a command printed for a person to paste is the command line's own (``cli.shell.command``), each
  argument quoted with ``shlex.quote``: the library carries a next step as data
  (:class:`state.errors.Next`), never as a command.

Never imports anything but the standard library.
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any


def one_line(text: str) -> str:
    """``text`` safe to print on one terminal line: every character that is not printable
    (newline, carriage return, escape sequences, C1 controls, bidi and zero-width marks …) is shown
    escaped (``\\n``, ``\\x1b``, ``\\u202e``), so model output or a reason cannot forge lines, move the
    cursor or reorder what a reviewer reads. Printable text (any script) is kept as it is."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in str(text))


#: Escaped in ``--json`` output (valid JSON either way): every character the terminal rule escapes
#: (:func:`workflow.observe.views.one_line`: not printable), e.g. C1 controls, U+2028/U+2029 (line breaks to
#: ``str.splitlines``, so the one object stays on one line), bidi controls and marks (U+202E,
#: U+200F, U+061C), zero-width characters, lone surrogates. ``json.dumps`` escapes the ASCII ones.
_JSON_UNSAFE = re.compile(r"[^\x00-\x7e]")


def _json_escape(found: re.Match[str]) -> str:
    char = found.group()
    if char.isprintable():
        return char
    code = ord(char)
    if code > 0xFFFF:  # JSON spells it as a surrogate pair
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def json_line(value: Any) -> str:
    """``value`` as one line of JSON (printable non-ASCII kept, the characters above escaped)."""
    return _JSON_UNSAFE.sub(_json_escape, json.dumps(value, ensure_ascii=False))


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
