"""The public API of the human-in-the-loop engine: put its guarantees around any agent and tool.

Everything a caller needs is named in :data:`__all__` (docs/api.md shows each in a runnable
example); every other module is private to the library. The names are imported lazily (PEP 562
``__getattr__``): ``import workflow`` or ``import workflow.observe.views`` never imports the SDK
(about 2 s), so read-only commands stay fast; :func:`start` and :func:`decide` import it.

- declare the tool: :func:`effect_tool` (its function gets an :class:`Effect`);
- describe the agent: :class:`Application`;
- keep state: :func:`open_store` (a folder or a ``postgresql://`` URL), a :class:`TaskStore`;
- one door for a front end of your own (a command line, a web page): :class:`Engine`, built once
  from a store and an application, judges a decision before the lock and then decides it (what
  :func:`decide` does in one call);
- run: :func:`start` until the agent's call waits for a human, :func:`decide` with an
  :class:`Approve` or :class:`Reject`, :func:`read_task` to see where a task stands: each returns
  the same frozen :class:`Task`;
- an effect through a network service: ``effect_tool(service=Service(...))``, the function raising
  :class:`NotSent`, :class:`MayHaveActed` or :class:`Conflict`; :func:`settle` a call in doubt;
  :func:`fail` a task whose effect provably never ran;
- check the outcome, not the status: :func:`evaluate` grades each finished task's effect (ledger,
  service) and trajectory with code graders (docs/eval.md);
- every refusal raises :class:`Refused` (fail closed: nothing half-written).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # names for type checkers only: at run time they load on first use
    from state.errors import Refused
    from state.store import TaskStore
    from workflow.api import Approve, Reject, decide, fail, open_store, read_task, settle, start
    from workflow.application import Application
    from workflow.effect import Effect, effect_tool
    from workflow.engine import Engine
    from workflow.external import Conflict, MayHaveActed, NotSent, Service
    from workflow.ops.evaluate import evaluate
    from workflow.task import Task

__all__ = ["Application", "start", "decide", "Approve", "Reject", "read_task", "open_store",
           "effect_tool", "Effect", "Refused", "TaskStore", "Service", "NotSent", "MayHaveActed",
           "Conflict", "settle", "fail", "evaluate", "Task", "Engine"]

#: Public name -> the module that defines it, imported on first use (by name: importing this
#: package imports none of them, so ``import workflow.observe.views`` stays free of the SDK).
_HOME = {
    "Application": "workflow.application",
    "start": "workflow.api", "decide": "workflow.api", "Approve": "workflow.api",
    "Reject": "workflow.api", "read_task": "workflow.api", "open_store": "workflow.api",
    "effect_tool": "workflow.effect", "Effect": "workflow.effect",
    "Service": "workflow.external", "NotSent": "workflow.external", "MayHaveActed": "workflow.external",
    "Conflict": "workflow.external", "settle": "workflow.api", "fail": "workflow.api",
    "evaluate": "workflow.ops.evaluate", "Task": "workflow.task", "Engine": "workflow.engine",
    "Refused": "state.errors",
    "TaskStore": "state.store",
}


def __getattr__(name: str) -> Any:
    """PEP 562: load a public name from its module on first use."""
    if name not in _HOME:
        raise AttributeError(f"module 'workflow' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOME[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
