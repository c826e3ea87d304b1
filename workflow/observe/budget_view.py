"""Text for a task's model, budget and spend. Never imports the SDK (``status`` stays fast)."""

from __future__ import annotations

from state.schema import Budget, Checkpoint, ModelSpec, Spend
from state.terminal import command


def _usd(value: float) -> str:
    """``$0.05``, ``$0.0002``, ``$0.00001``, ``$12.50``: as many decimals as a small value needs."""
    if value >= 1:
        return f"${value:,.2f}"
    text = f"{value:.8f}".rstrip("0")
    decimals = len(text.split(".")[1])
    return f"${value:.{max(2, decimals)}f}"


def spent_line(budget: Budget, spend: Spend) -> str:
    """``"spent 2 of 6 turns, 812 of 20,000 tokens, $0.0005 of $0.0500"`` (what was spent of what)."""
    parts = [
        f"{spend.turns} of {budget.max_turns} turns",
        f"{spend.total_tokens:,} of {budget.max_tokens:,} tokens",
    ]
    if spend.cost_usd is None:
        parts.append("cost not priced")
    elif budget.max_cost_usd is None:
        parts.append(f"{_usd(spend.cost_usd)} (no cost budget)")
    else:
        parts.append(f"{_usd(spend.cost_usd)} of {_usd(budget.max_cost_usd)}")
    return "spent " + ", ".join(parts)


def model_line(spec: ModelSpec) -> str:
    """``"gpt-4.1-mini (responses API, https://api.openai.com/v1/)"`` or ``"offline (scripted, no network)"``."""
    if spec.api == "offline":
        return "offline (scripted, no network, no bill)"
    return f"{spec.name} ({spec.api} API, {spec.base_url or 'default base URL'})"


def budget_lines(cp: Checkpoint) -> list[str]:
    """The text lines ``start``/``resume``/``status`` add for one task (model, then budget)."""
    lines = [f"  model: {model_line(cp.model)}", f"  budget: {spent_line(cp.budget, cp.spend)}"]
    if cp.status == "budget_exceeded":
        stops = [e for e in cp.history if e.event == "budget_exceeded"]
        why = stops[-1].detail.get("why") if stops else None
        if isinstance(why, str):
            lines[-1] = f"  {why}"
        lines.append(
            f"  next: raise the budget, e.g. {command('resume', '--task', cp.task_id)} --decision "
            f"approve|reject {_raise_hint(cp)}"
        )
    return lines


def _raise_hint(cp: Checkpoint) -> str:
    """The flag to raise for the limit that was reached (turns, then cost, then tokens)."""
    budget, spend = cp.budget, cp.spend
    if spend.turns >= budget.max_turns:
        return f"--max-turns {budget.max_turns + 2} (or --max-tokens, --max-cost-usd)"
    if budget.max_cost_usd is not None and (spend.cost_usd or 0) >= budget.max_cost_usd * 0.9:
        return f"--max-cost-usd {budget.max_cost_usd * 2:g} (or --max-turns, --max-tokens)"
    return f"--max-tokens {budget.max_tokens * 2} (or --max-turns, --max-cost-usd)"
