"""The committed results snapshot: a named run's tidy tables and figures, stamped, that the site renders without a run.

A reader who has not run the workflow has no ``results/``; the site then renders its results pages from the
snapshot committed under ``docs/results/snapshot/`` (:data:`SNAPSHOT`). :func:`take_snapshot` makes it from a
results tree after a run::

    python -m fedshift.docsgen snapshot results docs/results/snapshot --name quick-2026-11

It copies the small files a reader's pages are made of — every table's tidy ``.csv`` and the pipeline's ``.md``
beside it, ``tables/claims.csv``, every figure's ``.png`` — and writes ``snapshot.json``: the run's name, scale,
commit, machine and date, each paper's provenance as :func:`~fedshift.docsgen.results.provenance` read it from the
runs' ``run.json`` files (which stay behind: there are hundreds), and the per-paper CPU of the run's benchmark files.
It also writes the rendered results sections into ``pages/`` (Markdown a reader of the repository can open without
building the site); a test holds them equal to what :func:`snapshot_pages` makes from the committed snapshot. When
the rendering code changes (the verdict table's layout, say), ``python -m fedshift.docsgen snapshot-pages`` rewrites
them from the committed files alone, no run needed.
"""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

__all__ = ["SNAPSHOT", "STAMP", "is_snapshot", "read_stamp", "take_snapshot", "add_second_run", "snapshot_pages",
           "write_snapshot_pages", "source_note", "docs_results"]

#: Where the committed snapshot lies, under the repository root.
SNAPSHOT = "docs/results/snapshot"
#: The stamp file of a snapshot.
STAMP = "snapshot.json"
_COPIED = ("tables/**/*.csv", "tables/**/*.md", "figures/**/*.png")
#: A figure larger than this (bytes) is stored with a palette of 256 colours (a heatmap of the matrix is ~400 KB as
#: matplotlib writes it in full colour, ~4 times less with a palette; the repository keeps small files only).
COMPACT_PNG_BYTES = 200_000


def _compact_png(src: Path, dst: Path) -> None:
    """Write ``src`` to ``dst`` as an optimised palette PNG (Pillow's median-cut quantiser), unless that is larger."""
    from PIL import Image

    with Image.open(src) as im:
        im.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(dst, optimize=True)
    if dst.stat().st_size >= src.stat().st_size:
        shutil.copyfile(src, dst)


def is_snapshot(results: Path) -> bool:
    """Whether a results tree is a snapshot (holds ``snapshot.json``), not a run's own ``results/``."""
    return (results / STAMP).is_file()


def read_stamp(results: Path) -> dict[str, Any] | None:
    """The snapshot's stamp (:func:`take_snapshot`), or None for a run's own results tree."""
    return json.loads((results / STAMP).read_text()) if is_snapshot(results) else None


def _commit(root: Path) -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short=10", "HEAD"], cwd=root, capture_output=True, text=True,
                             check=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out.stdout.strip()


def _papers(results: Path) -> list[str]:
    names = {p.name for base in ("tables", "figures", "runs") for p in (results / base).glob("*") if p.is_dir()}
    return sorted(names)


