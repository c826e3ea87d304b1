"""The human-in-the-loop flow: every SDK call of the SDK's HITL docs, in one place.

==========================  =========================================================
SDK docs step               here
==========================  =========================================================
``needs_approval=True``     ``tools/publish.py`` (the decorator on ``publish_draft``)
``Runner.run(agent, input)``:func:`start`
``result.interruptions``    :func:`start`, :func:`_finish` (each a ``ToolApprovalItem``)
``result.to_state()``       :func:`_serialize`
``state.to_string()``       :func:`_serialize`
``RunState.from_string``    :func:`_load_run_state`
``state.approve(item)``     :func:`resume`
``state.reject(item, …)``   :func:`resume` (``rejection_message`` = the reviewer's reason)
``Runner.run(agent, state)``:func:`resume`
==========================  =========================================================

Write order (the ledger first, then the checkpoint marked complete: a ledger entry proves the effect). Each
durable write is atomic and sits between failpoints ``<name>:before`` / ``<name>:after``
(:mod:`state.failpoints`); docs/crash-safety.md lists what a crash at each one leaves behind.

0. first checkpoint of a state dir: ``signing_key``, then ``state_id`` (each temp + exclusive
   ``os.link``; never half a file).
1. ``start``: ``checkpoint:start``, the checkpoint (revision 1, ``waiting_for_approval``). A crash
   before it leaves no task (start again); after it, ``start`` with the same key and draft returns it.
2. ``resume``: (a0, reject only) ``rejection:record``, the reject in ``rejections/`` (see
   :mod:`state.rejections`); (a) ``checkpoint:decision``, the human's decision recorded, still waiting; (b)
   ``ledger:record``, the ledger entry, written by the tool inside ``Runner.run`` (approve only);
   (c) ``checkpoint:outcome``, ``completed`` / ``cancelled``. A crash after (a) or (b) leaves a
   waiting checkpoint with the decision recorded; the next ``resume`` with the same decision replays
   the run from the same saved RunState, the tool finds its ledger entry and does not publish again,
   and (c) is written. A different decision is refused, and so is reject once the ledger has the
   entry (an executed action is never marked cancelled).

All of it runs under the task's file lock, so two resumers never interleave.
"""

from __future__ import annotations

import functools
import json
import logging
from importlib import metadata
from typing import Any, Literal

from agents import MaxTurnsExceeded, Runner, RunState, ToolApprovalItem
from agents.models.interface import Model
from agents.result import RunResult
from agents.run_state import SUPPORTED_SCHEMA_VERSIONS

from agent.budget import (BudgetExceeded, BudgetGuard, BudgetedModel, Pricing, apply_max_turns,
                          blocked, make_budget, spend_from_run_state)
from agent.models import build_model, build_offline_model, provider_error
from agent.publisher import build_agent, check_agent, describe, drift, user_message
from state import clock
from state import rejections, secrets
from state.errors import Stopped
from state.schema import (
    ACTION,
    SCHEMA_VERSION,
    Budget,
    Checkpoint,
    Decision,
    ModelSpec,
    arguments_sha256,
    content_sha256,
)
from state.clock import now_iso
from state.settings import settings
from state.files import parse_json_object
from state.storage import Store
from tools.ledger import Ledger
from workflow import tracing
from workflow import reconcile
from workflow.reconcile import refusal
from workflow.trust import carries_the_draft, check_approvals, check_pending_is_the_draft

DecisionWord = Literal["approve", "reject"]

# No hosted trace export: traces go to the state dir (workflow/tracing.py); nothing leaves the machine.
tracing.install()
# The SDK logs a failed model call ("Error getting response") before raising it; with no handler
# configured Python would print that to stderr next to our one STOPPED line, which names the cause.
# The NullHandler only keeps stderr clean: during each run, tracing.recording also attaches a handler
# that writes the SDK's warnings to the task's trace file ({"kind": "log"}).
logging.getLogger("openai.agents").addHandler(logging.NullHandler())


@functools.lru_cache(maxsize=1)
def sdk_version() -> str:
    """The installed ``openai-agents`` version, e.g. ``"0.24.0"``.

    Cached: the SDK loaded in this process cannot change while it runs, and
    ``importlib.metadata.version`` costs ~2 ms a call (benchmarks/roundtrip.py profile).
    """
    return metadata.version("openai-agents")


