"""The application a task runs, as the engine sees it: the one value ``start`` and ``decide`` take.

The engine (``workflow/``) knows no agent of its own: whoever uses it passes an
:class:`Application`, built once (this repository's publisher: ``agent.application.APP``; another
program: its own agent and effectful tool, see ``examples/``). Everything specific to what the
agent does (its instructions, its tool's arguments, the text it is sent after a decision) lives
there; the engine keeps the checkpoint, the ledger and the decision table.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

if TYPE_CHECKING:
    from agents import Agent
    from agents.models.interface import Model

    from state.schema import ModelSpec


def default_edit_message(tool: str, content: dict[str, Any], channel: str | None) -> str:
    """What the model is told when a reviewer approved its call of ``tool`` only with edits (the
    call is answered with this text instead of running): call ``tool`` once more with exactly
    ``content`` (as JSON, keys sorted) and, when ``channel`` is given, that channel."""
    where = f' and "channel": "{channel}"' if channel else ""
    return (f"The reviewer approved this call only with edits, so it was not run: call {tool} once "
            f"more with exactly these arguments{where}: {json.dumps(content, sort_keys=True, ensure_ascii=False)}")


def default_rejection_text(args: Any) -> str | None:
    """The SDK's ``tool_error_formatter`` default: None, the SDK's own text for every error kind
    (a rejected call without a reason then reads the SDK's default rejection message)."""
    return None


@dataclass(frozen=True)
class Application:
    """The agent a task runs, as the engine needs it. Frozen; build it once per program.

    - ``build_agent(model) -> Agent``: ANY SDK agent around ``model`` (an SDK ``Model``, which the
      engine wraps for the budget, ``workflow.budget.BudgetedModel``). One or more of its tools
      are declared through the effect gate (:mod:`workflow.effect`); each task gates one of them,
      its ``action`` (``start`` refuses an agent with none). Called once per ``start`` and once
      per ``resume``, in the process that runs them.
    - ``offline_model() -> Model``: the model of a task whose :class:`state.schema.ModelSpec` is
      the offline one (``api == "offline"``); any other spec is a real model, built by
      :func:`workflow.models.build_model`.
    - ``edit_message(tool, content, channel) -> str``: what the model is told when a reviewer
      approves its call only with edits: ``tool`` the action's name, ``content`` the edited
      content (``{argument: value}``, without ``channel``), ``channel`` the one channel the new
      call must name, or None for a task with one channel (default: :func:`default_edit_message`).
    - ``rejection_text(args) -> str | None``: ``RunConfig.tool_error_formatter`` (SDK docs, "Custom
      rejection messages"): the run-wide text of a rejected call without a reason; None: the
      SDK's default (default: :func:`default_rejection_text`).
    - ``compatible_saved``: agent fingerprints saved by earlier versions of the application that
      today's code resumes safely (``{canonical-JSON SHA-256 of workflow.agent_check.describe: why}``);
      any other difference is drift (:func:`workflow.agent_check.drift`).
    - ``action``: the tool with an effect a task gates when ``start`` names none (None: the agent's
      first; :func:`workflow.agent_check.gated_tool`). In a task, a call of any other tool is never
      run (:func:`workflow.trust.only_action`).
    - ``content_labels``: how a refusal names each content argument (``{argument: words}``,
      default ``the <argument>``), e.g. ``the draft contains the value of OPENAI_API_KEY``.
    - ``command``: how a person runs this application's own command line, as typed (e.g.
      ``"python pay.py"``; one line, at most 200 characters), or None. Each task records it at
      start, and the next steps of ``python -m workflow doctor`` name it: ``decide task K again:
      approve (with the application's own command: python pay.py)``. Checked when the
      application is built (``ValueError``).
    """

    build_agent: Callable[["Model"], "Agent[Any]"]
    offline_model: Callable[[], "Model"]
    edit_message: Callable[[str, dict[str, Any], str | None], str] = default_edit_message
    rejection_text: Callable[[Any], str | None] = default_rejection_text
    compatible_saved: Mapping[str, Any] = field(default_factory=dict)
    action: str | None = None
    content_labels: Mapping[str, str] = field(default_factory=dict)
    command: str | None = None

    def __post_init__(self) -> None:
        if self.command is not None:
            from state.schema import MAX_COMMAND_CHARS, check_text

            if not isinstance(self.command, str) or not self.command.strip():
                raise ValueError("Application.command must be a non-empty string, e.g. 'python pay.py'")
            check_text(self.command, what="Application.command", limit=MAX_COMMAND_CHARS, single_line=True)

    def model(self, spec: "ModelSpec") -> "Model":
        """The model for ``spec``: :attr:`offline_model` for the offline spec, else the SDK's real
        model (:func:`workflow.models.build_model`; raises :class:`state.errors.Refused` if the API
        key is missing)."""
        from workflow.models import build_model

        return build_model(spec, offline=self.offline_model)

    def agent(self, spec: "ModelSpec | None", guard: Any, model: "Model | None" = None) -> "Agent[Any]":
        """:attr:`build_agent` around ``model`` (default: :meth:`model` of ``spec``; ``spec`` None:
        the offline model, for a decision that runs nothing and so needs no API key), wrapped by
        the budget's ``guard`` (``workflow.budget.BudgetedModel``)."""
        from workflow.budget import BudgetedModel

        chosen = model or (self.model(spec) if spec is not None else self.offline_model())
        return self.build_agent(BudgetedModel(chosen, guard))
