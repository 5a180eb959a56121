r"""Train one seed of every run of some papers in-process and print a digest of each trained model.

"Nothing changes in the numbers" (issue 34, item 5) for a refactor, checked cheaply: run this script in the tree
before and in the tree after the change (each with its own ``PYTHONPATH=<tree>/src``), on the same machine and the
same configuration overlays, then compare the two JSON files. A run's digest is the SHA-256 of every tensor of its
trained parameters and artifacts (names, dtypes, shapes and bytes, in sorted order), so one changed bit anywhere
in data loading, partitioning, algorithm building or training shows. It uses only the paper contract
(``fedshift.contract``: ``load_papers``, ``partitions``, ``write_partition``, ``runs``, ``inputs``, ``train``),
which both trees share; the workflow's prepared data must exist (``snakemake data/prepared/<name>.pt``).

Usage (from a tree's root)::

    PYTHONPATH=src python benchmarks/run_digests.py --papers wafl fedmm shift_matrix \\
        --overlay config/quick.yaml budget.yaml --out digests.json
    python benchmarks/run_digests.py --compare before.json after.json

``--seed`` picks the one seed trained per run id (default 0); ``--overlay`` files are merged over the shipped
configuration in order, as Snakemake's ``--configfile`` does.
"""

from __future__ import annotations

import argparse
import copy
import glob
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
import yaml


def merged_config(overlays: list[str]) -> dict[str, Any]:
    """config/config.yaml, config/datasets.yaml and config/papers/*.yaml, then each overlay, merged recursively."""

    def merge(base: dict[str, Any], over: dict[str, Any]) -> None:
        for k, v in (over or {}).items():
            if isinstance(v, dict) and isinstance(base.get(k), dict):
                merge(base[k], v)
            else:
                base[k] = copy.deepcopy(v)

    cfg: dict[str, Any] = {}
    for f in ["config/config.yaml", "config/datasets.yaml", *sorted(glob.glob("config/papers/*.yaml")), *overlays]:
        merge(cfg, yaml.safe_load(Path(f).read_text()))
    return cfg


def digest(*objects: Any) -> str:
    """SHA-256 over every tensor reachable in ``objects`` (dicts by sorted key, lists in order)."""
    h = hashlib.sha256()

    def walk(obj: Any, path: str) -> None:
        if isinstance(obj, torch.Tensor):
            t = obj.detach().cpu().contiguous()
            h.update(f"{path}:{t.dtype}:{tuple(t.shape)}".encode())
            h.update(t.numpy().tobytes() if t.dtype != torch.bfloat16 else t.float().numpy().tobytes())
        elif isinstance(obj, dict):
            for k in sorted(obj, key=str):
                walk(obj[k], f"{path}/{k}")
        elif isinstance(obj, list | tuple):
            for i, v in enumerate(obj):
                walk(v, f"{path}[{i}]")

    for i, o in enumerate(objects):
        walk(o, str(i))
    return h.hexdigest()[:16]


def run(papers: list[str], overlays: list[str], seed: int, out: Path) -> None:
    """Train every run id's seed ``seed`` of ``papers`` and write {paper/experiment/run: digest} to ``out``."""
    from fedshift.contract import load_papers

    torch.set_num_threads(1)  # one thread: the same reduction order in both trees
    plugins = load_papers(merged_config(overlays))
    result: dict[str, str] = {}
    for name in papers:
        paper = plugins[name]
        paper.validate()
        specs = [s for s in paper.runs() if s.seed == seed]
        wanted = {f for s in specs for f in paper.inputs(s).values() if str(f).startswith("data/partitions/")}
        for part in paper.partitions():
            path = f"data/partitions/{name}/{part.name}"
            if path in wanted and not Path(path).exists():
                Path(path).parent.mkdir(parents=True, exist_ok=True)
                paper.write_partition(part, path)
        for spec in specs:
            t0 = time.perf_counter()
            fit = paper.train(spec, paper.inputs(spec), device=torch.device("cpu"), checkpoint=None,
                              fingerprint="")
            key = f"{name}/{spec.experiment}/{spec.run}"
            result[key] = digest(fit.params, fit.artifacts)
            print(f"{key} {result[key]} {time.perf_counter() - t0:.1f}s", flush=True)
            out.write_text(json.dumps(result, indent=1, sort_keys=True))


def compare(a: Path, b: Path) -> int:
    """Print the runs of ``a`` whose digest differs in ``b`` or is missing there; 1 when any, else 0."""
    x, y = json.loads(a.read_text()), json.loads(b.read_text())
    same = [k for k in x if y.get(k) == x[k]]
    diff = [k for k in x if k in y and y[k] != x[k]]
    missing = [k for k in x if k not in y]
    for k in diff:
        print(f"DIFFERENT {k}: {x[k]} != {y[k]}")
    for k in missing:
        print(f"MISSING in B: {k}")
    print(f"{len(same)} same, {len(diff)} different, {len(missing)} missing in B, {len(set(y) - set(x))} only in B")
    return 1 if diff or missing else 0


def main(argv: list[str] | None = None) -> int:
    """Command line (module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--papers", nargs="+", default=[])
    ap.add_argument("--overlay", nargs="*", default=[])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("digests.json"))
    ap.add_argument("--compare", nargs=2, type=Path)
    args = ap.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    run(args.papers, args.overlay, args.seed, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
