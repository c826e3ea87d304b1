"""The ``publish_draft`` tool: the one sensitive action, gated by a human.

SDK: ``@function_tool(needs_approval=...)`` makes a call pause the run; the call appears in
``result.interruptions`` as a ``ToolApprovalItem`` and runs only after ``state.approve(item)``
(OpenAI Agents SDK docs, "Human-in-the-loop"). Here ``needs_approval`` is a function, the SDK's
per-call approval rule: :func:`needs_publish_approval` lets a call to the private ``preview``
channel run without a human and gates every public channel. ``failure_error_function=None`` makes
an exception here end the run instead of being sent to the model as text, so a refusal fails closed.

The tool's only effect is a ledger entry, one per (task, channel). It never trusts the model for
identity: the task ID, its channels and the expected content fingerprint come from the run context,
which our workflow builds from the verified checkpoint (``context_override`` on resume), or, for a
channel whose call a reviewer approved with edits, from that decision in the checkpoint
(``Checkpoint.expected_sha256``); the
idempotency key is derived from them (:func:`state.schema.effect_key`). The store (files or
PostgreSQL) is found through the context's ``store`` token (:mod:`state.open_stores`): the context is
saved in the RunState, so it never holds a path to trust or a database URL.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from agents import RunContextWrapper, function_tool

from state import open_stores, terminal
from state.errors import Stopped
from state.schema import (PREVIEW_CHANNEL, channel_scope, content_sha256, effect_key,
                          valid_channel)

from workflow.effect import effectful

TOOL_NAME = "publish_draft"


def needs_publish_approval(ctx: Any, params: Any, _call_id: str) -> bool:
    """The approval rule (the SDK calls it as ``needs_approval(ctx, params, call_id)`` with the
    call's parsed arguments): False only for a well-formed call to the private ``preview``
    channel (``title``/``body`` strings, ``channel == "preview"``) of a task that has that channel
    (``ctx.context["channels"]``); True for every public channel, for ``preview`` in a task without
    it (the call then pauses, and the run ends there: ``workflow.guards.after_run``, instead of
    the tool refusing it mid-run, again with each resume) and for anything malformed, so a call
    that cannot be read asks a human (fail closed). The SDK itself asks for approval, without
    calling this, when the arguments are not a JSON object."""
    if not isinstance(params, dict) or set(params) != {"title", "body", "channel"}:
        return True
    well_formed = all(isinstance(params[k], str) for k in ("title", "body", "channel"))
    task = getattr(ctx, "context", None)
    channels = task.get("channels") if isinstance(task, dict) else None
    return not (well_formed and params["channel"] == PREVIEW_CHANNEL
                and isinstance(channels, list) and PREVIEW_CHANNEL in channels)


def call_channel(task: dict[str, Any], channel: Any) -> str:
    """The channel a call publishes to: ``channel``, or the task's only channel when the call
    names none. Raises :class:`Stopped` if the channel is not one of the task's, or is missing in
    a task with several."""
    channels = task["channels"]
    if channel is None and len(channels) == 1:
        return channels[0]
    if not valid_channel(channel) or channel not in channels:
        raise Stopped(f"publish_draft for task {task['task_id']} names channel {channel!r}, not one "
                      f"of the task's channels ({', '.join(channels)}); nothing was published")
    return channel


@function_tool(needs_approval=needs_publish_approval, failure_error_function=None)
def publish_draft(ctx: RunContextWrapper[dict[str, Any]], title: str, body: str,
                  channel: Optional[str] = None) -> str:
    """Publish a reviewed draft to one channel. Public channels require human approval.

    Args:
        title: The draft's title, exactly as given by the user.
        body: The draft's full text, exactly as given by the user.
        channel: The channel to publish to, one of those the user named.
    """
    task = ctx.context
    channel = call_channel(task, channel)
    sha = content_sha256(title, body)
    store = open_stores.lookup(task.get("store"))  # a TaskStore (state.store)
    gated = needs_publish_approval(ctx, {"title": title, "body": body, "channel": channel}, "")
    scope = channel_scope(channel, task["channels"])
    expected = task["content_sha256"]
    if gated and sha != expected:  # maybe the draft a reviewer approved with edits on this channel
        cp = store.load(task["task_id"]) if store.exists(task["task_id"]) else None
        expected = expected if cp is None else cp.expected_sha256(channel)
    if sha != expected:
        raise Stopped(
            f"publish_draft for task {task['task_id']} was called with content that differs from "
            "the draft that was started and approved; refusing"
        )
    if gated:
        _check_approved(store, task, channel, scope, getattr(ctx, "tool_call_id", None))
    entry, created = store.ledger_record(
        key=effect_key(task["task_id"], channel, task["channels"]), task_id=task["task_id"],
        action=TOOL_NAME, title=title, content_sha256=sha, channel=channel,  # every entry names its channel
        approval="human" if gated else "not_needed")
    return json.dumps(
        {
            "result": "published" if created else "already published",
            "channel": channel,
            "idempotency_key": entry.idempotency_key,
            "published_at": entry.published_at,
        }
    )


def _check_approved(store: Any, task: dict[str, Any], channel: str, scope: Optional[str],
                    call_id: Optional[str]) -> None:
    """Right before a gated effect, whatever the lock says: no rejection record for this (task,
    channel) — a reject recorded meanwhile by a process whose lock file was deleted under this one
    wins — and a human's approval of this very call (``call_id``) on record in the checkpoint, so an
    approval rule that said "no approval needed", an SDK change or a sticky rule in a hand-edited
    file never publishes by itself. Raises :class:`Stopped`."""
    task_id = task["task_id"]
    rejected = store.rejection_get(task_id, scope)
    if rejected is not None:
        raise Stopped(
            f"publish_draft for task {task_id} on {channel}: a reject by {rejected.by} at "
            f"{rejected.at} was being recorded while this approval ran; nothing was published "
            f"({terminal.command('status', '--task', task_id)} shows where the task stands)")
    cp = store.load(task_id) if store.exists(task_id) else None
    approved = cp is not None and any(  # an approval with edits never runs the call it answers
        d.decision == "approved" and d.edits is None and d.channel == channel and d.call_id == call_id
        for d in cp.decisions)
    if not approved:
        raise Stopped(
            f"publish_draft for task {task_id} on {channel} ran without a human approval on record "
            "for this call (an approval rule that returned False?); nothing was published")


effectful(publish_draft)  # its call writes the ledger: never without approval (workflow.effect)
