"""The execution receipt of one task (``python run.py show``). Never imports the SDK.

An execution receipt (执行收据) records: task ID, outcome,
trajectory, tools, time, tokens, errors, checkpoint version and the human approval. Sources:

- the signed checkpoint (source of truth): status, every revision (``history``) with the schema
  versions it was written with, the approval request (pending call and its arguments), the
  decision (who, when, why), ``expires_at``;
- the ledger: the entry for the idempotency key, or its absence (the proof of the effect); for a
  task with several channels, the entry of each channel's key (``<task key>#<channel>``);
- the local trace (``workflow.observe.trace_log``; diagnostics, unsigned): each run (start / resume), each
  model call (latency; tokens from the SDK's turn span), each tool call with its arguments (redacted
  unless ``--trace-content``), and errors.

Shape (``--json``)::

    {"task_id", "idempotency_key", "action",
     "outcome": {"status", "executed": bool, "ledger": entry | null, "final_output",
                 # only when an effect was begun and neither done nor found not done
                 # (its intent is recorded, no ledger entry): those channels
                 "unsettled": [channel, …],
                 # only for a task still open whose ``fail`` wrote its end mark and did not
                 # finish (a crash, or an older checkpoint put back): who ended it, when, why
                 "ended": {"by", "at", "reason"},
                 # several channels only ("ledger" is then null: the task key has no entry):
                 "channels": [{"channel", "executed": bool, "ledger": entry | null}, …]},
     "approval": {"requested_at", "expires_at", "call_id", "tool", "arguments",
                  "decision": null | {"decision", "by", "at", "reason"},   (of the call shown)
                  "decisions": [{"call_id", "channel", "decision", "by", "at", "reason", "source"}],
                  # a team task only (docs/reviewers.md): every approval, with who and when, and
                  # whether its call's quorum counted it (workflow.team.approval_log)
                  "approvals": [{"call_id", "channel", "by", "at", "counted"}]},
     "checkpoint": {"path", "revision", "schema_version", "sdk_version", "run_state_schema_version",
                    "created_at", "updated_at"},
     "trajectory": [{"at", "step", ...}, …],   # in time order; see _history_steps/_trace_steps
     "totals": {"elapsed_s", "run_time_ms", "runs", "model_calls", "tool_calls",
                "input_tokens", "output_tokens", "total_tokens"},
     "errors": [str, …],
     "trace": {"path", "records", "unreadable_lines", "invalid_records"},
     # a task whose effect goes through a service only (``start`` with HITL_PUBLISH_URL set):
     "service": url, "effects": [{"channel", "state", "service", "attempt", "request_key", "since",
                                  "publication_id", "settled_by", "settle_reason"}, …]}

For such a task ``outcome.status`` is the status a person sees (``publishing`` or ``in_doubt`` while
an effect is not confirmed, :func:`workflow.external.shown_status`), each effect's ``state`` is
:func:`workflow.external.effect_status`'s (``published``, ``publishing``, ``in_doubt``) and the
trajectory gains an ``effect_intent`` step per effect (the write-ahead intent, before the request).
A task without a service has none of these keys: its receipt is as before.

Times are ISO-8601 UTC; ``elapsed_s`` is seconds from the first to the last recorded moment
(human waiting included); ``run_time_ms`` the sum of the agent runs' durations.

The trace file is unsigned diagnostics: each record is validated (:func:`valid_records`, shape and
types) and a record that does not fit is skipped and counted (``invalid_records``, named under
``errors``). A damaged or hostile trace only gives a thinner trajectory, never a failed ``show``.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from state import clock
from state.timestamps import parse_iso_or_none
from state.schema import UNNAMED_CHANNEL, Checkpoint, effect_key
from state.store import TaskStore, checkpoint_label
from workflow.external import effect_status, shown_status
from workflow.observe import trace_log
from workflow.observe.views import one_line
from workflow.team import approval_log


_ts = parse_iso_or_none  # a trace's times: a record that does not fit gives None, never a crash


#: Deepest nesting and largest token count a trace record may carry (beyond: not ours, skipped).
MAX_DEPTH = 40
MAX_TOKENS = 10**15


class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)


class _RunRecord(_Record):
    kind: Literal["run"]
    at: Optional[str] = None
    phase: Optional[str] = None
    pid: Optional[int] = None


class _RunEndRecord(_Record):
    kind: Literal["run_end"]
    at: Optional[str] = None
    phase: Optional[str] = None
    outcome: Optional[str] = None
    error: Optional[str] = None


class _Usage(_Record):
    input_tokens: Optional[int] = Field(default=None, ge=0, le=MAX_TOKENS)
    output_tokens: Optional[int] = Field(default=None, ge=0, le=MAX_TOKENS)


class _CustomData(_Record):
    turn: Optional[int] = None
    usage: Optional[_Usage] = None


class _SpanData(_Record):
    data: Optional[_CustomData] = None  # custom spans (task, turn)


class _SpanRecord(_Record):
    kind: Literal["span"]
    span_id: Optional[str] = None
    parent_id: Optional[str] = None
    started_at: Optional[str] = None
    ended_at: Optional[str] = None
    type: Optional[str] = None
    name: Optional[str] = None
    data: Optional[dict[str, Any]] = None
    error: Union[dict[str, Any], str, None] = None


_KINDS: dict[str, type[_Record]] = {"run": _RunRecord, "run_end": _RunEndRecord, "span": _SpanRecord}


def _plain(value: Any) -> bool:
    """True if ``value`` nests at most :data:`MAX_DEPTH` deep and holds no NaN/Infinity (which
    ``json.loads`` accepts but ``show --json`` could not print as JSON)."""
    stack = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if depth > MAX_DEPTH:
            return False
        if isinstance(v, float) and not math.isfinite(v):
            return False
        if isinstance(v, dict):
            stack.extend((x, depth + 1) for x in v.values())
        elif isinstance(v, list):
            stack.extend((x, depth + 1) for x in v)
    return True


def valid_records(records: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """``(records the receipt can use, number skipped)``.

    A ``run``, ``run_end`` or ``span`` record must have the types in :mod:`workflow.observe.trace_log`'s
    docstring (strings or null for times, names and ids; an int ``pid``; for a span, an object or
    null ``data``, and in a ``turn`` span, integer token counts 0 … 10**15); every record must nest
    at most :data:`MAX_DEPTH` deep and hold no NaN/Infinity. Other kinds (``trace_start``, …) are
    not used and pass through. Never raises.
    """
    good: list[dict[str, Any]] = []
    bad = 0
    for rec in records:
        model = _KINDS.get(rec.get("kind")) if isinstance(rec, dict) else None
        try:
            if not isinstance(rec, dict) or not _plain(rec):
                raise ValueError("not a plain JSON object")
            if model is not None:
                model.model_validate(rec)
                if rec["kind"] == "span" and rec.get("type") in ("turn", "task"):
                    _SpanData.model_validate(rec.get("data") or {})
        except (ValidationError, ValueError):
            bad += 1
            continue
        good.append(rec)
    return good, bad


def _ms(start: str | None, end: str | None) -> float | None:
    a, b = _ts(start), _ts(end)
    return round((b - a).total_seconds() * 1000, 3) if a and b else None


def _history_steps(cp: Checkpoint) -> list[dict[str, Any]]:
    steps = []
    for ev in cp.history:
        d = ev.detail
        versions = {k: d.get(k) for k in ("schema_version", "sdk_version", "run_state_schema_version")
                    if k in d}
        steps.append({"at": ev.at, "step": "checkpoint", "revision": ev.revision, "event": ev.event,
                      **versions})
        if ev.event in ("started", "interrupted"):
            for call in d.get("calls") or [{"call_id": c} for c in d.get("pending", [])]:
                steps.append({"at": ev.at, "step": "approval_requested", "call_id": call.get("call_id"),
                              "tool": call.get("tool"), "arguments": call.get("arguments"),
                              "expires_at": d.get("expires_at")})
        elif ev.event == "decision_recorded":
            kind = "approved_with_edits" if d.get("edits") else d.get("decision")
            steps.append({"at": d.get("at", ev.at), "step": "decision", "decision": kind,
                          "by": d.get("by"), "reason": d.get("reason"), "call_id": d.get("call_id")})
    return steps


def _usage(span: dict[str, Any]) -> dict[str, int]:
    usage = ((span.get("data") or {}).get("data") or {}).get("usage") or {}
    return {k: int(usage.get(k) or 0) for k in ("input_tokens", "output_tokens")}


def _trace_steps(records: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str], dict[str, Any]]:
    """Trajectory steps, errors and sums from trace records."""
    steps: list[dict[str, Any]] = []
    errors: list[str] = []
    spans = [r for r in records if r["kind"] == "span"]
    gen_by_parent = {s.get("parent_id"): s for s in spans if s.get("type") == "generation"}
    sums = {"runs": 0, "run_time_ms": 0.0, "input_tokens": 0, "output_tokens": 0}
    open_run: dict[str, Any] | None = None
    for r in records:
        kind = r["kind"]
        if kind == "run":
            sums["runs"] += 1
            open_run = r
            steps.append({"at": r.get("at"), "step": "run", "phase": r.get("phase"), "pid": r.get("pid")})
        elif kind == "run_end":
            if open_run is not None:
                sums["run_time_ms"] += _ms(open_run.get("at"), r.get("at")) or 0.0
                open_run = None
            if r.get("outcome") != "ok":
                errors.append(f"{r.get('phase')} run at {r.get('at')}: {r.get('error')}")
                steps.append({"at": r.get("at"), "step": "run_failed", "phase": r.get("phase"),
                              "error": r.get("error")})
        elif kind == "span":
            if r.get("error"):
                err = r["error"]
                errors.append(f"{r.get('type')} span {r.get('name') or ''}: "
                              f"{err.get('message') if isinstance(err, dict) else err}")
            if r.get("type") == "turn":
                gen = gen_by_parent.get(r.get("span_id"))
                usage = _usage(r)
                sums["input_tokens"] += usage["input_tokens"]
                sums["output_tokens"] += usage["output_tokens"]
                src = gen or r
                steps.append({"at": src.get("started_at"), "step": "model_call",
                              "turn": ((r.get("data") or {}).get("data") or {}).get("turn"),
                              "latency_ms": _ms(src.get("started_at"), src.get("ended_at")),
                              **usage})
            elif r.get("type") == "function":
                data = r.get("data") or {}
                steps.append({"at": r.get("started_at"), "step": "tool_call", "tool": r.get("name"),
                              "arguments": data.get("input"), "output": data.get("output"),
                              "latency_ms": _ms(r.get("started_at"), r.get("ended_at")),
                              "ran": data.get("output") is not None})
            elif r.get("type") in ("guardrail", "handoff"):
                steps.append({"at": r.get("started_at"), "step": r.get("type"), "name": r.get("name"),
                              "data": r.get("data")})
    return steps, errors, sums


def build_receipt(store: TaskStore, task_id: str) -> dict[str, Any]:
    """The receipt of ``task_id`` (shape in the module docstring).

    Raises :class:`state.errors.Refused` if the checkpoint or the ledger entry cannot be trusted
    (same checks as every command); a missing or damaged trace only thins the trajectory.
    """
    cp = store.load(task_id)
    entry = store.ledger_get(cp.idempotency_key)
    several = len(cp.channels) > 1
    by_channel = {c: store.ledger_get(effect_key(cp.task_id, c, cp.channels))
                  for c in cp.channels} if several else {}
    entries = [e for e in by_channel.values() if e is not None] if several else [entry] if entry else []
    effects = _effects(store, cp, by_channel if several else {c: entry for c in cp.channels})
    unsettled = _unsettled(store, cp, effects, by_channel if several else {c: entry for c in cp.channels})
    from workflow.reconcile import end_mark

    mark = end_mark(store, cp)  # a fail that did not finish
    path = trace_log.trace_path(store, task_id)
    try:
        records, bad = trace_log.read(path)
    except (OSError, RecursionError):  # unreadable file, or a line nested too deep for json
        records, bad = [], 1
    records, invalid = valid_records(records)
    t_steps, errors, sums = _trace_steps(records)
    steps = _history_steps(cp) + t_steps
    for e in entries:
        steps.append({"at": e.published_at, "step": "ledger_entry",
                      "idempotency_key": e.idempotency_key,
                      "content_sha256": e.content_sha256})
    for f in effects:
        steps.append({"at": f["since"], "step": "effect_intent", "channel": f["channel"], "attempt": f["attempt"],
                      "service": f["service"], "request_key": f["request_key"]})
    order = {"run": 0, "checkpoint": 2, "approval_requested": 3}
    steps.sort(key=lambda s: (_ts(s.get("at")) or datetime.max.replace(tzinfo=clock.now().tzinfo),
                              order.get(s["step"], 1)))
    if bad:
        errors.append(f"{bad} unreadable line(s) in the trace file (cut by a crash?)")
    if invalid:
        errors.append(f"{invalid} trace record(s) of an unexpected shape skipped")

    request = next((s for s in reversed(steps) if s["step"] == "approval_requested"), None)
    decision = None  # the decision of the call the request shows, if one was made
    asked = request.get("call_id") if request else None
    for d in cp.decisions:
        if d.call_id == asked or (asked is None and d is cp.decisions[-1]):
            decision = {"decision": d.decision, "by": d.by, "at": d.at, "reason": d.reason}
    times = [t for t in (_ts(s.get("at")) for s in steps) if t] + [
        t for t in (_ts(cp.created_at), _ts(cp.updated_at)) if t]
    model_calls = sum(1 for s in steps if s["step"] == "model_call")
    tool_calls = sum(1 for s in steps if s["step"] == "tool_call")
    return {
        "task_id": cp.task_id,
        "idempotency_key": cp.idempotency_key,
        "action": cp.action,
        "outcome": {
            "status": shown_status(cp.status, effects),
            "executed": bool(entries),
            "ledger": entry.model_dump() if entry else None,
            "final_output": cp.final_output,
            **({"failure": cp.failure} if cp.failure is not None else {}),
            **({"unsettled": unsettled} if unsettled else {}),
            **({"ended": {"by": mark.by, "at": mark.at, "reason": mark.reason}} if mark is not None else {}),
            **({"channels": [{"channel": c, "executed": e is not None,
                              "ledger": e.model_dump() if e else None}
                             for c, e in by_channel.items()]} if several else {}),
        },
        "approval": {
            "requested_at": request["at"] if request else None,
            "expires_at": cp.expires_at,
            "call_id": request.get("call_id") if request else None,
            "tool": request.get("tool") if request else None,
            "arguments": _arguments(request.get("arguments") if request else None),
            "decision": decision,  # of the call shown (none: not decided); every one below
            "decisions": [{"call_id": d.call_id, "channel": d.channel, "decision": d.decision,
                           "by": d.by, "at": d.at, "reason": d.reason, "source": d.source}
                          for d in cp.decisions],
            # approvals with edits (workflow/edits.py): what the reviewer approved instead
            "edits": [{"call_id": d.call_id, "by": d.by, "at": d.at, **d.edits.flat()}
                      for d in cp.decisions if d.edits is not None],
            **({"approvals": approval_log(cp)} if cp.team is not None else {}),  # each reviewer's, not the last
        },
        "checkpoint": {
            "path": checkpoint_label(store, cp.task_id),
            "revision": cp.revision,
            "schema_version": cp.schema_version,
            "sdk_version": cp.sdk_version,
            "run_state_schema_version": cp.run_state_schema_version,
            "created_at": cp.created_at,
            "updated_at": cp.updated_at,
        },
        "trajectory": steps,
        "totals": {
            "elapsed_s": round((max(times) - min(times)).total_seconds(), 3) if times else None,
            "run_time_ms": round(sums["run_time_ms"], 3),
            "runs": sums["runs"],
            "model_calls": model_calls,
            "tool_calls": tool_calls,
            "input_tokens": sums["input_tokens"],
            "output_tokens": sums["output_tokens"],
            "total_tokens": sums["input_tokens"] + sums["output_tokens"],
        },
        "errors": errors,
        "trace": {"path": str(path), "records": len(records), "unreadable_lines": bad,
                  "invalid_records": invalid},
        **({"service": cp.service, "effects": effects} if cp.service is not None else {}),
    }


def _effects(store: TaskStore, cp: Checkpoint, entries: dict[Any, Any]) -> list[dict[str, Any]]:
    """Each channel's effect through the task's service (``[]`` without one): ``{"channel",
    **effect_status, "settle_reason"}`` (:func:`workflow.external.task_effects` plus the reason a
    human gave when settling), channels with no intent left out. ``entries``: the ledger entry
    already read per channel. Raises ``Refused`` if a record is damaged."""
    if cp.service is None:
        return []
    out = []
    for channel in cp.channels:
        entry = entries.get(channel)
        status = effect_status(store, effect_key(cp.task_id, channel, cp.channels), entry, cp=cp)
        if status is not None:
            out.append({"channel": channel, **status, "settle_reason": getattr(entry, "settle_reason", None)})
    return out


def _unsettled(store: TaskStore, cp: Checkpoint, effects: list[dict[str, Any]],
               entries: dict[Any, Any]) -> list[Any]:
    """The channels whose effect was begun (its write-ahead intent is recorded) and may have
    happened, with no ledger entry and not found not done: the receipt then never says "nothing
    done". ``effects``: the service's (:func:`_effects`, already read); a local effect's intent
    (``workflow.effect``) is read here. Raises ``Refused`` if a record is damaged."""
    if cp.service is not None:
        return [e["channel"] for e in effects if e["state"] != "published" and e["sent"]]
    out = []
    for channel in cp.channels:
        entry = entries.get(channel)
        if entry is None:
            status = effect_status(store, effect_key(cp.task_id, channel, cp.channels), cp=cp)
            if status is not None and status["state"] != "published" and status["sent"]:
                out.append(channel)
    return out


def _arguments(args: Any) -> Any:
    """Arguments as the receipt shows them: the body as sha256 + preview + length (the checkpoint
    keeps the full text; ``status --json`` shows it while the call waits)."""
    if not isinstance(args, dict):
        return args
    out = dict(args)
    if isinstance(out.get("body"), str):
        body = out["body"]
        out["body"] = trace_log.redact(body) if len(body) > trace_log.PREVIEW_CHARS else body
    return out


def _fmt_args(args: Any) -> str:
    if not isinstance(args, dict):
        return repr(args)
    parts = []
    for k, v in args.items():
        if _is_redacted(v):
            parts.append(f"{k}={v['preview']!r} ({v['chars']} chars, sha256({k}) {v['sha256'][:12]}…)")
        else:
            parts.append(f"{k}={v!r}")
    return ", ".join(parts)


def _is_redacted(v: Any) -> bool:
    """True if ``v`` is :func:`workflow.observe.trace_log.redact`'s ``{"sha256", "preview", "chars"}``."""
    return (isinstance(v, dict) and isinstance(v.get("sha256"), str)
            and isinstance(v.get("preview"), str) and isinstance(v.get("chars"), int))


