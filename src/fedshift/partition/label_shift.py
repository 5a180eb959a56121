"""The label-shift draw of a federation with a target client (FedPALS §5 and App. A.1), shared by the papers.

M clients are drawn by sparsity (C labels per client) or Dirichlet(β) sampling; client M − 1 is the target,
whose examples become the validation set and whose label marginal T is drawn again from the test split; the
Oracle's federation is drawn like T. Every caller (a paper's label-shift experiments, the label-shift kind of
:mod:`fedshift.shifts`) draws the same partition from the same (experiment, seed), so they import it from here
rather than from each other.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedshift.core.simplex import check_marginal
from fedshift.data.registry import num_classes
from fedshift.partition import dirichlet_partition, label_marginals, largest_remainder, sparsity_partition
from fedshift.partition.label_counts import sample_label_counts, sample_with_marginal, split_label_counts

__all__ = ["MAX_TARGET_REDRAWS", "label_shift_partition", "oracle_clients"]


#: Redraws of the label-shift draw allowed before ``target_coverage: covered`` gives up.
MAX_TARGET_REDRAWS = 1000
#: Stream of the redraws: redraw r ≥ 1 draws the clients from ``default_rng([seed, 2, r])``.
_REDRAW_STREAM = 2


# Over 80 lines: its NumPy docstring states the federation's draw (35 lines); the body is 49, one draw in order.
def label_shift_partition(experiment: dict[str, Any], y_train: np.ndarray, y_test: np.ndarray,
                          seed: int) -> dict[str, Any]:
    """Clients, target and Oracle of one (experiment, seed) as a JSON-ready index map.

    The M clients are drawn by ``label_shift.kind`` (sparsity or Dirichlet sampling, §5); client M−1
    is the target unless ``label_shift.target`` gives T. ``label_shift.target_coverage`` (default
    ``covered``) redraws the whole draw, from ``default_rng([seed, 2, r])`` for redraw r = 1, 2, …,
    until every label of T's support is held by at least one training client; ``literal`` keeps the
    first draw, as the paper's text reads, in which the target can ask for a label no client holds
    (Fashion-MNIST C = 3: seeds 2 and 7 of 0–7), capping every method on that seed. A first draw that
    covers T is kept as it is (0 redraws).

    Parameters
    ----------
    experiment : dict
        One entry of ``fedpals.experiments``.
    y_train, y_test : ndarray of int
        Labels of the dataset's training and test splits.
    seed : int
        Seed of the draw (labels per client, shuffles, target test sample, Oracle clients).

    Returns
    -------
    dict
        ``clients`` (M−1 index lists into the training split), ``validation`` (the target client's
        indices, capped by ``validation_size``), ``test`` (test-split indices drawn with marginal T),
        ``oracle`` (M−1 disjoint index lists drawn like T from the training split minus the validation set,
        :func:`oracle_clients`; empty unless the experiment trains ``oracle``), ``marginals`` S (M−1 × K),
        ``target`` T, ``sizes``, ``label_sets`` (sparsity),
        ``target_coverage`` and ``target_redraws`` (the number of redraws).

    Raises
    ------
    ValueError
        C > K, a client left empty, a target that cannot be drawn from the test split, or no covering
        draw within :data:`MAX_TARGET_REDRAWS` redraws.
    """
    k = num_classes(experiment["dataset"])
    m = experiment["num_clients"]
    shift = experiment["label_shift"]
    coverage = shift.get("target_coverage", "covered")
    fixed_t = check_marginal(shift["target"], "target") if "target" in shift else None
    y_train = np.asarray(y_train)
    for redraws in range(MAX_TARGET_REDRAWS + 1):
        draw_seed = seed if redraws == 0 else [seed, _REDRAW_STREAM, redraws]
        if shift["kind"] == "sparsity":
            parts, label_sets = sparsity_partition(
                y_train, num_clients=m, labels_per_client=shift["labels_per_client"], num_labels=k, seed=draw_seed,
                samples_per_label=experiment.get("samples_per_label"))
        else:
            parts = dirichlet_partition(y_train, num_clients=m, beta=shift["beta"], num_labels=k, seed=draw_seed,
                                        samples_per_client=shift.get("samples_per_client"))
            label_sets = None
        clients, target_part = parts[:-1], parts[-1]
        wanted = np.flatnonzero(fixed_t > 0) if fixed_t is not None else np.unique(y_train[target_part])
        if coverage == "literal" or np.isin(wanted, y_train[np.concatenate(clients)]).all():
            break
    else:
        raise ValueError(f"no draw of {experiment['dataset']} ({shift['kind']}) in which the training clients hold "
                         f"every target label within {MAX_TARGET_REDRAWS} redraws (seed {seed})")
    rng = np.random.default_rng([seed, 1])
    if fixed_t is not None:
        t = fixed_t
        target_part = sample_with_marginal(y_train, t, None, rng, exclude=np.concatenate(clients))
    else:
        t = label_marginals(y_train, [target_part], k)[0]
    validation = target_part
    if experiment.get("validation_size") and validation.size > experiment["validation_size"]:
        validation = np.sort(rng.choice(validation, experiment["validation_size"], replace=False))
    test = sample_with_marginal(y_test, t, None, rng)
    if experiment.get("test_size") and test.size > experiment["test_size"]:
        test = sample_with_marginal(y_test, t, experiment["test_size"], rng)
    s = label_marginals(y_train, clients, k)
    sizes = np.array([len(c) for c in clients])
    # Oracle (App. A.1): another federation of M−1 clients drawn like T from all training examples
    # but the target's validation set (disjoint among themselves), each as large as the smallest
    # shifted client when the data allow; drawn last, so the other fields do not depend on it
    oracle = (oracle_clients(y_train, t, m - 1, int(sizes.min()), validation, rng)
              if "oracle" in experiment["algorithms"] else [])
    return {
        "dataset": experiment["dataset"], "seed": seed, "num_labels": k,
        "clients": [c.tolist() for c in clients], "validation": validation.tolist(), "test": test.tolist(),
        "oracle": [o.tolist() for o in oracle], "marginals": s.tolist(), "target": t.tolist(),
        "sizes": sizes.tolist(), "label_sets": label_sets,
        "target_coverage": coverage, "target_redraws": redraws,
    }


def oracle_clients(y_train: np.ndarray, t: np.ndarray, count: int, cap: int, reserved: np.ndarray,
                    rng: np.random.Generator) -> list[np.ndarray]:
    """The Oracle's federation (App. A.1): ``count`` disjoint clients drawn like T.

    App. A.1: "the client data is drawn directly from the same distribution as the target". The
    clients are drawn jointly, from the training examples outside ``reserved``: each holds n =
    min(``cap``, ⌊F / ``count``⌋) examples, F = min over T's support of (free examples of label k) / T_k
    (the largest federation with marginal T that the free examples allow); the federation's
    per-label totals are T · ``count`` · n rounded by largest remainder (never more than the free
    examples of the label, since ``count`` · n · T_k <= free_k) and each label's total is split over
    the clients as evenly as possible (:func:`fedshift.partition.label_counts.split_label_counts`), so every
    client's label histogram is within one example per label of n · T and the clients together
    never ask a label for more examples than exist. (Rounding each client to n · T on its own, the
    spare examples all went to the same labels and ran out of them at paper scale.)

    Parameters
    ----------
    y_train : ndarray of int, shape (N,)
    t : ndarray, shape (K,)
        The target label marginal T.
    count : int
        Number of clients (M − 1).
    cap : int
        Upper bound on a client's size (the smallest shifted client).
    reserved : ndarray of int
        Training indices never drawn (the target's validation set).
    rng : numpy Generator

    Returns
    -------
    list of ndarray of int64
        Sorted, disjoint index arrays of equal size.

    Raises
    ------
    ValueError
        If the free examples cannot give every client one example.
    """
    k = t.shape[0]
    free = np.ones(len(y_train), dtype=bool)
    free[reserved] = False
    free_counts = np.bincount(np.asarray(y_train)[free], minlength=k)
    most = int(min(free_counts[j] / t[j] for j in np.flatnonzero(t > 0)))
    per = min(cap, most // count)
    if per < 1:
        raise ValueError("too few training examples of the target's labels to draw the Oracle's clients")
    totals = np.minimum(largest_remainder(t, count * per), free_counts)  # (a no-op but for float round-off)
    if totals.sum() != count * per:
        raise ValueError(f"cannot draw {count} Oracle clients of {per} examples like T from {free_counts.tolist()} "
                         "free examples per label")
    return sample_label_counts(y_train, split_label_counts(totals, count, rng), rng, exclude=reserved)