def run_context(store: Store, cp_task_id: str, sha: str) -> dict[str, str]:
    """The run context: plain JSON only (the SDK's ``to_string()`` raises on a non-JSON value in a dict context).

    Built from our verified checkpoint and passed as ``context=`` / ``context_override=``, so the
    tool's idempotency key never comes from the model's arguments or from the stored RunState.
    """
    return {
        "task_id": cp_task_id,
        "idempotency_key": cp_task_id,
        "content_sha256": sha,
        "ledger_dir": str(store.ledger_dir),
    }


def _pending(interruptions: list[ToolApprovalItem]) -> list[dict[str, Any]]:
    out = []
    for item in interruptions:
        try:
            args = json.loads(item.arguments or "{}")
        except ValueError:
            raise Stopped(f"pending call {item.call_id} has arguments that are not JSON") from None
        if not isinstance(args, dict):
            raise Stopped(f"pending call {item.call_id} has arguments that are not a JSON object")
        out.append({"call_id": item.call_id, "tool": item.name, "arguments": args})
    return out


def _serialize(result: RunResult) -> tuple[str, str]:
    """``result.to_state().to_string()`` and its ``$schemaVersion``."""
    try:
        text = result.to_state().to_string()
    except Exception as exc:  # e.g. a context that is not plain JSON
        raise Stopped(f"the run state cannot be saved ({type(exc).__name__}: {exc})") from None
    return text, json.loads(text)["$schemaVersion"]


def _check_draft_call(pending: list[dict[str, Any]], sha: str) -> None:
    for call in pending:
        if call["tool"] != ACTION:
            raise Stopped(f"the agent asked for tool {call['tool']!r}, not {ACTION}; nothing saved")
        if not carries_the_draft(call["arguments"], sha):
            raise Stopped(
                f"the agent's {ACTION} call does not carry the draft as given (key/action "
                "mismatch); nothing saved"
            )


async def start(store: Store, *, task_id: str, title: str, draft: str, model: Model | None = None,
                spec: ModelSpec | None = None, budget: Budget | None = None,
                expires_in_s: int = 86_400, trace_content: bool = False) -> Checkpoint:
    """Run the agent until it asks to publish, then save the checkpoint (status ``waiting_for_approval``).

    ``spec`` names the model (default offline; ``model`` overrides the instance, for tests) and
    ``budget`` the task's budget (default :func:`agent.budget.make_budget`), both recorded in the
    checkpoint. The approval request is valid for ``expires_in_s`` seconds (``expires_at`` in the
    checkpoint); the run's traces go to the task's trace file (``trace_content``: unredacted bodies).

    If ``task_id`` already has a checkpoint with the same title and draft, return it unchanged
    without calling the model. Raises :class:`Stopped` if it exists with other content,
    if the key is already in the ledger, if the agent did not ask to publish exactly this draft,
    if the API key is missing (before any file is written), if the budget cannot pay for the first
    call, or if the provider fails (nothing saved).
    """
    for what, value in (("the task ID", task_id), ("the title", title), ("the draft", draft)):
        secrets.check_input(what, value)  # before the model sees it, before any file is written
    sha = content_sha256(title, draft)
    spec = spec or ModelSpec()
    budget = budget or make_budget(spec)
    model = model or build_model(spec)  # a missing key stops here, before any file is written
    guard = BudgetGuard(budget, Pricing(spec, budget))
    agent = build_agent(BudgetedModel(model, guard))
    check_agent(agent)  # duplicate tool names, an effect without approval: before any file or run
    store.check_writable(task_id)  # hostile trace/ledger file, lost key or state.id: nothing written
    existing = _existing_task(store, task_id, title, sha)  # before the lock: a refusal leaves no file
    if existing is not None:
        return existing
    with store.task_lock(task_id):
        existing = _existing_task(store, task_id, title, sha)  # again: another start may have won
        if existing is not None:
            return existing
        try:
            with tracing.recording(store, task_id, "start", content=trace_content):
                result = await Runner.run(
                    agent, user_message(title, draft), context=run_context(store, task_id, sha),
                    max_turns=budget.max_turns, hooks=guard,
                    run_config=tracing.run_config(task_id, "start"),
                )
        except Exception as exc:
            raise _run_failure(exc, task_id, "nothing saved") from None
        if not result.interruptions:
            raise Stopped(
                "the agent finished without asking to publish; nothing saved "
                f"(it said: {str(result.final_output)[:200]!r})"
            )
        pending = _pending(result.interruptions)
        _check_draft_call(pending, sha)
        run_state, rs_version = _serialize(result)
        run_state = await _redacted_run_state(store, agent, task_id, sha, run_state)
        now = now_iso()
        expires_at = clock.iso(clock.plus(clock.now(), expires_in_s))
        return store.save(
            {
                "schema_version": SCHEMA_VERSION,
                "task_id": task_id,
                "idempotency_key": task_id,
                "action": ACTION,
                "title": title,
                "content_sha256": sha,
                "status": "waiting_for_approval",
                "decision": None,
                "decisions": [],
                "pending": pending,
                "final_output": None,
                "revision": 1,
                "sdk_version": sdk_version(),
                "run_state_schema_version": rs_version,
                "agent": describe(agent),
                "run_state": run_state,
                "history": [
                    {"at": now, "event": "started", "revision": 1,
                     "detail": {"pending": [p["call_id"] for p in pending], "calls": pending,
                                "expires_at": expires_at, "schema_version": SCHEMA_VERSION,
                                "sdk_version": sdk_version(), "run_state_schema_version": rs_version}}
                ],
                "created_at": now,
                "updated_at": now,
                "model": spec.model_dump(),
                "budget": budget.model_dump(),
                "spend": spend_from_run_state(run_state, guard.pricing).model_dump(),
                "expires_at": expires_at,
                "approval_ttl_s": expires_in_s,
            },
            failpoint="checkpoint:start",
        )


