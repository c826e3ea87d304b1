"""The ``publish_draft`` tool: the one sensitive action, gated by a human.

SDK: ``@function_tool(needs_approval=True)`` makes every call pause the run; the call appears in
``result.interruptions`` as a ``ToolApprovalItem`` and runs only after ``state.approve(item)``
(OpenAI Agents SDK docs, "Human-in-the-loop"). ``failure_error_function=None`` makes an exception
here end the run instead of being sent to the model as text, so a refusal fails closed.

The tool's only effect is a ledger entry. It never trusts the model for identity: the idempotency
key, task ID and expected content fingerprint come from the run context, which our workflow builds
from the verified checkpoint (``context_override`` on resume).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agents import RunContextWrapper, function_tool

from state import rejections
from state.errors import Stopped
from state.schema import content_sha256
from state.storage import Store

from .effects import effectful
from .ledger import Ledger

TOOL_NAME = "publish_draft"


@function_tool(needs_approval=True, failure_error_function=None)
def publish_draft(ctx: RunContextWrapper[dict[str, Any]], title: str, body: str) -> str:
    """Publish a reviewed draft. Requires human approval before it runs.

    Args:
        title: The draft's title, exactly as given by the user.
        body: The draft's full text, exactly as given by the user.
    """
    task = ctx.context
    key = task["idempotency_key"]
    if content_sha256(title, body) != task["content_sha256"]:
        raise Stopped(
            f"publish_draft for task {task['task_id']} was called with content that differs from "
            "the draft that was started and approved; refusing"
        )
    # Right before the effect, whatever the lock says: a reject recorded meanwhile (by a process
    # whose lock file was deleted under this one) wins; the action is never executed after it.
    store = Store(Path(task["ledger_dir"]).parent)
    rejected = rejections.get(store, task["task_id"])
    if rejected is not None:
        raise Stopped(
            f"publish_draft for task {task['task_id']}: a reject by {rejected.by} at {rejected.at} "
            "was being recorded while this approval ran; nothing was published (python run.py "
            f"status --task {task['task_id']} shows where the task stands)")
    # And only with a human's approval on record: an approval rule (a needs_approval function) that
    # said "no approval needed", or an SDK change, must never publish by itself.
    cp = store.load(task["task_id"]) if store.exists(task["task_id"]) else None
    # (An approval with edits never runs the call it answers: only the model's next call, once approved.)
    if cp is None or cp.decision is None or cp.decision.decision != "approved" or cp.decision.edits:
        raise Stopped(
            f"publish_draft for task {task['task_id']} ran without a human approval on record "
            "(an approval rule that returned False?); nothing was published")
    entry, created = Ledger(Path(task["ledger_dir"])).record(
        key=key, task_id=task["task_id"], title=title, content_sha256=task["content_sha256"]
    )
    return json.dumps(
        {
            "result": "published" if created else "already published",
            "idempotency_key": entry.idempotency_key,
            "published_at": entry.published_at,
        }
    )


effectful(publish_draft)  # its call writes the ledger: never without approval (tools.effects)
