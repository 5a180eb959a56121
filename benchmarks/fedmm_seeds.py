r"""FedMM against its baselines over several seeds on MNIST → MNIST-M (not a test; writes CSVs, prints a table).

Usage (after ``data/prepared/mnist.pt`` and ``mnist_m.pt`` exist, e.g. from the quick run)::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/fedmm_seeds.py --overlay config/quick.yaml \\
        --runs fedmm-dann-p1-M20-e1 fedavg_sgda-dann-p1-M20-e0 --seeds 0 1 2 --out results/bench/fedmm

Every (run, seed) is the workflow's training job (:func:`fedshift.papers.fedmm.paper.train_job`, same resolved
hyper-parameters as ``config/papers/fedmm.yaml`` updated by ``--overlay`` and ``--set``), its history every
``eval_every`` rounds (target accuracy, mean local objective, drift, FedMM's dual norm and η₃) written to
``<out>/<run>/seed~<s>/history.csv``. The summary (``<out>/summary.csv``) gives per run and seed the final
accuracy, the mean over the last ``--last`` evaluations, the wall time and the process's CPU time (on a
shared machine the CPU time is the cost); with two or more runs it also prints
the first run minus each other run, paired by seed (mean ± std over seeds).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from fedshift.errors import load_yaml
from fedshift.papers import fedmm as P
from fedshift.papers.fedmm.paper import train_job

ROOT = Path(__file__).resolve().parents[1]


def _update(base: dict, over: dict) -> dict:
    """Nested dict update (Snakemake's ``--configfile`` overlay semantics)."""
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _update(base[k], v)
        else:
            base[k] = v
    return base


def _set(section: dict, assignment: str) -> None:
    """``tasks.digits.train.rounds=120`` → section["tasks"]["digits"]["train"]["rounds"] = 120 (YAML value)."""
    path, value = assignment.split("=", 1)
    *keys, last = path.split(".")
    node = section
    for k in keys:
        node = node[k]
    node[last] = yaml.safe_load(value)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--overlay", default="config/quick.yaml", help="config overlay ('' for paper scale)")
    ap.add_argument("--set", nargs="*", default=[], help="fedmm-section assignments, e.g. tasks.digits.seeds=3")
    ap.add_argument("--task", default="digits")
    ap.add_argument("--runs", nargs="+", required=True, help="run ids, the first is compared with the others")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--data", default="data/prepared", help="folder with the prepared source and target")
    ap.add_argument("--out", default="results/bench/fedmm")
    ap.add_argument("--last", type=int, default=4, help="evaluations averaged at the end of a run")
    args = ap.parse_args()
    section = load_yaml(ROOT / "config/papers/fedmm.yaml")["fedmm"]
    if args.overlay:
        _update(section, load_yaml(ROOT / args.overlay).get("fedmm", {}))
    for a in args.set:
        _set(section, a)
    out = Path(args.out)
    rows = []
    for rid in args.runs:
        res = P.resolve_run(section, args.task, rid)
        task = section["tasks"][args.task]
        src, tgt = (Path(args.data) / f"{P.prepared_name(task, r)}.pt" for r in ("source", "target"))
        part = out / "partitions" / f"{res['clients']}.json"
        if not part.exists():
            P.write_partition(res["data"], res["clients"], src, tgt, part)
        for seed in args.seeds:
            d = out / rid / f"seed~{seed}"
            t0, c0 = time.time(), time.process_time()
            info = train_job(res, seed, source_path=src, target_path=tgt, partition_path=part,
                             model_path=d / "model.pt", history_path=d / "history.csv",
                             run_json_path=d / "run.json", checkpoint_path=None)
            hist = pd.read_csv(d / "history.csv")
            acc = hist["target_accuracy"].to_numpy() * 100
            rows.append({"run": rid, "seed": seed, "final": acc[-1], f"last{args.last}": acc[-args.last:].mean(),
                         "best": acc.max(), "best_round": int(hist["round"].iloc[int(np.argmax(acc))]),
                         "wall_s": time.time() - t0, "cpu_s": time.process_time() - c0,
                         "rounds": info["rounds"]})
            print(rows[-1], flush=True)
    df = pd.DataFrame(rows)
    df.to_csv(out / "summary.csv", index=False)
    print(df.to_string(index=False, float_format=lambda v: f"{v:.1f}"))
    key = f"last{args.last}"
    first = df[df.run == args.runs[0]].set_index("seed")
    for rid in args.runs[1:]:
        other = df[df.run == rid].set_index("seed")
        for col in ("final", key):
            diff = (first[col] - other[col]).dropna()
            print(f"{args.runs[0]} − {rid} ({col}, paired over {len(diff)} seeds): "
                  f"{diff.mean():+.1f} ± {diff.std(ddof=1) if len(diff) > 1 else float('nan'):.1f} "
                  f"(per seed {', '.join(f'{v:+.1f}' for v in diff)})")


if __name__ == "__main__":
    main()
