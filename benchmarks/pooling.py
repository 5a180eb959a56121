"""Time of one local SGD step (forward + backward) by pooling path, for the CNNs that pool.

Usage: python benchmarks/pooling.py [--batch 32] [--repeats 300] [--threads 1]
Compares ``max_pool2d(relu(conv))`` in NCHW (PyTorch's default kernel) with :func:`fedshift.models.pool_relu`
(channels-last kernel, same values and gradients) for the FedPALS two-layer CNN on Fashion-MNIST-sized inputs,
and ``nn.MaxPool2d(2)`` with :class:`fedshift.models.MaxPool2x2` in FedMM's digits feature extractor
(3 × 28 × 28); checks that the gradients agree bit for bit.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from fedshift.algorithms.domain_adaptation import DigitsFeatures
from fedshift.models import MaxPool2x2, TwoLayerCNN, pool_relu


def time_steps(fn, params, repeats: int) -> tuple[float, tuple[torch.Tensor, ...]]:
    """Median seconds of ``autograd.grad(fn(), params)`` after 20 warm-up steps, and the last gradients."""
    for _ in range(20):
        torch.autograd.grad(fn(), params)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        grads = torch.autograd.grad(fn(), params)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), grads


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

    print(f"batch {args.batch}, {args.threads} thread(s); median of {args.repeats} steps")
    t_ref, g_ref = time_steps(lambda: F.cross_entropy(nchw(x), y), params, args.repeats)
    t_new, g_new = time_steps(lambda: F.cross_entropy(fast(x), y), params, args.repeats)
    same = all(torch.equal(a, b) for a, b in zip(g_ref, g_new, strict=True))
    print(f"two-layer CNN   max_pool2d NCHW {t_ref * 1e3:7.3f} ms  pool_relu  {t_new * 1e3:7.3f} ms  "
          f"gradients identical: {same}")

    digits = DigitsFeatures(conv_layers=2)
    reference = torch.nn.Sequential(*[torch.nn.MaxPool2d(2) if isinstance(m, MaxPool2x2) else m for m in digits.net])
    xd = torch.randn(args.batch, 3, 28, 28)
    xd[:, :, :6] = 0.0
    dparams = list(digits.parameters())
    t_ref, g_ref = time_steps(lambda: reference(xd).square().mean(), dparams, args.repeats)
    t_new, g_new = time_steps(lambda: digits(xd).square().mean(), dparams, args.repeats)
    same = all(torch.equal(a, b) for a, b in zip(g_ref, g_new, strict=True))
    print(f"FedMM digits    nn.MaxPool2d    {t_ref * 1e3:7.3f} ms  MaxPool2x2 {t_new * 1e3:7.3f} ms  "
          f"gradients identical: {same}")

if __name__ == "__main__":
    main()
