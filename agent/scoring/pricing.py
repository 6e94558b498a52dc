"""Cost of a cell from its recorded token usage and a price table the caller passes in (JSON or YAML).

Why a file and not constants: prices change and differ by gateway; a report must say which table it used.
Table shape: {"models": {"<model>": {"input_per_mtok": 3.0, "output_per_mtok": 15.0,
"cache_read_per_mtok": 0.3, "cache_creation_per_mtok": 3.75}}, "currency": "USD"} (a bare mapping of models is
accepted too). Usage follows the record's convention: input_tokens INCLUDES cache reads and writes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


class PriceTableError(ValueError):
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


def load_price_table(path: Path) -> PriceTable:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        doc = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError) as e:
        raise PriceTableError(f"{path}: cannot read the price table: {e}") from e
    if not isinstance(doc, dict):
        raise PriceTableError(f"{path}: expected a mapping of models to prices")
    models = doc.get("models", doc)
    prices: dict[str, Price] = {}
    for model, p in models.items():
        if model == "currency":
            continue
        if not isinstance(p, dict) or "input_per_mtok" not in p or "output_per_mtok" not in p:
            raise PriceTableError(f"{path}: model {model!r} needs input_per_mtok and output_per_mtok, got {p!r}")
        vals = {k: (float(v) if v is not None else None) for k, v in p.items()
                if k in ("input_per_mtok", "output_per_mtok", "cache_read_per_mtok", "cache_creation_per_mtok")}
        if any(v is not None and v < 0 for v in vals.values()):
            raise PriceTableError(f"{path}: model {model!r} has a negative rate")
        prices[str(model)] = Price(**vals)
    return PriceTable(prices, str(doc.get("currency", "USD")), str(path))
