"""The shift matrix's tuning table (:mod:`.report`): per method the configurations tried, the tuning's
CPU-seconds, its cost columns (one training run's CPU-seconds and the bytes a round sends per client,
:mod:`.costs`) and the grid-edge rate (the share of (column, seed) cells whose chosen value lies on an edge of its
grid), flagged above :data:`EDGE_FLAG`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from fedshift.papers.shift_matrix import costs

__all__ = ["EDGE_FLAG", "edges", "on_edge", "tuning", "tuning_markdown"]

#: Grid-edge rate above which a method's row is flagged "grid too narrow" (its best
#: settings lie on the grid's edge more often than not: the range, not the method, may decide its score).
EDGE_FLAG = 0.5


def _number(v: Any) -> float | None:
    """A grid setting's value as a number (a list value, FedMM's μ pair, by its first entry), else None."""
    v = v[0] if isinstance(v, list | tuple) and v else v
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def edges(value: Mapping[str, Any], grid: list[Mapping[str, Any]]) -> dict[str, str]:
    """The keys of ``value`` that lie on an edge of ``grid``: key → ``"low"`` or ``"high"`` (its value the smallest
    or the largest of the at least two distinct numeric values the grid gives that key)."""
    out = {}
    for key, v in value.items():
        x = _number(v)
        values = {_number(g[key]) for g in grid if key in g} - {None}
        if x is not None and len(values) >= 2 and x in (min(values), max(values)):
            out[key] = "low" if x == min(values) else "high"
    return out


def on_edge(value: Mapping[str, Any], grid: list[Mapping[str, Any]]) -> bool:
    """Whether the grid value ``value`` lies on an edge of ``grid`` (:func:`edges`: some key at its smallest or
    largest value)."""
    return bool(edges(value, grid))


def tuning(metrics: pd.DataFrame, chosen: pd.DataFrame, params: Mapping[str, Any]) -> pd.DataFrame:
    """Per algorithm: configurations tried, tuning CPU-seconds, grid-edge rate and its flag.

    ``configurations``: its grid's size (``params["grids"]``); ``cpu_seconds``: the ``role: tuning`` rows summed
    over its cells and seeds (this model's matrix); ``edge_rate``: the share of its (column, seed) cells whose
    chosen value lies on an edge of the grid (:func:`on_edge`), ``flag`` "grid too narrow" above
    :data:`EDGE_FLAG`; ``edges``: per key and side the share of cells chosen there (``"mu low 0.60"``: which way a
    grid would be widened). A value chosen at random from a grid of 3 values per key lies on an edge of one key
    with probability 2/3, of a 3 × 3 grid with 8/9: the rate is read against that, and the sides say more.
    ``training_cpu_seconds``: one run of the full budget per cell and seed, summed; ``bytes_per_round``: down + up
    per sampled client, the largest over its shifts (:func:`.costs.cell_costs`, :func:`.costs.per_method`).

    Returns
    -------
    DataFrame
        ``algorithm, configurations, cpu_seconds, training_cpu_seconds, bytes_per_round, cells, edge_rate, flag,
        edges`` in the order of ``params["algorithms"]``.
    """
    cost = metrics[metrics["role"] == "tuning"] if "role" in metrics else metrics.iloc[:0]
    spent = costs.per_method(costs.cell_costs(metrics, params), list(params["algorithms"]))
    rows = []
    for alg in params["algorithms"]:
        grid = list(params["grids"].get(alg, []))
        mine = chosen[(chosen["algorithm"] == alg) & chosen["validation"].notna()]
        hits = [edges(grid[g], grid) for g in mine["grid"] if 0 <= g < len(grid)]
        rate = float(np.mean([bool(h) for h in hits])) if hits else np.nan
        sides = pd.Series([f"{k} {side}" for h in hits for k, side in h.items()]).value_counts()
        where = ", ".join(f"{k} {n / len(hits):.2f}" for k, n in sorted(sides.items(), key=lambda kv: (-kv[1], kv[0])))
        seconds = float(cost.loc[cost["algorithm"] == alg, "value"].sum()) if len(cost) else np.nan
        rows.append({"algorithm": alg, "configurations": len(grid), "cpu_seconds": seconds,
                     "training_cpu_seconds": spent.loc[alg, "training_cpu_seconds"],
                     "bytes_per_round": spent.loc[alg, "bytes_per_round"], "cells": len(hits),
                     "edge_rate": rate, "flag": "grid too narrow" if rate > EDGE_FLAG else "", "edges": where})
    return pd.DataFrame(rows, columns=["algorithm", "configurations", "cpu_seconds", "training_cpu_seconds",
                                       "bytes_per_round", "cells", "edge_rate", "flag", "edges"])


def tuning_markdown(tab: pd.DataFrame, params: Mapping[str, Any]) -> str:
    """The tuning table (:func:`tuning`) as a Markdown section."""
    if tab.empty:
        return ""
    t = tab.rename(columns={"configurations": "configs", "cpu_seconds": "tuning CPU-s",
                            "training_cpu_seconds": "training CPU-s", "bytes_per_round": "kB per round",
                            "cells": "cells", "edge_rate": "grid-edge rate"})
    t["tuning CPU-s"] = [f"{v:.0f}" if np.isfinite(v) else "—" for v in tab["cpu_seconds"]]
    t["training CPU-s"] = [f"{v:.0f}" if np.isfinite(v) else "—" for v in tab["training_cpu_seconds"]]
    t["kB per round"] = [f"{v / 1000:.1f}" if np.isfinite(v) else "—" for v in tab["bytes_per_round"]]
    t["grid-edge rate"] = [f"{v:.2f}" if np.isfinite(v) else "—" for v in tab["edge_rate"]]
    return ("\nTuning on validation and cost: per method the configurations of its grid (configs), the CPU-seconds of "
            "their tuning (every cell and seed of this model), of one training run of the full budget R (the "
            "tuning's CPU-seconds per round trained × R, every cell and seed), the kilobytes one round sends per "
            "sampled client (downlink + uplink, float32, the arrays its algorithm sends of the size of the network "
            "it trains; — where undeclared), the (column, seed) cells it was tuned in, the share of them "
            f"whose chosen value lies on an edge of its grid (\"grid too narrow\" above {EDGE_FLAG:g}; chance on a "
            "3 × 3 grid: 8/9) and, per key and side, the share of cells chosen at that edge.\n\n"
            + t.to_markdown(index=False) + "\n")