def _clock_time(at: str | None) -> str:
    t = _ts(at)
    return t.strftime("%H:%M:%S.%f")[:-3] if t else "?"


def effect_text(e: dict[str, Any]) -> str:
    """One line for one of a receipt's ``effects``: the channel, the service and where the effect
    stands (published with the publication id and who settled it and why; publishing with its
    attempt and Idempotency-Key; in doubt), every value escaped onto the line."""
    where = f"{one_line(e['channel'])} through {one_line(e['service'])}"
    if e["state"] == "published":
        pub = f" as {one_line(e['publication_id'])}" if e["publication_id"] else ""
        why = f", reason {e['settle_reason']!r}" if e.get("settle_reason") else ""
        by = f" (settled by {one_line(e['settled_by'])}{why})" if e["settled_by"] else ""
        return f"{where}: published{pub}{by}"
    since = f"attempt {e['attempt']}, intent written {one_line(e['since'])}"
    if e["state"] == "publishing":
        return (f"{where}: publishing ({since}; not confirmed; Idempotency-Key {one_line(e['request_key'])}): "
                "the same resume sends it again with the same key")
    if e["state"] == "not_published":
        return f"{where}: not published ({since}; found not done; the task ended)"
    from workflow.external import advice

    return (f"{where}: IN DOUBT ({since}): the service does not deduplicate and may have published it; "
            f"{one_line(advice(e.get('window_ends')))}")


