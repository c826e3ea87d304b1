"""Effects through an external service: what the gate needs to know about the provider, and how a
tool's function tells the gate what happened to a request.

A local effect (the ledger entry is the effect) is exactly once by one exclusive create. An effect
through a service over a network is not: the service can act while its answer is lost, the process
can die after the service acted and before the ledger says so, and a timeout does not say whether
it happened. Exactly once exists only where the provider deduplicates by an idempotency key (the
``Idempotency-Key`` header: the same key again is answered with the first result, never acted on
twice); elsewhere the gate gives at most once, and a human settles what is in doubt
(docs/external-effects.md).

A tool declares its provider with ``effect_tool(..., service=…)`` (:func:`workflow.effect.effect_tool`):
a :class:`Service`, or a callable returning one (or None: no service, the local ledger) read each
time it is needed. The tool's function then sends the request with ``effect.request_key`` as its
idempotency key and returns the service's answer (JSON), or raises one of the three exceptions
below; any other exception means "it may have acted".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional


class NotSent(Exception):
    """Nothing reached the service, provably (the connection was refused, the address did not
    resolve, the service answered 401 before acting): the gate may send again, whatever the
    provider. ``retry=False`` for a cause that another try cannot cure (a wrong token)."""

    def __init__(self, message: str, *, retry: bool = True) -> None:
        super().__init__(message)
        self.retry = retry


class MayHaveActed(Exception):
    """The service may have acted: a timeout after the request was sent, the connection closed
    before the answer, a 5xx. A deduplicating provider is asked again with the same key; with one
    that cannot deduplicate the call is in doubt until a human settles it."""


class Conflict(Exception):
    """The service holds this idempotency key for other content (HTTP 409): never reported as
    done, never sent again by the program; a human must look."""


@dataclass(frozen=True)
class Service:
    """The provider an effect goes through.

    - ``url``: where it is, without credentials (no user, password, query or fragment): recorded in
      the task's checkpoint at start, and a resume under another ``url`` is refused before any
      request;
    - ``deduplicates``: True when the provider honours the ``Idempotency-Key`` (the same key is
      never acted on twice): the gate then sends again with the same key after any failure; False
      when it ignores it: the gate never sends a call twice by itself;
    - ``find(request_key) -> result | None``: ask the provider whether it acted on that key (the
      result is what a send would have returned); only a deduplicating provider has it, and the
      gate asks it before sending again;
    - ``attempts`` (1-10): how many tries one command makes, ``wait_s``: the first pause between
      two tries, in seconds, doubled each time (tenacity's exponential wait, at most 5 s).
    """

    url: str
    deduplicates: bool = True
    find: Optional[Callable[[str], Optional[Any]]] = None
    attempts: int = 3
    wait_s: float = 0.2
