r"""Wall time and DataLoader worker starts of one round on the streamed path (PACS and iWildCam's FilePool).

A round trains C clients one after another on a :class:`fedshift.core.engine.FilePool` with ``--workers`` DataLoader
worker processes (the paper configs use 8). Its data are decoded per item, as the image files of PACS and
iWildCam are; ``--decode-ms`` adds that much sleep per item to stand for a JPEG decode and resize. The record
gives the round's wall seconds and how many worker processes decoded an item (distinct worker pids seen by the
dataset; a client with fewer batches than workers leaves some idle): with a DataLoader per client that is up to
C × workers, and every client's first batch waits for its workers to start and decode; with one DataLoader per
round it is ``workers``. The model is a linear classifier
over 3 × 32 × 32 inputs, so the loader, not the model, dominates.

Usage (from the repository root; run it at two commits to compare)::

    python benchmarks/streamed_round.py --clients 100 --per-client 32 --workers 8
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from fedshift.core.engine import FilePool, local_sgd
from fedshift.core.rng import RoundKey
from fedshift.models import LogisticRegression, init_params


class _Decoded(torch.utils.data.Dataset):
    """Item ``(row, seed) -> (x, y)``: a 3 × 32 × 32 input drawn from ``seed`` after ``decode_ms`` of sleep.

    Each worker process records its pid in ``pids`` (one empty file per pid).
    """

    def __init__(self, classes: int, decode_ms: float, pids: Path) -> None:
        self.classes, self.decode_s, self.pids = classes, decode_ms / 1000.0, pids

    def __getitem__(self, item: tuple[int, int]) -> tuple[torch.Tensor, int]:
        row, seed = item
        if torch.utils.data.get_worker_info() is not None:
            (self.pids / str(os.getpid())).touch()
        time.sleep(self.decode_s)
        return torch.randn(3, 32, 32, generator=torch.Generator().manual_seed(seed)), row % self.classes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=100, help="C, clients trained in the round (iWildCam: 100)")
    ap.add_argument("--per-client", type=int, default=32, help="examples per client")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2, help="DataLoader worker processes (paper configs: 8)")
    ap.add_argument("--decode-ms", type=float, default=2.0, help="sleep per item, standing for a decode")
    ap.add_argument("--rounds", type=int, default=3, help="rounds timed (the median is reported)")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    module = LogisticRegression(3 * 32 * 32, 10)
    params = init_params(module, 0)
    offsets = np.arange(0, args.per_client * args.clients + 1, args.per_client, dtype=np.int64)
    seconds, starts = [], []
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            pool = FilePool(_Decoded(10, args.decode_ms, Path(tmp)), offsets, torch.device("cpu"),
                            client_optimizer="adam", num_workers=args.workers)
            t0 = time.perf_counter()
            local_sgd(module, params, pool, list(range(args.clients)), RoundKey(0, r), epochs=1,
                      batch_size=args.batch_size, lr=1e-3)
            seconds.append(time.perf_counter() - t0)
            starts.append(len(list(Path(tmp).iterdir())))
    record = {"clients": args.clients, "per_client": args.per_client, "batch_size": args.batch_size,
              "workers": args.workers, "decode_ms": args.decode_ms, "rounds": args.rounds,
              "round_seconds_median": round(float(np.median(seconds)), 3),
              "round_seconds": [round(s, 3) for s in seconds], "worker_starts_per_round": starts,
              "cpu_count": os.cpu_count(), "torch": torch.__version__}
    json.dump(record, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
