"""The guards around the human-in-the-loop story (workflow/hitl.py): each a named check or write.

The story file calls each of these in one line; here is how each works. The SDK is imported only for
its types and version data (``RunState``'s supported schema versions, ``ToolApprovalItem``); every
SDK call of the flow itself stays in ``workflow/hitl.py``.
"""

from __future__ import annotations

import functools
import json
from contextlib import contextmanager
from importlib import metadata
from typing import Any, Iterator, Optional

from agents import MaxTurnsExceeded, ModelBehaviorError, ToolApprovalItem
from agents.run_state import SUPPORTED_SCHEMA_VERSIONS

from workflow.budget import BudgetExceeded
from workflow.models import provider_error
from workflow.agent_check import describe, drift, effect_tools, gated_tool
from state import clock, open_stores, secrets
from state.clock import now_iso
from state.errors import Next, Part, Refused
from state.records import is_end_mark
from state.schema import (MAX_CHANNELS, MAX_CHECKPOINT_BYTES, PREVIEW_CHANNEL, PROPOSED, SCHEMA_VERSION,
                          UNNAMED_CHANNEL, Budget, Checkpoint, Decision, ModelSpec, arguments_sha256, call_id_problem,
                          CONTENT_VALUE_RULE, MAX_CONTENT_BYTES, canonical_json, content_fingerprint, input_fingerprint,
                          content_of, valid_channel, valid_content)
from state.fileio import parse_object_shared, parse_shared
from state.settings import settings
from state.store import TaskStore as Store
from state.terminal import one_line
from workflow import calls
from workflow.locking import task_lock  # noqa: F401  (the story calls it guards.task_lock)
from workflow.reconcile import ran_before, refusal
from workflow.trust import carries_the_draft, check_approvals, only_action


@functools.lru_cache(maxsize=1)
def sdk_version() -> str:
    """The installed ``openai-agents`` version, e.g. ``"0.24.0"``.

    Cached: the SDK loaded in this process cannot change while it runs, and
    ``importlib.metadata.version`` costs ~2 ms a call (benchmarks/roundtrip.py profile).
    """
    return metadata.version("openai-agents")


def run_context(store: Store, cp_task_id: str, sha: str, channels: list[str], action: str,
                service: Optional[str] = None, run: Optional[str] = None) -> dict[str, Any]:
    """The run context: plain JSON only (the SDK's ``to_string()`` raises on a non-JSON value in a dict context).

    Built from our verified checkpoint and passed as ``context=`` / ``context_override=``, so the
    tool's idempotency key never comes from the model's arguments or from the stored RunState
    (the tool derives each channel's key from ``task_id`` and ``channels``); ``action`` is the
    task's action (the gated tool's name, ``Checkpoint.action``). ``store`` is a token
    for ``store`` in this process (:mod:`state.open_stores`): the context is saved in the
    RunState, so no path or database URL goes in it. ``service``: the URL of the service the
    task's effect goes through (``Checkpoint.service``), or None for the local ledger; the gate
    refuses a call when the tool's service is another (:mod:`workflow.external`). ``run``: a
    resume's token for the checkpoint it verified (:func:`state.open_stores.verified_run`), or None.
    """
    return {
        "task_id": cp_task_id,
        "idempotency_key": cp_task_id,
        "content_sha256": sha,
        "channels": list(channels),
        "action": action,
        "store": open_stores.token_for(store),
        "service": service,
        **({"run": run} if run is not None else {}),
    }


def service_url(tool: Any) -> Optional[str]:
    """The URL of the service ``tool`` (the agent's gated tool) sends its effect to now
    (:func:`workflow.effect.service_of`), or None: a local effect."""
    from workflow.effect import service_of

    found = service_of(tool)
    return None if found is None else found.url


def task_input(task_id: str, title: str, content: Any, labels: Any = None) -> str:
    """The fingerprint of a new task's ``content`` (:func:`state.schema.content_fingerprint`),
    after the one check of what ``start`` is given, before the model sees it and before any file
    is written: ``content`` is a non-empty ``{argument: text}`` (strings, no ``channel`` key,
    which is the engine's), and neither ``task_id``, ``title`` nor a content value holds a secret
    value (:func:`state.secrets.check_input`; a content value is named ``labels[argument]``,
    default ``the <argument>``; one equal to ``title`` was checked as the title). Raises
    :class:`Refused` (nothing saved). ``content`` None: the model proposes the arguments and the
    reviewer approves each call as shown; returns :data:`state.schema.PROPOSED`."""
    for what, value in (("the task ID", task_id), ("the title", title)):
        secrets.check_input(what, value)
    if content is None:
        return PROPOSED
    if not content or not valid_content(content):
        raise Refused("usage", f"the content must be a non-empty {{argument: value}} ({CONTENT_VALUE_RULE}), "
                      "without 'channel'")
    size = len(canonical_json(content))
    if size > MAX_CONTENT_BYTES:
        raise Refused("unsafe_input", f"the content is {size} bytes of JSON, more than the {MAX_CONTENT_BYTES} "
                      "a task may carry; nothing saved")
    for key, value in content.items():
        if isinstance(value, str) and value != title:
            secrets.check_input((labels or {}).get(key, f"the {key}"), value)
    return content_fingerprint(content)


