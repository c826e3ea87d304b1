"""Which tools have an effect (and so must never run without a human's approval).

A tool is *effectful* when the Python function behind it was registered here with
:func:`effectful` (``tools.publish`` registers ``publish_draft``). The registry holds the
function's identity (``module.qualname``, read from the SDK's ``FunctionTool.__wrapped__``, the
callable passed to ``@function_tool``), so a copy of the tool under another name or with another
``needs_approval`` is still recognised. ``workflow.agent_check.check_agent`` refuses an agent whose
effectful tool has ``needs_approval=False``.
"""

from __future__ import annotations

from typing import Any

_EFFECTFUL: set[str] = set()


def function_identity(tool: Any) -> str:
    """``module.qualname`` of the Python function a ``FunctionTool`` runs.

    From ``tool.__wrapped__`` (SDK 0.24: the callable given to ``function_tool``; raises
    ``AttributeError`` for a tool not made by it or whose invoker was replaced); otherwise the
    identity of ``tool.on_invoke_tool`` (its function, or its class for a callable object).
    ``""`` for a tool with neither (hosted tools).
    """
    try:
        func = tool.__wrapped__
    except AttributeError:
        func = getattr(tool, "on_invoke_tool", None)
        if func is None:
            return ""
    target = func if hasattr(func, "__qualname__") else type(func)
    return f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', '?')}"


def effectful(tool: Any) -> Any:
    """Register ``tool`` (a ``FunctionTool``) as having an effect; return it unchanged."""
    _EFFECTFUL.add(function_identity(tool))
    return tool


def is_effectful(tool: Any) -> bool:
    """True if the function behind ``tool`` was registered with :func:`effectful`."""
    ident = function_identity(tool)
    return bool(ident) and ident in _EFFECTFUL
