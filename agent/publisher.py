"""The Publisher agent: what it is told, which tool it has, and how its definition is fingerprinted.

SDK: ``Agent(name=..., instructions=..., tools=[publish_draft], model=...)``. The agent is rebuilt
from code in every process; only the run's state is saved. So before resuming we compare the saved
definition (:func:`describe`) with the one in code: a renamed agent or tool, a changed schema or a
dropped ``needs_approval`` flag must stop the resume, not surprise it mid-run.
"""

from __future__ import annotations

from typing import Any

from agents import Agent, FunctionTool
from agents.models.interface import Model

from state.schema import canonical_json, sha256_hex
from tools.publish import publish_draft

AGENT_NAME = "Publisher"

INSTRUCTIONS = (
    "You publish drafts for the user. When the user gives you a draft, call the publish_draft tool "
    "exactly once with the title and body exactly as given. After the tool answers, or if a human "
    "rejected the call, reply with one short sentence that quotes what the tool said."
)


def user_message(title: str, body: str) -> str:
    """The first user message of a task: the request plus the draft, in a fixed, parseable form."""
    return f"Publish this draft with publish_draft.\nTitle: {title}\nBody:\n{body}"


def build_agent(model: Model) -> Agent[Any]:
    """The Publisher agent driven by ``model`` (an SDK ``Model``: offline or real)."""
    return Agent(name=AGENT_NAME, instructions=INSTRUCTIONS, tools=[publish_draft], model=model)


def describe(agent: Agent[Any]) -> dict[str, Any]:
    """The agent definition as stored in a checkpoint (``state.schema.AgentDefinition`` shape).

    ``{"name", "instructions_sha256", "tools": {name: {"schema_sha256", "needs_approval"}}}``.
    ``needs_approval`` is True/False, or ``"callable"`` for a per-call policy.
    """
    tools: dict[str, dict[str, Any]] = {}
    for tool in agent.tools:
        if isinstance(tool, FunctionTool):
            flag = tool.needs_approval if isinstance(tool.needs_approval, bool) else "callable"
            tools[tool.name] = {
                "schema_sha256": sha256_hex(canonical_json(tool.params_json_schema)),
                "needs_approval": flag,
            }
        else:  # hosted or other tools: name only
            tools[getattr(tool, "name", type(tool).__name__)] = {
                "schema_sha256": "",
                "needs_approval": "n/a",
            }
    instructions = agent.instructions if isinstance(agent.instructions, str) else "<dynamic>"
    return {
        "name": agent.name,
        "instructions_sha256": sha256_hex(instructions.encode("utf-8")),
        "tools": tools,
    }


def drift(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """What changed between two :func:`describe` results, as short phrases (empty: no drift)."""
    changes: list[str] = []
    if saved["name"] != current["name"]:
        changes.append(f"agent name {saved['name']!r} -> {current['name']!r}")
    if saved["instructions_sha256"] != current["instructions_sha256"]:
        changes.append("agent instructions changed")
    for name in sorted(set(saved["tools"]) | set(current["tools"])):
        old, new = saved["tools"].get(name), current["tools"].get(name)
        if old is None:
            changes.append(f"tool {name!r} added")
        elif new is None:
            changes.append(f"tool {name!r} removed")
        else:
            if old.get("schema_sha256") != new.get("schema_sha256"):
                changes.append(f"tool {name!r} schema changed")
            if old.get("needs_approval") != new.get("needs_approval"):
                changes.append(
                    f"tool {name!r} needs_approval {old.get('needs_approval')!r} -> "
                    f"{new.get('needs_approval')!r}"
                )
    return changes
