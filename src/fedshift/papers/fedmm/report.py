"""FedMM figures (1, 4–7) and Table 1 from the runs' metrics (target accuracy by round; or their histories).

Every output first becomes a tidy CSV (accuracy in %, mean and std over seeds), from which the figure or the
Markdown table is drawn, so it can be redrawn without retraining. A run that diverged (non-finite objective)
has a NaN accuracy: a blank cell of Fig. 5, as in the paper.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from fedshift.claims.intervals import interval_text  # noqa: E402
from fedshift.io import atomic_write  # noqa: E402
from fedshift.papers.fedmm.config import parse_run_id  # noqa: E402
from fedshift.reporting import plot_spread, save_figure  # noqa: E402

__all__ = ["LABELS", "PAPER_TABLE1", "LAST_EVALUATIONS", "collect", "final_accuracy", "rounds_to_converge",
           "runs_table",
           "output_table", "table1_markdown", "PAPER_LEAD", "lead_markdown", "plot", "make_output"]

LABELS = {"fedmm": "FedMM", "fedavg_sgda": "FedAvgSGDA", "fedprox_sgda": "FedProxSGDA", "fedsgda": "FedSGDA"}
#: Table 1 of the paper: (CR × 100 rounds, accuracy %) per optimizer, network and Office-31 task.
PAPER_TABLE1 = {
    ("fedavg_sgda", "dann"): {"A_W": (10, 60.1), "D_W": (13, 86.1), "W_D": (8, 93.6), "A_D": (7, 63.5),
                              "D_A": (24, 33.7), "W_A": (18, 40.5)},
    ("fedavg_sgda", "cdan"): {"A_W": (17, 62.9), "D_W": (13, 86.8), "W_D": (7, 94.2), "A_D": (21, 65.1),
                              "D_A": (34, 40.3), "W_A": (14, 45.5)},
    ("fedavg_sgda", "mdd"): {"A_W": (31, 73.2), "D_W": (27, 93.6), "W_D": (11, 97.8), "A_D": (22, 72.1),
                             "D_A": (31, 47.9), "W_A": (18, 51.7)},
    ("fedsgda", "dann"): {"A_W": (59, 60.3), "D_W": (40, 84.9), "W_D": (29, 93.7), "A_D": (56, 65.3),
                          "D_A": (48, 36.9), "W_A": (88, 40.3)},
    ("fedsgda", "cdan"): {"A_W": (78, 55.3), "D_W": (49, 83.4), "W_D": (16, 94.0), "A_D": (13, 67.7),
                          "D_A": (95, 47.1), "W_A": (85, 43.3)},
    ("fedsgda", "mdd"): {"A_W": (255, 76.4), "D_W": (188, 94.7), "W_D": (92, 98.3), "A_D": (400, 75.3),
                         "D_A": (300, 49.2), "W_A": (321, 52.7)},
    ("fedmm", "dann"): {"A_W": (13, 65.5), "D_W": (15, 89.6), "W_D": (14, 96.7), "A_D": (7.5, 67.8),
                        "D_A": (39, 44.3), "W_A": (25, 48.7)},
    ("fedmm", "cdan"): {"A_W": (29, 64.7), "D_W": (9, 93.4), "W_D": (10, 94.0), "A_D": (32, 66.9),
                        "D_A": (17, 51.4), "W_A": (13, 59.6)},
    ("fedmm", "mdd"): {"A_W": (23, 79.7), "D_W": (18, 95.9), "W_D": (19, 98.5), "A_D": (22, 78.8),
                       "D_A": (19, 60.3), "W_A": (15, 55.5)},
}
_PATH = re.compile(r"runs/[^/]+/(?P<task>[^/]+)/(?P<run>[^/]+)/seed~(?P<seed>\d+)/(?P<file>history|metrics)\.csv$")
#: The run setting's columns of a metrics file (:meth:`fedshift.papers.fedmm.paper.FedmmPaper.evaluate`).
SETTING = ("optimizer", "head", "clients", "local_steps", "eta3")


def collect(paths: Sequence[str | Path]) -> pd.DataFrame:
    """Tidy rows (task, run, optimizer, head, clients, local_steps, eta3, seed, round, accuracy %) of runs.

    Each path is a run's ``metrics.csv`` (the setting read from its columns, the ``target_accuracy`` rows) or
    its ``history.csv`` (the setting parsed from the run id).

    Raises
    ------
    ValueError
        For a path that is not ``…/runs/<paper>/<task>/<run>/seed~<s>/{metrics,history}.csv``.
    """
    frames = []
    for p in paths:
        m = _PATH.search(Path(p).as_posix())
        if m is None:
            raise ValueError(f"not a FedMM history or metrics path: {p}")
        h = pd.read_csv(p)
        if m["file"] == "metrics":
            h = h[h["metric"] == "target_accuracy"].reset_index(drop=True)
            run = {k: h[k].iloc[0] for k in SETTING}
            acc = h["value"]
        else:
            run, acc = parse_run_id(m["run"]), h["target_accuracy"]
        frames.append(pd.DataFrame({"task": m["task"], "run": m["run"], **run, "seed": int(m["seed"]),
                                    "round": h["round"], "accuracy": 100.0 * acc}))
    return pd.concat(frames, ignore_index=True)


def final_accuracy(df: pd.DataFrame) -> pd.DataFrame:
    """The last evaluated round of every (task, run, seed)."""
    last = df.groupby(["task", "run", "seed"])["round"].transform("max")
    return df[df["round"] == last]


def rounds_to_converge(curve: pd.DataFrame, within: float) -> float:
    """First evaluated round whose accuracy is within ``within`` (fraction, e.g. 0.01 = 1 point) of the best.

    Returns NaN for a diverged run.
    """
    acc = curve.sort_values("round")
    if acc["accuracy"].isna().all():
        return float("nan")
    best = acc["accuracy"].max()
    return float(acc.loc[acc["accuracy"] >= best - 100.0 * within, "round"].iloc[0])


#: Evaluations averaged at the end of a run (:func:`runs_table`'s ``last4``): no round is chosen.
LAST_EVALUATIONS = 4


def runs_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per run and seed: its final accuracy and the mean of its last evaluations (%, for paired claims).

    Parameters
    ----------
    df : DataFrame
        :func:`collect`'s rows.

    Returns
    -------
    DataFrame
        task, run, optimizer, head, clients, p (the share of p<v> settings, NaN for s<k>t<l>), local_steps,
        eta3, seed, ``final`` (accuracy at the last evaluated round), ``last4`` (mean of the last
        :data:`LAST_EVALUATIONS` evaluations, or of all if fewer), ``last_round`` and ``evaluations``. A diverged
        run keeps NaN (the claims then refuse to pair it rather than drop it).
    """
    keys = ["task", "run", *SETTING, "seed"]
    rows = []
    for key, g in df.sort_values("round").groupby(keys, sort=True, dropna=False):
        acc = g["accuracy"].to_numpy(dtype=float)
        rows.append({**dict(zip(keys, key, strict=True)), "final": acc[-1],
                     "last4": float(np.mean(acc[-LAST_EVALUATIONS:])), "last_round": int(g["round"].iloc[-1]),
                     "evaluations": len(acc)})
    out = pd.DataFrame(rows)
    p = out["clients"].str.extract(r"^p(?P<p>[0-9.]+)$")["p"].astype(float)
    return out.assign(p=p)[["task", "run", "optimizer", "head", "clients", "p", "local_steps", "eta3", "seed",
                            "final", "last4", "last_round", "evaluations"]]


