"""How the command line writes a command for a person to paste: ``python run.py ARGV…``, each
argument quoted with ``shlex.quote`` (:func:`command`).

``shlex.quote`` leaves a word of ``A-Za-z0-9@%+=:,./_-`` as it is and wraps anything else in
single quotes. Task IDs, channels and call IDs are checked where they enter
(:data:`state.schema.KEY_PATTERN`, :data:`state.schema.CHANNEL_PATTERN`,
:data:`state.schema.CALL_ID_PATTERN`), so a hint we print is normally plain words that every shell
reads the same (bash, zsh, cmd.exe, PowerShell). A value that still needs quoting (e.g. a call ID
saved by an older version) is single-quoted: a POSIX shell and PowerShell both read
``'…'`` literally, with no ``$(…)``, backtick or variable expansion; only a value holding a single
quote itself is quoted in the POSIX way (``'"'"'``), which PowerShell reads differently (it would
then be a wrong call ID, refused, never a command run). Standard library and
:mod:`state.terminal` only.
"""

from __future__ import annotations

import shlex

from state.terminal import one_line

#: How a printed command starts (the README's commands are run from the project folder).
PROGRAM = "python run.py"
#: The store options this process was given (:func:`use_store`), repeated in every command it
#: prints, so a pasted command acts on the same store.
_STORE_OPTIONS: list[str] = []


def use_store(state_dir: str | None, store: str | None) -> None:
    """Remember the ``--state-dir`` and ``--store`` this process was given (None: not given), for
    :func:`program`. A store URL is repeated without its password
    (:func:`state.settings.url_without_password`)."""
    from state.settings import url_without_password

    _STORE_OPTIONS[:] = [*(["--state-dir", state_dir] if state_dir is not None else []),
                         *(["--store", url_without_password(store)] if store is not None else [])]


def program() -> str:
    """``python run.py`` with the store options of :func:`use_store`, each a quoted shell word:
    how every command printed for a person to paste starts."""
    return " ".join([PROGRAM, *(one_line(shell_word(a)) for a in _STORE_OPTIONS)])


def shell_word(value: str) -> str:
    """``value`` as one shell word (``shlex.quote``): unchanged when it is plain, else single-quoted;
    ``shlex.split`` of the result gives back exactly ``value`` (see the module docstring for
    PowerShell)."""
    return shlex.quote(str(value))


def command(*argv: str) -> str:
    """:func:`program` and ``ARGV…``, each argument quoted by :func:`shell_word` and escaped by
    :func:`state.terminal.one_line` (a newline or an escape sequence is shown, never printed raw),
    e.g. ``command("resume", "--task", "t-1", "--decision", "approve")``."""
    return " ".join([program(), *(one_line(shell_word(a)) for a in argv)])
