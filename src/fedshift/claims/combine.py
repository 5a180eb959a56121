"""A confirmatory design's verdicts from its shards' committed per-run tables, combined.

Every shard of the final design (``config/design/shards/shards.json``, :func:`fedshift.claims.confirmatory.write_shards`)
is run to its end by one session, which builds the tables its runs alone build and commits them to the results
snapshot's confirmatory folder (:func:`collect_shard`)::

    docs/results/confirmatory/<shard>/shard.json                its manifest entry and the design hash
    docs/results/confirmatory/<shard>/tables/<paper>/<file>     its per-run tables, its experiment's rows only

:func:`combine_tables` concatenates every shard's rows of each table and refuses a shard that is not committed, that
recorded another design hash, or whose seeds are not exactly its own (a missing or a duplicate seed names the shard
and the seed); :func:`judge_combined` judges the design's rows from the combined tables. Command line (repository
root; reads only committed files, trains nothing)::

    python -m fedshift.claims.combine collect SHARD
    python -m fedshift.claims.combine judge
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from fedshift.claims.confirmatory import CONFIRMATORY_DIR, DESIGN_FILE, SHARDS_DIR, judge_runs, shards
from fedshift.claims.design import DesignMismatchError, design_hash, load_design
from fedshift.claims.render import runs_machine

__all__ = ["STAMP", "collect_shard", "combine_tables", "design_rows", "judge_combined", "main"]

#: The file, in each shard's folder, recording its manifest entry and the design hash its runs recorded.
STAMP = "shard.json"
_KEYS = ("experiment", "task")  # the column naming a row's experiment, where a table has one


def _snapshot_path(table: str) -> Path:
    """``results/tables/<paper>/<file>`` → ``tables/<paper>/<file>`` (the snapshot's layout)."""
    parts = Path(table).parts
    return Path("tables", *parts[2:]) if parts[:2] == ("results", "tables") else Path("tables", *parts)


def _key(table: pd.DataFrame) -> str | None:
    """The column naming a row's experiment, where the table has one."""
    return next((k for k in _KEYS if k in table.columns), None)


def _own_rows(table: pd.DataFrame, experiments: Sequence[str]) -> pd.DataFrame:
    """The rows of a shard's experiments, where the table names a row's experiment (else all)."""
    key = _key(table)
    return table if key is None else table[table[key].astype(str).isin(experiments)].reset_index(drop=True)


def collect_shard(shard: str, *, root: str | Path = ".", out: str | Path | None = None) -> Path:
    """Copy a finished shard's per-run tables (its experiment's rows) and its stamp into the confirmatory folder.

    Parameters
    ----------
    shard : str
        A shard of ``config/design/shards/shards.json`` (e.g. ``fedmm__digits__1000-1000``).
    root : path
        The repository root holding the shard's built ``results/`` (its runs and its ``tables`` built by the
        shard's ``tables_command``).
    out : path, optional
        The confirmatory folder; default :data:`~fedshift.claims.confirmatory.CONFIRMATORY_DIR` under ``root``.

    Returns
    -------
    Path
        The shard's folder, ``<out>/<shard>``.

    Raises
    ------
    KeyError
        If the manifest has no such shard.
    DesignMismatchError
        If a run of the shard recorded no or another design hash, or none was built.
    FileNotFoundError
        If a run of the shard (its targets) or one of its tables was not built.
    """
    root = Path(root)
    manifest = json.loads((root / SHARDS_DIR / "shards.json").read_text(encoding="utf-8"))
    if shard not in manifest or shard.startswith("_"):
        raise KeyError(f"collect: {shard!r} is not a shard of {SHARDS_DIR}/shards.json")
    entry = manifest[shard]
    design = load_design(root / DESIGN_FILE)
    targets = (root / entry["targets"]).read_text(encoding="utf-8").split()
    unbuilt = [t for t in targets if not (root / t).is_file()]
    if unbuilt:
        raise FileNotFoundError(f"collect: shard {shard} is not run to its end: {len(unbuilt)} of its {len(targets)} "
                                f"runs are not built (first: {unbuilt[0]})")
    runs = [root / t.replace("metrics.csv", "run.json") for t in targets]
    judge_runs(runs, design)
    folder = Path(out or root / CONFIRMATORY_DIR) / shard
    for table in entry["tables"]:
        rows = _own_rows(pd.read_csv(root / table), [x["experiment"] for x in entry["experiments"].values()])
        dst = folder / _snapshot_path(table)
        dst.parent.mkdir(parents=True, exist_ok=True)
        rows.to_csv(dst, index=False)
    stamp = {"shard": shard, "design_hash": design_hash(design), "machine": runs_machine(runs), **entry}
    (folder / STAMP).write_text(json.dumps(stamp, indent=1) + "\n", encoding="utf-8")
    return folder


def combine_tables(folder: str | Path, manifest: Mapping[str, Any],
                   design: Mapping[str, Any]) -> dict[str, pd.DataFrame]:
    """Every shard's per-run tables, concatenated table by table, after checking each shard's seeds.

    Parameters
    ----------
    folder : path
        The confirmatory folder: ``<shard>/shard.json`` and ``<shard>/tables/...`` per shard.
    manifest : mapping
        ``shards.json`` (shard → entry with ``unit``, ``experiments`` (each with its ``experiment`` and ``seeds``)
        and ``tables`` (table → the experiments whose design rows read it)).
    design : mapping
        The committed design; its hash must be the manifest's and every shard's.

    Returns
    -------
    dict
        ``results/tables/<paper>/<file>`` → the rows of every shard that builds it, in the manifest's order.

    Raises
    ------
    DesignMismatchError
        If the manifest or a shard's stamp records another design hash.
    ValueError
        If a shard is not committed, a table of it is missing, a table holds a seed of another shard (a duplicate,
        naming both shards) or of none, lacks a seed of its shard (naming the shard and the seed), a seed-group
        shard's table has no ``seed`` column, or an experiment's groups do not make up the design's seed list.
    """
    folder, expected = Path(folder), design_hash(design)
    if manifest["_design"]["hash"] != expected:
        raise DesignMismatchError(f"combine: the shards were written for design {manifest['_design']['hash']}, "
                                  f"not the committed {expected}: write them again")
    parts = {name: e for name, e in manifest.items() if not name.startswith("_")}
    for name, exp in shards(design).items():
        union = [s for e in parts.values() for s in e["experiments"].get(name, {}).get("seeds", [])]
        if sorted(union) != sorted(exp["seeds"]):
            raise ValueError(f"combine: the shards of {name} hold seeds {sorted(union)}, the design {exp['seeds']}")
    missing = [name for name in parts if not (folder / name / STAMP).is_file()]
    if missing:
        raise ValueError(f"combine: shards not committed under {folder}: {', '.join(missing)}")
    split = {e["unit"] for e in parts.values() if sum(x["unit"] == e["unit"] for x in parts.values()) > 1}
    frames: dict[str, list[pd.DataFrame]] = {}
    owner: dict[tuple[str, str, int], str] = {}
    for name, e in parts.items():
        stamp = json.loads((folder / name / STAMP).read_text(encoding="utf-8"))
        if stamp.get("design_hash") != expected:
            raise DesignMismatchError(f"combine: shard {name} recorded design {stamp.get('design_hash')}, not "
                                      f"the committed {expected}")
        by_experiment = {x["experiment"]: m for m, x in e["experiments"].items()}
        for table, readers in e["tables"].items():
            path = folder / name / _snapshot_path(table)
            if not path.is_file():
                raise ValueError(f"combine: shard {name} has no {table} ({path})")
            rows = pd.read_csv(path)
            frames.setdefault(table, []).append(rows)
            if "seed" not in rows.columns:
                if e["unit"] in split:
                    raise ValueError(f"combine: shard {name}: {table} has no seed column (a seed group's must)")
                continue
            key = _key(rows)
            if key is None and len(by_experiment) > 1:
                raise ValueError(f"combine: shard {name}: {table} does not say which experiment a row is of")
            names = rows[key].astype(str) if key else pd.Series([next(iter(by_experiment))] * len(rows))
            foreign = sorted(set(names) - set(by_experiment))
            if foreign:
                raise ValueError(f"combine: shard {name}: {table} holds rows of {foreign}, not of its experiments")
            for x, m in by_experiment.items():
                if m not in readers and not (names == x).any():
                    continue
                seeds = {int(s) for s in rows.loc[(names == x).to_numpy(), "seed"]}
                for s in sorted(seeds):
                    other = owner.setdefault((table, x, s), name)
                    if other != name:
                        raise ValueError(f"combine: duplicate seed {s} of {x} in {table}: shards {other} and {name}")
                    if s not in e["experiments"][m]["seeds"]:
                        raise ValueError(f"combine: shard {name}: {table} holds seed {s} of {x}, not among its "
                                         f"seeds {e['experiments'][m]['seeds']}")
                for s in e["experiments"][m]["seeds"]:
                    if s not in seeds:
                        raise ValueError(f"combine: shard {name}: {table} lacks seed {s} of {x}")
    return {t: pd.concat(f, ignore_index=True) for t, f in frames.items()}


def design_rows(design: Mapping[str, Any]) -> list[str]:
    """The claim rows the design judges, as ``claims.csv`` names them: ``id`` or ``id[row]``."""
    return [f"{c['id']}[{r}]" if r else c["id"] for c in design["claims"] for r in (c["rows"] or [""])]


def judge_combined(tables: Mapping[str, pd.DataFrame], design: Mapping[str, Any], config: Mapping[str, Any], *,
                   machine: str = "") -> pd.DataFrame:
    """The design's rows judged from the combined tables, multiplicity adjusted over them alone.

    Parameters
    ----------
    tables : mapping
        :func:`combine_tables`'s result.
    design : mapping
        The committed design.
    config : mapping
        The merged configuration of the confirmatory run (the design's overlays and its whole overlay): its
        ``claims`` are judged.
    machine : str
        The machines the shards ran on, put on every row.

    Returns
    -------
    DataFrame
        :func:`fedshift.claims.evaluate_claims`'s columns, the design's rows only, in the design's order.
    """
    from fedshift.claims.judge import evaluate_claims
    from fedshift.claims.multiplicity import adjust_multiplicity

    ids = {c["id"] for c in design["claims"]}
    items = {p: [c for c in cs if c["id"] in ids] for p, cs in config["claims"].items()}
    t = evaluate_claims({p: cs for p, cs in items.items() if cs}, tables, scale=str(config.get("scale", "paper")),
                        config=" ".join(design["claims"][0]["settings"]["overlays"]),
                        machine=machine, settings=config, adjust=False)
    order = {r: i for i, r in enumerate(design_rows(design))}
    t = t[t["claim"].isin(order)]
    t = t.iloc[sorted(range(len(t)), key=lambda i: order[t["claim"].iloc[i]])].reset_index(drop=True)
    return adjust_multiplicity(t)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m fedshift.claims.combine collect SHARD`` or ``... judge``: see the module's docstring."""
    from snakemake.utils import update_config

    from fedshift.claims.rejudge import merged_config
    from fedshift.claims.render import claims_markdown

    ap = argparse.ArgumentParser(prog="python -m fedshift.claims.combine", description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=".", type=Path)
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect", help="copy a finished shard's tables and stamp into the confirmatory folder")
    c.add_argument("shard")
    j = sub.add_parser("judge", help="combine every shard's tables and judge the design's rows")
    j.add_argument("--dir", type=Path, default=None, help=f"the confirmatory folder (default {CONFIRMATORY_DIR})")
    args = ap.parse_args(argv)
    root = args.root
    if args.command == "collect":
        print(collect_shard(args.shard, root=root))
        return 0
    folder = args.dir or root / CONFIRMATORY_DIR
    design = load_design(root / DESIGN_FILE)
    manifest = json.loads((root / SHARDS_DIR / "shards.json").read_text(encoding="utf-8"))
    tables = combine_tables(folder, manifest, design)
    config = merged_config(design["claims"][0]["settings"]["overlays"], root)
    update_config(config, yaml.safe_load((root / SHARDS_DIR / "all.yaml").read_text(encoding="utf-8")))
    machines = {json.loads((folder / n / STAMP).read_text(encoding="utf-8")).get("machine", "")
                for n in manifest if not n.startswith("_")}
    verdicts = judge_combined(tables, design, config, machine=", ".join(sorted(m for m in machines if m)))
    out = folder / "combined"
    for table, rows in tables.items():
        dst = out / _snapshot_path(table)
        dst.parent.mkdir(parents=True, exist_ok=True)
        rows.to_csv(dst, index=False)
    (out / "tables").mkdir(parents=True, exist_ok=True)
    verdicts.to_csv(out / "tables" / "claims.csv", index=False)
    (out / "tables" / "claims.md").write_text(claims_markdown(verdicts), encoding="utf-8")
    print(f"{out / 'tables' / 'claims.csv'}: {len(verdicts)} rows of the design, from {len(tables)} combined tables")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
