"""The human-in-the-loop story, told as the SDK's docs tell it: every SDK call of the flow is here.

====  =============================================  =========================================
step  SDK (docs: "Human-in-the-loop")                here
====  =============================================  =========================================
1     ``@function_tool(needs_approval=rule)``        the app's tool (``workflow/effect.py``)
2     ``Agent(..., tools=[tool])``                   ``Application.build_agent``
3     ``Runner.run(agent, input)``                   :func:`start`
3'    ``Runner.run_streamed``, ``stream_events()``    ``workflow/streaming.py`` (``on_event``)
4     ``result.interruptions``                       :func:`start` (each a ``ToolApprovalItem``)
5     ``result.to_state().to_string()``              :func:`_saved_text`, then ``store.save``
6     ``RunState.from_string(agent, text)``          :func:`_from_string`
7     ``state.get_interruptions()``                  :func:`resume`
8     ``state.approve(item)`` /                      :func:`resume` (per call: ``--call``;
      ``state.reject(item, rejection_message=)``     ``always``: each pending call, recorded)
9     ``Runner.run(agent, state)``                   :func:`resume`, then :func:`_finish`
====  =============================================  =========================================

Several calls in one turn pause together, each decided on its own (``workflow/calls.py``). Every
other line is a guard, one named call (``guards.py``, ``reconcile.py``, ``state/``). Write order:
the decision before any effect, the ledger entry (the effect), the outcome last; each write atomic,
a compare-and-swap on the revision read (docs/crash-safety.md, docs/decision-table.md).
"""

from __future__ import annotations

from typing import Any, Literal

from agents import Runner, RunState
from agents.models.interface import Model
from agents.result import RunResult

from workflow.budget import BudgetGuard, Pricing, apply_max_turns, blocked, make_budget
from workflow.budget import spend_from_run_state
from state import open_stores, secrets, settings
from state.errors import Refused
from state.schema import Budget, Checkpoint, ModelSpec, Team
from state.files.store import Store
from workflow import calls, edits, guards, reconcile, streaming, team as quorum
from workflow.agent_check import check_agent, describe, gated_tool
from workflow.application import Application
from workflow.observe import tracing

DecisionWord = Literal["approve", "reject"]

tracing.install()  # no hosted trace export, no SDK log on stderr: traces go to the state dir


@settings.operation
async def start(store: Store, app: Application, *, task_id: str, title: str,
                content: dict[str, str] | None, input: str, channels: list[str] | None = None,
                model: Model | None = None, spec: ModelSpec | None = None,
                budget: Budget | None = None, expires_in_s: int = 86_400,
                trace_content: bool = False, on_event: streaming.OnEvent | None = None,
                team: Team | None = None, action: str | None = None) -> Checkpoint:
    """Run ``app``'s agent on ``input`` (any SDK input) until it asks for its action (a tool
    declared through :mod:`workflow.effect`), then save the checkpoint (``waiting_for_approval``).

    ``content`` (``{argument: text}``): what each call's arguments but ``channel`` must equal
    (:func:`state.schema.content_fingerprint`); None: the model proposes them, a reviewer approves
    each call as shown, and a reject goes back to the model; ``title`` labels the task;
    ``channels`` (default one): one call and one effect each; ``spec``/``model``: the model
    (default offline); ``budget``: :func:`workflow.budget.make_budget`; ``expires_in_s``: how
    long the request is valid; ``trace_content``/``on_event``: the trace unredacted, the run
    streamed; ``team``: who asked and the policy; ``action``: the tool gated (default
    ``app.action``, else the agent's first). The same task again returns the saved one.
    Raises :class:`Refused`, nothing saved: the key is taken, no such tool, the model did not
    ask so, no API key, the budget cannot pay, or the provider fails."""
    sha = guards.task_input(task_id, title, content, app.content_labels)  # before the model sees it
    channels = guards.task_channels(channels)
    spec = spec or ModelSpec()
    budget = budget or make_budget(spec)
    guard = BudgetGuard(budget, Pricing(spec, budget), on_turn=guards.check_start_turn)
    agent = app.agent(spec, guard, model)
    check_agent(agent)  # duplicate tool names, an effect without approval: before any file or run
    tool = gated_tool(agent, action or app.action, channels)  # the tool with an effect: the action
    action = tool.name
    service = guards.service_url(tool)  # the service it calls, if any (workflow/external.py)
    store.check_writable(task_id)  # hostile files, a damaged key or state.id: nothing written
    existing = guards.existing_task(store, task_id, title, sha, channels, action, input, agent)
    if existing is not None:  # the same task again; before the lock (no file), again under it
        return existing
    async with guards.task_lock(store, task_id, leave_nothing=True):  # awaited, not blocking
        existing = guards.existing_task(store, task_id, title, sha, channels, action, input, agent)
        if existing is not None:  # another start won
            return existing
        context = guards.run_context(store, task_id, sha, channels, action, service)
        config = tracing.run_config(task_id, "start", action, app.rejection_text)
        try:
            run = Runner.run if on_event is None else streaming.runner(on_event)
            with tracing.recording(store, task_id, "start", content=trace_content):
                result = await run(agent, input, context=context, max_turns=budget.max_turns,
                                   hooks=guard, run_config=config)
        except Exception as exc:
            raise guards.run_failure(exc, task_id, "nothing saved") from None
        pending = guards.check_asked_to_publish(result.interruptions, result.final_output, sha,
                                                channels, action)
        run_state, rs_version = await _saved_text(agent, result, task_id, context)
        spend = spend_from_run_state(run_state, guard.pricing)
        first = guards.first_checkpoint(
            task_id=task_id, action=action, title=title, sha=sha, channels=channels,
            pending=pending, run_state=run_state, rs_version=rs_version, agent=describe(agent),
            spec=spec, budget=budget, spend=spend, expires_in_s=expires_in_s, service=service,
            team=team, command=app.command, input=input)
        return store.save(first, failpoint="checkpoint:start")