def _agg(df: pd.DataFrame, keys: list[str], value: str = "accuracy") -> pd.DataFrame:
    return df.groupby(keys, dropna=False)[value].agg(mean="mean", std="std", runs="count").reset_index()


def output_table(name: str, spec: dict[str, Any], df: pd.DataFrame) -> pd.DataFrame:
    """The tidy table of one output.

    * fig1 / fig4: final accuracy against p per head and optimizer;
    * fig5: FedMM's final accuracy per head, η₃ and M;
    * fig6 / fig7: accuracy against the round (FedMM at each M and FedSGDA; the three optimizers per client
      setting);
    * table1: per optimizer, head and task the mean CR (rounds to converge / 100) and final accuracy, beside
      the paper's.
    """
    if name in ("fig1", "fig4"):
        d = final_accuracy(df).assign(p=lambda x: x["clients"].str[1:].astype(float))
        return _agg(d, ["head", "optimizer", "p"])
    if name == "fig5":
        return _agg(final_accuracy(df), ["head", "eta3", "local_steps"])
    if name == "fig6":
        return _agg(df, ["head", "optimizer", "local_steps", "round"])
    if name == "fig7":
        return _agg(df, ["head", "clients", "optimizer", "round"])
    rows = []
    for (task, opt, head), g in df.groupby(["task", "optimizer", "head"]):
        cr = np.mean([rounds_to_converge(c, spec["converge_within"]) for _, c in g.groupby("seed")]) / 100
        acc = final_accuracy(g)["accuracy"].mean()
        transfer = task.removeprefix("office_")
        paper = PAPER_TABLE1.get((opt, head), {}).get(transfer, (np.nan, np.nan))
        rows.append({"task": transfer, "optimizer": opt, "head": head, "cr": cr, "accuracy": acc,
                     "paper_cr": paper[0], "paper_accuracy": paper[1], "runs": g["seed"].nunique()})
    return pd.DataFrame(rows)


