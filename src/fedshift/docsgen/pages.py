"""The site's generated content: markers in docs pages expanded, figures published, and the command line."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from fedshift.docsgen.algorithms import algorithms_markdown
from fedshift.docsgen.benchmarks import benchmark_summary, benchmarks_markdown
from fedshift.docsgen.coverage import data_coverage
from fedshift.docsgen.configref import CONFIG_BLOCK, README_BLOCK, config_reference, rewrite_block
from fedshift.docsgen.papers import (PAPERS_BLOCK, citation_markdown, hparams_markdown, papers_table_markdown,
                                     scales_markdown)
from fedshift.docsgen.snapshot import (
    SNAPSHOT,
    add_second_run,
    read_stamp,
    snapshot_pages,
    source_note,
    take_snapshot,
)
from fedshift.docsgen.results import (
    paper_results_markdown,
    provenance,
    read_claims,
    verdict_counts_markdown,
    verdicts_markdown,
)

__all__ = ["site_figures", "expand_markers", "sphinx_roles_to_links", "MARK_COLOURS", "mark_svg",
           "verdict_marks_to_svg", "generated_pages", "main"]


def site_figures(results: Path) -> dict[str, Path]:
    """Every file to publish: site path -> its file in the results tree.

    The figures (``.png``) under ``generated/figures/`` and the tidy tables (``.csv``, the download links of the
    results sections) under ``generated/tables/``.
    """
    out = {f"generated/figures/{p.relative_to(results / 'figures').as_posix()}": p
           for p in sorted((results / "figures").glob("*/*.png"))}
    out |= {f"generated/tables/{p.relative_to(results / 'tables').as_posix()}": p
            for p in sorted((results / "tables").glob("*/*.csv"))}
    return out


_MARKER = re.compile(r"<!-- fedshift:(?P<what>[a-z_-]+)(?: (?P<arg>[a-z0-9_]+))? -->")


def expand_markers(markdown: str, *, root: Path, results: Path, page_depth: int) -> str:
    """Replace the generated-content markers of a docs page with their content.

    Markers: ``<!-- fedshift:config-reference -->``, ``<!-- fedshift:verdicts -->``,
    ``<!-- fedshift:results PAPER -->``, ``<!-- fedshift:verdict-counts -->``, ``<!-- fedshift:benchmarks -->``,
    ``<!-- fedshift:algorithms -->`` (:func:`~fedshift.docsgen.algorithms.algorithms_markdown`),
    ``<!-- fedshift:papers -->`` (the paper table with the data of the results,
    :func:`~fedshift.docsgen.coverage.data_coverage`) and a paper page's
    ``<!-- fedshift:citation PAPER -->``, ``<!-- fedshift:scales PAPER -->`` and ``<!-- fedshift:hparams PAPER -->``
    (:mod:`fedshift.docsgen.papers`; the scales' measured CPU is the results tree's, at the scale it was made at).

    Parameters
    ----------
    markdown : str
        The page's Markdown.
    root, results : Path
        The repository root and the results tree.
    page_depth : int
        How many folders deep the page lies under ``docs/`` (for the figures' relative URLs).

    Raises
    ------
    ValueError
        On an unknown marker or a results marker without a paper.
    """
    prefix = "/".join([".."] * page_depth + ["generated", "figures"])
    claims = read_claims(results)

    def content(m: re.Match[str]) -> str:
        what, arg = m.group("what"), m.group("arg")
        if what == "config-reference":
            return config_reference(root)
        if what == "verdicts":
            return source_note(results, "claims") + "\n" + verdicts_markdown(results)
        if what == "verdict-counts":
            if claims is None:
                return "*No claims.csv in the results tree.*\n"
            # the counts first (the home page opens with them; the claim counts in one line, the verdicts page has
            # their table), then where they come from
            return verdict_counts_markdown(claims, compact=True) + "\n" + source_note(results, "claims")
        if what == "benchmarks":
            return benchmarks_markdown(results)
        if what == "results" and arg:
            return source_note(results, arg) + "\n" + paper_results_markdown(results, arg, prefix, claims)
        if what == "papers":
            return papers_table_markdown(data_coverage(root, claims), pages="papers/")
        if what == "algorithms":
            return algorithms_markdown(root)
        if what == "citation" and arg:
            return citation_markdown(arg)
        if what == "hparams" and arg:
            return hparams_markdown(root, arg)
        if what == "scales" and arg:
            return scales_markdown(root, arg, _measured_cpu(results, arg, claims))
        raise ValueError(f"unknown docs marker {m.group(0)!r}")

    return _MARKER.sub(content, markdown)


_ROLE = re.compile(r":(?:py:)?(?:func|class|mod|meth|attr|data|exc|obj|const|type):<code>(?P<tilde>~?)(?P<name>[\w.]+)"
                   r"(?:\(\))?</code>")
_ANCHOR = re.compile(r'id="(?P<id>fedshift(?:\.\w+)+)"')


def sphinx_roles_to_links(html: str) -> str:
    """Replace the Sphinx cross-reference roles of the docstrings with links, in a rendered page's HTML.

    The docstrings follow NumPy style with Sphinx roles (func, class, mod, meth, attr, data, exc, obj), which
    mkdocstrings prints as text: the role's name between colons, then the object's name in code. Each role becomes its
    name in code: a link to the object's anchor on the page when one exists (a relative name is tried against the
    enclosing objects, innermost first, as Sphinx resolves it), else an optional cross-reference that mkdocs-autorefs
    resolves against the whole site or leaves as plain
    code. A leading ``~`` shows the last component only.

    Parameters
    ----------
    html : str
        The page's HTML after Markdown conversion (MkDocs' ``on_page_content``).

    Returns
    -------
    str
        The HTML without any ``:role:`` prefix.
    """
    anchors = [(m.start(), m.group("id")) for m in _ANCHOR.finditer(html)]
    ids = {a for _, a in anchors}
    out, last, i = [], 0, 0
    context = ""
    for m in _ROLE.finditer(html):
        while i < len(anchors) and anchors[i][0] < m.start():
            context = anchors[i][1]
            i += 1
        name = m.group("name").lstrip(".")
        title = name.rsplit(".", 1)[-1] if m.group("tilde") else name
        parts = context.split(".") if context else []
        candidates = [".".join(parts[:k] + [name]) for k in range(len(parts), 0, -1)] + [name]
        target = next((c for c in candidates if c in ids), None)
        if target is not None:
            link = f'<a href="#{target}"><code>{title}</code></a>'
        else:
            link = f'<autoref identifier="{name}" optional><code>{title}</code></autoref>'
        out += [html[last:m.start()], link]
        last = m.end()
    return "".join(out) + html[last:]


#: The fill (and outline) of the mark that stands for each verdict's colour emoji (:data:`fedshift.claims.MARKS`).
MARK_COLOURS = {"reproduced": ("#2e7d32", "#2e7d32"), "smaller than claimed": ("#ef6c00", "#ef6c00"),
                "equivalent to zero": ("#1565c0", "#1565c0"), "not reproduced": ("#c62828", "#c62828"),
                "inconclusive": ("#ffffff", "#757575")}


def mark_svg(verdict: str) -> str:
    """The inline SVG disc that shows ``verdict``'s mark on the site, named for screen readers (no emoji font needed).

    Raises
    ------
    KeyError
        For a verdict without a mark (:data:`MARK_COLOURS`).
    """
    fill, stroke = MARK_COLOURS[verdict]
    return (f'<svg class="fs-mark" width="0.8em" height="0.8em" viewBox="0 0 10 10" role="img" '
            f'aria-label="{verdict}"><circle cx="5" cy="5" r="4.25" fill="{fill}" stroke="{stroke}" '
            'stroke-width="1.5"/></svg>')


def verdict_marks_to_svg(html: str) -> str:
    """Replace the verdicts' colour emoji (:data:`fedshift.claims.MARKS`) in a rendered page's HTML by :func:`mark_svg`.

    The Markdown keeps the emoji (a terminal and GitHub show them); the site draws its own marks, so that a reader
    without an emoji font sees the same colours. Called by the MkDocs hook ``on_page_content``.
    """
    from fedshift.claims import MARKS

    for verdict, emoji in MARKS.items():
        html = html.replace(emoji, mark_svg(verdict))
    return html


def _measured_cpu(results: Path, paper: str, claims: Any) -> dict[str, float]:
    """The paper's training and evaluation CPU seconds in the results tree, under the scale the tree was made at."""
    stamp = read_stamp(results)
    if stamp is not None:  # a snapshot records each paper's CPU seconds
        prov = stamp["papers"].get(paper)
        return {prov["scale"]: float(prov["cpu_s"])} if prov and prov.get("cpu_s") else {}
    bench = benchmark_summary(results)
    bench = bench[bench["paper"] == paper]
    if bench.empty:
        return {}
    return {provenance(results, paper, claims)["scale"]: float(bench["cpu_s"].sum())}


