"""Mixture shift over domains (AFL, Mohri et al. 2019; AgnosticFedAvg, Ro et al. 2021).

Each domain (a dataset of the common data: MNIST, USPS, MNIST-M) is split over its own clients, of unequal
numbers, so that the pooled training mixture is not uniform. The test mixture is chosen adversarially: the
primary metric is the worst-domain accuracy, the accuracy under the worst mixture λ ∈ Λ = Δ_p (D_Λ of AFL §2,
eq. 3, with the 0–1 loss: the minimum over domains), and the average U is the uniform mixture's accuracy
(mean over domains). Validation population: held-out training rows of every domain; test: each domain's test
split. Side information: every client's domain id (``domain_ids``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from fedshift.shifts import (
    Partition,
    Population,
    Segment,
    Shift,
    accuracy_by_group,
    demand_problems,
    register_shift,
    split_rows,
)

if TYPE_CHECKING:  # the plan imports no torch (fedshift.shifts); the metric imports it where it runs
    import torch

STREAM = 20


@register_shift
class MixtureShift(Shift):
    """Domains known at training, adversarial test mixture (module docstring)."""

    kind = "mixture"
    side_information = frozenset({"domain_ids"})

    @classmethod
    def protocol(cls, params: Mapping[str, Any], sizes: Callable[[str, str], int | None]) -> list[tuple[str, str]]:
        """Each domain once, one client count per domain, every draw within its split."""
        p, doms, out = params, list(params["domains"]), []
        out += [(f"domains[{i}]", f"{d!r} is listed twice") for i, d in enumerate(doms) if d in doms[:i]]
        if len(p["clients_per_domain"]) != len(doms):
            return [*out, ("clients_per_domain", f"{len(p['clients_per_domain'])} counts for {len(doms)} domains")]
        demands = [(f"clients_per_domain[{k}]", d, "train", m * p["samples_per_client"] + p["validation_per_domain"])
                   for k, (d, m) in enumerate(zip(doms, p["clients_per_domain"], strict=True))]
        return out + demand_problems([*demands, *(("test_per_domain", d, "test", p["test_per_domain"]) for d in doms)],
                                     sizes)

    def datasets(self) -> list[str]:
        """The domains' datasets, in order."""
        return list(self.params["domains"])

    def partition(self, data: Mapping[str, Mapping[str, Any]], seed: int) -> Partition:
        """Per domain k: ``clients_per_domain[k]`` clients of ``samples_per_client`` rows, validation and test rows."""
        p = self.params
        rng = np.random.default_rng([seed, STREAM])
        clients, val, test = [], [], []
        for k, d in enumerate(p["domains"]):
            m = p["clients_per_domain"][k]
            parts = split_rows(rng, np.arange(len(data[d]["y_train"])),
                               [p["samples_per_client"]] * m + [p["validation_per_domain"]])
            clients += [Segment(d, "train", c, k) for c in parts[:-1]]
            val.append(Segment(d, "train", parts[-1], k))
            (t,) = split_rows(rng, np.arange(len(data[d]["y_test"])), [p["test_per_domain"]])
            test.append(Segment(d, "test", t, k))
        return Partition(clients, val, test, info={"domains": list(p["domains"])})

    def side(self, data: Mapping[str, Mapping[str, Any]], partition: Partition, device: Any = "cpu"
             ) -> dict[str, Any]:
        """``{"domain_ids": [domain of client i]}``."""
        return {"domain_ids": [s.group for s in partition.clients]}

    def metrics(self) -> list[str]:
        """Worst-domain accuracy (primary), the uniform mixture's accuracy, then each domain's."""
        return ["worst_domain_accuracy", "average_accuracy"] + [f"accuracy_{d}" for d in self.params["domains"]]

    def columns(self) -> list[str]:
        """D_Λ and U (the per-domain accuracies stay in ``metrics.csv``)."""
        return ["worst_domain_accuracy", "average_accuracy"]

    def metric(self, module: torch.nn.Module, params: dict[str, torch.Tensor], population: Population, *,
               role: str, seed: int) -> dict[str, float]:
        """Per-domain accuracy a_k; worst min_k a_k (= min over λ ∈ Δ of Σ λ_k a_k) and average mean_k a_k."""
        import torch

        from fedshift.models import forward

        with torch.no_grad():
            correct = forward(module, params, population.x).argmax(1) == population.y
        acc = accuracy_by_group(correct, population.group)
        out = {"worst_domain_accuracy": min(acc.values()), "average_accuracy": float(np.mean(list(acc.values())))}
        return out | {f"accuracy_{d}": acc[k] for k, d in enumerate(self.params["domains"])}
