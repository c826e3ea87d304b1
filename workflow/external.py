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
import threading
from dataclasses import dataclass
from typing import Any, Callable, Optional


class NotSent(Exception):
    """Nothing reached the service, provably: no connection was made (refused, the address did not
    resolve, the connect timed out), or the client never finished writing the request. Never for
    an answer: any answer at all means the request arrived. The gate may send again, whatever the
    provider. ``retry=False`` for a cause that another try cannot cure (a URL the client cannot
    send to)."""

    def __init__(self, message: str, *, retry: bool = True) -> None:
        super().__init__(message)
        self.retry = retry


class MayHaveActed(Exception):
    """The request arrived, or may have: any answer that is not the outcome (a 4xx, a 5xx, an
    answer too large or not what the contract says), a timeout after the request was sent, the
    connection closed before the answer. A deduplicating provider is asked again with the same key
    (in this command only when ``retry`` is True: a ``400`` gets the same answer however often it
    is sent); with one that cannot deduplicate the call is in doubt until a human settles it."""

    def __init__(self, message: str, *, retry: bool = True) -> None:
        super().__init__(message)
        self.retry = retry


class NotDeduplicating(Exception):
    """The provider shows that it does not deduplicate by the key, though the tool declares that it
    does (its lookup by key does not exist: HTTP 404). A request already sent may have acted, and
    one sent again may act again: the program never sends the call again; a human settles it."""


class Conflict(Exception):
    """The service holds this idempotency key for other content (HTTP 409 from a deduplicating
    provider): never reported as done, never sent again by the program; a human must look and
    settle it. From a provider that cannot deduplicate, a 409 is only an answer: in doubt."""


def _key_in(record: Any) -> Optional[str]:
    """The ``idempotency_key`` a provider's record holds (a dict's ``"idempotency_key"``), or None."""
    found = record.get("idempotency_key") if isinstance(record, dict) else None
    return found if isinstance(found, str) else None


@dataclass(frozen=True)
class Service:
    """The provider an effect goes through.

    - ``url``: where it is, without credentials (no user, password, query or fragment): recorded in
      the task's checkpoint at start, and a resume under another ``url`` is refused before any
      request;
    - ``deduplicates``: True when the provider honours the ``Idempotency-Key`` (the same key is
      never acted on twice): the gate then sends again with the same key after any failure; False
      when it ignores it: the gate never sends a call twice by itself;
    - ``find(request_key, arguments) -> record | None``: ask the provider whether it acted on
      that key (the record is what a send would have returned), with the call's ``arguments`` to
      compare: a record under the key with other content must raise :class:`Conflict`, never
      be returned; only a deduplicating provider has it, and the gate asks it before sending again.
      A record counts only if ``key_of(record)`` is the attempt's own key (a provider that ignores
      an unknown query parameter answers with every record it holds): any other is ignored, and the
      call is sent again with the same key, which such a provider never acts on twice;
    - ``key_of(record) -> str | None``: the idempotency key a provider's record holds (default: a
      dict's ``"idempotency_key"``);
    - ``attempts`` (1-10): how many tries one command makes, ``wait_s``: the first pause between
      two tries, in seconds, doubled each time (tenacity's exponential wait, at most 5 s);
    - ``timeout_s``: the longest one try may take, in seconds (the tool's function must give up by
      then), and ``settle_after_s``: how long after a try was given up the provider may still act
      on a request it received. Together they make the attempt's window
      (:func:`window_s`): until it ends, nobody may settle the attempt as not done.
    """

    url: str
    deduplicates: bool = True
    find: Optional[Callable[[str, dict[str, Any]], Optional[Any]]] = None
    attempts: int = 3
    wait_s: float = 0.2
    timeout_s: float = 30.0
    settle_after_s: float = 300.0
    key_of: Callable[[Any], Optional[str]] = _key_in


def current(service: Any) -> Optional[Service]:
    """``service`` as declared on a tool: a :class:`Service`, None, or a callable returning either
    (asked now, e.g. from settings). Raises ``TypeError`` for anything else."""
    found = service() if callable(service) else service
    if found is not None and not isinstance(found, Service):
        raise TypeError(f"an effect's service must be a workflow.external.Service or None, not {type(found).__name__}")
    return found


def _tries_of(service: Service) -> int:
    return max(1, min(10, service.attempts))


