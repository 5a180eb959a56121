"""Stability of one FedMM round on a toy saddle problem, by η₃ and M (not a test; prints a table).

Usage::

    .venv/bin/python benchmarks/fedmm_toy_stability.py

Two clients with f_i(w, v) = a w²/2 + b w v − c v²/2 − g_i w + h_i v (scalar ω = w, ψ = v; client-specific
linear terms, as the two one-domain clients at p = 1). The game is affine, so the round map of the library's
FedMM (:func:`fedshift.algorithms.fedmm.build_fedmm`, the quick scale's η₁ = η₂ = 0.01, μ = 2) on the state
(w₀, v₀, λ₁, β₁, λ₂, β₂) is affine too: its linear part is read off by applying one round to the basis states,
and its spectral radius ρ says whether a round contracts (ρ < 1: the iterates converge to the saddle) or
expands (ρ > 1: any deviation, a rounding difference included, grows by about ρ per round). FedAvgSGDA
(:func:`fedshift.algorithms.sgda.build_federated_sgda`) on the state (w₀, v₀) for comparison. a = c small
against b is the near-bilinear regime of an adversarial game near its equilibrium.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from fedshift.algorithms.fedmm import FedMMState, build_fedmm
from fedshift.algorithms.sgda import SGDAState, build_federated_sgda
from fedshift.core.rng import RoundKey

LR, MU = (0.01, 0.01), (2.0, 2.0)


def _directions(a: float, b: float, c: float):
    def factory(client, key):
        def direction(p, m):  # linear part only: the constants g_i, h_i shift the fixed point, not the map
            w, v = p["w"], p["adversary.v"]
            return {"w": a * w + b * v, "adversary.v": -(b * w - c * v)}, torch.zeros((), dtype=torch.float64)

        return direction

    return factory


def _radius_fedmm(a, b, c, eta3, steps) -> float:
    alg = build_fedmm(_directions(a, b, c), local_steps=steps, lr=LR, mu=MU, eta3=eta3, client_ids=[0, 1])
    clients = [SimpleNamespace(client_id=i) for i in range(2)]
    cols = []
    for j in range(6):
        s = np.zeros(6)
        s[j] = 1.0
        t = lambda x: torch.tensor([x], dtype=torch.float64)  # noqa: E731
        st = FedMMState(0, {"w": t(s[0]), "adversary.v": t(s[1])},
                        {"0": {"w": t(s[2]), "adversary.v": t(s[3])}, "1": {"w": t(s[4]), "adversary.v": t(s[5])}})
        new, _ = alg.apply(st, clients, RoundKey(0, 0))
        cols.append([new.params["w"].item(), new.params["adversary.v"].item(),
                     *(new.duals[i][k].item() for i in ("0", "1") for k in ("w", "adversary.v"))])
    return float(max(abs(np.linalg.eigvals(np.array(cols).T))))


def _radius_fedavg(a, b, c, steps) -> float:
    alg = build_federated_sgda(_directions(a, b, c), kind="fedavg_sgda", local_steps=steps, lr=LR)
    clients = [SimpleNamespace(client_id=i) for i in range(2)]
    cols = []
    for j in range(2):
        s = [0.0, 0.0]
        s[j] = 1.0
        st = SGDAState(0, {"w": torch.tensor([s[0]], dtype=torch.float64),
                           "adversary.v": torch.tensor([s[1]], dtype=torch.float64)})
        new, _ = alg.apply(st, clients, RoundKey(0, 0))
        cols.append([new.params["w"].item(), new.params["adversary.v"].item()])
    return float(max(abs(np.linalg.eigvals(np.array(cols).T))))


def main() -> None:
    eta3s = (1.0, 0.96, 0.5, 0.25, 0.1)
    print("a = c, b | FedMM M = 20, η₃ = " + " / ".join(f"{e:g}" for e in eta3s) + " | FedMM M = 50, η₃ = 1 | "
          "FedAvgSGDA M = 20")
    for a, b in ((1.0, 1.0), (0.1, 1.0), (0.0, 1.0), (0.1, 3.0), (0.0, 3.0)):
        r = [_radius_fedmm(a, b, a, e, 20) for e in eta3s]
        print(f"{a:g}, {b:g} | " + " / ".join(f"{x:.3f}" for x in r)
              + f" | {_radius_fedmm(a, b, a, 1.0, 50):.3f} | {_radius_fedavg(a, b, a, 20):.3f}")


if __name__ == "__main__":
    main()
