r"""The inside of one FedMM / SGDA run on MNIST → MNIST-M, round by round (not a test; writes a CSV).

Usage (after ``data/prepared/mnist.pt`` and ``mnist_m.pt`` exist)::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/fedmm_dynamics.py --run fedmm-dann-p1-M20-e1 --seed 0 \\
        --every 5 --out results/bench/fedmm_dynamics.csv [--set tasks.digits.heads.dann.eta3_decay=1.5]

The run is the workflow's (:func:`fedshift.papers.fedmm.config.resolve_run` on ``config/papers/fedmm.yaml`` updated by
``--overlay`` and ``--set``, the same data, partition, network, initialisation and batches). Every ``--every``
rounds it records, for the server model: the target test accuracy; on a fixed probe of 1,000 source and 1,000
target *training* rows L₁ (source cross-entropy), L₂ (the domain classifier's loss), f = L₁ − ν L₂, the domain
classifier's accuracy and its mean |logit|; the norms of ω₀ and ψ₀; and for FedMM the norms of the duals λ (ω
entries) and β (ψ entries) per client, the dual term of the message (η₃/μ)‖λ‖ and η₃.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from fedmm_seeds import ROOT, _set, _update  # noqa: E402  (benchmarks/ is the script's folder)

from fedshift.algorithms.domain_adaptation import is_adversary
from fedshift.errors import load_yaml
from fedshift.core.base import FederatedAlgorithm
from fedshift.core.training import run_training
from fedshift.io import read_json
from fedshift.models import init_params
from fedshift.papers import fedmm as P


def _norm(params: dict[str, torch.Tensor], adversary: bool) -> float:
    return float(torch.sqrt(sum(v.pow(2).sum() for k, v in params.items() if is_adversary(k) == adversary)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--overlay", default="config/quick.yaml")
    ap.add_argument("--set", nargs="*", default=[])
    ap.add_argument("--run", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--every", type=int, default=5)
    ap.add_argument("--data", default="data/prepared")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    section = load_yaml(ROOT / "config/papers/fedmm.yaml")["fedmm"]
    if args.overlay:
        _update(section, load_yaml(ROOT / args.overlay).get("fedmm", {}))
    for a in args.set:
        _set(section, a)
    res = P.resolve_run(section, "digits", args.run)
    task = section["tasks"]["digits"]
    src, tgt = (Path(args.data) / f"{P.prepared_name(task, r)}.pt" for r in ("source", "target"))
    out = Path(args.out)
    part_path = out.with_suffix(".partition.json")
    P.write_partition(res["data"], res["clients"], src, tgt, part_path)
    clients, x_test, y_test = P.load_data(res, read_json(part_path), src, tgt, torch.device("cpu"))
    module = P.build_network(res)
    sizes = (sum(c.num_source for c in clients), sum(c.num_target for c in clients))
    try:
        alg = P.build_algorithm(res, module, [c.client_id for c in clients], sizes)
    except TypeError:  # a fedshift before issue 19 (batches split by rows): to rerun an old result
        alg = P.build_algorithm(res, module, [c.client_id for c in clients])
    g = np.random.default_rng(123)
    xs = torch.cat([c.x_source for c in clients])
    ys = torch.cat([c.y_source for c in clients])
    xt = torch.cat([c.x_target for c in clients])
    i_s, i_t = g.choice(len(xs), 1000, replace=False), g.choice(len(xt), 1000, replace=False)
    probe_x = torch.cat([xs[i_s], xt[i_t]])
    probe_y = torch.cat([ys[i_s], torch.zeros(1000, dtype=torch.long)])
    is_t = torch.cat([torch.zeros(1000, dtype=torch.bool), torch.ones(1000, dtype=torch.bool)])
    opt = res["optimizer_settings"]
    rows: list[dict] = []
    t0 = time.time()

    def probe(state, rnd: int) -> None:
        p = alg.eval_params(state)
        module.eval()
        with torch.no_grad():
            _, c, a = torch.func.functional_call(module, p, (probe_x,), {"parts": True})
            a = a.reshape(-1)
            l1 = float(F.cross_entropy(c[~is_t], probe_y[~is_t]))
            l2 = float(F.binary_cross_entropy_with_logits(a, is_t.float()))
            row = {"round": rnd, "target_accuracy": P.accuracy(module, p, x_test, y_test), "L1": l1, "L2": l2,
                   "f": l1 - res["nu"] * l2, "domain_accuracy": float(((a > 0) == is_t).float().mean()),
                   "domain_logit_abs": float(a.abs().mean()), "norm_omega": _norm(p, False),
                   "norm_psi": _norm(p, True), "wall_s": time.time() - t0}
        module.train()
        if hasattr(state, "duals"):
            e3 = float(opt["eta3"] * opt["eta3_decay"] ** (-rnd / opt["eta3_every"]))
            row["eta3"] = e3
            for cid, d in state.duals.items():
                row[f"lambda_{cid}"] = _norm(d, False)
                row[f"beta_{cid}"] = _norm(d, True)
                row[f"message_dual_{cid}"] = e3 / opt["mu"] * row[f"lambda_{cid}"]
        rows.append(row)
        print({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}, flush=True)

    def apply(state, cl, key):
        state, diag = alg.apply(state, cl, key)
        if (key.round + 1) % args.every == 0:
            probe(state, key.round + 1)
        return state, diag

    wrapped = FederatedAlgorithm(alg.name, alg.init, apply, alg.eval_params, alg.state_type)
    run_training(wrapped, init_params(module, args.seed), clients, rounds=res["train"]["rounds"], seed=args.seed,
                 log_every=args.every)
    pd.DataFrame(rows).to_csv(out, index=False)


if __name__ == "__main__":
    main()
