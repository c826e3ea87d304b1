"""Second line of defence behind the MAC: what a stored RunState and an envelope may claim.

The MAC (``state.integrity``) proves a checkpoint was written by someone holding the key. These
checks hold even against a checkpoint that carries a valid MAC (a key that leaked, or a bug in our
own writer): a RunState may carry no approval that our decision path did not record, anywhere in
it, and the pending call must be the draft the task was started with. The SDK docs say
``RunState.from_string`` does not authenticate approvals (openai-agents 0.24.0, ``run_state.py``:
"approvals and pending tool calls; this method does not authenticate that state").

SDK-free: these functions read the RunState as plain JSON, so they run before the SDK sees it.
Every refusal is a :class:`state.errors.Stopped`.
"""

from __future__ import annotations

from typing import Any, Iterator

from state.errors import Stopped
from state.schema import ACTION, Checkpoint, content_sha256

#: Keys under which a serialized RunState (or a nested agent-tool RunState) stores decisions.
APPROVAL_KEYS = ("approvals", "function_tool_approvals", "hosted_mcp_approvals")


def _walk(value: Any, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(value, dict):
        yield path, value
        for k, v in value.items():
            yield from _walk(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _walk(v, f"{path}[{i}]")


def check_no_hidden_approvals(run_state: dict[str, Any], cp: Checkpoint) -> None:
    """Refuse approval records anywhere but the top-level ``context``, and hosted MCP approvals.

    ``run_state`` is the parsed ``RunState.to_string()``. The top-level ``context.approvals`` and
    ``context.function_tool_approvals`` are checked against ``cp.decisions`` by
    ``workflow.hitl.check_stored_run_state``; this adds: no nested RunState (agent-as-tool runs)
    carries decisions, no ``hosted_mcp_approvals`` exist (this agent has no hosted MCP tool, and
    we never record one), and ``rejection_messages`` name only calls a human rejected.
    The user context payload (``context.context``) is skipped: it is replaced on resume.
    Raises :class:`Stopped`.
    """
    top = run_state.get("context")
    for path, node in _walk(run_state, "$"):
        if node is top or path == "$.context.context" or path.startswith("$.context.context."):
            continue
        for key in APPROVAL_KEYS:
            if node.get(key):
                raise Stopped(
                    f"task {cp.task_id}: RunState holds approval records at {path}.{key} that "
                    "no human recorded"
                )
    if isinstance(top, dict) and top.get("hosted_mcp_approvals"):
        raise Stopped(
            f"task {cp.task_id}: RunState holds hosted MCP approvals that no human recorded"
        )
    rejected = {d.call_id for d in cp.decisions if d.decision == "rejected"}
    records: list[Any] = []
    if isinstance(top, dict):
        approvals = top.get("approvals")
        if isinstance(approvals, dict):
            records.extend(approvals.values())
        for entry in top.get("function_tool_approvals") or []:
            if isinstance(entry, dict):
                records.append(entry.get("decision"))
    for record in records:
        messages = record.get("rejection_messages", {}) if isinstance(record, dict) else {}
        if not isinstance(messages, dict) or set(messages) - rejected:
            raise Stopped(
                f"task {cp.task_id}: RunState holds rejection messages for calls no human rejected"
            )


def check_pending_is_the_draft(cp: Checkpoint) -> None:
    """Every pending call must be ``publish_draft`` with exactly the draft the task started with.

    Checked before a decision is written, so a checkpoint whose pending call and
    ``content_sha256`` disagree is refused with nothing changed (instead of the tool refusing
    mid-run after the decision was recorded). Raises :class:`Stopped`.
    """
    for call in cp.pending:
        args = call.arguments
        if (
            call.tool != ACTION
            or set(args) != {"title", "body"}
            or not all(isinstance(args[k], str) for k in ("title", "body"))
            or content_sha256(args["title"], args["body"]) != cp.content_sha256
        ):
            raise Stopped(
                f"task {cp.task_id}: the pending call {call.call_id} is not {ACTION} of the draft "
                "the task was started with (key/action mismatch)"
            )
