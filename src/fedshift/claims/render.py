"""The verdict table in Markdown, the machine its runs were made on, and the README block it is written into."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from fedshift.claims.compare import SECOND_COLUMNS, agreement_counts
from fedshift.claims.intervals import number_text
from fedshift.claims.multiplicity import claim_counts, multiplicity_text

__all__ = ["MARKS", "SECOND_COLUMNS", "runs_machine", "machines_text", "verdict_mark", "claims_markdown",
           "claims_summary", "rewrite_readme_block"]


def runs_machine(run_files: Sequence[Any]) -> str:
    """The CPUs a set of runs was made on, from their ``run.json`` (``environment.cpu``), for the verdict heading.

    Parameters
    ----------
    run_files : sequence of path
        ``run.json`` files; unreadable ones, and runs that record no CPU, are skipped.

    Returns
    -------
    str
        ``"<model> (<ATen kernel level>, portable_cpu on|off): <n> runs"`` per distinct machine, ``"; "``-joined,
        most runs first; empty for no readable file.
    """
    import json
    from collections import Counter

    seen: Counter[str] = Counter()
    for f in run_files:
        try:
            with open(f, encoding="utf-8") as fh:
                env = json.load(fh).get("environment") or {}
        except (OSError, ValueError):
            continue
        cpu = env.get("cpu") or {}
        if not cpu:
            continue
        portable = (env.get("reproducibility") or {}).get("portable_cpu")
        seen[f"{cpu.get('model') or '?'} ({cpu.get('torch_capability') or '?'}, portable_cpu "
             f"{'on' if portable else 'off'})"] += 1
    return "; ".join(f"{m}: {k} runs" for m, k in seen.most_common())


def machines_text(t: pd.DataFrame, column: str = "machine") -> str:
    """The machines behind a claims table, from its ``machine`` (or ``second_machine``) column, for a heading.

    Every row of one claims job carries the same :func:`runs_machine` text. A table gathered from several jobs
    (a snapshot that merged a run restricted to some papers, ``fedshift.docsgen.snapshot``) holds one text per job:
    each then names the papers it covers, so that two jobs on the same CPU do not read as one machine listed twice.
    The second run's text always names its papers, those whose rows it computed (``second_n`` > 0): it may repeat
    only some of them (``claims_papers``).

    Parameters
    ----------
    t : DataFrame
        A claims table with ``paper`` and ``column``.
    column : str
        ``"machine"`` (the run) or ``"second_machine"`` (the second run beside it).

    Returns
    -------
    str
        ``"; "``-joined texts, sorted; with more than one (or for ``second_machine``), each followed by
        ``" (<paper>, ...)"``; empty when the column is absent or empty.
    """
    if column not in t:
        return ""
    rows = t.assign(_m=t[column].fillna("").astype(str))
    rows = rows[rows["_m"] != ""]
    if column == "second_machine" and "second_n" in rows:  # the papers it repeated: rows it computed
        computed = rows[pd.to_numeric(rows["second_n"], errors="coerce").fillna(0) > 0]
        rows = computed if len(computed) else rows
    texts = sorted(set(rows["_m"]))
    if (len(texts) < 2 and column == "machine") or "paper" not in rows:
        return "; ".join(texts)
    return "; ".join(f"{m} ({', '.join(sorted(set(rows.loc[rows['_m'] == m, 'paper'].astype(str))))})"
                     for m in texts)


#: The colour mark of each verdict (the same in a terminal, on GitHub and on the docs site).
MARKS = {"reproduced": "🟢", "smaller than claimed": "🟠", "equivalent to zero": "🔵", "not reproduced": "🔴",
         "inconclusive": "⚪"}
_TEXT_COLUMNS = ("note", "paper_in_ci", "cpu_robust", "config", "machine", "direction", "effect", "second_verdict",
                 "second_machine", "agreement")
#: The columns of the multiplicity policy and the scale (:func:`fedshift.claims.adjust_multiplicity`): a table
#: that has them gets the columns "p · BH · Holm" and "work" and the claim counts above it.
_POLICY_TEXT = ("multiplicity", "family", "same_as", "category", "proxy", "exploratory", "work")


def _p(x: Any) -> str:
    """A p-value as the table prints it: two significant digits, ``< 0.0001`` below that."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return "–"
    if not math.isfinite(v):
        return "–"
    return "< 0.0001" if v < 1e-4 else f"{v:.2g}"


