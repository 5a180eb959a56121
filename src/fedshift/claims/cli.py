"""The command line of :mod:`fedshift.claims`: a README's verdicts block rewritten, or a snapshot judged again.

``python -m fedshift.claims README.md results/tables/claims.md`` rewrites the block;
``python -m fedshift.claims rejudge SNAPSHOT ...`` judges a committed snapshot again (:mod:`~fedshift.claims.rejudge`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from fedshift.claims.compare import compare_runs, read_claims_csv
from fedshift.claims.rejudge import main as rejudge_main
from fedshift.claims.render import claims_markdown, rewrite_readme_block
from fedshift.io import atomic_write

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m fedshift.claims README.md results/tables/claims.md [--block NAME]``: regenerate a verdicts block.

    ``python -m fedshift.claims rejudge SNAPSHOT --configfile ...`` instead judges a committed snapshot's claims
    again from its own tables (:mod:`fedshift.claims.rejudge`).

    Rewrites, atomically, the text between ``<!-- claims:begin ... -->`` and ``<!-- claims:end -->`` (or a named
    block's markers) of the README with the Markdown the target ``claims`` wrote, so that no claim's number is
    copied by hand. Given ``claims.csv`` instead, renders it (:func:`claims_markdown`), keeping only the claims of
    ``--papers`` when given (e.g. a longer scale that ran one paper), with a second run's verdicts beside it where
    ``--second`` names that run's ``claims.csv`` (:func:`fedshift.claims.compare_runs`).

    Returns
    -------
    int
        0 on success (errors raise).
    """
    import argparse
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["rejudge"]:  # python -m fedshift.claims rejudge SNAPSHOT --configfile ...
        return rejudge_main(argv[1:])

    ap = argparse.ArgumentParser(prog="python -m fedshift.claims", description=main.__doc__.splitlines()[0])
    ap.add_argument("readme", type=Path)
    ap.add_argument("claims", type=Path, help="claims.md as written, or claims.csv (rendered, --papers applies)")
    ap.add_argument("--block", default="", help="a named block, <!-- claims[NAME]:begin --> (default: the unnamed one)")
    ap.add_argument("--papers", default="", help="with claims.csv: only these papers' claims (comma-separated)")
    ap.add_argument("--second", type=Path, default=None,
                    help="with claims.csv: a second run's claims.csv (e.g. under portable_cpu), its verdicts beside")
    args = ap.parse_args(argv)
    if args.claims.suffix == ".csv":
        t = read_claims_csv(args.claims)
        if args.second is not None:
            t = compare_runs(t, read_claims_csv(args.second))
        wanted = [p for p in args.papers.split(",") if p]
        if wanted:
            if not set(wanted) <= set(t["paper"]):
                raise ValueError(f"--papers: {sorted(set(wanted) - set(t['paper']))} have no claims in {args.claims}")
            t = t[t["paper"].isin(wanted)]
        block = claims_markdown(t)
    elif args.papers or args.second:
        raise ValueError("--papers and --second need claims.csv (claims.md is already rendered)")
    else:
        block = args.claims.read_text(encoding="utf-8")
    text = rewrite_readme_block(args.readme.read_text(encoding="utf-8"), block, args.block)
    with atomic_write(args.readme) as fh:
        fh.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
