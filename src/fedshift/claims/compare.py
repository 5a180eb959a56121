"""A second run's verdicts beside the first's: the same claims again on another instruction set.

The second run shows which verdicts hang on floating-point rounding.

The second run is the same configuration at the same commit with the portable-CPU switch on (``--config
portable_cpu=True``: ATen's baseline kernels, oneDNN capped at SSE4.1, MKL's compatible path; README
"Reproducibility"), in its own results tree, so that every verdict is measured a second time with other rounding
rather than estimated by the √2-wider replication interval (:func:`fedshift.claims.replication_robust`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from fedshift.claims.verdicts import COMPUTED, DECIDED

__all__ = ["SECOND_COLUMNS", "compare_runs", "agreement_counts", "read_claims_csv"]

#: The second run's columns (:func:`compare_runs`), rendered where present.
SECOND_COLUMNS = ["second_verdict", "second_ours", "second_ci_low", "second_ci_high", "second_n", "second_machine",
                  "agreement"]
_TEXT = ("paper_value", "note", "paper_in_ci", "cpu_robust", "config", "machine", "direction", "effect",
         "second_verdict", "second_machine", "agreement", "multiplicity", "family", "same_as", "category", "proxy",
         "exploratory", "work")
_NUMBERS = ("ours", "ci_low", "ci_high", "claimed", "second_ours", "second_ci_low", "second_ci_high", "second_n",
            "se", "df", "p", "p_bh", "p_holm", "work_ratio")


def read_claims_csv(path: str | Path) -> pd.DataFrame:
    """A ``claims.csv`` as :func:`fedshift.claims.evaluate_claims` returned it (text columns text, numbers numbers).

    ``paper_value`` is a number where the file holds one, else its text; missing text cells are empty strings.
    """
    t = pd.read_csv(path, dtype={c: str for c in _TEXT}, keep_default_na=False,
                    na_values={c: ["", "nan", "NaN"] for c in _NUMBERS})

    def number_or_text(value: str) -> float | str:
        try:
            return float(value)
        except ValueError:
            return value

    t["paper_value"] = [number_or_text(v) for v in t["paper_value"]]
    return t


def compare_runs(first: pd.DataFrame, second: pd.DataFrame, machine: str = "") -> pd.DataFrame:
    """``first`` with the second run's verdict, value, interval, runs and machine beside each row.

    Parameters
    ----------
    first, second : DataFrame
        Two :func:`fedshift.claims.evaluate_claims` tables of the same claims (rows matched by ``claim``; a row
        the second run lacks, or does not compute, compares nothing).
    machine : str
        The second run's machine (default: its table's ``machine`` column).

    Returns
    -------
    DataFrame
        ``first``'s columns and :data:`SECOND_COLUMNS`: ``second_verdict`` (empty where
        the second run has no such row), ``second_ours``, ``second_ci_low``, ``second_ci_high``, ``second_n``,
        ``second_machine`` and ``agreement``: ``same`` or ``different`` where both runs computed a verdict
        (:data:`COMPUTED`), else empty.

    Raises
    ------
    ValueError
        If either table repeats a claim row, or the two were computed at different scales (their verdicts would
        not be the same question).
    """
    for name, t in (("first", first), ("second", second)):
        dup = t["claim"][t["claim"].duplicated()].tolist()
        if dup:
            raise ValueError(f"{name} run's claims repeat rows {dup[:3]}")
    scales = (set(first["scale"].astype(str)), set(second["scale"].astype(str)))
    if scales[0] != scales[1]:
        raise ValueError(f"the runs were judged at different scales: {sorted(scales[0])} vs {sorted(scales[1])}")
    other = second.set_index("claim")
    out = first.drop(columns=[c for c in SECOND_COLUMNS if c in first.columns]).copy()
    def col(name: str, default: object) -> list[object]:
        return [other.at[c, name] if c in other.index else default for c in out["claim"]]

    out["second_verdict"] = [str(v) for v in col("verdict", "")]
    for name in ("ours", "ci_low", "ci_high"):
        out[f"second_{name}"] = np.asarray(col(name, np.nan), dtype=float)
    out["second_n"] = [int(v) for v in col("n", 0)]
    out["second_machine"] = machine or "; ".join(sorted({str(m) for m in second.get("machine", []) if str(m)}))
    both = out["verdict"].isin(COMPUTED) & out["second_verdict"].isin(COMPUTED)
    out["agreement"] = np.where(both, np.where(out["verdict"] == out["second_verdict"], "same", "different"), "")
    return out


def agreement_counts(t: pd.DataFrame, decided: Sequence[str] | None = None) -> dict[str, int]:
    """Rows compared, rows with the same verdict, and the first run's decided rows compared and kept.

    ``decided``: the verdicts that count as decided (default: :data:`fedshift.claims.DECIDED`).
    """
    decided = tuple(decided or DECIDED)
    compared = t[t["agreement"].isin(("same", "different"))]
    dec = compared[compared["verdict"].isin(decided)]
    return {"compared": len(compared), "same": int((compared["agreement"] == "same").sum()),
            "decided": len(dec), "kept": int((dec["agreement"] == "same").sum())}
