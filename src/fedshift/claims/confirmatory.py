"""The confirmatory run of a final design, one shard (a session's work) at a time, and the judge's check of its runs.

A design (:mod:`fedshift.claims.design`) names, per claim row, a seeds key (``wafl.experiments.mnist.seeds``) and
the explicit fresh seeds its experiment trains. A confirmatory run trains them shard by shard, each under the design's
overlays plus a *shard overlay*: the top-level ``design_hash`` and its experiments' seed lists
(:func:`shard_overlay`), so that its runs record the hash (``run.json``) and the workflow starts only under the
committed final design. A shard is one session's work: the experiments one claim table reads together
(:func:`shard_units`), split into seed groups where its projected CPU-h exceed the design's ``budget.shard_cpu_h``
(:func:`seed_groups`). :func:`write_shards` writes, for every shard, its overlay, its targets (the runs'
``metrics.csv``), its commands and its tables; written once the design is final and committed with it
(:data:`SHARDS_DIR`), every later session runs one shard at that commit::

    python -m fedshift.claims.confirmatory shards config/design/shards

    snakemake --cores 2 $(cat config/design/shards/wafl__mnist+mnist_official__1000-1002.targets) \\
        --configfile config/quick.yaml config/decisive.yaml config/design/settings.yaml \\
        config/design/shards/wafl__mnist+mnist_official__1000-1002.yaml

Each session commits its shard's per-run tables (:mod:`fedshift.claims.combine`), which combines them and judges
the design's rows. Where a claims job judges runs of a confirmatory run (config ``design_hash``), it refuses when any
run of a design experiment recorded another hash or none (:func:`judge_runs`).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from fedshift.claims.design import (
    DesignMismatchError,
    check_design,
    confirmatory_overlay,
    design_hash,
    load_design,
)

__all__ = ["DESIGN_FILE", "SHARDS_DIR", "CONFIRMATORY_DIR", "experiment_of", "shards", "seed_groups", "shard_overlay",
           "shard_targets", "shard_tables", "shard_units", "design_params", "design_runs", "judge_runs", "write_shards", "main"]

#: The committed design, relative to the repository root (the file ``workflow/rules/claims.smk`` checks).
DESIGN_FILE = "config/design/confirmatory.yaml"
#: Where the shards of the final design are committed (:func:`write_shards`), relative to the repository root.
SHARDS_DIR = "config/design/shards"
#: Where each shard's session commits its per-run tables (``<shard>/tables/<paper>/<table>`` and ``<shard>/shard.json``)
#: and where :mod:`fedshift.claims.combine` writes the combined tables and verdicts (``combined/``).
CONFIRMATORY_DIR = "docs/results/confirmatory"

_RUN = re.compile(r"(?:^|/)results/runs/(?P<paper>[^/]+)/(?P<experiment>[^/]+)/[^/]+/seed~\d+/run\.json$")


def experiment_of(seeds_key: str) -> tuple[str, str]:
    """(paper, experiment) of a seeds key: ``wafl.experiments.mnist.seeds`` → ``("wafl", "mnist")``.

    Raises
    ------
    ValueError
        If the key has fewer than three parts or does not end in ``.seeds``.
    """
    parts = seeds_key.split(".")
    if len(parts) < 3 or parts[-1] != "seeds":
        raise ValueError(f"{seeds_key!r} is not a seeds key (<paper>.<section>.<experiment>.seeds)")
    return parts[0], parts[-2]


def shards(design: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Every experiment the design trains, once: ``<paper>__<experiment>`` → its seeds key, overlays and seeds.

    Returns
    -------
    dict
        Shard name → ``{"seeds_key", "paper", "experiment", "overlays", "seeds"}``, in the design's order (the
        design's validation guarantees one overlay list and one seed list per seeds key).
    """
    out: dict[str, dict[str, Any]] = {}
    for c in design["claims"]:
        key = c["settings"]["seeds_key"]
        paper, experiment = experiment_of(key)
        out.setdefault(f"{paper}__{experiment}", {
            "seeds_key": key, "paper": paper, "experiment": experiment,
            "overlays": list(c["settings"]["overlays"]), "seeds": list(c["seeds"]["list"])})
    return out


