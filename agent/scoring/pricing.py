"""Cost of a cell from its recorded token usage and a price table the caller passes in (JSON or YAML).

Why a file and not constants: prices change and differ by gateway; a report must say which table it used.
Table shape: {"models": {"<model>": {"input_per_mtok": 3.0, "output_per_mtok": 15.0,
"cache_read_per_mtok": 0.3, "cache_creation_per_mtok": 3.75}}, "currency": "USD"} (a bare mapping of models is
accepted too). Usage follows the record's convention: input_tokens INCLUDES cache reads and writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, NonNegativeFloat

from firmware_bridge.model_file import ModelFileError, read_data_file, validate_model


class PriceTableError(ModelFileError):
    """A price table that cannot be read, or a model price with a missing or negative rate."""


@dataclass(frozen=True)
class Price:
    input_per_mtok: float
    output_per_mtok: float
    cache_read_per_mtok: float | None = None
    cache_creation_per_mtok: float | None = None


@dataclass(frozen=True)
class PriceTable:
    prices: dict[str, Price]
    currency: str = "USD"
    source: str = ""

    def price_for(self, model: str) -> Price | None:
        if model in self.prices:
            return self.prices[model]
        bare = model.split(":", 1)[-1].split("#")[-1]
        return self.prices.get(bare)

    def cost(self, model: str, usage: dict[str, Any]) -> float | None:
        """Cost of one cell's usage, or None when the model has no price in the table or a count the price
        needs was not reported (a cost from a guessed 0 would look exact and be wrong)."""
        p = self.price_for(model)
        if p is None or not usage:
            return None
        counts = {k: usage.get(k) for k in ("input_tokens", "output_tokens")}
        if any(v is None for v in counts.values()):
            return None
        inp, out = int(counts["input_tokens"]), int(counts["output_tokens"])
        read, write = usage.get("cache_read_input_tokens"), usage.get("cache_creation_input_tokens")
        if (read is None and p.cache_read_per_mtok is not None) or (
                write is None and p.cache_creation_per_mtok is not None):
            return None  # the split between fresh and cached input decides the price, and it is unknown
        read, write = int(read or 0), int(write or 0)
        fresh = max(inp - read - write, 0)
        cost = fresh * p.input_per_mtok + out * p.output_per_mtok
        cost += read * (p.cache_read_per_mtok if p.cache_read_per_mtok is not None else p.input_per_mtok)
        cost += write * (p.cache_creation_per_mtok if p.cache_creation_per_mtok is not None else p.input_per_mtok)
        return cost / 1e6


class _Rates(BaseModel):
    """One model's rates as the file states them (keys other than the four rates are ignored)."""

    model_config = ConfigDict(extra="ignore")

    input_per_mtok: NonNegativeFloat
    output_per_mtok: NonNegativeFloat
    cache_read_per_mtok: NonNegativeFloat | None = None
    cache_creation_per_mtok: NonNegativeFloat | None = None


class PriceTableFile(BaseModel):
    """The file's shape: `models` (model name → rates) and a `currency`; other top-level keys are ignored."""

    model_config = ConfigDict(extra="ignore")

    models: dict[str, _Rates]
    currency: str = "USD"


def load_price_table(path: Path) -> PriceTable:
    """Read a price table (JSON by suffix, YAML otherwise) through the one configuration-file loader; a bare
    mapping of models (with an optional `currency`) is read as `models:`. PriceTableError names the file, the
    model's field, what was expected and what arrived."""
    path = Path(path)
    doc = read_data_file(path, what="price table", error=PriceTableError)
    if isinstance(doc, dict) and isinstance(doc.get("models"), dict):
        doc = {**doc, "models": {k: v for k, v in (doc["models"] or {}).items() if k != "currency"}}
    elif isinstance(doc, dict) and "models" not in doc:
        doc = {"models": {k: v for k, v in doc.items() if k != "currency"}, "currency": doc.get("currency", "USD")}
    table = validate_model(doc, PriceTableFile, source=f"price table {path}", error=PriceTableError)
    prices = {str(model): Price(**rates.model_dump()) for model, rates in table.models.items()}
    return PriceTable(prices, str(table.currency), str(path))
