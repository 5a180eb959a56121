"""Tables and figures of the AgnosticFedAvg paper and the AFL language-model table from the runs' outputs.

* :func:`domain_table`: Tables 1 and 5 of Ro et al. (2021) and Table 3 of Mohri et al. (2019): per algorithm
  (row) and domain, mean ± std over seeds of the final test metric, plus the worst domain and, for two
  domains, the difference (Table 1: answer − question; Table 5: census − high school);
* :func:`toy_curves` / :func:`plot_toy`: App. A, Fig. 1: w and λ over rounds against the closed-form w*, λ*;
* :func:`curves` / :func:`plot_curves`: worst-domain test accuracy and λ over rounds per domain type;
* :func:`stats_table`: Table 3 of Ro et al. (clients, sentences, answers, questions per split).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from fedshift.claims.intervals import interval_text  # noqa: E402
from fedshift.io import atomic_write  # noqa: E402
from fedshift.reporting import plot_spread, save_figure  # noqa: E402

__all__ = ["domain_table", "table_markdown", "toy_curves", "plot_toy", "curves", "curves_markdown", "plot_curves",
           "stats_table"]

_LOWER_IS_BETTER = {"perplexity"}


def _pm(mean: float, std: float, metric: str) -> str:
    if metric == "accuracy":
        return f"{100 * mean:.2f} ± {100 * std:.2f}"
    return f"{mean:.2f} ± {std:.2f}"


def domain_table(metrics: pd.DataFrame, rows: dict[str, str], domains: Sequence[str],
                 metrics_kept: Sequence[str]) -> pd.DataFrame:
    """Mean and std over seeds of each (algorithm, domain, metric), with the worst domain and the difference.

    Parameters
    ----------
    metrics : DataFrame
        Concatenated ``metrics.csv`` of the runs (experiment, algorithm, seed, domain, metric, value).
    rows : dict
        Algorithm id → row label, in row order.
    domains : sequence of str
        The experiment's domains (column order).
    metrics_kept : sequence of str
        ``accuracy`` (fraction) and / or ``perplexity``.

    Returns
    -------
    DataFrame
        Columns: row, algorithm, metric, column (a domain, ``worst`` or ``difference``), mean, std, seeds.
        ``worst`` is the per-seed minimum accuracy / maximum perplexity over domains; ``difference`` (two
        domains only) the per-seed ``domains[1] − domains[0]``.

    Raises
    ------
    ValueError
        A row's algorithm or a domain has no metric values.
    """
    out = []
    for alg, label in rows.items():
        for metric in metrics_kept:
            sub = metrics[(metrics["algorithm"] == alg) & (metrics["metric"] == metric)]
            wide = sub.pivot_table(index="seed", columns="domain", values="value")
            missing = [d for d in domains if d not in wide.columns]
            if wide.empty or missing:
                raise ValueError(f"no {metric} of algorithm {alg!r} for domain(s) {missing or list(domains)}")
            cols = {d: wide[d] for d in domains}
            worst = wide[list(domains)].max(axis=1) if metric in _LOWER_IS_BETTER else wide[list(domains)].min(axis=1)
            cols["worst"] = worst
            if len(domains) == 2:
                cols["difference"] = wide[domains[1]] - wide[domains[0]]
            for col, v in cols.items():
                out.append({"row": label, "algorithm": alg, "metric": metric, "column": col, "mean": float(v.mean()),
                            "std": float(v.std(ddof=0)), "seeds": int(v.count())})
    return pd.DataFrame(out)


def table_markdown(t: pd.DataFrame, title: str) -> str:
    """A Markdown table: one row per algorithm, one column per (metric, domain / worst / difference)."""
    t = t.assign(cell=[_pm(m, s, k) for m, s, k in zip(t["mean"], t["std"], t["metric"], strict=True)],
                 header=[f"{c} {m}" + (" (%)" if m == "accuracy" else "") for c, m in zip(t["column"], t["metric"],
                                                                                          strict=True)])
    wide = t.pivot_table(index="row", columns="header", values="cell", aggfunc="first", sort=False)
    wide = wide.reindex(index=list(dict.fromkeys(t["row"])), columns=list(dict.fromkeys(t["header"])))
    lines = [f"**{title}** (mean ± std over seeds)", "", "| algorithm | " + " | ".join(wide.columns) + " |",
             "|---|" + "---|" * len(wide.columns)]
    lines += [f"| {r} | " + " | ".join(str(v) for v in wide.loc[r]) + " |" for r in wide.index]
    return "\n".join(lines) + "\n"


def toy_curves(history: pd.DataFrame, truth: dict[str, Any]) -> pd.DataFrame:
    """Per logged round: w's coordinates, λ, and their distances to w* and λ* (App. A, Fig. 1)."""
    w_cols = sorted((c for c in history.columns if c.startswith("w/")), key=lambda c: int(c[2:]))
    lam_cols = sorted((c for c in history.columns if c.startswith("lambda/")), key=lambda c: int(c[7:]))
    out = history[["round", *w_cols, *lam_cols]].copy()
    w_star, lam_star = truth["w_star"], truth["lambda_star"]
    out["w_error"] = sum((out[c] - w_star[i]) ** 2 for i, c in enumerate(w_cols)) ** 0.5
    out["lambda_error"] = pd.concat([(out[c] - lam_star[i]).abs() for i, c in enumerate(lam_cols)], axis=1).max(axis=1)
    return out


