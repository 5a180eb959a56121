"""FedPALS data: each (experiment, seed)'s partition and the tensors (or image files) of one job.

Setting (§2, §5): M clients are drawn by a label-shift mechanism (sparsity: C labels per client;
Dirichlet(β)); clients 0..M−2 train and client M−1 is the target, whose label marginal T is known
to the server. The target's own examples form the validation set ("a validation set that reflects
the target distribution", §5), used for early-stopping selection and for choosing λ; the target's
test set is drawn from the test split with label marginal T. The Oracle (App. A.1) is FedAvg on
M−1 clients drawn like the target from the remaining training examples (the shared draw:
:mod:`fedshift.partition.label_shift`). PACS and iWildCam (App. A.3, A.4) keep their own splits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedshift.algorithms.fedpals import (
    projection_distance,
)
from fedshift.core.base import ClientData
from fedshift.core.engine import FilePool
from fedshift.data.prepare import load_prepared
from fedshift.data.wilds import ImageFiles, image_transform, images_dir_of
from fedshift.papers.fedpals.config import FILE_DATASETS, NUM_LABELS
from fedshift.partition import (
    domain_heterogeneity_partition,
    label_marginals,
    label_removal_partition,
)
from fedshift.partition.label_shift import label_shift_partition, oracle_clients

__all__ = ["make_partition", "make_domain_partition", "images", "job_data", "num_workers"]

def make_partition(experiment: dict[str, Any], y_train: np.ndarray, y_test: np.ndarray, seed: int) -> dict[str, Any]:
    """Clients, target and Oracle of one (experiment, seed): the shared label-shift draw plus d(T, S).

    :func:`fedshift.partition.label_shift.label_shift_partition` draws the federation (§5, App. A.1); this adds
    ``projection_distance`` d(T, S) (FedPALS eq. 6's distance of T to the clients' convex hull), which the
    paper's figures plot. Same arguments, returns and errors as the draw.
    """
    part = label_shift_partition(experiment, y_train, y_test, seed)
    keys = list(part)
    at = keys.index("label_sets") + 1  # the field's place in the partition JSON
    keys.insert(at, "projection_distance")
    part["projection_distance"] = projection_distance(np.asarray(part["target"]), np.asarray(part["marginals"]))
    return {k: part[k] for k in keys}


def make_domain_partition(experiment: dict[str, Any], prepared: dict[str, Any], seed: int) -> dict[str, Any]:
    """Clients, target and Oracle of a PACS or iWildCam (experiment, seed), as a JSON-ready index map.

    PACS (App. A.3, ``label_shift.kind: label_removal``): the official training split over three
    clients, each missing one of labels 0, 1, 2, the client without label 2 cut to 10 %; the target is
    the official (out-of-domain) test split without label ``target_drop_labels``, and the validation
    set the in-domain validation split without them (the paper: "we modify the source domain
    validation set to also lack the samples with label 2"). iWildCam (App. A.4,
    ``domain_heterogeneity``): Bai et al.'s split of the training split over M clients by camera
    location at heterogeneity ``iid`` = 0; target = the WILDS test split, validation = the split named
    by ``validation_split``. In both, T is the label marginal of the target's test set.

    Parameters
    ----------
    experiment : dict
        One entry of ``fedpals.experiments`` with a file dataset.
    prepared : dict
        :func:`fedshift.data.prepare.load_prepared` of the dataset (``y_<split>``, ``domain_<split>``).
    seed : int

    Returns
    -------
    dict
        As :func:`make_partition`, with indices of ``validation`` and ``test`` into the splits named by
        ``validation_split`` and ``test_split``, and the Oracle's clients drawn from the training split.

    Raises
    ------
    ValueError
        A split missing from the dataset, a client left empty, or too few examples for the Oracle.
    """
    k = NUM_LABELS[experiment["dataset"]]
    shift = experiment["label_shift"]
    for split in ("train", experiment["validation_split"], experiment["test_split"]):
        if f"y_{split}" not in prepared:
            raise ValueError(f"{experiment['dataset']} has no {split!r} split (has "
                             f"{sorted(key[2:] for key in prepared if key.startswith('y_'))})")
    y_train = prepared["y_train"].numpy()
    if shift["kind"] == "label_removal":
        removed = shift["removed_labels"]
        clients = label_removal_partition(y_train, removed, small_client=removed.index(shift["small_label"])
                                          if "small_label" in shift else len(removed) - 1,
                                          small_fraction=shift.get("small_fraction", 0.1), seed=seed)
    else:
        clients = domain_heterogeneity_partition(prepared["domain_train"].numpy(), experiment["num_clients"],
                                                 iid=shift.get("iid", 0.0), seed=seed)
    drop = list(experiment.get("target_drop_labels", []))
    rng = np.random.default_rng([seed, 1])

    def kept(split: str, cap: int | None) -> tuple[np.ndarray, np.ndarray]:
        y = prepared[f"y_{split}"].numpy()
        idx = np.flatnonzero(~np.isin(y, drop))
        if cap and idx.size > cap:
            idx = np.sort(rng.choice(idx, cap, replace=False))
        return idx, y

    test, y_test = kept(experiment["test_split"], experiment.get("test_size"))
    validation, _ = kept(experiment["validation_split"], experiment.get("validation_size"))
    t = label_marginals(y_test, [test], k)[0]
    s = label_marginals(y_train, clients, k)
    sizes = np.array([len(c) for c in clients])
    oracle = []
    if "oracle" in experiment["algorithms"]:
        oracle = [o.tolist() for o in oracle_clients(y_train, t, len(clients), int(sizes.min()),
                                                      np.zeros(0, dtype=np.int64), rng)]
    return {
        "dataset": experiment["dataset"], "seed": seed, "num_labels": k,
        "clients": [c.tolist() for c in clients], "validation": validation.tolist(), "test": test.tolist(),
        "validation_split": experiment["validation_split"], "test_split": experiment["test_split"],
        "oracle": oracle, "marginals": s.tolist(), "target": t.tolist(), "sizes": sizes.tolist(),
        "label_sets": None, "projection_distance": projection_distance(t, s),
    }





def images(prepared: dict[str, Any], split: str, idx: list[int], pre: dict[str, Any], device: torch.device
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows ``idx`` of a prepared split as model inputs and labels.

    Parameters
    ----------
    prepared : dict
        The prepared dataset (``x_<split>``: (n, H, W[, C]) or (n, d) pixels; ``y_<split>``: (n,) labels).
    split : str
        ``"train"`` or ``"test"``.
    idx : list of int
        Row indices.
    pre : dict
        The experiment's preprocessing: pixels are divided by ``scale`` (255 → [0, 1]), then standardised by
        ``mean`` and ``std``.
    device : torch.device

    Returns
    -------
    x : Tensor, shape (len(idx), C·H·W), float32
        Flattened, channels first.
    y : Tensor, shape (len(idx),), int64
    """
    index = torch.as_tensor(idx, dtype=torch.int64)
    x = prepared[f"x_{split}"][index]
    if x.dim() == 4 and x.shape[-1] in (1, 3):  # (n, H, W, C) images → (n, C, H, W), the models' layout
        x = x.permute(0, 3, 1, 2)
    x = x.to(torch.float32).flatten(1) / float(pre.get("scale", 1.0))
    x = (x - float(pre.get("mean", 0.0))) / float(pre.get("std", 1.0))
    return x.to(device).contiguous(), prepared[f"y_{split}"][index].to(torch.int64).to(device)


