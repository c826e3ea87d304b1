"""Second line of defence behind the MAC: what a stored RunState and an envelope may claim.

The MAC (``state.integrity``) proves a checkpoint was written by someone holding the key. These
checks hold even against a checkpoint that carries a valid MAC (a key that leaked, or a bug in our
own writer): a RunState may carry no approval that our decision path did not record, anywhere in
it, and the pending call must be the draft the task was started with. The SDK docs say
``RunState.from_string`` does not authenticate approvals (openai-agents 0.24.0, ``run_state.py``:
"approvals and pending tool calls; this method does not authenticate that state").

SDK-free: these functions read the RunState as plain JSON, so they run before the SDK sees it.
Every refusal is a :class:`state.errors.Refused`.
"""

from __future__ import annotations

from typing import Any, Iterator

from state.errors import Refused
from state.schema import PROPOSED, Checkpoint, content_fingerprint, content_of, valid_content_value

#: Keys under which a serialized RunState (or a nested agent-tool RunState) stores decisions.
APPROVAL_KEYS = ("approvals", "function_tool_approvals", "hosted_mcp_approvals")


def _walk(value: Any, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(path, node)`` of every object in ``value`` (a parsed JSON value), depth first in document
    order, ``value`` itself first if it is one; a key ``k`` of an object at ``p`` is at ``p.k``, an
    item ``i`` of a list at ``p[i]``. One stack, no generator per node, and a path is made only for
    an object or list (a RunState holds hundreds of strings and numbers)."""
    stack: list[tuple[str, Any]] = [(path, value)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, dict):
            yield path, value
            below = [(f"{path}.{k}", v) for k, v in value.items() if isinstance(v, (dict, list))]
        elif isinstance(value, list):
            below = [(f"{path}[{i}]", v) for i, v in enumerate(value) if isinstance(v, (dict, list))]
        else:
            continue
        stack.extend(reversed(below))


def _top_level_records(run_state: dict[str, Any], cp: Checkpoint) -> list[dict[str, Any]]:
    """The decision records of the top-level ``context.approvals`` and
    ``context.function_tool_approvals``; raises :class:`Refused` if their shape is not the SDK's."""
    context = run_state.get("context")
    if not isinstance(context, dict):
        raise Refused("integrity", f"task {cp.task_id}: RunState has no context object")
    records: list[Any] = []
    approvals = context.get("approvals", {})
    if not isinstance(approvals, dict):
        raise Refused("integrity", f"task {cp.task_id}: RunState approvals are malformed")
    records.extend(approvals.values())
    fta = context.get("function_tool_approvals", [])
    if not isinstance(fta, list):
        raise Refused("integrity", f"task {cp.task_id}: RunState function_tool_approvals are malformed")
    records.extend(e.get("decision") if isinstance(e, dict) else e for e in fta)
    for record in records:
        if not isinstance(record, dict):
            raise Refused("integrity", f"task {cp.task_id}: RunState holds a malformed approval record")
    return records


def check_approvals(run_state: dict[str, Any], cp: Checkpoint) -> None:
    """Every approval decision in a stored RunState must be one our decision path recorded.

    ``run_state`` is the parsed ``RunState.to_string()``. The top-level ``context.approvals`` and
    ``context.function_tool_approvals`` may hold only the call_ids in ``cp.decisions``, each with
    its recorded kind, as lists. A blanket ``True``/``False`` (the SDK's sticky rule,
    ``always_approve`` / ``always_reject``) and ``sticky_scope`` / ``sticky_rejection_message`` are
    refused even where a human decided with ``always``: our decision path gives the SDK one
    decision per call (:func:`workflow.calls.to_apply`), because a sticky rule in the RunState
    would run a later call no human has seen. Then :func:`check_no_hidden_approvals`. Raises
    :class:`Refused`.
    """
    # an approval with edits answers its call with a rejection message (workflow/edits.py)
    recorded = {(d.call_id, "rejected" if d.edits else d.decision) for d in cp.decisions}
    for record in _top_level_records(run_state, cp):
        extra = set(record) - {"approved", "rejected", "rejection_messages"}
        if extra:
            raise Refused("integrity",
                f"task {cp.task_id}: RunState holds approval settings no human recorded "
                f"({', '.join(sorted(extra))})"
            )
        for field, kind in (("approved", "approved"), ("rejected", "rejected")):
            ids = record.get(field, [])
            if not isinstance(ids, list):
                raise Refused("integrity",
                    f"task {cp.task_id}: RunState holds a blanket '{field}' decision (a sticky "
                    "rule) that our decision path never gives"
                )
            for call_id in ids:
                if (call_id, kind) not in recorded:
                    raise Refused("integrity",
                        f"task {cp.task_id}: RunState holds an approval decision ({kind} "
                        f"{call_id!r}) that was not recorded through our decision path"
                    )
    check_no_hidden_approvals(run_state, cp)


def hidden_approvals(run_state: dict[str, Any]) -> list[str]:
    """Where a parsed ``RunState.to_string()`` holds approval records outside its top-level
    ``context`` (e.g. ``$.last_processed_response.functions[0].agent_run_state.context.
    function_tool_approvals``: the RunState of an ``Agent.as_tool()`` run nested in it), as JSON
    paths; empty if none. The user context payload (``$.context.context``) is skipped. The SDK
    runs a call approved there without anyone calling ``approve`` (tests/test_sdk_behaviour.py)."""
    top = run_state.get("context")
    found = []
    for path, node in _walk(run_state, "$"):
        if node is top or path == "$.context.context" or path.startswith("$.context.context."):
            continue
        found.extend(f"{path}.{key}" for key in APPROVAL_KEYS if node.get(key))
    return found


def check_no_hidden_approvals(run_state: dict[str, Any], cp: Checkpoint) -> None:
    """Refuse approval records anywhere but the top-level ``context``, and hosted MCP approvals.

    ``run_state`` is the parsed ``RunState.to_string()``. The top-level ``context.approvals`` and
    ``context.function_tool_approvals`` are checked against ``cp.decisions`` by
    :func:`check_approvals`; this adds: no nested RunState (agent-as-tool runs)
    carries decisions, no ``hosted_mcp_approvals`` exist (this agent has no hosted MCP tool, and
    we never record one), and ``rejection_messages`` name only calls a human rejected.
    The user context payload (``context.context``) is skipped: it is replaced on resume.
    Raises :class:`Refused`.
    """
    top = run_state.get("context")
    hidden = hidden_approvals(run_state)
    if hidden:
        raise Refused("integrity", f"task {cp.task_id}: RunState holds approval records at {hidden[0]} that "
                      "no human recorded")
    if isinstance(top, dict) and top.get("hosted_mcp_approvals"):
        raise Refused("integrity",
            f"task {cp.task_id}: RunState holds hosted MCP approvals that no human recorded"
        )
    rejected = {d.call_id for d in cp.decisions if d.decision == "rejected" or d.edits}
    for record in _top_level_records(run_state, cp):
        messages = record.get("rejection_messages", {})
        if not isinstance(messages, dict) or set(messages) - rejected:
            raise Refused("integrity",
                f"task {cp.task_id}: RunState holds rejection messages for calls no human rejected"
            )


def carries_the_draft(arguments: dict[str, Any], sha: str, channels: list[str]) -> bool:
    """True if an action call's ``arguments`` but ``channel`` are content (``{argument: value}``,
    each :func:`state.schema.valid_content_value`) whose :func:`state.schema.content_fingerprint`
    is ``sha`` (the content the task was started with), plus a ``channel`` that is one of
    ``channels``; in a one-channel task the channel may be absent or null (it means the only one).
    ``sha`` :data:`state.schema.PROPOSED` (a task whose model proposes the arguments, no call
    approved yet on that channel): any such content, which the reviewer sees and decides."""
    single = len(channels) == 1
    channel_ok = (arguments.get("channel") in channels if "channel" in arguments else single) or (
        single and "channel" in arguments and arguments["channel"] is None)
    content = content_of(arguments)
    return (
        bool(content)
        and channel_ok
        and all(valid_content_value(v) for v in content.values())
        and (sha == PROPOSED or content_fingerprint(content) == sha)
    )


def carries_its_draft(cp: Checkpoint, call: Any) -> bool:
    """True if the pending ``call`` is the task's action (``cp.action``) carrying exactly the draft expected on its
    channel: the one the task started with, or the one a reviewer approved with edits for that
    channel (:meth:`state.schema.Checkpoint.expected_sha256`); for the call a reviewer approved
    with edits, what it asked for."""
    channel = call.arguments.get("channel")
    channel = cp.channels[0] if channel is None and len(cp.channels) == 1 else channel
    sha = cp.expected_sha256(channel) if isinstance(channel, str) else cp.content_sha256
    for d in cp.decisions:  # the call approved with edits itself (pending again after a crash)
        if d.call_id == call.call_id and d.edits is not None:
            sha = d.edits.original_sha256
    return call.tool == cp.action and carries_the_draft(call.arguments, sha, cp.channels)


def only_action(action: str) -> str:
    """Why a call of any tool but the task's ``action`` is refused (the one place this flow's limit
    is stated): the task's idempotency key, its approvals and its ledger entries are its action's,
    which is what keeps a resume, a replay after a crash or a race from running it twice; a call of
    another tool has none of them in this task (a task of its own gates it: ``start``'s ``action``)."""
    return (f"this task runs only its action, {action}: its idempotency key and approvals are for "
            f"{action}'s calls, so another tool's call is never run in it")


def check_pending_is_the_draft(cp: Checkpoint) -> None:
    """Every pending call must be the task's action with exactly the content expected on its channel
    (:func:`carries_its_draft`: the draft the task started with, unless approved with edits).

    Checked before a decision is written, so a checkpoint whose pending call and
    ``content_sha256`` disagree is refused with nothing changed (instead of the tool refusing
    mid-run after the decision was recorded). Raises :class:`Refused`.
    """
    for call in cp.pending:
        if call.tool != cp.action:
            raise Refused("integrity", f"task {cp.task_id}: the pending call {call.call_id} is {call.tool[:40]!r}, "
                          f"not {cp.action}: {only_action(cp.action)}")
        if not carries_its_draft(cp, call):
            raise Refused(
                "integrity", f"task {cp.task_id}: the pending call {call.call_id} is not {cp.action} of the content "
                "the task was started with (key/action mismatch)"
            )
