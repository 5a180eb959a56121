"""Time of the FedPALS aggregation QP (eq. 7) and of the ESS-targeted λ search, per number of clients.

Usage: python benchmarks/fedpals_qp.py [--clients 9 100 1000] [--repeats 5]
Prints the median wall time of ``fedpals_weights`` (λ = 0: two QPs; λ > 0: one) and of
``lambda_for_ess`` (bisection, many QPs) on random Dirichlet(0.5) label marginals over 10 labels.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from fedshift.algorithms.fedpals import fedpals_weights, lambda_for_ess


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[9, 100, 1000])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print("clients  lambda=0 [ms]  lambda=100 [ms]  lambda_for_ess(0.5) [ms]")
    for m in args.clients:
        s = rng.dirichlet(np.full(10, 0.5), size=m)
        t = rng.dirichlet(np.full(10, 0.5))
        n = rng.integers(50, 5000, size=m)
        t0 = median_time(lambda: fedpals_weights(t, s, n, 0.0), args.repeats)  # noqa: B023
        t1 = median_time(lambda: fedpals_weights(t, s, n, 100.0), args.repeats)  # noqa: B023
        t2 = median_time(lambda: lambda_for_ess(t, s, n, 0.5), max(1, args.repeats // 5))  # noqa: B023
        print(f"{m:7d}  {1e3 * t0:13.1f}  {1e3 * t1:15.1f}  {1e3 * t2:24.1f}")


if __name__ == "__main__":
    main()