def task_channels(channels: list[str] | None) -> list[str]:
    """The channels of a new task: ``channels``, default ``[UNNAMED_CHANNEL]``. Raises
    :class:`Refused` (nothing saved) for a name outside 1-32 of ``a-z0-9-``, a repeated name, more
    than :data:`state.schema.MAX_CHANNELS`, or only the private preview channel (a task must have a
    public channel, which needs a human)."""
    channels = list(channels or [UNNAMED_CHANNEL])
    bad = [c for c in channels if not valid_channel(c)]
    if bad:
        raise Refused("unsafe_input", f"channel {bad[0][:40]!r} is not allowed: use 1-32 of a-z0-9-")
    if len(set(channels)) != len(channels) or len(channels) > MAX_CHANNELS:
        raise Refused("unsafe_input", f"channels must be distinct, at most {MAX_CHANNELS}: {', '.join(channels)}")
    if channels == [PREVIEW_CHANNEL]:
        raise Refused("usage", [f"a task needs a public channel: {PREVIEW_CHANNEL} alone needs no human, so "
                               "there would be nothing to approve", Next("add_channel")])
    return channels


def pending_calls(interruptions: list[ToolApprovalItem]) -> list[dict[str, Any]]:
    """``[{"call_id", "tool", "arguments"}]`` of ``interruptions`` (arguments parsed). Raises
    :class:`Refused` if a call's arguments are not a JSON object."""
    out = []
    for item in interruptions:
        try:
            args = json.loads(item.arguments or "{}")
        except ValueError:
            raise Refused("integrity", f"pending call {item.call_id!r} has arguments that are not JSON") from None
        if not isinstance(args, dict):
            raise Refused("integrity", f"pending call {item.call_id!r} has arguments that are not a JSON object")
        out.append({"call_id": item.call_id, "tool": item.name, "arguments": args})
    return out


def check_call_ids(pending: list[dict[str, Any]], saved: str) -> None:
    """Each new pending call's ID is a plain word (:func:`state.schema.call_id_problem`): it is
    printed and pasted into ``resume --call``, so a model cannot choose one that forges a line or
    runs a command. Checked before the checkpoint is written. Raises :class:`Refused` naming the
    call ID escaped, ``saved`` saying what was (not) saved."""
    for call in pending:
        problem = call_id_problem(call["call_id"])
        if problem is not None:
            raise Refused("agent", f"the agent's {one_line(str(call['tool']))[:60]} call: {problem}; {saved}")


def schema_version_of(run_state: str) -> str:
    """The ``$schemaVersion`` of a serialised RunState (the SDK's format version, e.g. ``"1.21"``)."""
    return parse_shared(run_state)["$schemaVersion"]


def check_draft_call(pending: list[dict[str, Any]], sha: str, channels: list[str], action: str) -> None:
    """Each pending call is ``action`` of the content as given, on one of ``channels`` (a call
    naming none only in a one-channel task), no channel asked twice. Raises :class:`Refused`."""
    seen: set[Any] = set()
    for call in pending:
        if call["tool"] != action:
            raise Refused("agent", f"the agent asked for tool {str(call['tool'])[:40]!r}, not {action}: "
                          f"{only_action(action)}; nothing saved")
        if not carries_the_draft(call["arguments"], sha, channels):
            raise Refused(
                "agent", f"the agent's {action} call does not carry the content as given on one of the task's "
                f"channels ({', '.join(channels)}) (key/action mismatch); nothing saved"
            )
        channel = call["arguments"].get("channel") or channels[0]
        if channel in seen:
            raise Refused("agent", f"the agent asked twice to call {action} on {channel}; nothing saved")
        seen.add(channel)


#: How many times its JSON a ``start`` turn's checkpoint can be: the run state holds the turn's
#: calls several times over, each a JSON text inside JSON (so escaped again), and the envelope
#: holds them twice more. Measured at about 13.5 for drafts of emoji (the most escaping there is,
#: ``\ud83d\ude00`` per character); 16 leaves a margin.
TURN_TO_CHECKPOINT = 16


def check_start_turn(context: Any, agent: Any, response: Any) -> None:
    """``start``'s check of each model response of ``agent``, before any of its tools runs (the run's
    ``BudgetGuard(on_turn=…)``): in a turn where a call of the task's action names one of the
    private channels of ``agent``'s tool of that name (:func:`workflow.effect.private_channels`;
    such a call runs without a human: its effect happens in this very run), every call
    of the turn must be one ``start`` accepts (:func:`check_draft_call`), and one of them must wait
    for a human (a call on a public channel), else ``start`` would refuse after that effect (or
    after a later turn), leaving an effect no saved task accounts for. So must the refusals of the
    save that are known from the turn already: it holds no secret's value (no field of it is
    redacted then, so none can hold one that could not be), and it is small enough that the
    checkpoint holding it fits (:data:`TURN_TO_CHECKPOINT` times its JSON, within
    ``MAX_CHECKPOINT_BYTES``). Raises :class:`Refused` (nothing run, nothing saved)."""
    from workflow.effect import private_channels

    task = getattr(context, "context", None)
    if not isinstance(task, dict) or not isinstance(task.get("action"), str):
        return
    action = task["action"]
    asked = []
    for item in getattr(response, "output", None) or []:
        if getattr(item, "type", None) != "function_call":
            continue
        try:
            arguments = json.loads(getattr(item, "arguments", None) or "{}")
        except ValueError:
            arguments = None
        asked.append({"call_id": getattr(item, "call_id", None), "tool": getattr(item, "name", None),
                      "arguments": arguments if isinstance(arguments, dict) else {}})
    private = frozenset().union(*(private_channels(t) for t in getattr(agent, "tools", None) or []
                                  if getattr(t, "name", None) == action))

    def on_private(call: dict[str, Any]) -> bool:
        channel = call["arguments"].get("channel")  # any JSON value: a list is no channel
        return isinstance(channel, str) and channel in private

    if any(c["tool"] == action and on_private(c) for c in asked):
        check_call_ids(asked, "nothing saved")
        check_draft_call(asked, task["content_sha256"], task["channels"], action)
        if all(on_private(c) for c in asked):
            raise Refused("agent", f"the agent asked for {action} on {', '.join(sorted(private))} alone, which "
                          f"needs no human, and for none of the task's other channels in the same turn; "
                          f"nothing run, nothing saved")
        items = [i.model_dump(mode="json") if hasattr(i, "model_dump") else i for i in response.output]
        text = json.dumps(items, default=str)
        name = secrets.secret_in(text)
        if name is not None:
            raise Refused("secret", f"the agent's turn holds the value of {name}, and it asks for a call that "
                          f"runs without a human; nothing run, nothing saved")
        if TURN_TO_CHECKPOINT * len(text) > MAX_CHECKPOINT_BYTES:
            raise Refused("agent", f"the agent's turn is {len(text)} bytes of JSON: its checkpoint could not be "
                          f"saved, and it asks for a call that runs without a human; nothing run, nothing saved")