def receipt_text(r: dict[str, Any], next_step: Optional[str] = None) -> str:
    """The receipt for a terminal: header, outcome, (for a task through a service) each effect and
    ``next_step`` (the caller's command to run next, e.g. ``settle``, when given), approval,
    trajectory, totals, errors."""
    o, a, c, t = r["outcome"], r["approval"], r["checkpoint"], r["totals"]
    def entry_text(led: Optional[dict[str, Any]], none: str) -> str:
        return (f"1 entry, written {led['published_at']}, content sha256 "
                f"{led['content_sha256'][:12]}…"
                if led else none)

    def none(channel: Any = None) -> str:  # nothing done, unless the channel's (any: None) effect was begun
        begun = channel in o.get("unsettled", []) if channel is not None else bool(o.get("unsettled"))
        return ("no entry (an effect was begun and may have happened; not settled: doctor explains)"
                if begun else "no entry (nothing done)")

    ledger = ("; ".join(f"{c['channel']}: " + entry_text(c["ledger"], none(c["channel"]))
                        for c in o["channels"]) if "channels" in o
              else (f"{o['ledger']['channel']}: " if (o["ledger"] or {}).get("channel")
                    not in (None, UNNAMED_CHANNEL) else "")
              + entry_text(o["ledger"], none()))
    lines = [
        f"receipt: task {r['task_id']}  (action {r['action']}, idempotency key {r['idempotency_key']})",
        f"outcome: {o['status']}; ledger: {ledger}",
    ]
    lines.extend(f"effect: {effect_text(e)}" for e in r.get("effects", []))
    if next_step:
        lines.append(f"next: {next_step}")
    if o.get("failure"):
        lines.append(f"failed: {one_line(o['failure'])}")
    if o.get("ended"):
        e = o["ended"]
        lines.append(f"ended, not finished: {one_line(e['reason'] or 'ended by ' + e['by'])} (at {one_line(e['at'])}; "
                     "the checkpoint does not say so yet): no decision runs, the same fail finishes it (doctor "
                     "explains)")
    if o["final_output"]:
        lines.append(f"final output: {one_line(o['final_output'])}")
    lines.append(f"approval: {one_line(a['tool'])}({_fmt_args(a['arguments'])}) call_id={one_line(a['call_id'])}")
    lines.append(f"  requested {a['requested_at']}, expires {a['expires_at'] or 'never'}")
    d = a["decision"]
    if len(a["decisions"]) > 1 or any(e["call_id"] != a["call_id"] for e in a["decisions"]):
        # several calls, or the one decided is not the one shown: each decision, with its call
        for each in a["decisions"]:
            why = f", reason {each['reason']!r}" if each["reason"] else ""
            lines.append(f"  decided: {one_line(each['channel'])} ({one_line(each['call_id'])}): {each['decision']} "
                         f"by {one_line(each['by'])} at {one_line(each['at'])}{why}")
        if d is None and a["call_id"]:
            lines.append(f"  decided: {one_line(a['call_id'])}: not yet")
    elif d:
        why = f", reason {d['reason']!r}" if d["reason"] else ""
        lines.append(f"  decided: {d['decision']} by {one_line(d['by'])} at {one_line(d['at'])}{why}")
    else:
        lines.append("  decided: not yet")
    for call in dict.fromkeys(x["call_id"] for x in a.get("approvals", [])):  # a team task: every approver
        given = [x for x in a["approvals"] if x["call_id"] == call]
        lines.append(f"  approved: {one_line(call)} ({one_line(given[0]['channel'])}) by "
                     + ", ".join(f"{one_line(x['by'])} at {one_line(x['at'])}"
                                 + ("" if x.get("counted", True) else " (not counted)") for x in given))
    for e in a.get("edits", []):
        from workflow.edits import diff_lines

        lines.append(f"  approved with edits by {one_line(e['by'])} at {one_line(e['at'])} "
                     f"(call_id={one_line(e['call_id'])}): "
                     "original vs approved")
        lines.extend(f"    {line}" for line in diff_lines(e))
    lines.append(f"checkpoint: revision {c['revision']}, schema_version {c['schema_version']}, "
                 f"RunState $schemaVersion {c['run_state_schema_version']}, "
                 f"openai-agents {c['sdk_version']}")
    lines.append("trajectory:")
    for s in r["trajectory"]:
        lines.append(f"  {_clock_time(s.get('at'))}  {_step_text(s)}")
    lines.append(
        f"totals: elapsed {t['elapsed_s']} s ("
        + ("to the last record, still waiting for a human" if o["status"] == "waiting_for_approval"
           else "human wait included") + "), agent run time "
        f"{t['run_time_ms']:.1f} ms over {t['runs']} run(s); {t['model_calls']} model call(s), "
        f"{t['tool_calls']} tool call(s); tokens in {t['input_tokens']} / out {t['output_tokens']} "
        f"/ total {t['total_tokens']}"
    )
    lines.append("errors: " + ("; ".join(map(one_line, r["errors"])) if r["errors"] else "none"))
    lines.append(f"trace: {one_line(r['trace']['path'])} ({r['trace']['records']} records)")
    return _UNSAFE.sub(lambda m: ascii(m.group())[1:-1], "\n".join(lines))


