"""Text for a task's model, budget and spend. Never imports the SDK (``status`` stays fast)."""

from __future__ import annotations

from state.schema import Budget, ModelSpec, Spend


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
