"""The Publisher agent: what it is told, which tools it has, and what it is told after a decision.

SDK: ``Agent(name=..., instructions=..., tools=[publish_draft, send_summary], model=...)``: two
approval-gated tools; a task gates one of them, its action (``publish_draft`` unless ``start
--action send_summary``), and a call of the other in that task is never run. The agent is rebuilt
from code in every process; only the run's state is saved, with the agent's fingerprint, which the
engine compares before resuming (:mod:`workflow.agent_check`; fingerprints of earlier versions this
code still resumes: ``agent.application.COMPATIBLE_SAVED``). The engine's view of this agent is
``agent.application.APP``.
"""

from __future__ import annotations

from typing import Any

from agents import Agent
from agents.models.interface import Model

from tools.publish import publish_draft
from tools.summary import send_summary

AGENT_NAME = "Publisher"

INSTRUCTIONS = (
    "You publish drafts for the user. When the user gives you a draft, the tool to use "
    "(publish_draft, or send_summary) and a list of channels, call that tool once for each "
    "channel, all calls in the same turn, with the title and body exactly as given and that "
    "channel. After the tools answer, or if a human rejected a call, reply with one short sentence "
    "that quotes what each tool said."
)


def user_message(title: str, body: str, channels: list[str] | None = None, tool: str = "publish_draft") -> str:
    """The first user message of a task: the request (the ``tool`` that carries the draft: the
    task's action), the channels and the draft, in a fixed, parseable form
    (``agent.models.parse_draft``, ``agent.models.parse_tool``)."""
    return (f"Publish this draft with {tool} to these channels: {', '.join(channels or [])}."
            f"\nTitle: {title}\nBody:\n{body}")


#: What the model is told when a human rejected a call without giving a reason (the run-wide layer;
#: a per-call ``--reason`` replaces it, SDK docs "Custom rejection messages").
REJECTED_TEXT = ("A human reviewer rejected publishing to this channel ({tool_name}, call {call_id}); "
                 "it was not published. Do not retry it.")


def rejection_text(args: Any) -> str | None:
    """``RunConfig.tool_error_formatter``: for a rejected approval (``args.kind ==
    "approval_rejected"``, an SDK ``ToolErrorFormatterArgs``) the text of :data:`REJECTED_TEXT`;
    None for any other error kind (the SDK's default message)."""
    if getattr(args, "kind", None) != "approval_rejected":
        return None
    return REJECTED_TEXT.format(tool_name=args.tool_name, call_id=args.call_id)


#: How :func:`edit_message` begins, before the tool's name: how the model (and the offline model)
#: recognises it.
EDIT_HEADER = "The reviewer approved this call only with edits, so it was not run: call "


def edit_message(title: str, body: str, channel: str | None = None, tool: str = "publish_draft") -> str:
    """The answer to a call of ``tool`` approved with edits (sent as its ``rejection_message``):
    what to send instead, exactly, in the form of :func:`user_message`; ``channel`` (a task with
    several channels) is the one channel the new call must name (workflow/edits.py)."""
    where = f" to this channel: {channel}" if channel else ""
    return f"{EDIT_HEADER}{tool} once more with exactly this title and body{where}.\nTitle: {title}\nBody:\n{body}"


def build_agent(model: Model) -> Agent[Any]:
    """The Publisher agent driven by ``model`` (an SDK ``Model``: offline or real)."""
    return Agent(name=AGENT_NAME, instructions=INSTRUCTIONS, tools=[publish_draft, send_summary],
                 model=model)
