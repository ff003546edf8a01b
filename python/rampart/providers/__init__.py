"""Providers: one module per model API, each owning its wire form.

A provider module holds what is particular to one API: how a tool is declared on
its wire (and read back), how a request body is built from a compile result, its
limits (minimum cacheable prefix) and its prompt-cache prices, with their sources.
It takes plain values (dicts, strings, a compile result's public methods) and
imports nothing above it in the package, so the tool parser, the price tables and
the adapters can all use it. The table below maps names to modules: adding a
provider is one module and one row (docs/design.md).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from rampart.errors import InvalidArgumentError

__all__ = ["PROVIDERS", "golden_bodies", "provider", "provider_prices"]

#: Provider name -> its module (imported on first use: ``import rampart`` pays nothing).
PROVIDERS: dict[str, str] = {
    "openai": "rampart.providers.openai",
    "anthropic": "rampart.providers.anthropic",
    "gemini": "rampart.providers.gemini",
}


def provider(name: str) -> ModuleType:
    """The module of provider ``name`` (see :data:`PROVIDERS`)."""
    module = PROVIDERS.get(name) if isinstance(name, str) else None
    if module is None:
        raise InvalidArgumentError(
            f"unknown provider {name!r}; known: {', '.join(sorted(PROVIDERS))}"
        )
    return importlib.import_module(module)


def provider_prices() -> list[tuple[str, dict[str, Any]]]:
    """Every provider's price rows (``PRICES``: name -> ``PriceTable`` fields),
    in table order, for :data:`rampart.pricing.PRICES`."""
    return [(n, row) for p in PROVIDERS for n, row in provider(p).PRICES.items()]


def golden_bodies() -> list[str]:
    """The adapters whose bodies the pytest plugin snapshots by default: each
    provider's ``GOLDEN_BODY`` (None: its body needs arguments, e.g. a model)."""
    return [b for p in PROVIDERS if (b := getattr(provider(p), "GOLDEN_BODY", None))]
