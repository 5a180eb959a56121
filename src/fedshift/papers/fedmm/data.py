"""FedMM data (Shen et al., AAMAS 2023): the clients' split of a task's source and target rows, and a run's tensors.

Partitions index the named splits of the shared prepared datasets (:mod:`fedshift.data.prepare`); :func:`load_data`
standardises each domain and builds the clients (:class:`fedshift.algorithms.sgda_local.AdaptationClient`). Part of
:mod:`fedshift.papers.fedmm`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedshift.algorithms.sgda_local import AdaptationClient
from fedshift.errors import ConfigError
from fedshift.data.digits import preprocess
from fedshift.data.digits import scaled_pixels as _pixels  # [0, 1] digits on 28 x 28 RGB
from fedshift.data.office31 import TASKS as OFFICE_TASKS
from fedshift.data.prepare import load_prepared
from fedshift.io import write_json
from fedshift.papers.fedmm.config import client_settings
from fedshift.partition import largest_remainder

__all__ = ["split_clients", "write_partition", "images", "official_images", "load_data"]

log = logging.getLogger(__name__)


def split_clients(n_source: int, n_target: int, shares: list[tuple[float, float]], seed: int
                  ) -> list[dict[str, list[int]]]:
    """Split source rows 0…n_s−1 and target rows 0…n_t−1 over clients by their shares.

    One random permutation per domain (``default_rng([seed, 7])``); client k takes the next share · n rows of
    each, rounded by largest remainders (:func:`fedshift.partition.largest_remainder`: the counts sum to n and
    each is within one row of share · n), so every row goes to exactly one client.

    Parameters
    ----------
    n_source, n_target : int
        Rows of each domain to split.
    shares : list of (float, float)
        Per client its (source, target) share (:func:`fedshift.papers.fedmm.config.client_settings`).
    seed : int
        The task's ``partition_seed``.

    Returns
    -------
    list of dict
        ``{"source": [...], "target": [...]}`` per client.

    Raises
    ------
    ValueError
        If the shares of a domain do not sum to 1 or a client ends up empty.
    """
    rng = np.random.default_rng(np.random.SeedSequence([seed, 7]))
    out: list[dict[str, list[int]]] = [{"source": [], "target": []} for _ in shares]
    for j, (key, n) in enumerate((("source", n_source), ("target", n_target))):
        w = np.array([s[j] for s in shares])
        if not np.isclose(w.sum(), 1.0):
            raise ValueError(f"{key} shares sum to {w.sum()}, not 1")
        perm = rng.permutation(n)
        counts = largest_remainder(w, n)
        bounds = np.concatenate([[0], np.cumsum(counts)])
        for k in range(len(shares)):
            out[k][key] = sorted(perm[bounds[k]: bounds[k + 1]].tolist())
    for k, c in enumerate(out):
        if not c["source"] and not c["target"]:
            raise ValueError(f"client {k} holds no data")
    return out


def _target_splits(prepared: dict[str, Any], data: dict[str, Any]) -> tuple[str, np.ndarray, str, np.ndarray]:
    """(array key, rows) of the target's training and test images.

    Digits: the clients' unlabelled rows come from the target's train split (``target_size`` of them drawn at
    random, all by default), the test set is the whole test split; no test image is ever a training row.

    Raises
    ------
    ValueError
        A digits target without a train split.
    """
    if data.get("transfer"):
        dom = OFFICE_TASKS[data["transfer"]][1]
        rows = np.arange(len(prepared[f"y_{dom}"]))
        return f"{dom}", rows, f"{dom}", rows  # UDA protocol: all target images unlabelled, all tested
    if "x_train" not in prepared:
        raise ValueError(f"target {data.get('target')!r} has no train split: FedMM's unlabelled target rows come "
                         "from it, its test split is only tested")
    n = len(prepared["y_train"])
    size = data.get("target_size") or n
    rows = np.random.default_rng(np.random.SeedSequence([data["partition_seed"], 11])).permutation(n)[:size]
    return "train", np.sort(rows), "test", np.arange(len(prepared["y_test"]))


def _source_split(prepared: dict[str, Any], data: dict[str, Any]) -> tuple[str, np.ndarray]:
    if data.get("transfer"):
        dom = OFFICE_TASKS[data["transfer"]][0]
        return dom, np.arange(len(prepared[f"y_{dom}"]))
    n = len(prepared["y_train"])
    size = data.get("source_size") or n
    rows = np.random.default_rng(np.random.SeedSequence([data["partition_seed"], 13])).permutation(n)[:size]
    return "train", np.sort(rows)


def write_partition(data: dict[str, Any], clients: str, source_path: str | Path, target_path: str | Path,
                    out_path: str | Path) -> dict[str, Any]:
    """Split a task's source and target training rows over the clients of a setting; write JSON.

    Parameters
    ----------
    data : dict
        The task's data settings (:func:`fedshift.papers.fedmm.config.resolve_run`'s ``["data"]``).
    clients : str
        Client setting (``p0.75``, ``s2t1``, …).
    source_path, target_path : path
        Prepared source and target datasets (the same file for Office-31).

    Returns
    -------
    dict
        ``{"source_split", "target_split", "test_split", "clients": [{"source": rows, "target": rows}],
        "test": rows, "sizes": [[n_s, n_t], ...]}``: rows index the named splits of the prepared files.

    Raises
    ------
    ValueError
        A digits target without a train split, or shares that leave a client empty (:func:`split_clients`).
    """
    src = load_prepared(source_path)
    tgt = src if Path(target_path) == Path(source_path) else load_prepared(target_path)
    s_split, s_rows = _source_split(src, data)
    t_split, t_rows, test_split, test_rows = _target_splits(tgt, data)
    parts = split_clients(len(s_rows), len(t_rows), client_settings(clients), data["partition_seed"])
    out = {"source_split": s_split, "target_split": t_split, "test_split": test_split,
           "clients": [{"source": s_rows[c["source"]].tolist(), "target": t_rows[c["target"]].tolist()}
                       for c in parts],
           "test": test_rows.tolist()}
    out["sizes"] = [[len(c["source"]), len(c["target"])] for c in out["clients"]]
    write_json(out_path, out)
    log.info("partition %s: clients (source, target) %s, %d test rows", clients, out["sizes"], len(test_rows))
    return out


_IMAGENET = (torch.tensor([0.485, 0.456, 0.406], dtype=torch.float32).view(1, 3, 1, 1),
             torch.tensor([0.229, 0.224, 0.225], dtype=torch.float32).view(1, 3, 1, 1))


def images(prepared: dict[str, Any], split: str, kind: str) -> torch.Tensor:
    """float32 (n, 3, H, W) inputs of one split.

    Digits are standardised per domain (28 x 28 RGB); Office-31 images with the ImageNet statistics of
    MobileNetV2's pre-training.

    Parameters
    ----------
    prepared : dict
        A prepared dataset (:func:`fedshift.data.prepare.load_prepared`) or any mapping holding ``x_<split>``:
        uint8 images, (n, H, W) or (n, H, W, 3).
    split : str
        The array key's suffix (``"train"``, ``"test"``, an Office-31 domain, ``"all"``).
    kind : {"digits", "office"}
        The task's network kind.

    Returns
    -------
    torch.Tensor
        float32, (n, 3, 28, 28) standardised with the split's own statistics (digits, ``digits_rgb28``:
        :func:`fedshift.data.digits.preprocess`) or (n, 3, H, W) ImageNet-normalised (Office-31).
    """
    x = prepared[f"x_{split}"].numpy()
    if kind == "digits":
        return preprocess(x, "digits_rgb28")
    t = torch.from_numpy(x).float().div_(255).permute(0, 3, 1, 2).contiguous()
    return (t - _IMAGENET[0]) / _IMAGENET[1]


def _standardised(prepared: dict[str, Any], split: str, rows: np.ndarray, kind: str) -> torch.Tensor:
    """The rows of one split of a domain, standardised with the statistics of exactly these rows."""
    return images({"x_all": prepared[f"x_{split}"][torch.as_tensor(rows, dtype=torch.long)]}, "all", kind)


def official_images(x: np.ndarray, binarise: bool) -> torch.Tensor:
    """Digits as the official code feeds them, before its per-batch centring: pixels / 255, MNIST binarised.

    Official ``dataset_factory.py``: MNIST's pixels become ``(x > 0) * 255`` on 3 channels; MNIST-M's are kept;
    ``adv_loss.py:15`` then computes (x − mean(batch)) / 255 with one scalar mean over the batch, which is
    :func:`network_directions`'s ``centre`` on these inputs (x / 255 − mean(x / 255) is the same number).

    Parameters
    ----------
    x : ndarray, uint8, shape (N, H, W) or (N, H, W, 3)
    binarise : bool
        Binarise (the MNIST source; the official code does not binarise MNIST-M).

    Returns
    -------
    Tensor, float32, shape (N, 3, 28, 28)
        In [0, 1] (MNIST-M's 32 x 32 images resized to 28 x 28 as for ``per_domain``).
    """
    if binarise:
        x = (x > 0).astype(np.uint8) * np.uint8(255)
    return _pixels(x, "digits_rgb28")


def _official(prepared: dict[str, Any], split: str, rows: np.ndarray, binarise: bool) -> torch.Tensor:
    return official_images(prepared[f"x_{split}"][torch.as_tensor(rows, dtype=torch.long)].numpy(), binarise)


def load_data(resolved: dict[str, Any], partition: dict[str, Any], source_path: str | Path,
              target_path: str | Path, device: torch.device) -> tuple[list[AdaptationClient], torch.Tensor,
                                                                      torch.Tensor]:
    """The clients' tensors and the target test set on ``device``.

    Digits, ``preprocessing: per_domain`` (default): each domain is standardised with the statistics of its
    clients' rows (:func:`fedshift.data.digits.preprocess`, ``digits_rgb28``): the source with its client
    rows', the target's test images with the statistics of the clients' unlabelled target rows (the test split's
    own pixels are not looked at). ``official``: :func:`official_images` (MNIST binarised, pixels / 255); the
    training batches are centred by their own mean (:func:`fedshift.papers.fedmm.fit.build_algorithm`) and the test
    set, which the official code evaluates as one batch, by the test set's scalar mean. Office-31: ImageNet
    statistics.

    Parameters
    ----------
    resolved : dict
        The run's ``hparams`` (:func:`fedshift.papers.fedmm.config.resolve_setting`); reads ``network.kind``,
        ``preprocessing`` and ``data.source``.
    partition : dict
        :func:`write_partition`'s content.
    source_path, target_path : path
        The prepared source and target datasets (one file for Office-31).
    device : torch.device

    Returns
    -------
    clients : list of AdaptationClient
        Per client its labelled source rows and unlabelled target rows, float32 (n, 3, H, W).
    x_test : torch.Tensor
        float32 (n_test, 3, H, W), the target's test images.
    y_test : torch.Tensor
        int64 (n_test,), their labels.

    Raises
    ------
    ConfigError
        ``official`` preprocessing of a task that is not a digits task.
    """
    kind = resolved["network"]["kind"]
    official = resolved.get("preprocessing", "per_domain") == "official"
    if official and kind != "digits":
        raise ConfigError(f"config error at fedmm.tasks.{resolved.get('task')}.preprocessing: official is the "
                          "digits task's (MNIST → MNIST-M)")
    src = load_prepared(source_path)
    tgt = src if Path(target_path) == Path(source_path) else load_prepared(target_path)
    ss, ts, es = partition["source_split"], partition["target_split"], partition["test_split"]
    s_rows = np.asarray(sum((c["source"] for c in partition["clients"]), []), dtype=np.int64)
    t_rows = np.asarray(sum((c["target"] for c in partition["clients"]), []), dtype=np.int64)
    test = np.asarray(partition["test"], dtype=np.int64)
    if official:
        xs = _official(src, ss, s_rows, binarise=resolved.get("data", {}).get("source") == "mnist")
        xt = _official(tgt, ts, t_rows, binarise=False)
        xte = _official(tgt, es, test, binarise=False)
        xte = xte - xte.mean()
    elif ts == es:  # Office-31: the same images are unlabelled training data and the test set; convert them once
        xs = _standardised(src, ss, s_rows, kind)
        rows = np.union1d(t_rows, test)
        xu = _standardised(tgt, ts, rows, kind)
        xt, xte = (xu[torch.as_tensor(np.searchsorted(rows, r), dtype=torch.long)] for r in (t_rows, test))
    else:
        xs = _standardised(src, ss, s_rows, kind)
        xt = _standardised(tgt, ts, t_rows, kind)
        xte = _test_images(tgt, es, test, ts, t_rows)
    ys = src[f"y_{ss}"][torch.as_tensor(s_rows, dtype=torch.long)].long()
    yte = tgt[f"y_{es}"][torch.as_tensor(test, dtype=torch.long)].long()
    clients, i_s, i_t = [], 0, 0
    for i, c in enumerate(partition["clients"]):
        n_s, n_t = len(c["source"]), len(c["target"])
        clients.append(AdaptationClient(i, xs[i_s: i_s + n_s].to(device), ys[i_s: i_s + n_s].to(device),
                                        xt[i_t: i_t + n_t].to(device)))
        i_s, i_t = i_s + n_s, i_t + n_t
    return clients, xte.to(device), yte.to(device)


def _test_images(prepared: dict[str, Any], split: str, rows: np.ndarray, fit_split: str, fit_rows: np.ndarray
                 ) -> torch.Tensor:
    """Digits test rows standardised with the statistics of the target's training rows (``fit_*``)."""
    def take(s: str, r: np.ndarray) -> np.ndarray:
        return prepared[f"x_{s}"][torch.as_tensor(r, dtype=torch.long)].numpy()
    return preprocess(take(split, rows), "digits_rgb28", fit=take(fit_split, fit_rows))
