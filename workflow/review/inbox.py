"""The reviewer's side: the inbox of waiting tasks, the terminal review loop, and expiry sweeps.

Never imports the SDK. ``review`` takes the decision function from its caller (``run.py`` passes one
that imports ``workflow.hitl`` only when a human actually decides), and its prompt function, so
tests drive it with scripted answers.

Expiry (Temporal and DBOS give approval timeouts, the SDK gives none): every approval
request carries ``expires_at`` (``start --expires-in``, default 24h). Past it, ``approve`` is refused
by ``workflow.hitl.resume``; ``reject`` still works; :func:`expire_overdue` marks such tasks
``expired`` (a terminal status: never executed).
"""

from __future__ import annotations

from contextlib import ExitStack

from datetime import datetime
from typing import Any, Callable, Optional

from state import clock
from state.errors import Next, Refused, no_hint
from state.schema import MAX_REASON_CHARS, Checkpoint, check_text, effect_key
from state.revisions import every_checkpoint, every_or_stop
from state.store import TaskStore
from workflow import reconcile
from workflow.calls import decision_of
from workflow.observe.views import one_line, task_view

WAITING = "waiting_for_approval"
#: What ``list --status`` filters on: the stored statuses, and the two a task shows while its
#: approved effect through a service is not confirmed (``publishing``, ``in_doubt``: derived as in
#: :func:`workflow.observe.views.task_view`, the checkpoint itself still waits).
STATUSES = (WAITING, "completed", "cancelled", "expired", "failed", "budget_exceeded", "publishing", "in_doubt")


def waiting_since(cp: Checkpoint) -> str:
    """When the current approval request was made (ISO-8601 UTC): the ``started`` or
    ``interrupted`` event that first asked for the calls now pending. A decision on some calls of a
    turn writes a new ``interrupted`` event for the undecided rest; that is the same request (its
    pending calls are a subset of the previous event's), so its age and its deadline
    (``workflow.guards.interrupted``) both keep counting from the first. A new call (the model's
    next turn) is a new request. The one rule behind ``list``'s age, ``review`` and the inbox."""
    asks = [ev for ev in cp.history if ev.event in ("started", "interrupted")]
    if not asks:
        return cp.created_at
    first = asks[-1]
    for earlier in reversed(asks[:-1]):
        if not set(_asked(first)) <= set(_asked(earlier)):
            break
        first = earlier
    return first.at


def _asked(ev: Any) -> list[str]:
    """The call IDs a ``started``/``interrupted`` history event asked a human about."""
    return [str(c) for c in ev.detail.get("pending") or []]


def overdue(cp: Checkpoint, now: datetime) -> bool:
    """True if ``cp`` waits for a decision that has not been given (``waiting_for_approval``, or
    ``budget_exceeded`` before any decision) and ``expires_at`` has passed."""
    return (cp.status in (WAITING, "budget_exceeded") and cp.decision is None and cp.expires_at is not None
            and now >= clock.parse_iso(cp.expires_at))


def summary(pending: list[dict[str, Any]]) -> str:
    """One line for the pending call(s): a call whose arguments are a title and a body (a draft)
    shows the title and the start of the body, with its length (``publish_draft(title='…',
    body='Version 1.2 fix…' (32 chars))``); any other call shows every argument, each text cut to
    40 characters (``issue_refund(order_id='4417', amount_cents=1999, reason='the parcel arrived
    broken')``)."""
    parts = []
    for p in pending:
        args = p["arguments"]
        if set(args) != {"title", "body"}:  # not a draft: every argument the model proposed
            shown = ", ".join(f"{one_line(str(k))}={_preview(v)!r}" for k, v in args.items())
            parts.append(f"{one_line(p['tool'])}({shown})")
            continue
        body = str(args.get("body", ""))
        parts.append(f"{one_line(p['tool'])}(title={args.get('title')!r}, body={_preview(body)!r} "
                     f"({len(body)} chars))")
    return "; ".join(parts)


def _preview(value: Any) -> Any:
    """``value``, a text cut to its first 39 characters and "…" when longer than 40, its runs of
    white space one space."""
    if not isinstance(value, str):
        return value
    return " ".join((value if len(value) <= 40 else value[:39] + "…").split())