#: Characters a trace (unsigned) must not send to a terminal: C0 controls but tab and newline, DEL,
#: C1 controls, bidi overrides/isolates, lone surrogates. Shown escaped (``\x1b``, ``\u202e``).
_UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _step_text(s: dict[str, Any]) -> str:
    step = s["step"]
    if step == "checkpoint":
        v = ""
        if "schema_version" in s:
            v = (f" (schema {s['schema_version']}, RunState {s.get('run_state_schema_version')}, "
                 f"openai-agents {s.get('sdk_version')})")
        return f"checkpoint revision {s['revision']}: {one_line(s['event'])}{v}"
    if step == "approval_requested":
        return (f"approval requested: {one_line(s.get('tool'))}({_fmt_args(_arguments(s.get('arguments')))}) "
                f"call_id={one_line(s.get('call_id'))}")
    if step == "decision":
        why = f", reason {s['reason']!r}" if s.get("reason") else ""
        return f"human decision: {one_line(s.get('decision'))} by {one_line(s.get('by'))}{why}"
    if step == "run":
        return f"{'start' if s.get('phase') == 'start' else 'resume'} run (pid {s.get('pid')})"
    if step == "run_failed":
        return f"{one_line(s.get('phase'))} run failed: {one_line(s.get('error'))}"
    if step == "model_call":
        return (f"model call (turn {s.get('turn')}): {s.get('latency_ms')} ms, tokens in "
                f"{s.get('input_tokens')} / out {s.get('output_tokens')}")
    if step == "tool_call":
        state = "ran" if s.get("ran") else "paused for approval (not run)"
        out = s.get("output")
        out_txt = f" -> {_fmt_args({'output': out})[7:]}" if out is not None else ""
        return f"tool call {one_line(s.get('tool'))}({_fmt_args(s.get('arguments'))}): {state}{out_txt}"
    if step == "effect_intent":
        return (f"effect intent written for {one_line(s.get('channel'))} (attempt {s.get('attempt')}, "
                f"Idempotency-Key {one_line(s.get('request_key'))}) before the request to "
                f"{one_line(s.get('service'))}")
    if step == "ledger_entry":
        return f"ledger entry written for key {one_line(s.get('idempotency_key'))}"
    return one_line(f"{step}: {s}")