def job_data(resolved: dict[str, Any], part: dict[str, Any], prepared_path: str | Path, dev: torch.device,
              with_clients: bool = True) -> tuple[list[ClientData] | FilePool | None, dict[str, tuple[Any, Any]], int]:
    """A job's clients, evaluation sets and input size.

    Returns the clients (None unless ``with_clients``), the sets {"validation", "test"} → (x or
    ImageFiles, y or None) and the flattened input size (0 for image files).
    """
    prepared = load_prepared(prepared_path)
    client_lists = part["oracle"] if resolved["kind"] == "oracle" else part["clients"]
    splits = {"validation": part.get("validation_split", "train"), "test": part.get("test_split", "test")}
    if resolved["dataset"] in FILE_DATASETS:
        root, size = images_dir_of(prepared_path), resolved["image_size"]

        def files(split: str, idx: Any, train: bool) -> ImageFiles:
            paths = prepared[f"path_{split}"]
            return ImageFiles(root, [paths[i] for i in idx], prepared[f"y_{split}"][torch.as_tensor(idx)].numpy(),
                              image_transform(size, train))

        sets = {name: (files(split, part[name], False), None) for name, split in splits.items()}
        if not with_clients:
            return None, sets, 0
        offsets = np.concatenate([[0], np.cumsum([len(c) for c in client_lists])]).astype(np.int64)
        pool = FilePool(files("train", [i for c in client_lists for i in c], True), offsets, dev,
                        client_optimizer=resolved["train"]["client_optimizer"],
                        num_workers=num_workers(resolved))
        return pool, sets, 0
    pre = resolved["preprocess"] or {}
    sets = {name: images(prepared, split, part[name], pre, dev) for name, split in splits.items()}
    clients = ([ClientData(i, *images(prepared, "train", idx, pre, dev), 0) for i, idx in enumerate(client_lists)]
               if with_clients else None)
    return clients, sets, sets["test"][0].shape[1]


def num_workers(resolved: dict[str, Any]) -> int:
    """DataLoader worker processes for image files (``num_workers``; unset or null: 0, decode in the job)."""
    return resolved.get("num_workers") or 0