def inbox_entry(store: TaskStore, cp: Checkpoint, now: datetime) -> dict[str, Any]:
    """A task (``workflow.observe.views.task_view`` shape) plus the inbox keys ``waiting_since``,
    ``age_s`` (seconds since the request, int; null unless waiting), ``expires_at``, ``overdue``
    (bool) and ``summary`` (one line); and ``ended`` (``{"by", "at"}``) only for an open task whose
    ``fail`` made its end mark and did not finish (:func:`workflow.reconcile.end_mark`: no decision
    runs, the same fail finishes it). A mark that cannot be read is left to ``doctor``."""
    task = task_view(store, cp)
    since = waiting_since(cp)
    waiting = cp.status == WAITING
    task.update({
        "waiting_since": since if waiting else None,
        "age_s": int((now - clock.parse_iso(since)).total_seconds()) if waiting else None,
        "expires_at": cp.expires_at,
        "overdue": overdue(cp, now),
        "summary": summary(task["pending"]) if waiting else one_line(cp.final_output or "")[:100],
    })
    try:
        mark = reconcile.end_mark(store, cp)
    except Refused:  # a damaged record: doctor names it; the list still shows the task
        mark = None
    if mark is not None:
        task["ended"] = {"by": mark.by, "at": mark.at}
    return task


def inbox_view(store: TaskStore, status: Optional[str] = None) -> dict[str, Any]:
    """``{"tasks": [...]}``: waiting tasks first (oldest request first), then the rest by task ID;
    plus ``"unverified": [{"file", "error"}]``, one per checkpoint that cannot be read or verified
    (signed with another key, edited, damaged), when there is any.

    ``status`` keeps only tasks with that status as shown (one of :data:`STATUSES`). What
    verifies is listed, and what does not is never left out silently: ``run.py list`` prints the
    tasks and then one ``STOPPED:`` line (:func:`unverified_summary`, exit 1). If nothing
    verifies, raises :class:`Refused` naming the first failure (``doctor`` lists them all).
    Raises :class:`Refused` if the store refuses this machine's signing key outright (another
    deployment's key: ``PostgresStore.check_key``).
    """
    now = clock.now()
    good, bad = store.scan()
    if bad and not good:
        every_or_stop(good, bad)
    tasks = [inbox_entry(store, cp, now) for cp in good]
    if status:
        tasks = [t for t in tasks if t["status"] == status]
    tasks.sort(key=lambda t: (t["status"] != WAITING, t["waiting_since"] or "", t["task_id"]))
    return {"tasks": tasks, **({"unverified": bad} if bad else {})}


def unverified_summary(view: dict[str, Any], hint: Callable[[Next], str] = no_hint) -> Optional[str]:
    """One line for the checkpoints :func:`inbox_view` could not list (None if there are none):
    how many, why they can fail, the first one's error, and (``hint`` of ``Next("doctor_lists")``,
    the caller's words) where to see them all."""
    bad = view.get("unverified") or []
    if not bad:
        return None
    n = len(bad)
    what = "1 checkpoint is" if n == 1 else f"{n} checkpoints are"
    return (f"{what} not listed: not verified with this machine's signing key (signed with "
            f"another key, edited or damaged); first: {bad[0]['error']}" + hint(Next("doctor_lists")))


def problem_after(command: str, view: dict[str, Any], hint: Callable[[Next], str] = no_hint) -> Optional[str]:
    """What a read-only ``command`` (``list``, ``doctor``), having printed ``view``, still reports
    as one ``STOPPED:`` line (exit 1), or None: ``list`` with checkpoints it could not verify
    (:func:`unverified_summary`), ``doctor`` that found inconsistencies
    (:func:`workflow.ops.doctor.summary`). ``hint``: the command line's words for a next step.
    Every command line asks it: the publisher's and ``python -m workflow``."""
    if command == "list":
        return unverified_summary(view, hint)
    if command == "doctor" and not view["consistent"]:
        from workflow.ops.doctor import summary

        return summary(view)
    return None


def decided_pending(task: dict[str, Any]) -> list[str]:
    """The IDs of the calls a task (``task_view`` shape) still waits at that have their decision on
    record: a crash cut its run off after the decision, or the run failed; nobody decides them
    again (``doctor`` says how each finishes)."""
    decided = {d["call_id"] for d in task.get("decisions") or []}
    return [p["call_id"] for p in task["pending"] if p["call_id"] in decided]