def window_s(service: Service) -> float:
    """Seconds from the moment a command begins sending an attempt until no request of it can
    still act: the lookup's and the sends' tries, each given up after ``timeout_s``, the pauses
    between them (at most 5 s each), and ``settle_after_s``. An upper bound, never less."""
    tries = _tries_of(service)
    one_round = tries * max(0.0, service.timeout_s) + sum(min(5.0, service.wait_s * 2 ** i) for i in range(tries - 1))
    rounds = 2 if (service.deduplicates and service.find is not None) else 1
    return rounds * one_round + max(0.0, service.settle_after_s)


#: What :func:`request_key` signs: not a JSON object, so never the canonical JSON of a record.
REQUEST_KEY_LABEL = b"hitl effect request key v1"


def request_key(signing_key: bytes, state_id: Optional[str], idempotency_key: str, attempt: int) -> str:
    """The ``Idempotency-Key`` of ``attempt`` of the effect ``idempotency_key``: 32 hex characters
    of HMAC-SHA256 under the deployment's ``signing_key`` over the store's ``state_id``, the effect
    key (the task and its channel) and the attempt number. Derived, never stored only in a file: a
    state dir restored from a backup sends the same key again (and a deduplicating provider answers
    with the first result), while two tasks, two channels, two attempts or two deployments (another
    key or another store) never share one."""
    import hashlib
    import hmac
    import json

    message = REQUEST_KEY_LABEL + b"\n" + json.dumps([state_id or "", idempotency_key, attempt]).encode("utf-8")
    return hmac.new(signing_key, message, hashlib.sha256).hexdigest()[:32]


def _tries(service: Service, deduplicates: bool) -> Any:
    """tenacity's ``Retrying``: at most ``service.attempts`` tries, exponential waits from
    ``service.wait_s`` (at most 5 s); another try after :class:`NotSent` (unless it says
    ``retry=False``), and after :class:`MayHaveActed` only when the provider ``deduplicates`` (the
    same key cannot act twice) and it says ``retry``. The last exception is raised as it was."""
    from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

    def again(exc: BaseException) -> bool:
        return ((isinstance(exc, NotSent) and exc.retry)
                or (deduplicates and isinstance(exc, MayHaveActed) and exc.retry))

    return Retrying(stop=stop_after_attempt(_tries_of(service)),
                    wait=wait_exponential(multiplier=service.wait_s, max=5), retry=retry_if_exception(again),
                    reraise=True)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if len(text) > 300:  # cut at a word, and say so
        text = text[:300].rsplit(" ", 1)[0] + " …"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def window_open(window_ends: Optional[str]) -> Optional[str]:
    """``window_ends`` (ISO-8601 UTC) if it is still ahead on the wall clock: a request of the
    attempt may still reach the provider and act; else None. Judged on the wall clock, never the
    test seam ``HITL_NOW``: moving that forward must not end a window early."""
    from state.clock import parse_iso, wall

    return window_ends if window_ends is not None and wall() < parse_iso(window_ends) else None


def advice(window_ends: Optional[str]) -> str:
    """What a person does about an effect that may have happened, its attempt's window ending at
    ``window_ends`` (ISO-8601 UTC, or None: unknown or over; :func:`window_open`): look at the
    service; if the effect is there, settle it published at once; if not, and the window is still
    open, wait until it ends (a request may still act until then), look again, then settle it."""
    if window_open(window_ends):
        return (f"a human looks at the service: if it is there, settle it as published now; if not, wait until "
                f"{window_ends} (a request may still reach it and act until then), look again, then settle it")
    return "a human looks at the service, then settles it"


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


def _attempt_of(store: Any, cp: Any, key: str, task_id: str, action: str, sha: str) -> tuple[Any, Any]:
    """The latest attempt of ``key``: ``(intent or None, binding or None)``, checked against each
    other. Raises :class:`Refused` (``integrity``, nothing sent) when the checkpoint binds an
    attempt whose intent is missing or holds another key (a record deleted or edited by hand), and
    (``ledger_mismatch``) when the intent is for another task, action or content."""
    from state.records import check_intent_for

    intent = store.intent_get(key)
    if intent is not None:
        check_intent_for(intent, task_id=task_id, content_sha256=sha, action=action)
    bound = check_bound(cp, key, intent, action)
    return intent, bound


