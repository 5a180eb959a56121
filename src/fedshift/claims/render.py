"""The verdict table in Markdown, the machine its runs were made on, and the README block it is written into."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from fedshift.claims.intervals import _num

__all__ = ["runs_machine", "claims_markdown", "rewrite_readme_block", "main"]


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


def _label(v: Any) -> str:
    return f"{v:g}" if isinstance(v, int | float | np.integer | np.floating) else str(v)


def _notes(r: Any) -> str:
    """The notes cell of a row: the bound or reason, the paper's number against our interval, CPU sensitivity."""
    parts = [str(r.note)] if isinstance(r.note, str) and r.note else []
    if r.paper_in_ci in ("inside", "outside"):
        parts.append(f"paper's value {r.paper_in_ci} our interval")
    if r.cpu_robust == "could flip":
        parts.append("could flip on another CPU (√2-wider replication interval undecided)")
    return "; ".join(parts)


def claims_markdown(t: pd.DataFrame, machine: str = "") -> str:
    """The verdict table in Markdown: one row per claim, the quoted sentence below the table.

    Parameters
    ----------
    t : DataFrame
        Output of :func:`evaluate_claims` (a file written before the columns ``note``, ``paper_in_ci``,
        ``cpu_robust`` and ``config`` existed renders with them empty).
    machine : str
        The machine the runs were made on (e.g. ``AMD EPYC (AVX512)``), named in the heading; empty: the table's
        ``machine`` column, if any.
    """
    t = t.copy()
    for col in ("note", "paper_in_ci", "cpu_robust", "config", "machine"):
        if col not in t.columns:
            t[col] = ""
        t[col] = t[col].fillna("").astype(str)
    scale = ", ".join(sorted(set(t["scale"]))) or "–"
    counts = t["verdict"].value_counts()
    needs = sorted(k for k in counts.index if str(k).startswith("needs data"))
    summary = ", ".join(f"{counts[k]} {k}" for k in ("reproduced", "not reproduced", "inconclusive", "not judged",
                                                      *needs, "not run") if k in counts)
    configs = sorted({c for c in t["config"] if c})
    machine = machine or "; ".join(sorted({m for m in t["machine"] if m}))
    made = "; ".join(x for x in (f"config {' | '.join(f'`{c}`' for c in configs)}" if configs else "",
                                 f"runs made on {machine}" if machine else "") if x)
    lines = [f"**Verdicts at {scale} scale** ({summary}; 95 % t-interval over seeds)"
             + (f" — {made}" if made else ""), "",
             "| claim | paper | where | quantity | paper | test | ours [95 % CI] | runs | scale | verdict | notes |",
             "|---|---|---|---|---:|---|---:|---:|---|---|---|"]
    def cell(x: Any) -> str:  # a Markdown table cell: a "|" inside would end it
        return str(x).replace("|", "\\|")

    for r in t.itertuples():
        ours = "–" if not math.isfinite(r.ours) else (
            f"{_num(r.ours)} [{_num(r.ci_low)}, {_num(r.ci_high)}]" if math.isfinite(r.ci_low) else _num(r.ours))
        paper_val = r.paper_value if isinstance(r.paper_value, str) else _num(float(r.paper_value))
        lines.append(f"| {cell(r.claim)} | {r.paper} | {cell(r.where)} | {cell(r.quantity)} | {cell(paper_val)} | "
                     f"{cell(r.test)} | {ours} | {r.n} | {r.scale} | **{r.verdict}** | {cell(_notes(r))} |")
    lines += ["", "Quoted claims:", ""]
    for cid, q in dict(zip(t["claim"].str.replace(r"\[.*\]$", "", regex=True), t["quote"], strict=True)).items():
        lines.append(f"- `{cid}`: “{q}”")
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


def _number_or_text(value: str) -> float | str:
    try:
        return float(value)
    except ValueError:
        return value


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m fedshift.claims README.md results/tables/claims.md [--block NAME]``: regenerate a verdicts block.

    Rewrites, atomically, the text between ``<!-- claims:begin ... -->`` and ``<!-- claims:end -->`` (or a named
    block's markers) of the README with the Markdown the target ``claims`` wrote, so that no claim's number is
    copied by hand. Given ``claims.csv`` instead, renders it (:func:`claims_markdown`), keeping only the claims of
    ``--papers`` when given (e.g. a longer scale that ran one paper).

    Returns
    -------
    int
        0 on success (errors raise).
    """
    import argparse
    from pathlib import Path

    from fedshift.io import atomic_write

    ap = argparse.ArgumentParser(prog="python -m fedshift.claims", description=main.__doc__.splitlines()[0])
    ap.add_argument("readme", type=Path)
    ap.add_argument("claims", type=Path, help="claims.md as written, or claims.csv (rendered, --papers applies)")
    ap.add_argument("--block", default="", help="a named block, <!-- claims[NAME]:begin --> (default: the unnamed one)")
    ap.add_argument("--papers", default="", help="with claims.csv: only these papers' claims (comma-separated)")
    args = ap.parse_args(argv)
    if args.claims.suffix == ".csv":
        t = pd.read_csv(args.claims, dtype={"paper_value": str, "note": str, "paper_in_ci": str, "cpu_robust": str,
                                            "config": str, "machine": str}, keep_default_na=False,
                        na_values={c: ["", "nan"] for c in ("ours", "ci_low", "ci_high")})
        t["paper_value"] = [_number_or_text(v) for v in t["paper_value"]]  # as evaluate_claims gave it
        wanted = [p for p in args.papers.split(",") if p]
        if wanted:
            if not set(wanted) <= set(t["paper"]):
                raise ValueError(f"--papers: {sorted(set(wanted) - set(t['paper']))} have no claims in {args.claims}")
            t = t[t["paper"].isin(wanted)]
        block = claims_markdown(t)
    elif args.papers:
        raise ValueError("--papers needs claims.csv (claims.md is already rendered)")
    else:
        block = args.claims.read_text(encoding="utf-8")
    text = rewrite_readme_block(args.readme.read_text(encoding="utf-8"), block, args.block)
    with atomic_write(args.readme) as fh:
        fh.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