@settings.operation
async def resume(store: Store, app: Application, *, task_id: str, decision: DecisionWord,
                 by: str, reason: str | None = None, call_id: str | None = None,
                 always: bool = False, model: Model | None = None, edit: edits.Edit | None = None,
                 budget_changes: dict[str, Any] | None = None, trace_content: bool = False,
                 expect_revision: int | None = None, on_event: streaming.OnEvent | None = None,
                 checked: tuple[Checkpoint, reconcile.Verdict] | None = None) -> Checkpoint:
    """Apply a human's decision on one pending call (``call_id``; None: the only one) and resume
    the run from disk with ``app``'s agent; ``always`` decides the tool's other pending calls the
    same way (``source: sticky``; later calls wait for a human: :func:`workflow.calls.to_apply`).
    Returns the new checkpoint: ``completed``, ``cancelled``, ``waiting_for_approval`` again, or
    ``budget_exceeded`` (``budget_changes``: :func:`workflow.budget.make_budget` keywords). The
    decision table (:mod:`workflow.reconcile`) says what a decision may do, judged before the lock
    (``checked``: :func:`workflow.reconcile.preflight`'s) and under it; then the quorum
    (:func:`workflow.team.count`). ``expect_revision``: the revision the reviewer saw;
    ``on_event``: stream the run; ``edit``: approve with edits (:mod:`workflow.edits`). Raises
    :class:`Refused` for every refusal, integrity, drift or ledger mismatch."""
    want = "approved" if decision == "approve" else "rejected"
    if checked is None:  # before the lock: no file
        checked = reconcile.preflight(store, task_id, decision, call_id, by=by, reason=reason,
                                      edit=edit)
    cp, verdict = checked
    guard = BudgetGuard(cp.budget, Pricing(cp.model, cp.budget))  # its budget: under the lock
    built_for = cp.model if verdict.kind != "unchanged" else None  # None: runs nothing, no key
    agent = app.agent(built_for, guard, model)  # once per resume
    check_agent(agent)  # today's code, checked before a lock file is made
    verified = (cp.revision, cp.mac) if verdict.kind != "unchanged" else None
    if verified is not None:
        guards.check_saved_against_code(cp, agent, app)
    async with guards.task_lock(store, task_id) as held:  # awaited: the loop goes on meanwhile
        cp, verdict = reconcile.recheck(store, task_id, decision, call_id, edit=edit)
        guards.check_revision(cp, expect_revision, want, call_id, by, verdict)  # on what is there
        if verdict.kind == "unchanged":
            return cp
        call_id = calls.target(cp, call_id)
        secrets.redact_checkpoint(cp.body())  # a secret set since the save, in a structural field
        budget = make_budget(cp.model, base=cp.budget, **(budget_changes or {}))
        guard.budget = budget
        guard.pricing = Pricing(cp.model, budget)
        spend = spend_from_run_state(cp.run_state, guard.pricing)
        if cp.model != built_for:  # the table's answer changed since (a race), or another model
            agent = app.agent(cp.model, guard, model)
        if verified != (cp.revision, cp.mac):  # another revision since
            guards.check_saved_against_code(cp, agent, app)
        context = guards.run_context(store, cp.task_id, cp.content_sha256, cp.channels, cp.action,
                                     cp.service, held)
        state = await _from_string(agent, cp.run_state, cp.task_id, context)
        apply_max_turns(state, budget)
        why = blocked(budget, spend, guard.pricing)
        if why is not None and want == "approved":  # the next call cannot be paid: run nothing
            return guards.budget_stop(store, cp, budget, spend, why)
        items = guards.bind(cp, state.get_interruptions())  # exactly the calls the reviewer saw
        edits.check_pending(cp, call_id, want, edit, agent.tools)  # the draft, or edits that fit
        edits.check_sticky(cp, want, edit, always)  # sticky calls skip the check of edits
        rec = guards.decision_for(store, cp, items[call_id], want, by, reason, always)
        rec = edits.with_edits(rec, edit, items[call_id].arguments, cp)  # one on record wins
        cp, go_on = quorum.count(store, cp, rec, edits=edit is not None, always=always)
        if not go_on:  # the policy wants more approvals: this one is recorded, nothing runs
            return cp
        with guards.sdk_refusal(task_id):  # in memory first: the SDK checks before any write
            for d in calls.to_apply(cp, rec):  # replayed ones too; one per call, no sticky rule
                item = items[d.call_id]
                if d.decision == "approved" and d.edits is None:
                    state.approve(item)
                else:  # a reject, or edits: the message says exactly what the reviewer approved
                    message = edits.rejection_message(d, cp, app.edit_message)
                    state.reject(item, rejection_message=message)
        if calls.decision_of(cp, rec.call_id) is None:  # the human's decision, before any effect
            cp = guards.record_decision(store, cp, rec)
        if why is not None and guards.nothing_executed(store, cp):  # a reject never waits
            return guards.cancel_unpaid(store, cp, budget, spend)
        run = Runner.run if on_event is None else streaming.runner(on_event)
        config = tracing.run_config(task_id, "resume", cp.action, app.rejection_text)
        open_stores.advance(held, cp)  # the outcome is written after it and its gate's bindings
        try:
            with tracing.recording(store, task_id, "resume", content=trace_content):
                result = await run(agent, state, hooks=guard, run_config=config)  # the tool writes
        except Exception as exc:
            cp = guards.rebased(store, cp, held)
            return guards.after_failed_run(store, cp, exc, want, budget=budget, spend=spend)
        cp = guards.rebased(store, cp, held)
        return await _finish(store, cp, agent, result, budget, guard.pricing, context)