def check_bound(cp: Any, key: str, intent: Any, action: str = "the effect") -> Any:
    """The :class:`state.schema.EffectBinding` of ``key`` in ``cp`` (or None) after checking that the
    intent the store holds (``intent``, or None) is the one it binds, or a later attempt. Raises
    :class:`Refused` (``integrity``): an intent missing for a bound attempt, or one under another
    key, was deleted or edited by hand; nothing may be judged from what is left."""
    from state.errors import Next, Refused

    bound = cp.binding(key)
    if bound is not None and (intent is None or intent.attempt < bound.attempt
                              or (intent.attempt == bound.attempt and intent.request_key != bound.request_key)):
        raise Refused("integrity", [
            f"{action} for task {cp.task_id}: the checkpoint records that attempt {bound.attempt} of its effect was "
            f"begun (Idempotency-Key {bound.request_key}), but its intent record is "
            f"{'missing' if intent is None or intent.attempt < bound.attempt else 'for another key'}; it may have "
            "happened; nothing was sent; a human must check", Next("doctor")], task_id=cp.task_id)
    return bound


def next_attempt(store: Any, intent: Any, what: str, task_id: str, done: str = "sent") -> Optional[int]:
    """The number of the attempt of an effect to begin now, after ``intent`` (its key's latest
    :class:`state.records.EffectIntent`, or None): 1 when there is none, the next one once it was
    settled not done; None while it is open (an earlier command began it, and it goes on under its
    own key). Used by the protocol through a service (:func:`perform`) and by a local effect
    (``workflow.effect``). Raises :class:`Refused` (``refused``, its message ending "nothing was
    ``done``") past :data:`state.records.MAX_ATTEMPTS`. Reads the settlement only."""
    from state.errors import Next, Refused
    from state.records import MAX_ATTEMPTS

    if intent is not None and store.settlement_get(intent.idempotency_key, intent.attempt) is None:
        return None
    attempt = 1 if intent is None else intent.attempt + 1
    if attempt > MAX_ATTEMPTS:
        raise Refused("refused", [f"{what}: its effect was tried {MAX_ATTEMPTS} times, each found not done; "
                                  f"nothing was {done}", Next("or_fail", task_id)], task_id=task_id)
    return attempt


def _later(a: Optional[str], b: Optional[str]) -> Optional[str]:
    """The later of two ISO-8601 UTC times (either may be None)."""
    from state.clock import parse_iso

    return max((t for t in (a, b) if t is not None), key=parse_iso, default=None)


def rebased(store: Any, cp: Any) -> Any:
    """``cp`` as a writer that started from it must now write after it: the newest checkpoint when
    every revision since ``cp`` only bound an attempt of an effect through a service (event
    ``effect_bound``, written by :func:`perform`: another call of the same run, the calls of one
    turn running side by side), else ``cp`` itself (its compare-and-swap then refuses a write that
    another process overtook). Reads only."""
    latest = store.load(cp.task_id)
    if (latest.revision, latest.mac) == (cp.revision, cp.mac):
        return cp
    later = [h for h in latest.history if h.revision > cp.revision]
    ours = ({h.revision for h in later} == set(range(cp.revision + 1, latest.revision + 1))
            and all(h.event == "effect_bound" for h in later))
    return latest if ours else cp


#: One lock per task for binding an attempt (:func:`perform`): the calls of one turn run side by
#: side in this process, each binding its own effect into the one checkpoint.
_BINDING: dict[str, threading.Lock] = {}
_BINDING_GUARD = threading.Lock()


def _binding_lock(task_id: str) -> threading.Lock:
    with _BINDING_GUARD:
        return _BINDING.setdefault(task_id, threading.Lock())


