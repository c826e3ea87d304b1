"""Code graders of finished tasks: the outcome (what the world holds) and the trajectory (the path
the signed checkpoint records), so that ``completed`` is never taken on trust.

A task's ``status`` is what the program concluded; the outcome is what happened. :func:`evaluate`
grades each finished task (``completed``, ``cancelled``, ``expired``, ``failed``) with plain code,
no model:

- **Outcome**, per channel, from the ledger (the effect itself, or the record of it): a completed
  task holds exactly one entry per approved channel (unless a person ended the task with that call
  given up: noted), under its idempotency key, for this task and action, with the approved content
  (:meth:`state.schema.Checkpoint.expected_sha256`: the content started with, or what a reviewer
  approved with edits); a channel never approved, and every channel of a task that ended
  ``cancelled`` or ``failed``, holds none (an expired task may hold what was approved before it
  expired); an entry recorded as needing no human sits only on a channel whose calls never waited
  for one; no entry of the task sits under a key that is not one of its channels'. A task whose effect goes through a
  service is also asked at the service (``find`` of the application's :class:`workflow.Service`)
  under every request key its attempts used or would use (derived, so a task that never sent
  anything is asked too): exactly one record after an approval, none otherwise, and a record under
  the key holding other content is a failure.
- **Trajectory**, from the checkpoint's history, decisions and approvals: the task starts with its
  request and its revisions follow one another; it ends once, last, as its status says; every
  effect comes after the approval that ran it and the approvals counted for its quorum (the number
  the rule the task started under asks for, without the requester where the rule says so) and
  never after a reject of its channel; every
  reject's message reached the model (the RunState holds the call's answer, with the reason when
  one was given); every call the model made was decided, or the task ended with it waiting.

A task with an effect in doubt (:func:`workflow.external.shown_status`: ``in_doubt`` or
``publishing``) is ``IN DOUBT``, never a pass. A service that cannot be asked (not configured in
this process, unreachable, or without a lookup by key) leaves a note: the task is then graded on
the ledger alone, and says so. What the graders cannot see: a service that lies
about its own records, an effect outside the ledger and the service (a tool that acts elsewhere),
and anything that happened to a task whose checkpoint was deleted. Never imports the SDK unless a
task's effect went through a service (to ask it, the application's tool is built).

Shape of :func:`evaluate`'s result (also ``run.py eval --json``)::

    {"tasks": [{"task_id", "status", "result": "PASS" | "FAIL" | "IN DOUBT",
                "findings": [{"check": "outcome: …" | "trajectory: …", "what": str}, …],
                "notes": [str, …]}, …],
     "summary": {"pass": int, "fail": int, "in_doubt": int, "not_finished": int},
     "problems": [str, …],   # checkpoints (or the ledger) that could not be read: each a FAIL
     "store": str}           # where the tasks were read (a folder, or the database's name)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Optional

from state.schema import Checkpoint, Decision, effect_key
from state.store import TaskStore, location_of
from state.terminal import one_line
from state.timestamps import parse_iso_or_none

#: The statuses a task ends in: only these are graded.
FINISHED = ("completed", "cancelled", "expired", "failed")
#: The history events that end a task.
ENDINGS = FINISHED


@dataclass(frozen=True)
class Finding:
    """One failed check: ``check`` (``"outcome: <rule>"`` or ``"trajectory: <rule>"``) and
    ``what`` (what differs, one line)."""

    check: str
    what: str


@dataclass
class Graded:
    """One task's grade: ``result`` ``PASS``, ``FAIL`` (one finding or more) or ``IN DOUBT`` (an
    effect not confirmed: never a pass)."""

    task_id: str
    status: str
    findings: list[Finding] = field(default_factory=list)
    in_doubt: Optional[str] = None
    #: What was not checked, and why (e.g. the service could not be asked): graded on the ledger.
    notes: list[str] = field(default_factory=list)

    @property
    def result(self) -> str:
        if self.findings:
            return "FAIL"
        return "IN DOUBT" if self.in_doubt else "PASS"

    def to_json(self) -> dict[str, Any]:
        found = [{"check": f.check, "what": f.what} for f in self.findings]
        if self.in_doubt and not self.findings:
            found = [{"check": "outcome: confirmed", "what": self.in_doubt}]
        return {"task_id": self.task_id, "status": self.status, "result": self.result, "findings": found,
                "notes": list(self.notes)}


@dataclass(frozen=True)
class Asked:
    """What the service holds for one channel of a task: the ``records`` found under its request
    keys; or ``conflict`` (a record under a key holds other content: the provider's own words); or
    ``not_asked`` (why it could not be asked: graded on the ledger, noted)."""

    records: tuple[Any, ...] = ()
    conflict: Optional[str] = None
    not_asked: Optional[str] = None


#: ``ask(cp, channel) -> Asked``: how the service of a task is asked.
Asker = Callable[[Checkpoint, str], Asked]


def evaluate(store: TaskStore, app: Any = None, *, task_id: Optional[str] = None,
             since: Optional[str] = None) -> dict[str, Any]:
    """Grade every finished task of ``store`` (or only ``task_id``; only tasks updated at or after
    ``since``, an ISO-8601 time): the result shape is in the module docstring. ``app``: the
    :class:`workflow.Application` whose tool's service is asked for tasks whose effect went through
    one (None: such a task is graded on the ledger, with a note that its service was not asked). Raises
    :class:`state.errors.Refused` for an unknown ``task_id`` or a ``since`` that is not a time."""
    from state.errors import Refused

    after = since_time(since) if since is not None else None
    problems: list[str] = []
    if task_id is not None:
        checkpoints = [store.load(task_id)]
    else:
        checkpoints, bad = store.scan()
        problems = [one_line(f"unreadable checkpoint: {b.get('error', '?')}") for b in bad]
    try:
        entries = store.ledger_entries()
    except Refused as exc:  # fail closed: with the ledger unreadable no outcome can be judged
        return {"tasks": [], "summary": {"pass": 0, "fail": 1, "in_doubt": 0, "not_finished": 0},
                "problems": [*problems, one_line(f"unreadable ledger, nothing graded: {exc}")],
                "store": location_of(store)}
    chosen = [cp for cp in sorted(checkpoints, key=lambda c: (c.created_at, c.task_id))
              if after is None or (parse_iso_or_none(cp.updated_at, zoned=True) or after) >= after]
    # the SDK (to build the application's tool) only when a finished task went through a service
    asker = _service_asker(store, app) if any(cp.service and cp.status in FINISHED for cp in chosen) else None
    graded = [grade(store, cp, entries, asker) for cp in chosen]
    finished = [g for g in graded if g.status in FINISHED or g.findings or g.in_doubt]
    return {
        "tasks": [g.to_json() for g in finished],
        "summary": {"pass": sum(g.result == "PASS" for g in finished),
                    "fail": sum(g.result == "FAIL" for g in finished) + len(problems),
                    "in_doubt": sum(g.result == "IN DOUBT" for g in finished),
                    "not_finished": len(graded) - len(finished)},
        "problems": problems,
        "store": location_of(store),
    }


def grade(store: TaskStore, cp: Checkpoint, entries: list[Any], asker: Optional[Asker] = None) -> Graded:
    """The grade of one task (``entries``: the store's ledger entries; ``asker``: how the service
    of a task with one is asked, None: it is not). A task not finished and with no effect in
    doubt gets no finding (it is counted as not finished)."""
    from workflow.external import shown_status, task_effects

    shown = shown_status(cp.status, task_effects(store, cp)) if cp.service else cp.status
    g = Graded(cp.task_id, shown)
    if shown in ("in_doubt", "publishing"):
        g.in_doubt = (f"an effect of task {cp.task_id} is {shown}: wait for its window or settle it "
                      "(docs/external-effects.md)")
        return g
    if cp.status not in FINISHED:
        return g
    mine = {e.idempotency_key: e for e in entries if e.task_id == cp.task_id}
    for channel in cp.channels:
        key = effect_key(cp.task_id, channel, cp.channels)
        entry = mine.pop(key, None)
        expected = _expects_effect(g, cp, channel, entry)
        _outcome(g, cp, channel, key, entry, expected)
        if cp.service:
            _at_service(g, cp, channel, asker, expected)
    for key in sorted(mine):
        g.findings.append(Finding("outcome: no stray entry", f"ledger entry {one_line(key)!r} names task "
                                  f"{cp.task_id} but is not under one of its channels' keys"))
    _trajectory(g, cp, {e.channel: e for e in entries if e.task_id == cp.task_id})
    return g


def _approvals(cp: Checkpoint, channel: str) -> list[Decision]:
    """The approvals on ``channel`` of a call as the model made it (an approval with edits never
    runs the call it answers), oldest first."""
    return [d for d in cp.decisions if d.channel == channel and d.decision == "approved" and d.edits is None]


def _rejections(cp: Checkpoint, channel: str) -> list[Decision]:
    return [d for d in cp.decisions if d.channel == channel and d.decision == "rejected"]


def _given_up(cp: Checkpoint) -> Optional[dict[str, Any]]:
    """The detail of the ``failed`` event of a person who ended the task (``fail``: no effect can
    have happened on the calls still open), or None."""
    return next((h.detail for h in cp.history if h.event == "failed"), None)


def _expects_effect(g: Graded, cp: Checkpoint, channel: str, entry: Any) -> bool:
    """True if ``channel``'s effect must exist: the task completed and a call on it was approved as
    the model made it, unless a person ended the task with that call given up (``fail``, where no
    effect can have happened: noted). An expired task may hold the effects of the calls approved
    before it expired, and needs none."""
    if cp.status != "completed" or not _approvals(cp, channel):
        return False
    given_up = _given_up(cp)
    if given_up is not None and entry is None:
        g.notes.append(f"{channel}: approved, then given up by {one_line(str(given_up.get('by')))} "
                       f"({one_line(str(given_up.get('reason')))[:80]}): no effect expected")
        return False
    return True


def _waited_on(cp: Checkpoint, channel: str) -> bool:
    """True if a call on ``channel`` ever waited for a human (so the channel is not one that needs
    none): a decision on it, or a call on it in the history's waiting events."""
    if any(d.channel == channel for d in cp.decisions):
        return True
    for c in _calls(cp):
        args = c.get("arguments") if isinstance(c.get("arguments"), dict) else {}
        named = args.get("channel") or (cp.channels[0] if len(cp.channels) == 1 else None)
        if named == channel:
            return True
    return False


def _outcome(g: Graded, cp: Checkpoint, channel: str, key: str, entry: Any, expected: bool) -> None:
    """The ledger checks of one channel (module docstring, Outcome)."""
    if entry is None:
        if expected:
            g.findings.append(Finding("outcome: approved effect recorded",
                                      f"{channel}: approved, but the ledger has no entry under {one_line(key)!r}"))
        return
    held = f"yet the ledger holds an entry under {one_line(key)!r}"

    def unwanted(rule: str, why: str) -> None:  # an entry that must not be there: a reject says so first
        rejected = _rejections(cp, channel)
        if rejected:
            rule, why = "outcome: nothing after a reject", f"rejected by {rejected[-1].by}"
        g.findings.append(Finding(rule, f"{channel}: {why}, {held}"))

    if cp.status in ("cancelled", "failed"):
        return unwanted(f"outcome: no effect when {cp.status}", f"the task is {cp.status}")
    if entry.approval == "not_needed":
        if _waited_on(cp, channel):  # a channel whose calls need a human: never run without one
            g.findings.append(Finding("outcome: nothing without an approval", f"{channel}: its calls wait "
                                      f"for a human, yet an entry recorded as needing none is there ({held[4:]})"))
        return  # a private channel: it runs without a human, and is never a public effect
    if not _approvals(cp, channel):
        return unwanted("outcome: nothing without an approval", "no approval on record")
    want = cp.expected_sha256(channel)
    if entry.content_sha256 != want:
        g.findings.append(Finding("outcome: approved content", f"{channel}: the ledger entry holds "
                                  f"sha256 {entry.content_sha256[:12]}…, the approved content is {want[:12]}…"))
    if entry.action != cp.action:
        g.findings.append(Finding("outcome: approved content", f"{channel}: the entry is of "
                                  f"{one_line(entry.action)}, the task's action is {cp.action}"))


def _at_service(g: Graded, cp: Checkpoint, channel: str, asker: Optional[Asker], expected: bool) -> None:
    """The service checks of one channel: exactly one record after an approval, none otherwise."""
    if asker is None:
        g.notes.append(f"{channel}: the service {cp.service} was not asked (no application given)")
        return
    asked = asker(cp, channel)
    if asked.not_asked is not None:
        g.notes.append(f"{channel}: {asked.not_asked}")
        return
    if asked.conflict is not None and not expected:
        g.findings.append(Finding("outcome: nothing at the service", f"{channel}: the service holds a "
                                  f"record under the task's request key ({asked.conflict})"))
        return
    if asked.conflict is not None:
        g.findings.append(Finding("outcome: service holds the approved content", f"{channel}: {asked.conflict}"))
        return
    records, want = asked.records, 1 if expected else 0
    if len(records) != want:
        rule = "outcome: one publication at the service" if want else "outcome: nothing at the service"
        g.findings.append(Finding(rule, f"{channel}: the service holds {len(records)} record(s) under the "
                                  f"task's request keys, {want} expected"))


def _approved_arguments(cp: Checkpoint, channel: str) -> dict[str, Any]:
    """The arguments the approved call of ``channel`` carried (from the history's calls), or the
    content approved with edits there, with ``channel`` set."""
    approved = _approvals(cp, channel)
    first = approved[0].call_id if approved else None  # the call that ran: the first approved
    found = next((c.get("arguments") for c in _calls(cp) if first is not None and c.get("call_id") == first), None)
    arguments = dict(found) if isinstance(found, dict) else {}
    for d in reversed(cp.decisions):
        if d.channel == channel and d.edits is not None:
            arguments = {**arguments, **dict(d.edits.content)}
            break
    return {**arguments, "channel": channel}


def _calls(cp: Checkpoint) -> list[dict[str, Any]]:
    """Every call that waited for a human, as the history's ``started`` and ``interrupted`` events
    recorded it (``{"call_id", "tool", "arguments"}``), oldest first; anything else there is skipped."""
    found = []
    for h in cp.history:
        calls = h.detail.get("calls") if h.event in ("started", "interrupted") else None
        found += [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []
    return found


def _service_asker(store: TaskStore, app: Any) -> Optional[Asker]:
    """How a service task is asked: the application's tool's service (``find``), under the request
    key of every attempt (:func:`workflow.external.request_key`, derived). None without ``app``."""
    if app is None:
        return None
    from state.errors import Refused
    from state.integrity import load_key
    from workflow.agent_check import gated_tool
    from workflow.effect import service_of
    from workflow.external import Conflict, request_key

    agent = app.build_agent(app.offline_model())
    signing = load_key(store.root, create=False)

    def ask(cp: Checkpoint, channel: str) -> Asked:
        unasked = f"not asked at the service {cp.service}"
        try:
            service = service_of(gated_tool(agent, cp.action))  # the task's own action's service
        except Refused as exc:
            return Asked(not_asked=f"{unasked}: {one_line(str(exc))[:120]}")
        if service is None or service.url != cp.service:
            here = "none" if service is None else service.url
            return Asked(not_asked=f"{unasked}: the service configured here is {here}")
        if service.find is None:
            return Asked(not_asked=f"{unasked}: it has no lookup by key (no deduplication)")
        key = effect_key(cp.task_id, channel, cp.channels)
        tried = [b.attempt for b in cp.effects if b.idempotency_key == key]
        intent = store.intent_get(key)
        last = max([1, *tried, *([intent.attempt] if intent is not None else [])])
        arguments = _approved_arguments(cp, channel)
        found = []
        for attempt in range(1, last + 1):
            try:
                record = service.find(request_key(signing, cp.state_id, key, attempt), arguments)
            except Conflict as exc:
                return Asked(conflict=f"attempt {attempt}: {one_line(str(exc))[:200]}")
            except Exception as exc:  # unreachable, refused, …: not a verdict on the outcome
                return Asked(not_asked=f"{unasked}: {type(exc).__name__}: {one_line(str(exc))[:120]}")
            if record is not None:
                found.append(record)
        return Asked(records=tuple(found))

    return ask


def since_time(text: str) -> datetime:
    """``--since``: an ISO-8601 time with its zone (``2026-01-31T09:00:00Z``, ``…+01:00``), or a
    date (``2026-01-31``: its midnight, UTC). Raises :class:`state.errors.Refused` (``usage``) for
    anything else, naming a missing zone."""
    from state.errors import Refused

    if isinstance(text, str) and len(text) == 10:
        found = parse_iso_or_none(text + "T00:00:00Z")
        if found is not None:
            return found
    found = parse_iso_or_none(text, zoned=True)
    if found is not None:
        return found
    zone = " with its time zone (Z or +01:00)" if parse_iso_or_none(text) is not None else ""
    raise Refused("usage", f"not a time{zone}: {one_line(str(text))[:60]!r}; give an ISO-8601 time such "
                  "as 2026-01-31T09:00:00Z, or a date such as 2026-01-31 (midnight UTC)")


def _trajectory(g: Graded, cp: Checkpoint, entries: dict[str, Any]) -> None:
    """The trajectory checks (module docstring, Trajectory)."""
    from workflow.team import approvals_of, rule_of

    events = [h.event for h in cp.history]
    revisions = [h.revision for h in cp.history]
    if not events or events[0] != "started" or revisions[0] != 1:
        g.findings.append(Finding("trajectory: starts with its request", f"the first event is "
                                  f"{events[0] if events else 'missing'}, not started at revision 1"))
    if any(b <= a for a, b in zip(revisions, revisions[1:])) or (revisions and revisions[-1] != cp.revision):
        g.findings.append(Finding("trajectory: revisions in order", f"revisions {revisions} end at "
                                  f"{revisions[-1] if revisions else '?'}, the checkpoint is revision {cp.revision}"))
    # each ending event and the status it left (a person's ``fail`` ends ``completed`` when
    # another call of the task executed: its detail says which)
    endings = [h.detail.get("status", h.event) if h.event == "failed" else h.event
               for h in cp.history if h.event in ENDINGS]
    if endings != [cp.status] or (events and events[-1] not in ENDINGS):
        final_event = events[-1] if events else "?"
        g.findings.append(Finding("trajectory: ends once, last",
                                  f"endings {endings} (last event {final_event}) for status {cp.status}"))
    for channel, entry in entries.items():
        if entry.approval != "human" or channel not in cp.channels or not _approvals(cp, channel):
            continue  # the outcome checks name an entry with no approval
        at = parse_iso_or_none(entry.published_at, zoned=True)
        before = [d for d in _approvals(cp, channel)
                  if at is not None and (parse_iso_or_none(d.at, zoned=True) or at) <= at]
        if not before:  # no approval on record before the effect: it ran without one
            first = _approvals(cp, channel)[0]
            g.findings.append(Finding("trajectory: effect after its approvals", f"{channel}: the entry is "
                                      f"dated {entry.published_at}, the first approval {first.at}"))
            continue
        ran = before[-1]  # the approval that ran it (a later one of the same draft finds it recorded)
        rule = rule_of(cp, channel)
        counted = approvals_of(cp, ran.call_id)
        names = {a.by for a in counted} | {ran.by}
        if len(names) < rule.approvals:
            g.findings.append(Finding("trajectory: quorum before the effect", f"{channel}: {len(names)} "
                                      f"approval(s) ({', '.join(sorted(names))}), the rule needs {rule.approvals}"))
        requester = cp.team.requested_by if cp.team is not None else None
        if not rule.requester_may_approve and requester in names:
            g.findings.append(Finding("trajectory: not approved by the requester",
                                      f"{channel}: {requester} asked and approved"))
        if any(m is None or m > at for m in (parse_iso_or_none(a.at, zoned=True) for a in counted)):
            g.findings.append(Finding("trajectory: effect after its approvals", f"{channel}: the entry is "
                                      f"dated {entry.published_at}, before an approval counted for its quorum"))
        vetoes = [d for d in _rejections(cp, channel) if (parse_iso_or_none(d.at, zoned=True) or at) < at
                  and (not cp.proposed() or d.call_id == ran.call_id)]  # there a reject is one call's
        if vetoes:
            g.findings.append(Finding("trajectory: nothing after a veto", f"{channel}: rejected by "
                                      f"{vetoes[0].by} at {vetoes[0].at}, the entry is dated {entry.published_at}"))
    _rejections_reached(g, cp)
    # every call that waited for a human was decided, unless the task ended while it waited
    # (expired, or failed by a person); a call the run ended at is never in a waiting event
    decided = {d.call_id for d in cp.decisions}
    asked = [c["call_id"] for c in _calls(cp) if isinstance(c.get("call_id"), str)]
    left = list(dict.fromkeys(c for c in asked if c not in decided))
    if left and cp.status in ("completed", "cancelled"):
        g.findings.append(Finding("trajectory: every call decided or ended",
                                  f"call(s) {', '.join(one_line(str(c)) for c in left)} waited for a "
                                  f"human and were never decided, yet the task is {cp.status}"))


def _rejections_reached(g: Graded, cp: Checkpoint) -> None:
    """Each reject's message reached the model: the saved RunState holds an answer to the call,
    holding the reason when one was given (unless the model was never called again)."""
    if any(h.event == "cancelled" and h.detail.get("model_called") is False for h in cp.history):
        return  # ended without calling the model again (a reject never waits for budget)
    try:
        state = json.loads(cp.run_state)
    except (ValueError, RecursionError):
        g.findings.append(Finding("trajectory: reject reached the model", "the saved RunState is not JSON"))
        return
    answers: dict[str, list[str]] = {}

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "function_call_output" and isinstance(node.get("call_id"), str):
                answers.setdefault(node["call_id"], []).append(str(node.get("output")))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(state)
    for d in cp.decisions:
        if d.decision != "rejected":
            continue
        told = answers.get(d.call_id)
        if told is None:
            g.findings.append(Finding("trajectory: reject reached the model",
                                      f"call {one_line(d.call_id)} was rejected, but the run holds no answer to it"))
        elif d.reason and not any(d.reason in t for t in told):
            g.findings.append(Finding("trajectory: reject reached the model",
                                      f"call {one_line(d.call_id)}: the reason {one_line(d.reason)[:60]!r} is not "
                                      "in the answer the model got"))


def eval_text(result: dict[str, Any]) -> str:
    """The text of :func:`evaluate`'s ``result``: one line per task, ``PASS``, ``IN DOUBT: …`` or
    ``FAIL: <check>: <what differs>`` (a further line per further finding), then the summary."""
    lines = []
    for t in result["tasks"]:
        head = f"{t['result']:<8} {one_line(t['task_id'])} ({t['status']})"
        found = t["findings"]
        if not found:
            lines.append(head + "".join(f"; {one_line(n)}" for n in t["notes"]))
            continue
        lines.append(f"{head}: {found[0]['check']}: {one_line(found[0]['what'])}")
        lines += [f"{'':<8}   {f['check']}: {one_line(f['what'])}" for f in found[1:]]
    lines += [f"FAIL     {p}" for p in result["problems"]]
    n = result["summary"]
    unasked = sum(bool(t["notes"]) for t in result["tasks"])
    if not result["tasks"] and not result["problems"] and not n["not_finished"]:
        lines.append(f"no task to grade in {one_line(result['store'])}")
    lines.append(f"{n['pass']} passed, {n['fail']} failed, {n['in_doubt']} in doubt; "
                 f"{n['not_finished']} not finished (not graded)"
                 + (f"; {unasked} graded on the ledger only (see its note)" if unasked else ""))
    return "\n".join(lines)


def problem(result: dict[str, Any]) -> Optional[str]:
    """The one ``STOPPED:`` line of an evaluation with a failure or a task in doubt (exit 1), or
    None when every graded task passed."""
    n = result["summary"]
    if not n["fail"] and not n["in_doubt"]:
        return None
    return (f"the evaluation found {n['fail']} failed and {n['in_doubt']} in-doubt task(s) of "
            f"{n['pass'] + n['fail'] + n['in_doubt']} graded: a status is not the outcome (docs/eval.md)")

