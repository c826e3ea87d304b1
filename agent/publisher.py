"""The Publisher agent: what it is told, which tool it has, and how its definition is fingerprinted.

SDK: ``Agent(name=..., instructions=..., tools=[publish_draft], model=...)``. The agent is rebuilt
from code in every process; only the run's state is saved. So before resuming we compare the saved
definition (:func:`describe`) with the one in code: a renamed agent or tool, a changed schema,
description, function or tool order, or a dropped ``needs_approval`` flag must stop the resume, not
surprise it mid-run. :func:`check_agent` refuses an agent that must not run at all.
"""

from __future__ import annotations

from typing import Any

from agents import Agent, FunctionTool
from agents.models.interface import Model

from state.errors import Stopped
from state.schema import canonical_json, sha256_hex
from workflow.effect import function_identity, is_effectful
from tools.publish import publish_draft

AGENT_NAME = "Publisher"

INSTRUCTIONS = (
    "You publish drafts for the user. When the user gives you a draft and a list of channels, call "
    "the publish_draft tool once for each channel, all calls in the same turn, with the title and "
    "body exactly as given and that channel. After the tools answer, or if a human rejected a "
    "call, reply with one short sentence that quotes what each tool said."
)

#: Agent fingerprints (:func:`describe`) saved by earlier versions of this program that today's
#: agent resumes safely, with why. Each is the exact fingerprint, as its canonical-JSON SHA-256;
#: anything else that differs from today's agent is drift. Re-check this table whenever the agent
#: changes.
COMPATIBLE_SAVED = {
    # schema_version 1: publish_draft(title, body), needs_approval=True, told to call once. Its one
    # call names no channel, which today's tool reads as the task's only channel, and today's rule
    # gates that channel ("blog") exactly as True did; the run after it asks the model only for
    # its closing sentence.
    "d3055bc652729dc8df6e045238e214a945f2644c4657e8e83459b50a9d773099":
        "the one-channel publish_draft of schema_version 1",
}


