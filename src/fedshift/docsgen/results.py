"""The results pages from a results tree: the verdicts, and per paper its provenance, tables and figures."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from fedshift.docsgen.papers import CITATIONS, short_authors, venue_short
from fedshift.docsgen.text import read_csv, csv_markdown

__all__ = ["PAPERS", "VERDICTS", "NOT_RESULTS", "read_claims", "verdict_counts", "verdict_counts_markdown",
           "run_records", "provenance", "provenance_markdown", "paper_results_markdown", "verdicts_markdown"]

#: The papers with a page, in the order of the README's table, and their titles (read from
#: :data:`fedshift.docsgen.papers.CITATIONS`, the one source of titles, authors and venues).
PAPERS = {
    **{paper: f"{c.name} — {short_authors(c)}, {c.title} ({venue_short(c)})" for paper, c in CITATIONS.items()},
    "shift_matrix": "Shift matrix — every registered algorithm under every shift",
}
VERDICTS = ("reproduced", "smaller than claimed", "equivalent to zero", "not reproduced", "inconclusive", "not judged",
            "needs data", "not yet judged", "cannot be reproduced", "not run")
#: A tidy table without its own Markdown is shown inline up to this many rows and columns; a longer or wider one is
#: a download link (13 columns of a run listing do not fit the content column at 1,280 px: tests/unit/test_docs_width).
SHOWN_ROWS = 12
SHOWN_COLUMNS = 8
#: Scales whose outputs are not results (rehearsal and smoke runs check the workflow, not the papers).
NOT_RESULTS = ("rehearsal", "smoke")


def read_claims(results: Path) -> pd.DataFrame | None:
    """``results/tables/claims.csv`` as :func:`fedshift.claims.evaluate_claims` wrote it, or None when absent."""
    path = results / "tables" / "claims.csv"
    if not path.exists():
        return None
    from fedshift.claims import read_claims_csv

    return read_claims_csv(path)


def _seeds_text(n: pd.Series) -> str:
    """The seed counts of a paper's computed rows: ``"3"`` or ``"3–19"`` (``"—"`` when none ran)."""
    counts = sorted({int(v) for v in pd.to_numeric(n, errors="coerce").dropna() if v > 0})
    if not counts:
        return "—"
    return str(counts[0]) if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"


def _not_judged_by_run(group: pd.DataFrame) -> bool:
    """Whether a paper's claims were left out of the run (``claims_papers``): its rows say so, or need data."""
    from fedshift.claims import NOT_AMONG_CLAIMS_PAPERS

    if "note" not in group:
        return False
    verdict, note = group["verdict"].astype(str), group["note"].fillna("").astype(str)
    left_out = verdict.eq("not run") & note.eq(NOT_AMONG_CLAIMS_PAPERS)
    return bool(left_out.any() and (left_out | verdict.str.startswith("needs data")).all())


def verdict_counts(claims: pd.DataFrame) -> pd.DataFrame:
    """Claims per paper and verdict, with the scale, seeds and configuration that produced them.

    Parameters
    ----------
    claims : DataFrame
        The claims table (:func:`read_claims`).

    Returns
    -------
    DataFrame
        One row per paper (in the claims' order): ``scale`` (the distinct scales, comma-joined), ``seeds`` (the range
        of the rows' run counts ``n``, ``"—"`` when none ran), ``config`` (the overlays the claims job was run with,
        empty for a table written before that column) and one column per verdict of :data:`VERDICTS` (each row
        names its scale, seeds and config), and ``exploratory``: the paper's exploratory comparisons (claim key
        ``exploratory``), which the verdict columns leave out. Where the table marks rows with the same data
        (``same_as``), a comparison is counted once, at its first row. A paper the run did not judge (its claims ``not run`` as ``not among
        claims_papers``, or needing data: a run restricted to other papers) has no row.
    """
    rows = []
    if "same_as" in claims:  # rows with the same data are one comparison: counted once, at their first row
        claims = claims[claims["same_as"].fillna("").astype(str).eq("")]
    for paper, group in claims.groupby("paper", sort=False):
        if _not_judged_by_run(group):
            continue
        exploratory = group["exploratory"].fillna("").astype(str).ne("") if "exploratory" in group else \
            pd.Series(False, index=group.index)
        # "needs data: <dataset>" is one column, whatever the dataset; exploratory rows are counted apart
        counts = group.loc[~exploratory, "verdict"].astype(str).str.replace(
            r"^needs data.*", "needs data", regex=True).value_counts()
        config = sorted({str(c) for c in group["config"] if str(c)}) if "config" in group else []
        rows.append({"paper": paper, "scale": ", ".join(sorted(set(group["scale"].astype(str)))),
                     "seeds": _seeds_text(group["n"]) if "n" in group else "—",
                     "config": "; ".join(config), **{v: int(counts.get(v, 0)) for v in VERDICTS},
                     "exploratory": int(exploratory.sum())})
    return pd.DataFrame(rows, columns=["paper", "scale", "seeds", "config", *VERDICTS, "exploratory"])


