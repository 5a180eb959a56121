"""Compare the tidy outputs (csv, md, tex) of two result trees: "nothing changes in the numbers" (issue 17, item 5).

Walks every ``.csv``/``.md``/``.tex`` file of tree A and looks for it in tree B (after the ``--map`` prefix
rewrites, for a layout that moved: ``--map afl_adult=afl/afl_adult``). A file is *same* when its bytes are, or for a
csv when its frame is exactly equal after dropping wall-time columns (names with ``time`` or ``seconds``) and the
columns only B has (e.g. the ``paper/experiment/run/seed`` columns the job skeleton adds); ``--unordered`` compares
csv rows as sets (sorted by every column), for tables whose row order follows config order. Prints each difference
and a summary; exit status 1 when anything differs.

Usage::

    python benchmarks/compare_results.py A/results/tables B/results/tables --unordered
    python benchmarks/compare_results.py A/results/runs B/results/runs --map afl_adult=afl/afl_adult
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd


def mapped(rel: Path, rules: list[tuple[str, str]]) -> Path:
    """``rel`` with the first matching prefix rewritten (a prefix is whole path components)."""
    text = rel.as_posix()
    for old, new in rules:
        if text == old or text.startswith(old + "/"):
            return Path(new + text[len(old):])
    return rel


def same_csv(a: Path, b: Path, unordered: bool) -> str | None:
    """None when the frames agree (see module docstring), else the first lines of the difference."""
    x, y = pd.read_csv(a), pd.read_csv(b)
    keep = [c for c in x.columns if "time" not in c and "seconds" not in c]
    if not set(keep) <= set(y.columns):
        return f"columns missing in B: {sorted(set(keep) - set(y.columns))}"
    x, y = x[keep], y[keep]
    if unordered:
        x, y = (f.sort_values(keep, kind="stable").reset_index(drop=True) for f in (x, y))
    try:
        pd.testing.assert_frame_equal(x, y, check_exact=True, check_dtype=False)
    except AssertionError as err:
        return " / ".join(str(err).splitlines()[:3])
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", type=Path)
    ap.add_argument("b", type=Path)
    ap.add_argument("--map", action="append", default=[], help="OLD=NEW path-prefix rewrite from A to B")
    ap.add_argument("--unordered", action="store_true", help="compare csv rows as sets")
    args = ap.parse_args(argv)
    rules = [tuple(m.split("=", 1)) for m in args.map]
    same = diff = missing = 0
    for f in sorted(args.a.rglob("*")):
        if f.is_dir() or f.suffix not in (".csv", ".md", ".tex"):
            continue
        g = args.b / mapped(f.relative_to(args.a), rules)
        if not g.exists():
            print("MISSING", f.relative_to(args.a))
            missing += 1
        elif f.read_bytes() == g.read_bytes():
            same += 1
        elif f.suffix == ".csv" and (why := same_csv(f, g, args.unordered)) is None:
            same += 1
        else:
            print("DIFF", f.relative_to(args.a), why if f.suffix == ".csv" else "")
            diff += 1
    print(f"same {same}, different {diff}, missing in B {missing}")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