def user_message(title: str, body: str, channels: list[str] | None = None) -> str:
    """The first user message of a task: the request, the channels and the draft, in a fixed,
    parseable form (``agent.models.parse_draft``)."""
    return (f"Publish this draft with publish_draft to these channels: {', '.join(channels or [])}."
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


#: How :func:`edit_message` begins: how the model (and the offline model) recognises it.
EDIT_HEADER = ("The reviewer approved this call only with edits, so it was not run: call publish_draft "
               "once more with exactly this title and body")


def edit_message(title: str, body: str, channel: str | None = None) -> str:
    """The answer to a call approved with edits (sent as its ``rejection_message``): what to
    publish instead, exactly, in the form of :func:`user_message`; ``channel`` (a task with several
    channels) is the one channel the new call must name (workflow/edits.py)."""
    where = f" to this channel: {channel}" if channel else ""
    return f"{EDIT_HEADER}{where}.\nTitle: {title}\nBody:\n{body}"


def build_agent(model: Model) -> Agent[Any]:
    """The Publisher agent driven by ``model`` (an SDK ``Model``: offline or real)."""
    return Agent(name=AGENT_NAME, instructions=INSTRUCTIONS, tools=[publish_draft], model=model)


def check_agent(agent: Agent[Any]) -> None:
    """Refuse an agent that must not run, before any run and before any file is written.

    Raises :class:`Stopped`:

    - two tools with one name: the SDK keeps only the last one registered (``tool name collision``,
      SDK ``_tool_identity.resolve_tool_name_collisions``, default policy ``warn``), so an approval
      given for one could run the other;
    - an effectful tool (``workflow.effect``) whose ``needs_approval`` is ``False``: it would run on
      ``start`` with nobody asked. ``True`` or a callable (the SDK's per-call approval policy,
      "Human-in-the-loop" docs) are accepted; a callable only if it gates what it must: it is
      asked about a call to a public channel and about malformed arguments, and must answer True
      to both (:func:`_check_rule`).
    """
    seen: set[str] = set()
    for tool in agent.tools:
        name = getattr(tool, "name", type(tool).__name__)
        if name in seen:
            raise Stopped(f"the agent has two tools named {name!r}; the SDK would run only the last "
                          "one registered: give each tool its own name (nothing run, nothing saved)")
        seen.add(name)
        rule = getattr(tool, "needs_approval", False)
        if is_effectful(tool) and rule is False:
            raise Stopped(f"tool {name!r} has an effect but needs_approval is False, so it would run "
                          "without a human: set needs_approval=True (nothing run, nothing saved)")
        if is_effectful(tool) and not (rule is True or callable(rule)):
            raise Stopped(f"tool {name!r} has an effect but needs_approval is {rule!r}, neither True "
                          "nor an approval rule (a function): set needs_approval=True (nothing run, "
                          "nothing saved)")
        if is_effectful(tool) and callable(rule):
            _check_rule(name, rule)


#: What an approval rule of an effectful tool is asked before any run: a call to a public channel
#: and calls whose arguments are malformed. Each must need a human.
RULE_PROBES: tuple[Any, ...] = (
    {"title": "t", "body": "b", "channel": "blog"}, {"title": "t", "body": "b"},
    {"title": "t", "body": "b", "channel": None}, {"title": 1, "body": "b", "channel": "preview"},
    {"title": "t", "body": "b", "channel": "preview", "extra": True}, [], None,
)


def _check_rule(name: str, rule: Any) -> None:
    """Refuse an approval rule (``needs_approval`` function) that lets a public channel or a
    malformed call run without a human. An asynchronous rule cannot be probed
    before the run without an event loop: it is accepted unprobed (the tool itself still refuses
    to publish a public channel without a human approval on record)."""
    import inspect

    if inspect.iscoroutinefunction(rule):
        return  # not probed without an event loop; the tool still needs a human approval on record
    for probe in RULE_PROBES:
        try:
            answer = rule(None, probe, "probe")
        except Exception:  # a rule that cannot answer fails closed in the SDK too: it raises
            answer = True
        if answer is not True:
            raise Stopped(f"tool {name!r}: its approval rule answers {answer!r} for the call "
                          f"{probe!r}, which must need a human (a public channel or malformed "
                          "arguments); nothing run, nothing saved")


def _identity(value: Any) -> str:
    """``module.qualname`` of a function (or of a callable object's class)."""
    target = value if hasattr(value, "__qualname__") else type(value)
    return f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', '?')}"


def describe(agent: Agent[Any]) -> dict[str, Any]:
    """The agent definition as stored in a checkpoint (``state.schema.AgentDefinition`` shape).

    ``{"name", "instructions_sha256", "tools": {name: {"position", "description_sha256",
    "schema_sha256", "needs_approval", "function"}}}``, tools in the agent's order (``position``
    0, 1, …). ``needs_approval`` is True/False, ``"callable:<module.qualname>"`` for a per-call
    policy, ``"n/a"`` for a hosted tool; ``function`` is the identity of the Python function the
    tool runs (:func:`workflow.effect.function_identity`). Instructions given as a function are
    fingerprinted by its ``module.qualname``.
    """
    tools: dict[str, dict[str, Any]] = {}
    for position, tool in enumerate(agent.tools):
        name = getattr(tool, "name", type(tool).__name__)
        if isinstance(tool, FunctionTool):
            flag: Any = tool.needs_approval
            if not isinstance(flag, bool):
                flag = "callable:" + _identity(flag)
            entry = {
                "description_sha256": sha256_hex((tool.description or "").encode("utf-8")),
                "schema_sha256": sha256_hex(canonical_json(tool.params_json_schema)),
                "needs_approval": flag,
                "function": function_identity(tool),
            }
        else:  # hosted or other tools: name and type only
            entry = {"description_sha256": "", "schema_sha256": "", "needs_approval": "n/a",
                     "function": _identity(type(tool))}
        tools.setdefault(name, {"position": position, **entry})  # check_agent refuses duplicates
    if isinstance(agent.instructions, str):
        instructions = agent.instructions
    elif agent.instructions is None:
        instructions = "<none>"
    else:
        instructions = "<function " + _identity(agent.instructions) + ">"
    return {
        "name": agent.name,
        "instructions_sha256": sha256_hex(instructions.encode("utf-8")),
        "tools": tools,
    }


_FIELDS = ("position", "description_sha256", "schema_sha256", "needs_approval", "function")


def drift(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """What changed between two :func:`describe` results, as short phrases (empty: no drift).
    A saved fingerprint listed in :data:`COMPATIBLE_SAVED` is no drift.

    A saved fingerprint of an older shape (tools without ``position``/``description_sha256``/
    ``function``) is reported as drift (``tool 'x' fingerprint is of an older format``), never a
    crash.
    """
    if sha256_hex(canonical_json(saved)) in COMPATIBLE_SAVED:
        return []
    changes: list[str] = []
    if saved.get("name") != current["name"]:
        changes.append(f"agent name {saved.get('name')!r} -> {current['name']!r}")
    if saved.get("instructions_sha256") != current["instructions_sha256"]:
        changes.append("agent instructions changed")
    old_tools = saved.get("tools") if isinstance(saved.get("tools"), dict) else {}
    for name in [*old_tools, *(n for n in current["tools"] if n not in old_tools)]:
        old, new = old_tools.get(name), current["tools"].get(name)
        if old is None:
            changes.append(f"tool {name!r} added")
        elif new is None:
            changes.append(f"tool {name!r} removed")
        elif not isinstance(old, dict) or any(f not in old for f in _FIELDS):
            changes.append(f"tool {name!r} fingerprint is of an older format (saved by an earlier "
                           "version of this program)")
        else:
            if old["schema_sha256"] != new["schema_sha256"]:
                changes.append(f"tool {name!r} schema changed")
            if old["description_sha256"] != new["description_sha256"]:
                changes.append(f"tool {name!r} description changed")
            if old["function"] != new["function"]:
                changes.append(f"tool {name!r} function changed ({old['function']} -> {new['function']})")
            if old["needs_approval"] != new["needs_approval"]:
                changes.append(f"tool {name!r} needs_approval {old['needs_approval']!r} -> "
                               f"{new['needs_approval']!r}")
    common = [n for n in old_tools if n in current["tools"]]
    if all(isinstance(old_tools[n], dict) and isinstance(old_tools[n].get("position"), int) for n in common):
        common.sort(key=lambda n: old_tools[n]["position"])  # the saved order, by explicit position
    if common != [n for n in current["tools"] if n in old_tools]:
        changes.append("tool order changed")
    return changes