def check_asked_to_publish(interruptions: list[ToolApprovalItem], final_output: Any,
                           sha: str, channels: list[str], action: str) -> list[dict[str, Any]]:
    """The pending calls of a first run (``[{"call_id", "tool", "arguments"}]``), each an
    ``action`` call of the content as given on one of ``channels`` (:func:`check_draft_call`).
    Raises :class:`Refused` (nothing saved) if the agent finished without asking, asked for
    another tool or channel, or changed the draft."""
    if not interruptions:
        raise Refused("agent", f"the agent finished without asking to call {action}; nothing saved "
                      f"(it said: {str(final_output)[:200]!r})")
    pending = pending_calls(interruptions)
    check_call_ids(pending, "nothing saved")
    check_draft_call(pending, sha, channels, action)
    return pending


def existing_task(store: Store, task_id: str, title: str, sha: str,
                  channels: list[str], action: str, input: Any = None, agent: Any = None) -> Checkpoint | None:
    """For ``start``: the task already saved under ``task_id`` with this title, content, channels,
    action and ``input`` (start again returns it; the input is compared by
    :func:`state.schema.input_fingerprint` when the task recorded one: a task whose model proposes
    the arguments, told what to do by its input alone), or None if the key is
    new. Raises :class:`Refused` if the key is taken: by a task with another title, content,
    channels, action or input (the message names which), by a ledger entry or a rejection record
    of the key or of any of its channels' keys (but the entries of this very start cut by a crash
    before its checkpoint: :func:`cut_start`), or by an entry of a channel ``agent``'s effect tools
    may run without a human (``effect_tool(private_channels=…)``) that this start does not have: a
    start of the key with other channels, cut by a crash after that effect. Reads only."""
    if store.exists(task_id):
        cp = store.load(task_id)
        same_input = cp.input_sha256 is None or cp.input_sha256 == input_fingerprint(input)
        differs = [what for what, same in (("title", cp.title == title), ("content", cp.content_sha256 == sha),
                                           ("channels", cp.channels == channels), ("action", cp.action == action),
                                           ("input", same_input))
                   if not same]
        if not differs:
            return cp
        named = " and ".join([", ".join(differs[:-1]), differs[-1]] if len(differs) > 1 else differs)
        raise Refused("usage", [f"task {task_id} already exists and differs in its {named}",
                                Next("new_key", plain="; a new effect needs a new key")])
    evidence = store
    several = [f"{task_id}#{c}" for c in channels] if len(channels) > 1 else []
    mine = several or [task_id]  # the keys this start's effects are written under
    found = [e for e in (evidence.ledger_get(k) for k in [task_id, *several]) if e is not None]
    others = [f"{task_id}#{c}" for c in sorted(_private_of(agent) - set(channels if several else ()))]
    if any(not cut_start(e, task_id, sha, action, mine) for e in found) or any(
            evidence.ledger_get(k) is not None for k in others):  # another start's, cut by a crash
        raise Refused("executed", [f"key {task_id} is already in the ledger", Next("new_key")])
    scopes = [None, *channels] if len(channels) > 1 else [None]
    if any(evidence.rejection_get(task_id, c) is not None for c in scopes):
        raise Refused("rejected", [f"key {task_id} was rejected before", Next("new_key")])
    return None


def _private_of(agent: Any) -> frozenset[str]:
    """Every channel on which a call of one of ``agent``'s effect tools may run without a human
    (:func:`workflow.effect.private_channels`); empty for None."""
    from workflow.effect import private_channels

    if agent is None:
        return frozenset()
    return frozenset().union(*(private_channels(t) for t in effect_tools(agent)))


def cut_start(entry: Any, task_id: str, sha: str, action: str, keys: list[str]) -> bool:
    """True if the ledger ``entry`` is what this very ``start`` (``task_id``, content ``sha``,
    ``action``, its effects under ``keys``) writes before its checkpoint: an effect on a channel
    whose approval rule let it run without a human (``approval`` ``not_needed``, e.g. a private
    preview), under one of its keys, of the same task, content and action. A crash before the
    checkpoint leaves it with no task; the same start again runs the agent again, the gate finds
    the entry (no second effect) and the task is saved."""
    return (entry.approval == "not_needed" and entry.idempotency_key in keys and entry.task_id == task_id
            and entry.content_sha256 == sha and entry.action == action and sha != PROPOSED)