def _p_cell(r: Any) -> str:
    """``p · BH · Holm`` of a computed row (``exact`` for a deterministic one), "–" for a row without a test."""
    if getattr(r, "interval", "") == "exact" and r.verdict in MARKS:
        return "exact"
    if not (isinstance(r.p, int | float) and math.isfinite(r.p)):
        return "–"
    return f"{_p(r.p)} · {_p(r.p_bh)} · {_p(r.p_holm)}"


def _work_cell(r: Any) -> str:
    ratio = r.work_ratio
    if not isinstance(ratio, int | float) or not math.isfinite(ratio):
        return "–"
    return f"{ratio:.2g}×" if ratio < 0.995 else ("1×" if ratio < 1.005 else f"{ratio:.2g}×")


def _claim_cell(r: Any) -> str:
    """The claim's row name, with its marks: exploratory, proxy, and the row whose data it repeats."""
    marks = []
    if r.exploratory:
        marks.append("exploratory")
    if r.proxy:
        marks.append("proxy")
    if r.same_as:
        marks.append(f"same data as {r.same_as}")
    return _cell(r.claim) + (f" *({'; '.join(marks)})*" if marks else "")


def claims_summary(t: pd.DataFrame) -> list[str]:
    """The lines above the tables: claims (distinct comparisons) per category, and the multiplicity policy."""
    k = claim_counts(t)
    if k.empty:
        return []
    parts = ", ".join(f"{int(r['comparisons'])} {r['category']}" for r in k.to_dict("records"))
    expl = int(k["exploratory"].sum())
    ids = t["claim"].astype(str).str.split("[").str[0].nunique()
    return [f"**Claims**: {int(k['comparisons'].sum())} distinct comparisons ({parts}) from "
            f"{ids} claim ids in {int(k['rows'].sum())} rows"
            + (f"; {expl} of the comparisons are exploratory (chosen after the data were seen)" if expl else "")
            + ". A proxy is a setting the paper does not have and is not counted as the paper's claim.", "",
            multiplicity_text(t)]


def _notes(r: Any) -> str:
    """The notes of a row: the bound or reason, the paper's number against our interval, CPU sensitivity."""
    parts = [str(r.note)] if isinstance(r.note, str) and r.note else []
    if r.paper_in_ci in ("inside", "outside"):
        parts.append(f"paper's value {r.paper_in_ci} our interval")
    if r.cpu_robust == "could flip":
        parts.append("could flip on another CPU (√2-wider replication interval undecided)")
    return "; ".join(parts)


def _cell(x: Any) -> str:
    """A Markdown table cell: a "|" inside would end it, a line break would end the row."""
    return str(x).replace("|", "\\|").replace("\n", " ")


def _interval(ours: float, low: float, high: float) -> str:
    if not math.isfinite(ours):
        return "–"
    return f"{number_text(ours)} [{number_text(low)}, {number_text(high)}]" if math.isfinite(low) else number_text(ours)


def verdict_mark(verdict: str, could_flip: bool = False) -> str:
    """A verdict as the table shows it: its colour mark and the word in bold, † where it could flip with the CPU."""
    mark = MARKS.get(verdict, "")
    return f"{mark} **{verdict}**".strip() + (" †" if could_flip else "")


