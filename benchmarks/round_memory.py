r"""Peak memory of one round's local training on the sequential path, against the client models' size.

One round of ``fedshift.core.engine.local_sgd`` (sequential path: the CPU path of convolutional models) for C
clients of a torchvision model, each client holding two 32-px images and taking one SGD step. The round's
result keeps every client's final parameters (``LocalResult.params``, shape (C, ...)), so its floor is
C × the model's bytes. The record gives the process's peak resident memory (``ru_maxrss``) over that floor:
≈ 1 when the round holds one copy of the client models, ≈ 2 when it holds two (issue 16: FedPALS iWildCam,
100 ResNet-50 clients, was killed out of memory on the 24 GiB machine).

``--algorithm scaffold`` measures one SCAFFOLD round (``fedshift.algorithms.scaffold``, every client sampled)
instead: its state already holds the N client control variates (N × the model's bytes) before the round, so the
record's growth is the round's peak over that state, in client-model copies (the iWildCam SCAFFOLD job of the
rehearsal, 100 ResNet-50 clients, killed at 23.9 GB). With ``--pool files`` SCAFFOLD reduces each client model as
its client finishes and writes c_i⁺ over c_i (``fedshift.algorithms.scaffold``, the FilePool reduction), so the
growth no longer scales with the round's clients (20 ResNet-50 clients: 1.26 copies with tensors, 0.40 with
files, that 0.40 being the float64 sums and one client's training, ≈ 730 MB, whatever the number of clients).

``--pool files`` trains on a :class:`fedshift.core.engine.FilePool` instead (the streamed path of PACS and iWildCam:
one DataLoader per round and a fresh local optimizer per client, ``--client-optimizer adam`` as Bai et al.'s),
whose images are generated per item.

Usage (from the repository root)::

    python benchmarks/round_memory.py --model resnet50 --clients 20 --classes 182
    python benchmarks/round_memory.py --model resnet50 --clients 20 --classes 182 --algorithm scaffold
    python benchmarks/round_memory.py --model resnet50 --clients 20 --classes 182 --algorithm scaffold --pool files
    python benchmarks/round_memory.py --model resnet50 --clients 20 --classes 182 --pool files --client-optimizer adam
"""

from __future__ import annotations

import argparse
import json
import resource
import sys

import numpy as np
import torch
import torchvision

from fedshift.algorithms.scaffold import build_scaffold
from fedshift.core.engine import ClientPool, FilePool, local_sgd
from fedshift.core.rng import RoundKey


class _Images(torch.utils.data.Dataset):
    """Item ``(row, seed) -> (x, y)``: a 32-px image drawn from ``seed``, label ``row`` mod the classes."""

    def __init__(self, classes: int) -> None:
        self.classes = classes

    def __getitem__(self, item: tuple[int, int]) -> tuple[torch.Tensor, int]:
        row, seed = item
        return torch.randn(3, 32, 32, generator=torch.Generator().manual_seed(seed)), row % self.classes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="resnet50", help="torchvision.models builder name")
    ap.add_argument("--clients", type=int, default=20, help="C, clients trained in the round")
    ap.add_argument("--classes", type=int, default=182, help="output classes (iWildCam: 182)")
    ap.add_argument("--algorithm", choices=("local_sgd", "scaffold"), default="local_sgd",
                    help="what the round runs: the engine's local training alone, or a whole SCAFFOLD round")
    ap.add_argument("--pool", choices=("tensors", "files"), default="tensors",
                    help="clients' data as tensors (sequential path) or as a FilePool (streamed path)")
    ap.add_argument("--client-optimizer", choices=("sgd", "adam"), default="sgd",
                    help="the FilePool's local optimizer (--pool files only)")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    module = getattr(torchvision.models, args.model)(weights=None, num_classes=args.classes).eval()
    params = {k: v.detach().clone() for k, v in module.named_parameters()}
    model_mb = sum(v.numel() * v.element_size() for v in params.values()) / 2**20
    n = 2 * args.clients
    offsets = np.arange(0, n + 1, 2, dtype=np.int64)
    if args.pool == "files":
        pool = FilePool(_Images(args.classes), offsets, torch.device("cpu"), client_optimizer=args.client_optimizer)
    else:
        pool = ClientPool(torch.randn(n, 3, 32, 32), torch.randint(0, args.classes, (n,)), offsets)
    if args.algorithm == "scaffold":
        alg = build_scaffold(module, num_clients=args.clients, clients_per_round=args.clients, local_epochs=1,
                             batch_size=2, client_lr=0.01, path="sequential")
        state = alg.init(params)
        base_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        state, _ = alg.apply(state, pool, RoundKey(0, 0))
        shape = list(next(iter(state.client_controls.values())).shape)
    else:
        base_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        out = local_sgd(module, params, pool, list(range(args.clients)), RoundKey(0, 0), epochs=1, batch_size=2,
                        lr=0.01, path="sequential")
        shape = list(next(iter(out.params.values())).shape)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    floor = args.clients * model_mb
    record = {"algorithm": args.algorithm, "pool": args.pool, "client_optimizer": args.client_optimizer,
              "model": args.model, "clients": args.clients, "model_mb": round(model_mb, 1),
              "client_models_mb": round(floor, 1), "rss_before_round_mb": round(base_mb, 1),
              "peak_rss_mb": round(peak_mb, 1),
              "round_growth_over_client_models": round((peak_mb - base_mb) / floor, 2),
              "result_shape": shape}
    json.dump(record, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