def generated_pages(root: Path, results: Path, docs: Path) -> Iterator[tuple[str, str]]:
    """Every page of ``docs`` that holds a marker, with its markers expanded: (path under docs, Markdown)."""
    for page in sorted(docs.rglob("*.md")):
        text = page.read_text()
        if _MARKER.search(text):
            rel = page.relative_to(docs)
            yield rel.as_posix(), expand_markers(text, root=root, results=results, page_depth=len(rel.parts) - 1)


def _write(path: Path, content: str | bytes) -> None:
    from fedshift.io import atomic_write

    with atomic_write(path, "wb" if isinstance(content, bytes) else "w") as fh:
        fh.write(content)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m fedshift.docsgen {config,readme,papers,snapshot,pages} ...``: write the generated blocks and pages.

    Returns
    -------
    int
        0 on success, 1 when ``--check`` finds a block out of date.
    """
    import argparse

    ap = argparse.ArgumentParser(prog="python -m fedshift.docsgen", description=main.__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("config", help="rewrite the config-reference block of config/README.md")
    c.add_argument("file", type=Path)
    c.add_argument("--check", action="store_true", help="only check that the block is up to date")
    r = sub.add_parser("readme", help="rewrite the README's verdict-counts block from RESULTS/tables/claims.csv")
    r.add_argument("file", type=Path)
    r.add_argument("results", type=Path)
    r.add_argument("--block", default=README_BLOCK,
                   help=f"the block's name (default {README_BLOCK!r}; the README holds one per scale it shows)")
    pt = sub.add_parser("papers", help="rewrite the README's paper table from docsgen.papers.CITATIONS")
    pt.add_argument("file", type=Path)
    pt.add_argument("--check", action="store_true", help="only check that the table is up to date (exit 1 if not)")
    s = sub.add_parser("snapshot", help="copy a run's tables and figures from RESULTS into the committed snapshot")
    s.add_argument("results", type=Path)
    s.add_argument("out", type=Path, nargs="?", help=f"the snapshot folder (default: {SNAPSHOT})")
    s.add_argument("--name", required=True, help="the run's name, printed on every page made from the snapshot")
    s.add_argument("--scale", help="the run's scale, for papers whose runs and claims do not name it")
    s.add_argument("--add", action="store_true",
                   help="add this run's papers to the snapshot in OUT, keeping its other papers (several named runs)")
    ss = sub.add_parser("snapshot-second", help="put a second run's verdicts (its claims.csv) beside the snapshot's")
    ss.add_argument("claims", type=Path, help="the second run's results/tables/claims.csv")
    ss.add_argument("out", type=Path, nargs="?", help=f"the snapshot folder (default: {SNAPSHOT})")
    sp = sub.add_parser("snapshot-pages", help="rewrite the snapshot's pages/ from its own files (no run needed)")
    sp.add_argument("out", type=Path, nargs="?", help=f"the snapshot folder (default: {SNAPSHOT})")
    sp.add_argument("--check", action="store_true",
                    help="only check that OUT/pages is what the snapshot's files make (exit 1 if not)")
    p = sub.add_parser("pages", help="write docs pages with their generated content expanded into OUT")
    p.add_argument("results", type=Path)
    p.add_argument("out", type=Path)
    args = ap.parse_args(argv)
    root = Path(__file__).resolve().parents[3]  # src/fedshift/docsgen/pages.py → the repository root
    if args.cmd == "config":
        text = args.file.read_text()
        new = rewrite_block(text, CONFIG_BLOCK, config_reference(root))
        if args.check:
            return 0 if new == text else 1
        _write(args.file, new)
    elif args.cmd == "papers":
        text = args.file.read_text()
        coverage = data_coverage(root, read_claims(root / SNAPSHOT))  # the README shows the committed snapshot
        new = rewrite_block(text, PAPERS_BLOCK, papers_table_markdown(coverage))
        if args.check:
            return 0 if new == text else 1
        _write(args.file, new)
    elif args.cmd == "snapshot-pages":
        out = args.out or root / SNAPSHOT
        made = dict(snapshot_pages(out))
        if args.check:
            committed = {p.relative_to(out / "pages").as_posix(): p.read_text() for p in (out / "pages").rglob("*.md")}
            return 0 if committed == made else 1
        shutil.rmtree(out / "pages", ignore_errors=True)
        for rel, text in made.items():
            _write(out / "pages" / rel, text)
    elif args.cmd == "snapshot-second":
        out = args.out or root / SNAPSHOT
        from fedshift.claims import agreement_counts

        kept = agreement_counts(add_second_run(out, args.claims))
        print(f"{out}: {kept['same']} of {kept['compared']} rows keep their verdict "
              f"({kept['kept']} of {kept['decided']} decided rows)")
    elif args.cmd == "snapshot":
        out = args.out or root / SNAPSHOT
        stamp = take_snapshot(args.results, out, name=args.name, root=root, add=args.add,
                              scale=args.scale)
        print(f"{out}: {stamp['files']} files of {len(stamp['papers'])} papers, {stamp['scale']} scale, "
              f"commit {', '.join(stamp['commits'])}")
    elif args.cmd == "readme":
        claims = read_claims(args.results)
        if claims is None:
            raise FileNotFoundError(f"{args.results}/tables/claims.csv")
        _write(args.file, rewrite_block(args.file.read_text(), args.block,
                                        verdict_counts_markdown(claims, compact=True)))
    else:
        for rel, text in generated_pages(root, args.results, root / "docs"):
            _write(args.out / rel, text)
        for rel, src in site_figures(args.results).items():
            _write(args.out / rel, src.read_bytes())
    return 0
