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


def one_line(text: str) -> str:
    """``text`` safe to print on one terminal line: every character that is not printable
    (newline, carriage return, escape sequences, C1 controls, bidi and zero-width marks …) is shown
    escaped (``\\n``, ``\\x1b``, ``\\u202e``), so model output or a reason cannot forge lines, move the
    cursor or reorder what a reviewer reads. Printable text (any script) is kept as it is."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in str(text))
