"""The ``publish_draft`` tool: the publisher's first sensitive action (its default), gated by a human.

SDK: ``@function_tool(needs_approval=...)`` makes a call pause the run; the call appears in
``result.interruptions`` as a ``ToolApprovalItem`` and runs only after ``state.approve(item)``
(OpenAI Agents SDK docs, "Human-in-the-loop"). The tool is declared through the library's effect
gate (:func:`workflow.effect.effect_tool`), which wraps ``function_tool`` and, right before the
effect, checks the call carries the task's draft on its channel, a human's approval of this call
on record and no rejection record, and records the ledger entry once per idempotency key. Its
``needs_approval`` is a function, the SDK's per-call approval rule: :func:`needs_publish_approval`
lets a call to the private ``preview`` channel run without a human and gates every public channel.

By default the tool's only effect is a ledger entry, one per (task, channel): the function itself
does nothing; what the model is told (:func:`answer`) is read from that entry. With
``HITL_PUBLISH_URL`` set, the function publishes through that service (:mod:`tools.publishing_client`)
with the gate's ``Idempotency-Key``, and the gate writes the intent first and the outcome after
(:mod:`workflow.external`, docs/external-effects.md).
"""

from __future__ import annotations

import json
from typing import Any, Optional

from state.schema import PREVIEW_CHANNEL
from tools import publishing_client
from workflow import effect as gate
from workflow import external
from workflow.effect import Effect, effect_tool

TOOL_NAME = "publish_draft"
#: What its refusals say was not done ("nothing was published").
DONE = "published"


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
    """The channel a call publishes to (:func:`workflow.effect.call_channel`): ``channel``, or the
    task's only channel when the call names none. Raises :class:`state.errors.Refused` if the
    channel is not one of the task's, or is missing in a task with several."""
    return gate.call_channel(task, channel, TOOL_NAME, DONE)


def answer(_result: Any, entry: Any, created: bool) -> str:
    """What the model is told, from the ledger entry: ``{"result": "published" | "already
    published", "channel", "idempotency_key", "published_at"}`` as JSON text, plus
    ``"publication_id"`` when the effect went through a service (its publication's ``id``)."""
    told = {
        "result": "published" if created else "already published",
        "channel": entry.channel,
        "idempotency_key": entry.idempotency_key,
        "published_at": entry.published_at,
    }
    if isinstance(entry.result, dict) and isinstance(entry.result.get("id"), str):
        told["publication_id"] = entry.result["id"]
    return json.dumps(told)


def publishing_service() -> Optional[external.Service]:
    """The service ``publish_draft`` goes through, from the settings (``HITL_PUBLISH_URL``,
    ``HITL_PUBLISH_IDEMPOTENCY``, ``HITL_PUBLISH_ATTEMPTS``), or None: the local ledger. A
    provider with deduplication is asked before a call is sent again (``find``)."""
    from state.settings import settings

    found = publishing_client.from_settings()
    if found is None:
        return None
    client, deduplicates = found

    def find(request_key: str, arguments: dict[str, Any]) -> Optional[dict[str, Any]]:
        """The publication under ``request_key``, if it is this call's draft; raises
        :class:`workflow.external.Conflict` if the service holds the key for another."""
        publication = client.find(request_key)
        if publication is None:
            return None
        if any(publication.get(k) != arguments.get(k) for k in ("title", "body", "channel")):
            raise external.Conflict(f"publication {publication.get('id')!r} under this key holds another draft")
        return publication

    found = settings()
    return external.Service(url=client.url, deduplicates=deduplicates, find=find if deduplicates else None,
                            attempts=found.publish_attempts, timeout_s=client.timeout_s,
                            settle_after_s=found.publish_settle_after)


@effect_tool(needs_approval=needs_publish_approval, private_channels={PREVIEW_CHANNEL}, answer=answer,
             label=lambda args: args["title"], done=DONE, content_word="draft",
             service=publishing_service)
def publish_draft(effect: Effect, title: str, body: str, channel: Optional[str] = None) -> Any:
    """Publish a reviewed draft to one channel. Public channels require human approval.

    Args:
        title: The draft's title, exactly as given by the user.
        body: The draft's full text, exactly as given by the user.
        channel: The channel to publish to, one of those the user named.
    """
    if effect.request_key is None:
        return None  # no service: the ledger entry the gate writes is the whole effect
    found = publishing_client.from_settings()
    if found is None:  # the setting went away mid-run: the gate checked it, so this is a race
        raise external.NotSent("HITL_PUBLISH_URL is no longer set", retry=False)
    publication = found[0].publish(effect.request_key, title, body, effect.channel)
    sent = {"title": title, "body": body, "channel": effect.channel}
    if any(publication.get(k) != v for k, v in sent.items()):  # what it holds is not what was approved
        raise external.Conflict(f"publication {str(publication.get('id'))[:40]!r} holds other content than was sent")
    return publication