async def _redacted_run_state(store: Store, agent: Any, task_id: str, sha: str, text: str) -> str:
    """``text`` (a RunState JSON) as :func:`state.secrets.redact_run_state` will save it; when that
    replaced a value, the SDK must still load the result (``RunState.from_string``), else
    :class:`Stopped` (nothing saved). Raises :class:`Stopped` for a secret in a structural field."""
    redacted = secrets.redact_run_state(text, what=f"task {task_id}")
    if redacted is text:
        return text
    try:
        await RunState.from_string(agent, redacted,
                                   context_override=run_context(store, task_id, sha))
    except Exception as exc:
        raise Stopped(f"task {task_id}: the run state holds a secret value and the SDK cannot load it "
                      f"redacted ({type(exc).__name__}); nothing saved") from None
    return redacted


def _existing_task(store: Store, task_id: str, title: str, sha: str) -> Checkpoint | None:
    """For ``start``: the task already saved under ``task_id`` with this title and draft (start
    again returns it), or None if the key is new. Raises :class:`Stopped` if the key is taken: by
    another draft, by a ledger entry, or by a rejection record. Reads only."""
    if store.exists(task_id):
        cp = store.load(task_id)
        if cp.title == title and cp.content_sha256 == sha:
            return cp
        raise Stopped(f"task {task_id} already exists with a different draft; use a new --key")
    if Ledger(store.ledger_dir).get(task_id) is not None:
        raise Stopped(f"key {task_id} is already in the ledger; use a new --key")
    if rejections.get(store, task_id) is not None:
        raise Stopped(f"key {task_id} was rejected before; use a new --key")
    return None


def check_stored_run_state(cp: Checkpoint) -> None:
    """Refuse a stored RunState we cannot trust, before the SDK sees it.

    - ``$schemaVersion`` must equal the envelope's and be one the installed SDK supports.
    - Every approval decision inside it (``context.approvals``, ``context.function_tool_approvals``)
      must be one our decision path recorded in ``cp.decisions`` (same call_id, same kind); blanket
      (``True``) or sticky decisions are refused. The SDK's docs warn that ``from_string`` does not
      authenticate approvals; a hand-edited file could otherwise approve a call.

    Raises :class:`Stopped`.
    """
    data = parse_json_object(cp.run_state.encode("utf-8"), f"the RunState of task {cp.task_id}")
    version = data.get("$schemaVersion")
    if version != cp.run_state_schema_version:
        raise Stopped(
            f"task {cp.task_id}: RunState $schemaVersion {version!r} does not match the "
            f"checkpoint's {cp.run_state_schema_version!r}"
        )
    if version not in SUPPORTED_SCHEMA_VERSIONS:
        raise Stopped(
            f"task {cp.task_id}: RunState $schemaVersion {version!r} is not supported by the "
            f"installed openai-agents {sdk_version()}, which reads $schemaVersion "
            f"{_version_range()} (saved by openai-agents {cp.sdk_version})"
        )
    check_approvals(data, cp)


