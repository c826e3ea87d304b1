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

import inspect
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
    - ``find(request_key, arguments) -> result | None``: ask the provider whether it acted on
      that key (the result is what a send would have returned), with the call's ``arguments`` to
      compare: a publication under the key with other content must raise :class:`Conflict`, never
      be returned; only a deduplicating provider has it, and the gate asks it before sending again;
    - ``attempts`` (1-10): how many tries one command makes, ``wait_s``: the first pause between
      two tries, in seconds, doubled each time (tenacity's exponential wait, at most 5 s).
    """

    url: str
    deduplicates: bool = True
    find: Optional[Callable[[str, dict[str, Any]], Optional[Any]]] = None
    attempts: int = 3
    wait_s: float = 0.2


def current(service: Any) -> Optional[Service]:
    """``service`` as declared on a tool: a :class:`Service`, None, or a callable returning either
    (asked now, e.g. from settings). Raises ``TypeError`` for anything else."""
    found = service() if callable(service) else service
    if found is not None and not isinstance(found, Service):
        raise TypeError(f"an effect's service must be a workflow.external.Service or None, not {type(found).__name__}")
    return found


def _tries(service: Service, deduplicates: bool) -> Any:
    """tenacity's ``Retrying``: at most ``service.attempts`` tries, exponential waits from
    ``service.wait_s`` (at most 5 s); another try after :class:`NotSent` (unless it says
    ``retry=False``), and after :class:`MayHaveActed` only when the provider ``deduplicates`` (the
    same key cannot act twice). The last exception is raised as it was."""
    from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

    def again(exc: BaseException) -> bool:
        return (isinstance(exc, NotSent) and exc.retry) or (deduplicates and isinstance(exc, MayHaveActed))

    return Retrying(stop=stop_after_attempt(max(1, min(10, service.attempts))),
                    wait=wait_exponential(multiplier=service.wait_s, max=5), retry=retry_if_exception(again),
                    reraise=True)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:300]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _answered(ask: Callable[..., Any]) -> Callable[..., Any]:
    """``ask`` (``send`` or ``find``), its answer refused when it is awaitable: the request it
    stands for has not run, so it is :class:`NotSent` (``retry=False``), never recorded. The gate
    awaits an awaitable on its event loop before handing the answer here."""
    def answered(*args: Any) -> Any:
        answer = ask(*args)
        if inspect.isawaitable(answer):
            getattr(answer, "close", lambda: None)()  # a coroutine: never started, never run
            raise NotSent(f"{getattr(ask, '__qualname__', type(ask).__name__)} answered with an awaitable "
                          "that was not awaited", retry=False)
        return answer
    return answered


def perform(call: Any, service: Service, send: Callable[[Any], Any]) -> tuple[Any, Any, bool]:
    """The protocol of one effect through ``service``, after the gate's checks passed and the
    ledger holds no entry for the call's key (``call``: the gate's ``workflow.effect._Call``;
    ``send(effect)``: the tool's function with the call's arguments). Returns ``(result, entry,
    created)`` as the local path does.

    1. The write-ahead intent of the attempt, durable before any request
       (:meth:`state.store.TaskStore.intent_record`; its ``request_key`` is random, made once, so
       every try of the attempt sends the same ``Idempotency-Key``). An attempt settled as not done
       (:class:`state.records.Settlement`) is followed by a new one.
    2. An intent written by an earlier command (the process died, the service was down, an answer
       was lost): with a deduplicating provider the service is asked (``find``) and then sent the
       same key again; with one that cannot deduplicate nothing is sent: the call is in doubt and
       a human settles it.
    3. The request, retried by :func:`_tries`; the outcome (the service's answer) recorded in the
       ledger; only then is the model told.

    Raises :class:`state.errors.Refused`: ``in_doubt`` (nothing sent by this command: settle it),
    ``unconfirmed`` (not confirmed; the same command sends again with the same key), ``effect_conflict``
    (the service holds the key for other content), ``service_changed`` (an intent for another service).
    """
    from state import failpoints
    from state.clock import now_iso
    from state.errors import Next, Refused
    from state.records import EffectIntent, Settlement, check_intent_for

    store, e = call.store, call.effect
    key, task_id = e.idempotency_key, e.task_id
    intent = store.intent_get(key)
    if intent is not None:
        check_intent_for(intent, task_id=task_id, content_sha256=call.sha, action=e.action)
        if intent.service != service.url:
            raise Refused("service_changed", f"{e.action} for task {task_id}: its effect was begun with the service at "
                          f"{intent.service}, not {service.url}; nothing was sent", task_id=task_id)
    fresh = False
    if intent is None or store.settlement_get(key, intent.attempt) is not None:
        import uuid

        intent, fresh = store.intent_record(EffectIntent(
            idempotency_key=key, attempt=1 if intent is None else intent.attempt + 1, task_id=task_id,
            channel=e.channel, call_id=e.call_id, action=e.action, content_sha256=call.sha,
            request_key=uuid.uuid4().hex, service=service.url, deduplicates=service.deduplicates, at=now_iso()))
    sent = f"{e.action} for task {task_id} on {e.channel}"
    if not fresh and not intent.deduplicates:
        raise Refused("in_doubt", [
            f"{sent} is in doubt: a request was begun at {intent.at} and the service at {intent.service}, "
            "which does not deduplicate, may have acted on it; nothing was sent again; a human must look at "
            "the service and settle it", Next("settle", task_id, e.call_id)], task_id=task_id)
    effect = type(e)(**{**e.__dict__, "request_key": intent.request_key, "attempt": intent.attempt})
    failpoints.hit("effect:request:before")
    try:
        found = None
        if not fresh and service.find is not None:  # ask before sending again: never guess
            try:
                found = _tries(service, True)(_answered(service.find), intent.request_key, call.arguments)
            except (NotSent, MayHaveActed):
                found = None  # the lookup failed: sending again with the same key is as safe
        result = found if found is not None else _tries(service, intent.deduplicates)(_answered(send), effect)
    except Conflict as exc:
        raise Refused("effect_conflict", [
            f"{sent}: the service at {intent.service} holds Idempotency-Key {intent.request_key} for other "
            f"content ({_one_line(exc)}); it was not published by this call; a human must check",
            Next("doctor")], task_id=task_id) from None
    except NotSent as exc:
        if not intent.deduplicates:  # provably not sent: the next command may send it once more
            store.settlement_record(Settlement(idempotency_key=key, attempt=intent.attempt, task_id=task_id,
                                               by="program", at=now_iso(), reason=_one_line(exc)[:500],
                                               source="not_sent"))
        raise Refused("unconfirmed", [
            f"{sent}: nothing reached the service at {intent.service} ({_one_line(exc)}); the approval is "
            "recorded and nothing was published", Next("resume_again", task_id)], task_id=task_id) from None
    except Exception as exc:
        if intent.deduplicates:
            raise Refused("unconfirmed", [
                f"{sent}: the service at {intent.service} did not confirm it ({_one_line(exc)}); it may or may "
                f"not have acted, and a repeat with the same Idempotency-Key cannot act twice",
                Next("resume_again", task_id)], task_id=task_id) from None
        raise Refused("in_doubt", [
            f"{sent} is in doubt: the service at {intent.service}, which does not deduplicate, may have acted "
            f"({_one_line(exc)}); nothing will be sent again by the program; a human must look at the service "
            "and settle it", Next("settle", task_id, e.call_id)], task_id=task_id) from None
    failpoints.hit("effect:request:after")
    return call.record(result)


def effect_status(store: Any, key: str, entry: Any = None, intent: Any = None) -> Optional[dict[str, Any]]:
    """Where the effect of ``key`` stands, for the views (``show``, ``status``, ``ledger``, the inbox,
    ``doctor``): None when no effect through a service was begun for it (the local ledger), else
    ``{"state", "service", "attempt", "request_key", "since", "publication_id", "settled_by",
    "not_sent"}``: ``state`` ``published`` (the ledger entry exists: ``entry`` or read now),
    ``publishing`` (not confirmed; the same resume sends again: with the same ``request_key``, or,
    when ``not_sent`` (``{"by", "at", "reason", "source"}``) says the attempt was settled as not
    done, as attempt ``attempt + 1`` with a new key) or ``in_doubt`` (a provider without deduplication may have acted:
    a human settles it). ``intent``: the key's latest intent when the caller read it already
    (else it is read now). Raises ``Refused`` if a record is damaged."""
    intent = intent if intent is not None else store.intent_get(key)
    if intent is None:
        return None
    entry = entry if entry is not None else store.ledger_get(key)
    settled = None if entry is not None else store.settlement_get(key, intent.attempt)
    if entry is not None:
        state = "published"
    elif intent.deduplicates or settled is not None:
        state = "publishing"
    else:
        state = "in_doubt"
    result = getattr(entry, "result", None)
    pub = result.get("id") if isinstance(result, dict) and isinstance(result.get("id"), str) else None
    return {"state": state, "service": intent.service, "attempt": intent.attempt,
            "request_key": intent.request_key, "since": intent.at, "publication_id": pub,
            "settled_by": getattr(entry, "settled_by", None),
            "not_sent": None if settled is None else {"by": settled.by, "at": settled.at, "reason": settled.reason,
                                                       "source": settled.source}}


def task_effects(store: Any, cp: Any) -> list[dict[str, Any]]:
    """Each channel's effect of ``cp`` that went through a service: ``[{"channel", **effect_status}]``
    (:func:`effect_status`), channels with none left out; ``[]`` for a task with no service
    (``cp.service`` None: nothing is read). Raises ``Refused`` if a record is damaged."""
    if cp.service is None:
        return []
    from state.schema import effect_key

    out = []
    for channel in cp.channels:
        status = effect_status(store, effect_key(cp.task_id, channel, cp.channels))
        if status is not None:
            out.append({"channel": channel, **status})
    return out


#: The statuses a task shows while its effect is not confirmed (the checkpoint stays open).
SHOWN = ("in_doubt", "publishing")


def shown_status(status: str, effects: list[dict[str, Any]]) -> str:
    """The status a person sees: ``in_doubt`` if a call of an open task (``waiting_for_approval``,
    ``budget_exceeded``) is in doubt, else ``publishing`` if one is not confirmed, else ``status``."""
    if status in ("waiting_for_approval", "budget_exceeded"):
        for state in SHOWN:
            if any(e["state"] == state for e in effects):
                return state
    return status
