"""Data of the WAFL experiments: pre-processing, the label-skew partition over clients, and the target domain.

Paper App. G.1 (Table 1): MNIST over m = 100 clients with 2 of the 10 labels each and unequal sizes
(70,000 images, 700 ± 313 per client); CIFAR-10 over 20 clients with 3 labels each (43,098 images,
2,154 ± 594); every dataset standardised and split 75 % / 25 % into train and test per client. For domain
adaptation (G.4) the source dataset is spread over 100 clients (2 labels each) and the target dataset sits on
one client that only tests.

The official code's generator (``data/Mnist/generate_niid_100users.py``) gives 3 labels per MNIST client and
up to 5 per CIFAR-10 client (papers_spec §3.5); ``labels_per_client`` selects either version.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

__all__ = ["PREPROCESS", "pooled", "preprocess", "scaled_pixels", "label_skew_partition", "whole_domain_partition",
           "partition_stats"]

#: Pre-processing names: per-pixel standardisation of the official MNIST generator, per-channel
#: standardisation, the digits domain-adaptation format (28 x 28 RGB, per-channel standardised) and the same
#: format unstandardised (``digits_rgb28_raw``: [0, 1] pixels, the official domain-adaptation generator's inputs).
PREPROCESS = ("per_pixel", "per_channel", "digits_rgb28", "digits_rgb28_raw")


def pooled(prepared: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """Train and test splits of a prepared dataset concatenated (the official generators pool them).

    Returns
    -------
    x : ndarray, uint8, shape (N, H, W) or (N, H, W, 3)
    y : ndarray, int64, shape (N,)
    """
    xs = [prepared[f"x_{s}"].numpy() for s in ("train", "test") if f"x_{s}" in prepared]
    ys = [prepared[f"y_{s}"].numpy() for s in ("train", "test") if f"y_{s}" in prepared]
    return np.concatenate(xs), np.concatenate(ys).astype(np.int64)


def _nchw(x: np.ndarray) -> torch.Tensor:
    """uint8 (N, H, W) or (N, H, W, 3) -> float32 (N, C, H, W) in [0, 1]."""
    # in place on a copy of its own: each full-size temporary of a 70,000-image set is ~200-700 MB of fresh pages
    t = torch.from_numpy(x).to(torch.float32, copy=True).div_(255.0)
    return t.unsqueeze(1) if t.ndim == 3 else t.permute(0, 3, 1, 2).contiguous()


def preprocess(x: np.ndarray, method: str, eps: float = 0.001, fit: np.ndarray | None = None) -> torch.Tensor:
    """Scale pixels to [0, 1] and standardise.

    Parameters
    ----------
    x : ndarray, uint8, shape (N, H, W) or (N, H, W, 3)
        Images of one dataset (its pooled splits).
    method : {"per_pixel", "per_channel", "digits_rgb28", "digits_rgb28_raw"}
        ``per_pixel``: (x − μ_p)/(σ_p + eps) with each pixel's mean and std over the N images (official
        ``generate_niid_100users.py``, eps = 0.001); ``per_channel``: one mean and std per channel;
        ``digits_rgb28``: MNIST-M's 32 x 32 resized to 28 x 28 (bilinear); USPS's 16 x 16 digits, which fill
        their frame, resized to 20 x 20 and padded by 4 pixels, the framing of MNIST (LeCun et al. 1998: digits
        size-normalised into a 20 x 20 box in a 28 x 28 image); grey images repeated over 3 channels; then
        per channel, so that MNIST, USPS and MNIST-M share one 2,352-dimensional input space (the official
        domain-adaptation model is a 2,352 → 10 logistic regression) and each domain is standardised with
        its own statistics; ``digits_rgb28_raw``: the same layout, pixels in [0, 1] and not standardised (the
        official ``data/fiveDigit/generate_niid_DAUsers.py`` feeds [0, 1] MNIST and USPS pixels to the model).
    eps : float
        Added to σ.
    fit : ndarray, uint8, optional
        Images of the same domain whose mean and std standardise ``x`` (e.g. a domain's training split, so that
        its test split is standardised without its own statistics); default ``x`` itself.

    Returns
    -------
    Tensor, float32, shape (N, C, H, W)

    Raises
    ------
    ValueError
        For an unknown method.
    """
    if method not in PREPROCESS:
        raise ValueError(f"unknown preprocess {method!r}; known: {PREPROCESS}")
    if method == "digits_rgb28_raw":
        return scaled_pixels(x, "digits_rgb28").contiguous()
    t = scaled_pixels(x, method)
    ref = t if fit is None else scaled_pixels(fit, method)
    if method == "per_pixel":
        mu, sd = ref.mean(0, keepdim=True), ref.std(0, keepdim=True)
    else:
        mu, sd = ref.mean((0, 2, 3), keepdim=True), ref.std((0, 2, 3), keepdim=True)
    del ref
    # in place (t is this call's own, contiguous): the same operations in the same order, bit-identical to
    # ((t - mu) / (sd + eps)), without two more full-size tensors whose fresh pages the kernel would fault in
    return t.sub_(mu).div_(sd + eps)


def scaled_pixels(x: np.ndarray, method: str) -> torch.Tensor:
    """[0, 1] pixels in the layout of ``method`` (``digits_rgb28``: 28 x 28 RGB, :func:`preprocess`).

    Parameters
    ----------
    x : ndarray, shape (N, H, W) or (N, H, W, 3), uint8
        Images as prepared (``data/prepared/<dataset>.pt``).
    method : str
        A :func:`preprocess` method; ``digits_rgb28`` resizes USPS into MNIST's 20 x 20 box and every digit set to
        28 x 28 x 3 (WAFL Table 2, and FedMM's official preprocessing).

    Returns
    -------
    Tensor, shape (N, C, H, W), float32 in [0, 1]
    """
    t = _nchw(x)
    if method == "digits_rgb28":
        if t.shape[-1] < 20:  # USPS: digits fill the frame; MNIST's fill a 20 x 20 box centred in 28 x 28
            t = F.pad(F.interpolate(t, size=(20, 20), mode="bilinear", align_corners=False).clamp_(0, 1), (4,) * 4)
        elif t.shape[-1] != 28:
            t = F.interpolate(t, size=(28, 28), mode="bilinear", align_corners=False).clamp_(0, 1)
        if t.shape[1] == 1:
            t = t.repeat(1, 3, 1, 1)
    return t


# Over 80 lines: its NumPy docstring states the draw and each parameter (44 lines); the body is 39.
def label_skew_partition(y: np.ndarray, *, clients: int, labels_per_client: int, sigma: float, seed: int,
                         use_fraction: float = 1.0, min_per_label: int = 10, train_fraction: float = 0.75,
                         validation_fraction: float = 0.0) -> list[dict[str, list[int]]]:
    """Spread a labelled dataset over clients that each hold a few labels, in unequal amounts.

    Client u holds labels (u + j) mod C for j = 0 … L − 1 (C classes, L = ``labels_per_client``; the label
    assignment of the official generators). Each label's examples (a random ``use_fraction`` of them) are
    split among the clients holding it with shares w ~ LogNormal(0, σ) (normalised), after
    ``min_per_label`` examples each; every selected example goes to exactly one client. Each client's
    examples of each label are then split ``train_fraction`` / rest into train and test, and, with
    ``validation_fraction`` > 0, that share of the train part is held out as the client's validation set
    ([ours]: the paper tunes γ without saying on what; fedshift picks Fig. 4's γ on these sets).

    Parameters
    ----------
    y : ndarray, int64, shape (N,)
        Labels 0 … C − 1.
    clients : int
        m.
    labels_per_client : int
        L (text: 2 for MNIST, 3 for CIFAR-10; official code: 3 and 5).
    sigma : float
        σ ≥ 0 of the log-normal shares (0 gives equal shares).
    seed : int
        Seed of all draws.
    use_fraction : float
        Fraction of each label's examples used, in (0, 1] (CIFAR-10: 43,098 of 60,000 in Table 1).
    min_per_label : int
        Examples of each held label every client gets before the shares.
    train_fraction : float
        Train share of each client's examples, per label (0.75).
    validation_fraction : float
        Share of each client's train examples, per label, held out for validation, in [0, 1). With 0 the
        train and test sets are exactly those without a validation split.

    Returns
    -------
    list of dict
        Per client ``{"train": [...], "test": [...], "labels": [...]}`` with indices into ``y``, plus
        ``"validation": [...]`` when ``validation_fraction`` > 0 (disjoint from train and test).

    Raises
    ------
    ValueError
        If L is not in [1, C], a label has fewer than ``holders · min_per_label`` selected examples, a
        fraction is outside its range, or a positive ``validation_fraction`` gives no validation example.
    """
    C = int(y.max()) + 1
    if not 1 <= labels_per_client <= C:
        raise ValueError(f"labels_per_client must be in [1, {C}], got {labels_per_client}")
    if (not (0 < use_fraction <= 1 and 0 < train_fraction < 1 and 0 <= validation_fraction < 1) or sigma < 0
            or clients < 1):
        raise ValueError("need 0 < use_fraction <= 1, 0 < train_fraction < 1, 0 <= validation_fraction < 1, "
                         "sigma >= 0, clients >= 1")
    rng = np.random.default_rng(np.random.SeedSequence([seed, 6]))
    holders = {lab: [u for u in range(clients) if lab in {(u + j) % C for j in range(labels_per_client)}]
               for lab in range(C)}
    keys = ("train", "test", "labels") + (("validation",) if validation_fraction > 0 else ())
    per_client: list[dict[str, list[int]]] = [{k: [] for k in keys} for _ in range(clients)]
    for lab in range(C):
        hs = holders[lab]
        if not hs:
            continue
        idx = rng.permutation(np.flatnonzero(y == lab))
        idx = idx[: int(round(use_fraction * len(idx)))]
        spare = len(idx) - len(hs) * min_per_label
        if spare < 0:
            raise ValueError(f"label {lab}: {len(idx)} examples for {len(hs)} clients x {min_per_label}")
        w = rng.lognormal(0.0, sigma, size=len(hs))
        share = np.floor(w / w.sum() * spare).astype(int)
        share[np.argsort(-(w / w.sum() * spare - share))[: spare - share.sum()]] += 1
        counts = share + min_per_label
        bounds = np.concatenate([[0], np.cumsum(counts)])
        for k, u in enumerate(hs):
            mine = idx[bounds[k]: bounds[k + 1]]
            n_train = int(round(train_fraction * len(mine)))
            n_val = int(round(validation_fraction * n_train))
            per_client[u]["train"] += mine[: n_train - n_val].tolist()
            if n_val:
                per_client[u]["validation"] += mine[n_train - n_val: n_train].tolist()
            per_client[u]["test"] += mine[n_train:].tolist()
            per_client[u]["labels"].append(lab)
    if validation_fraction > 0 and not any(p["validation"] for p in per_client):
        raise ValueError(f"validation_fraction {validation_fraction} rounds to no validation example on every "
                         "client; raise it")
    return per_client


def whole_domain_partition(y: np.ndarray, n_train: int) -> list[dict[str, list[int]]]:
    """One client holding a whole domain: its train split to train on, its test split to test on.

    The official code's domain-adaptation layout (``--numusers 3 --subusers 1 --robust -1``, dual-grp/WAFL
    README): every domain is one client, the target the last one, tested and never trained. The source clients of
    a Table 2 task are this function's output (one per source domain), the target is tested by the paper's
    evaluation on its own test split.

    Parameters
    ----------
    y : ndarray, int64, shape (N,)
        Labels of the domain's pooled splits (:func:`pooled`: train rows first).
    n_train : int
        Rows of the train split (0 < n_train < N).

    Returns
    -------
    list of dict
        ``[{"train": [0 … n_train − 1], "test": [n_train … N − 1], "labels": [labels present]}]``.

    Raises
    ------
    ValueError
        If ``n_train`` leaves the train or the test split empty.
    """
    if not 0 < n_train < len(y):
        raise ValueError(f"a whole-domain client needs both splits: {n_train} train rows of {len(y)}")
    return [{"train": list(range(n_train)), "test": list(range(n_train, len(y))),
             "labels": sorted(int(v) for v in np.unique(y))}]


def partition_stats(parts: list[dict[str, list[int]]]) -> dict[str, float]:
    """Clients, total examples, and mean / std of examples per client (the columns of the paper's Table 1)."""
    sizes = np.array([len(p["train"]) + len(p["test"]) + len(p.get("validation", ())) for p in parts])
    return {"clients": len(parts), "total": int(sizes.sum()), "mean": float(sizes.mean()), "std": float(sizes.std())}
