"""WAFL figures (2–5) and Table 2, from tidy metrics (eq. 9's λ: :mod:`fedshift.papers.wafl.wasserstein`).

Every function here reads the evaluation jobs' ``metrics.csv`` files (or the tidy table it wrote), never a
model, and writes a tidy CSV next to the figure so that the figure can be redrawn without retraining.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from fedshift.io import atomic_write  # noqa: E402
from fedshift.reporting import plot_spread, save_figure  # noqa: E402

__all__ = ["collect", "fig2_table", "fig3_table", "fig4_table", "fig4_runs", "select_runs", "select_gamma",
           "fig5_table", "table2", "plot_figure", "TABLE2_CAPTION", "table2_markdown", "write_figure", "write_table2",
           "LABELS", "DIFF", "PAPER_TABLE2", "PAPER_FIG4_GAINS"]

log = logging.getLogger(__name__)

LABELS = {"fedavg": "FedAvg", "fedpgm": "FedPGM", "fedfgsm": "FedFGSM", "wafl": "WAFL"}
#: Table 2's row of the paired per-seed difference (the paper's claim: WAFL ≥ FedAvg).
DIFF = "WAFL − FedAvg"
#: Table 2 of the paper (accuracy on the target, %).
PAPER_TABLE2 = {"WAFL": {"mt_mm": 40.23, "mt_up": 66.94, "mm_up": 62.04, "mm_mt": 79.27},
                "FedAvg": {"mt_mm": 37.71, "mt_up": 66.08, "mm_up": 58.60, "mm_mt": 75.80}}
#: Paper §6: WAFL's accuracy gain (points) at 80 % shifted clients over FedPGM, FedFGSM, FedAvg.
PAPER_FIG4_GAINS = {"mnist": {"fedpgm": 7.0, "fedfgsm": 8.0, "fedavg": 33.0},
                    "cifar10": {"fedpgm": 2.5, "fedfgsm": 4.5, "fedavg": 18.0}}


def collect(paths: Sequence[str | Path]) -> pd.DataFrame:
    """Concatenate evaluation ``metrics.csv`` files."""
    return pd.concat([pd.read_csv(p) for p in paths], ignore_index=True)


def _final(df: pd.DataFrame) -> pd.DataFrame:
    last = df.groupby(["experiment", "algorithm", "seed"])["round"].transform("max")
    return df[df["round"] == last]


def _mean_std(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    g = df.groupby(keys, dropna=False)["value"]
    return g.agg(mean="mean", std="std", runs="count").reset_index()


def fig2_table(df: pd.DataFrame) -> pd.DataFrame:
    """ρ = √(E‖ζ* − z‖²) against γ per experiment (Fig. 2)."""
    d = _final(df[(df.kind == "wafl") & (df.metric == "rho2")]).copy()
    d["value"] = np.sqrt(d["value"])
    return _mean_std(d, ["experiment", "gamma"]).assign(metric="rho")


def fig3_table(df: pd.DataFrame, fractions: dict[str, float]) -> pd.DataFrame:
    """Accuracy and loss against γ, clean (fraction 0) and shifted (``fractions[experiment]``), with FedAvg."""
    d = _final(df[(df.population == "clients") & (df.kind.isin(["wafl", "fedavg"]))])
    keep = d["fraction"].eq(0) | d.apply(lambda r: np.isclose(r["fraction"], fractions[r["experiment"]]), axis=1)
    d = d[keep].assign(setting=lambda x: np.where(x["fraction"] == 0, "clean", "shifted"))
    return _mean_std(d, ["experiment", "kind", "gamma", "setting", "fraction", "metric"])


def select_runs(df: pd.DataFrame, candidates: Sequence[str]) -> pd.DataFrame:
    """Per (experiment, seed, fraction of shifted clients), the candidate run with the best validation accuracy.

    The clients' validation sets with that fraction of them shifted (final round; an independent draw of which
    clients, :func:`fedshift.core.metrics.attacked_clients` stream 1); a tie goes to the earlier candidate
    (``candidates`` lists the weakest perturbation first: the one closer to FedAvg).

    Parameters
    ----------
    df : DataFrame
        Tidy metrics with ``population = validation`` rows (:func:`fedshift.papers.wafl.fit.evaluate_run`).
    candidates : sequence of str
        Run ids (``algorithm``) to choose among, weakest first; those absent from ``df`` are skipped.

    Returns
    -------
    DataFrame
        Columns experiment, seed, fraction, algorithm, validation_accuracy.

    Raises
    ------
    ValueError
        If a candidate run of ``df`` has no validation rows.
    """
    rank = {a: i for i, a in enumerate(candidates)}
    w = _final(df[df.algorithm.isin(rank)])
    runs = w[["experiment", "seed", "algorithm"]].drop_duplicates()
    v = w[(w.population == "validation") & (w.metric == "accuracy")].assign(rank=lambda x: x.algorithm.map(rank))
    missing = runs.merge(v[["experiment", "seed", "algorithm"]].drop_duplicates(), how="left", indicator=True)
    if (missing["_merge"] == "left_only").any():
        bad = missing[missing["_merge"] == "left_only"].drop(columns="_merge").to_dict("records")
        raise ValueError(f"choosing among {list(candidates)} needs validation metrics; none for {bad} "
                         "(set partition.validation_fraction > 0)")
    best = (v.sort_values(["value", "rank"], ascending=[False, True])
            .groupby(["experiment", "seed", "fraction"]).head(1))
    return (best[["experiment", "seed", "fraction", "algorithm", "value"]]
            .rename(columns={"value": "validation_accuracy"}).sort_values(["experiment", "seed", "fraction"])
            .reset_index(drop=True))


def select_gamma(df: pd.DataFrame) -> pd.DataFrame:
    """WAFL's γ per (experiment, seed, fraction of shifted clients), chosen on the clients' validation sets.

    :func:`select_runs` among all WAFL runs of each experiment, a tie going to the larger γ (the smaller ball,
    closer to FedAvg).

    Returns
    -------
    DataFrame
        Columns experiment, seed, fraction, gamma, validation_accuracy.

    Raises
    ------
    ValueError
        If a WAFL run of the experiments has no validation rows.
    """
    w = df[df.kind == "wafl"]
    out = []
    for _, d in w.groupby("experiment"):
        ids = d[["algorithm", "gamma"]].drop_duplicates().sort_values("gamma", ascending=False)
        picked = select_runs(d, list(ids["algorithm"]))
        out.append(picked.merge(ids, on="algorithm", validate="many_to_one"))
    cols = ["experiment", "seed", "fraction", "gamma", "validation_accuracy"]
    return pd.concat(out, ignore_index=True)[cols] if out else pd.DataFrame(columns=cols)


def _choices_from(d: pd.DataFrame) -> dict[str, dict[str, object]]:
    """Fig. 4's choices read off one experiment's runs when the config gives none.

    A kind with one run is fixed; with several they are validation candidates (WAFL by decreasing γ, the others
    by run id).
    """
    out: dict[str, dict[str, object]] = {}
    for kind, k in d.groupby("kind"):
        ids = k[["algorithm", "gamma"]].drop_duplicates()
        if len(ids) == 1:
            out[kind] = {"fixed": ids["algorithm"].iloc[0], "candidates": []}
        else:
            order = ids.sort_values("gamma", ascending=False) if kind == "wafl" else ids.sort_values("algorithm")
            out[kind] = {"fixed": kind if kind in set(ids["algorithm"]) else None,
                         "candidates": list(order["algorithm"])}
    return out


def fig4_runs(df: pd.DataFrame, choices: Mapping[str, Mapping[str, Mapping[str, object]]] | None = None
              ) -> pd.DataFrame:
    """Fig. 4 per run: each algorithm's accuracy and loss per seed and fraction of shifted clients, fixed or chosen.

    ``selection = fixed``: the configured run of the algorithm (WAFL at ``compare_gamma``, FedPGM / FedFGSM at
    ``adversarial_training``, FedAvg). ``selection = validation``: per seed and fraction, the candidate chosen on the
    validation sets (:func:`select_runs`), for an algorithm with more than one candidate (WAFL's ``fig4_gammas``,
    the baselines' ``fig4_grid``). The paired leads of the claims are differences of these rows by seed.

    Parameters
    ----------
    df : DataFrame
        Tidy metrics of the Fig. 4 runs.
    choices : dict, optional
        experiment → kind → ``{"fixed": run id, "candidates": [run ids, weakest first]}``
        (:func:`fedshift.papers.wafl.config.fig4_choices`); None reads them off the runs (:func:`_choices_from`).

    Returns
    -------
    DataFrame
        Columns experiment, kind, selection, algorithm, gamma, seed, fraction, metric, value.

    Raises
    ------
    ValueError
        If a candidate lacks validation metrics, or a (seed, fraction) of the test metrics has no validation
        choice.
    """
    d = _final(df[df.population == "clients"])
    key = ["experiment", "seed", "fraction"]
    parts = []
    for exp, de in d.groupby("experiment"):
        ch = choices[exp] if choices is not None else _choices_from(de)
        present = set(de["algorithm"])
        for kind, c in ch.items():
            if c["fixed"] in present:
                parts.append(de[de.algorithm == c["fixed"]].assign(selection="fixed"))
            cands = [a for a in c["candidates"] if a in present]
            if len(cands) > 1:
                picked = select_runs(df[(df.experiment == exp) & df.algorithm.isin(cands)], cands)
                runs = de[de.algorithm.isin(cands)]
                w = runs.merge(picked[[*key, "algorithm"]], on=[*key, "algorithm"], validate="many_to_one")
                if len(w[key].drop_duplicates()) != len(runs[key].drop_duplicates()):
                    raise ValueError(f"{kind}'s test metrics have (seed, fraction) cells without a validation "
                                     "choice; the test and validation fractions must match")
                parts.append(w.assign(selection="validation"))
    cols = ["experiment", "kind", "selection", "algorithm", "gamma", "seed", "fraction", "metric", "value"]
    out = pd.concat(parts, ignore_index=True)[cols] if parts else pd.DataFrame(columns=cols)
    return out.sort_values(["experiment", "kind", "selection", "fraction", "metric", "seed"]).reset_index(drop=True)


def fig4_table(df: pd.DataFrame, choices: Mapping[str, Mapping[str, Mapping[str, object]]] | None = None
               ) -> pd.DataFrame:
    """Accuracy and loss against the fraction of shifted clients per algorithm (Fig. 4): mean and std over seeds.

    One row per (experiment, kind, selection, fraction, metric) of :func:`fig4_runs`. A ``fixed`` row keeps its
    run's ``gamma`` (WAFL); a ``validation`` row has ``gamma`` NaN and lists its choices seed by seed in
    ``selected_gamma`` (WAFL: ``0.02/0.02/0.05``) and ``selected_run`` (run ids); both are empty on fixed rows.

    Returns
    -------
    DataFrame
        Columns experiment, kind, selection, gamma, fraction, metric, mean, std, runs, selected_gamma, selected_run.

    Raises
    ------
    ValueError
        As :func:`fig4_runs`.
    """
    r = fig4_runs(df, choices)
    keys = ["experiment", "kind", "selection", "fraction", "metric"]
    out = _mean_std(r, keys)
    gam = r.groupby(keys)["gamma"].agg(lambda g: g.iloc[0] if g.nunique() <= 1 else np.nan).rename("gamma")
    acc = r[r.metric == r.metric.iloc[0]] if len(r) else r

    def listed(col: str, fmt) -> pd.Series:
        v = acc[acc.selection == "validation"].sort_values("seed")
        return v.groupby(["experiment", "kind", "selection", "fraction"])[col].agg(lambda x: "/".join(map(fmt, x)))

    out = out.merge(gam.reset_index(), on=keys)
    sel = pd.concat([listed("gamma", lambda x: "" if pd.isna(x) else f"{x:g}").rename("selected_gamma"),
                     listed("algorithm", str).rename("selected_run")], axis=1).reset_index()
    out = out.merge(sel, on=["experiment", "kind", "selection", "fraction"], how="left")
    out.loc[out.selection == "validation", "gamma"] = np.nan
    for col in ("selected_gamma", "selected_run"):
        out[col] = out[col].astype(object).where(out[col].notna(), "")
    out.loc[out.kind != "wafl", "selected_gamma"] = ""
    return out[["experiment", "kind", "selection", "gamma", "fraction", "metric", "mean", "std", "runs",
                "selected_gamma", "selected_run"]]


def fig5_table(df: pd.DataFrame, fractions: dict[str, float]) -> pd.DataFrame:
    """Accuracy and loss against the round, clean and shifted (Fig. 5)."""
    d = df[(df.population == "clients") & (df.kind == "wafl")]
    keep = d["fraction"].eq(0) | d.apply(lambda r: np.isclose(r["fraction"], fractions[r["experiment"]]), axis=1)
    d = d[keep].assign(setting=lambda x: np.where(x["fraction"] == 0, "clean", "shifted"))
    return _mean_std(d, ["experiment", "gamma", "setting", "round", "metric"])


def table2(df: pd.DataFrame, columns: dict[str, str]) -> pd.DataFrame:
    """Target accuracy (%) of WAFL and FedAvg per domain-adaptation experiment, with the paper's values.

    A third row per experiment, ``WAFL − FedAvg``, is the paper's claim: the per-seed difference of the two
    (paired: same seed, same partition and client sample), its mean and std over the seeds both ran.

    Parameters
    ----------
    df : DataFrame
        Metrics of the Table 2 runs (tidy rows of the evaluation jobs).
    columns : dict
        experiment -> column key (``mt_mm``, ``mt_up``, ``mm_up``, ``mm_mt``).

    Returns
    -------
    DataFrame
        Columns column, experiment, algorithm (``WAFL``, ``FedAvg``, ``WAFL − FedAvg``), gamma, mean, std (points),
        runs, paper.

    Raises
    ------
    ValueError
        If an experiment has WAFL runs at more than one γ (the difference would be ambiguous).
    """
    d = _final(df[(df.population == "target") & (df.metric == "accuracy")]).copy()
    several = d[d.kind == "wafl"].groupby("experiment")["gamma"].nunique()
    if (several > 1).any():
        raise ValueError(f"Table 2 takes one WAFL γ per experiment; several in {sorted(several[several > 1].index)}")
    d["value"] *= 100
    t = _mean_std(d, ["experiment", "kind", "gamma"])
    t["algorithm"] = t["kind"].map(LABELS)
    wide = d.pivot_table(index=["experiment", "seed"], columns="kind", values="value", aggfunc="first")
    if {"wafl", "fedavg"} <= set(wide.columns):
        diff = (wide["wafl"] - wide["fedavg"]).dropna().rename("value").reset_index()
        gap = _mean_std(diff, ["experiment"]).assign(kind="wafl-fedavg", algorithm=DIFF)
        gap["gamma"] = gap["experiment"].map(t[t.kind == "wafl"].groupby("experiment")["gamma"].first())
        t = pd.concat([t, gap], ignore_index=True)
    t["column"] = t["experiment"].map(columns)
    gains = {c: PAPER_TABLE2["WAFL"][c] - PAPER_TABLE2["FedAvg"][c] for c in PAPER_TABLE2["WAFL"]}
    paper = {**PAPER_TABLE2, DIFF: gains}
    t["paper"] = [paper.get(a, {}).get(c, np.nan) for a, c in zip(t["algorithm"], t["column"], strict=True)]
    return t[["column", "experiment", "algorithm", "gamma", "mean", "std", "runs", "paper"]]


#: Table 2's caption: what each number and each bracket of a cell holds.
TABLE2_CAPTION = ("**Table 2. Target accuracy (%) in the domain-adaptation tasks (source → target; mm MNIST-M, mt "
                  "MNIST, up USPS). Each cell: ours [the paper's]. WAFL and FedAvg: our mean over seeds [the paper's "
                  "published accuracy]; WAFL − FedAvg: our mean ± std over seeds of the difference paired by seed "
                  "[the paper's WAFL row less its FedAvg row].**")


def table2_markdown(t: pd.DataFrame) -> str:
    """Table 2 as Markdown: its caption (:data:`TABLE2_CAPTION`), rows WAFL, FedAvg and their paired difference;
    cells ``ours [paper's]``."""
    cols = list(dict.fromkeys(t["column"]))
    lines = [TABLE2_CAPTION, "", "| algorithm | " + " | ".join(c.replace("_", "→") for c in cols) + " |",
             "|---|" + "---:|" * len(cols)]
    for alg in ("WAFL", "FedAvg", DIFF):
        cells = []
        for c in cols:
            r = t[(t.algorithm == alg) & (t.column == c)]
            if r.empty:
                cells.append("–")
            elif alg == DIFF:
                std = r["std"].iloc[0]
                spread = "" if np.isnan(std) else f" ± {std:.2f}"
                cells.append(f"{r['mean'].iloc[0]:+.2f}{spread} [{r['paper'].iloc[0]:+.2f}]")
            else:
                cells.append(f"{r['mean'].iloc[0]:.2f} [{r['paper'].iloc[0]:.2f}]")
        lines.append(f"| {alg} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot_figure(name: str, t: pd.DataFrame, pdf: str | Path, png: str | Path) -> None:
    """Draw Fig. 2, 3, 4 or 5 from its tidy table (one column of panels per experiment)."""
    exps = list(dict.fromkeys(t["experiment"]))
    if name == "fig2":
        fig, axes = plt.subplots(1, len(exps), figsize=(4 * len(exps), 3.2), squeeze=False)
        for ax, e in zip(axes[0], exps, strict=True):
            d = t[t.experiment == e].sort_values("gamma")
            plot_spread(ax, d["gamma"], d["mean"], d["std"] if "std" in d else None)
            ax.set(xscale="log", xlabel="γ", ylabel="average worst-case perturbation ρ", title=e)
    elif name in ("fig3", "fig4", "fig5"):
        metrics = ["accuracy", "loss"]
        fig, axes = plt.subplots(len(metrics), len(exps), figsize=(4 * len(exps), 6), squeeze=False)
        for j, e in enumerate(exps):
            for i, m in enumerate(metrics):
                ax, d = axes[i][j], t[(t.experiment == e) & (t.metric == m)]
                if name == "fig3":
                    for setting, style in (("clean", "-"), ("shifted", "--")):
                        w = d[(d.kind == "wafl") & (d.setting == setting)].sort_values("gamma")
                        plot_spread(ax, w["gamma"], w["mean"], w.get("std"), fmt="o" + style, label=f"WAFL: {setting}")
                        f = d[(d.kind == "fedavg") & (d.setting == setting)]
                        if not f.empty:
                            fm, fs = f["mean"].iloc[0], np.nan_to_num(f["std"].iloc[0]) if "std" in f else 0.0
                            ax.axhline(fm, ls=style, color="grey", label=f"FedAvg: {setting}")
                            ax.axhspan(fm - fs, fm + fs, color="grey", alpha=0.15, linewidth=0)
                    ax.set(xscale="log", xlabel="γ")
                elif name == "fig4":
                    for kind in ("wafl", "fedpgm", "fedfgsm", "fedavg"):
                        k = d[d.kind == kind]
                        both = k["selection"].nunique() > 1 if "selection" in k else False
                        for sel, w in k.groupby(k["selection"] if "selection" in k else np.zeros(len(k))):
                            w = w.sort_values("fraction")
                            what = (" (on validation)" if sel == "validation" else " (fixed)" if both else "")
                            plot_spread(ax, w["fraction"], w["mean"], w.get("std"), label=LABELS[kind] + what,
                                        fmt="o--" if both and sel == "fixed" else "o-")
                    ax.set(xlabel="proportion of attacked clients")
                else:
                    for setting, style in (("clean", "-"), ("shifted", "--")):
                        w = d[d.setting == setting].sort_values("round")
                        plot_spread(ax, w["round"], w["mean"], w.get("std"), band=True, fmt=style,
                                    label=f"WAFL γ={w['gamma'].iloc[0]:g}: {setting}" if not w.empty else setting)
                    ax.set(xlabel="round T")
                ax.set(ylabel=f"global {m}", title=e)
                if i == 0 and j == 0:
                    ax.legend(fontsize=7)
    else:
        raise ValueError(f"unknown figure {name!r}")
    fig.tight_layout()
    save_figure(fig, pdf, png, tight=True)


def write_figure(name: str, df: pd.DataFrame, fractions: dict[str, float], files: Mapping[str, str],
                 choices: Mapping[str, Mapping[str, Mapping[str, object]]] | None = None) -> pd.DataFrame:
    """One figure (2–5) from the runs' tidy metrics: its tidy table to ``files["csv"]``, then PDF and PNG.

    ``fractions``: per experiment, the fraction of shifted clients Figs. 3 and 5 show. ``choices``: Fig. 4's fixed
    and candidate runs (:func:`fedshift.papers.wafl.config.fig4_choices`); Fig. 4 also writes its per-run table
    (:func:`fig4_runs`) to ``files["runs"]`` when given. Returns the table.
    """
    table = {"fig2": lambda: fig2_table(df), "fig3": lambda: fig3_table(df, fractions),
             "fig4": lambda: fig4_table(df, choices), "fig5": lambda: fig5_table(df, fractions)}[name]()
    with atomic_write(files["csv"]) as fh:
        table.to_csv(fh, index=False)
    if name == "fig4" and "runs" in files:
        with atomic_write(files["runs"]) as fh:
            fig4_runs(df, choices).to_csv(fh, index=False)
    plot_figure(name, table, files["pdf"], files["png"])
    log.info("%s:\n%s", name, table.to_string())
    return table


def write_table2(df: pd.DataFrame, lambdas: Sequence[pd.DataFrame], columns: dict[str, str],
                 files: Mapping[str, str]) -> pd.DataFrame:
    """Table 2 (:func:`table2`) to ``files["csv"]`` and, with eq. (9)'s chosen client per task, ``files["md"]``."""
    t = table2(df, columns)
    with atomic_write(files["csv"]) as fh:
        t.to_csv(fh, index=False)
    md = table2_markdown(t)
    md += "\nλ by eq. (9) (Wasserstein distances to the target, POT): " + "; ".join(
        f"{e}: client {int(d.loc[d['lambda'].idxmax(), 'client'])} (W2 {d.w2.min():.2f}, median {d.w2.median():.2f})"
        for e, d in zip(columns, lambdas, strict=False)) + "\n"
    with atomic_write(files["md"]) as fh:
        fh.write(md)
    log.info("\n%s", md)
    return t
