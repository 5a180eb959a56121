"""Label shift with the target's label marginal known (FedPALS, Listo Zec et al. 2024, §5).

The draw is FedPALS's own (:func:`fedshift.partition.label_shift.label_shift_partition`): M clients of C labels each by
sparsity sampling (:func:`fedshift.partition.sparsity_partition`); client M − 1 is the target, drawn like a client.
Its training rows are the validation population; the test population is drawn from the test split with the
target's label marginal T. The M − 1 others are the training clients. Side information: T
(``target_label_marginal``), which FedPALS's aggregation weights need (§4, eq. 7).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from fedshift.partition.label_shift import label_shift_partition
from fedshift.shifts import Partition, Segment, Shift, demand_problems, register_shift


@register_shift
class LabelShift(Shift):
    """FedPALS §5 sparse labels (module docstring)."""

    kind = "label"
    side_information = frozenset({"target_label_marginal"})

    @classmethod
    def protocol(cls, params: Mapping[str, Any], sizes: Callable[[str, str], int | None]) -> list[tuple[str, str]]:
        """The clients' and the target's rows (``clients + 1`` label sets; validation is cut from the target's) within
        the training split, the test rows within the test split (FedPALS's per-label checks follow in the partition)."""
        p, d = params, params["dataset"]
        rows = (p["clients"] + 1) * p["labels_per_client"] * p["samples_per_label"]
        return demand_problems([("samples_per_label", d, "train", rows), ("test_size", d, "test", p["test_size"])],
                               sizes)

    def fedpals_experiment(self) -> dict[str, Any]:
        """The FedPALS experiment entry whose partition this shift draws.

        (:func:`~fedshift.partition.label_shift.label_shift_partition`, the FedPALS pipeline's own draw.)
        """
        p = self.params
        return {"dataset": p["dataset"], "num_clients": p["clients"] + 1,
                "label_shift": {"kind": "sparsity", "labels_per_client": p["labels_per_client"]},
                "samples_per_label": p["samples_per_label"], "validation_size": p["validation_size"],
                "test_size": p["test_size"], "algorithms": {}}

    def partition(self, data: Mapping[str, Mapping[str, Any]], seed: int) -> Partition:
        """FedPALS's partition of ``seed`` (the same draw its own pipeline makes for that experiment and seed)."""
        d = self.params["dataset"]
        part = label_shift_partition(self.fedpals_experiment(), data[d]["y_train"].numpy(),
                                     data[d]["y_test"].numpy(), seed)
        return Partition([Segment(d, "train", np.asarray(c, dtype=np.int64)) for c in part["clients"]],
                         [Segment(d, "train", np.asarray(part["validation"], dtype=np.int64))],
                         [Segment(d, "test", np.asarray(part["test"], dtype=np.int64))],
                         info={"target": part["target"], "marginals": part["marginals"], "sizes": part["sizes"],
                               "label_sets": part["label_sets"]})

    def side(self, data: Mapping[str, Mapping[str, Any]], partition: Partition, device: Any = "cpu"
             ) -> dict[str, Any]:
        """``{"target_label_marginal": T}`` (K,) as a list."""
        return {"target_label_marginal": list(partition.info["target"])}