def seed_groups(seeds: Sequence[int], cpu_h_per_seed: float, limit: float | None) -> list[list[int]]:
    """Split an experiment's seeds into consecutive groups whose projected CPU-h each fit ``limit``, as even as possible.

    One seed's runs are the smallest unit: a seed that alone exceeds ``limit`` forms a group of one (the caller
    reports it). Without a limit, or when all seeds fit, one group.

    Parameters
    ----------
    seeds : sequence of int
        The experiment's seeds, in the design's order.
    cpu_h_per_seed : float
        Projected CPU hours of one seed's runs.
    limit : float or None
        CPU hours one shard may take (the design's ``budget.shard_cpu_h``).

    Returns
    -------
    list of list of int
        The groups; their concatenation is ``seeds``.
    """
    seeds = list(seeds)
    if not limit or cpu_h_per_seed * len(seeds) <= limit or len(seeds) < 2:
        return [seeds]
    per = max(1, math.floor(limit / cpu_h_per_seed + 1e-9)) if cpu_h_per_seed > 0 else len(seeds)
    k = math.ceil(len(seeds) / per)
    q, r = divmod(len(seeds), k)
    groups, i = [], 0
    for g in range(k):
        size = q + (1 if g < r else 0)
        groups.append(seeds[i:i + size])
        i += size
    return groups


def shard_overlay(design: Mapping[str, Any], seeds_key: str, seeds: Sequence[int] | None = None) -> dict[str, Any]:
    """The config overlay of one experiment: the design's hash and that experiment's seed list, nothing else.

    ``seeds``, when given, replaces the design's list (a seed group, :func:`seed_groups`); each must be the design's.

    Raises
    ------
    KeyError
        If no claim of the design names ``seeds_key``.
    """
    full = confirmatory_overlay(design)
    *parents, last = seeds_key.split(".")
    node: Any = full
    for p in parents:
        node = node.get(p) if isinstance(node, Mapping) else None
    if not isinstance(node, Mapping) or last not in node:
        raise KeyError(f"no claim of design {design.get('design')!r} trains seeds key {seeds_key!r}")
    out: dict[str, Any] = {"design_hash": full["design_hash"]}
    tip = out
    for p in parents:
        tip = tip.setdefault(p, {})
    if seeds is not None and not set(seeds) <= set(node[last]):
        raise KeyError(f"seeds {sorted(set(seeds) - set(node[last]))} are not among the design's for {seeds_key!r}")
    tip[last] = list(node[last] if seeds is None else seeds)
    return out


def shard_targets(config: Mapping[str, Any], paper: str, experiment: str) -> list[str]:
    """The files that build every run of one experiment under a merged config: each run's ``metrics.csv``, sorted.

    Raises
    ------
    KeyError
        If the config's ``papers:`` has no ``paper``, or the paper plans no run of ``experiment``.
    """
    from fedshift.contract import load_papers

    plugin = load_papers(config)[paper]
    targets = sorted(s.file("metrics") for s in plugin.runs() if s.experiment == experiment)
    if not targets:
        raise KeyError(f"{paper} plans no run of experiment {experiment!r} under this config")
    return targets


def shard_tables(config: Mapping[str, Any], design: Mapping[str, Any], seeds_key: str) -> tuple[list[str], dict[str, list[str]]]:
    """The tables the design's rows of one experiment read, split by whether that experiment's runs alone build them.

    Returns
    -------
    (list of str, dict)
        The tables (``results/tables/<paper>/<file>``) whose output's inputs are all runs of this experiment, sorted
        (a shard's session builds them, ``snakemake <tables>``, and commits them), and table → the other experiments
        whose runs its output also reads (a shard's session cannot build these without training those).
    """
    from fedshift.contract import load_papers

    paper, experiment = experiment_of(seeds_key)
    ids = {c["id"] for c in design["claims"] if c["settings"]["seeds_key"] == seeds_key}
    wanted = {(c.get("quantity") or {}).get("table") for c in config.get("claims", {}).get(paper, [])
              if c["id"] in ids} - {None}
    own, other = set(), {}
    run_dir = re.compile(rf"^results/runs/{re.escape(paper)}/(?P<experiment>[^/]+)/")
    for out in load_papers(config)[paper].outputs():
        for table in wanted & set(out.files.values()):
            experiments = {m["experiment"] for i in out.inputs if (m := run_dir.match(str(i)))}
            if experiments <= {experiment}:
                own.add(table)
            else:
                other[table] = sorted(experiments - {experiment})
    return sorted(own), dict(sorted(other.items()))


def shard_units(design: Mapping[str, Any], config: Mapping[str, Any]) -> dict[str, list[str]]:
    """The experiments that must run in one shard: those whose runs one claim table reads together, joined.

    A shard's session builds its tables from its own runs, so experiments a table reads together (WAFL's Table 2
    reads four) share a shard. The unit of one experiment is named as it (``wafl__mnist``); of several,
    ``<paper>__<experiment>+<experiment>…`` in the design's order.

    Returns
    -------
    dict
        Unit name → its experiments' shard names (:func:`shards`), in the design's order.
    """
    exps = shards(design)
    parent = {name: name for name in exps}

    def find(x: str) -> str:
        while parent[x] != x:
            x = parent[x]
        return x

    for name, e in exps.items():
        for others in shard_tables(config, design, e["seeds_key"])[1].values():
            for o in others:
                other = f"{e['paper']}__{o}"
                if other in parent:
                    parent[find(other)] = find(name)
    units: dict[str, list[str]] = {}
    for name in exps:
        units.setdefault(find(name), []).append(name)
    return {(m[0] if len(m) == 1 else f"{exps[m[0]]['paper']}__" + "+".join(exps[x]["experiment"] for x in m)): m
            for m in units.values()}