def inbox_text(view: dict[str, Any]) -> str:
    """The human-readable inbox: one line per task (status, task ID, ``[channels]``, age and expiry
    or revision, summary), every value escaped onto its line. A waiting task with a decision on
    record for a call still pending (a crash cut its run off, or the run failed) says so in place
    of its expiry: nobody needs to decide it again; one a ``fail`` ended without finishing says who
    ended it."""
    lines = []
    for t in view["tasks"]:
        channels = "[" + one_line(",".join(t.get("channels") or [])) + "]"
        if t["status"] == WAITING:
            if t.get("ended"):  # a fail cut after its end mark: no decision runs
                when = f"ENDED by {one_line(t['ended']['by'])}, not finished (the same fail finishes it)"
            elif decided_pending(t):  # a crash, or a run that failed
                when = "decided, not finished (doctor says how)"
            elif t["overdue"]:  # expire leaves a task with a call decided alone
                when = "EXPIRED (reject only)" if t.get("decisions") else "EXPIRED (reject or expire)"
            elif t["expires_at"]:
                left = (clock.parse_iso(t["expires_at"]) - clock.now()).total_seconds()
                when = f"expires in {clock.human_age(left)}"
            else:
                when = "no expiry"
            lines.append(f"WAITING    {one_line(t['task_id'])}  {channels}  {clock.human_age(t['age_s'])} "
                         f"ago, {when}  {one_line(t['summary'])}")
        else:
            lines.append(f"{one_line(t['status']):<10} {one_line(t['task_id'])}  {channels}  "
                         f"rev {t['revision']}  {one_line(t['summary'])}")
    return "\n".join(lines) or "no tasks"


def expire_overdue(store: TaskStore, task_id: Optional[str] = None, *, token: Optional[str] = None,
                   by: Optional[str] = None) -> tuple[list[str], list[str]]:
    """Mark every overdue waiting task (or just ``task_id``) ``expired``; the ``expired`` event
    records who did it (``by``).

    An expiry ends a task as a veto would, so in team mode (a reviewer registered, or ``task_id`` a
    team task) it is an admin's: ``token`` must be the token of a reviewer with the role ``admin``
    (:func:`workflow.team.require_admin`), who is then ``by``. Without reviewers, ``by`` is the name
    given (single-user mode); a task started in team mode is never expired then (the sweep leaves it).

    Returns ``(IDs marked, IDs skipped because another process holds their lock)``. Under each
    task's lock the checkpoint is reloaded and checked again: a task with a ledger entry (it
    executed in time) or a rejection record (a reject was decided) is never expired. The sweep
    only locks tasks that look overdue, and skips a busy one instead of stopping half-way. Raises
    :class:`Refused` if ``task_id`` is given and is not overdue or is busy, and
    (``unauthenticated``, ``not_allowed``) for a token that is not an admin's, nothing changed.
    """
    from workflow import team

    done: list[str] = []
    busy: list[str] = []
    first = store.load(task_id) if task_id else None
    if team.is_team(store, first):
        by = team.require_admin(store, token, "expiring a task").name
        admin = True
    else:
        admin = False
    if task_id:
        ids = [task_id]
        _check_expirable(store, first)  # before the lock: a refusal leaves no file
    else:
        now = clock.now()
        ids = [cp.task_id for cp in every_checkpoint(store) if overdue(cp, now) and (admin or not _team_task(cp))]
    for tid in ids:
        with ExitStack() as stack:
            try:
                stack.enter_context(store.task_lock(tid))
            except Refused:
                if task_id:
                    raise
                busy.append(tid)
                continue
            cp = store.load(tid)
            if task_id:
                _check_expirable(store, cp)
            elif reconcile.check(store, cp, "expire").kind != "expire":
                continue
            if _team_task(cp) and not admin:  # fail closed: never expired without an admin
                continue
            store.save_revision(
                cp, failpoint="checkpoint:expired", status="expired", pending=[],
                event=("expired", {"expires_at": cp.expires_at, "by": by,
                                   "pending": [p.call_id for p in cp.pending]}))
            done.append(tid)
    return done, busy


def _team_task(cp: Checkpoint) -> bool:
    """True if ``cp`` was started in team mode (its decisions need a reviewer's token)."""
    return cp.team is not None and cp.team.authenticated


