"""The one exception that means "fail closed".

Every refusal in this project is a :class:`Stopped`. ``run.py`` turns it into one line on stderr,
``STOPPED: <message>``, and exit code 1, with no traceback (design card: bad input gets one clear
line and nothing changes on disk).
"""

from __future__ import annotations


class Stopped(Exception):
    """Fail closed: the files cannot prove what to do next, or the input is unsafe.

    ``str(exc)`` is the single line shown to the user after ``STOPPED: ``.
    Raised by state, ledger and workflow code; never caught and guessed around.
    """

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))  # one line, always


#: The public name of a refusal (``workflow.Refused``); the same class.
Refused = Stopped
