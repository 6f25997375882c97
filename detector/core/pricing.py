"""What a call cost: the span's own cost attribute, else the configured price table.

Pure. :class:`PriceBook` looks each model's price up once per configuration (the detector prices every scored
call, and reading the pydantic price table on every call is measurable); budgets' first-start seed and the
engine both price through it.
"""

from __future__ import annotations

from detector.core.models import Call

__all__ = ["ModelPrice", "PriceBook", "cost_at", "model_price"]

# (USD per million input tokens, per million output tokens) of one model; None: not priced
ModelPrice = tuple[float, float] | None


def model_price(model: str, prices: dict[str, tuple[float, float]]) -> ModelPrice:
    """The price table's entry for ``model``: its exact name, else the longest configured prefix (e.g. ``gpt-4o``
    for ``gpt-4o-2024-08-06``)."""
    price = prices.get(model)
    if price is None and model:
        prefixes = [m for m in prices if model.startswith(m)]
        if prefixes:
            price = prices[max(prefixes, key=len)]
    return price


def cost_at(call: Call, price: ModelPrice) -> float:
    if price is None:
        return 0.0
    return (call.input_tokens * price[0] + call.output_tokens * price[1]) / 1e6


class PriceBook:
    """The cost of calls under one configuration."""

    __slots__ = ("table", "_prices")

    def __init__(self, table: dict[str, tuple[float, float]]) -> None:
        self.table = table  # model -> USD per million input tokens, per million output tokens
        self._prices: dict[str, ModelPrice] = {}

    def cost(self, call: Call) -> float:
        """The span's own cost attribute when it has one, else its tokens at the model's configured price."""
        if call.cost_usd > 0:
            return call.cost_usd
        model = call.model
        if model in self._prices:
            price = self._prices[model]
        else:
            price = self._prices[model] = model_price(model, self.table)
        return cost_at(call, price)