def first_checkpoint(*, task_id: str, action: str, title: str, sha: str, channels: list[str],
                     pending: list[dict[str, Any]],
                     run_state: str, rs_version: str, agent: dict[str, Any], spec: ModelSpec,
                     budget: Budget, spend: Any, expires_in_s: int,
                     service: Optional[str] = None, team: Any = None,
                     command: Optional[str] = None, input: Any = None) -> dict[str, Any]:
    """The body of revision 1 of a task's checkpoint (``waiting_for_approval``; every field of
    :class:`state.schema.Checkpoint` but ``mac`` and ``state_id``). ``agent`` is
    :func:`workflow.agent_check.describe` of the agent that ran; ``action`` the name of its tool
    with an effect; ``expires_in_s`` seconds from now; ``service``: where the effect goes (absent
    when None: the local ledger); ``team``: a :class:`state.schema.Team` (absent when None:
    single-user mode); ``command``: ``Application.command`` (absent when None); ``input``: what
    the run was given, recorded as its :func:`state.schema.input_fingerprint` in a task whose
    model proposes the arguments (absent in any other, or when None)."""
    now = now_iso()
    input_sha = input_fingerprint(input) if sha == PROPOSED else None  # all its model is told
    expires_at = clock.deadline(expires_in_s)
    versions = {"schema_version": SCHEMA_VERSION, "sdk_version": sdk_version(),
                "run_state_schema_version": rs_version}
    return {
        **versions, "task_id": task_id, "idempotency_key": task_id, "action": action,
        "title": title, "content_sha256": sha, "channels": channels, "status": "waiting_for_approval",
        "decision": None, "decisions": [], "pending": pending, "final_output": None,
        "revision": 1, "agent": agent, "run_state": run_state,
        "history": [{"at": now, "event": "started", "revision": 1,
                     "detail": {"pending": [p["call_id"] for p in pending], "calls": pending,
                                "expires_at": expires_at, **versions}}],
        "created_at": now, "updated_at": now, "model": spec.model_dump(),
        "budget": budget.model_dump(), "spend": spend.model_dump(), "expires_at": expires_at,
        "approval_ttl_s": expires_in_s, **({"service": service} if service is not None else {}),
        **({"team": team.model_dump(mode="json"), "approvals": []} if team is not None else {}),
        **({"command": command} if command is not None else {}),
        **({"input_sha256": input_sha} if input_sha is not None else {}),
    }