def _details(r: Any) -> str:
    """The expandable cell: the test and where in the paper (summary); quantity, notes, effect and quote inside."""
    import html

    extra = []
    if getattr(r, "category", ""):
        extra.append(f"Category: {r.category}.")
    if getattr(r, "work", ""):
        extra.append(f"Work against the paper's: {r.work}.")
    if getattr(r, "multiplicity", ""):
        extra.append(f"Multiplicity ({r.family} family): {r.multiplicity}." if getattr(r, "family", "")
                     else f"Multiplicity: {r.multiplicity}.")
    if getattr(r, "exploratory", ""):
        extra.append(f"Exploratory: {r.exploratory}.")
    if getattr(r, "proxy", ""):
        extra.append(f"Proxy: {r.proxy}.")
    alone = f" (alone: {r.direction})" if r.direction and r.direction != r.verdict else ""
    inner = [f"{r.quantity}." if r.quantity else "", f"Test {r.test}{alone}." if r.test else "",
             *extra,
             f"Paper: {r.paper_value}." if isinstance(r.paper_value, str) else "",
             f"{_notes(r)}." if _notes(r) else "", f"Effect: {r.effect}." if r.effect else "",
             f"“{r.quote}”"]
    body = html.escape(" ".join(x for x in inner if x), quote=False)
    summary = html.escape(f"{r.where} · {r.test}" if r.test else str(r.where), quote=False)
    return f"<details><summary>{_cell(summary)}</summary>{_cell(body)}</details>"


def _paper_cell(r: Any) -> str:
    number = getattr(r, "claimed", float("nan"))
    if isinstance(number, int | float) and math.isfinite(number):
        return number_text(float(number))
    return _cell(r.paper_value if isinstance(r.paper_value, str) else number_text(float(r.paper_value)))


def _second_summary(t: pd.DataFrame) -> list[str]:
    """The lines under a table with a second run: the agreement and every disagreement with both intervals."""
    k = agreement_counts(t)
    if not k["compared"]:
        return []
    machine = machines_text(t, "second_machine")
    lines = ["", f"**2nd run**{f' ({machine})' if machine else ''}: {k['same']} of {k['compared']} rows compared have "
             f"the same verdict; {k['kept']} of {k['decided']} decided rows keep theirs."]
    for r in t[t["agreement"] == "different"].itertuples():
        lines.append(f"- {_cell(r.claim)}: {_interval(r.ours, r.ci_low, r.ci_high)} at {int(float(r.n))} runs, "
                     f"**{r.verdict}**; 2nd run {_interval(r.second_ours, r.second_ci_low, r.second_ci_high)} at "
                     f"{int(float(r.second_n))} runs, "
                     f"**{r.second_verdict}**")
    return lines


