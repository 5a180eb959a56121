"""Time of one local SGD step (forward + backward) of the FedPALS two-layer CNN, by pooling path.

Usage: python benchmarks/pooling.py [--batch 32] [--repeats 300] [--threads 1]
Compares ``max_pool2d(relu(conv))`` in NCHW (PyTorch's default kernel) with :func:`fedshift.models.pool_relu`
(channels-last kernel, same values and gradients) on Fashion-MNIST-sized inputs, and checks that the gradients
agree bit for bit.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from fedshift.models import TwoLayerCNN, pool_relu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=300)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = TwoLayerCNN()
    params = list(model.parameters())
    x = torch.randn(args.batch, 1, 28, 28)
    x[:, :, :6] = -1.0  # constant background rows, as in Fashion-MNIST
    y = torch.randint(0, 10, (args.batch,))

    def nchw(inp):
        h = F.max_pool2d(torch.relu(model.conv1(inp)), 2)
        return model.fc(F.max_pool2d(torch.relu(model.conv2(h)), 2).flatten(1))

    def fast(inp):
        return model.fc(pool_relu(model.conv2(pool_relu(model.conv1(inp)))).flatten(1))

    grads = {}
    print(f"batch {args.batch}, {args.threads} thread(s); median of {args.repeats} steps")
    for name, fwd in [("max_pool2d NCHW", nchw), ("pool_relu", fast)]:
        for _ in range(20):
            torch.autograd.grad(F.cross_entropy(fwd(x), y), params)
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            grads[name] = torch.autograd.grad(F.cross_entropy(fwd(x), y), params)
            times.append(time.perf_counter() - t0)
        print(f"{name:>16}: {statistics.median(times) * 1e3:.3f} ms per step")
    same = all(torch.equal(a, b) for a, b in zip(*grads.values(), strict=True))
    print(f"gradients identical: {same}")


if __name__ == "__main__":
    main()
