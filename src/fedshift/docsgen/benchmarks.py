"""The measurements page: Snakemake's per-job benchmark files and the benchmark scripts' records."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from fedshift.docsgen.results import provenance, read_claims
from fedshift.docsgen.text import flatten, csv_markdown, format_cell

__all__ = ["benchmark_summary", "benchmark_records", "benchmarks_markdown"]


def benchmark_summary(results: Path) -> pd.DataFrame:
    """The Snakemake ``benchmark:`` files of a results tree, summed per paper and stage.

    Parameters
    ----------
    results : Path
        The results tree (reads ``benchmarks/<paper>/<stage>/**/*.tsv``, Snakemake's columns ``s``, ``max_rss``
        and ``cpu_time``).

    Returns
    -------
    DataFrame
        Columns paper, stage (train, evaluate, experiment), jobs, wall_s (sum), cpu_s (sum) and max_rss_mb (the
        largest); empty when the tree holds no benchmark file.
    """
    rows = []
    for tsv in sorted((results / "benchmarks").glob("*/*/**/*.tsv")):
        parts = tsv.relative_to(results / "benchmarks").parts
        t = pd.read_csv(tsv, sep="\t")
        for r in t.itertuples(index=False):
            rows.append({"paper": parts[0], "stage": parts[1], "s": float(r.s), "cpu": float(r.cpu_time),
                         "rss": float(r.max_rss)})
    cols = ["paper", "stage", "jobs", "wall_s", "cpu_s", "max_rss_mb"]
    if not rows:
        return pd.DataFrame(columns=cols)
    df = pd.DataFrame(rows)
    out = df.groupby(["paper", "stage"], sort=True).agg(jobs=("s", "size"), wall_s=("s", "sum"), cpu_s=("cpu", "sum"),
                                                         max_rss_mb=("rss", "max")).reset_index()
    return out[cols]


def benchmark_records(results: Path) -> dict[str, pd.DataFrame]:
    """The JSON records the benchmark scripts wrote (``benchmarks/*.py --out``) into the results tree.

    Parameters
    ----------
    results : Path
        The results tree (reads ``benchmarks/*.json`` and ``bench/**/*.json``).

    Returns
    -------
    dict of str to DataFrame
        Path under the tree -> its scalar leaves as rows (``key`` dotted, ``value``); lists of scalars are joined.
    """
    out = {}
    files = sorted((results / "benchmarks").glob("*.json")) + sorted((results / "bench").rglob("*.json"))
    for path in files:
        rows = []
        for key, value in flatten(json.loads(path.read_text())):
            if isinstance(value, list) and all(not isinstance(v, Mapping | list) for v in value):
                value = ", ".join(format_cell(v) for v in value)
            elif isinstance(value, list):
                value = f"{len(value)} entries"
            rows.append({"key": key, "value": value})
        out[path.relative_to(results).as_posix()] = pd.DataFrame(rows, columns=["key", "value"])
    return out


def benchmarks_markdown(results: Path) -> str:
    """The measurements of a results tree as Markdown.

    Every job's (:func:`benchmark_summary`, with the scale per paper), then each benchmark script's record
    (:func:`benchmark_records`); from a committed snapshot (:mod:`fedshift.docsgen.snapshot`), the CPU seconds per
    paper it recorded.
    """
    stamp = results / "snapshot.json"
    if stamp.is_file():  # a committed snapshot keeps each paper's CPU seconds, not the benchmark files
        papers = json.loads(stamp.read_text())["papers"]
        rows = pd.DataFrame([{"paper": k, "scale": v["scale"], "runs": v["runs"], "cpu_s": v["cpu_s"]}
                             for k, v in papers.items()])
        return ("*From the committed snapshot: each paper's training and evaluation CPU seconds, summed from its "
                "run's benchmark files when the snapshot was taken.*\n\n" + csv_markdown(rows, max_rows=len(rows)))
    summary = benchmark_summary(results)
    records = benchmark_records(results)
    if summary.empty and not records:
        return (f"*Not generated: `{results.as_posix()}/benchmarks` holds no benchmark file. Every training and "
                "evaluation job writes one; build this site after a run (target `docs`).*\n")
    parts = []
    if not summary.empty:
        claims = read_claims(results)
        summary.insert(1, "scale", [provenance(results, p, claims)["scale"] for p in summary["paper"]])
        parts += ["### Jobs", "", csv_markdown(summary, max_rows=len(summary))]
    for rel, table in records.items():
        parts += [f"### `{rel}`", "", f"*Written by the benchmark script that names it; from `results/{rel}`.*", "",
                  csv_markdown(table, max_rows=80)]
    return "\n".join(parts)