def take_snapshot(results: Path, out: Path, *, name: str, root: Path, date: str | None = None,
                  add: bool = False, scale: str | None = None) -> dict[str, Any]:
    """Copy a run's tables and figures into ``out`` and stamp it.

    A snapshot may gather several named runs (the quick papers and the quick shift matrix are separate runs of
    different lengths): with ``add`` the papers of ``results`` replace only their own files and provenance, and the
    other papers of the snapshot stay as they were, each stamped with the run it came from.

    Parameters
    ----------
    results : Path
        The run's results tree (``results/``).
    out : Path
        The snapshot folder; replaced as a whole (its old files are removed first).
    name : str
        The run's name, printed on every page rendered from the snapshot.
    root : Path
        The repository root (its git commit is stamped when the runs do not record one).
    date : str, optional
        ISO date of the snapshot (default: today, UTC).
    add : bool
        Merge into the snapshot in ``out`` (which must exist) instead of replacing it: the new run's papers (and its
        ``tables/claims.csv``, when it wrote one) replace theirs, the other papers are kept.
    scale : str, optional
        The scale the run was made at, for papers whose provenance cannot tell (a paper without claims whose runs
        do not record it, as the shift matrix's: "unknown" otherwise).

    Returns
    -------
    dict
        The stamp written to ``out/snapshot.json``: ``name``, ``date``, ``scale`` (the scales of the papers'
        provenance, comma-joined), ``commits`` (the runs' git commits, else the repository's), ``machines``,
        ``papers`` (paper -> provenance with ``cpu_s``, the training and evaluation CPU seconds of its benchmark
        files, and ``snapshot`` and ``date``, the name and date of the run it came from) and ``files`` (how many
        tables and figures the snapshot holds). With several runs, ``name`` joins their names and ``date`` is the
        newest.

    Raises
    ------
    FileNotFoundError
        When the tree holds no table (nothing to show).
    ValueError
        When ``out`` lies inside ``results`` or is ``results`` itself.
    FileNotFoundError
        Also with ``add``, when ``out`` holds no snapshot to add to.
    """
    from fedshift.docsgen.benchmarks import benchmark_summary
    from fedshift.docsgen.results import provenance, read_claims

    results, out = results.resolve(), out.resolve()
    if out == results or results in out.parents:
        raise ValueError(f"snapshot folder {out} lies inside the results tree {results}")
    files = sorted({p for pattern in _COPIED for p in results.glob(pattern) if p.is_file()})
    if not any(p.suffix == ".csv" for p in files):
        raise FileNotFoundError(f"{results}/tables holds no table: nothing to snapshot")
    claims = read_claims(results)
    bench = benchmark_summary(results)
    date = date or datetime.now(UTC).date().isoformat()
    papers = {}
    for paper in _papers(results):
        prov = provenance(results, paper, claims)
        if scale and prov["scale"] == "unknown":
            prov["scale"] = scale
        cpu = bench.loc[bench["paper"] == paper, "cpu_s"].sum() if not bench.empty else 0.0
        papers[paper] = {**prov, "cpu_s": round(float(cpu), 1), "snapshot": name, "date": date}
    kept: dict[str, Any] = {}
    if add:
        old = read_stamp(out)
        if old is None:
            raise FileNotFoundError(f"{out} holds no snapshot ({STAMP}) to add the run {name!r} to")
        for paper in papers:  # the new run's papers replace theirs
            for base in ("tables", "figures"):
                shutil.rmtree(out / base / paper, ignore_errors=True)
        kept = {p: {"snapshot": old["name"], "date": old["date"], **v} for p, v in old["papers"].items()
                if p not in papers}
        papers = dict(sorted({**kept, **papers}.items()))
        shutil.rmtree(out / "pages", ignore_errors=True)
    elif out.exists():
        shutil.rmtree(out)
    # verdicts: with add, the new run's rows replace those of its own papers only (a FedMM-only run judges FedMM
    # and lists the other papers' claims as not among its claims_papers)
    old_claims = read_claims(out) if add else None
    for src in files:
        dst = out / src.relative_to(results)
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.suffix == ".png" and src.stat().st_size > COMPACT_PNG_BYTES:
            _compact_png(src, dst)
        else:
            shutil.copyfile(src, dst)
    if old_claims is not None and claims is not None:
        from fedshift.claims import claims_markdown

        merged = _merged_claims(old_claims, claims, set(papers) - set(kept))
        merged.to_csv(out / "tables" / "claims.csv", index=False)
        (out / "tables" / "claims.md").write_text(claims_markdown(merged))  # as the claims rule writes it
    runs = _joined(list(papers.values()))  # the runs behind every paper, as each page's note names its own
    held = sum(1 for base in ("tables", "figures") for f in (out / base).rglob("*") if f.is_file())
    stamp = {"name": runs["name"], "date": runs["date"], "scale": runs["scale"],
             "commits": runs["commits"] or [_commit(root)],
             "machines": runs["machines"] or [platform.processor() or platform.machine()],
             "papers": papers, "files": held}
    (out / STAMP).write_text(json.dumps(stamp, indent=1, ensure_ascii=False) + "\n")
    write_snapshot_pages(out)
    return stamp


def write_snapshot_pages(snapshot: Path) -> None:
    """Replace ``snapshot/pages`` with what :func:`snapshot_pages` makes from the snapshot's own files."""
    shutil.rmtree(snapshot / "pages", ignore_errors=True)
    for rel, text in snapshot_pages(snapshot):
        (snapshot / "pages" / rel).parent.mkdir(parents=True, exist_ok=True)
        (snapshot / "pages" / rel).write_text(text)


