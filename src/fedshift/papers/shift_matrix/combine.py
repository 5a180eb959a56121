"""The shift matrix's benchmark scale joined from its shards' committed runs: the whole matrix's tables, no training.

Each shard of the benchmark scale (``config/benchmark_shards/shards.json``, one shift each, ``active_shifts``) runs
its cells in its own session; :func:`collect_shard` then copies its per-run ``metrics.csv`` and its one-shift tables
to the shard's ``snapshot_dir`` with a ``shard.json`` (shift, seeds, commit, machine, CPU and wall seconds)::

    docs/results/matrix_benchmark/<shift>/shard.json
    docs/results/matrix_benchmark/<shift>/runs/<algorithm>/seed~<s>/metrics.csv
    docs/results/matrix_benchmark/<shift>/tables/<file>          (the shard's own tables, from its session)

:func:`join_shards` builds the whole matrix's outputs from every shard's runs with the matrix's own table code
(:meth:`ShiftMatrixPaper.make_output`, :func:`.report.write`), params from the paper built from the benchmark
overlays: the same files the target ``shift_matrix`` writes from one tree of runs. Both refuse, naming the shift
and the seed, a run missing from the plan's (a shard not run to its end), a run whose seed, algorithm, models or
rounds are not the plan's, a run the plan does not have, a shift in two shards, and (without ``--partial``) a
shift with no shard. Command line (repository root; reads only committed files, trains nothing)::

    python -m fedshift.papers.shift_matrix.combine collect SHIFT [--cpu-s S] [--wall-s S]
    python -m fedshift.papers.shift_matrix.combine join [docs/results/matrix_benchmark] \
        [--out results/tables/shift_matrix] [--figures results/figures/shift_matrix] [--partial]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from fedshift.contract import RunSpec
from fedshift.io import atomic_write
from fedshift.papers.shift_matrix.paper import ShiftMatrixPaper

__all__ = ["SHARDS", "SNAPSHOT", "STAMP", "load_manifest", "matrix_paper", "check_run", "collect_shard",
           "join_shards", "main"]

#: The shards' manifest (``benchmarks/matrix_rounds.py --plan-shards``) and the folder the shards are committed to.
SHARDS = "config/benchmark_shards/shards.json"
SNAPSHOT = "docs/results/matrix_benchmark"
#: The file, in each shard's folder, recording the shard (shift, seeds, commit, machine, seconds).
STAMP = "shard.json"
_TABLES, _FIGURES = "results/tables/shift_matrix", "results/figures/shift_matrix"


def load_manifest(root: str | Path = ".") -> dict[str, Any]:
    """``shards.json``, each shard checked to run exactly its own one shift.

    Raises
    ------
    ValueError
        If a shard's overlay does not list exactly its shift as ``shift_matrix.active_shifts``, or a shift is in two
        shards (naming both).
    """
    root = Path(root)
    manifest = json.loads((root / SHARDS).read_text(encoding="utf-8"))
    owner: dict[str, str] = {}
    for name, entry in manifest.items():
        if name.startswith("_"):
            continue
        overlay = yaml.safe_load((root / entry["overlay"]).read_text(encoding="utf-8")) or {}
        active = (overlay.get("shift_matrix") or {}).get("active_shifts")
        if active != [entry["shift"]]:
            raise ValueError(f"{SHARDS}: shard {name}: {entry['overlay']} sets shift_matrix.active_shifts {active}, "
                             f"not [{entry['shift']}]")
        if entry["shift"] in owner:
            raise ValueError(f"{SHARDS}: shift {entry['shift']} is in two shards: {owner[entry['shift']]} and {name}")
        owner[entry["shift"]] = name
    return manifest


def benchmark_config(root: str | Path, manifest: Mapping[str, Any], shard: str | None = None) -> dict[str, Any]:
    """The merged configuration of the benchmark overlays (and of ``shard``'s overlay), as Snakemake builds it."""
    from fedshift.claims.rejudge import merged_config

    overlays = list(manifest["_benchmark"]["overlays"]) + ([manifest[shard]["overlay"]] if shard else [])
    return merged_config(overlays, Path(root))


def matrix_paper(config: Mapping[str, Any], shifts: Sequence[str] | None = None) -> ShiftMatrixPaper:
    """The matrix plug-in of ``config`` (its ``shift_matrix`` section), restricted to ``shifts`` when given.

    Raises
    ------
    ConfigError
        Naming the key path, from :meth:`ShiftMatrixPaper.validate`.
    """
    config = copy.deepcopy(dict(config))
    if shifts is not None:
        config["shift_matrix"] = dict(config["shift_matrix"]) | {"active_shifts": list(shifts)}
    paper = ShiftMatrixPaper(config)
    paper.validate()
    return paper


def check_run(spec: RunSpec, rows: pd.DataFrame) -> None:
    """Refuse a run's metrics rows that are not the plan's: its shift, algorithm, seed, models and rounds.

    Parameters
    ----------
    spec : RunSpec
        The planned run (:meth:`ShiftMatrixPaper.runs`; ``hparams["models"][m]["rounds"]``: model m's budget).
    rows : DataFrame
        Its ``metrics.csv`` (:meth:`ShiftMatrixPaper.evaluate`).

    Raises
    ------
    ValueError
        Naming the shift, algorithm and seed: rows of another shift, algorithm or seed, other models, a grid value
        trained past the plan's rounds, or a survivor (a test value) trained to other rounds than the plan's.
    """
    where = f"shift {spec.experiment}, {spec.run}, seed {spec.seed}"
    for column, want in (("shift", spec.experiment), ("algorithm", spec.run), ("seed", spec.seed)):
        got = sorted(set(rows[column])) if column in rows else []
        if got != [want]:
            raise ValueError(f"{where}: its metrics.csv holds {column} {got}, the benchmark plan {want!r}")
    models = spec.hparams["models"]
    if sorted(set(rows["model"])) != sorted(models):
        raise ValueError(f"{where}: its metrics.csv holds models {sorted(set(rows['model']))}, the plan "
                         f"{sorted(models)}")
    for model, train in models.items():
        own = rows[(rows["model"] == model) & (rows["grid"] >= 0)]
        survivor = own[(own["role"] == "test") & own["value"].notna()]
        if (own["rounds"] > train["rounds"]).any() or (survivor["rounds"] != train["rounds"]).any():
            raise ValueError(f"{where}: {model} trained {int(own['rounds'].max())} rounds, the plan "
                             f"{train['rounds']}")


def _git_head(root: Path) -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def _machine(run_files: Sequence[Path]) -> str:
    """The CPUs the runs recorded (:func:`fedshift.claims.render.runs_machine`), else this machine's."""
    from fedshift.claims.render import runs_machine

    recorded = runs_machine(run_files)
    if recorded:
        return recorded
    from fedshift.provenance import cpu_info

    info = cpu_info()
    return f"{info.get('model') or '?'} ({info.get('torch_capability') or '?'})"


def _copy(src: Path, dst: Path) -> None:
    with atomic_write(str(dst)) as fh:
        fh.write(src.read_text(encoding="utf-8"))


def collect_shard(shift: str, config: Mapping[str, Any], *, root: str | Path = ".", out: str | Path,
                  cpu_s: float | None = None, wall_s: float | None = None) -> Path:
    """Copy a finished shard's per-run metrics and tables into its snapshot folder, with its stamp.

    Parameters
    ----------
    shift : str
        The shard's shift.
    config : mapping
        The shard's merged configuration (the benchmark overlays and the shard's; :func:`benchmark_config`).
    root : path
        The repository root holding the shard's built ``results/`` (its runs and the tables of its command).
    out : path
        The shard's folder (``snapshot_dir`` of ``shards.json``).
    cpu_s, wall_s : float, optional
        The shard's CPU and wall seconds, recorded as given.

    Returns
    -------
    Path
        ``out``.

    Raises
    ------
    ValueError
        If the configuration's shards are not exactly ``shift``, or a run is not the plan's (:func:`check_run`).
    FileNotFoundError
        If a planned run's ``metrics.csv`` (naming its shift, algorithm and seed) or a table of the shard is missing.
    """
    root, out = Path(root), Path(out)
    paper = matrix_paper(config)
    if list(paper.shifts) != [shift]:
        raise ValueError(f"collect: the shard's configuration runs shifts {list(paper.shifts)}, not [{shift}]")
    specs = paper.runs()
    for spec in specs:
        path = root / spec.file("metrics")
        if not path.is_file():
            raise FileNotFoundError(f"collect: shard {shift} is not run to its end: no metrics.csv of {spec.run}, "
                                    f"seed {spec.seed} ({path})")
        check_run(spec, pd.read_csv(path))
    tables = [f for o in paper.outputs() for f in o.files.values() if f.startswith(_TABLES + "/")]
    for table in tables:
        if not (root / table).is_file():
            raise FileNotFoundError(f"collect: shard {shift} has no {table}: run its command to its end")
        if table.endswith(".csv") and "shift" in (frame := pd.read_csv(root / table)):
            if set(frame["shift"].dropna()) - {shift}:
                raise ValueError(f"collect: {table} holds shifts {sorted(set(frame['shift']))}, not only {shift}: "
                                 "tables of another run")
    for spec in specs:
        _copy(root / spec.file("metrics"), out / "runs" / spec.run / f"seed~{spec.seed}" / "metrics.csv")
    for table in tables:
        _copy(root / table, out / "tables" / Path(table).name)
    stamp = {"shift": shift, "seeds": sorted({s.seed for s in specs}), "runs": len(specs),
             "rounds": {m: paper.train_of(m, shift)["rounds"] for m in paper.models},
             "commit": _git_head(root), "machine": _machine([root / s.file("run") for s in specs]),
             "cpu_s": cpu_s, "wall_s": wall_s}
    with atomic_write(str(out / STAMP)) as fh:
        fh.write(json.dumps(stamp, indent=1) + "\n")
    return out


def _shards(folder: Path) -> dict[str, tuple[Path, dict[str, Any]]]:
    """Shift → (its shard's folder, its stamp), refusing a shift in two shards."""
    found: dict[str, tuple[Path, dict[str, Any]]] = {}
    for stamp_file in sorted(folder.glob(f"*/{STAMP}")):
        stamp = json.loads(stamp_file.read_text(encoding="utf-8"))
        shift = stamp["shift"]
        if shift in found:
            raise ValueError(f"join: shift {shift} is in two shards: {found[shift][0]} and {stamp_file.parent}")
        found[shift] = (stamp_file.parent, stamp)
    return found


def join_shards(folder: str | Path, config: Mapping[str, Any], *, out: str | Path = _TABLES,
                figures: str | Path = _FIGURES, partial: bool = False) -> dict[str, Any]:
    """The whole matrix's outputs from its shards' committed runs (:func:`.report.write` through the paper).

    Parameters
    ----------
    folder : path
        The shards' folder: ``<shard>/shard.json`` and ``<shard>/runs/<algorithm>/seed~<s>/metrics.csv`` each.
    config : mapping
        The whole benchmark's merged configuration (:func:`benchmark_config` without a shard).
    out, figures : path
        Where the tables and the figures go (the target ``shift_matrix``'s folders by default).
    partial : bool
        Build over the shards present; the tables' Markdown names the shifts without one.

    Returns
    -------
    dict
        ``shards`` (shift → its stamp), ``missing`` (shifts without a shard), ``files`` (every file written: the
        outputs' and ``<out>/shift_matrix_shards.json``, the first two keys: which shards, commits and machines).

    Raises
    ------
    ValueError
        A shift in two shards, a shard of a shift the matrix has not, a shift without a shard (unless ``partial``),
        a shard's run not the plan's or not in it (naming shift, algorithm and seed).
    FileNotFoundError
        A planned run's ``metrics.csv`` missing from its shard (naming shift, algorithm and seed).
    """
    folder, out, figures = Path(folder), Path(out), Path(figures)
    shards = _shards(folder)
    planned = list(matrix_paper(config).shifts)
    foreign = sorted(set(shards) - set(planned))
    if foreign:
        raise ValueError(f"join: shards under {folder} of shifts the benchmark matrix has not: {foreign}")
    missing = [s for s in planned if s not in shards]
    if missing and not partial:
        raise ValueError(f"join: no shard under {folder} of shifts {missing} (--partial builds the tables over the "
                         "shards present and names those missing)")
    if not shards:
        raise ValueError(f"join: no shard under {folder}")
    paper = matrix_paper(config, [s for s in planned if s in shards])
    where: dict[str, Path] = {}
    for spec in paper.runs():
        path = shards[spec.experiment][0] / "runs" / spec.run / f"seed~{spec.seed}" / "metrics.csv"
        if not path.is_file():
            raise FileNotFoundError(f"join: shift {spec.experiment}: no metrics.csv of {spec.run}, seed {spec.seed} "
                                    f"({path}): its shard is not collected to its end")
        check_run(spec, pd.read_csv(path))
        where[spec.file("metrics")] = path
    known = set(where.values())
    for shift, (shard, _) in shards.items():
        for path in sorted(shard.glob("runs/*/seed~*/metrics.csv")):
            if path not in known:
                raise ValueError(f"join: shift {shift}: {path.parent.parent.name}, seed {path.parent.name[5:]} is "
                                 f"not a run of the benchmark plan ({path})")
    written = []
    for spec in paper.outputs():
        files = {k: str(Path(f.replace(_TABLES, str(out), 1).replace(_FIGURES, str(figures), 1)))
                 for k, f in spec.files.items()}
        for f in files.values():
            Path(f).parent.mkdir(parents=True, exist_ok=True)
        spec = dataclasses.replace(spec, params=dict(spec.params) | {"missing_shifts": missing})
        paper.make_output(spec, [str(where[f]) for f in spec.inputs], files)
        written += list(files.values())
    done = {"shards": {s: stamp for s, (_, stamp) in shards.items()}, "missing": missing}
    record = out / "shift_matrix_shards.json"  # which shards, commits and machines the tables are joined from
    with atomic_write(str(record)) as fh:
        fh.write(json.dumps(done, indent=1) + "\n")
    return done | {"files": [*written, str(record)]}


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m fedshift.papers.shift_matrix.combine collect SHIFT`` or ``... join``: the module's docstring."""
    import sys

    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in and args_in[0] not in ("collect", "join", "-h", "--help", "--root"):
        args_in = ["join", *args_in]  # the folder alone: join
    ap = argparse.ArgumentParser(prog="python -m fedshift.papers.shift_matrix.combine",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=".", type=Path, help="the repository root")
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect", help="copy a finished shard's runs and tables to its snapshot_dir with its stamp")
    c.add_argument("shift")
    c.add_argument("--cpu-s", type=float, default=None, help="the shard's CPU seconds (recorded)")
    c.add_argument("--wall-s", type=float, default=None, help="the shard's wall seconds (recorded)")
    j = sub.add_parser("join", help="the whole matrix's tables from every collected shard")
    j.add_argument("folder", nargs="?", type=Path, default=None, help=f"the shards' folder (default {SNAPSHOT})")
    j.add_argument("--out", type=Path, default=None, help=f"the tables' folder (default {_TABLES})")
    j.add_argument("--figures", type=Path, default=None, help=f"the figures' folder (default {_FIGURES})")
    j.add_argument("--partial", action="store_true", help="build over the shards present, naming those missing")
    args = ap.parse_args(args_in)
    try:
        return _command(args)
    except (ValueError, FileNotFoundError) as err:  # a refusal: its message names the shift and the seed
        raise SystemExit(f"error: {err}") from err


def _command(args: argparse.Namespace) -> int:
    root = args.root
    manifest = load_manifest(root)
    if args.command == "collect":
        shard = next((n for n, e in manifest.items() if not n.startswith("_") and e["shift"] == args.shift), None)
        if shard is None:
            raise SystemExit(f"collect: {args.shift!r} is not a shard of {SHARDS}")
        print(collect_shard(args.shift, benchmark_config(root, manifest, shard), root=root,
                            out=root / manifest[shard]["snapshot_dir"], cpu_s=args.cpu_s, wall_s=args.wall_s))
        return 0
    done = join_shards(args.folder or root / SNAPSHOT, benchmark_config(root, manifest),
                       out=args.out or root / _TABLES, figures=args.figures or root / _FIGURES, partial=args.partial)
    print(f"joined {len(done['shards'])} shards ({', '.join(done['shards'])})"
          + (f"; missing: {', '.join(done['missing'])}" if done["missing"] else "")
          + f"; wrote {len(done['files'])} files")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