def _version_range() -> str:
    """The RunState ``$schemaVersion`` values the installed SDK reads, e.g. ``"1.0-1.21"``."""
    def key(v: str) -> tuple[int, ...]:
        return tuple(int(p) if p.isdigit() else 0 for p in v.split("."))

    ordered = sorted(SUPPORTED_SCHEMA_VERSIONS, key=key)
    return f"{ordered[0]}-{ordered[-1]}" if len(ordered) > 1 else ordered[0]


async def _load_run_state(store: Store, cp: Checkpoint, model: Model | None) -> tuple[Any, RunState]:
    """Rebuild the agent from code and the RunState from the verified checkpoint."""
    check_stored_run_state(cp)
    agent = build_agent(model or build_offline_model())
    check_agent(agent)
    changes = drift(cp.agent.model_dump(), describe(agent))
    if changes:
        raise Stopped(f"task {cp.task_id}: the agent changed since it was saved: {'; '.join(changes)}")
    saved_mm, now_mm = cp.sdk_version.split(".")[:2], sdk_version().split(".")[:2]
    if saved_mm != now_mm:
        raise Stopped(
            f"task {cp.task_id} was saved by openai-agents {cp.sdk_version}; installed is "
            f"{sdk_version()}; resume it with the version that saved it"
        )
    try:
        state = await RunState.from_string(
            agent,
            cp.run_state,
            context_override=run_context(store, cp.task_id, cp.content_sha256),
        )
    except Exception as exc:  # the SDK's own validation: never guess past it
        raise Stopped(f"task {cp.task_id}: the SDK refused the saved RunState: {exc}") from None
    return agent, state


def _bind(cp: Checkpoint, interruptions: list[ToolApprovalItem]) -> None:
    """The interruptions in the RunState must be exactly the pending calls the reviewer saw."""
    if not interruptions:
        raise Stopped(f"task {cp.task_id}: the saved run has no interruption to answer")
    if _pending(interruptions) != [p.model_dump() for p in cp.pending]:
        raise Stopped(
            f"task {cp.task_id}: the pending call in the saved run differs from the one shown "
            "for review (call_id, tool or arguments)"
        )
    if cp.decision is not None:
        item = interruptions[0]
        if (cp.decision.call_id, cp.decision.tool) != (item.call_id, item.name) or (
            cp.decision.arguments_sha256 != arguments_sha256(json.loads(item.arguments or "{}"))
        ):
            raise Stopped(f"task {cp.task_id}: the recorded decision is for another call")


