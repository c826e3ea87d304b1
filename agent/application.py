"""The publisher as the engine sees it (:class:`workflow.application.Application`), and the two
calls ``run.py`` makes with it: :func:`start` a task for a draft, :func:`decide` one of its calls.

The engine knows only the content ``{"title", "body"}`` and the task's action, ``publish_draft``
or ``send_summary`` (the agent's tools declared through the effect gate); the draft's first user message
(:func:`agent.publisher.user_message`) and what the model is told after a decision are this
application's.
"""

from __future__ import annotations

from typing import Any

from state.schema import DEFAULT_CHANNEL, Checkpoint
from workflow.application import Application

# Each part imports the publisher's modules when it is called, not here: ``run.py serve`` takes
# :data:`APP` before its own refusals, which come before the SDK's import (about 2 s).


def _build_agent(model: Any) -> Any:
    """:func:`agent.publisher.build_agent`."""
    from agent.publisher import build_agent

    return build_agent(model)


def _offline_model() -> Any:
    """:func:`agent.models.build_offline_model`."""
    from agent.models import build_offline_model

    return build_offline_model()


def _edit_message(tool: str, content: dict[str, str], channel: str | None) -> str:
    """:func:`agent.publisher.edit_message` of the edited ``content`` (``{"title", "body"}``)."""
    from agent.publisher import edit_message

    return edit_message(content["title"], content["body"], channel, tool)


def _rejection_text(args: Any) -> str | None:
    """:func:`agent.publisher.rejection_text`."""
    from agent.publisher import rejection_text

    return rejection_text(args)


#: Agent fingerprints (:func:`workflow.agent_check.describe`) saved by earlier versions of this
#: program that today's agent resumes safely, with why. Each is the exact fingerprint, as its
#: canonical-JSON SHA-256; anything else that differs from today's agent is drift. Re-check this
#: table whenever the agent changes.
COMPATIBLE_SAVED = {
    # schema_version 1: publish_draft(title, body), needs_approval=True, told to call once. Its one
    # call names no channel, which today's tool reads as the task's only channel, and today's rule
    # gates that channel ("blog") exactly as True did; the run after it asks the model only for
    # its closing sentence.
    "d3055bc652729dc8df6e045238e214a945f2644c4657e8e83459b50a9d773099":
        "the one-channel publish_draft of schema_version 1",
    # schema_version 2, before send_summary: the same publish_draft, the only tool. Today's agent
    # adds send_summary and names it in its instructions; a task's action is fixed when it starts,
    # so these tasks still gate publish_draft, and a send_summary call in one is never run
    # (workflow/trust.py, only_action).
    "2dc1393cbf285b0f858f5a271ea17144e958c3d63fb86052f44d6e96111a064e":
        "the publisher of schema_version 2 with publish_draft as its only tool",
}

#: The publisher: the agent of :func:`agent.publisher.build_agent`, the offline model of
#: :mod:`agent.models`, its edit and rejection texts, the fingerprints it still resumes, its
#: default action (``publish_draft``; ``start --action send_summary`` names the other) and what
#: its refusals call the draft's body.
APP = Application(build_agent=_build_agent, offline_model=_offline_model,
                  edit_message=_edit_message, rejection_text=_rejection_text,
                  compatible_saved=COMPATIBLE_SAVED, action="publish_draft",
                  content_labels={"body": "the draft"})


def content(title: str, draft: str) -> dict[str, str]:
    """The content a publish_draft call must carry: ``{"title": title, "body": draft}``."""
    return {"title": title, "body": draft}


async def start(store: Any, *, task_id: str, title: str, draft: str, channels: list[str] | None = None,
                app: Application | None = None, **kwargs: Any) -> Checkpoint:
    """``workflow.hitl.start`` for a draft: content ``{"title", "body"}``, the first user message
    of :func:`agent.publisher.user_message` naming ``channels`` (default ``["blog"]``); ``app``
    (default :data:`APP`) and ``kwargs`` are passed on. Raises what it raises."""
    from agent.publisher import user_message
    from workflow import hitl

    named = list(channels or [DEFAULT_CHANNEL])
    tool = kwargs.get("action") or "publish_draft"  # the tool the draft goes through: the task's action
    return await hitl.start(store, app or APP, task_id=task_id, title=title, content=content(title, draft),
                            input=user_message(title, draft, named, tool), channels=named, **kwargs)


async def decide(store: Any, *, app: Application | None = None, **kwargs: Any) -> Checkpoint:
    """``workflow.hitl.decide`` with the publisher (``app``, default :data:`APP`)."""
    from workflow import hitl

    return await hitl.decide(store, app or APP, **kwargs)


async def resume(store: Any, *, app: Application | None = None, **kwargs: Any) -> Checkpoint:
    """``workflow.hitl.resume`` with the publisher (``app``, default :data:`APP`)."""
    from workflow import hitl

    return await hitl.resume(store, app or APP, **kwargs)
