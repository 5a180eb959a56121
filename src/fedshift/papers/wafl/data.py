"""WAFL data (arXiv:2206.01432): the label-skew partition of an experiment's source and the tensors of one run.

The index maps and the pre-processing are the shared digits helpers (:mod:`fedshift.data.digits`; FedMM's digits
pre-processing uses them too). Part of :mod:`fedshift.papers.wafl`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from fedshift.core.base import ClientData
from fedshift.data.digits import label_skew_partition, partition_stats, pooled, preprocess, whole_domain_partition
from fedshift.data.prepare import load_prepared
from fedshift.io import read_json, write_json

__all__ = ["write_partition", "load_data"]

log = logging.getLogger(__name__)


def write_partition(resolved_exp: dict[str, Any], prepared_path: str | Path, out_path: str | Path) -> dict:
    """Partition an experiment's source dataset over its clients and write the index map as JSON.

    Label skew after the paper's §6 (100 clients, 2 labels each, label sizes drawn with spread ``sigma``;
    :func:`fedshift.data.digits.label_skew_partition`), or one whole-domain client (Table 2's official protocol).

    Parameters
    ----------
    resolved_exp : dict
        The experiment's settings; reads ``partition`` (``clients``, ``labels_per_client``, ``sigma``, ``seed``,
        optional ``use_fraction``, ``min_per_label``, ``train_fraction``, ``validation_fraction``,
        ``whole_domain``) and, for the log, ``experiment``.
    prepared_path : path
        The source's prepared dataset (:func:`fedshift.data.prepare.load_prepared`).
    out_path : path
        The JSON file to write (atomically, :func:`fedshift.io.write_json`).

    Returns
    -------
    dict
        ``{"clients": [{"train": [...], "test": [...], "labels": [...]}, ...], "stats": {...}}``; indices
        into the pooled (train + test) source dataset (:func:`fedshift.data.digits.pooled`). With
        ``partition.whole_domain`` (Table 2's official protocol) one client holds the whole source domain, its
        train split to train and its test split to test (:func:`fedshift.data.digits.whole_domain_partition`).
    """
    prepared = load_prepared(prepared_path)
    _, y = pooled(prepared)
    p = resolved_exp["partition"]
    if p.get("whole_domain"):  # Table 2's official protocol: the source domain is one client, its own splits
        parts = whole_domain_partition(y, len(prepared["y_train"]))
        out = {"clients": parts, "stats": partition_stats(parts)}
        write_json(out_path, out)
        log.info("partition %s (whole domain): %s", resolved_exp.get("experiment"), out["stats"])
        return out
    parts = label_skew_partition(y, clients=p["clients"], labels_per_client=p["labels_per_client"],
                                 sigma=p["sigma"], seed=p["seed"], use_fraction=p.get("use_fraction", 1.0),
                                 min_per_label=p.get("min_per_label", 10),
                                 train_fraction=p.get("train_fraction", 0.75),
                                 validation_fraction=p.get("validation_fraction", 0.0))
    out = {"clients": parts, "stats": partition_stats(parts)}
    write_json(out_path, out)
    log.info("partition %s: %s", resolved_exp.get("experiment"), out["stats"])
    return out


def load_data(resolved: dict[str, Any], prepared_path: str | Path, partition_path: str | Path,
              device: torch.device, target_path: str | Path | None = None) -> dict[str, Any]:
    """The tensors of an experiment on ``device``.

    Parameters
    ----------
    resolved : dict
        The run's ``hparams`` (:func:`fedshift.papers.wafl.config.resolve`); reads ``preprocess``.
    prepared_path, partition_path : path
        The source's prepared dataset and the experiment's partition (:func:`write_partition`).
    device : torch.device
    target_path : path, optional
        The target's prepared dataset (Table 2's domain adaptation); None: no target.

    Returns
    -------
    dict
        ``clients``: list of ClientData (train sets, x float32 (n_i, C, H, W)); ``test``: list of (x, y) per
        client; ``validation``: list of (x, y) per client, empty without a validation split; ``target``: (x, y)
        of the target's test split or None; ``target_train``: x of the target's train split (unlabelled: the
        inputs eq. 9's W₂ is computed on) or None; ``input_shape``.

    Notes
    -----
    Table 2's target is tested on its test split only (MNIST-M 9,001, MNIST 10,000, USPS 2,007 images), each
    domain standardised with the statistics of its train split (unlabelled target inputs, known before
    deployment; the test split's own pixels are not looked at). A target without a train split is tested whole.
    """
    x_all, y_all = pooled(load_prepared(prepared_path))
    x = preprocess(x_all, resolved["preprocess"])
    y = torch.from_numpy(y_all)
    parts = read_json(partition_path)["clients"]
    clients, test, validation = [], [], []
    for i, p in enumerate(parts):
        tr, te = torch.as_tensor(p["train"], dtype=torch.long), torch.as_tensor(p["test"], dtype=torch.long)
        clients.append(ClientData(i, x[tr].to(device), y[tr].to(device), 0))
        test.append((x[te].to(device), y[te].to(device)))
        if "validation" in p:
            va = torch.as_tensor(p["validation"], dtype=torch.long)
            validation.append((x[va].to(device), y[va].to(device)))
    target = target_train = None
    if target_path is not None:
        tp = load_prepared(target_path)
        xte, yte = tp["x_test"].numpy(), tp["y_test"]
        fit = tp["x_train"].numpy() if "x_train" in tp else None
        target = (preprocess(xte, resolved["preprocess"], fit=fit).to(device), yte.long().to(device))
        if fit is not None:
            target_train = preprocess(fit, resolved["preprocess"]).to(device)
    return {"clients": clients, "test": test, "validation": validation, "target": target,
            "target_train": target_train, "input_shape": tuple(x.shape[1:])}