@settings.operation
async def decide(store: Store, app: Application, *, task_id: str, decision: DecisionWord, by: str,
                 edit: edits.Edit | None = None, **kwargs: Any) -> Checkpoint:
    """:func:`resume` (``kwargs``: its own; ``checked``: for this first decision); then, while a
    pending call carries content approved with edits, or was so approved and cut off by a crash
    (:func:`workflow.edits.complying`, ``unfinished``), one more :func:`resume` approves it."""
    edits.check_decision(edit, decision)
    cp = await resume(store, app, task_id=task_id, decision=decision, by=by, edit=edit, **kwargs)
    kwargs.pop("checked", None)
    for _ in range(len(cp.channels)):  # at most one such call per channel
        found = edits.complying(cp) or edits.unfinished(cp)
        if not found:
            break
        call_id, rec = found[0]
        again = {**kwargs, "call_id": call_id, "always": False, "reason": edits.AUTO_REASON,
                 "expect_revision": cp.revision}  # the checkpoint just judged
        cp = await resume(store, app, task_id=task_id, decision="approve", by=rec.by, **again)
    return cp


async def _finish(store: Store, cp: Checkpoint, agent: Any, result: RunResult,
                  budget: Budget, pricing: Pricing, context: dict[str, Any]) -> Checkpoint:
    """The outcome, written last: waiting again (undecided calls, a new interruption), or completed
    / cancelled once the ledger agrees; the budget and spend of the new RunState."""
    run_state, rs_version = await _saved_text(agent, result, cp.task_id, context)
    changes = guards.after_run(store, cp, result.interruptions, result.final_output)
    return guards.save_outcome(store, cp, run_state=run_state,
                               run_state_schema_version=rs_version, budget=budget,
                               spend=spend_from_run_state(run_state, pricing), **changes)


async def _saved_text(agent: Any, result: RunResult, task_id: str,
                      context: dict[str, Any]) -> tuple[str, str]:
    """``result.to_state().to_string()`` as saved, and its ``$schemaVersion``; secrets redacted by
    structure (:func:`state.secrets.redact_run_state`), and then the SDK must still load it. Raises
    :class:`Refused` (nothing saved) if it cannot be serialised or loaded redacted."""
    try:
        text = result.to_state().to_string()
    except Exception as exc:  # e.g. a context that is not plain JSON
        raise guards.unsaveable(exc) from None
    version = guards.schema_version_of(text)
    redacted = secrets.redact_run_state(text, what=f"task {task_id}")
    if redacted is not text:
        try:
            await _from_string(agent, redacted, task_id, context)
        except Refused as exc:
            raise guards.unloadable_redacted(task_id, exc) from None
    return redacted, version


async def _from_string(agent: Any, text: str, task_id: str, context: dict[str, Any]) -> RunState:
    """``RunState.from_string(agent, text)`` with the run ``context`` rebuilt from our verified
    checkpoint (``context_override``: the idempotency key never comes from the file). Raises
    :class:`Refused` if the SDK refuses it: its own validation, never guessed past."""
    try:
        return await RunState.from_string(agent, text, context_override=context)
    except Exception as exc:
        raise guards.unloadable(task_id, exc) from exc
