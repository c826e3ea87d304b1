"""The task's budget: turns, tokens and dollars, for the whole task across start and every resume.

Where the numbers come from (no double counting): the SDK keeps the running usage in the run
context (``RunContextWrapper.usage``, one ``request_usage_entries`` item per model request) and the
turn counter in the RunState; ``RunState.to_string()`` saves both and ``RunState.from_string``
restores them. So the spend of a task is always read from the SDK (live during a run, from the
saved RunState between runs), never summed by us on the side.

How the budget is enforced, with SDK hooks only (no SDK code forked):

- **turns**: the SDK's own ``max_turns`` (``Runner.run(..., max_turns=N)`` at start; it is saved
  in the RunState and the SDK keeps counting across resumes). Raising it on resume sets the
  restored RunState's ``_max_turns`` (:func:`apply_max_turns`; the SDK has no public setter).
- **before each model call**: :class:`BudgetGuard` is a ``RunHooks`` whose ``on_llm_start`` runs
  after the SDK resolved the call and before it is sent. It reads the live usage, and if the
  budget cannot pay for one more call it raises :class:`BudgetExceeded`, so the call is not made.
- **output cap**: :class:`BudgetedModel` wraps the SDK model and sets ``ModelSettings.max_tokens``
  (Responses ``max_output_tokens``, Chat Completions ``max_tokens``) to what remains: tokens left,
  and dollars left divided by the output price.
- **before a resume** (:func:`blocked`): if the saved spend already leaves no room for the next
  call, the resume does not start, so an approved tool never runs ahead of a call that cannot be
  paid for (the tool runs before the call that follows it).

A budget can be overshot by the input tokens of the last call made (input size is known only
after the call); the output cap bounds the rest.

Prices: the ``genai-prices`` library (``calc_price``), per request; or an explicit price
(``price_per_mtok``: USD per million input and output tokens). A model it cannot price has no
cost budget unless one is asked for with an explicit price (:func:`make_budget` refuses otherwise).
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any, Callable

from agents import ModelSettings, RunContextWrapper, RunHooks
from agents.models.interface import Model

from workflow.models import MalformedResponse
from state.errors import Next, Refused
from state.fileio import parse_shared
from state.schema import (
    MIN_OUTPUT_TOKENS,
    Budget,
    ModelSpec,
    Spend,
)
from workflow.observe.budget_view import spent_line


class BudgetExceeded(Exception):
    """The budget cannot pay for the next model call; ``str(exc)`` is one line saying what was
    spent of what. Raised by :class:`BudgetGuard` before the call is sent."""


# -- prices ----------------------------------------------------------------------------------------


class Pricing:
    """Prices one model request from its token counts (USD). ``None`` from :meth:`cost` means the
    model cannot be priced. Sources: explicit per-MTok prices, 0 for the offline model, else
    ``genai_prices.calc_price`` (provider ``openai`` for OpenAI's API, else looked up by base URL).
    """

    def __init__(self, spec: ModelSpec, budget: Budget) -> None:
        self.spec = spec
        self.explicit = (
            (budget.price_in_per_mtok, budget.price_out_per_mtok)
            if budget.price_in_per_mtok is not None and budget.price_out_per_mtok is not None
            else None
        )

    def cost(self, input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> float | None:
        """USD for one request, or None if this model has no known price."""
        if self.spec.api == "offline":
            return 0.0
        if self.explicit is not None:
            p_in, p_out = self.explicit
            return (input_tokens * p_in + output_tokens * p_out) / 1_000_000
        from genai_prices import Usage, calc_price

        try:
            calc = calc_price(
                Usage(input_tokens=input_tokens, output_tokens=output_tokens,
                      cache_read_tokens=cached_tokens),
                self.spec.name,
                **self._provider(),
            )
        except LookupError:
            return None
        return float(calc.total_price)

    def output_price_per_mtok(self) -> Decimal | None:
        """USD per million output tokens, as a Decimal (None if unpriced)."""
        one_m = self.cost(0, 1_000_000)
        return None if one_m is None else Decimal(str(one_m))

    def _provider(self) -> dict[str, str]:
        url = self.spec.base_url or ""
        if not url or "api.openai.com" in url:
            return {"provider_id": "openai"}
        return {"provider_api_url": url}


def make_budget(
    spec: ModelSpec,
    *,
    max_turns: int | None = None,
    max_tokens: int | None = None,
    max_cost_usd: float | None = None,
    price_per_mtok: tuple[float, float] | None = None,
    base: Budget | None = None,
) -> Budget:
    """The budget for a task: ``base`` (or the defaults) with the given values replaced.

    A model that cannot be priced gets no cost budget (``max_cost_usd`` None) unless one is asked
    for; a priced one keeps ``base``'s or the default (``state.schema.DEFAULT_MAX_COST_USD``). Raises
    :class:`Refused` if a cost budget is asked for a model ``genai-prices`` cannot price and no
    ``price_per_mtok`` is given (refuse rather than guess).
    """
    data = (base or Budget()).model_dump()
    if price_per_mtok is not None:
        data["price_in_per_mtok"], data["price_out_per_mtok"] = price_per_mtok
    for name, value in (("max_turns", max_turns), ("max_tokens", max_tokens),
                        ("max_cost_usd", max_cost_usd)):
        if value is not None:
            data[name] = value
    priced = Pricing(spec, Budget.model_validate(data)).cost(1, 1) is not None
    if not priced:
        if max_cost_usd is not None:
            raise Refused("budget", [
                f"genai-prices has no price for model {spec.name!r}"
                f"{' at ' + spec.base_url if spec.base_url else ''}; a cost budget needs",
                Next("price_flag"), " (USD per million input,output tokens)"])
        data["max_cost_usd"] = None
    return Budget.model_validate(data)


# -- spend -----------------------------------------------------------------------------------------


def spend_from_usage(usage: Any, turns: int, pricing: Pricing) -> Spend:
    """A :class:`Spend` from the SDK's ``Usage`` (object or its serialized dict) and turn count."""
    get = (lambda o, k: o.get(k)) if isinstance(usage, dict) else getattr  # noqa: E731
    entries = get(usage, "request_usage_entries") or []
    cost: float | None = 0.0
    parts = entries if entries else ([usage] if (get(usage, "total_tokens") or 0) > 0 else [])
    for part in parts:
        details = get(part, "input_tokens_details")
        if isinstance(details, list):  # older serialized snapshots
            details = details[0] if details else None
        cached = (details.get("cached_tokens") if isinstance(details, dict)
                  else getattr(details, "cached_tokens", 0)) or 0
        c = pricing.cost(get(part, "input_tokens") or 0, get(part, "output_tokens") or 0, cached)
        cost = None if (c is None or cost is None) else cost + c
    return Spend(
        turns=turns,
        requests=get(usage, "requests") or 0,
        input_tokens=get(usage, "input_tokens") or 0,
        output_tokens=get(usage, "output_tokens") or 0,
        total_tokens=get(usage, "total_tokens") or 0,
        cost_usd=None if cost is None else round(cost, 8),
    )


def spend_from_run_state(run_state: str, pricing: Pricing) -> Spend:
    """The spend recorded in a serialized RunState (``context.usage`` and ``current_turn``)."""
    data = parse_shared(run_state)  # read only: shared with the other readers of this text
    usage = (data.get("context") or {}).get("usage") or {}
    return spend_from_usage(usage, int(data.get("current_turn") or 0), pricing)


def output_cap(budget: Budget, spend: Spend, pricing: Pricing) -> int:
    """Output tokens the next call may produce; raises :class:`BudgetExceeded` if fewer than
    :data:`MIN_OUTPUT_TOKENS` (the smallest cap the Responses API accepts) remain."""
    cap = budget.max_tokens - spend.total_tokens
    if budget.max_cost_usd is not None:
        price = pricing.output_price_per_mtok()
        if spend.cost_usd is None or price is None:
            raise BudgetExceeded(f"budget exceeded: the spend cannot be priced; {spent_line(budget, spend)}")
        left = Decimal(str(budget.max_cost_usd)) - Decimal(str(spend.cost_usd))
        if price > 0:
            cap = min(cap, int(left * 1_000_000 / price))
        elif left <= 0:
            cap = 0
    if cap < MIN_OUTPUT_TOKENS:
        raise BudgetExceeded(
            f"budget exceeded: {spent_line(budget, spend)} (the next call needs room for at least "
            f"{MIN_OUTPUT_TOKENS} output tokens)"
        )
    return cap


def blocked(budget: Budget, spend: Spend, pricing: Pricing) -> str | None:
    """Why the next turn cannot run (one line), or None. Used before a resume starts."""
    if spend.turns + 1 > budget.max_turns:
        return f"budget exceeded: {spent_line(budget, spend)}"
    try:
        output_cap(budget, spend, pricing)
    except BudgetExceeded as exc:
        return str(exc)
    return None


def apply_max_turns(state: Any, budget: Budget) -> None:
    """Make a restored ``RunState`` use ``budget.max_turns`` (the SDK reads ``_max_turns`` on resume
    and offers no public setter; ``tests/test_real_model_http.py`` pins this)."""
    state._max_turns = budget.max_turns


# -- the hooks -------------------------------------------------------------------------------------


class BudgetGuard(RunHooks[Any]):
    """``RunHooks`` that stop a model call the budget cannot pay for, and compute its output cap.

    Pass as ``Runner.run(..., hooks=guard)`` and wrap the model with :class:`BudgetedModel`.
    ``on_llm_start`` (SDK: called after the request is built, before it is sent) raises
    :class:`BudgetExceeded`; :attr:`cap` is then read by the model wrapper for the same call.
    ``on_turn(context, agent, response)``, if given, is called from ``on_llm_end`` (SDK: with the
    agent whose turn it was and its ``ModelResponse``, before any tool of that turn runs) and may
    raise to stop the run there (``workflow.guards.check_start_turn``).
    """

    def __init__(self, budget: Budget, pricing: Pricing,
                 on_turn: Callable[[RunContextWrapper[Any], Any, Any], None] | None = None) -> None:
        self.budget = budget
        self.pricing = pricing
        self.on_turn = on_turn
        self.cap: int | None = None
        self.caps: list[int] = []  # every cap applied in this process, in order (for the CLI/tests)

    async def on_llm_end(self, context: RunContextWrapper[Any], agent: Any, response: Any) -> None:
        if self.on_turn is not None:
            self.on_turn(context, agent, response)

    async def on_llm_start(self, context: RunContextWrapper[Any], agent: Any,
                           system_prompt: str | None, input_items: list[Any]) -> None:
        spend = spend_from_usage(context.usage, 0, self.pricing)
        self.cap = output_cap(self.budget, spend, self.pricing)
        self.caps.append(self.cap)


class BudgetedModel(Model):
    """An SDK ``Model`` that forwards every call to ``inner`` with ``max_tokens`` capped to
    ``guard.cap`` (never raised above a cap already in the model settings)."""

    def __init__(self, inner: Model, guard: BudgetGuard) -> None:
        self.inner = inner
        self.guard = guard

    def _settings(self, settings: ModelSettings) -> ModelSettings:
        cap = self.guard.cap
        if cap is None:
            return settings
        if settings.max_tokens is not None:
            cap = min(cap, settings.max_tokens)
        return dataclasses.replace(settings, max_tokens=cap)

    async def get_response(self, system_instructions: Any, input: Any, model_settings: ModelSettings,
                           *args: Any, **kwargs: Any) -> Any:
        """``inner.get_response`` with the capped settings. A response the SDK cannot read
        (``AttributeError``/``TypeError``/``KeyError``/``ValueError`` from inside the model call)
        is re-raised as :class:`workflow.models.MalformedResponse`."""
        try:
            return await self.inner.get_response(system_instructions, input,
                                                 self._settings(model_settings), *args, **kwargs)
        except (AttributeError, TypeError, KeyError, ValueError) as exc:
            raise MalformedResponse(f"{type(exc).__name__}: {exc}") from exc

    def stream_response(self, system_instructions: Any, input: Any, model_settings: ModelSettings,
                        *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        """``inner.stream_response`` with the capped settings."""
        return self.inner.stream_response(system_instructions, input,
                                          self._settings(model_settings), *args, **kwargs)

    def get_retry_advice(self, request: Any) -> Any:
        """The inner model's retry advice."""
        return self.inner.get_retry_advice(request)

    async def close(self) -> None:
        """Close the inner model."""
        await self.inner.close()


__all__ = [
    "BudgetExceeded", "BudgetGuard", "BudgetedModel", "Pricing", "apply_max_turns", "blocked",
    "make_budget", "output_cap", "spend_from_run_state", "spend_from_usage",
]
