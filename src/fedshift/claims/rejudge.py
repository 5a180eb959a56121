"""The verdicts of a committed results snapshot judged again from its own tables, under the current claims config.

A snapshot (``docs/results/snapshot``, :mod:`fedshift.docsgen.snapshot`) holds the tidy tables a run built and
the ``claims.csv`` its ``claims`` job wrote. When the claims config changes (a new row, a status, a work ratio, the
multiplicity policy) nothing needs to train again: every claim's quantity is computed from the snapshot's tables
(``results/tables/<x>`` → ``<snapshot>/tables/<x>``), each paper at the scale, config and machine its rows already
state, and the second run's columns are kept beside the rows they belong to. Command line::

    python -m fedshift.claims rejudge docs/results/snapshot --configfile config/quick.yaml config/decisive.yaml

then ``python -m fedshift.docsgen snapshot-pages`` and ``python -m fedshift.docsgen readme README.md
docs/results/snapshot --block verdict-counts-decisive`` rewrite the pages and the README's block from it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from fedshift.claims.compare import SECOND_COLUMNS, read_claims_csv
from fedshift.claims.judge import evaluate_claims
from fedshift.claims.multiplicity import adjust_multiplicity
from fedshift.claims.render import claims_markdown
from fedshift.claims.verdicts import COMPUTED
from fedshift.io import atomic_write

__all__ = ["merged_config", "rejudge_snapshot"]

_ROOT = Path(__file__).resolve().parents[3]


def merged_config(overlays: Sequence[str | Path], root: Path = _ROOT) -> dict[str, Any]:
    """The configuration Snakemake builds: config.yaml, datasets.yaml, every paper's YAML, then the overlays.

    Raises
    ------
    FileNotFoundError
        If an overlay does not exist.
    """
    import yaml
    from snakemake.utils import update_config

    config: dict[str, Any] = {}
    files = [root / "config" / "config.yaml", root / "config" / "datasets.yaml",
             *sorted((root / "config" / "papers").glob("*.yaml")), *(root / Path(o) for o in overlays)]
    for f in files:
        update_config(config, yaml.safe_load(Path(f).read_text(encoding="utf-8")) or {})
    return config


def _snapshot_table(snapshot: Path, table: str) -> Path:
    rel = Path(table)
    parts = rel.parts[2:] if rel.parts[:2] == ("results", "tables") else rel.parts
    return snapshot / "tables" / Path(*parts)


def rejudge_snapshot(snapshot: str | Path, config: Mapping[str, Any]) -> pd.DataFrame:
    """Every claim of ``config`` judged from the snapshot's tables, each paper as its committed rows state.

    Parameters
    ----------
    snapshot : path
        The snapshot folder (``tables/claims.csv`` and the tables the claims read under ``tables/``).
    config : dict
        The merged configuration (:func:`merged_config`) whose ``claims`` are judged.

    Returns
    -------
    DataFrame
        :func:`fedshift.claims.evaluate_claims`'s columns (multiplicity adjusted once over every paper) and,
        where the committed table has them, the second run's columns, matched by claim row (a row the second run
        did not have compares nothing).

    Raises
    ------
    FileNotFoundError
        If the snapshot has no ``tables/claims.csv``.
    ValueError
        If a paper of the claims config has no row in the committed ``claims.csv`` (its scale is unknown).
    """
    snapshot = Path(snapshot)
    old = read_claims_csv(snapshot / "tables" / "claims.csv")
    claims = dict(config.get("claims", {}))
    parts = []
    for paper, items in claims.items():
        rows = old[old["paper"] == paper]
        if rows.empty:
            raise ValueError(f"claims.{paper}: the snapshot's claims.csv has no row of this paper")
        first = rows.iloc[0]
        tables = {}
        for c in items:
            table = (c.get("quantity") or {}).get("table")
            if table and table not in tables and _snapshot_table(snapshot, table).is_file():
                tables[table] = pd.read_csv(_snapshot_table(snapshot, table))
        needs = {v.split(":", 1)[1].strip() for v in rows["verdict"] if str(v).startswith("needs data:")}
        missing = sorted({d for v in needs for d in v.split(", ")})
        not_run = {}
        for c in items:  # a table the committed run did not build keeps the reason it gave
            q = c.get("quantity") or {}
            kept = rows[(rows["claim"].str.split("[").str[0] == c["id"]) & (rows["verdict"] == "not run")]
            if q.get("table") and not kept.empty and kept["note"].iloc[0]:
                not_run[q["table"]] = str(kept["note"].iloc[0])
        parts.append(evaluate_claims({paper: items}, tables, scale=str(first["scale"]), missing_data=missing,
                                     not_run=not_run, config=str(first["config"]), machine=str(first["machine"]),
                                     settings=config, adjust=False))
    new = adjust_multiplicity(pd.concat(parts, ignore_index=True))
    # the committed rows keep their order (a snapshot gathered from several runs orders them by run); a new row
    # follows the row before it in the config
    position, last = {c: i for i, c in enumerate(old["claim"])}, -1.0
    keys = []
    for c in new["claim"]:
        last = float(position[c]) if c in position else last + 1e-3
        keys.append(last)
    new = new.iloc[sorted(range(len(new)), key=lambda i: keys[i])].reset_index(drop=True)
    present = [c for c in SECOND_COLUMNS if c in old.columns]
    if present:
        second = old.set_index("claim")[present]
        for col in present:
            new[col] = [second.at[c, col] if c in second.index else ("" if col in ("second_verdict", "agreement")
                                                                      else float("nan")) for c in new["claim"]]
        new["second_n"] = pd.to_numeric(new["second_n"], errors="coerce").fillna(0).astype(int)
        new["second_machine"] = [m if isinstance(m, str) and m and m != "nan" else "" for m in new["second_machine"]]
        new["second_verdict"] = new["second_verdict"].fillna("").astype(str)
        both = new["verdict"].isin(COMPUTED) & new["second_verdict"].isin(COMPUTED)
        new["agreement"] = [("same" if v == s else "different") if b else ""
                            for v, s, b in zip(new["verdict"], new["second_verdict"], both, strict=True)]
    return new


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m fedshift.claims rejudge SNAPSHOT --configfile FILE ...``: rewrite its claims.csv and claims.md.

    Returns
    -------
    int
        0 on success; 1 with ``--check`` when the committed ``claims.csv`` differs from the recomputed one.
    """
    import argparse
    import io

    ap = argparse.ArgumentParser(prog="python -m fedshift.claims rejudge", description=main.__doc__.splitlines()[0])
    ap.add_argument("snapshot", type=Path)
    ap.add_argument("--configfile", nargs="*", default=[], help="the overlays the snapshot's run named")
    ap.add_argument("--check", action="store_true", help="only compare with the committed claims.csv")
    args = ap.parse_args(argv)
    t = rejudge_snapshot(args.snapshot, merged_config(args.configfile))
    buf = io.StringIO()
    t.to_csv(buf, index=False)
    target = args.snapshot / "tables" / "claims.csv"
    if args.check:
        return 0 if target.read_text(encoding="utf-8") == buf.getvalue() else 1
    with atomic_write(target) as fh:
        fh.write(buf.getvalue())
    with atomic_write(args.snapshot / "tables" / "claims.md") as fh:
        fh.write(claims_markdown(t))
    print(f"{target}: {len(t)} rows")
    return 0