def perform(call: Any, service: Service, send: Callable[[Any], Any]) -> tuple[Any, Any, bool]:
    """The protocol of one effect through ``service``, after the gate's checks passed and the
    ledger holds no entry for the call's key (``call``: the gate's ``workflow.effect._Call``, with
    the checkpoint it verified; ``send(effect)``: the tool's function with the call's arguments).
    Returns ``(result, entry, created)`` as the local path does.

    1. The write-ahead intent of the attempt, durable before any request
       (:meth:`state.store.TaskStore.intent_record`), with the end of its window. Its
       ``request_key`` is derived (:func:`request_key`), so every try of the attempt, and any copy
       of the state dir, sends the same ``Idempotency-Key``. An attempt settled as not done is
       followed by a new one, with the provider's kind the first attempt was made with. Once it is
       there, a task ended meanwhile (``fail``'s end mark, or a checkpoint ``failed``, ``cancelled``
       or ``expired``) stops the call, no request sent (``workflow.effect._Call.after_intent``).
    2. The attempt bound into the signed checkpoint (:class:`state.schema.EffectBinding`, event
       ``effect_bound``), its window never shortened, before any request; an intent missing for a
       bound attempt stops the call.
    3. An attempt an earlier command began (its intent is there, whether or not it was bound): with
       a deduplicating provider the service is asked (``find``; a record counts only under this
       attempt's key) and then sent the same key again; with one that cannot deduplicate nothing is
       sent: the call is in doubt and a human settles it.
    4. The request, retried by :func:`_tries`, the lookup asked before each retry, and the records
       read again right before each try (an attempt settled or taken over by another process
       meanwhile is never sent); the outcome recorded in the ledger; only then is the model told.

    Raises :class:`state.errors.Refused`: ``in_doubt`` (nothing sent by this command: settle it),
    ``unconfirmed`` (not confirmed; the same command sends again with the same key), ``effect_conflict``
    (the service holds the key for other content), ``service_changed`` (an intent for another
    service, or another kind of provider), ``integrity`` (a bound attempt's intent is missing),
    ``stale_revision`` (another process took the attempt over, or ended the task), ``failed`` (``fail``
    ended it), ``refused`` (the most attempts made).
    """
    from datetime import timedelta

    from state import failpoints, open_stores
    from state.clock import iso, now_iso, wall
    from state.errors import Next, Refused
    from state.integrity import load_key
    from state.records import EffectIntent
    from state.schema import EffectBinding

    store, e, cp = call.store, call.effect, call.cp
    key, task_id = e.idempotency_key, e.task_id
    what = f"{e.action} for task {task_id} on {e.channel}"
    # the same command: it names the call where several wait (a resume without it is refused there)
    again = Next("resume_again", task_id, *((e.call_id,) if len(cp.pending) > 1 else ()))
    intent, bound = _attempt_of(store, cp, key, task_id, e.action, call.sha)
    if intent is not None and (intent.service, intent.deduplicates) != (service.url, service.deduplicates):
        kind = {True: "deduplicates", False: "does not deduplicate"}
        raise Refused("service_changed", [
            f"{what}: its effect was begun with the service at {intent.service}, which {kind[intent.deduplicates]}, "
            f"but this process has the service at {service.url}, which {kind[service.deduplicates]}; nothing was "
            "sent", Next("shows_status", task_id)], task_id=task_id)
    started = wall()
    window = window_s(service)
    attempt = next_attempt(store, intent, what, task_id)
    fresh = attempt is not None
    if attempt is not None:
        derived = request_key(load_key(store.root, create=False), cp.state_id, key, attempt)
        intent, fresh = store.intent_record(EffectIntent(
            idempotency_key=key, attempt=attempt, task_id=task_id, channel=e.channel, call_id=e.call_id,
            action=e.action, content_sha256=call.sha, request_key=derived, service=service.url,
            deduplicates=service.deduplicates, at=iso(started),
            window_ends=iso(started + timedelta(seconds=window))))
    if not fresh and not intent.deduplicates:  # begun by an earlier command: it may have acted
        ends = _later(intent.window_ends, bound.window_ends if bound and bound.attempt == intent.attempt else None)
        raise Refused("in_doubt", [
            f"{what} is in doubt: a request was begun at {intent.at} and the service at {intent.service}, which "
            f"does not deduplicate, may have acted on it; nothing was sent again; {advice(ends)}",
            Next("settle", task_id, e.call_id)], task_id=task_id)
    call.after_intent(intent, fresh)  # a fail, reject or expiry that came first: no request
    # bound before any request, its window never shortened: a deleted intent is then detected
    mine = bound if bound is not None and bound.attempt == intent.attempt else None
    binding = EffectBinding(idempotency_key=key, attempt=intent.attempt, request_key=intent.request_key,
                            sent_at=iso(started), window_ends=_later(
                                iso(started + timedelta(seconds=window)), mine.window_ends if mine else None) or "")
    def bind(onto: Any) -> Any:
        return store.save_revision(onto, failpoint="checkpoint:effect", event=("effect_bound", {
            "idempotency_key": key, "attempt": intent.attempt, "call_id": e.call_id,
            "window_ends": binding.window_ends}), effects=[*(b for b in onto.effects if b.idempotency_key != key),
                                                            binding])

    with _binding_lock(task_id):  # the calls of one turn bind one after the other
        cp = open_stores.newest(call.run, cp)  # after another call of this run bound its own
        try:
            bound_cp = bind(cp)
        except Refused as exc:  # another call of this turn bound its own effect since: after it
            onto = rebased(store, cp) if exc.code == "stale_revision" else cp
            if onto is cp:
                raise
            bound_cp = bind(onto)
        open_stores.advance(call.run, bound_cp)  # the run's outcome is written after it
    effect = type(e)(**{**e.__dict__, "request_key": intent.request_key, "attempt": intent.attempt})
    failures: list[BaseException] = []  # each failed try of this command

    def still_mine() -> None:
        """Right before a request: the attempt is not settled, and the checkpoint still binds it as
        this command did (no other process took it over while this one waited, whatever the lock
        files say). Raises :class:`Refused`, nothing sent."""
        latest = store.load(task_id)
        if latest.binding(key) != binding or store.settlement_get(key, intent.attempt) is not None:
            raise Refused("stale_revision", [
                f"{what}: while this command waited, another process settled or took over attempt "
                f"{intent.attempt} (revision {bound_cp.revision} -> {latest.revision}); nothing was sent by this "
                "command", Next("shows_status", task_id)], task_id=task_id)

    def look_up() -> Any:
        """The provider's record under this attempt's key, or None (a failed lookup: sending again
        with the same key is as safe); :class:`NotDeduplicating` goes through."""
        try:
            found = _tries(service, True)(_answered(service.find), intent.request_key, call.arguments)
        except (NotSent, MayHaveActed):
            return None
        # another key's record (a lookup that ignored the key) is never adopted
        return found if found is not None and service.key_of(found) == intent.request_key else None

    def one_try(effect: Any) -> Any:
        if failures and isinstance(failures[-1], MayHaveActed) and service.find is not None:
            found = look_up()  # ask before sending again, in this command too: never guess
            if found is not None:
                return found
        still_mine()
        try:
            return _answered(send)(effect)
        except Exception as exc:
            failures.append(exc)
            raise

    failpoints.hit("effect:request:before")
    try:
        found = look_up() if not fresh and service.find is not None else None  # ask before sending again
        result = found if found is not None else _tries(service, intent.deduplicates)(one_try, effect)
    except NotDeduplicating as exc:
        raise Refused("in_doubt", [
            f"{what} is in doubt: the service at {intent.service} shows it does not deduplicate by the key "
            f"({_one_line(exc)}), though it is declared to; a request of it may have acted, and nothing will be sent "
            f"again by the program; {advice(binding.window_ends)}", Next("settle", task_id, e.call_id)],
            task_id=task_id) from None
    except Conflict as exc:
        if intent.deduplicates:
            raise Refused("effect_conflict", [
                f"{what}: the service at {intent.service} holds Idempotency-Key {intent.request_key} for other "
                f"content ({_one_line(exc)}); it was not {call.done} by this call; a human must look "
                "at the service and settle it", Next("settle", task_id, e.call_id)], task_id=task_id) from None
        exc_for_doubt: BaseException = exc
    except NotSent as exc:
        # provably not sent, at a provider that cannot deduplicate: no try of this command reached it,
        # and this command began the attempt; the next one sends it once more, as a new attempt. A
        # deduplicating provider keeps the attempt: sending its key again is always safe, and a
        # local "not sent" can be wrong (a restored state dir forgets an earlier send)
        if all(isinstance(f, NotSent) for f in failures) and fresh:
            if not intent.deduplicates:
                from state.records import Settlement

                store.settlement_record(Settlement(idempotency_key=key, attempt=intent.attempt, task_id=task_id,
                                                   by="program", at=now_iso(), reason=_one_line(exc)[:500],
                                                   source="not_sent"))
            raise Refused("unconfirmed", [
                f"{what}: nothing reached the service at {intent.service} ({_one_line(exc)}); the approval is "
                f"recorded and nothing was {call.done}", again,
                *([] if intent.deduplicates else [Next("or_fail", task_id)])], task_id=task_id) from None
        raise Refused("unconfirmed", [
            f"{what}: the service at {intent.service} did not confirm it (the last try: {_one_line(exc)}; an "
            "earlier request of this attempt may have reached it, and a repeat with the same Idempotency-Key cannot "
            "act twice)", again], task_id=task_id) from None
    except Refused:
        raise  # still_mine: nothing sent
    except Exception as exc:
        if intent.deduplicates:
            raise Refused("unconfirmed", [
                f"{what}: the service at {intent.service} did not confirm it ({_one_line(exc)}); it may or may "
                f"not have acted, and a repeat with the same Idempotency-Key cannot act twice",
                again], task_id=task_id) from None
        exc_for_doubt = exc
    else:
        failpoints.hit("effect:request:after")
        return call.record(result)
    raise Refused("in_doubt", [
        f"{what} is in doubt: the service at {intent.service}, which does not deduplicate, may have acted "
        f"({_one_line(exc_for_doubt)}); nothing will be sent again by the program; {advice(binding.window_ends)}",
        Next("settle", task_id, e.call_id)], task_id=task_id) from None


