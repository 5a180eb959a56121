"""Engine benchmark for the device check (issue 38): FedAvg on Fashion-MNIST, batched vs sequential, on one device.

Workload: the Fashion-MNIST training images of the data bundle (``benchmarks/device_bundle.py``: the first
``--clients × --per-client`` rows of the real training split), normalised as (x/255 − 0.2860)/0.3530, split
contiguously into ``--clients`` clients of ``--per-client`` images; each round samples ``C`` clients uniformly
without replacement (C = 10, 50, 100), E = 1 local epoch of plain SGD with lr 0.05 and batch 10. Models: multinomial
logistic regression ``Linear(784, 10)`` and the McMahan et al. (2017) CNN. Every (model, path, C) runs 1 warm-up
round and ``--rounds`` measured rounds (fewer if ``--seconds`` per configuration run out) in this one process.

Configurations run MLR first, then the CNN, each C with batched then sequential; ``--budget`` seconds for the
whole run (configurations not started by then are listed under ``skipped``), and the record is rewritten after
every configuration, so a run killed at its limit keeps what it measured. Per configuration the JSON record holds
the median seconds per round, the peak device memory of the measured rounds
(``torch.cuda.max_memory_allocated``; on the CPU the process's peak RSS), the mean and max GPU utilisation sampled
through NVML every 20 ms while the measured rounds run (``pynvml``, else ``torch.cuda.utilization``; absent on the
CPU), and the final round's training loss.

Usage::

    python benchmarks/engine_cuda.py --data .devbundle/data --device cuda --out engine.json
    python benchmarks/engine_cuda.py --device cpu --tiny --out engine.json   # CI: every step, seconds

``--tiny``: 8 clients of 20 examples, C = 2 and 4, one measured round; random images of the real shape when the
bundle has no data.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
MEAN, STD = 0.2860, 0.3530


class UtilSampler:
    """GPU utilisation (percent of time a kernel ran, NVML's counter) sampled in a background thread.

    Parameters
    ----------
    device : torch.device
        The GPU; on another device the sampler records nothing.
    period : float
        Seconds between samples.
    """

    def __init__(self, device: torch.device, period: float = 0.02):
        self.samples: list[int] = []
        self.period = period
        self.read = None
        self.source = None
        self._stop = threading.Event()
        self._thread = None
        if device.type != "cuda":
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(device.index or 0)
            self.read = lambda: pynvml.nvmlDeviceGetUtilizationRates(handle).gpu
            self.source = "pynvml"
        except Exception:  # noqa: BLE001 - any NVML failure: fall back to torch's reader, else none
            try:
                torch.cuda.utilization(device)
                self.read = lambda: torch.cuda.utilization(device)
                self.source = "torch.cuda.utilization"
            except Exception:  # noqa: BLE001
                self.read = None

    def __enter__(self):
        if self.read is not None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()
        return self

    def _loop(self):
        while not self._stop.is_set():
            self.samples.append(int(self.read()))
            time.sleep(self.period)

    def __exit__(self, *exc):
        if self._thread is not None:
            self._stop.set()
            self._thread.join()

    def summary(self) -> dict:
        """Mean and max of the samples (None without NVML) and where they came from."""
        if not self.samples:
            return {"gpu_util_mean_pct": None, "gpu_util_max_pct": None, "gpu_util_source": self.source}
        return {"gpu_util_mean_pct": round(float(np.mean(self.samples)), 1), "gpu_util_max_pct": max(self.samples),
                "gpu_util_samples": len(self.samples), "gpu_util_source": self.source}


def load_pool(data: Path | None, clients: int, per_client: int, device: torch.device, tiny: bool):
    """The benchmark's :class:`~fedshift.core.engine.ClientPool`.

    The bundle's images; random ones if ``tiny`` and the bundle has none.
    """
    from fedshift.core.engine import ClientPool

    n = clients * per_client
    if tiny and not (data / "fashion-mnist").is_dir():
        g = torch.Generator().manual_seed(0)
        x8 = torch.randint(0, 256, (n, 28, 28), generator=g, dtype=torch.uint8)
        y = torch.randint(0, 10, (n,), generator=g)
    else:
        from fedshift.data.fashion_mnist import read_idx

        folder = data / "fashion-mnist"
        x8 = torch.from_numpy(read_idx(folder / "train-images-idx3-ubyte.gz"))
        y = torch.from_numpy(read_idx(folder / "train-labels-idx1-ubyte.gz")).long()
        if len(y) < n:
            raise SystemExit(f"{folder} holds {len(y)} training images; {clients} × {per_client} = {n} needed")
        x8, y = x8[:n], y[:n]
    x = x8.reshape(n, 784).float().div_(255).sub_(MEAN).div_(STD).to(device)
    return ClientPool(x, y.to(device), np.arange(0, n + 1, per_client, dtype=np.int64))


def one(model: str, path: str, cpr: int, pool, device: torch.device, rounds: int, seconds: float) -> dict:
    """Time ``rounds`` FedAvg rounds (after one warm-up) of ``cpr`` clients per round."""
    from fedshift.algorithms.fedavg import build_fedavg
    from fedshift.core.rng import RoundKey
    from fedshift.models import LogisticRegression, McMahanCNN, init_params

    module = (LogisticRegression(784, 10) if model == "mlr" else McMahanCNN(10)).to(device)
    alg = build_fedavg(module, clients_per_round=cpr, local_epochs=1, batch_size=10, client_lr=0.05, path=path)
    state = alg.init(init_params(module, 0, device=device))

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    state, diag = alg.apply(state, pool, RoundKey(0, 0))  # warm-up: kernels chosen, libraries loaded
    sync()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    with UtilSampler(device) as util:
        start = time.perf_counter()
        for r in range(1, rounds + 1):
            t0 = time.perf_counter()
            state, diag = alg.apply(state, pool, RoundKey(0, r))
            sync()
            times.append(time.perf_counter() - t0)
            if time.perf_counter() - start > seconds:
                break
    loss = float(diag["loss"])
    out = {"model": model, "path": path, "clients_per_round": cpr, "rounds_measured": len(times),
           "s_per_round": statistics.median(times), "rounds_s": [round(t, 5) for t in times], "final_loss": loss,
           "device": str(device)}
    if device.type == "cuda":
        out["peak_mem_mib"] = round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
    else:
        out["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    out.update(util.summary())
    if not np.isfinite(loss):
        raise RuntimeError(f"{model}/{path}/C={cpr}: non-finite training loss {loss}")
    return out


def main(argv: list[str] | None = None) -> dict:
    """Run the benchmark; write and return the JSON record."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT / ".devbundle" / "data")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--per-client", type=int, default=300)
    ap.add_argument("--clients-per-round", default="10,50,100")
    ap.add_argument("--models", default="mlr,cnn")
    ap.add_argument("--paths", default="batched,sequential")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=20.0, help="stop measuring a configuration after this long")
    ap.add_argument("--budget", type=float, default=float("inf"),
                    help="seconds for the whole benchmark: configurations not started by then are listed as skipped")
    ap.add_argument("--tiny", action="store_true")
    args = ap.parse_args(argv)
    if args.tiny:
        args.clients, args.per_client, args.clients_per_round, args.rounds = 8, 20, "2,4", 1
    from fedshift.provenance import pick_device

    start = time.perf_counter()
    device = pick_device(args.device)
    pool = load_pool(args.data, args.clients, args.per_client, device, args.tiny)
    rows, skipped = [], []
    record = {"benchmark": "engine_cuda", "device": str(device), "torch": torch.__version__,
              "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
              "workload": {"clients": args.clients, "per_client": args.per_client, "local_epochs": 1,
                           "batch_size": 10, "client_lr": 0.05,
                           "data": "random (tiny)" if args.tiny and not (args.data / "fashion-mnist").is_dir() else
                           "Fashion-MNIST train rows from the bundle"},
              "rows": rows, "skipped": skipped}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for model in args.models.split(","):
        for cpr in (int(c) for c in args.clients_per_round.split(",")):
            for path in args.paths.split(","):
                if time.perf_counter() - start > args.budget:
                    skipped.append({"model": model, "path": path, "clients_per_round": cpr})
                    continue
                row = one(model, path, cpr, pool, device, args.rounds, args.seconds)
                rows.append(row)
                _speedups(rows)
                print(json.dumps(row), file=sys.stderr, flush=True)
                args.out.write_text(json.dumps(record, indent=1))  # after every configuration: a kill keeps them
    args.out.write_text(json.dumps(record, indent=1))
    return record


def _speedups(rows: list[dict]) -> None:
    """Batched speed-up over sequential for the same model and C, on the batched rows."""
    for r in rows:
        seq = [s for s in rows if s["path"] == "sequential" and s["model"] == r["model"]
               and s["clients_per_round"] == r["clients_per_round"]]
        if r["path"] == "batched" and seq:
            r["speedup_vs_sequential"] = round(seq[0]["s_per_round"] / r["s_per_round"], 2)


if __name__ == "__main__":
    main()