def design_params(config: Mapping[str, Any], root: str | Path) -> dict[tuple[str, str], dict[str, str]]:
    """The extra params of the training jobs of a confirmatory run: ``{(paper, experiment): {"design_hash": h}}``.

    Empty unless ``config`` names ``design_hash``; then one entry per experiment of the committed design
    (:data:`DESIGN_FILE` under ``root``), with the config's hash (the workflow checks it is the file's,
    :func:`fedshift.claims.design.require_design`).

    Raises
    ------
    DesignError
        If the design file does not validate.
    """
    recorded = config.get("design_hash")
    if not recorded:
        return {}
    design = load_design(Path(root) / DESIGN_FILE)
    return {(s["paper"], s["experiment"]): {"design_hash": str(recorded)} for s in shards(design).values()}


def design_runs(run_files: Iterable[str | Path], design: Mapping[str, Any]) -> list[str]:
    """The ``run.json`` files (``results/runs/<paper>/<experiment>/<run>/seed~<s>/run.json``) of design experiments."""
    wanted = {(s["paper"], s["experiment"]) for s in shards(design).values()}
    out = []
    for f in run_files:
        m = _RUN.search(Path(f).as_posix())
        if m and (m["paper"], m["experiment"]) in wanted:
            out.append(str(f))
    return out


def judge_runs(run_files: Iterable[str | Path], design: Mapping[str, Any], *, allow_draft: bool = False) -> str:
    """Refuse to judge unless every run of every design experiment recorded this design's hash.

    Parameters
    ----------
    run_files : iterable of path
        ``run.json`` files of the judged runs (those of experiments the design does not train are not checked).
    design : mapping
        The committed design (:func:`fedshift.claims.design.load_design`).
    allow_draft : bool
        As :func:`fedshift.claims.design.check_design`.

    Returns
    -------
    str
        The design's hash.

    Raises
    ------
    DesignMismatchError
        If no run of a design experiment is among ``run_files``, or any records no ``design_hash`` or another one
        (the message names the runs).
    """
    files = design_runs(run_files, design)
    records = [{"run": f, "design_hash": json.loads(Path(f).read_text(encoding="utf-8")).get("design_hash")}
               for f in files]
    if not records:
        raise DesignMismatchError(f"judge_runs: no run of the design's experiments ({', '.join(shards(design))}) "
                                  "to judge")
    return check_design(records, design, allow_draft=allow_draft)


