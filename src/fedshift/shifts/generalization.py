"""Federated domain generalisation: source domains on the clients, a target domain no client saw.

The setting of FedSR (Nguyen et al. 2022) and of FL-bench's ``--ood_domains``, asked for in FederatedScope #469:
each source domain (datasets of the common data, e.g. MNIST and USPS) is split i.i.d. over its own clients; the
target domain (e.g. MNIST-M) is never seen in training, not even unlabelled. The validation population is held-out
*source* training rows (``validation_per_source`` of every source): a method is tuned without any target data
([ours]: DomainBed's training-domain validation, the only choice that leaves the target unseen). The test
population is the target's test split. Side information: every client's source-domain id (``domain_ids``), as
the mixture shift gives it; no target data.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from fedshift.shifts import Partition, Segment, Shift, demand_problems, register_shift, split_rows

#: Stream of this shift's draws within a seed.
STREAM = 60


@register_shift
class GeneralizationShift(Shift):
    """Source-domain clients, an unseen target domain (module docstring)."""

    kind = "generalization"
    side_information = frozenset({"domain_ids"})

    @classmethod
    def protocol(cls, params: Mapping[str, Any], sizes: Callable[[str, str], int | None]) -> list[tuple[str, str]]:
        """The target is no source (the unseen column tests an unseen domain), each source once, one client count per
        source, and every draw within its split (:meth:`Shift.protocol`)."""
        p, out = params, []
        src = list(p["sources"])
        if p["target"] in src:
            out.append(("target", f"{p['target']!r} is a source domain: the 'unseen' column would test a seen one"))
        out += [(f"sources[{i}]", f"{d!r} is listed twice") for i, d in enumerate(src) if d in src[:i]]
        if len(p["clients_per_source"]) != len(src):
            out.append(("clients_per_source", f"{len(p['clients_per_source'])} counts for {len(src)} sources"))
            return out
        out += demand_problems([(f"clients_per_source[{k}]", d, "train",
                                 m * p["samples_per_client"] + p["validation_per_source"])
                                for k, (d, m) in enumerate(zip(src, p["clients_per_source"], strict=True))], sizes)
        return out + demand_problems([("test_size", p["target"], "test", p["test_size"])], sizes)

    def datasets(self) -> list[str]:
        """The source datasets, in order, then the target."""
        return list(self.params["sources"]) + [self.params["target"]]

    def partition(self, data: Mapping[str, Mapping[str, Any]], seed: int) -> Partition:
        """Per source k, its clients and validation rows; the test rows from the target's test split.

        Source k gets ``clients_per_source[k]`` clients of ``samples_per_client`` rows and ``validation_per_source``
        held-out rows.

        Raises
        ------
        ValueError
            For a violated :meth:`protocol` condition (the target a source, a count per source missing, ...).
        """
        p = self.params
        self.check_protocol(data)
        rng = np.random.default_rng([seed, STREAM])
        clients, val = [], []
        for k, d in enumerate(p["sources"]):
            m = p["clients_per_source"][k]
            parts = split_rows(rng, np.arange(len(data[d]["y_train"])),
                               [p["samples_per_client"]] * m + [p["validation_per_source"]])
            clients += [Segment(d, "train", c, k) for c in parts[:-1]]
            val.append(Segment(d, "train", parts[-1], k))
        t = p["target"]
        (test,) = split_rows(rng, np.arange(len(data[t]["y_test"])), [p["test_size"]])
        return Partition(clients, val, [Segment(t, "test", test, len(p["sources"]))],
                         info={"sources": list(p["sources"]), "target": t})

    def side(self, data: Mapping[str, Mapping[str, Any]], partition: Partition, device: Any = "cpu"
             ) -> dict[str, Any]:
        """``{"domain_ids": [source domain of client i]}``."""
        return {"domain_ids": [s.group for s in partition.clients]}