def _check_expirable(store: TaskStore, cp: Checkpoint) -> None:
    """Raise :class:`Refused` unless the decision table lets ``expire`` mark ``cp`` expired: ``begun``
    when an effect of the task was begun (an intent with no outcome: it may have happened), else
    ``usage``. Every date the message names is a record's (the deadline, the intent's ``at``) or
    :func:`state.clock.now`'s, the clock the deadline was judged on (moved by ``HITL_NOW``)."""
    if reconcile.check(store, cp, "expire").kind == "expire":
        return
    now = clock.now()
    dates = f"deadline {cp.expires_at or 'none'}, the clock says {clock.iso(now)}"
    for channel in cp.channels:
        key = effect_key(cp.task_id, channel, cp.channels)
        if reconcile.begun_of(store, cp, key) is not None:
            intent = store.intent_get(key)
            raise Refused("begun", [
                f"task {cp.task_id}: its effect on {channel} was begun at {intent.at if intent else '?'} (an intent "
                f"is recorded, no outcome yet), so it may have happened; it is never marked expired ({dates})",
                Next("doctor_explains")], task_id=cp.task_id)
    if cp.status not in (WAITING, "budget_exceeded"):  # ended: no request waits to expire
        raise Refused("usage", f"task {cp.task_id} is {cp.status}: no approval request of it waits, so none "
                      "expires; nothing changed")
    if cp.expires_at is None or now < clock.parse_iso(cp.expires_at):
        raise Refused("usage", f"task {cp.task_id} is not overdue ({dates}); nothing changed")
    raise Refused("usage", f"task {cp.task_id} is past its deadline but not an undecided approval request "
                  f"(status {cp.status}{_decided(cp)}; {dates}); only those are marked expired")


def _decided(cp: Checkpoint) -> str:
    """``", decision 'approved' by ann"`` for the task's last decision on record, or ``""``."""
    last = cp.decision or (cp.decisions[-1] if cp.decisions else None)
    return "" if last is None else f", decision {last.decision!r} by {last.by}"


Ask = Callable[[str], str]
Say = Callable[[str], None]
Decide = Callable[..., dict[str, Any]]


def _show_call(say: Say, p: Any) -> None:
    """One pending call: its tool, call ID and arguments, the ``body`` as an indented draft."""
    say(f"  tool: {one_line(p.tool)}   call_id: {one_line(p.call_id)}")
    for k, v in p.arguments.items():
        if k != "body":
            say(f"  {one_line(k)}: {v!r}")
    body = p.arguments.get("body")
    if body is not None:
        say("  draft:")
        lines = str(body).removesuffix("\n").split("\n")  # only a newline breaks a line: U+2028
        say("\n".join("    | " + one_line(line) for line in lines))  # and the like are shown escaped


