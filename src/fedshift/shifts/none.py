"""No shift (the control): the clients' data and the test population come from one distribution.

``split: iid`` deals a uniform random sample of the training split to M clients; ``split: dirichlet`` gives
client i a label marginal p_i ~ Dir(β·1) (:func:`fedshift.partition.dirichlet_partition`, the usual non-i.i.d.
split of FedPALS §5 after Yurochkin et al. 2019). Either way the test population is a uniform sample of the
test split and the validation population a uniform sample of the training rows no client holds. No side
information.

Quantity skew (``sizes: {law: dirichlet, beta: β, min_size: m}``; NIID-Bench's "quantity skew", Li et al. 2022,
ICDE, §III-C): the clients' sizes are drawn, not equal. The M clients share the ``clients · samples_per_client``
rows in proportions q ~ Dir_M(β·1), each client at least m rows: n_i = m + the largest-remainder share q_i of the
rest (:func:`client_sizes`). Under ``split: iid`` the labels stay i.i.d. (quantity skew alone); under ``split:
dirichlet`` client i first draws ``max n_i`` rows by its Dirichlet label marginal and keeps a uniform random n_i of
them (label skew with unequal sizes). Unequal sizes are what size-weighted averaging and FedNova's normalisation
(Wang et al. 2020: τ_i = E · ⌈n_i / B⌉ local steps differ) act on; with equal sizes FedNova is FedAvg.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from fedshift.partition import dirichlet_partition, largest_remainder
from fedshift.shifts import Partition, Segment, Shift, demand_problems, register_shift, split_rows

#: Stream of this shift's draws within a seed (``default_rng([seed, STREAM])``).
STREAM = 10
#: Sub-stream of the client sizes (``default_rng([seed, STREAM, SIZES])``): drawn apart from the rows, so a
#: column with sizes keeps the row draws' stream of the one without.
SIZES = 2


def client_sizes(law: Mapping[str, Any], clients: int, total: int, seed: int) -> list[int]:
    """The clients' sizes under a stated law: ``{"law": "dirichlet", "beta": β, "min_size": m}``.

    NIID-Bench's quantity skew (Li et al. 2022, §III-C: q ~ Dir_N(β), client j gets a q_j share of the data, at
    least a minimum size): n_i = m + largest_remainder(q, total − M·m)_i, so Σ n_i = ``total`` exactly.

    Parameters
    ----------
    law : mapping
        ``law`` (``"dirichlet"``), ``beta`` > 0 (small: very unequal), ``min_size`` m ≥ 1.
    clients, total : int
        M and the rows they share (``clients · samples_per_client``).
    seed : int
        The shift seed.

    Returns
    -------
    list of int, length M

    Raises
    ------
    ValueError
        For an unknown law, or M · m > ``total``.
    """
    if law.get("law") != "dirichlet":
        raise ValueError(f"sizes.law: unknown law {law.get('law')!r} (dirichlet)")
    m = int(law.get("min_size", 1))
    if clients * m > total:
        raise ValueError(f"sizes.min_size: {clients} clients × {m} rows exceed the {total} rows they share")
    q = np.random.default_rng([seed, STREAM, SIZES]).dirichlet(np.full(clients, float(law["beta"])))
    return [m + int(k) for k in largest_remainder(q, total - clients * m)]


@register_shift
class NoShift(Shift):
    """I.i.d. or Dirichlet clients; test and validation drawn uniformly (module docstring)."""

    kind = "none"

    @classmethod
    def protocol(cls, params: Mapping[str, Any], sizes: Callable[[str, str], int | None]) -> list[tuple[str, str]]:
        """The clients' rows and the validation rows within the training split, the test rows within the test split."""
        p, d = params, params["dataset"]
        return demand_problems([("validation_size", d, "train", p["clients"] * p["samples_per_client"]
                                 + p["validation_size"]), ("test_size", d, "test", p["test_size"])], sizes)

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
        sizes = client_sizes(p["sizes"], m, m * n, seed) if p.get("sizes") else [n] * m
        if p["split"] == "iid":
            parts = split_rows(rng, np.arange(len(y)), sizes)
        elif p["split"] == "dirichlet":
            parts = dirichlet_partition(y, num_clients=m, beta=p["beta"], num_labels=self.num_labels,
                                        seed=[seed, STREAM, 1], samples_per_client=max(sizes))
            if p.get("sizes"):  # each client keeps a uniform n_i of its rows: its label marginal, its size
                keep = np.random.default_rng([seed, STREAM, SIZES, 1])
                parts = [np.sort(keep.choice(c, min(k, len(c)), replace=False)) for c, k in zip(parts, sizes,
                                                                                                strict=True)]
        else:
            raise ValueError(f"shift_matrix.shifts.{self.name}.split: unknown split {p['split']!r} (iid, dirichlet)")
        rest = np.setdiff1d(np.arange(len(y)), np.concatenate(parts))
        (val,) = split_rows(rng, rest, [p["validation_size"]])
        (test,) = split_rows(rng, np.arange(len(data[d]["y_test"])), [p["test_size"]])
        return Partition([Segment(d, "train", c) for c in parts], [Segment(d, "train", val)],
                         [Segment(d, "test", test)], info={"split": p["split"], "sizes": [len(c) for c in parts]})
