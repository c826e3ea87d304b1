"""The one exception that means "fail closed": :class:`Refused`, with a code that says what kind.

Every refusal in this library is a :class:`Refused`. ``str(exc)`` is its one-line message, which
states the facts (what was found, what was not done); ``exc.code`` is one of :data:`CODES`, so a
caller tells refusals apart without reading text; ``exc.data`` holds the values a caller may need
(task ID, call ID …). Where a person has a next step, the message carries it as a :class:`Next`
(an action code and its arguments), never as a command line: a command line (the application's)
renders each :class:`Next` as its own hint text (:meth:`Refused.render`). The publisher's
``run.py`` prints ``STOPPED: <rendered message>`` on stderr and exits 1, with no traceback (bad
input gets one clear line and nothing changes on disk). docs/refusals.md lists the codes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, Union

from state.terminal import one_line

#: Every value of :attr:`Refused.code` (docs/refusals.md, "Codes", says what each means). The
#: decision table's refusals (``workflow.reconcile.REFUSALS``) are codes under their own names.
CODES = frozenset({
    # the decision table (workflow/reconcile.py)
    "conflict", "contradiction", "inconsistent", "no_entry", "executed", "rejected", "decided",
    "expired", "begun", "undecided", "failed",
    # a task, a call or a file that is not there, or not the one asked for
    "not_found", "ambiguous", "usage",
    # what was read cannot be trusted
    "integrity", "foreign_state", "unsupported_version", "ledger_mismatch", "drift",
    "unsafe_state_dir", "unsafe_file",
    # another process, a lock, a revision
    "stale_revision", "locked",
    # input refused before anything is written
    "unsafe_input", "secret", "settings", "budget", "agent", "model",
    # effects through a service (workflow/external.py)
    "in_doubt", "unconfirmed", "effect_conflict", "service_changed", "not_in_doubt", "in_window",
    # team mode (state/reviewers.py, state/policy.py, workflow/team.py)
    "unauthenticated", "not_you", "not_allowed", "policy", "policy_changed", "reviewer_exists",
    "no_reviewer", "already_approved",
    # everything else (a refusal nobody needs to tell apart yet)
    "refused",
})

#: The code of a refusal raised with a message only (``Refused("…")``).
DEFAULT_CODE = "refused"


@dataclass(frozen=True)
class Next:
    """A next step a person may take, as data: ``action`` (a short word the application maps to its
    own hint, e.g. ``"doctor"``, ``"status"``; or, ``input_…``, where the application adds its own
    name for an input, e.g. its flag) and its ``args`` (e.g. the task ID). Placed inside a
    :class:`Refused` message where the hint belongs. ``plain``: the library's own words for it,
    where the step names an input the sentence needs (``str(exc)`` and every caller without hints
    read them); by default nothing."""

    action: str
    args: tuple[str, ...] = ()
    plain: str = ""

    def __init__(self, action: str, *args: str, plain: str = "") -> None:
        object.__setattr__(self, "action", action)
        object.__setattr__(self, "args", tuple(str(a) for a in args))
        object.__setattr__(self, "plain", plain)


Part = Union[str, Next]


def no_hint(step: Next) -> str:
    """The wording of a next step when the caller gives none (``str(exc)``): its ``plain`` words,
    else nothing."""
    return step.plain


class Refused(Exception):
    """Fail closed: the state cannot prove what to do next, or the input is unsafe.

    ``Refused(code, message, **data)``: ``code`` is one of :data:`CODES` (``ValueError`` otherwise,
    so the set stays closed); ``message`` is a string or a sequence of strings and :class:`Next`
    steps; ``data`` are named values for callers (e.g. ``task_id=``). ``Refused(message)`` alone has
    the code :data:`DEFAULT_CODE`. ``str(exc)`` is the message on one line, without hints. Raised by
    state and workflow code; never caught and guessed around.
    """

    code: str
    parts: tuple[Part, ...]
    data: dict[str, Any]

    def __init__(self, code: str, message: Optional[Union[str, Sequence[Part]]] = None,
                 **data: Any) -> None:
        if message is None:
            code, message = DEFAULT_CODE, code
        if code not in CODES:
            raise ValueError(f"unknown refusal code {code!r}; the codes are state.errors.CODES")
        self.code = code
        self.parts = (message,) if isinstance(message, str) else tuple(message)
        self.data = data
        super().__init__(self.render(no_hint))

    @property
    def next_steps(self) -> tuple[Next, ...]:
        """The :class:`Next` steps the message carries, in order."""
        return tuple(p for p in self.parts if isinstance(p, Next))

    def render(self, hint: Callable[[Next], str]) -> str:
        """The message on one line with each :class:`Next` replaced by ``hint(step)`` (the
        application's text for it, e.g. ``" (python run.py doctor)"``; ``""`` leaves it out), and
        every character that is not printable escaped (:func:`state.terminal.one_line`: text from a
        model or a file, such as a tool name or an exception's text, can move no cursor and reorder
        nothing, in whatever prints ``str(exc)``; escaping again changes nothing)."""
        text = "".join(p if isinstance(p, str) else hint(p) for p in self.parts)
        return one_line(" ".join(text.split()))  # one line, always


def lock_busy(what: str, waited: float, holder: str = "another process") -> Refused:
    """The refusal (``locked``) when another holder kept the lock of ``what`` (e.g. ``"task t-1"``)
    for the whole wait of ``waited`` seconds: the same words from every store's lock and from a
    coroutine's wait for it (``workflow.locking.task_lock``, which names the ``holder`` when it is
    another coroutine of this process)."""
    return Refused("locked", f"{what} is being worked on by {holder} (waited {waited:g} s); "
                   "try again when it finishes")
