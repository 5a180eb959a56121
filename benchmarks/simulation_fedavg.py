"""Simulation-engine benchmark: FedAvg on Fashion-MNIST, batched vs sequential local training.

Workload (issue "simulation engine"): the 60,000 training images normalised as
(x/255 − 0.2860)/0.3530; 100 clients × 600 images (``torch.randperm`` with seed 0, contiguous
split); 10 clients per round, uniform without replacement; E = 1 epoch of plain SGD, lr 0.05,
batch 10 (60 local steps); 1 warm-up round + 20 measured rounds. Models: multinomial logistic
regression ``Linear(784, 10)`` and the McMahan et al. (2017) CNN.

For each (model, path) it prints the median seconds per measured round, the peak RSS of a process
that ran only that configuration, and the test accuracy after the 21 rounds; for the CNN also the
kernel floor: the time the round's forward/backward computation takes alone (600 forward +
backward passes of the plain module on batch-10 inputs already in memory, no data gathering,
updates or bookkeeping), measured in the same process.

Usage::

    .venv/bin/python benchmarks/simulation_fedavg.py [--raw DIR] [--repeats 3] [--device auto] [--threads N]

``--raw`` is the folder with the four Fashion-MNIST IDX files (default: data/raw/fashion_mnist,
else ../shared/data/fashion-mnist). Each configuration runs in its own subprocess, ``--repeats``
times; the table reports the median over repeats of the per-run median round time. Runs unchanged
on CUDA (``--device auto`` picks it when present).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
MEAN, STD = 0.2860, 0.3530


def default_raw() -> Path:
    for p in (ROOT / "data/raw/fashion_mnist", ROOT.parent / "shared/data/fashion-mnist"):
        if p.is_dir():
            return p
    raise SystemExit("Fashion-MNIST raw files not found: pass --raw DIR")


def one(model: str, path: str, raw: Path, device: str, threads: int) -> dict:
    from fedshift.algorithms.fedavg import build_fedavg
    from fedshift.core.engine import ClientPool
    from fedshift.core.rng import RoundKey
    from fedshift.data.fashion_mnist import load_fashion_mnist
    from fedshift.models import LogisticRegression, McMahanCNN, forward, init_params
    from fedshift.provenance import pick_device

    torch.set_num_threads(threads)
    dev = pick_device(device)
    d = load_fashion_mnist(raw)
    perm = torch.randperm(60000, generator=torch.Generator().manual_seed(0))
    # shuffle the uint8 images first, then normalise in place: one float copy of the training set
    x = torch.as_tensor(d["x_train"])[perm].reshape(60000, 784).float().div_(255).sub_(MEAN).div_(STD).to(dev)
    y = torch.as_tensor(d["y_train"])[perm].to(dev)
    xt = torch.as_tensor(d["x_test"]).reshape(10000, 784).float().div_(255).sub_(MEAN).div_(STD).to(dev)
    yt = torch.as_tensor(d["y_test"]).to(dev)
    del d
    pool = ClientPool(x, y, np.arange(0, 60001, 600))  # client i: images 600 i ... 600 i + 599
    module = (LogisticRegression(784, 10) if model == "mlr" else McMahanCNN(10)).to(dev)
    alg = build_fedavg(module, clients_per_round=10, local_epochs=1, batch_size=10, client_lr=0.05, path=path)
    state = alg.init(init_params(module, 0, device=dev))

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    times = []
    for r in range(21):
        sync()
        t0 = time.perf_counter()
        state, _ = alg.apply(state, pool, RoundKey(0, r))
        sync()
        if r > 0:
            times.append(time.perf_counter() - t0)
    with torch.no_grad():  # in chunks: one 10,000-image CNN forward would hold ~1.5 GB of activations
        acc = sum(float((forward(module, state.params, xt[i:i + 1000]).argmax(1) == yt[i:i + 1000]).sum())
                  for i in range(0, 10000, 1000)) / 10000
    out = {"model": model, "path": path, "median_s": statistics.median(times), "test_acc": acc,
           "device": str(dev), "threads": torch.get_num_threads()}
    if model == "cnn":
        out["floor_s"] = kernel_floor(module, state.params, pool, dev, sync)
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def kernel_floor(module, params, pool, dev, sync) -> float:
    """Median over 5 repetitions of 600 forward+backward passes of batch 10 (one round's compute)."""
    leaves = [p.detach().clone().requires_grad_(True) for p in params.values()]
    for p, leaf in zip(module.parameters(), leaves, strict=True):
        p.data = leaf.data
    xb = pool.x[:600].reshape(60, 10, 784)
    yb = pool.y[:600].reshape(60, 10)
    reps = []
    for _ in range(6):
        sync()
        t0 = time.perf_counter()
        for _ in range(10):  # clients
            for s in range(60):
                loss = torch.nn.functional.cross_entropy(module(xb[s]), yb[s])
                torch.autograd.grad(loss, list(module.parameters()))
        sync()
        reps.append(time.perf_counter() - t0)
    return statistics.median(reps[1:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--raw", type=Path, default=None)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--models", default="mlr,cnn")
    ap.add_argument("--one", nargs=2, metavar=("MODEL", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    raw = args.raw or default_raw()
    if args.one:
        print(json.dumps(one(args.one[0], args.one[1], raw, args.device, args.threads)))
        return
    rows = []
    for model in args.models.split(","):
        for path in ("sequential", "batched"):
            runs = []
            for _ in range(args.repeats):
                cmd = [sys.executable, __file__, "--one", model, path, "--raw", str(raw), "--device", args.device,
                       "--threads", str(args.threads)]
                runs.append(json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout))
            row = dict(runs[0])
            for k in ("median_s", "peak_rss_mib", "floor_s"):
                if k in row:
                    row[k] = statistics.median(r[k] for r in runs)
            row["runs_s"] = [round(r["median_s"], 4) for r in runs]
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    from fedshift.core.engine import choose_path
    from fedshift.models import LogisticRegression, McMahanCNN

    dev = torch.device(rows[0]["device"])
    auto = {"mlr": choose_path(LogisticRegression(784, 10), dev), "cnn": choose_path(McMahanCNN(10), dev)}
    print(f"device {rows[0]['device']}, {rows[0]['threads']} torch threads, torch {torch.__version__}, "
          f"{args.repeats} runs per configuration; path='auto' runs: {auto}")
    print(f"{'model':<5} {'path':<11} {'s/round':>9} {'floor s':>8} {'vs floor':>8} {'batched/seq':>11} "
          f"{'peak RSS MiB':>12} {'test acc':>8}")
    seq = {r["model"]: r["median_s"] for r in rows if r["path"] == "sequential"}
    for r in rows:
        floor = r.get("floor_s")
        ratio = r["median_s"] / seq[r["model"]] if r["model"] in seq else float("nan")
        floor_s = f"{floor:.4f}" if floor else "-"
        vs_floor = f"{r['median_s'] / floor:.2f}x" if floor else "-"
        print(f"{r['model']:<5} {r['path']:<11} {r['median_s']:>9.4f} {floor_s:>8} {vs_floor:>8} "
              f"{ratio:>11.2f} {r['peak_rss_mib']:>12.0f} {r['test_acc']:>8.4f}")


if __name__ == "__main__":
    main()