def claim_counts_markdown(claims: pd.DataFrame) -> list[str]:
    """Claims counted as claims (:func:`fedshift.claims.claim_counts`): a Markdown table per category, the policy.

    Rows with the same data are one comparison; the table counts comparisons per category (paper settings, reduced
    settings, ..., proxy), how many of them are decided, and how many of those the multiplicity corrections keep
    (Benjamini–Hochberg, the policy; Holm, the sensitivity check); the line under it states the policy with its
    numbers (:func:`fedshift.claims.multiplicity_text`).

    Parameters
    ----------
    claims : DataFrame
        The claims table with the columns of :func:`fedshift.claims.adjust_multiplicity`.

    Returns
    -------
    list of str
        The lines (no trailing blank line).
    """
    from fedshift.claims import claim_counts, multiplicity_text

    k = claim_counts(claims)
    lines = ["| claims by category | comparisons | of them exploratory | rows | decided | kept under BH | "
             "kept under Holm |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in k.to_dict("records"):
        lines.append(f"| {r['category']} | {r['comparisons']} | {r['exploratory']} | {r['rows']} | {r['decided']} | "
                     f"{r['kept under BH']} | {r['kept under Holm']} |")
    total = k[["comparisons", "exploratory", "rows", "decided", "kept under BH", "kept under Holm"]].sum()
    lines.append("| **all** | " + " | ".join(f"**{int(total[c])}**" for c in total.index) + " |")
    ids = claims["claim"].astype(str).str.split("[").str[0].nunique()
    return lines + ["", f"A comparison is one set of data: rows with the same per-seed sample count once ({ids} "
                        "claim ids). *Paper settings*: our work (rounds × clients × local steps × data fraction) at "
                        "least the paper's; *reduced settings*: less; *scale not stated*: the paper gives no training "
                        "length to compare with; a *proxy* is a setting the paper does not have, never counted as "
                        "its claim; *exploratory* comparisons were chosen after the data were seen.", "",
                    multiplicity_text(claims)]


def claim_counts_line(claims: pd.DataFrame) -> str:
    """The claim counts of :func:`claim_counts_markdown` in one line, for the README (the page has the table)."""
    from fedshift.claims import claim_counts

    k = claim_counts(claims)
    cats = ", ".join(f"{r['category']} {r['comparisons']}" for r in k.to_dict("records"))
    return (f"**Claims**: {int(k['comparisons'].sum())} comparisons (rows with the same data count once) in "
            f"{int(k['rows'].sum())} rows: {cats}; {int(k['exploratory'].sum())} of them exploratory. Of the "
            f"{int(k['decided'].sum())} decided, Benjamini–Hochberg at 5 % keeps {int(k['kept under BH'].sum())}, "
            f"Holm {int(k['kept under Holm'].sum())}.")


def verdict_counts_markdown(claims: pd.DataFrame, compact: bool = False) -> str:
    """The verdict counts per paper as a Markdown table (the README's results at a glance).

    One row per paper naming its scale, seeds (the range of the claims' run counts) and configuration, a total row,
    and a line naming the machine(s) the runs were made on (the claims table's ``machine`` column), since a verdict
    can move with the CPU's instruction set (:mod:`fedshift.claims`, column ``cpu_robust``). So that the table fits a
    page's column (the docs site at 1,280 px), a scale or configuration shared by every paper is stated once in a
    line above it instead of a column, and a verdict no paper has is named in a line below it instead of a column of
    zeros.

    Parameters
    ----------
    claims : DataFrame
        The claims table (:func:`read_claims`).
    compact : bool
        The claim counts in one line (:func:`claim_counts_line`, the README's block) instead of their table and
        the policy's paragraph (:func:`claim_counts_markdown`, the verdicts page).
    """
    from fedshift.claims import machines_text

    counts = verdict_counts(claims)
    shared = {k: counts[k].iloc[0] for k in ("scale", "config") if len(counts) and counts[k].nunique() == 1}
    columns = [k for k in ("scale", "seeds", "config") if k not in shared]
    verdicts = [v for v in VERDICTS if counts[v].sum() > 0] or list(VERDICTS)
    shown = [*verdicts, *(["exploratory"] if counts["exploratory"].sum() > 0 else [])]
    lines = []
    if shared:
        said = [f"scale **{shared['scale']}**" if "scale" in shared else "",
                f"config `{shared['config']}`" if shared.get("config") else ""]
        lines += ["Every paper: " + ", ".join(x for x in said if x) + ".", ""] if any(said) else []
    align = {"scale": "---", "seeds": "---:", "config": "---"}
    lines += ["| paper | " + " | ".join([*columns, *shown]) + " |",
              "|---|" + "".join(align[k] + "|" for k in columns) + "---:|" * len(shown)]
    for r in counts.to_dict("records"):
        cells = {"scale": r["scale"], "seeds": r["seeds"], "config": f"`{r['config']}`" if r["config"] else ""}
        lines.append(f"| {r['paper']} | " + " | ".join([*(str(cells[k]) for k in columns),
                                                        *(str(r[v]) for v in shown)]) + " |")
    total = counts[[*VERDICTS, "exploratory"]].sum()
    lines.append("| **all** | " + "".join(" |" for _ in columns) + " "
                 + " | ".join(f"**{int(total[v])}**" for v in shown) + " |")
    unused = [v for v in VERDICTS if v not in verdicts]
    if unused:
        lines += ["", "No paper has a verdict *" + "*, *".join(unused) + "*."]
    if {"category", "same_as", "p_bh", "p_holm", "family"} <= set(claims.columns):
        repeats = int(claims["same_as"].fillna("").astype(str).ne("").sum())
        said = (f"The verdicts count comparisons: {repeats} rows that repeat an earlier row's data are not counted "
                "again" + ("; *exploratory* counts the comparisons chosen after the data were seen, which the "
                           "verdict columns leave out" if counts["exploratory"].sum() > 0 else "") + ".")
        lines += ["", said + " " + claim_counts_line(claims)] if compact else \
            ["", said, "", *claim_counts_markdown(claims)]
    machines = machines_text(claims)
    if machines:
        lines += ["", "Runs made on " + machines + "."]
    if "agreement" in claims:  # a second run's verdicts beside (fedshift.claims.compare_runs)
        from fedshift.claims import agreement_counts

        k = agreement_counts(claims.assign(agreement=claims["agreement"].fillna("").astype(str)))
        second = machines_text(claims, "second_machine")
        lines += ["", f"Second run ({second or 'machine not recorded'}): {k['same']} of {k['compared']} "
                  f"rows compared have the same verdict; {k['kept']} of {k['decided']} decided rows keep theirs."]
    return "\n".join(lines) + "\n"


def run_records(results: Path, paper: str) -> list[dict[str, Any]]:
    """The ``run.json`` records of one paper's runs under ``results/runs/<paper>``, sorted by path."""
    return [json.loads(p.read_text()) for p in sorted((results / "runs" / paper).glob("*/*/seed~*/run.json"))]


def provenance(results: Path, paper: str, claims: pd.DataFrame | None = None) -> dict[str, Any]:
    """What produced one paper's results: scale, seeds, rounds and machine, read from its runs and tables.

    Parameters
    ----------
    results : Path
        The results tree.
    paper : str
        The paper's name (its folder under ``results/runs`` and ``results/tables``).
    claims : DataFrame, optional
        The claims table, whose ``scale`` column names the scale; without it (or without claims for the paper), a
        table with a ``rehearsal`` column or a run marked ``scale: rehearsal`` gives "rehearsal", else "unknown".

    Returns
    -------
    dict
        A snapshot's tree (``snapshot.json``, no run files) gives the provenance recorded when it was taken.
        ``scale``, ``runs`` (count), ``seeds`` (sorted distinct seeds), ``rounds`` (sorted distinct values),
        ``machines`` (sorted distinct descriptions: CPU model, torch's instruction-set level, GPU model when used,
        the portable-CPU switch), ``is_result`` (False at rehearsal and smoke scale) and ``commits`` (the git
        commits the runs were made at, shortened).
    """
    records = run_records(results, paper)
    stamped = _stamped(results, paper)
    if stamped is not None and not records:  # a committed snapshot keeps the provenance, not the run.json files
        return stamped
    scales = set()
    if claims is not None and paper in set(claims["paper"]):
        scales |= set(claims.loc[claims["paper"] == paper, "scale"].astype(str))
    if any(r.get("scale") == "rehearsal" for r in records):
        scales.add("rehearsal")
    for csv in sorted((results / "tables" / paper).glob("*.csv")):
        if "rehearsal" in read_csv(csv).columns:
            scales.add("rehearsal")
    machines = set()
    for r in records:
        env = r.get("environment", {})
        cpu = env.get("cpu", {})
        text = f"{cpu.get('model', 'unknown CPU')} ({cpu.get('torch_capability', '?')} kernels)"
        if env.get("gpu"):
            text = f"{env['gpu']} (CUDA {env.get('cuda', '?')}) on {text}"
        text += ", portable-CPU switch " + ("on" if env.get("reproducibility", {}).get("portable_cpu") else "off")
        machines.add(text)
    scale = ", ".join(sorted(scales)) or "unknown"
    return {"scale": scale, "runs": len(records), "seeds": sorted({int(r["seed"]) for r in records if "seed" in r}),
            "rounds": sorted({int(r["rounds"]) for r in records if isinstance(r.get("rounds"), int | float)}),
            "machines": sorted(machines), "is_result": not any(s in NOT_RESULTS for s in scales),
            "commits": sorted({str(r["git_commit"])[:10] for r in records if r.get("git_commit")})}


def _stamped(results: Path, paper: str) -> dict[str, Any] | None:
    """A snapshot's recorded provenance of one paper (:mod:`fedshift.docsgen.snapshot`), or None."""
    stamp = results / "snapshot.json"
    if not stamp.is_file():
        return None
    prov = json.loads(stamp.read_text())["papers"].get(paper)
    return None if prov is None else {k: v for k, v in prov.items() if k != "cpu_s"}


def _span(values: Sequence[int]) -> str:
    if not values:
        return "–"
    return ", ".join(map(str, values)) if len(values) <= 6 else f"{values[0]}–{values[-1]} ({len(values)} values)"


def provenance_markdown(prov: Mapping[str, Any]) -> str:
    """The admonition that opens a generated results section (scale, runs, seeds, rounds, machine)."""
    kind = "note" if prov["is_result"] else "danger"
    head = f"Made at **{prov['scale']}** scale" if prov["is_result"] else \
        f"**{prov['scale'].upper()} — not a result**: made at {prov['scale']} scale to check the workflow"
    lines = [f'!!! {kind} "Generated from the results tree"', f"    {head}, from {prov['runs']} runs "
             f"(seeds {_span(prov['seeds'])}; rounds {_span(prov['rounds'])}).",
             "    Machine: " + ("; ".join(prov["machines"]) or "not recorded") + ".",
             "    Configuration: the overlays of that scale (see Concepts, Scales) at code version "
             + (", ".join(f"`{c}`" for c in prov.get("commits", [])) or "not recorded")
             + "; every run's resolved hyper-parameters are in its `run.json`."]
    return "\n".join(lines) + "\n"


def _title(stem: str) -> str:
    return stem.replace("_", " ").capitalize()


def paper_results_markdown(results: Path, paper: str, figure_prefix: str, claims: pd.DataFrame | None = None,
                           heading: str = "###") -> str:
    """One paper's generated results: provenance, every table and every figure of the results tree.

    A table is shown as the pipeline's own Markdown (``<name>.md``: the paper's layout, with the paper's published
    values beside ours where the paper's outputs print them) when it exists, else, up to :data:`SHOWN_ROWS` rows
    and :data:`SHOWN_COLUMNS` columns, rendered from its tidy csv (:func:`csv_markdown`); every tidy csv is linked
    for download (served under ``generated/tables/``, beside the figures). Every ``.png`` under ``results/figures/<paper>/`` follows as an
    image.

    Parameters
    ----------
    results : Path
        The results tree.
    paper : str
        The paper's name.
    figure_prefix : str
        URL prefix (relative to the page) under which the site serves ``results/figures`` (see
        :func:`site_figures`).
    claims : DataFrame, optional
        The claims table, for the scale and this paper's verdicts.
    heading : str
        The Markdown heading level of each table and figure.

    Returns
    -------
    str
        Markdown; a sentence naming the target to run when the tree holds nothing of the paper.
    """
    tables = sorted((results / "tables" / paper).glob("*.csv"))
    figures = sorted((results / "figures" / paper).glob("*.png"))
    if not tables and not figures:
        if (results / "snapshot.json").is_file():
            return (f"*Not in the committed snapshot: its run made no table or figure of `{paper}`. Run "
                    f"`snakemake --cores all {paper} docs --configfile config/quick.yaml` to render your own, or take "
                    "a snapshot of a whole run (`python -m fedshift.docsgen snapshot`).*\n")
        return (f"*Not generated: the results tree `{results.as_posix()}` holds no table or figure of `{paper}`. "
                f"Run `snakemake --cores all {paper} docs` (add `--configfile config/quick.yaml` for the quick "
                "scale); the target `docs` renders this section from what it built.*\n")
    parts = [provenance_markdown(provenance(results, paper, claims))]
    if claims is not None and paper in set(claims["paper"]):
        from fedshift.claims import claims_markdown

        parts += [f"{heading} Verdicts", "", claims_markdown(claims[claims["paper"] == paper])]
    # the tidy tables are served beside the figures (generated/tables next to generated/figures)
    table_prefix = (figure_prefix.removesuffix("figures") + "tables" if figure_prefix.endswith("figures")
                    else figure_prefix + "/../tables")
    for csv in tables:
        md = csv.with_suffix(".md")
        tidy = read_csv(csv)
        if md.exists():
            body = md.read_text()
        elif len(tidy) <= SHOWN_ROWS and tidy.shape[1] <= SHOWN_COLUMNS:
            body = csv_markdown(tidy)
        else:  # a long or wide tidy table is data, not reading: the figure shows it, the csv is a link
            body = (f"*{len(tidy)} rows × {tidy.shape[1]} columns, too many to read here: the tidy data are linked "
                    "below.*\n")
        rel = csv.relative_to(results / "tables").as_posix()
        parts += [f"{heading} {_title(csv.stem)}", "", body, "",
                  f"Tidy data: [`{csv.name}`]({table_prefix}/{rel}) ({len(tidy)} rows, `results/tables/{rel}`).", ""]
    for png in figures:
        rel = png.relative_to(results / "figures").as_posix()
        parts += [f"{heading} {_title(png.stem)} (figure)", "", f"![{png.stem}]({figure_prefix}/{rel})", "",
                  f"*`results/figures/{rel}`*", ""]
    return "\n".join(parts)


def verdicts_markdown(results: Path) -> str:
    """The generated verdicts page body: counts per paper, then every claim (:func:`fedshift.claims.claims_markdown`).

    Parameters
    ----------
    results : Path
        The results tree (reads ``tables/claims.csv``).
    """
    claims = read_claims(results)
    if claims is None:
        return (f"*Not generated: `{results.as_posix()}/tables/claims.csv` does not exist. Run `snakemake --cores all "
                "claims docs` (with the overlay of the scale you want) to check every claim and render this page.*\n")
    from fedshift.claims import claims_markdown

    scales = sorted(set(claims["scale"].astype(str)))
    warn = "" if not any(s in NOT_RESULTS for s in scales) else \
        '!!! danger "Not results"\n    Computed at ' + ", ".join(scales) + " scale: every verdict is *not judged*.\n\n"
    return (warn + "## Counts per paper\n\n" + verdict_counts_markdown(claims) + "\n## Every claim\n\n"
            + claims_markdown(claims))