def check_stored_run_state(cp: Checkpoint) -> None:
    """Refuse a stored RunState we cannot trust, before the SDK sees it.

    - ``$schemaVersion`` must equal the envelope's and be one the installed SDK supports.
    - Every approval decision inside it (``context.approvals``, ``context.function_tool_approvals``)
      must be one our decision path recorded in ``cp.decisions`` (same call_id, same kind); blanket
      (``True``) or sticky decisions are refused. The SDK's docs warn that ``from_string`` does not
      authenticate approvals; a hand-edited file could otherwise approve a call.

    Raises :class:`Refused`.
    """
    data = parse_object_shared(cp.run_state, f"the RunState of task {cp.task_id}")  # read only
    version = data.get("$schemaVersion")
    if version != cp.run_state_schema_version:
        raise Refused("unsupported_version",
            f"task {cp.task_id}: RunState $schemaVersion {version!r} does not match the "
            f"checkpoint's {cp.run_state_schema_version!r}"
        )
    if version not in SUPPORTED_SCHEMA_VERSIONS:
        raise Refused("unsupported_version",
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


def check_saved_against_code(cp: Checkpoint, agent: Any, app: Any) -> None:
    """Refuse to resume ``cp`` with ``agent`` (the agent ``app`` built from today's code, an
    :class:`workflow.application.Application`) if the stored RunState is not one we can trust
    (:func:`check_stored_run_state`), if the agent changed since the save
    (:func:`workflow.agent_check.drift`, with ``app.compatible_saved``; unchecked, the SDK accepts
    the state and fails later, mid-run), if its gated tool is not the task's action
    (:func:`workflow.agent_check.gated_tool`) or sends its effect to another service than the task
    was started with (``Checkpoint.service``), or if another ``openai-agents`` minor version saved
    it. Raises :class:`Refused`."""
    check_stored_run_state(cp)
    changes = drift(cp.agent.model_dump(), describe(agent), app.compatible_saved)
    if changes and cp.command != app.command and cp.agent.name != agent.name:  # another application's task
        whose = ("the application that started it" if cp.command is None else
                 f"its own command: {one_line(cp.command)}")
        raise Refused("drift", f"task {cp.task_id} belongs to another application "
                      f"({one_line(cp.agent.name)}), not this one; its decisions are made by {whose}; "
                      "nothing was decided", task_id=cp.task_id)
    if changes:
        raise Refused("drift", [f"task {cp.task_id}: the agent changed since it was saved: {'; '.join(changes)}",
                                *_way_out(cp)], task_id=cp.task_id)
    try:
        tool = gated_tool(agent, cp.action)  # the action the task was started with
    except Refused:  # no such tool any more (or a file that names another action)
        found = ", ".join(t.name for t in effect_tools(agent)) or "none"
        raise Refused("drift", f"task {cp.task_id}: its action is {one_line(cp.action)}, which is not one of "
                      f"the agent's tools with an effect ({found})") from None
    url = service_url(tool)
    if url != cp.service:  # before any request: the task is published where it was started
        where = {None: "the local ledger (no service)"}
        raise Refused("service_changed", [
            f"task {cp.task_id} was started with its effect going to {where.get(cp.service, cp.service)}, but this "
            f"process has {where.get(url, url)}; nothing was sent",
            Next("shows_status", cp.task_id)], task_id=cp.task_id)
    if cp.sdk_version.split(".")[:2] != sdk_version().split(".")[:2]:
        raise Refused("unsupported_version",
            f"task {cp.task_id} was saved by openai-agents {cp.sdk_version}; installed is "
            f"{sdk_version()}; resume it with the version that saved it"
        )


def _way_out(cp: Checkpoint) -> list[Part]:
    """The way out of a task the changed agent cannot run (neither an approve nor a reject runs it:
    its state does not match the code): the code it was saved with, or, for a task with a call
    approved and never carried out, or with a call decided next to one undecided, ``fail``
    (:func:`workflow.reconcile.check_fail`); else its request's expiry (every request has one)."""
    approved = any(d.decision == "approved" and d.call_id in {p.call_id for p in cp.pending}
                   for d in cp.decisions)
    if approved:
        return ["; run it with the code that saved it, or give the approval up", Next("fail_again", cp.task_id)]
    if any(d.edits is None for d in cp.decisions):  # another call decided: expire skips the task
        return ["; run it with the code that saved it, or end it", Next("fail_again", cp.task_id)]
    when = f" at {cp.expires_at}" if cp.expires_at else ""
    return [f"; run it with the code that saved it, or let its request expire{when}", Next("expire")]


def check_revision(cp: Checkpoint, expected: int | None, want: str | None = None,
                   call_id: str | None = None, by: str | None = None, verdict: Any = None) -> None:
    """Refuse a decision made on a view of ``cp`` rendered at revision ``expected`` (e.g. the inbox
    page's form) when the checkpoint has moved on since (another reviewer, the CLI, an expiry).
    ``None``: the caller saw no particular revision (the CLI), nothing to check. Raises
    :class:`Refused`; called under the task lock, right after the load, so nothing was decided.
    Revisions that only recorded other reviewers' approvals toward a quorum
    (:func:`workflow.team.only_approvals_since`) do not count: the page still shows what is decided.
    Nor do the revisions of ``by``'s own decision when this one repeats it (``verdict`` of the
    decision table ``unchanged``, the decision on record ``by``'s, or in team mode an approval of
    ``by`` counted toward it): a retry of a request whose answer was lost gets the task, as the
    same command again does, not a "look again".

    In a task whose model proposes the arguments (:meth:`state.schema.Checkpoint.proposed`) an
    approval (``want``) of a waiting call must say which call it saw: its ``call_id``, or the
    revision ``expected``. Else the call waiting now may be one the model proposed after the
    reviewer looked (after another's reject, or a crash), which no one saw."""
    from workflow.team import only_approvals_since

    if (cp.proposed() and want == "approved" and call_id is None and expected is None
            and cp.status == "waiting_for_approval"):
        raise Refused("usage", [f"task {cp.task_id}: its model proposes each call's arguments, so an approval "
                                "names the call it approves, as shown", Next(
                                    "name_call", cp.task_id, plain="; give its call ID, or the revision you saw")])

    if getattr(verdict, "kind", None) == "unchanged" and by is not None:
        mine = calls.decision_of(cp, call_id) if call_id is not None else cp.decision
        counted = mine is not None and any(a.by == by and a.call_id == mine.call_id  # toward its quorum
                                           for a in getattr(cp, "approvals", None) or [])
        if mine is not None and (mine.by == by or counted):
            return
    if expected is not None and cp.revision != expected and not only_approvals_since(cp, expected):
        raise Refused("stale_revision", f"task {cp.task_id}: the task changed since the page was rendered (revision "
                      f"{expected}, now {cp.revision}); nothing was decided: look again")


def save_outcome(store: Store, cp: Checkpoint, **changes: Any) -> Checkpoint:
    """The run's outcome: ``store.save_revision(cp, failpoint="checkpoint:outcome", **changes)``.
    If another process wrote a revision since (the compare-and-swap refuses), the refusal is raised
    as it was, after one repair that is provable: :func:`workflow.reconcile.executed_after_fail`."""
    try:
        return store.save_revision(cp, failpoint="checkpoint:outcome", **changes)
    except Refused as exc:
        repaired = completed_after_fail(store, cp.task_id) if exc.code == "stale_revision" else None
        if repaired is None:
            raise
        raise repaired from None


def completed_after_fail(store: Store, task_id: str) -> Optional[Refused]:
    """After this run's effect, when its outcome cannot be written (:func:`save_outcome`) or its run
    failed (:func:`after_failed_run`): the one provable repair,
    :func:`workflow.reconcile.executed_after_fail` (a ``fail`` by another process ended the task
    while its call executed: now ``completed``, the failure kept). Returns the refusal that says so
    (``stale_revision``), or None when there was nothing to repair (or the store cannot tell)."""
    from workflow.reconcile import executed_after_fail

    try:
        done = executed_after_fail(store, task_id)
    except Refused:  # the checkpoint or an entry cannot be read: the caller's own refusal stands
        return None
    if not done:
        return None
    return Refused("stale_revision", [
        f"task {task_id}: its effect was done (ledger entry {', '.join(done)}) while another process ended "
        "the task failed; it is now completed, the failure kept, since an executed action is never ended as "
        "if it had not run", Next("see_status", task_id)], task_id=task_id)


def rebased(store: Store, cp: Checkpoint, run: str) -> Checkpoint:
    """The checkpoint a run resumed from ``cp`` writes its outcome after: the newest one its own
    effect gate bound an attempt into (run token ``run``: :func:`state.open_stores.verified_run`),
    else ``cp``. Reads no file: a revision another process wrote since makes the outcome's
    compare-and-swap refuse."""
    return open_stores.newest(run, cp)


def bind(cp: Checkpoint, interruptions: list[ToolApprovalItem]) -> dict[str, ToolApprovalItem]:
    """The interruptions to answer, by call_id: the RunState's interruptions must be exactly the
    pending calls the reviewer saw, and every decision recorded for a pending call must be for that
    very call (tool and arguments). Raises :class:`Refused`."""
    if not interruptions:
        raise Refused("integrity", f"task {cp.task_id}: the saved run has no interruption to answer")
    if pending_calls(interruptions) != [p.model_dump() for p in cp.pending]:
        raise Refused("integrity",
            f"task {cp.task_id}: the pending call in the saved run differs from the one shown "
            "for review (call_id, tool or arguments)"
        )
    items = {item.call_id: item for item in interruptions}
    for rec in [*([cp.decision] if cp.decision else []), *calls.unapplied(cp)]:
        item = items.get(rec.call_id)
        if item is None or rec.tool != item.name or (
            rec.arguments_sha256 != arguments_sha256(json.loads(item.arguments or "{}"))
        ):
            raise Refused("integrity", f"task {cp.task_id}: the recorded decision is for another call")
    return items


def decision_for(store: Store, cp: Checkpoint, item: ToolApprovalItem, decision: str, by: str,
                 reason: str | None, always: bool = False) -> Decision:
    """The human decision to apply to the pending call ``item``: the one already recorded for it
    in ``cp`` (a replay after a crash), else for a reject the one in the call's rejection record (a
    crash between that record and the checkpoint, or an older checkpoint put back: the reviewer who
    rejected stays the one on record), else a new one by ``by`` with ``reason`` and ``always`` (the
    SDK's sticky rule), timestamped now. Bound to the call's call_id, tool, arguments and channel."""
    recorded = calls.decision_of(cp, item.call_id)
    if recorded is not None:
        return recorded
    arguments = json.loads(item.arguments or "{}")
    channel = calls.channel_of(cp, arguments)
    scope = calls.rejection_scope(cp, channel, item.call_id)
    evidence = store
    prior = evidence.rejection_get(cp.task_id, scope) if decision == "rejected" else None
    if is_end_mark(prior):  # fail's end mark: no reject's reviewer
        prior = None  # (its reject is refused when recorded: record_decision)
    if prior is not None:
        by, reason = prior.by, prior.reason
    shown = content_fingerprint(content_of(arguments))  # what an approval lets the effect carry
    return Decision(decision=decision, by=by, at=prior.at if prior is not None else now_iso(),
                    reason=reason, call_id=item.call_id, tool=item.name,
                    arguments_sha256=arguments_sha256(arguments), channel=channel, always=always,
                    source="human",
                    content_sha256=shown if cp.proposed() and decision == "approved" else None)


def record_decision(store: Store, cp: Checkpoint, rec: Decision) -> Checkpoint:
    """Write (a): the human's decision ``rec``, and the decisions its sticky rule makes for the
    other pending calls (:func:`workflow.calls.sticky_decisions`), into a new revision of ``cp``
    (compare-and-swap).

    Each reject first creates its call's rejection record (which no restored checkpoint can
    undo), then checks that call's ledger entry again: an approval that ran meanwhile (a lost
    lock) wins, since an executed action is never cancelled. A reject of a call on a channel an
    earlier approved call already published (:func:`workflow.reconcile.ran_before`: the model
    asked again) makes no rejection record: the entry is that call's, nothing is undone. If this decision
    cannot be recorded (the ledger has the entry, or another process wrote the checkpoint first), the records this
    call created are removed again, so a refused command leaves nothing behind. Raises
    :class:`Refused`.
    """
    evidence = store
    recs = [rec, *calls.sticky_decisions(cp, rec)]
    created: list[str | None] = []
    try:
        for r in recs:
            key, scope = calls.keys(cp, r.channel)[0], calls.rejection_scope(cp, r.channel, r.call_id)
            if _makes_record(cp, r):
                found, made = evidence.rejection_record(cp.task_id, cp.content_sha256, r, scope)
                if made:
                    created.append(scope)
                elif is_end_mark(found):  # a fail ended the task meanwhile (a lost lock)
                    raise Refused("failed", [f"task {cp.task_id} was ended by {found.by} at {found.at} while this "
                                             "reject was being recorded; nothing was run",
                                             Next("shows_status", cp.task_id)], task_id=cp.task_id)
                if evidence.ledger_get(key) is not None:
                    raise Refused("executed", refusal("executed", task_id=cp.task_id, status=cp.status))
        saved = store.save_revision(
            cp, failpoint="checkpoint:decision", decision=rec, decisions=[*cp.decisions, *recs],
            event=("decision_recorded", {**rec.model_dump(exclude={"arguments_sha256"}),
                                         "sticky": [r.call_id for r in recs[1:]]}))
    except Refused:
        for scope in created:
            evidence.rejection_remove(cp.task_id, scope)
        _restore_relied_on(store, cp.task_id, created)
        raise
    _restore_relied_on(store, cp.task_id,
                       [calls.rejection_scope(cp, r.channel, r.call_id) for r in recs if _makes_record(cp, r)])
    from workflow.observe import decisions  # the step in the trace too (after the signed write)
    from workflow.team import rule_of

    for r in recs:
        sticky = [s.call_id for s in recs[1:]] if r is rec else []
        decisions.record(store, saved, "decision",
                         decisions.decision_detail(r, sticky, rule_of(saved, r.channel).describe()))
    return saved


def _makes_record(cp: Checkpoint, d: Decision) -> bool:
    """True if decision ``d`` of ``cp`` has a rejection record: a reject, unless its call is on a
    channel an earlier approved call already published (:func:`workflow.reconcile.ran_before`:
    the model asked again; the entry is that call's, nothing is undone)."""
    return d.decision == "rejected" and not ran_before(cp, d.call_id, d.channel)


def _restore_relied_on(store: Store, task_id: str, scopes: list[str | None]) -> None:
    """Create again each rejection record of ``scopes`` that the newest checkpoint of ``task_id``
    relies on (a reject recorded on that channel), if it is missing.

    Two rejects of one call whose lock was lost: the first creates the record, the second finds it
    and wins the compare-and-swap, and the first, refused, removes the record it created. The
    record is what keeps an older copy of the checkpoint from being approved after the task was
    cancelled, so each writer checks after its own step (a refused one after removing, a saved
    one after saving): whichever runs last sees the saved reject and the record is there. Never
    raises: a checkpoint that cannot be read now is left for the next command to refuse."""
    if not scopes:
        return
    evidence = store
    try:
        newest = store.load(task_id)
        for d in newest.decisions:
            scope = calls.rejection_scope(newest, d.channel, d.call_id)
            if (scope in scopes and d.edits is None and _makes_record(newest, d)
                    and evidence.rejection_get(task_id, scope) is None):
                evidence.rejection_record(task_id, newest.content_sha256, d, scope)
    except Refused:
        pass


def nothing_executed(store: Store, cp: Checkpoint) -> bool:
    """True if no channel of ``cp`` has a ledger entry and no call is still waiting for a decision
    or decided ``approved`` (so cancelling the task cancels nothing that ran or may run)."""
    evidence = store
    if any(evidence.ledger_get(calls.keys(cp, c)[0]) is not None for c in cp.channels):
        return False
    return all((rec := calls.decision_of(cp, c)) is not None and rec.decision == "rejected"
               for c, _ in calls.calls_of(cp))


def cancel_unpaid(store: Store, cp: Checkpoint, budget: Budget, spend: Any) -> Checkpoint:
    """End a rejected task as ``cancelled`` without calling the model again: a reject never needs
    budget (the tool does not run; only the model's closing sentence is skipped, so
    ``final_output`` stays null and the RunState is the one saved before)."""
    return store.save_revision(
        cp, failpoint="checkpoint:outcome", status="cancelled", pending=[], budget=budget,
        spend=spend, event=("cancelled", {"ledger": None, "model_called": False}))


def budget_stop(store: Store, cp: Checkpoint, budget: Budget, spend: Any, why: str) -> Checkpoint:
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


def run_failure(exc: BaseException, task_id: str, saved: str, then: Optional[list[Part]] = None) -> Refused:
    """The one-line :class:`Refused` for a failed ``Runner.run``: ours, the budget, or the provider;
    ``saved`` says what stays recorded, ``then`` (parts: text and next steps) follows it."""
    stopped = _find(exc, (Refused,))
    if isinstance(stopped, Refused):
        return stopped
    budget = _find(exc, (BudgetExceeded, MaxTurnsExceeded))
    if budget is not None:
        return Refused("budget", f"task {task_id}: {budget}; {saved}")
    cause = provider_error(exc, secret=settings().api_key)
    if cause is None:
        cause = f"the run failed ({type(exc).__name__}: {exc})"
    return Refused("model", [f"task {task_id}: {cause}; {saved}", *(then or [])])


def after_failed_run(store: Store, cp: Checkpoint, exc: BaseException, decision: str, *,
                     budget: Budget, spend: Any) -> Checkpoint:
    """What a failed resumed run leaves: a budget that ran out saves ``budget_exceeded`` (the
    RunState saved before the call stays) — or, for a reject, ends the task ``cancelled`` (a reject
    never waits for budget); anything else raises :class:`Refused` naming the cause (the decision
    stays recorded: the same decision again finishes it), unless a ``fail`` by another process
    ended the task while this run's call executed: then it is ended ``completed``
    (:func:`completed_after_fail`), and the refusal says so."""
    found = _find(exc, (BudgetExceeded, MaxTurnsExceeded))
    if found is not None and decision == "rejected" and nothing_executed(store, cp):
        return cancel_unpaid(store, cp, budget, spend)
    if found is not None:
        why = str(found) if isinstance(found, BudgetExceeded) else f"budget exceeded: {found}"
        return budget_stop(store, cp, budget, spend, why)
    repaired = completed_after_fail(store, cp.task_id)  # the model failed after a call that ran
    if repaired is not None:
        raise repaired from None
    if _find(exc, (ModelBehaviorError,)) is not None:  # e.g. the call's own arguments refused by its tool
        raise run_failure(exc, cp.task_id, "the decision is recorded; the same decision again finishes it unless "
                          "the same error comes back, as it does for arguments the tool refuses: then end the "
                          "task with a fail, by a person, with a reason", [Next("fail_again", cp.task_id)])
    raise run_failure(exc, cp.task_id, "the decision is recorded; the same decision again finishes it")


def outcome(store: Store, cp: Checkpoint, final_output: Any) -> dict[str, Any]:
    """The changes that end ``cp`` after its run finished: ``completed`` if at least one call
    executed (its ledger entry exists), ``cancelled`` only if none did (an executed action is
    never marked cancelled). Every call decided ``approved`` must have its ledger entry and every
    call decided ``rejected`` none, unless that entry is an earlier approved call's on the same
    channel (:func:`workflow.reconcile.ran_before`). Raises :class:`Refused` if the ledger disagrees (a human must
    check)."""
    evidence = store
    entries = {c: evidence.ledger_get(calls.keys(cp, c)[0]) for c in cp.channels}
    unmet = []  # channels approved with edits whose edited call the model never made
    for call_id, channel in calls.calls_of(cp):
        rec = calls.decision_of(cp, call_id)
        decided = rec.decision if rec else None
        if decided == "approved" and rec.edits is not None and entries[channel] is None:
            unmet.append(channel)  # the call itself never runs (workflow/edits.py): nothing happened
        elif decided == "approved" and entries[channel] is None:
            raise Refused("ledger_mismatch",
                          f"task {cp.task_id}: approved, but the tool left no ledger entry; a human must check")
        if (decided == "rejected" and entries[channel] is not None and not ran_before(cp, call_id, channel)
                and not _proposed_again(cp, call_id, channel, entries[channel])):
            raise Refused("ledger_mismatch",
                          f"task {cp.task_id}: rejected, but the ledger shows it executed; a human must check")
    done = [e for e in entries.values() if e is not None]
    unmet = [c for c in unmet if c not in [e.channel for e in done]]
    status = "completed" if done else "failed" if unmet else "cancelled"
    final = final_output if isinstance(final_output, str) else json.dumps(final_output, default=str)
    failure = (f"the run ended without the model's {cp.action} call carrying what was approved with edits on "
               f"{', '.join(unmet)}; nothing was done there" if unmet else None)
    return {"status": status, "pending": [], "final_output": final,
            **({"failure": failure} if failure is not None else {}),
            "event": (status, {"ledger": done[0].published_at if len(done) == 1 else
                               [e.published_at for e in done] or None,
                               **({"failure": failure} if failure is not None else {})})}


def _proposed_again(cp: Checkpoint, call_id: str, channel: str, entry: Any) -> bool:
    """True if, in a task whose model proposes the arguments, another call on ``channel`` was
    approved as shown with exactly the content of ``entry``, the channel's ledger entry: the
    model proposed again after ``call_id`` was rejected, and the entry is that approval's effect."""
    return cp.proposed() and any(
        d.call_id != call_id and d.channel == channel and d.decision == "approved" and d.edits is None
        and d.content_sha256 == entry.content_sha256 for d in cp.decisions)


def after_run(store: Store, cp: Checkpoint, requests: list[ToolApprovalItem],
              final_output: Any) -> dict[str, Any]:
    """The changes a finished resumed run makes to ``cp`` (``requests``: its
    ``result.interruptions``; ``final_output``: its ``result.final_output``): waiting again at
    them (:func:`interrupted`), or its outcome (:func:`outcome`). A run that paused at a call of a
    tool other than the task's action (``cp.action``) ends there, judged as a finished run, with
    the action's calls of the same turn not run either: this flow never runs such a call
    (:func:`workflow.trust.only_action`), every decision on a task waiting at one is refused, and
    waiting for a human on it would leave a task that no decision can finish. So does a run that
    paused at an action call naming a channel that is not one of the task's (no ledger
    key, no rejection record: it can be neither approved nor rejected). Raises :class:`Refused`
    as those do."""
    others = [i for i in requests if i.name != cp.action]
    if others:
        tools = ", ".join(sorted({one_line(str(i.name))[:40] for i in others}))
        also = f" (nor its {cp.action} call of the same turn)" if len(others) < len(requests) else ""
        return outcome(store, cp, f"the run ended at the model's call of {tools}, which was not run{also}: "
                                  f"{only_action(cp.action)}")
    astray = [calls.channel_of(cp, p["arguments"]) for p in pending_calls(requests)]
    astray = [c for c in astray if c not in cp.channels]
    if astray:
        named = ", ".join(one_line(repr(c))[:40] for c in astray)
        return outcome(store, cp, f"the run ended at the model's {cp.action} call on {named}, which was "
                                  f"not run: this task's channels are {', '.join(cp.channels)}")
    return interrupted(cp, requests) if requests else outcome(store, cp, final_output)


def interrupted(cp: Checkpoint, interruptions: list[ToolApprovalItem]) -> dict[str, Any]:
    """The changes that leave ``cp`` waiting again at ``interruptions``: the pending calls, no
    current decision, and the deadline: unchanged when they are calls that were already pending
    (the undecided rest of a turn), else a fresh one (``approval_ttl_s`` from now)."""
    pending = pending_calls(interruptions)
    check_call_ids([p for p in pending if p["call_id"] not in {c.call_id for c in cp.pending}],
                   "the new call was not saved")
    same_turn = {p["call_id"] for p in pending} <= {p.call_id for p in cp.pending}
    expires_at = cp.expires_at if same_turn and cp.expires_at else clock.deadline(cp.approval_ttl_s)
    return {"status": "waiting_for_approval", "decision": None, "pending": pending,
            "expires_at": expires_at,
            "event": ("interrupted", {"pending": [p["call_id"] for p in pending], "calls": pending,
                                      "expires_at": expires_at})}


@contextmanager
def sdk_refusal(task_id: str) -> Iterator[None]:
    """Around ``state.approve``/``state.reject``: any exception the SDK raises there (its own
    checks of the decision) becomes :class:`Refused` (``refused``, ``task T: the SDK refused the
    decision: …``), before anything is written."""
    try:
        yield
    except Exception as exc:
        raise Refused("refused", f"task {task_id}: the SDK refused the decision: {exc}") from None


def unsaveable(exc: BaseException) -> Refused:
    """The refusal when ``result.to_state().to_string()`` raised ``exc`` (e.g. a run context that
    is not plain JSON): nothing saved."""
    return Refused("refused", f"the run state cannot be saved ({type(exc).__name__}: {exc})")


def unloadable_redacted(task_id: str, exc: BaseException) -> Refused:
    """The refusal when the run state, with a secret value redacted, no longer loads in the SDK
    (``exc``: the :class:`Refused` of the load, its cause the SDK's error): nothing saved."""
    return Refused("secret", f"task {task_id}: the run state holds a secret value and the SDK cannot "
                   f"load it redacted ({type(exc.__cause__).__name__}); nothing saved")


def unloadable(task_id: str, exc: BaseException) -> Refused:
    """The refusal when ``RunState.from_string`` raised ``exc``: the SDK's own validation of the
    saved run state, never guessed past (``integrity``)."""
    return Refused("integrity", f"task {task_id}: the SDK refused the saved RunState: {exc}")