async def resume(
    store: Store,
    *,
    task_id: str,
    decision: DecisionWord,
    by: str,
    reason: str | None = None,
    model: Model | None = None,
    budget_changes: dict[str, Any] | None = None,
    trace_content: bool = False,
) -> Checkpoint:
    """Apply a human's decision to a waiting task and resume the run from disk.

    Returns the new checkpoint (``completed``, ``cancelled``, or ``waiting_for_approval`` again
    if the run stopped at a new interruption). Idempotent: approve on a completed task, or reject
    on a cancelled one, returns it unchanged. Raises :class:`Stopped` for reject on a completed
    task (an executed action is never marked cancelled), approve on a cancelled one, a decision
    that contradicts the one already recorded, and every integrity, drift or ledger mismatch.

    Budget: ``budget_changes`` (``make_budget`` keywords) raise or lower the recorded
    budget. If the spend already leaves no room for the next call, nothing runs and the task is
    saved as ``budget_exceeded`` (a later resume with a larger budget continues). A provider
    failure raises :class:`Stopped` naming the cause; the checkpoint keeps its saved RunState.

    Expiry: a new approval after ``expires_at`` is refused (``approval expired``); a
    reject is still accepted; an ``expired`` task is never executed (reject returns it unchanged).
    """
    want = "approved" if decision == "approve" else "rejected"
    secrets.check_input("the reviewer name (--by)", by)  # before any file is written
    secrets.check_input("the reason", reason)
    # Pre-flight, before the lock: a decision the table refuses is refused before a lock file is
    # created, so a refusal leaves the state dir byte-identical. Checked again under the lock.
    cp = store.load(task_id)
    check_agent(build_agent(build_offline_model()))  # the code's agent, before a lock file is made
    store.check_writable(task_id)  # a symlinked/FIFO ledger entry or trace file: before write (a)
    reconcile.check(store, cp, decision)
    with store.task_lock(task_id):
        cp = store.load(task_id)
        if reconcile.check(store, cp, decision).kind == "unchanged":
            return cp
        # A secret set since the last save that sits in a structural field of this checkpoint
        # (e.g. in a call ID) would refuse write (a): refuse now, before the rejection record.
        secrets.redact_checkpoint(cp.body())
        ledger = Ledger(store.ledger_dir)

        budget = make_budget(cp.model, base=cp.budget, **(budget_changes or {}))
        model = model or build_model(cp.model)
        guard = BudgetGuard(budget, Pricing(cp.model, budget))
        spend = spend_from_run_state(cp.run_state, guard.pricing)
        agent, state = await _load_run_state(store, cp, BudgetedModel(model, guard))
        apply_max_turns(state, budget)
        why = blocked(budget, spend, guard.pricing)
        if why is not None and want == "approved":  # the next call cannot be paid: run nothing
            return _budget_stop(store, cp, budget, spend, why)
        interruptions = state.get_interruptions()
        _bind(cp, interruptions)
        if len(interruptions) != 1:
            raise Stopped(f"task {task_id} has {len(interruptions)} pending calls; expected one")
        item = interruptions[0]
        check_pending_is_the_draft(cp)
        if cp.decision is not None:
            reason = cp.decision.reason
        # Applied in memory first, so the SDK's own checks of the approval run before write (a).
        try:
            if want == "approved":
                state.approve(item)
            else:
                state.reject(item, rejection_message=reason)
        except Exception as exc:
            raise Stopped(f"task {task_id}: the SDK refused the decision: {exc}") from None

        if cp.decision is None:  # write (a): the decision, before any effect
            rec = Decision(
                decision=want, by=by, at=now_iso(), reason=reason, call_id=item.call_id,
                tool=item.name, arguments_sha256=arguments_sha256(json.loads(item.arguments or "{}")),
            )
            cp = _record_decision(store, cp, rec, ledger)
        if want == "rejected" and blocked(budget, spend, guard.pricing) is not None:
            return _cancel_unpaid(store, cp, budget, spend)
        try:
            with tracing.recording(store, task_id, "resume", content=trace_content):
                # write (b) happens inside, in the tool
                result = await Runner.run(agent, state, hooks=guard,
                                          run_config=tracing.run_config(task_id, "resume"))
        except Exception as exc:
            found = _find(exc, (BudgetExceeded, MaxTurnsExceeded))
            if found is not None and want == "rejected":  # a reject never waits for budget
                return _cancel_unpaid(store, cp, budget, spend)
            if found is not None:  # the call was not made; the RunState saved before it stays
                why = str(found) if isinstance(found, BudgetExceeded) else f"budget exceeded: {found}"
                return _budget_stop(store, cp, budget, spend, why)
            raise _run_failure(exc, task_id, "the decision is recorded, run resume again") from None
        return await _finish(store, cp, agent, result, ledger, want, budget=budget,
                             pricing=guard.pricing)


def _record_decision(store: Store, cp: Checkpoint, rec: Decision, ledger: Ledger) -> Checkpoint:
    """Write (a): the human's decision ``rec`` into a new revision of ``cp`` (compare-and-swap).

    A reject first creates its rejection record (which no restored checkpoint can undo), then checks
    the ledger again: an approval that ran meanwhile (a lost lock) wins, since an executed action is
    never cancelled. If this reject cannot be recorded (the ledger has the entry, or another process
    wrote the checkpoint first), the record this call created is removed again, so a refused
    command leaves nothing behind. Raises :class:`Stopped`.
    """
    created = False
    try:
        if rec.decision == "rejected":
            created = rejections.record(store, cp.task_id, cp.content_sha256, rec)[1]
            if ledger.get(cp.idempotency_key) is not None:
                raise Stopped(refusal("executed", task_id=cp.task_id, status=cp.status))
        return store.save_revision(
            cp, failpoint="checkpoint:decision", decision=rec, decisions=[*cp.decisions, rec],
            event=("decision_recorded", rec.model_dump(exclude={"arguments_sha256"})))
    except Stopped:
        if created:
            rejections.remove(store, cp.task_id)
        raise


