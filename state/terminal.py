"""Text for a person at a terminal: values escaped onto one line, commands quoted for pasting.

Two rules for everything the command line prints (docs/commands.md, "What is printed"):

- a value that comes from a model or a file (a call ID, a title, a body, a reason, a name, a
  channel, the final output, a file name) goes through :func:`one_line`, so it cannot add a line,
  move the cursor or reorder what a reviewer reads;
- a command printed for a person to paste (``next: python run.py resume --task … --call …``) is
  built by :func:`command`, each argument quoted with ``shlex.quote``.

``shlex.quote`` leaves a word of ``A-Za-z0-9@%+=:,./_-`` as it is and wraps anything else in
single quotes. Task IDs, channels and call IDs are checked where they enter
(:data:`state.schema.KEY_PATTERN`, :data:`state.schema.CHANNEL_PATTERN`,
:data:`state.schema.CALL_ID_PATTERN`), so a hint we print is normally plain words that every shell
reads the same (bash, zsh, cmd.exe, PowerShell). A value that still needs quoting (e.g. a call ID
saved by an older version) is single-quoted: a POSIX shell and PowerShell both read
``'…'`` literally, with no ``$(…)``, backtick or variable expansion; only a value holding a single
quote itself is quoted in the POSIX way (``'"'"'``), which PowerShell reads differently (it would
then be a wrong call ID, refused, never a command run). Never imports anything but the standard
library.
"""

from __future__ import annotations

import shlex

#: How a printed command starts (the README's commands are run from the project folder). The
#: publisher's command line (``cli.hints``) builds its hints with it; in the library only
#: ``workflow/ops/doctor.py`` still does (its actions are text; tests/test_layers.py counts it).
PROGRAM = "python run.py"


def one_line(text: str) -> str:
    """``text`` safe to print on one terminal line: every character that is not printable
    (newline, carriage return, escape sequences, C1 controls, bidi and zero-width marks …) is shown
    escaped (``\\n``, ``\\x1b``, ``\\u202e``), so model output or a reason cannot forge lines, move the
    cursor or reorder what a reviewer reads. Printable text (any script) is kept as it is."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in str(text))


def shell_word(value: str) -> str:
    """``value`` as one shell word (``shlex.quote``): unchanged when it is plain, else single-quoted;
    ``shlex.split`` of the result gives back exactly ``value`` (see the module docstring for
    PowerShell)."""
    return shlex.quote(str(value))


def command(*argv: str) -> str:
    """``python run.py ARGV…`` with each argument quoted by :func:`shell_word` and escaped by
    :func:`one_line` (a newline or an escape sequence is shown, never printed raw), e.g.
    ``command("resume", "--task", "t-1", "--decision", "approve")``."""
    return " ".join([PROGRAM, *(one_line(shell_word(a)) for a in argv)])