def table1_markdown(t: pd.DataFrame) -> str:
    """Table 1 as Markdown: ``CR / ACC`` measured with the paper's in brackets."""
    tasks = list(dict.fromkeys(t["task"]))
    lines = ["| optimizer | network | " + " | ".join(f"{x.replace('_', '→')} CR / ACC" for x in tasks) + " |",
             "|---|---|" + "---|" * len(tasks)]
    for (opt, head), g in t.groupby(["optimizer", "head"], sort=False):
        cells = []
        for x in tasks:
            r = g[g.task == x]
            cells.append("–" if r.empty else f"{r['cr'].iloc[0]:g} / {r['accuracy'].iloc[0]:.1f} "
                                             f"[{r['paper_cr'].iloc[0]:g} / {r['paper_accuracy'].iloc[0]:.1f}]")
        lines.append(f"| {LABELS[opt]} | {head.upper()} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n\nCR: rounds to converge (× 100); ACC: target accuracy (%); [paper, Table 1].\n"


#: What the paper says of each figure's comparison of FedMM with FedAvgSGDA, printed under our table of it.
PAPER_LEAD = {
    "fig4": "FedMM at or above FedAvgSGDA at every p (Fig. 4: \"FedMM is robust to label imbalance\"; the figure "
            "prints no numbers)",
    "fig7": "FedMM ahead by about 20 points from scratch (§1 (iii): \"it outperforms other SGDA based federated "
            "average methods by around 20% in accuracy over the same communication rounds\")",
}


def _mean_sd(v: pd.Series) -> str:
    v = v.dropna()
    if v.empty:
        return "–"
    return f"{v.mean():.1f} ± {v.std():.1f}" if len(v) > 1 else f"{v.mean():.1f}"


def _counts(n: set[int]) -> str:
    return "–" if not n else str(min(n)) if len(n) == 1 else f"{min(n)}–{max(n)}"


def lead_markdown(name: str, runs: pd.DataFrame) -> str:
    """Fig. 4 or Fig. 7 as a table: each optimizer's target accuracy and FedMM's lead over FedAvgSGDA.

    One row per head and setting ("DANN, p = 0.5" for Fig. 1/4, the client setting for Fig. 7): every
    optimizer's final accuracy (%, mean ± std over seeds), then FedMM − FedAvgSGDA paired by seed, at the last
    round and over the last :data:`LAST_EVALUATIONS` evaluations (mean [95 % t-interval], points; the claims'
    quantities), and under it the number of paired seeds and what the paper says (:data:`PAPER_LEAD`).

    Parameters
    ----------
    name : str
        ``fig1``, ``fig4`` or ``fig7``.
    runs : DataFrame
        :func:`runs_table`'s rows (the output's ``<name>_runs.csv``).

    Returns
    -------
    str
        Markdown; the lead columns only when both FedMM and FedAvgSGDA ran.
    """
    by = "p" if name in ("fig1", "fig4") else "clients"
    optimizers = [o for o in LABELS if o in set(runs["optimizer"])]
    paired = {"fedmm", "fedavg_sgda"} <= set(optimizers)
    head = ["setting", *(LABELS[o] for o in optimizers)]
    if paired:
        head += ["lead", f"lead, last {LAST_EVALUATIONS}"]  # short headers: the table fits a page column
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    pairs: set[int] = set()
    for (net, setting), g in runs.groupby(["head", by], sort=True):
        cells = [f"{net.upper()}, " + (f"p = {setting:g}" if by == "p" else str(setting))]
        cells += [_mean_sd(g.loc[g["optimizer"] == o, "final"]) for o in optimizers]
        if paired:
            a, b = (g[g["optimizer"] == o].set_index("seed") for o in ("fedmm", "fedavg_sgda"))
            cells += [interval_text(a["final"] - b["final"], 1), interval_text(a["last4"] - b["last4"], 1)]
            pairs.add(len(a.index.intersection(b.index)))
        lines.append("| " + " | ".join(cells) + " |")
    note = ["", "Target (MNIST-M) test accuracy (%), mean ± std over seeds at the last round."
            + (f" Lead: FedMM − FedAvgSGDA paired by seed ({_counts(pairs)} pairs), at the last round and over the "
               f"last {LAST_EVALUATIONS} evaluations (points, mean [95 % t-interval])." if paired else "")]
    if name in PAPER_LEAD:
        note.append(f"Paper: {PAPER_LEAD[name]}.")
    return "\n".join(lines + note) + "\n"


def _curve(ax, d: pd.DataFrame, label: str) -> None:
    d = d.sort_values("round")
    runs = int(d["runs"].max())
    plot_spread(ax, d["round"], d["mean"], d["std"], band=True, fmt="-",
                label=f"{label} ({runs} seed{'s' if runs > 1 else ''})")


def plot(name: str, t: pd.DataFrame, pdf: str | Path, png: str | Path) -> None:
    """Draw Fig. 1, 4, 5, 6 or 7 from its tidy table (one panel per head; Fig. 7 one row per client setting)."""
    heads = list(dict.fromkeys(t["head"]))
    rows = list(dict.fromkeys(t["clients"])) if name == "fig7" else [None]
    fig, axes = plt.subplots(len(rows), len(heads), figsize=(4.2 * len(heads), 3.4 * len(rows)), squeeze=False)
    for i, row in enumerate(rows):
        for j, head in enumerate(heads):
            ax = axes[i][j]
            d = t[t["head"] == head]
            if name in ("fig1", "fig4"):
                for opt, g in d.groupby("optimizer"):
                    g = g.sort_values("p")
                    plot_spread(ax, g["p"], g["mean"], g["std"], label=f"{LABELS[opt]} ({int(g['runs'].max())} seeds)")
                ax.set_xlabel("p (share of source on client 1)")
            elif name == "fig5":
                grid = d.pivot(index="eta3", columns="local_steps", values="mean")
                sd = d.pivot(index="eta3", columns="local_steps", values="std").reindex_like(grid)
                runs = d.pivot(index="eta3", columns="local_steps", values="runs").reindex_like(grid)
                im = ax.imshow(grid.values, origin="lower", aspect="auto", cmap="viridis")
                ax.set_xticks(range(grid.shape[1]), [str(c) for c in grid.columns])
                ax.set_yticks(range(grid.shape[0]), [f"{v:g}" for v in grid.index])
                for (a, b), v in np.ndenumerate(grid.values):
                    if np.isfinite(v):  # mean ± std over seeds, and the number of seeds, in every cell
                        spread = f"\n± {sd.values[a, b]:.1f}" if np.isfinite(sd.values[a, b]) else ""
                        n = int(runs.values[a, b])
                        ax.text(b, a, f"{v:.1f}{spread}\n({n} seed{'s' if n != 1 else ''})", ha="center",
                                va="center", color="w", fontsize=7)
                ax.set_xlabel("local steps M")
                ax.set_ylabel("η₃")
                fig.colorbar(im, ax=ax, label="target accuracy (%)")
            elif name == "fig6":
                for (opt, m), g in d.groupby(["optimizer", "local_steps"]):
                    _curve(ax, g, LABELS[opt] + (f" (M = {m})" if opt != "fedsgda" else ""))
                ax.set_xlabel("communication round")
            else:
                for opt, g in d[d["clients"] == row].groupby("optimizer"):
                    _curve(ax, g, LABELS[opt])
                ax.set_xlabel("communication round")
            ax.set_title(head.upper() + (f", {row}" if row else ""))
            if name != "fig5":
                ax.set_ylabel("target accuracy (%)")
                ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, pdf, png, tight=True)  # tight: Fig. 7's x-axis label was clipped without it