def plot_toy(t: pd.DataFrame, truth: dict[str, Any]) -> plt.Figure:
    """Two panels: w's coordinates and λ over rounds, dashed lines at w* and λ*."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.4))
    for i, c in enumerate(c for c in t.columns if c.startswith("w/")):
        line, = a.plot(t["round"], t[c], label=f"$w_{i}$")
        a.axhline(truth["w_star"][i], ls="--", color=line.get_color(), lw=0.8)
    a.set(xlabel="round", ylabel="w", title="model w (dashed: minimax point w*)")
    a.legend()
    for i, c in enumerate(c for c in t.columns if c.startswith("lambda/")):
        line, = b.plot(t["round"], t[c], label=f"$\\lambda_{i}$")
        b.axhline(truth["lambda_star"][i], ls="--", color=line.get_color(), lw=0.8)
    b.set(xlabel="round", ylabel="λ", title="domain weights λ (dashed: λ*)")
    b.legend(fontsize=8)
    fig.suptitle("AgnosticFedAvg, toy regression (Ro et al. 2021, App. A)")
    fig.tight_layout()
    return fig


def curves(histories: dict[tuple[str, str, int], pd.DataFrame], domains: Sequence[str], metric: str) -> pd.DataFrame:
    """Tidy curves: experiment, algorithm, seed, round, worst-domain metric and λ per domain (NaN for FedAvg)."""
    rows = []
    for (exp, alg, seed), h in histories.items():
        worst = h[[f"{metric}/{d}" for d in domains]]
        worst = worst.max(axis=1) if metric in _LOWER_IS_BETTER else worst.min(axis=1)
        for i, r in h.iterrows():
            row = {"experiment": exp, "algorithm": alg, "seed": seed, "round": int(r["round"]),
                   f"worst_{metric}": float(worst[i])}
            for k, d in enumerate(domains):
                row[f"lambda/{d}"] = float(r[f"lambda/{k}"]) if f"lambda/{k}" in h.columns else float("nan")
            rows.append(row)
    return pd.DataFrame(rows)


def curves_markdown(t: pd.DataFrame, rows: dict[str, str], metric: str, title: str,
                    experiments: dict[str, str] | None = None, last: int = 10) -> str:
    """The curves' end as a table: one row per experiment, the worst domain's metric per algorithm and the lead.

    Columns: each algorithm's (``rows``: algorithm → label, in order) worst-domain ``metric`` at the last round
    (mean ± std over seeds; accuracy in %), then the last listed algorithm minus the first paired by seed (mean
    [95 % t-interval]; for a lower-is-better metric the first minus the last, so a positive lead is always the
    second one's advantage), at the last round and over the mean of the last ``last`` evaluations.

    Parameters
    ----------
    t : DataFrame
        :func:`curves`' rows (experiment, algorithm, seed, round, ``worst_<metric>``).
    rows : dict
        Algorithm → label; the first is the baseline of the lead.
    metric : str
        ``accuracy`` (shown in %) or ``perplexity``.
    title : str
        The bold line above the table.
    experiments : dict, optional
        Experiment → its label in the first column (default: the experiment's name).
    last : int
        Evaluations averaged for the last columns.

    Returns
    -------
    str
        Markdown.
    """
    col, scale = f"worst_{metric}", 100.0 if metric == "accuracy" else 1.0
    unit = " (%)" if metric == "accuracy" else ""
    lead_text = ""
    algs = [a for a in rows if a in set(t["algorithm"])]
    rounds = sorted(t["round"].unique())
    tail = rounds[-last:]
    lead = len(algs) >= 2
    head = ["experiment", *(rows[a] for a in algs)]  # short headers: the table fits a page column (1,280 px)
    if lead:
        head.append("lead [95 % CI]")
        lead_text = (f"{rows[algs[-1]]} − {rows[algs[0]]}" if metric not in _LOWER_IS_BETTER
                     else f"{rows[algs[0]]} − {rows[algs[-1]]}")
        head.append(f"lead, last {len(tail)}")
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for exp, g in t.groupby("experiment", sort=False):
        final = {a: g[(g["algorithm"] == a) & (g["round"] == rounds[-1])].set_index("seed")[col] * scale
                 for a in algs}
        cells = [(experiments or {}).get(exp, exp)]
        cells += [f"{v.mean():.2f} ± {v.std():.2f}" if len(v) > 1 else f"{v.mean():.2f}" for v in final.values()]
        if lead:
            sign = -1.0 if metric in _LOWER_IS_BETTER else 1.0
            means = {a: g[(g["algorithm"] == a) & g["round"].isin(tail)].groupby("seed")[col].mean() * scale
                     for a in (algs[0], algs[-1])}
            cells += [interval_text(sign * (v[algs[-1]] - v[algs[0]])) for v in (final, means)]
        lines.append("| " + " | ".join(cells) + " |")
    n = t.groupby("experiment")["seed"].nunique()
    return (f"**{title}**: worst-domain {metric}{unit} at the last round (round {rounds[-1]}), mean ± std over "
            f"{', '.join(map(str, sorted(set(n))))} seeds"
            + (f"; lead: {lead_text}, paired by seed, at the last round and over the mean of the last {len(tail)} "
               f"evaluations (rounds {tail[0]}–{tail[-1]}); a lead cell: the mean lead [its 95 % t-interval]"
               if lead else "")
            + ".\n\n" + "\n".join(lines) + "\n")


def plot_curves(c: pd.DataFrame, rows: dict[str, str], domains: Sequence[str], metric: str,
                titles: dict[str, str]) -> plt.Figure:
    """Worst-domain metric (top) and AgnosticFedAvg's λ (bottom) over rounds, mean ± std over seeds (bands).

    One column per experiment; the legend gives the number of seeds.
    """
    exps = list(dict.fromkeys(c["experiment"]))
    fig, axes = plt.subplots(2, len(exps), figsize=(4.5 * len(exps), 6), squeeze=False)
    for j, e in enumerate(exps):
        sub = c[c["experiment"] == e]
        for alg, label in rows.items():
            g = sub[sub["algorithm"] == alg].groupby("round")[f"worst_{metric}"]
            m, sd = g.mean(), g.std(ddof=1)
            plot_spread(axes[0, j], m.index, m.values, sd.values, band=True, fmt="-",
                        label=f"{label} ({int(g.count().max())} seeds)")
        axes[0, j].set(title=titles.get(e, e), xlabel="round", ylabel=f"worst-domain {metric}")
        axes[0, j].legend(fontsize=8)
        lam = sub[sub[f"lambda/{domains[0]}"].notna()].groupby("round")[[f"lambda/{d}" for d in domains]]
        lam_m, lam_s = lam.mean(), lam.std(ddof=1)
        for d in domains:
            plot_spread(axes[1, j], lam_m.index, lam_m[f"lambda/{d}"], lam_s[f"lambda/{d}"], band=True, fmt="-",
                        label=d)
        axes[1, j].set(xlabel="round", ylabel="λ (AgnosticFedAvg)")
        axes[1, j].legend(fontsize=8)
    fig.tight_layout()
    return fig


def stats_table(summary: dict[str, Any]) -> pd.DataFrame:
    """Ro et al. (2021) Table 3 from a Stack Overflow data summary.

    Rows clients / sentences / answers / questions, columns train / held-out / test.

    Raises
    ------
    ValueError
        If the summary has no statistics (``data.statistics: false``).
    """
    st = summary.get("statistics")
    if not st:
        raise ValueError("the data summary holds no split statistics (set data.statistics: true)")
    cols = [s for s in ("train", "held_out", "test") if s in st]
    return pd.DataFrame({s: [st[s][k] for k in ("clients", "sentences", "answers", "questions")] for s in cols},
                        index=["clients", "sentences", "answers", "questions"])


def _title(spec: dict[str, Any], name: str) -> str:
    paper = "Mohri et al. 2019" if spec["paper"] == "afl" else "Ro et al. 2021"
    return f"{spec['label']} ({paper}): {name}"


def _history_key(path: str | Path) -> tuple[str, str, int]:
    p = Path(path)
    return p.parents[2].name, p.parents[1].name, int(p.parent.name.split("~")[1])


def write_output(name: str, spec: dict[str, Any], experiments: dict[str, Any], runs: Sequence[str | Path],
                 summaries: Sequence[str | Path], out: dict[str, str | Path]) -> pd.DataFrame:
    """Build one named output of the ``agnostic_fedavg:`` section and write its files atomically.

    Parameters
    ----------
    name, spec : str, dict
        The output's name and config (``kind``: toy, curves, table, stats).
    experiments : dict
        Config of the experiments it reads.
    runs : sequence of path
        ``metrics.csv`` (tables) or ``history.csv`` (toy, curves) of its runs
        (``results/runs/agnostic_fedavg/<experiment>/<algorithm>/seed~<s>/``).
    summaries : sequence of path
        The experiments' data summaries (JSON of :func:`fedshift.papers.agnostic_fedavg.build_data`).
    out : dict
        ``csv``, ``md`` and, for toy / curves, ``pdf`` and ``png`` paths.

    Returns
    -------
    DataFrame
        What the csv holds.
    """
    import json

    sums = [json.loads(Path(s).read_text()) for s in summaries]
    title = _title(spec, name)
    kind = spec["kind"]
    if kind == "stats":
        t = stats_table(sums[0])
        md = f"**{title}**\n\n" + t.to_markdown() + "\n"
        t = t.reset_index(names="statistic")
    elif kind == "table":
        metrics = pd.concat([pd.read_csv(p) for p in runs], ignore_index=True)
        domains = sums[0]["domains"]
        t = domain_table(metrics, spec["rows"], domains, spec["metrics"])
        md = table_markdown(t, title)
    elif kind == "toy":
        hist = {_history_key(p): pd.read_csv(p) for p in runs}
        key = next(k for k in hist if "agnostic" in k[1])
        t = toy_curves(hist[key], sums[0]["truth"])
        last = t.iloc[-1]
        md = (f"**{title}**\n\nAfter {int(last['round'])} rounds: |w − w*| = {last['w_error']:.2e}, "
              f"max_i |λ_i − λ*_i| = {last['lambda_error']:.2e}; w* = {sums[0]['truth']['w_star']}, "
              f"λ* = {[round(v, 4) for v in sums[0]['truth']['lambda_star']]}, final λ = "
              f"{[round(float(last[c]), 4) for c in t.columns if c.startswith('lambda/')]}.\n")
        save_figure(plot_toy(t, sums[0]["truth"]), out["pdf"], out["png"], tight=True)
    else:  # curves
        hist = {_history_key(p): pd.read_csv(p) for p in runs}
        domains = sums[0]["domains"]
        metric = spec.get("metric", "accuracy")
        t = curves(hist, domains, metric)
        titles = {e: f"{e}: {experiments[e]['data'].get('domain_type', '')} partition" for e in experiments}
        kinds = {e: f"{experiments[e]['data'].get('domain_type') or e} partition" for e in experiments}
        md = curves_markdown(t, spec["rows"], metric, title, kinds)
        save_figure(plot_curves(t, spec["rows"], domains, metric, titles), out["pdf"], out["png"], tight=True)
    with atomic_write(out["csv"]) as fh:
        t.to_csv(fh, index=False)
    with atomic_write(out["md"]) as fh:
        fh.write(md)
    return t
