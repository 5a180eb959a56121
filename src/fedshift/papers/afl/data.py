"""AFL's data: from a resolved experiment configuration to clients, test sets, and evaluation.

An experiment config (one entry of ``afl.experiments`` in ``config/papers/afl.yaml``, ``defaults`` merged; checked
by :mod:`fedshift.papers.afl.config`) names a prepared dataset, how examples map to domains, the
pre-processing and the model. This module turns it, plus the prepared tensors and the partition
index map, into :class:`~fedshift.core.base.ClientData` objects on the run's device.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fedshift.core.base import ClientData
from fedshift.models import forward
from fedshift.partition import partition_by_domain

__all__ = ["ExperimentData", "domain_ids", "make_partition", "load_experiment", "evaluate_domains"]


@dataclass(frozen=True)
class ExperimentData:
    """The tensors of one experiment.

    Attributes
    ----------
    clients : list of ClientData
        Training clients; for the AFL experiments client k holds domain k.
    test : list of (Tensor, Tensor)
        Per-domain test inputs and labels, in domain order.
    domain_names : list of str
    input_dim : int
    num_classes : int
    validation : list of (Tensor, Tensor)
        Per-domain validation inputs and labels held out of the training examples (empty without a
        validation split in the partition).
    """

    clients: list[ClientData]
    test: list[tuple[torch.Tensor, torch.Tensor]]
    domain_names: list[str]
    input_dim: int
    num_classes: int
    validation: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)


def domain_ids(experiment: dict[str, Any], prepared: dict[str, Any], split: str) -> tuple[np.ndarray, list[str]]:
    """Domain index of every example of ``split`` ("train" or "test"), -1 for dropped examples.

    ``domains.by == "domain"`` uses the dataset's own domain column (Adult: doctorate /
    non-doctorate); ``"label"`` makes each class in ``domains.classes`` a domain (Fashion-MNIST:
    t-shirt/top, pullover, shirt, Mohri et al. 2019 §5) and drops the other classes.

    Parameters
    ----------
    experiment : dict
        Resolved experiment config (``dataset``, ``domains``).
    prepared : dict
        Output of :func:`fedshift.data.prepare.load_prepared`.
    split : {"train", "test"}

    Returns
    -------
    (ndarray of int64, list of str)
        Domain ids, shape (n_split,), and the domain names in id order.

    Raises
    ------
    ValueError
        For ``by: domain`` on a dataset without a domain column, or an unknown ``by``.
    """
    spec = experiment["domains"]
    if spec["by"] == "domain":
        if f"domain_{split}" not in prepared:
            raise ValueError(f"dataset {experiment['dataset']} has no domain column; use domains.by: label")
        return prepared[f"domain_{split}"].numpy().astype(np.int64), list(prepared["domain_names"])
    if spec["by"] == "label":
        y = prepared[f"y_{split}"].numpy()
        ids = np.full(y.shape, -1, dtype=np.int64)
        for k, c in enumerate(spec["classes"]):
            ids[y == c] = k
        return ids, list(spec["names"])
    raise ValueError(f"unknown domains.by {spec['by']!r}")


def make_partition(experiment: dict[str, Any], prepared: dict[str, Any], seed: int) -> dict[str, Any]:
    """The index map of an experiment: per-domain train and test indices.

    Parameters
    ----------
    experiment : dict
        Resolved experiment config.
    prepared : dict
        Output of :func:`fedshift.data.prepare.load_prepared`.
    seed : int
        The partition seed (recorded; the domain split itself is deterministic).

    Returns
    -------
    dict
        JSON-ready ``{"dataset", "seed", "domains", "train": {name: [idx]}, "test": {...}}``, and with
        ``experiment["validation_fraction"]`` = f > 0 also ``"validation"``: per domain, round(f · n_k) (at least
        one) of the domain's n_k training examples, drawn without replacement by
        ``default_rng([seed, k])``, held out of ``"train"`` (indices into the training split). [ours]: the
        paper gives no validation protocol; the silent-in-paper settings are chosen on it, never on test data.

    Raises
    ------
    ValueError
        If a domain has too few training examples to hold one out and keep one.
    """
    out: dict[str, Any] = {"dataset": experiment["dataset"], "seed": seed}
    for split in ("train", "test"):
        ids, names = domain_ids(experiment, prepared, split)
        parts = partition_by_domain(ids, names)
        out["domains"] = names
        out[split] = {k: v.tolist() for k, v in parts.items()}
    frac = float(experiment.get("validation_fraction", 0.0))
    if frac > 0:
        out["validation"] = {}
        for k, name in enumerate(out["domains"]):
            idx = np.asarray(out["train"][name], dtype=np.int64)
            n_val = max(1, int(round(frac * idx.size)))
            if n_val >= idx.size:
                raise ValueError(f"domain {name!r} has {idx.size} training examples: too few for a validation "
                                 f"fraction of {frac}")
            held = np.zeros(idx.size, dtype=bool)
            held[np.random.default_rng([seed, k]).choice(idx.size, n_val, replace=False)] = True
            out["validation"][name] = idx[held].tolist()
            out["train"][name] = idx[~held].tolist()
    return out


def load_experiment(
    experiment: dict[str, Any], prepared: dict[str, Any], partition: dict[str, Any],
    device: torch.device, dtype: torch.dtype = torch.float32,
) -> ExperimentData:
    """Gather each domain's examples into contiguous tensors on ``device``.

    Pre-processing (``experiment["preprocess"]``): ``scale`` divides raw inputs (255 for pixels);
    ``standardize: per_feature`` applies (x − μ)/(σ + eps) with μ, σ of the training examples of
    all domains (fair_flearn's Fashion-MNIST recipe, papers spec §1.4). Labels of a
    ``domains.by: label`` experiment are renumbered 0..p−1 in domain order.

    Parameters
    ----------
    experiment : dict
        Resolved experiment config (``dataset``, ``domains``, ``preprocess``).
    prepared : dict
        Output of :func:`fedshift.data.prepare.load_prepared`.
    partition : dict
        :func:`make_partition`'s index map.
    device : torch.device
    dtype : torch.dtype
        The inputs' dtype (labels stay int64).

    Returns
    -------
    ExperimentData
        One :class:`~fedshift.core.base.ClientData` per domain, per-domain validation and test ``(x, y)``, the
        domain names, input width and class count.

    Raises
    ------
    ValueError
        If the partition belongs to another dataset.
    """
    names = partition["domains"]
    if partition["dataset"] != experiment["dataset"]:
        raise ValueError(f"partition is for {partition['dataset']}, experiment uses {experiment['dataset']}")
    pre = experiment.get("preprocess", {})

    def gather(split: str) -> list[tuple[torch.Tensor, torch.Tensor]]:
        source = "train" if split == "validation" else split  # validation indices point into the training split
        x_all = prepared[f"x_{source}"]
        y_all = prepared[f"y_{source}"]
        out = []
        for name in names:
            idx = torch.as_tensor(partition[split][name], dtype=torch.int64)
            x = x_all[idx].to(torch.float64).flatten(1) / float(pre.get("scale", 1.0))
            y = y_all[idx].to(torch.int64)
            out.append((x, y))
        return out

    train, test = gather("train"), gather("test")
    val = gather("validation") if "validation" in partition else []
    if experiment["domains"]["by"] == "label":
        remap = {c: k for k, c in enumerate(experiment["domains"]["classes"])}
        train = [(x, torch.full_like(y, remap[int(y[0])])) for x, y in train]
        test = [(x, torch.full_like(y, remap[int(y[0])])) for x, y in test]
        val = [(x, torch.full_like(y, remap[int(y[0])])) for x, y in val]
        num_classes = len(names)
    else:
        num_classes = int(prepared["num_classes"]) if "num_classes" in prepared else int(
            max(int(y.max()) for _, y in train + test) + 1)
    if pre.get("standardize", "none") == "per_feature":
        x_tr = torch.cat([x for x, _ in train])
        mu, sd = x_tr.mean(0), x_tr.std(0, unbiased=False) + float(pre.get("eps", 1e-3))
        train = [((x - mu) / sd, y) for x, y in train]
        test = [((x - mu) / sd, y) for x, y in test]
        val = [((x - mu) / sd, y) for x, y in val]

    def to(x: torch.Tensor) -> torch.Tensor:
        return x.to(device=device, dtype=dtype).contiguous()

    clients = [ClientData(k, to(x), y.to(device), k) for k, (x, y) in enumerate(train)]
    return ExperimentData(clients, [(to(x), y.to(device)) for x, y in test], list(names),
                          int(train[0][0].shape[1]), num_classes, [(to(x), y.to(device)) for x, y in val])


@torch.no_grad()
def evaluate_domains(
    module: nn.Module, params: dict[str, torch.Tensor], test: Sequence[tuple[torch.Tensor, torch.Tensor]],
    domain_names: Sequence[str], batch_size: int = 8192,
) -> list[dict[str, Any]]:
    """Test accuracy and loss per domain, on the pooled test sample (U) and in the worst domain (D_Λ).

    Parameters
    ----------
    module : nn.Module
        The model.
    params : dict[str, Tensor]
        Parameters to evaluate.
    test : sequence of (x, y)
        Per-domain test sets.
    domain_names : sequence of str
    batch_size : int
        Evaluation batch size (memory only; results do not depend on it).

    Returns
    -------
    list of dict
        Tidy rows ``{"column", "metric", "value"}``, metric ∈ {"accuracy", "loss"}; accuracy in
        [0, 1], loss = mean cross-entropy in nats. Columns: each domain; ``U``, the uniform
        distribution over the union of the test samples (Mohri et al. 2019, Tables 1–2); and
        ``D_Lambda``, the agnostic column max_{λ∈Δ_p} of the mixture loss, attained at the worst
        domain: min accuracy and max loss over domains.
    """
    rows: list[dict[str, Any]] = []
    correct_all, loss_all, n_all = 0.0, 0.0, 0
    accs, losses = [], []
    for name, (x, y) in zip(domain_names, test, strict=True):
        correct, loss_sum = 0.0, 0.0
        for i in range(0, y.shape[0], batch_size):
            logits = forward(module, params, x[i : i + batch_size])
            yb = y[i : i + batch_size]
            correct += float((logits.argmax(1) == yb).sum())
            loss_sum += float(F.cross_entropy(logits.double(), yb, reduction="sum"))
        n = int(y.shape[0])
        accs.append(correct / n)
        losses.append(loss_sum / n)
        rows += [{"column": name, "metric": "accuracy", "value": correct / n},
                 {"column": name, "metric": "loss", "value": loss_sum / n}]
        correct_all, loss_all, n_all = correct_all + correct, loss_all + loss_sum, n_all + n
    rows += [{"column": "U", "metric": "accuracy", "value": correct_all / n_all},
             {"column": "U", "metric": "loss", "value": loss_all / n_all},
             {"column": "D_Lambda", "metric": "accuracy", "value": min(accs)},
             {"column": "D_Lambda", "metric": "loss", "value": max(losses)}]
    return rows
