r"""CPU cost of the shift matrix's adversarial column per evaluated model: APGD (now) against CE-PGD (before).

One evaluation of the adversarial shift's metric attacks the rows of the clients attacked at the largest fraction:
APGD (``fedshift.algorithms.robustness.apgd_linf``: DLR on every such row, then CE on the rows left: the quick
scale's ``targets: 0``; ``apgd_t3``: and 3 targeted runs, the paper scale's) on 80 % of the population, CE-PGD
(``pgd_linf``, as before) on all of it. At the quick scale the validation
population is 10 clients × 50 rows and the test population 10 × 100, both attacked with 10 steps at ε = 0.1;
a (method, seed, model) cell scores validation 13 times while tuning (9 + 3 + 1 rungs) and once more with test at
evaluation. The models are tiny: MNIST MLR and cnn2 trained 150 / 30 full-batch Adam steps on 1,000 rows, plus a
smaller ε at which most rows survive the first run (the cascade's worst case: a robust model).
Each time is ``time.process_time`` of one call, one torch thread, median of ``--repeat``.

Usage (repository root, data mirror beside it)::

    nice -n 15 .venv/bin/python benchmarks/adversarial_attack_cost.py --mirror ../shared/data
"""

from __future__ import annotations

import argparse
import statistics
import time
from functools import partial
from pathlib import Path

import torch

from fedshift.algorithms.adversarial import pgd_linf
from fedshift.algorithms.robustness import accuracy, apgd_linf
from fedshift.data.mnist import load_mnist
from fedshift.papers.shift_matrix.cells import model_of


def _cpu(fn, repeat):
    out, times = None, []
    for _ in range(repeat):
        t = time.process_time()
        out = fn()
        times.append(time.process_time() - t)
    return statistics.median(times), out


def main() -> None:
    """Print, per model, ε and population, the CPU-s of one CE-PGD and one APGD evaluation and the accuracies."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mirror", type=Path, default=Path("../shared/data"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    torch.set_num_threads(1)
    d = load_mnist(args.mirror / "mnist")
    x = torch.from_numpy(d["x_train"][:1000]).float().flatten(1) / 255
    y = torch.from_numpy(d["y_train"][:1000])
    apgd_linf(model_of("logreg", 28, 10), {k: v.detach() for k, v in model_of("logreg", 28, 10).named_parameters()},
              x[:4], y[:4], eps=0.1, steps=1)  # ART's import, once per job, not timed
    print("model  eps    rows  ce_pgd_cpu_s  apgd_cpu_s  ratio  apgd_t3_cpu_s  ratio  ce_pgd_acc  apgd_acc"
          "  apgd_t3_acc")
    for name, fit_steps in (("logreg", 150), ("cnn2", 30)):
        torch.manual_seed(0)
        m = model_of(name, 28, 10)
        opt = torch.optim.Adam(m.parameters(), lr=0.01)
        for _ in range(fit_steps):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(m(x), y).backward()
            opt.step()
        p = {k: v.detach() for k, v in m.named_parameters()}
        for eps in (0.1, 0.02):
            for n in (500, 1000):  # quick validation and test populations
                xt = torch.from_numpy(d["x_test"][:n]).float().flatten(1) / 255
                yt = torch.from_numpy(d["y_test"][:n])
                k = int(0.8 * n)
                t_old, x_old = _cpu(partial(pgd_linf, m, p, xt, yt, eps=eps, step=eps / 5, steps=args.steps),
                                    args.repeat)
                apgd = partial(apgd_linf, m, p, xt[:k], yt[:k], eps=eps, steps=args.steps, seed=0)
                t_new, x_new = _cpu(partial(apgd, targets=0), args.repeat)
                t_t3, x_t3 = _cpu(partial(apgd, targets=3), args.repeat)
                print(f"{name:6} {eps:<5}  {n:5}  {t_old:12.3f}  {t_new:10.3f}  {t_new / t_old:5.1f}  {t_t3:13.3f}"
                      f"  {t_t3 / t_old:5.1f}  {accuracy(m, p, x_old[:k], yt[:k]):10.3f}"
                      f"  {accuracy(m, p, x_new, yt[:k]):8.3f}  {accuracy(m, p, x_t3, yt[:k]):11.3f}", flush=True)


if __name__ == "__main__":
    main()
