"""Time per Stochastic-AFL step on the real AFL experiments (not a test; prints a table).

Usage (after the data are prepared, e.g. by the quick run)::

    .venv/bin/python benchmarks/afl_step_time.py [--steps 2000] [--repeats 3] [--device auto]

For each experiment of config/papers/afl.yaml it builds the AFL job exactly as the workflow does
(same resolved hyper-parameters, data on the chosen device), runs 200 warm-up steps, then
``--repeats`` timed blocks of ``--steps`` steps, and prints the median milliseconds per step and
the peak resident memory of the process. One torch thread, as a workflow job uses by default.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
from pathlib import Path

import torch

from fedshift.errors import load_yaml
from fedshift.core.rng import RoundKey
from fedshift.models import init_params
from fedshift.papers.afl.config import resolve_run
from fedshift.papers.afl.fit import build_algorithm, setup
from fedshift.provenance import pick_device

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg: dict = {}
    for f in ("config/config.yaml", "config/datasets.yaml", "config/papers/afl.yaml"):
        cfg.update(load_yaml(ROOT / f))
    dev = pick_device(args.device)
    print(f"device {dev}, torch {torch.__version__}, {args.threads} thread(s)")
    print(f"{'experiment':<20} {'algorithm':<10} {'ms/step (median)':>17} {'runs':>18}")
    for exp in ("afl_adult", "afl_fashion_mnist"):
        resolved = resolve_run(cfg["afl"], exp, "afl")
        data, module = setup(resolved, ROOT / f"data/prepared/{resolved['dataset']}.pt",
                             ROOT / f"data/partitions/afl/{exp}.json", dev)
        alg = build_algorithm(resolved, module, data)
        state = alg.init(init_params(module, 0, device=dev))
        r = 0
        for _ in range(200):
            state, _ = alg.apply(state, data.clients, RoundKey(0, r))
            r += 1
        times = []
        for _ in range(args.repeats):
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(args.steps):
                state, _ = alg.apply(state, data.clients, RoundKey(0, r))
                r += 1
            if dev.type == "cuda":
                torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) / args.steps * 1e3)
        print(f"{exp:<20} {'afl':<10} {statistics.median(times):>17.3f} "
              f"{' '.join(f'{t:.3f}' for t in times):>18}")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
