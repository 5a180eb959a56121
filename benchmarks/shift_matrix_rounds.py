"""Seconds per round of every running shift-matrix algorithm at a given scale, and the matrix's wall time from them.

Usage::

    .venv/bin/python benchmarks/shift_matrix_rounds.py [--scale paper|quick] [--rounds 3] [--device auto]

Builds the configured matrix (``config/papers/shift_matrix.yaml``, with ``config/quick.yaml`` for ``--scale quick``)
on synthetic images of the common format (the cost of a round does not depend on the pixels), times ``--rounds``
rounds of each algorithm under the ``none_iid`` clients (after one warm-up round; PGD-based methods cost the same
under every shift), and prints the per-round cost and the estimate

    wall ≈ Σ_cells seeds × grid_size × rounds × (seconds per round of the cell's algorithm)

for one job at a time (training only; evaluation and data loading add minutes). One torch thread unless
``--threads``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from fedshift.config import load_yaml
from fedshift.contract import deep_merge
from fedshift.models import init_params
from fedshift.papers.shift_matrix import cells
from fedshift.papers.shift_matrix.paper import ShiftMatrixPaper
from fedshift.provenance import pick_device
from fedshift.rng import RoundKey

ROOT = Path(__file__).resolve().parents[1]


def _fake(n_train: int) -> dict:
    g = torch.Generator().manual_seed(0)
    return {"x_train": torch.randint(0, 255, (n_train, 28, 28), generator=g, dtype=torch.uint8),
            "y_train": torch.arange(n_train) % 10,
            "x_test": torch.randint(0, 255, (10000, 28, 28), generator=g, dtype=torch.uint8),
            "y_test": torch.arange(10000) % 10}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", choices=["paper", "quick"], default="paper")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dev = pick_device(args.device)
    section = load_yaml(ROOT / "config/papers/shift_matrix.yaml")["shift_matrix"]
    if args.scale == "quick":
        section = deep_merge(section, load_yaml(ROOT / "config/quick.yaml")["shift_matrix"])
    paper = ShiftMatrixPaper({"shift_matrix": section})
    shift = paper.shifts["none_iid"]
    instance = shift.instance({shift.params["dataset"]: _fake(60000)}, 0, dev)
    module = cells.model_of(section["model"]).to(dev)
    per_round = {}
    for alg in sorted({s.run for s in paper.runs()}):
        if alg == "agnostic_fedavg":  # needs domain ids: time it as domain_fedavg's round plus its weighting
            continue
        if alg == "fedpals":
            continue  # FedAvg's round with other aggregation weights (one QP per participant set)
        algo = cells.build_algorithm(alg, module, instance, section["train"], (section.get("fixed") or {}).get(alg, {}),
                                     paper.grid(alg)[0])
        clients = cells.DATA_ADAPTERS[alg](instance) if alg in cells.DATA_ADAPTERS else instance.clients
        state = algo.init(init_params(module, 0, device=dev))
        state, _ = algo.apply(state, clients, RoundKey(0, 0))
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for r in range(1, args.rounds + 1):
            state, _ = algo.apply(state, clients, RoundKey(0, r))
        if dev.type == "cuda":
            torch.cuda.synchronize()
        per_round[alg] = (time.perf_counter() - t0) / args.rounds
    per_round.setdefault("fedpals", per_round.get("fedavg", np.nan))
    per_round.setdefault("agnostic_fedavg", per_round.get("domain_fedavg", np.nan))
    total = sum(section["seeds"] * section["grid_size"] * section["train"]["rounds"] * per_round[s.run]
                for s in paper.runs() if s.seed == 0)
    print(f"scale {args.scale}, model {section['model']}, device {dev}, {args.threads} thread(s); "
          f"train {section['train']}")
    for alg, sec in sorted(per_round.items()):
        print(f"{alg:16s} {sec:8.3f} s/round")
    print(f"estimated training wall time, one job at a time: {total / 3600:.2f} h "
          f"({len({(s.experiment, s.run) for s in paper.runs()})} cells)")


if __name__ == "__main__":
    main()
