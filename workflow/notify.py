"""Signed webhook notifications: one event for each change a reviewer or an operator acts on,
delivered at least once, in order per task, from an outbox that cannot lose an event.

**The outbox is derived, not written.** Every change a person acts on is already written in one
atomic step, and that write is what an event is read from:

- a checkpoint revision, by compare-and-swap, with one ``history`` event (``started`` and
  ``interrupted``: a call waits; ``approval_recorded``; ``decision_recorded``: approved or rejected;
  ``completed``, ``cancelled``, ``failed``, ``expired``, ``budget_exceeded``);
- a settlement a person recorded (``settle --outcome not-published``: a record created
  exclusively, no revision), and a ledger entry with ``settled_by`` (``settle --outcome
  published``);
- *in doubt* is not a change that is written: it is the state of an effect whose write-ahead intent
  exists at a provider that cannot deduplicate, with neither a ledger entry nor a settlement
  (:func:`workflow.external.effect_status`). Its event is derived while that state holds; one that
  was settled before ``notify`` ever saw it is announced by its ``task.settled`` event alone.

So an event exists as soon as its change does: a crash after the change and before any delivery
loses nothing, and the next ``notify`` sends it. Each event's ``webhook-id`` is derived from the
store's identity (``state_id``), the task and the event's place (revision, or effect key and
attempt), so every try and every rerun sends the same ID, and the receiver dedupes by it.

**Only the delivery progress is a record** (:class:`state.notify.Progress`, per task, written by
compare-and-swap): the IDs delivered, the ones given up (visible in ``notify --list``), and the one
in flight with its tries, when it is due again and its last error. It is written only after the
receiver's answer: a process killed between the request and that write sends the event again.

**Order per task.** A task's events go out one at a time in the order of their changes; the next
is sent only once the one before was delivered, or given up after ``HITL_WEBHOOK_ATTEMPTS``
tries (it then stays listed as failed, and the task's later events go on: a receiver that
refuses one event forever must not silence the task). Tasks do not wait for each other.

**The request.** ``POST`` of the JSON body (:func:`body_of`) to ``HITL_WEBHOOK_URL`` with the
Standard Webhooks headers ``webhook-id``, ``webhook-timestamp`` (unix seconds, the time of this
try) and ``webhook-signature`` (``v1,`` + base64 HMAC-SHA256, with the base64-decoded
``HITL_WEBHOOK_SECRET``, over ``id.timestamp.body``: :func:`signed_headers`, the
``standardwebhooks`` package's ``Webhook.sign``). Any 2xx answer delivers it; anything else (a
3xx too: redirects are not followed), a timeout (``HITL_WEBHOOK_TIMEOUT``) or a transport error is
a failed try, tried again after ``HITL_WEBHOOK_FIRST_WAIT`` seconds, doubled after each failure, at
most :data:`state.settings.MAX_WEBHOOK_WAIT_S`. Due times are written on the wall clock and judged
on :func:`state.clock.now` (``HITL_NOW`` can only make an event due sooner).

The body holds IDs, names, statuses and the command to run next (shell-quoted by the command line's
renderer), never a draft, a title, a reason or a secret. Never imports the SDK.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional

from state import clock, failpoints
from state.errors import Next, Refused
from state.notify import MAX_ERROR_CHARS, Failed, InFlight, Progress
from state.schema import Checkpoint, effect_key
from state.settings import MAX_WEBHOOK_WAIT_S, settings
from state.terminal import one_line

#: History event → the webhook event type (events not listed are not notified: ``resumed``,
#: ``effect_bound``). ``decision_recorded`` becomes ``task.approved`` or ``task.rejected``.
TYPES = {"started": "task.waiting", "interrupted": "task.waiting", "approval_recorded": "task.approval_recorded",
         "completed": "task.completed", "cancelled": "task.cancelled", "failed": "task.failed",
         "expired": "task.expired", "budget_exceeded": "task.budget_exceeded"}
#: Every event type this module sends.
EVENT_TYPES = ("task.waiting", "task.approval_recorded", "task.approved", "task.rejected", "task.completed",
               "task.cancelled", "task.failed", "task.in_doubt", "task.settled", "task.expired",
               "task.budget_exceeded")
#: The status each event type reports: the task's status right after the change (``in_doubt`` and
#: ``settled`` name the state of the call's effect).
STATUS_OF = {"task.waiting": "waiting_for_approval", "task.approval_recorded": "waiting_for_approval",
             "task.approved": "waiting_for_approval", "task.rejected": "waiting_for_approval",
             "task.completed": "completed", "task.cancelled": "cancelled", "task.failed": "failed",
             "task.expired": "expired", "task.budget_exceeded": "budget_exceeded",
             "task.in_doubt": "in_doubt", "task.settled": "settled"}
#: Seconds a ``notify`` loop sleeps at most before it looks for new events again.
POLL_S = 2.0
#: The most of a receiver's answer read (its status is all that counts).
MAX_ANSWER_BYTES = 64 * 1024


@dataclass(frozen=True)
class Event:
    """One notification: ``id`` (its ``webhook-id``), ``task_id``, ``type`` (:data:`EVENT_TYPES`),
    ``at`` (ISO-8601 UTC: when the change was written), ``data`` (the body's ``data`` without
    ``next``), ``next`` (the step a person takes, rendered by the caller's ``hint``; None: none)."""

    id: str
    task_id: str
    type: str
    at: str
    data: dict[str, Any]
    next: Optional[Next] = field(default=None, compare=False)


def webhook_id(store_id: str, task_id: str, place: str) -> str:
    """The ``webhook-id`` of the event at ``place`` (``r<revision>``, ``settled:<key>:<attempt>`` …)
    of ``task_id`` in the store ``store_id``: ``msg_`` + 32 hex characters of SHA-256, the same
    in every process and on every try."""
    digest = hashlib.sha256("\x00".join((store_id, task_id, place)).encode("utf-8")).hexdigest()
    return f"msg_{digest[:32]}"


def _channel(cp: Checkpoint, detail: dict[str, Any]) -> Optional[str]:
    if isinstance(detail.get("channel"), str):
        return detail["channel"]
    return cp.channels[0] if len(cp.channels) == 1 else None


def _waiting(cp: Checkpoint, detail: dict[str, Any]) -> tuple[list[dict[str, Any]], Optional[str]]:
    """The calls a ``started``/``interrupted`` event asked about: ``[{"call_id", "channel"}]`` (no
    arguments: the draft stays out of the body), and the one call ID when there is one."""
    calls = []
    for c in detail.get("calls", []) if isinstance(detail.get("calls"), list) else []:
        args = c.get("arguments") if isinstance(c, dict) else None
        channel = args.get("channel") if isinstance(args, dict) and isinstance(args.get("channel"), str) else None
        calls.append({"call_id": str(c.get("call_id")), "channel": channel or _channel(cp, {})})
    return calls, calls[0]["call_id"] if len(calls) == 1 else None


def history_events(cp: Checkpoint) -> list[Event]:
    """The events of ``cp``'s history (one per notifiable revision, oldest first)."""
    sid = cp.state_id or ""
    out = []
    for h in cp.history:
        detail = h.detail
        if h.event == "decision_recorded":
            kind = "task.approved" if detail.get("decision") == "approved" else "task.rejected"
        elif h.event in TYPES:
            kind = TYPES[h.event]
        else:
            continue
        data: dict[str, Any] = {"task_id": cp.task_id, "revision": h.revision, "call_id": detail.get("call_id"),
                                "channel": _channel(cp, detail), "status": STATUS_OF[kind]}
        step: Optional[Next] = Next("notify_show", cp.task_id)
        if kind == "task.waiting":
            calls, one = _waiting(cp, detail)
            data.update(call_id=one, channel=calls[0]["channel"] if len(calls) == 1 else data["channel"],
                        calls=calls, expires_at=detail.get("expires_at"))
            several = [calls[0]["call_id"]] if len(calls) > 1 else []  # as status's next: names the first
            step = Next("notify_decide", cp.task_id, *several)
        elif kind == "task.approval_recorded":
            data.update(by=detail.get("by"), approvals=detail.get("approvals"), required=detail.get("required"))
            reached = isinstance(detail.get("approvals"), int) and isinstance(detail.get("required"), int) \
                and detail["approvals"] >= detail["required"]
            data["quorum_reached"] = reached
            # the approval that reaches the quorum asks nobody to approve again: the call runs now
            step = Next("notify_show", cp.task_id) if reached else Next("notify_decide", cp.task_id,
                                                                        str(detail.get("call_id")))
        elif kind in ("task.approved", "task.rejected"):
            data.update(by=detail.get("by"))
        elif kind in ("task.failed", "task.expired"):
            data.update(by=detail.get("by"))
        elif kind == "task.budget_exceeded":
            step = Next("notify_budget", cp.task_id)
        out.append(Event(webhook_id(sid, cp.task_id, f"r{h.revision}"), cp.task_id, kind, h.at, data, step))
    return out


def effect_events(store: Any, cp: Checkpoint) -> list[Event]:
    """The events of ``cp``'s effects through a service: each settlement a person recorded, each
    ledger entry a person settled, and each effect in doubt now. ``[]`` for a task without a
    service. Raises ``Refused`` if a record is damaged."""
    if cp.service is None:
        return []
    from workflow.external import effect_status

    sid, out = cp.state_id or "", []
    for channel in cp.channels:
        key = effect_key(cp.task_id, channel, cp.channels)
        intent = store.intent_get(key)
        if intent is None:
            continue
        base = {"task_id": cp.task_id, "call_id": intent.call_id, "channel": channel}
        for attempt in range(1, intent.attempt + 1):
            found = store.settlement_get(key, attempt)
            if found is not None and found.source == "human":
                out.append(Event(webhook_id(sid, cp.task_id, f"settled:{key}:{attempt}"), cp.task_id, "task.settled",
                                 found.at, {**base, "status": "settled", "outcome": "not_published", "attempt": attempt,
                                            "by": found.by}, Next("notify_show", cp.task_id)))
        entry = store.ledger_get(key)
        if entry is not None and entry.settled_by:
            out.append(Event(webhook_id(sid, cp.task_id, f"settled:{key}:published"), cp.task_id, "task.settled",
                             entry.published_at, {**base, "status": "settled", "outcome": "published",
                                                  "attempt": intent.attempt, "by": entry.settled_by},
                             Next("notify_show", cp.task_id)))
        status = effect_status(store, key, entry=entry, intent=intent, cp=cp)
        if status is not None and status["state"] == "in_doubt":
            out.append(Event(webhook_id(sid, cp.task_id, f"in_doubt:{key}:{intent.attempt}"), cp.task_id,
                             "task.in_doubt", intent.at, {**base, "status": "in_doubt", "attempt": intent.attempt,
                                                          "window_ends": status.get("window_ends")},
                             Next("doctor_settle", cp.task_id, intent.call_id)))
    return out


def task_events(store: Any, cp: Checkpoint) -> list[Event]:
    """Every event of ``cp``'s task, in the order of their changes: the history's in revision order
    (whatever its timestamps say), each effect record's after the last revision written at or
    before its ``at``."""
    found, latest = [], ""
    for i, e in enumerate(history_events(cp)):
        latest = max(latest, e.at)  # revisions keep their order even if a clock stepped back
        found.append((latest, 0, i, e))
    found += [(e.at, 1, i, e) for i, e in enumerate(effect_events(store, cp))]
    return [e for *_, e in sorted(found, key=lambda t: t[:3])]


def body_of(event: Event, hint: Callable[[Next], str]) -> bytes:
    """The request body of ``event``: compact JSON (sorted keys, UTF-8) ``{"type", "timestamp",
    "data": {"task_id", "call_id", "channel", "status", …, "next"}}``; ``timestamp`` is when the
    change was written (ISO-8601 UTC), ``next`` the command a person runs next (``hint`` renders
    it: :data:`cli.hints.HINTS`), or null. The same bytes on every try."""
    data = {**event.data, "next": hint(event.next) if event.next is not None else None}
    return json.dumps({"type": event.type, "timestamp": event.at, "data": data}, sort_keys=True,
                      separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def signed_headers(secret: str, msg_id: str, at_unix: int, body: bytes) -> dict[str, str]:
    """The Standard Webhooks headers of one try: ``webhook-id``, ``webhook-timestamp`` (``at_unix``,
    seconds) and ``webhook-signature`` (``v1,<base64 HMAC-SHA256 over id.timestamp.body>`` with the
    base64-decoded ``secret``, ``whsec_…``), plus ``content-type``."""
    from datetime import datetime, timezone

    from standardwebhooks import Webhook

    signature = Webhook(secret).sign(msg_id, datetime.fromtimestamp(at_unix, tz=timezone.utc), body)
    return {"webhook-id": msg_id, "webhook-timestamp": str(at_unix), "webhook-signature": signature,
            "content-type": "application/json"}


@dataclass(frozen=True)
class Target:
    """Where and how to deliver: ``url``, ``secret`` (``whsec_…``), ``timeout`` (seconds per
    request), ``first_wait`` (seconds before the second try), ``attempts`` (tries before an event
    is given up)."""

    url: str
    secret: str = field(repr=False)
    timeout: float
    first_wait: float
    attempts: int


def target() -> Target:
    """The :class:`Target` of the settings. Raises :class:`Refused` (``settings``) if
    ``HITL_WEBHOOK_URL`` or ``HITL_WEBHOOK_SECRET`` is unset (or a setting is bad)."""
    s = settings()
    missing = [name for name, v in (("HITL_WEBHOOK_URL", s.webhook_url), ("HITL_WEBHOOK_SECRET", s.webhook_secret))
               if not v]
    if missing:
        raise Refused("settings", f"notify needs {' and '.join(missing)} (docs/reviewers.md#notifications); "
                      "nothing was sent")
    assert s.webhook_url is not None and s.webhook_secret is not None
    return Target(s.webhook_url, s.webhook_secret, s.webhook_timeout, s.webhook_first_wait, s.webhook_attempts)


def wait_after(first_wait: float, attempts: int) -> float:
    """Seconds before the next try of an event that failed ``attempts`` times (1, 2, …):
    ``first_wait * 2 ** (attempts - 1)``, at most :data:`state.settings.MAX_WEBHOOK_WAIT_S`."""
    return min(first_wait * 2.0 ** min(attempts - 1, 60), MAX_WEBHOOK_WAIT_S)


def post(client: Any, target_: Target, event: Event, body: bytes) -> Optional[str]:
    """One try of ``event``: None if the receiver answered 2xx, else a one-line error (its status,
    a timeout, a transport error). Reads at most :data:`MAX_ANSWER_BYTES` of the answer."""
    import httpx

    headers = signed_headers(target_.secret, event.id, int(clock.wall().timestamp()), body)
    failpoints.hit("notify:send:before")
    try:
        with client.stream("POST", target_.url, content=body, headers=headers) as answer:
            for chunk in answer.iter_bytes():
                if len(chunk) >= MAX_ANSWER_BYTES:
                    break
            code = answer.status_code
    except httpx.TimeoutException:
        return f"no answer within {target_.timeout:g} s"
    except httpx.HTTPError as exc:
        return one_line(f"{type(exc).__name__}: {exc}")[:MAX_ERROR_CHARS]
    failpoints.hit("notify:send:after")
    return None if 200 <= code < 300 else f"HTTP {code}"


def _client(target_: Target) -> Any:
    import httpx

    return httpx.Client(timeout=httpx.Timeout(target_.timeout), follow_redirects=False, trust_env=False)


def _pending(events: list[Event], progress: Optional[Progress]) -> list[Event]:
    done = progress.done() if progress is not None else set()
    return [e for e in events if e.id not in done]


def _tasks(store: Any) -> Iterator[Checkpoint]:
    """Every checkpoint that verifies (``notify`` skips a damaged one: ``doctor`` names it)."""
    found, _bad = store.scan()
    yield from found


def deliver(store: Any, target_: Target, hint: Callable[[Next], str], *, client: Any = None) -> dict[str, Any]:
    """One pass: for each task, send its due events in order until one fails (or all are sent).

    Returns ``{"action": "notify", "url", "delivered": [{"id", "task_id", "type"}], "retrying":
    [{"id", "task_id", "type", "attempts", "next_due", "last_error"}], "failed": [… "at"] (given
    up in this pass), "waiting": N (events not due yet or behind one not delivered), "busy":
    [task IDs whose progress another notify wrote meanwhile], "next_due": the earliest due time
    of an event tried before, or None}``. Raises ``Refused`` if the store cannot be read."""
    own = client is None
    client = _client(target_) if own else client
    out: dict[str, Any] = {"action": "notify", "url": target_.url, "delivered": [], "retrying": [], "failed": [],
                           "waiting": 0, "busy": [], "next_due": None}
    try:
        for cp in _tasks(store):
            try:
                _deliver_task(store, cp, target_, hint, client, out)
            except Refused as exc:
                if exc.code != "stale_revision":
                    raise
                out["busy"].append(cp.task_id)
    finally:
        if own:
            client.close()
    return out


def _deliver_task(store: Any, cp: Checkpoint, target_: Target, hint: Callable[[Next], str], client: Any,
                  out: dict[str, Any]) -> None:
    """Send the due events of ``cp``'s task in order (see :func:`deliver`)."""
    progress = store.notify_get(cp.task_id)
    pending = _pending(task_events(store, cp), progress)
    for i, event in enumerate(pending):
        flight = progress.inflight if progress is not None and progress.inflight is not None \
            and progress.inflight.id == event.id else None
        if flight is not None and clock.parse_iso(flight.next_due) > clock.now():
            out["waiting"] += len(pending) - i
            out["next_due"] = min(filter(None, (out["next_due"], flight.next_due)))
            return
        error = post(client, target_, event, body_of(event, hint))
        attempts = (flight.attempts if flight is not None else 0) + 1
        base = progress.model_dump() if progress is not None else {"task_id": cp.task_id, "version": 0}
        base["version"] += 1
        shown = {"id": event.id, "task_id": cp.task_id, "type": event.type}
        if error is None:
            new = Progress.model_validate({**base, "delivered": [*base.get("delivered", []), event.id],
                                           "inflight": None})
            store.notify_save(progress, new)
            out["delivered"].append(shown)
        elif attempts >= target_.attempts:
            gave_up = Failed(id=event.id, type=event.type, attempts=attempts, last_error=error, at=clock.now_iso())
            new = Progress.model_validate({**base, "failed": [*base.get("failed", []), gave_up.model_dump()],
                                           "inflight": None})
            store.notify_save(progress, new)
            out["failed"].append({**shown, **gave_up.model_dump(exclude={"id", "type"})})
        else:
            due = clock.iso(clock.plus(clock.wall(), wait_after(target_.first_wait, attempts)))
            flying = InFlight(id=event.id, type=event.type, attempts=attempts, next_due=due, last_error=error)
            new = Progress.model_validate({**base, "inflight": flying.model_dump()})
            store.notify_save(progress, new)
            out["retrying"].append({**shown, **flying.model_dump(exclude={"id", "type"})})
            out["waiting"] += len(pending) - i - 1
            out["next_due"] = min(filter(None, (out["next_due"], due)))
            return
        progress = new


def retry_failed(store: Any, hint: Callable[[Next], str], *, client: Any = None) -> dict[str, Any]:
    """``notify --retry-failed``: send each event given up (after ``HITL_WEBHOOK_ATTEMPTS`` tries)
    once more, with its own ``webhook-id``, after the task's later events (a receiver orders by the
    body's ``timestamp``). One that the receiver now takes moves from failed to delivered; one it
    still refuses stays failed, its tries and last error brought up to date. Each write is the
    next version of the task's progress, by compare-and-swap, as :func:`deliver` writes it.

    Returns ``{"action": "notify_retry", "url", "delivered": [{"id", "task_id", "type"}],
    "failed": [{"id", "task_id", "type", "attempts", "last_error", "at"}], "busy": [task IDs]}``.
    Raises ``Refused`` (``settings``) before anything is sent if the settings are missing, and if
    the store cannot be read."""
    target_ = target()
    own = client is None
    client = _client(target_) if own else client
    out: dict[str, Any] = {"action": "notify_retry", "url": target_.url, "delivered": [], "failed": [], "busy": []}
    try:
        for cp in _tasks(store):
            progress = store.notify_get(cp.task_id)
            if progress is None or not progress.failed:
                continue
            events = {e.id: e for e in task_events(store, cp)}
            try:
                for gone in list(progress.failed):
                    event = events.get(gone.id)
                    if event is None:  # its change is no longer in the store's history: nothing to send
                        continue
                    error = post(client, target_, event, body_of(event, hint))
                    base = progress.model_dump()
                    others = [f for f in base["failed"] if f["id"] != gone.id]
                    shown = {"id": event.id, "task_id": cp.task_id, "type": event.type}
                    if error is None:
                        new = Progress.model_validate({**base, "version": base["version"] + 1, "failed": others,
                                                       "delivered": [*base["delivered"], event.id]})
                        out["delivered"].append(shown)
                    else:
                        again = Failed(id=event.id, type=event.type, attempts=gone.attempts + 1, last_error=error,
                                       at=clock.now_iso())
                        new = Progress.model_validate({**base, "version": base["version"] + 1,
                                                       "failed": [*others, again.model_dump()]})
                        out["failed"].append({**shown, **again.model_dump(exclude={"id", "type"})})
                    store.notify_save(progress, new)
                    progress = new
            except Refused as exc:
                if exc.code != "stale_revision":
                    raise
                out["busy"].append(cp.task_id)
    finally:
        if own:
            client.close()
    return out


def outbox(store: Any, hint: Callable[[Next], str]) -> dict[str, Any]:
    """What ``notify --list`` shows, sending nothing: ``{"action": "notify_list", "url" (or None),
    "tasks": [{"task_id", "events", "delivered", "pending": [{"id", "type", "at"}], "inflight":
    {…} | None, "failed": [{"id", "type", "attempts", "last_error", "at"}]}], "totals": {"events",
    "delivered", "pending", "failed"}}`` (only tasks with events). Raises ``Refused`` if the store
    cannot be read."""
    rows, totals = [], {"events": 0, "delivered": 0, "pending": 0, "failed": 0}
    for cp in _tasks(store):
        events = task_events(store, cp)
        if not events:
            continue
        progress = store.notify_get(cp.task_id)
        pending = _pending(events, progress)
        ids = {e.id for e in events}
        delivered = len([d for d in (progress.delivered if progress else []) if d in ids])
        failed = [f.model_dump() for f in (progress.failed if progress else [])]
        rows.append({"task_id": cp.task_id, "events": len(events), "delivered": delivered,
                     "pending": [{"id": e.id, "type": e.type, "at": e.at} for e in pending],
                     "inflight": progress.inflight.model_dump() if progress and progress.inflight else None,
                     "failed": failed})
        totals["events"] += len(events)
        totals["delivered"] += delivered
        totals["pending"] += len(pending)
        totals["failed"] += len(failed)
    return {"action": "notify_list", "url": settings().webhook_url, "tasks": rows, "totals": totals}


def run(store: Any, hint: Callable[[Next], str], *, once: bool, sleep: Callable[[float], None] = time.sleep,
        on_pass: Optional[Callable[[dict[str, Any]], None]] = None) -> dict[str, Any]:
    """``notify``: :func:`deliver` once (``once``), or pass after pass until interrupted (Ctrl-C),
    sleeping until the next event is due, at most :data:`POLL_S` seconds (new events are looked for
    as often). ``on_pass`` sees each pass's report. Returns the totals of every pass in the shape
    of :func:`deliver`'s report. Raises ``Refused`` (``settings``) before anything is sent if the
    settings are missing."""
    target_ = target()
    total: dict[str, Any] = {"action": "notify", "url": target_.url, "delivered": [], "retrying": [], "failed": [],
                             "waiting": 0, "busy": [], "next_due": None, "passes": 0}
    with _client(target_) as client:
        try:
            while True:
                report = deliver(store, target_, hint, client=client)
                total["passes"] += 1
                for k in ("delivered", "retrying", "failed"):
                    total[k] += report[k]
                total.update(waiting=report["waiting"], busy=report["busy"], next_due=report["next_due"])
                if on_pass is not None:
                    on_pass(report)
                if once:
                    break
                wait = POLL_S
                if report["next_due"] is not None:
                    wait = max(0.0, min(wait, (clock.parse_iso(report["next_due"]) - clock.now()).total_seconds()))
                sleep(wait)
        except KeyboardInterrupt:
            pass
    return total
