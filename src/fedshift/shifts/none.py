"""No shift (the control): the clients' data and the test population come from one distribution.

``split: iid`` deals a uniform random sample of the training split to M clients; ``split: dirichlet`` gives
client i a label marginal p_i ~ Dir(β·1) (:func:`fedshift.partition.dirichlet_partition`, the usual non-i.i.d.
split of FedPALS §5 after Yurochkin et al. 2019). Either way the test population is a uniform sample of the
test split and the validation population a uniform sample of the training rows no client holds. No side
information.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fedshift.partition import dirichlet_partition
from fedshift.shifts import Partition, Segment, Shift, register_shift, split_rows

#: Stream of this shift's draws within a seed (``default_rng([seed, STREAM])``).
STREAM = 10


@register_shift
class NoShift(Shift):
    """I.i.d. or Dirichlet clients; test and validation drawn uniformly (module docstring)."""

    kind = "none"

    def partition(self, data: Mapping[str, Mapping[str, Any]], seed: int) -> Partition:
        """Clients (i.i.d. or Dirichlet), then validation from the remaining training rows, test from the test split.

        Raises
        ------
        ValueError
            For an unknown ``split`` or too few rows.
        """
        p, d = self.params, self.params["dataset"]
        y = data[d]["y_train"].numpy()
        rng = np.random.default_rng([seed, STREAM])
        m, n = p["clients"], p["samples_per_client"]
        if p["split"] == "iid":
            parts = split_rows(rng, np.arange(len(y)), [n] * m)
        elif p["split"] == "dirichlet":
            parts = dirichlet_partition(y, num_clients=m, beta=p["beta"], num_labels=self.num_labels,
                                        seed=[seed, STREAM, 1], samples_per_client=n)
        else:
            raise ValueError(f"shift_matrix.shifts.{self.name}.split: unknown split {p['split']!r} (iid, dirichlet)")
        rest = np.setdiff1d(np.arange(len(y)), np.concatenate(parts))
        (val,) = split_rows(rng, rest, [p["validation_size"]])
        (test,) = split_rows(rng, np.arange(len(data[d]["y_test"])), [p["test_size"]])
        return Partition([Segment(d, "train", c) for c in parts], [Segment(d, "train", val)],
                         [Segment(d, "test", test)], info={"split": p["split"]})
