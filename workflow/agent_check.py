"""An agent's definition, checked: what must not run at all, and what changed since a save.

SDK: ``Agent(name=..., instructions=..., tools=[...], model=...)``. The agent is rebuilt from code
in every process; only the run's state is saved. So before resuming, the saved definition
(:func:`describe`) is compared with the one in code: a renamed agent or tool, a changed schema,
description, function or tool order, or a dropped ``needs_approval`` flag must stop the resume, not
surprise it mid-run (:func:`drift`). :func:`check_agent` refuses an agent that must not run at all,
and :func:`gated_tool` names the tool whose effect a task gates (``workflow.effect``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

from state.errors import Refused
from state.schema import CHANNEL_ARG, DEFAULT_CHANNEL, PREVIEW_CHANNEL, canonical_json, sha256_hex
from workflow.effect import function_identity, is_effectful

if TYPE_CHECKING:
    from agents import Agent


def reachable_tools(agent: "Agent[Any]") -> list[Any]:
    """The tools of ``agent`` and of every agent it can hand off to (``Agent(handoffs=[...])``,
    the agents listed there, or the agent of a ``handoff(agent, …)`` object) or run as a tool
    (``Agent.as_tool``), recursively, in that order, each agent and each tool once: the run may
    call any of them. (A tool no walk finds, e.g. a ``Handoff`` whose agent is gone, is not
    checked here; the effect gate still refuses its calls without a human's approval on record.)"""
    tools: list[Any] = []
    seen: set[int] = set()
    todo = [agent]
    while todo:
        current = todo.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        tools.extend(t for t in current.tools if all(t is not known for known in tools))
        for h in getattr(current, "handoffs", []):
            ref = getattr(h, "_agent_ref", None)  # SDK 0.24: ``handoff(agent)`` keeps a weak reference
            target = h if hasattr(h, "tools") else ref() if callable(ref) else None
            if hasattr(target, "tools"):
                todo.append(target)
        # an agent used as a tool (``Agent.as_tool``): SDK 0.24 keeps it on the tool it returns
        todo.extend(a for t in current.tools if hasattr(a := getattr(t, "_agent_instance", None), "tools"))
    return tools


def effect_tools(agent: "Agent[Any]") -> list[Any]:
    """The tools of ``agent`` declared through the effect gate (:mod:`workflow.effect`), in
    :func:`reachable_tools` order."""
    return [tool for tool in reachable_tools(agent) if is_effectful(tool)]


def gated_tool(agent: "Agent[Any]", action: str | None = None, channels: Sequence[str] = ()) -> Any:
    """The tool of ``agent`` whose calls a task gates, one of those declared through the effect
    gate (:mod:`workflow.effect`): the one named ``action`` (the task's action, named at start,
    else ``Application.action``), or with ``action`` None the agent's first one (in
    :func:`reachable_tools` order). Its name is the task's ``action``: a task keeps one ledger entry
    per call of exactly that tool, and a call of any other tool is never run in it. Raises
    :class:`Refused` (nothing run, nothing saved) if the agent has none, or none of that name, or
    if ``channels`` (a new task's) are several and the tool takes no ``channel`` argument: its
    calls could not say which channel each is for, so no approval could ever be run."""
    found = effect_tools(agent)
    named = [t for t in found if action is None or getattr(t, "name", None) == action]
    if not named:
        names = ", ".join(repr(getattr(t, "name", "?")) for t in found) or "none"
        wanted = f" named {action!r}" if action is not None else ""
        raise Refused("agent", f"the agent must have a tool{wanted} declared with an effect (found: "
                      f"{names}); nothing run, nothing saved")
    properties = (getattr(named[0], "params_json_schema", None) or {}).get("properties") or {}
    if len(channels) > 1 and CHANNEL_ARG not in properties:
        raise Refused("agent", f"tool {named[0].name!r} takes no channel argument, so a task for several "
                      f"channels ({', '.join(channels)}) could not route its calls; nothing run, nothing saved")
    return named[0]


def check_agent(agent: "Agent[Any]") -> None:
    """Refuse an agent that must not run, before any run and before any file is written.

    Raises :class:`Refused`:

    - two tools with one name: the SDK keeps only the last one registered (``tool name collision``,
      SDK ``_tool_identity.resolve_tool_name_collisions``, default policy ``warn``), so an approval
      given for one could run the other;
    - an effectful tool (:mod:`workflow.effect`) whose ``needs_approval`` is ``False``: it would run on
      ``start`` with nobody asked. ``True`` or a callable (the SDK's per-call approval policy,
      "Human-in-the-loop" docs) are accepted; a callable only if it gates what it must: it is
      asked about a call to a public channel and about malformed arguments, and must answer True
      to both (:func:`_check_rule`).
    """
    seen: set[str] = set()
    for tool in reachable_tools(agent):  # a handoff's agent's tools too
        name = getattr(tool, "name", type(tool).__name__)
        if name in seen:
            raise Refused("agent", f"the agent has two tools named {name!r}; the SDK would run only the last "
                          "one registered: give each tool its own name (nothing run, nothing saved)")
        seen.add(name)
        rule = getattr(tool, "needs_approval", False)
        if is_effectful(tool) and rule is False:
            raise Refused("agent", f"tool {name!r} has an effect but needs_approval is False, so it would run "
                          "without a human: set needs_approval=True (nothing run, nothing saved)")
        if is_effectful(tool) and not (rule is True or callable(rule)):
            raise Refused("agent", f"tool {name!r} has an effect but needs_approval is {rule!r}, neither True "
                          "nor an approval rule (a function): set needs_approval=True (nothing run, "
                          "nothing saved)")
        if is_effectful(tool) and callable(rule):
            _check_rule(name, rule, rule_probes(tool))


def rule_probes(tool: Any) -> tuple[Any, ...]:
    """What an approval rule of an effectful tool is asked before any run: a call to a public
    channel (:data:`state.schema.DEFAULT_CHANNEL`), one naming no channel or a null one, and calls
    whose arguments are malformed (a wrong type on the private preview channel, an extra argument,
    not an object). Each must need a human. The arguments are the tool's own (its JSON schema's
    properties but ``channel``, each ``"t"``, ``"b"``, …); for ``publish_draft(title, body,
    channel)``: ``{"title": "t", "body": "b", "channel": "blog"}`` and so on."""
    schema = getattr(tool, "params_json_schema", None) or {}
    names = [n for n in (schema.get("properties") or {}) if n != "channel"]
    content = {n: "tb"[i] if i < 2 else f"v{i}" for i, n in enumerate(names)}
    wrong = {**content, **({names[0]: 1} if names else {})}
    return (
        {**content, "channel": DEFAULT_CHANNEL}, dict(content), {**content, "channel": None},
        {**wrong, "channel": PREVIEW_CHANNEL}, {**content, "channel": PREVIEW_CHANNEL, "extra": True},
        [], None,
    )


def _check_rule(name: str, rule: Any, probes: tuple[Any, ...]) -> None:
    """Refuse an approval rule (``needs_approval`` function) that lets a public channel or a
    malformed call run without a human. An asynchronous rule cannot be probed
    before the run without an event loop: it is accepted unprobed (the tool itself still refuses
    to publish a public channel without a human approval on record)."""
    import inspect

    if inspect.iscoroutinefunction(rule):
        return  # not probed without an event loop; the tool still needs a human approval on record
    for probe in probes:
        try:
            answer = rule(None, probe, "probe")
        except Exception:  # a rule that cannot answer fails closed in the SDK too: it raises
            answer = True
        if answer is not True:
            raise Refused("agent", f"tool {name!r}: its approval rule answers {answer!r} for the call "
                          f"{probe!r}, which must need a human (a public channel or malformed "
                          "arguments); nothing run, nothing saved")


def _identity(value: Any) -> str:
    """``module.qualname`` of a function (or of a callable object's class)."""
    target = value if hasattr(value, "__qualname__") else type(value)
    return f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', '?')}"


def describe(agent: "Agent[Any]") -> dict[str, Any]:
    """The agent definition as stored in a checkpoint (``state.schema.AgentDefinition`` shape).

    ``{"name", "instructions_sha256", "tools": {name: {"position", "description_sha256",
    "schema_sha256", "needs_approval", "function"}}}``, tools in the agent's order (``position``
    0, 1, …). ``needs_approval`` is True/False, ``"callable:<module.qualname>"`` for a per-call
    policy, ``"n/a"`` for a hosted tool; ``function`` is the identity of the Python function the
    tool runs (:func:`workflow.effect.function_identity`). Instructions given as a function are
    fingerprinted by its ``module.qualname``.
    """
    from agents import FunctionTool

    tools: dict[str, dict[str, Any]] = {}
    for position, tool in enumerate(reachable_tools(agent)):  # a handoff's agent's tools after its own
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


def same_code(saved: Any, current: Any) -> bool:
    """Whether two ``module.qualname`` identities (:func:`workflow.effect.function_identity`) name
    the same code. Equal strings do; so does a pair where one side was defined in the script
    Python ran (module ``__main__``: ``python pay.py``) and the other side's qualname is the same
    (the same file imported, ``pay.charge_card``): a task started by running a module and decided
    from code that imports it is the same declaration. Any other difference (another qualname,
    another module that is not ``__main__``) is not the same code."""
    if saved == current:
        return True
    if not (isinstance(saved, str) and isinstance(current, str)):
        return False
    for script, other in ((saved, current), (current, saved)):
        if script.startswith("__main__.") and other.endswith(script[len("__main__"):]):
            return True
    return False


def same_rule(saved: Any, current: Any) -> bool:
    """Whether two saved ``needs_approval`` values (True/False, ``"n/a"`` or
    ``"callable:<module.qualname>"``) are the same rule: equal, or two callables whose identities
    are the same code (:func:`same_code`)."""
    prefix = "callable:"
    if isinstance(saved, str) and isinstance(current, str) and saved.startswith(prefix) \
            and current.startswith(prefix):
        return same_code(saved[len(prefix):], current[len(prefix):])
    return saved == current


_FIELDS = ("position", "description_sha256", "schema_sha256", "needs_approval", "function")


def drift(saved: dict[str, Any], current: dict[str, Any],
          compatible: Mapping[str, Any] | None = None) -> list[str]:
    """What changed between two :func:`describe` results, as short phrases (empty: no drift).
    A saved fingerprint whose canonical-JSON SHA-256 is a key of ``compatible`` (the
    application's ``compatible_saved``: fingerprints its code resumes safely) is no drift.

    A tool's function or approval rule saved as defined in ``__main__`` and now imported from its
    module (or the other way round) is the same code (:func:`same_code`), not drift.

    A saved fingerprint of an older shape (tools without ``position``/``description_sha256``/
    ``function``) is reported as drift (``tool 'x' fingerprint is of an older format``), never a
    crash.
    """
    if sha256_hex(canonical_json(saved)) in (compatible or {}):
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
            if not same_code(old["function"], new["function"]):
                changes.append(f"tool {name!r} function changed ({old['function']} -> {new['function']})")
            if not same_rule(old["needs_approval"], new["needs_approval"]):
                changes.append(f"tool {name!r} needs_approval {old['needs_approval']!r} -> "
                               f"{new['needs_approval']!r}")
    common = [n for n in old_tools if n in current["tools"]]
    if all(isinstance(old_tools[n], dict) and isinstance(old_tools[n].get("position"), int) for n in common):
        common.sort(key=lambda n: old_tools[n]["position"])  # the saved order, by explicit position
    if common != [n for n in current["tools"] if n in old_tools]:
        changes.append("tool order changed")
    return changes