def effect_status(store: Any, key: str, entry: Any = None, intent: Any = None,
                  cp: Any = None) -> Optional[dict[str, Any]]:
    """Where the effect of ``key`` stands, for the views (``show``, ``status``, ``ledger``, the inbox,
    ``doctor``): None when no effect through a service was begun for it (the local ledger), else
    ``{"state", "service", "attempt", "request_key", "since", "publication_id", "settled_by",
    "not_sent", "sent", "window_ends"}``: ``state`` ``published`` (the ledger entry exists: ``entry``
    or read now), ``publishing`` (not confirmed; the same resume sends again: with the same
    ``request_key``, or, when ``not_sent`` (``{"by", "at", "reason", "source"}``) says the attempt was
    settled as not done, as attempt ``attempt + 1`` with a new key),
    ``in_doubt`` (a provider without deduplication may have acted: a human settles it) or
    ``not_published`` (found not done, and the task ended ``failed``: none will be).
    ``sent``: a request of the attempt may have been sent (it was begun, and not found not done);
    ``window_ends``: until when a request of it could still act (ISO-8601 UTC, the later of the
    intent's and the checkpoint's binding's; None: not known). ``intent``: the key's latest intent
    when the caller read it already (else it is read now); ``cp``: the task's checkpoint, whose
    binding is checked against the intent.
    Raises ``Refused`` if a record is damaged, or a bound attempt's intent is missing."""
    intent = intent if intent is not None else store.intent_get(key)
    bound = check_bound(cp, key, intent) if cp is not None else None  # a deleted intent: raises
    if intent is None:
        return None
    entry = entry if entry is not None else store.ledger_get(key)
    settled = None if entry is not None else store.settlement_get(key, intent.attempt)
    mine = bound if bound is not None and bound.attempt == intent.attempt else None
    sent = settled is None  # an attempt begun may have been sent, unless it was found not done
    if entry is not None:
        state = "published"
    elif cp is not None and cp.status == "failed" and not sent:
        state = "not_published"  # found not done, and the task ended: it never will be
    elif intent.deduplicates or settled is not None or not sent:
        state = "publishing"
    else:
        state = "in_doubt"
    result = getattr(entry, "result", None)
    pub = result.get("id") if isinstance(result, dict) and isinstance(result.get("id"), str) else None
    return {"state": state, "service": intent.service, "attempt": intent.attempt,
            "request_key": intent.request_key, "since": intent.at, "publication_id": pub,
            "settled_by": getattr(entry, "settled_by", None),
            "not_sent": None if settled is None else {"by": settled.by, "at": settled.at, "reason": settled.reason,
                                                       "source": settled.source},
            "sent": sent, "window_ends": _later(intent.window_ends, mine.window_ends if mine else None) if sent
            else None}


def task_effects(store: Any, cp: Any) -> list[dict[str, Any]]:
    """Each channel's effect of ``cp`` that went through a service: ``[{"channel", **effect_status}]``
    (:func:`effect_status`), channels with none left out; ``[]`` for a task with no service
    (``cp.service`` None: nothing is read). Raises ``Refused`` if a record is damaged."""
    if cp.service is None:
        return []
    from state.schema import effect_key

    out = []
    for channel in cp.channels:
        status = effect_status(store, effect_key(cp.task_id, channel, cp.channels), cp=cp)
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