def add_second_run(snapshot: Path, second: Path) -> pd.DataFrame:
    """Put a second run's verdicts beside the snapshot's rows that run judged.

    The second run (the same claims again, e.g. under ``portable_cpu``) is compared with the snapshot's own
    verdicts by :func:`fedshift.claims.compare_runs`, so that it needs only the second run's ``claims.csv``, not
    the first run's results tree. The rows it computed a verdict for get its columns; every other row keeps what it
    had, an earlier second run's columns included, so that a second run made in parts (some rows' runs first)
    adds up row by row. ``tables/claims.md`` and ``pages/`` are rewritten; the tables, figures and stamp are not
    touched.

    Parameters
    ----------
    snapshot : Path
        A snapshot folder (:func:`take_snapshot`) holding ``tables/claims.csv``.
    second : Path
        The second run's ``claims.csv``.

    Returns
    -------
    DataFrame
        The snapshot's new claims table (as written), with :data:`~fedshift.claims.render.SECOND_COLUMNS`.

    Raises
    ------
    FileNotFoundError
        When ``snapshot`` is no snapshot or holds no ``tables/claims.csv``.
    ValueError
        When the second run computed no verdict, or judged its papers at another scale than the snapshot
        (:func:`~fedshift.claims.compare_runs`).
    """
    from fedshift.claims import COMPUTED, claims_markdown, compare_runs, read_claims_csv
    from fedshift.claims.render import SECOND_COLUMNS
    from fedshift.io import atomic_write

    table = snapshot / "tables" / "claims.csv"
    if not is_snapshot(snapshot) or not table.is_file():
        raise FileNotFoundError(f"{snapshot} holds no snapshot with tables/claims.csv to add a second run to")
    old, new = read_claims_csv(table), read_claims_csv(second)
    judged = set(new.loc[new["verdict"].isin(COMPUTED), "claim"])
    if not judged:
        raise ValueError(f"{second} computes no verdict: nothing to compare")
    mine = old["claim"].isin(judged)
    compared = compare_runs(old[mine], new[new["claim"].isin(judged)])
    compared["second_machine"] = _part_text(old, mine, compared["second_machine"])
    out = old.reindex(columns=[*old.columns, *(c for c in SECOND_COLUMNS if c not in old.columns)])
    for column in SECOND_COLUMNS:  # numbers stay numbers (as the snapshot holds them), text stays text
        if pd.api.types.is_numeric_dtype(compared[column]):
            out[column] = pd.to_numeric(out[column], errors="coerce").astype(float)
            out.loc[mine, column] = compared[column].to_numpy(dtype=float)
        else:
            out[column] = out[column].astype(object).where(out[column].notna(), "")
            out.loc[mine, column] = compared[column].to_numpy()
    with atomic_write(table) as fh:
        out.to_csv(fh, index=False)
    with atomic_write(snapshot / "tables" / "claims.md") as fh:
        fh.write(claims_markdown(out))  # as the claims rule writes it
    write_snapshot_pages(snapshot)
    return out


def _part_text(old: pd.DataFrame, mine: pd.Series, texts: pd.Series) -> list[str]:
    """The new part's ``second_machine`` texts, told apart from an earlier part's identical text.

    Each part of a second run names its machine and its own run count (``"...: 32 runs"``), the same on every row
    it judged. Rows outside this part that carry the same text come from another run (one run's rows are all
    added at once), and the headings would join the two into one run of that many
    (:func:`fedshift.claims.machines_text` joins equal texts); so this part's text then gets ``", part <k>"``
    (k: one more than the runs already carrying that text).
    """
    if not {"second_machine", "second_n"} <= set(old.columns):  # no earlier second run
        return list(texts)
    earlier = old[~mine & (pd.to_numeric(old["second_n"], errors="coerce").fillna(0) > 0)]
    theirs = set(earlier["second_machine"].astype(str))
    out = []
    for text in texts.astype(str):
        if text in theirs:
            text = f"{text}, part {1 + sum(t == text or t.startswith(text + ', part ') for t in theirs)}"
        out.append(text)
    return out