def write_shards(out_dir: str | Path, *, root: str | Path, design_path: str | Path | None = None,
                 allow_draft: bool = False) -> dict[str, dict[str, Any]]:
    """Write every shard's overlay (``<shard>.yaml``), targets (``<shard>.targets``), the whole overlay and a manifest.

    Parameters
    ----------
    out_dir : path
        Folder written: ``all.yaml`` (:func:`~fedshift.claims.design.confirmatory_overlay`), per shard
        ``<paper>__<experiment>.yaml`` and ``.targets`` (one path a line), and ``shards.json`` (shard → overlays,
        overlay, targets file, its experiments and their seeds, projected CPU-h, the Snakemake command, the claim
        tables its runs build (table → the experiments whose design rows read it) and their command, and the
        snapshot folder its session commits them to). A shard is a unit of experiments (:func:`shard_units`: those a
        table reads together); a unit whose projected CPU-h (the design's ``budget.experiments``) exceeds
        ``budget.shard_cpu_h`` is split into seed groups (:func:`seed_groups`), shards ``<unit>__<first>-<last>``;
        a group of one seed above the limit is marked ``over_limit``. Earlier ``*.yaml`` and ``*.targets`` in the
        folder are removed first.
    root : path
        The repository root (the design's overlays are relative to it).
    design_path : path, optional
        The design; default :data:`DESIGN_FILE` under ``root``.
    allow_draft : bool
        Write the shards of a draft design (a dry run or a test: the workflow itself refuses to start under one).

    Returns
    -------
    dict
        The manifest, also written as ``shards.json``.

    Raises
    ------
    DesignMismatchError
        If the design is a draft and ``allow_draft`` is false.
    DesignError
        If the design does not validate.
    """
    from snakemake.utils import update_config

    from fedshift.claims.rejudge import merged_config

    root, out = Path(root), Path(out_dir)
    design = load_design(design_path or root / DESIGN_FILE)
    if design["status"] != "final" and not allow_draft:
        raise DesignMismatchError(f"design {design['design']!r} is status {design['status']!r}: a confirmatory run "
                                  "needs the committed final design")
    out.mkdir(parents=True, exist_ok=True)
    for old in [*out.glob("*.yaml"), *out.glob("*.targets")]:  # shards of an earlier split
        old.unlink()
    (out / "all.yaml").write_text(yaml.safe_dump(confirmatory_overlay(design), sort_keys=False), encoding="utf-8")
    budget = design.get("budget") or {}
    limit = budget.get("shard_cpu_h")
    manifest: dict[str, dict[str, Any]] = {"_design": {"hash": design_hash(design), "status": design["status"],
                                                       "shard_cpu_h": limit}}
    exps = shards(design)
    whole = merged_config(next(iter(exps.values()))["overlays"], root)
    update_config(whole, confirmatory_overlay(design))

    def per_seed(name: str) -> float:
        plan = (budget.get("experiments") or {}).get(name)
        return plan["runs"] / plan["seeds"] * plan["cpu_s_per_run"] / 3600 if plan else 0.0

    for unit, members in shard_units(design, whole).items():
        first = exps[members[0]]
        order = [x for m in members for x in exps[m]["seeds"]]
        cost = sum(per_seed(m) for m in members)  # a seed's runs of every member (the dearest case)
        groups = seed_groups(list(dict.fromkeys(order)), cost, limit)
        for seeds in groups:
            part = unit if len(groups) == 1 else f"{unit}__{seeds[0]}-{seeds[-1]}"
            overlay: dict[str, Any] = {}
            sub = {m: [x for x in exps[m]["seeds"] if x in seeds] for m in members}
            for m in members:
                if not sub[m]:
                    raise ValueError(f"write_shards: shard {part} has no seed of {m}: give the experiments of "
                                     f"{unit} the same seeds")
                update_config(overlay, shard_overlay(design, exps[m]["seeds_key"], sub[m]))
            overlay_file, targets_file = out / f"{part}.yaml", out / f"{part}.targets"
            overlay_file.write_text(yaml.safe_dump(overlay, sort_keys=False), encoding="utf-8")
            config = merged_config(first["overlays"], root)
            update_config(config, overlay)
            targets = sorted(t for m in members for t in shard_targets(config, first["paper"], exps[m]["experiment"]))
            targets_file.write_text("".join(f"{t}\n" for t in targets), encoding="utf-8")
            tables: dict[str, list[str]] = {}
            for m in members:
                own, other = shard_tables(config, design, exps[m]["seeds_key"])
                for t in [*own, *other]:
                    tables.setdefault(t, []).append(m)
            files = [*first["overlays"], str(overlay_file)]
            configfile = " ".join(shlex.quote(f) for f in files)
            cpu_h = round(sum(per_seed(m) * len(sub[m]) for m in members), 2)
            entry = {"unit": unit, "paper": first["paper"], "overlays": list(first["overlays"]),
                     "experiments": {m: {"seeds_key": exps[m]["seeds_key"], "experiment": exps[m]["experiment"],
                                         "seeds": sub[m]} for m in members},
                     "seeds": list(seeds), "overlay": str(overlay_file), "targets": str(targets_file),
                     "runs": len(targets), "projected_cpu_h": cpu_h,
                     "command": f"snakemake --cores 2 $(cat {shlex.quote(str(targets_file))}) --configfile {configfile}",
                     "tables": dict(sorted(tables.items())),
                     "tables_command": f"snakemake --cores 2 {' '.join(sorted(tables))} --configfile {configfile}",
                     "snapshot_dir": f"{CONFIRMATORY_DIR}/{part}"}
            if limit and cpu_h > limit:
                entry["over_limit"] = (f"one seed of {unit} alone is projected at {cost:.2f} CPU-h, above the "
                                       f"shard limit {limit:g}: this shard cannot finish within one session")
            manifest[part] = entry
    (out / "shards.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return manifest


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m fedshift.claims.confirmatory shards OUT [--design FILE] [--root DIR] [--allow-draft]``."""
    parser = argparse.ArgumentParser(prog="python -m fedshift.claims.confirmatory", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("shards", help="write every experiment's overlay, targets and command (write_shards)")
    p.add_argument("out")
    p.add_argument("--root", default=".")
    p.add_argument("--design", default=None)
    p.add_argument("--allow-draft", action="store_true")
    args = parser.parse_args(argv)
    manifest = write_shards(args.out, root=args.root, design_path=args.design, allow_draft=args.allow_draft)
    for name, shard in manifest.items():
        if not name.startswith("_"):
            print(f"{name}: {shard['runs']} runs, {shard['projected_cpu_h']:g} CPU-h\n  {shard['command']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
