"""Domain shift with an unlabelled target (FedMM, Shen et al. 2023, §5; WAFL Table 2).

Labelled source clients (MNIST, an i.i.d. split over M clients) and a target domain (MNIST-M or USPS) whose
training images are known without labels: ``unlabelled_size`` of them, spread over the clients
(``placement: spread``, FedMM's split) or held by one client (``placement: one``). The test population is the
target's test split. The validation population is a small labelled sample of the target's training rows,
disjoint from the unlabelled ones ([ours]: the protocol selects hyper-parameters on a population drawn like the
test one; FedMM and WAFL report target test accuracy without saying how they chose theirs). No client ever
holds a labelled target row. Side information: the unlabelled target inputs (``unlabelled_target``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from fedshift.shifts import Partition, Segment, Shift, demand_problems, images, register_shift, split_rows

STREAM = 40
#: Group ids of the rows: source domain 0, target domain 1.
SOURCE, TARGET = 0, 1


@register_shift
class DomainShift(Shift):
    """Source clients, an unlabelled target (module docstring)."""

    kind = "domain"
    side_information = frozenset({"unlabelled_target"})

    @classmethod
    def protocol(cls, params: Mapping[str, Any], sizes: Callable[[str, str], int | None]) -> list[tuple[str, str]]:
        """Target not the source (the adaptation would be to a seen domain), every draw within its split."""
        p, s, t = params, params["source"], params["target"]
        out = [("target", f"{t!r} is the source domain: nothing to adapt to")] if s == t else []
        return out + demand_problems([("samples_per_client", s, "train", p["clients"] * p["samples_per_client"]),
                                      ("validation_size", t, "train", p["unlabelled_size"] + p["validation_size"]),
                                      ("test_size", t, "test", p["test_size"])], sizes)

    def datasets(self) -> list[str]:
        """Source and target datasets."""
        return [self.params["source"], self.params["target"]]

    def partition(self, data: Mapping[str, Mapping[str, Any]], seed: int) -> Partition:
        """I.i.d. source clients; the target's training rows cut into unlabelled and validation rows.

        Raises
        ------
        ValueError
            For an unknown ``placement``.
        """
        p, s, t = self.params, self.params["source"], self.params["target"]
        if p["placement"] not in ("spread", "one"):
            raise ValueError(f"shift_matrix.shifts.{self.name}.placement: expected spread or one, "
                             f"got {p['placement']!r}")
        rng = np.random.default_rng([seed, STREAM])
        m = p["clients"]
        parts = split_rows(rng, np.arange(len(data[s]["y_train"])), [p["samples_per_client"]] * m)
        unl, val = split_rows(rng, np.arange(len(data[t]["y_train"])), [p["unlabelled_size"], p["validation_size"]])
        (test,) = split_rows(rng, np.arange(len(data[t]["y_test"])), [p["test_size"]])
        holders = np.array_split(unl, m) if p["placement"] == "spread" else [unl] + [unl[:0]] * (m - 1)
        unlabelled = [Segment(t, "train", h, i, labelled=False) for i, h in enumerate(holders) if len(h)]
        return Partition([Segment(s, "train", c, SOURCE) for c in parts], [Segment(t, "train", val, TARGET)],
                         [Segment(t, "test", test, TARGET)], unlabelled, info={"placement": p["placement"]})

    def side(self, data: Mapping[str, Mapping[str, Any]], partition: Partition, device: Any = "cpu"
             ) -> dict[str, Any]:
        """``{"unlabelled_target": [(client id, inputs (n_i, side²))]}``: inputs only, labels never read."""
        side = self.image_side
        return {"unlabelled_target": [(seg.group, images(data[seg.dataset], seg.split, seg.indices, side).to(device))
                                      for seg in partition.unlabelled]}
