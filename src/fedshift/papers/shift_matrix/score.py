r"""Your algorithm against the committed matrix: its cells scored against the committed per-seed baseline.

The matrix's table job writes the per-seed values every mean and Δ is computed from (``shift_matrix_runs.csv``,
:func:`.report.per_seed`), and the results snapshot commits them. A new algorithm's cells, trained at the same
scale (same seeds, rounds and grid budget), are then compared with the committed baseline without training it
again::

    python -m fedshift.papers.shift_matrix.score --method my_alg --runs results/runs/shift_matrix \\
        --baseline docs/results/snapshot/tables/shift_matrix/shift_matrix_runs.csv

Per (model, column): the method's mean test value and interval, the baseline's, and the paired Δ against the
baseline by seed with its Student-t interval (:func:`.report.summary`, the matrix's own), beside the noise floor:
the largest |Δ| of the baseline's copies (the baseline under another name, ``baseline_copies``) against the baseline
in that column, from the same committed table (:func:`.ranking.noise_floor` over all blocks). A Δ within the floor
is no difference. The machines are named: the new runs' (their ``run.json``) and the committed baseline's (the
snapshot's ``snapshot.json``); a float computation differs in its last bits from one CPU to another, so a Δ
across machines carries that too (the floor, measured on one machine, does not).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from fedshift.papers.shift_matrix import ranking, report

__all__ = ["load_method", "score", "machines_of_runs", "machines_of_snapshot", "main"]


def load_method(runs: Path, method: str, shifts: Sequence[str]) -> pd.DataFrame:
    """Every ``metrics.csv`` of ``method``'s cells under ``runs`` (``<runs>/<shift>/<method>/seed~<s>/``).

    Raises
    ------
    FileNotFoundError
        When no cell of ``method`` in ``shifts`` has a ``metrics.csv``.
    """
    files = sorted(f for sh in shifts for f in (runs / sh / method).glob("seed~*/metrics.csv"))
    if not files:
        raise FileNotFoundError(f"no metrics.csv of {method!r} under {runs}/<shift>/{method}/seed~*/ for the shifts "
                                f"{', '.join(shifts)}: train its cells first (docs/results/shift_matrix.md)")
    return pd.concat([pd.read_csv(f) for f in files], ignore_index=True)


def _read(base: pd.DataFrame) -> pd.DataFrame:
    """The per-seed table with ``gate`` as text (empty where the shift ranks) and the flags as bools."""
    gate = base["gate"].astype(object).where(base["gate"].notna(), "").astype(str)
    return base.assign(gate=gate, baseline=base["baseline"].astype(bool),
                       baseline_copy=base["baseline_copy"].astype(bool))


def _columns(base: pd.DataFrame) -> list[dict[str, str]]:
    cols = base.drop_duplicates("column")
    return [{"shift": s, "metric": m, "label": c} for c, s, m in zip(cols["column"], cols["shift"], cols["metric"],
                                                                   strict=True)]


def score(metrics: pd.DataFrame, base: pd.DataFrame, method: str, confidence: float = 0.95) -> pd.DataFrame:
    """The method's per-seed values paired with the committed baseline's, per (model, column).

    Parameters
    ----------
    metrics : DataFrame
        The method's runs' tidy rows (:meth:`ShiftMatrixPaper.evaluate`; :func:`load_method`).
    base : DataFrame
        The committed per-seed table (:data:`.report.RUNS_COLUMNS`; one model or several).
    method : str
        The algorithm's registered name (its run id).
    confidence : float
        Of the intervals.

    Returns
    -------
    DataFrame
        ``model, column, gate, seeds, mean, ci, baseline_mean, delta, delta_ci, delta_crosses_zero,
        floor_max_abs, floor_pairs``: fractions; ``seeds`` the seeds paired with the baseline; ``floor_max_abs``
        the largest |Δ| of a baseline copy against the baseline in the column over its seeds (NaN where the column
        has no copy), ``floor_pairs`` how many (copy, seed) pairs it is taken over; ``gate`` the committed
        matrix's reason for keeping the shift out of ranks and tests (empty when it ranks it).

    Raises
    ------
    ValueError
        When a cell was trained with other rounds than the committed baseline's (another scale), or no seed of
        the method pairs with a baseline seed.
    """
    out = []
    for model, b in _read(base).groupby("model", sort=False):
        own = metrics[metrics["model"] == model] if "model" in metrics else metrics
        if own.empty:
            continue
        baseline = str(b.loc[b["baseline"], "algorithm"].iloc[0])
        columns = [c for c in _columns(b) if c["shift"] in set(own["shift"])]
        chosen = report.selected(own, columns)
        mine = report.per_seed(own, chosen, {"model": model, "baseline": baseline})
        ref = b[b["baseline"]]
        rounds = mine.merge(ref, on=["column", "seed"], suffixes=("", "_base"))
        off = rounds[rounds["rounds"] != rounds["rounds_base"]]
        if len(off):
            r = off.iloc[0]
            raise ValueError(f"{method} in {model} / {r['column']} trained {r['rounds']:g} rounds, the committed "
                             f"{baseline} {r['rounds_base']:g}: another scale (run with the config the snapshot "
                             "was made with)")
        both = pd.concat([ref[chosen.columns], chosen], ignore_index=True)
        summ = report.summary(both, baseline, confidence).set_index(["column", "algorithm"])
        copies = b[b["baseline_copy"]]
        for col in columns:
            label = col["label"]
            if (label, method) not in summ.index:
                continue
            s = summ.loc[(label, method)]
            paired = set(chosen.loc[chosen["column"] == label, "seed"]) & set(ref.loc[ref["column"] == label, "seed"])
            floor = copies[copies["column"] == label].merge(ref[ref["column"] == label][["seed", "test"]], on="seed",
                                                             suffixes=("", "_base"))
            d = (floor["test"] - floor["test_base"]).abs().dropna()
            gate = b.loc[b["column"] == label, "gate"]
            out.append({"model": model, "column": label, "gate": gate.iloc[0] if len(gate) else "",
                        "seeds": len(paired), "mean": s["mean"], "ci": s["ci"],
                        "baseline_mean": summ.loc[(label, baseline), "mean"], "delta": s["delta"],
                        "delta_ci": s["delta_ci"], "delta_crosses_zero": bool(s["delta_crosses_zero"]),
                        "floor_max_abs": float(d.max()) if len(d) else np.nan, "floor_pairs": len(d)})
    table = pd.DataFrame(out, columns=["model", "column", "gate", "seeds", "mean", "ci", "baseline_mean", "delta",
                                       "delta_ci", "delta_crosses_zero", "floor_max_abs", "floor_pairs"])
    if table.empty or not table["seeds"].gt(0).any():
        raise ValueError(f"no seed of {method} pairs with a seed of the committed baseline (models "
                         f"{', '.join(map(str, base['model'].unique()))})")
    return table


def floor_summary(base: pd.DataFrame) -> pd.DataFrame:
    """Per model, the baseline's copies against the baseline over the committed matrix's blocks.

    :func:`.ranking.noise_floor` on the committed per-seed table: ``model, algorithm, blocks, pairs, mean_delta,
    sd_delta, max_abs_delta``.
    """
    rows = []
    for model, b in _read(base).groupby("model", sort=False):
        copies = b[b["baseline_copy"]]
        params = {"columns": _columns(b), "baseline": str(b.loc[b["baseline"], "algorithm"].iloc[0]),
                  "copies": {a: sorted(set(g["shift"])) for a, g in copies.groupby("algorithm")},
                  "gates": {sh: g for sh, g in zip(b["shift"], b["gate"], strict=True) if g}}
        floor = ranking.noise_floor(b, params)
        rows += [{"model": model, **r} for r in floor.to_dict("records")]
    return pd.DataFrame(rows)


def machines_of_runs(runs: Path, method: str) -> list[str]:
    """The CPU (and GPU) models the method's runs were made on, from their ``run.json`` (sorted, distinct).

    Worded as :func:`fedshift.docsgen.results.provenance` words a paper's machines (the snapshot's stamp), so that
    the two compare.
    """
    out = set()
    for f in runs.glob(f"*/{method}/seed~*/run.json"):
        env = json.loads(f.read_text()).get("environment", {})
        cpu = env.get("cpu", {})
        text = f"{cpu.get('model', 'unknown CPU')} ({cpu.get('torch_capability', '?')} kernels)"
        if env.get("gpu"):
            text = f"{env['gpu']} (CUDA {env.get('cuda', '?')}) on {text}"
        portable = env.get("reproducibility", {}).get("portable_cpu")
        out.add(f"{text}, portable-CPU switch {'on' if portable else 'off'}")  # as the snapshot's stamp writes it
    return sorted(out)


def machines_of_snapshot(baseline: Path) -> list[str]:
    """The machines the committed matrix was made on (``papers.shift_matrix.machines`` of a snapshot's stamp).

    The ``snapshot.json`` in the nearest folder above ``baseline``; empty when there is none (a run's own table,
    not a snapshot's).
    """
    for folder in Path(baseline).resolve().parents:
        stamp = folder / "snapshot.json"
        if stamp.is_file():
            data = json.loads(stamp.read_text())
            paper = data.get("papers", {}).get("shift_matrix", {})
            return list(paper.get("machines") or data.get("machines") or [])
    return []


def _pct(v: float, sign: bool = False) -> str:
    return "—" if pd.isna(v) else (f"{100 * v:+.1f}" if sign else f"{100 * v:.1f}")


def markdown(table: pd.DataFrame, floor: pd.DataFrame, method: str, machines: Mapping[str, list[str]]) -> str:
    """The comparison as Markdown: one table per model (in points), the noise floor and the machines."""
    parts = [f"Runs of {method} made on: {'; '.join(machines['runs']) or 'not recorded'}.",
             f"Committed baseline made on: {'; '.join(machines['baseline']) or 'not recorded (no snapshot.json)'}."]
    if machines["runs"] and machines["baseline"] and set(machines["runs"]) != set(machines["baseline"]):
        parts.append("Different machines: Δ also carries the machines' floating-point differences, which the noise "
                     "floor (one machine) does not measure.")
    for model, t in table.groupby("model", sort=False):
        parts += ["", f"**{model}** (paired by seed; Δ against the committed baseline in points; floor: the largest "
                  "|Δ| of the baseline's copies in the column)", "",
                  "| column | seeds | mean ± CI | baseline | Δ ± CI | floor max abs Δ | |",
                  "|---|---:|---|---:|---|---:|---|"]
        for r in t.itertuples():
            note = r.gate and f"not ranked in the matrix: {r.gate}" or (
                "within the floor" if not pd.isna(r.floor_max_abs) and abs(r.delta) <= r.floor_max_abs
                else "CI crosses 0" if r.delta_crosses_zero else "CI clears 0")
            parts.append(f"| {r.column} | {r.seeds} | {_pct(r.mean)} ± {_pct(r.ci)} | {_pct(r.baseline_mean)} | "
                         f"{_pct(r.delta, True)} ± {_pct(r.delta_ci)} | {_pct(r.floor_max_abs)} | {note} |")
        f = floor[floor["model"] == model] if len(floor) else floor
        if len(f):
            parts += ["", "Noise floor over the committed blocks (Δ in points): " + "; ".join(
                f"{r.algorithm} mean {_pct(r.mean_delta, True)}, sd {_pct(r.sd_delta)}, max |Δ| "
                f"{_pct(r.max_abs_delta)} over {r.pairs} pairs" for r in f.itertuples()) + "."]
    return "\n".join(parts) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: see the module docstring. Prints the Markdown; ``--out`` also writes the table as csv."""
    ap = argparse.ArgumentParser(prog="python -m fedshift.papers.shift_matrix.score",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--method", required=True, help="the algorithm's registered name (its run id)")
    ap.add_argument("--runs", type=Path, default=Path("results/runs/shift_matrix"),
                    help="the matrix's runs folder holding the method's cells")
    ap.add_argument("--baseline", type=Path, nargs="+",
                    default=[Path("docs/results/snapshot/tables/shift_matrix/shift_matrix_runs.csv"),
                             Path("docs/results/snapshot/tables/shift_matrix/shift_matrix_runs_cnn2.csv")],
                    help="committed per-seed tables (shift_matrix_runs*.csv); those missing are skipped")
    ap.add_argument("--confidence", type=float, default=0.95)
    ap.add_argument("--out", type=Path, help="also write the comparison as csv")
    args = ap.parse_args(argv)
    tables = [pd.read_csv(p) for p in args.baseline if p.is_file()]
    if not tables:
        print(f"score: none of {', '.join(map(str, args.baseline))} exists", file=sys.stderr)
        return 2
    base = pd.concat(tables, ignore_index=True)
    try:
        metrics = load_method(args.runs, args.method, list(dict.fromkeys(base["shift"])))
        table = score(metrics, base, args.method, args.confidence)
    except (FileNotFoundError, ValueError) as err:
        print(f"score: {err}", file=sys.stderr)
        return 2
    machines = {"runs": machines_of_runs(args.runs, args.method), "baseline": machines_of_snapshot(args.baseline[0])}
    sys.stdout.write(markdown(table, floor_summary(base), args.method, machines))
    if args.out:
        from fedshift.io import atomic_write

        with atomic_write(args.out) as fh:
            fh.write(table.to_csv(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