def claims_markdown(t: pd.DataFrame, machine: str = "") -> str:
    """The verdict table in Markdown: per paper, one row per claim, the verdict first.

    Columns: the verdict (:data:`MARKS` colour and word; † where it could flip with the CPU), the claim, our value
    [95 % interval], the paper's value, the runs, the second run's verdict where the table has one
    (:func:`fedshift.claims.compare_runs`), and an expandable cell (``<details>``, summary: where in the paper)
    holding the quantity, the test, the notes, the effect's margin and reason, and the quoted sentence. Under a
    table with a second run: the agreement count and every disagreement with both intervals.

    Parameters
    ----------
    t : DataFrame
        Output of :func:`evaluate_claims` (a file written before the columns ``note``, ``paper_in_ci``,
        ``cpu_robust``, ``config``, ``direction`` and ``effect`` existed renders with them empty).
    machine : str
        The machine the runs were made on (e.g. ``AMD EPYC (AVX512)``), named in the heading; empty: the table's
        ``machine`` column, if any.
    """
    t = t.copy()
    for col in _TEXT_COLUMNS:
        if col not in t.columns:
            t[col] = ""
        t[col] = t[col].fillna("").astype(str)
    for col in ("claimed", "second_ours", "second_ci_low", "second_ci_high"):
        if col not in t.columns:
            t[col] = np.nan
    if "second_n" not in t.columns:
        t["second_n"] = 0
    scale = ", ".join(sorted(set(t["scale"]))) or "–"
    counts = t["verdict"].value_counts()
    needs = sorted(k for k in counts.index if str(k).startswith("needs data"))
    summary = ", ".join(f"{counts[k]} {k}" for k in (*MARKS, "not judged", *needs, "not yet judged",
                                                     "cannot be reproduced", "not run") if k in counts)
    configs = sorted({c for c in t["config"] if c})
    machine = machine or machines_text(t)
    made = "; ".join(x for x in (f"config {' | '.join(f'`{c}`' for c in configs)}" if configs else "",
                                 f"runs made on {machine}" if machine else "") if x)
    second = bool((t["second_verdict"] != "").any())
    policy = {"p", "p_bh", "p_holm", "work_ratio", *_POLICY_TEXT} <= set(t.columns)
    if policy:
        for col in _POLICY_TEXT:
            t[col] = t[col].fillna("").astype(str)
        for col in ("p", "p_bh", "p_holm", "work_ratio"):
            t[col] = pd.to_numeric(t[col], errors="coerce")
    lines = [f"**Verdicts at {scale} scale** ({summary}; 95 % t-interval over seeds)"
             + (f" — {made}" if made else ""), "",
             " · ".join(f"{m} {v}" for v, m in MARKS.items())
             + " (definitions: the verdicts page); † could flip on another CPU (√2-wider replication interval "
             "undecided)" + ("; 2nd run: the verdict of the second run" if second else "")
             + ("; p · BH · Holm: the p-value of the test behind the verdict, adjusted by Benjamini–Hochberg and by "
                "Holm; work: our rounds × clients × local steps × data fraction over the paper's" if policy else "")
             + "."]
    if policy:
        lines += [""] + claims_summary(t)
    head = ("| verdict | claim | ours [95 % CI] | paper's value | runs |" + (" 2nd run |" if second else "")
            + (" p · BH · Holm | work |" if policy else "") + " details |")
    rule = "|---|---|---:|---:|---:|" + ("---|" if second else "") + ("---:|---:|" if policy else "") + "---|"
    papers = list(dict.fromkeys(t["paper"]))
    for paper in papers:
        rows = t[t["paper"] == paper]
        lines += [""] + ([f"**{paper}**", ""] if len(papers) > 1 else []) + [head, rule]
        for r in rows.itertuples():
            cells = [verdict_mark(r.verdict, r.cpu_robust == "could flip"),
                     _claim_cell(r) if policy else _cell(r.claim), _interval(r.ours, r.ci_low, r.ci_high),
                     _paper_cell(r), str(r.n)]
            if second:
                cells.append(verdict_mark(r.second_verdict) if r.second_verdict else "–")
            if policy:
                cells += [_p_cell(r), _work_cell(r)]
            cells.append(_details(r))
            lines.append("| " + " | ".join(cells) + " |")
    if second:
        lines += _second_summary(t)
    return "\n".join(lines) + "\n"


def _block(name: str = "") -> re.Pattern[str]:
    tag = re.escape(f"claims[{name}]") if name else "claims"
    return re.compile(rf"(<!-- {tag}:begin[^>]*-->\n)(.*?)(<!-- {tag}:end -->)", re.S)


def rewrite_readme_block(readme: str, block: str, name: str = "") -> str:
    """Replace the text between ``<!-- claims:begin ... -->`` and ``<!-- claims:end -->`` with ``block``.

    Parameters
    ----------
    readme, block : str
        The README's text and the Markdown the target ``claims`` wrote.
    name : str
        A named block instead (``<!-- claims[NAME]:begin ... -->`` … ``<!-- claims[NAME]:end -->``), e.g. the
        verdicts of a longer scale next to the quick scale's.

    Raises
    ------
    ValueError
        If the README has no such block, or more than one.
    """
    pattern = _block(name)
    found = pattern.findall(readme)
    if len(found) != 1:
        tag = f"claims[{name}]" if name else "claims"
        raise ValueError(f"README must hold exactly one '<!-- {tag}:begin -->' … '<!-- {tag}:end -->' block, "
                         f"found {len(found)}")
    return pattern.sub(lambda m: m.group(1) + block.rstrip("\n") + "\n" + m.group(3), readme)