def _merged_claims(old: pd.DataFrame, new: pd.DataFrame, papers: set[str]) -> pd.DataFrame:
    """The snapshot's verdicts with those of ``papers`` (the added run's) taken from ``new``, in the old order.

    Claims of those papers that the old verdicts lack are appended; every other paper keeps its old rows. Columns
    the new table adds (a second run's verdicts beside the added papers, ``fedshift.claims.compare_runs``) are kept
    after the old ones, empty on the other papers' rows.
    """
    mine = new[new["paper"].astype(str).isin(papers)].set_index("claim")
    rows = [mine.loc[[c]].reset_index() if c in mine.index else r.to_frame().T
            for c, r in old.set_index("claim", drop=False).iterrows()
            if str(r["paper"]) not in papers or c in mine.index]
    extra = mine.index.difference(old["claim"])
    frames = [*rows, *([mine.loc[extra].reset_index()] if len(extra) else [])]
    columns = [*old.columns, *(c for c in new.columns if c not in old.columns)]
    return pd.concat(frames, ignore_index=True).reindex(columns=columns)


def snapshot_pages(snapshot: Path) -> Iterator[tuple[str, str]]:
    """The results sections rendered from a snapshot: ``verdicts.md`` and one ``<paper>.md`` per paper.

    Figures are linked relative to ``pages/`` (``../figures/...``), so the Markdown shows them where it lies.
    """
    from fedshift.docsgen.results import paper_results_markdown, read_claims, verdicts_markdown

    claims = read_claims(snapshot)
    if claims is not None:
        yield "verdicts.md", "# Verdicts\n\n" + source_note(snapshot, "claims") + "\n" + verdicts_markdown(snapshot)
    for paper in sorted(read_stamp(snapshot)["papers"]):
        yield f"{paper}.md", (f"# {paper}: expected results\n\n" + source_note(snapshot, paper) + "\n"
                              + paper_results_markdown(snapshot, paper, "../figures", claims))


def source_note(results: Path, paper: str | None = None) -> str:
    """The box a results page shows when it is rendered from a snapshot (empty for a run's own tree).

    Titled for the reader ("Where these results come from"); the snapshot's run name is in its text.

    Parameters
    ----------
    results : Path
        The results tree.
    paper : str, optional
        The paper the page shows: the note names its own run (name, scale, commits, machines, date; a snapshot may
        gather several runs, :func:`take_snapshot` with ``add``). ``"claims"``: the runs of the papers that have
        claims (the verdicts pages). Without it: the whole snapshot.
    """
    stamp = read_stamp(results)
    if stamp is None:
        return ""
    src = stamp
    if paper == "claims":
        from fedshift.docsgen.results import read_claims

        claims = read_claims(results)
        judged = set(claims["paper"].astype(str)) if claims is not None else set()
        src = _joined([v for p, v in stamp["papers"].items() if p in judged], stamp) or stamp
    elif paper in stamp["papers"]:
        src = _joined([stamp["papers"][paper]], stamp)
    return ('!!! info "Where these results come from"\n'
            f"    The committed snapshot {src['name']}: made at **{src['scale']}** scale at commit "
            f"{', '.join(f'`{c}`' for c in src['commits'])} on {'; '.join(src['machines'])}, snapshot of "
            f"{src['date']}. Your own run's `results/` replaces it when the site is built "
            "(`python -m fedshift.docsgen snapshot` makes a new one).\n")


def _joined(provs: list[dict[str, Any]], stamp: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The name, scale, commits, machines and date of the runs behind some papers' provenance (None when none).

    A provenance stamped before snapshots could gather runs has no ``snapshot`` / ``date``: ``stamp``'s are used.
    """
    if not provs:
        return None
    fallback = stamp or {}
    return {"name": "; ".join(dict.fromkeys(p.get("snapshot", fallback.get("name", "")) for p in provs)),
            "scale": ", ".join(sorted({p["scale"] for p in provs})),
            "commits": sorted({c for p in provs for c in p["commits"]}),
            "machines": sorted({m for p in provs for m in p["machines"]}),
            "date": max(p.get("date", fallback.get("date", "")) for p in provs)}


def docs_results(root: Path, env: str | None = None) -> Path:
    """The results tree the site renders: ``env`` if given, else ``results/`` when it holds a table, else the snapshot.

    Parameters
    ----------
    root : Path
        The repository root.
    env : str, optional
        The ``FEDSHIFT_DOCS_RESULTS`` setting (the target ``docs`` and the tests set it).
    """
    if env:
        return Path(env).resolve()
    own = root / "results"
    if any((own / "tables").glob("*/*.csv")) or (own / "tables" / "claims.csv").exists():
        return own.resolve()
    return (root / SNAPSHOT).resolve()