def make_output(name: str, spec: dict[str, Any], paths: Sequence[str | Path],
                outputs: dict[str, str]) -> pd.DataFrame:
    """Write one output from its runs' metrics (:func:`collect`).

    ``outputs`` maps ``csv`` and ``pdf``/``png`` (figures) or ``md`` (Table 1) to paths, and optionally ``runs``
    to the per-run table (:func:`runs_table`) the paired claims read and, for Fig. 1, 4 and 7, ``md`` to their
    table (:func:`lead_markdown`).
    """
    df = collect(paths)
    t = output_table(name, spec, df)
    with atomic_write(outputs["csv"]) as fh:
        t.to_csv(fh, index=False)
    lead_md = "md" in outputs and name != "table1"  # Table 1's markdown is its own layout of ``t``
    per_run = runs_table(df) if "runs" in outputs or lead_md else None
    if "runs" in outputs:
        with atomic_write(outputs["runs"]) as fh:
            per_run.to_csv(fh, index=False)
    if "md" in outputs:  # Table 1's layout, or a figure's lead table
        with atomic_write(outputs["md"]) as fh:
            fh.write(table1_markdown(t) if name == "table1" else lead_markdown(name, per_run))
    if name != "table1":
        plot(name, t, outputs["pdf"], outputs["png"])
    return t
