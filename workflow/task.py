"""The one shape of a task the public API returns: :class:`Task`, frozen.

``start``, ``decide``, ``settle``, ``fail`` and ``read_task`` all return it (the engine keeps its
signed :class:`state.schema.Checkpoint` to itself). ``Task.to_json()`` is exactly the task JSON the
command line prints (``run.py status --task ID --json``, docs/commands.md). Never imports the SDK.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Optional

if TYPE_CHECKING:
    from state.schema import Checkpoint
    from state.store import TaskStore


class ReadOnlyDict(dict):  # type: ignore[type-arg]
    """A ``dict`` no one can change (every mutating method raises ``TypeError``): read-only like
    a ``MappingProxyType``, and still a ``dict`` to ``json.dumps`` and ``isinstance``."""

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("a Task is read-only: build a new value, e.g. dict(task.pending[0])")

    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse


def _frozen(value: Any) -> Any:
    """``value`` (plain JSON) read-only: each object a :class:`ReadOnlyDict`, each array a tuple."""
    if isinstance(value, dict):
        return ReadOnlyDict({k: _frozen(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value


@dataclass(frozen=True)
class Task:
    """Where a task stands, as one frozen value.

    - ``task_id`` (also the idempotency key of its effect; ``<task_id>#<channel>`` with several
      channels) and ``channels`` (a tuple);
    - ``status``: as a person sees it (``waiting_for_approval``, ``completed``, ``cancelled``,
      ``expired``, ``failed``, ``budget_exceeded``; for an effect through a service also
      ``publishing`` or ``in_doubt`` while it is not confirmed);
    - ``pending``: the calls waiting for a human, each a read-only mapping ``{"call_id", "tool",
      "arguments", "approvals"}`` (``approvals``: the reviewers counted so far toward the call's
      quorum, oldest first; empty outside team mode);
    - ``decisions``: every decision on record, oldest first, each a read-only mapping (``decision``
      ``approved`` / ``approved_with_edits`` / ``rejected``, ``by``, ``at``, ``reason``,
      ``call_id``, ``tool``, ``channel``, ``always``, ``source``, …, as ``status --json``);
    - ``final_output``: the model's final output once the run ended (None before);
    - ``revision``: the checkpoint's revision (1, 2, …), what ``decide(expect_revision=…)`` takes;
    - ``failure``: why it ended ``failed`` (None otherwise);
    - ``model``: which model drives it, ``{"name", "api", "base_url"}`` (never a key);
    - ``budget`` (``{"max_turns", "max_tokens", "max_cost_usd"}``, the cost in US dollars) and
      ``spend`` (``{"turns", "requests", "input_tokens", "output_tokens", "total_tokens",
      "cost_usd"}``, ``cost_usd`` None if it cannot be priced): across start and every resume;
    - ``budget_stop``: while ``status`` is ``budget_exceeded``, which limit stopped it, in words
      (None otherwise);
    - ``team``: True if a decision on it must be authenticated (it was started in team mode, or
      the store has reviewers now).

    :meth:`to_json` returns a new dict equal to what ``run.py status --task ID --json`` prints.
    """

    task_id: str
    status: str
    channels: tuple[str, ...]
    pending: tuple[Mapping[str, Any], ...]
    decisions: tuple[Mapping[str, Any], ...]
    final_output: Optional[str]
    revision: int
    failure: Optional[str] = None
    model: Mapping[str, Any] = field(default_factory=lambda: ReadOnlyDict())
    budget: Mapping[str, Any] = field(default_factory=lambda: ReadOnlyDict())
    spend: Mapping[str, Any] = field(default_factory=lambda: ReadOnlyDict())
    budget_stop: Optional[str] = None
    team: bool = False
    _json: str = field(default="{}", repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        """The task JSON of the command line (docs/commands.md): a new dict each call."""
        return json.loads(self._json)

    @classmethod
    def of(cls, store: "TaskStore", cp: "Checkpoint") -> "Task":
        """The task of checkpoint ``cp`` (verified by whoever loaded it) in ``store``. Reads the
        reviewer list (``team``: :func:`workflow.team.needs_token`)."""
        from workflow.observe.views import task_view
        from workflow.team import approvals_of, needs_token

        view = task_view(store, cp)
        pending = [{**p, "approvals": [a.by for a in approvals_of(cp, p["call_id"])]} for p in view["pending"]]
        stop = None
        if cp.status == "budget_exceeded":
            stops = [e for e in cp.history if e.event == "budget_exceeded"]
            why = stops[-1].detail.get("why") if stops else None
            stop = why if isinstance(why, str) else None
        return cls(task_id=view["task_id"], status=view["status"], channels=tuple(view["channels"]),
                   pending=_frozen(pending), decisions=_frozen(view["decisions"]),
                   final_output=view["final_output"], revision=view["revision"], failure=view.get("failure"),
                   model=_frozen(cp.model.model_dump()), budget=_frozen(cp.budget.model_dump()),
                   spend=_frozen(cp.spend.model_dump()), budget_stop=stop, team=needs_token(store, cp),
                   _json=json.dumps(view, ensure_ascii=False))
