"""Why FedNova's cells differ from FedAvg's where clients have equal sizes: rounding order, or a real difference?

With equal client sizes every client takes the same τ_i local steps, and FedNova's update
x − τ_eff Σ p_i (x − y_i)/τ_i is FedAvg's x − Σ p_i (x − y_i) in exact arithmetic (fedshift.algorithms.fednova).
In floating point the two orders of operations round differently. This script measures, on a matrix cell with
equal sizes (the quick ``none_iid`` column on the prepared Fashion-MNIST, or any column given), per model, seed and
client step η:

* ``w_round1``: max |w_FedNova − w_FedAvg| after one round (rounding: ~1e-8 if the methods are the same);
* ``w_final``, ``test_fednova − test_fedavg`` (points): the same at the end of training;
* ``test_perturbed − test_fedavg``: FedAvg against FedAvg from w₀ + 1e-7·z (z ~ N(0, 1), a rounding-sized
  perturbation) — what rounding alone does to a cell's test accuracy through training.

If the FedNova gaps are of the size of the perturbation gaps, FedNova ≠ FedAvg there is rounding order amplified by
training (a noise of that size), not a difference of method. Run after ``data/prepared/fashion_mnist.pt`` exists::

    .venv/bin/python benchmarks/shift_matrix_fednova_identity.py --seeds 3
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from fedshift.errors import load_yaml
from fedshift.contract import deep_merge
from fedshift.core.training import run_training
from fedshift.papers.shift_matrix import cells
from fedshift.papers.shift_matrix.paper import ShiftMatrixPaper
from fedshift.shifts import load_images

ROOT = Path(__file__).resolve().parents[1]


def accuracy(module: torch.nn.Module, params: dict, pop) -> float:
    from fedshift.models import forward

    with torch.no_grad():
        return float((forward(module, params, pop.x).argmax(1) == pop.y).double().mean())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--column", default="none_iid")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--lrs", type=float, nargs="+", default=[0.1, 0.3], help="client steps (the former quick grid)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    section = deep_merge(load_yaml(ROOT / "config/papers/shift_matrix.yaml")["shift_matrix"],
                         load_yaml(ROOT / "config/quick.yaml")["shift_matrix"])
    paper = ShiftMatrixPaper({"shift_matrix": section})
    shift = paper.shifts[args.column]
    data = load_images({d: str(ROOT / f"data/prepared/{d}.pt") for d in shift.datasets()})
    rows = []
    for seed in range(args.seeds):
        inst = shift.instance(data, seed)
        assert len({c.num_examples for c in inst.clients}) == 1, "the identity needs equal client sizes"
        for model in paper.models:
            train = paper.train_of(model)
            module = cells.model_of(model, inst.image_side, inst.num_labels)
            for lr in args.lrs:
                out = {}
                for name, noise in (("fedavg", 0.0), ("fednova", 0.0), ("perturbed", 1e-7)):
                    alg, w0, clients = cells.setup_cell("fednova" if name == "fednova" else "fedavg", module, inst,
                                                        seed, train=train, fixed={}, value={"client_lr": lr})
                    g = torch.Generator().manual_seed(1000 + seed)
                    w0 = {k: v + noise * torch.randn(v.shape, generator=g) for k, v in w0.items()}
                    one = alg.eval_params(run_training(alg, w0, clients, rounds=1, seed=seed, log_every=1).state)
                    res = run_training(alg, w0, clients, rounds=train["rounds"], seed=seed, log_every=train["rounds"])
                    final = alg.eval_params(res.state)
                    out[name] = (one, final, accuracy(module, final, inst.validation), accuracy(module, final,
                                                                                               inst.test))

                def gap(a, b, i):
                    return max(float((out[a][i][k] - out[b][i][k]).abs().max()) for k in out[a][i])

                rows.append({"model": model, "seed": seed, "client_lr": lr,
                             "w_round1": gap("fednova", "fedavg", 0), "w_final": gap("fednova", "fedavg", 1),
                             "val_fednova_minus_fedavg": 100 * (out["fednova"][2] - out["fedavg"][2]),
                             "test_fednova_minus_fedavg": 100 * (out["fednova"][3] - out["fedavg"][3]),
                             "w_final_perturbed": gap("perturbed", "fedavg", 1),
                             "test_perturbed_minus_fedavg": 100 * (out["perturbed"][3] - out["fedavg"][3]),
                             "val_fedavg": 100 * out["fedavg"][2]})
                print(json.dumps(rows[-1]), flush=True)


if __name__ == "__main__":
    main()