def _cancel_unpaid(store: Store, cp: Checkpoint, budget: Budget, spend: Any) -> Checkpoint:
    """End a rejected task as ``cancelled`` without calling the model again: a reject never needs
    budget (the tool does not run; only the model's closing sentence is skipped, so
    ``final_output`` stays null and the RunState is the one saved before)."""
    return store.save_revision(
        cp, failpoint="checkpoint:outcome", status="cancelled", pending=[], budget=budget,
        spend=spend, event=("cancelled", {"ledger": None, "model_called": False}))


def _budget_stop(store: Store, cp: Checkpoint, budget: Budget, spend: Any, why: str) -> Checkpoint:
    """Save ``budget_exceeded`` with the budget and spend (RunState unchanged, so nothing is lost
    and nothing already done is redone); unchanged if it is already saved that way."""
    if cp.status == "budget_exceeded" and cp.budget == budget and cp.spend == spend:
        return cp
    return store.save_revision(cp, failpoint="checkpoint:budget", status="budget_exceeded",
                               budget=budget, spend=spend, event=("budget_exceeded", {"why": why}))


def _find(exc: BaseException, types: tuple[type[BaseException], ...]) -> BaseException | None:
    """The first exception of ``types`` in ``exc``'s chain (``__cause__``/``__context__``), or None."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, types):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None


def _run_failure(exc: BaseException, task_id: str, saved: str) -> Stopped:
    """The one-line :class:`Stopped` for a failed ``Runner.run``: ours, the budget, or the provider."""
    stopped = _find(exc, (Stopped,))
    if isinstance(stopped, Stopped):
        return stopped
    budget = _find(exc, (BudgetExceeded, MaxTurnsExceeded))
    if budget is not None:
        return Stopped(f"task {task_id}: {budget}; {saved}")
    cause = provider_error(exc, secret=settings().api_key)
    if cause is None:
        cause = f"the run failed ({type(exc).__name__}: {exc})"
    return Stopped(f"task {task_id}: {cause}; {saved}")


async def _finish(store: Store, cp: Checkpoint, agent: Any, result: RunResult, ledger: Ledger,
                  want: str, *, budget: Budget, pricing: Pricing) -> Checkpoint:
    """Write (c): the outcome, after checking the ledger agrees with it, with the budget and the
    spend read from the new RunState."""
    run_state, rs_version = _serialize(result)
    run_state = await _redacted_run_state(store, agent, cp.task_id, cp.content_sha256, run_state)
    recorded = {"budget": budget, "spend": spend_from_run_state(run_state, pricing)}
    entry = ledger.get(cp.idempotency_key)
    if result.interruptions:
        pending = _pending(result.interruptions)
        expires_at = clock.iso(clock.plus(clock.now(), cp.approval_ttl_s))
        return store.save_revision(
            cp, failpoint="checkpoint:outcome", status="waiting_for_approval", decision=None,
            pending=pending, run_state=run_state, run_state_schema_version=rs_version,
            expires_at=expires_at, **recorded,
            event=("interrupted", {"pending": [p["call_id"] for p in pending], "calls": pending,
                                   "expires_at": expires_at}))
    if want == "approved" and entry is None:
        raise Stopped(f"task {cp.task_id}: approved, but the tool left no ledger entry; a human must check")
    if want == "rejected" and entry is not None:
        raise Stopped(f"task {cp.task_id}: rejected, but the ledger shows it executed; a human must check")
    status = "completed" if want == "approved" else "cancelled"
    final = result.final_output
    return store.save_revision(
        cp, failpoint="checkpoint:outcome", status=status, pending=[],
        final_output=final if isinstance(final, str) else json.dumps(final, default=str),
        run_state=run_state, run_state_schema_version=rs_version, **recorded,
        event=(status, {"ledger": entry.published_at if entry else None}))