def review(store: TaskStore, *, ask: Ask, say: Say, decide: Decide,
           hint: Callable[[Next], str] = no_hint) -> dict[str, Any]:
    """Walk the waiting tasks: show tool, arguments and the draft; ask approve / reject / skip.

    ``ask(prompt) -> answer`` reads one line (``input`` in a terminal; scripted in tests);
    ``say(text)`` prints; ``decide(task_id, "approve"|"reject", reason, call_id) -> task`` applies
    a decision to the call shown (``workflow.hitl.resume``), never to one the model asked for
    after it was shown; each decision already on record is shown first (``call ID on channel:
    approved by NAME``); for a task waiting at several calls (one per channel) each call still
    undecided is shown and asked on its own, until the task stops waiting; where every call has its
    decision already (a run stopped after them), the calls are shown and asked once, for the
    first call: the same decision again finishes the run. Answers:
    ``a``/``approve``, ``r``/``reject`` (then a reason, required), ``s``/``skip``, ``q``/``quit``.
    An overdue request cannot be approved (the refusal is shown and the question asked again). A
    ``Refused`` from ``decide`` is shown (its next steps worded by ``hint``, the caller's words for
    them, e.g. ``cli.hints.hint``; default none) and the walk goes on with the next task. End of
    input (``EOFError``) stops the walk like ``quit``.

    Returns ``{"reviewed": [{"task_id", "action", "status"|"error"}, …], "remaining": int}``, one
    item per answer (with ``"call_id"`` for a call of a task with several).
    """
    view = inbox_view(store, WAITING)
    tasks = view["tasks"]
    note = unverified_summary(view)
    if note:
        say(f"NOTE: {note}")
    if not tasks:
        say("Nothing waits for review.")
        return {"reviewed": [], "remaining": 0}
    reviewed: list[dict[str, Any]] = []
    for n, task in enumerate(tasks, 1):
        cp = store.load(task["task_id"])
        say(f"[{n}/{len(tasks)}] task {one_line(cp.task_id)}  waiting {clock.human_age(task['age_s'])}"
            + ("  (EXPIRED: approve is refused)" if task["overdue"] else
               f"  (expires {cp.expires_at})" if cp.expires_at else ""))
        for d in cp.decisions:  # what was decided on the task's calls so far, before anything is asked
            say(f"  call {one_line(d.call_id)} on {one_line(d.channel)}: {d.decision} by {one_line(d.by)}")
        asked = [p for p in cp.pending if decision_of(cp, p.call_id) is None]
        several = len(cp.pending) > 1 and bool(asked)  # else one call, or every call decided: ask once
        if not several:
            for p in cp.pending:
                _show_call(say, p)
            asked = cp.pending[:1]  # the first call (with its decision, the same again finishes the run)
        quit_now = False
        for p in asked:
            if several:
                _show_call(say, p)
            try:
                action, reason = _ask_action(ask, say, overdue_now=task["overdue"])
            except EOFError:
                action, reason = "quit", None
            if action == "quit":
                quit_now = True
                break
            item: dict[str, Any] = {"task_id": cp.task_id, "action": action}
            if several:
                item["call_id"] = p.call_id
            if action == "skip":
                reviewed.append({**item, "status": cp.status})
                continue
            try:
                result = decide(cp.task_id, action, reason, p.call_id)
            except Refused as exc:
                say(f"  STOPPED: {one_line(exc.render(hint))}")
                reviewed.append({**item, "error": exc.render(hint)})
                break
            say(f"  -> {result['status']} (revision {result['revision']})")
            reviewed.append({**item, "status": result["status"]})
            if result["status"] != "waiting_for_approval":
                break
        if quit_now:
            break
    remaining = len(inbox_view(store, WAITING)["tasks"])
    return {"reviewed": reviewed, "remaining": remaining}


def _ask_reason(ask: Ask, say: Say) -> Optional[str]:
    """Ask for a reject's reason until one is valid; None after two empty answers in a row."""
    empty = 0
    while empty < 2:
        reason = ask("  reason (sent to the model): ").strip()
        if not reason:
            empty += 1
            say("  a reject needs a reason" + (" (empty again: back to the question)" if empty == 2 else ""))
            continue
        try:
            return check_text(reason, what="reason", limit=MAX_REASON_CHARS, single_line=False)
        except ValueError as exc:
            say(f"  {exc}")
    return None


def _ask_action(ask: Ask, say: Say, *, overdue_now: bool) -> tuple[str, Optional[str]]:
    while True:
        answer = ask("  approve / reject / skip / quit? [a/r/s/q] ").strip().lower()
        if answer in ("a", "approve"):
            if overdue_now:
                say("  approval expired: this request can only be rejected or skipped")
                continue
            return "approve", None
        if answer in ("r", "reject"):
            reason = _ask_reason(ask, say)
            if reason is None:  # given up on (empty twice): back to the question
                continue
            return "reject", reason
        if answer in ("s", "skip", ""):
            return "skip", None
        if answer in ("q", "quit"):
            return "quit", None
        say("  please answer a, r, s or q")


def pick_task(store: TaskStore, task_id: str | None, *, waiting_only: bool) -> str:
    """``task_id`` if given, else the only task (``waiting_only``: the only one still waiting
    for a decision); raises :class:`Refused` naming the candidates when there is not exactly one."""
    if task_id:
        return task_id
    candidates = [cp.task_id for cp in every_checkpoint(store)
                  if not waiting_only or cp.status in ("waiting_for_approval", "budget_exceeded")]
    if len(candidates) == 1:
        return candidates[0]
    what = "waiting tasks" if waiting_only else "tasks"
    if not candidates:
        raise Refused("not_found", [f"no {what} in {getattr(store, 'location', store.root)}", Next("give_task")])
    names = ", ".join(candidates[:20])
    raise Refused("ambiguous", [f"{len(candidates)} {what} ({names})", Next("give_task")])
