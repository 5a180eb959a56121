"""Data of the AgnosticFedAvg experiments: building each experiment's partition from its raw files, and loading it.

Ro et al. (2021) §3 name two domain types: *client partition* (each client holds one domain: EMNIST's
writers, high school or census) and *data partition* (a client holds several domains: a Stack Overflow
user's questions and answers). :func:`spread_over_clients` builds either from per-example domain ids;
:func:`toy_regression` draws the toy of App. A. :func:`build_data` turns an experiment's raw files into clients
with a domain id per example, per-domain test sets and a summary (one ``torch.save`` file, and the summary alone
as JSON, :func:`write_summary`); :func:`load_data` puts them on a device for one training run.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedshift.algorithms.agnostic_fedavg_steps import DomainClients
from fedshift.data import cornell, emnist, stackoverflow
from fedshift.data.fashion_mnist import load_fashion_mnist
from fedshift.data.ptb import load_ptb
from fedshift.io import torch_save_atomic, write_json
from fedshift.data.text import build_vocab, encode
from fedshift.papers.agnostic_fedavg.config import domain_names

__all__ = ["DOMAIN_TYPES", "spread_over_clients", "toy_regression", "build_data", "write_summary", "load_data"]

log = logging.getLogger(__name__)

DOMAIN_TYPES = ("client", "data")


def spread_over_clients(domain: np.ndarray, num_clients: int, domain_type: str, seed: int) -> list[np.ndarray]:
    """Indices of each client's examples.

    Parameters
    ----------
    domain : ndarray of int, shape (N,)
        Domain id of every example (0..p−1).
    num_clients : int
        M; at least p for the client partition, at most N.
    domain_type : {"client", "data"}
        "client": domain i gets ≈ M·N_i/N clients (at least one), and its examples, shuffled, are dealt
        to them in near-equal shares, so each client holds one domain. "data": all examples, shuffled,
        are dealt to the M clients in near-equal shares, so a client holds several domains in about the
        pooled proportions.
    seed : int
        NumPy seed of the shuffles.

    Returns
    -------
    list of ndarray
        M sorted index arrays, none empty.

    Raises
    ------
    ValueError
        Unknown ``domain_type``; too few examples or (client partition) fewer clients than domains.
    """
    if domain_type not in DOMAIN_TYPES:
        raise ValueError(f"domain_type must be one of {DOMAIN_TYPES}, got {domain_type!r}")
    domain = np.asarray(domain, dtype=np.int64)
    if num_clients < 1 or num_clients > len(domain):
        raise ValueError(f"num_clients must be in [1, {len(domain)}] (examples), got {num_clients}")
    rng = np.random.default_rng(seed)
    if domain_type == "data":
        return [np.sort(part) for part in np.array_split(rng.permutation(len(domain)), num_clients)]
    present = np.unique(domain)
    if num_clients < len(present):
        raise ValueError(f"client partition needs at least one client per domain: {num_clients} < {len(present)}")
    sizes = np.array([(domain == d).sum() for d in present], dtype=np.float64)
    share = np.maximum(1, np.floor(num_clients * sizes / sizes.sum())).astype(np.int64)
    while share.sum() < num_clients:  # largest remainders first
        share[np.argmax(num_clients * sizes / sizes.sum() - share)] += 1
    while share.sum() > num_clients:
        share[np.argmax(np.where(share > 1, share, 0))] -= 1
    out: list[np.ndarray] = []
    for d, m in zip(present, share, strict=True):
        idx = rng.permutation(np.flatnonzero(domain == d))
        if m > len(idx):
            raise ValueError(f"domain {d} has {len(idx)} examples for {m} clients")
        out += [np.sort(part) for part in np.array_split(idx, m)]
    return out


def toy_regression(*, num_domains: int, dim: int, points_per_domain: int, radius: float,
                   seed: int) -> dict[str, Any]:
    """Points of p domains in R^d whose minimax point is known in closed form (Ro et al. 2021, App. A).

    The paper's objective is min_w max_i ‖w − c_i‖², c_i the centre of domain i; with the per-example loss
    ‖w − y‖² the domain loss is ‖w − c_i‖² + s_i², so every domain gets the *same* zero-mean offsets
    (y = c_i + e_j, one set e of ``points_per_domain`` Gaussian offsets), which makes s_i² equal and
    leaves the minimax point unchanged. The first min(d + 1, p) centres are the vertices of a regular
    simplex of radius R centred at 0; the others lie inside the ball of radius R/2 [ours; FedJAX's toy
    data use d = 1, spec §2.5]. Hence the minimax point is w* = 0 and the maximising mixture weight puts
    1/(d + 1) on each vertex domain and 0 on the inner ones (unique when p ≥ d + 1).

    Returns
    -------
    dict
        ``y`` float32 (p·n, d), ``domain`` int64 (p·n,), ``centres`` (p, d), ``w_star`` (d,),
        ``lambda_star`` (p,).

    Raises
    ------
    ValueError
        For ``num_domains < d + 1`` (the minimax weights would not be unique), ``dim < 1``, fewer than 2
        points per domain or ``radius <= 0``.
    """
    if dim < 1 or num_domains < dim + 1 or points_per_domain < 2 or not radius > 0:
        raise ValueError(f"need dim >= 1, num_domains >= dim + 1, points_per_domain >= 2, radius > 0; got "
                         f"{dim}, {num_domains}, {points_per_domain}, {radius}")
    rng = np.random.default_rng(seed)
    k = dim + 1
    # regular simplex: the k standard basis vectors of R^k, centred, in an orthonormal basis of their span
    basis = np.eye(k) - 1.0 / k
    q, _ = np.linalg.qr(basis[:, :dim])
    vert = basis @ q
    vert = radius * vert / np.linalg.norm(vert, axis=1, keepdims=True)
    inner = rng.normal(size=(num_domains - k, dim))
    inner *= (radius * rng.uniform(0.1, 0.5, size=(num_domains - k, 1))) / np.linalg.norm(inner, axis=1, keepdims=True)
    centres = np.concatenate([vert, inner])
    e = rng.normal(size=(points_per_domain, dim))
    e -= e.mean(0)
    y = (centres[:, None, :] + e[None]).reshape(-1, dim)
    lam = np.zeros(num_domains)
    lam[:k] = 1.0 / k
    return {"y": y.astype(np.float32), "domain": np.repeat(np.arange(num_domains), points_per_domain),
            "centres": centres, "w_star": np.zeros(dim), "lambda_star": lam}


def _pack(parts: list[np.ndarray], x: np.ndarray, y: np.ndarray, d: np.ndarray) -> dict[str, torch.Tensor]:
    idx = np.concatenate(parts)
    return {"x": torch.from_numpy(np.ascontiguousarray(x[idx])), "y": torch.from_numpy(np.ascontiguousarray(y[idx])),
            "domain": torch.from_numpy(d[idx].astype(np.int64)),
            "offsets": torch.from_numpy(np.concatenate([[0], np.cumsum([len(p) for p in parts])]).astype(np.int64))}


def _fashion_mnist(data: dict[str, Any], raw: dict[str, Path]) -> dict[str, Any]:
    """The three AFL domains of Fashion-MNIST (classes → domains, labels renumbered 0..p−1), standardised."""
    fm = load_fashion_mnist(raw["fashion_mnist"])
    classes = data["classes"]
    out: dict[str, Any] = {}
    mu = sd = None
    for split in ("train", "test"):
        y = fm[f"y_{split}"]
        keep = np.flatnonzero(np.isin(y, classes))
        x = fm[f"x_{split}"][keep].reshape(len(keep), -1).astype(np.float64) / 255.0
        remap = np.full(10, -1, dtype=np.int64)
        remap[np.asarray(classes)] = np.arange(len(classes))
        lab = remap[y[keep]]
        if mu is None:  # per-pixel (x − μ)/(σ + eps) on the training sample (AFL recipe, spec §1.4)
            mu, sd = x.mean(0), x.std(0) + data.get("eps", 1e-3)
        x = ((x - mu) / sd).astype(np.float32)
        out[split] = (x, lab.astype(np.int64), lab.astype(np.int64))
    return out


def build_data(exp: dict[str, Any], raw: dict[str, str | Path], out_path: str | Path,
               summary_path: str | Path | None = None, work_dir: str | Path | None = None) -> dict[str, Any]:
    """Build an experiment's clients and per-domain test sets and write them (``torch.save``, weights-only).

    Parameters
    ----------
    exp : dict
        The experiment's config (``kind``, ``data``, ...).
    raw : dict
        Registry name → folder of its verified raw files.
    out_path : path
        The tensors (``train``: x, y, domain, offsets; ``test``: x, y, domain; ``domains``; ``vocab`` for LMs;
        ``truth`` for the toy) and ``summary``: clients and examples per domain and split, Stack Overflow
        statistics per split (Table 3), the toy's closed-form w*, λ*.
    summary_path : path, optional
        The summary also as JSON (what :func:`write_summary` writes from ``out_path``).
    work_dir : path, optional
        Where archive members are extracted (a temporary folder by default).

    Returns
    -------
    dict
        The summary.

    Raises
    ------
    ValueError
        A toy or a client spread that cannot be drawn (:func:`toy_regression`, :func:`spread_over_clients`).
    KeyError
        A source whose registry dataset is missing from ``raw``.
    """
    raw = {k: Path(v) for k, v in raw.items()}
    data = exp["data"]
    names = domain_names(exp)
    stored: dict[str, Any] = {"domains": names}
    extra: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(work_dir) if work_dir else Path(tmp)
        if exp["kind"] == "toy":
            t = toy_regression(num_domains=data["num_domains"], dim=data["dim"],
                               points_per_domain=data["points_per_domain"], radius=data["radius"], seed=data["seed"])
            parts = spread_over_clients(t["domain"], data["clients"], data["domain_type"], data["seed"])
            x = np.zeros((len(t["y"]), 1), dtype=np.float32)
            stored["train"] = _pack(parts, x, t["y"], t["domain"])
            stored["test"] = {"x": torch.from_numpy(x), "y": torch.from_numpy(t["y"]),
                              "domain": torch.from_numpy(t["domain"])}
            stored["truth"] = {"w_star": torch.from_numpy(t["w_star"]),
                               "lambda_star": torch.from_numpy(t["lambda_star"]),
                               "centres": torch.from_numpy(t["centres"])}
            extra["truth"] = {"w_star": t["w_star"].tolist(), "lambda_star": t["lambda_star"].tolist()}
        elif data["sources"] == ["fashion_mnist"]:
            splits = _fashion_mnist(data, raw)
            x, y, d = splits["train"]
            parts = spread_over_clients(d, data["clients"], data["domain_type"], data["seed"])
            stored["train"] = _pack(parts, x, y, d)
            xt, yt, dt = splits["test"]
            stored["test"] = {"x": torch.from_numpy(xt), "y": torch.from_numpy(yt), "domain": torch.from_numpy(dt)}
        elif data["sources"] == ["emnist"]:
            em = emnist.load_emnist(raw["emnist_tff"], work, data.get("max_clients"))
            tr, te = em["train"], em["test"]
            off = tr["offsets"]
            parts = [np.arange(off[k], off[k + 1]) for k in range(len(off) - 1)]
            stored["train"] = _pack(parts, tr["x"], tr["y"], tr["domain"])
            stored["test"] = {k: torch.from_numpy(te[k]) for k in ("x", "y", "domain")}
        elif data["sources"] == ["stackoverflow"]:
            stored.update(_stackoverflow(data, raw["stackoverflow_tff"], work, extra))
        else:
            stored.update(_corpora(data, raw, names))
    summary = {"domains": names, **extra, **_counts(stored, names)}
    stored["summary"] = summary
    torch_save_atomic(stored, out_path)
    if summary_path is not None:
        write_json(summary_path, summary)
    log.info("data: %s", summary)
    return summary


def write_summary(data_path: str | Path, summary_path: str | Path) -> dict[str, Any]:
    """Write the summary :func:`build_data` stored in ``data_path`` as JSON (atomically); returns it.

    The tables and figures read this small file instead of the experiment's tensors (GBs for Stack Overflow).

    Parameters
    ----------
    data_path : path
        :func:`build_data`'s tensors (read memory-mapped: only the summary is loaded).
    summary_path : path
        The JSON file to write.

    Returns
    -------
    dict
        The summary (domains, clients, examples per domain and split, ...).
    """
    summary = torch.load(data_path, map_location="cpu", weights_only=True, mmap=True)["summary"]
    write_json(summary_path, summary)
    return summary


def _counts(stored: dict[str, Any], names: list[str]) -> dict[str, Any]:
    tr = stored["train"]
    off = tr["offsets"].numpy()
    dom = tr["domain"].numpy()
    first = [int(dom[off[k]]) for k in range(len(off) - 1)]
    single = all(len(set(dom[off[k]:off[k + 1]].tolist())) == 1 for k in range(len(off) - 1))
    out = {"clients": len(off) - 1, "single_domain_clients": single,
           "train_examples": {n: int((dom == i).sum()) for i, n in enumerate(names)},
           "test_examples": {n: int((stored["test"]["domain"].numpy() == i).sum()) for i, n in enumerate(names)}}
    if single:
        out["clients_per_domain"] = {n: first.count(i) for i, n in enumerate(names)}
    return out


def _stackoverflow(data: dict[str, Any], raw_dir: Path, work: Path, extra: dict[str, Any]) -> dict[str, Any]:
    import tarfile

    with tarfile.open(raw_dir / stackoverflow.WORD_COUNT_ARCHIVE) as tf:
        member = next(m for m in tf if m.isfile() and Path(m.name).name == "stackoverflow.word_count")
        (work / "wc").mkdir(parents=True, exist_ok=True)
        (work / "wc" / "stackoverflow.word_count").write_bytes(tf.extractfile(member).read())
    vocab = stackoverflow.read_word_counts(work / "wc" / "stackoverflow.word_count", data["vocab_size"])
    out: dict[str, Any] = {"vocab": vocab}
    extra["statistics"] = {}
    for split, key in (("train", "train"), ("test", "test")):
        path = stackoverflow.h5_path(raw_dir, work, split)
        if data.get("statistics", True):
            extra["statistics"][split] = stackoverflow.split_statistics(path)
        s = stackoverflow.load_split(path, vocab, data["max_len"][split], max_clients=data.get(f"max_{split}_clients"),
                                     max_sentences_per_client=data.get("max_sentences_per_client"), seed=data["seed"])
        tok = torch.from_numpy(s["tokens"].astype(np.int32))  # int32: 135M train sentences at paper scale
        out[key] = {"x": tok[:, :-1].contiguous(), "y": tok[:, 1:].contiguous(),
                    "domain": torch.from_numpy(s["domain"]),
                    "offsets": torch.from_numpy(s["offsets"])}
    if data.get("statistics", True):
        held_out = stackoverflow.h5_path(raw_dir, work, "held_out")
        extra["statistics"]["held_out"] = stackoverflow.split_statistics(held_out)
    return out


def _corpora(data: dict[str, Any], raw: dict[str, Path], names: list[str]) -> dict[str, Any]:
    """PTB (document) and / or Cornell (conversation): one domain per corpus, a shared vocabulary."""
    loaders = {"ptb": lambda: load_ptb(raw["ptb"]),
               "cornell": lambda: cornell.load_cornell(raw["cornell_movie_dialogs"])}
    corpora = [loaders[s]() for s in data["sources"]]
    rng = np.random.default_rng(data["seed"])
    cap = data.get("max_sentences")
    train, test = [], []
    for c in corpora:
        tr, te = c["train"], c["test"]
        if cap is not None:
            tr = [tr[i] for i in sorted(rng.choice(len(tr), size=min(cap, len(tr)), replace=False))]
            te = [te[i] for i in sorted(rng.choice(len(te), size=min(cap, len(te)), replace=False))]
        train.append(tr)
        test.append(te)
    vocab = build_vocab([s for tr in train for s in tr], data["vocab_size"])
    enc_tr = [encode(tr, vocab, data["max_len"]) for tr in train]
    enc_te = [encode(te, vocab, data["max_len"]) for te in test]
    tok = np.concatenate(enc_tr)
    dom = np.concatenate([np.full(len(e), i, dtype=np.int64) for i, e in enumerate(enc_tr)])
    parts = spread_over_clients(dom, data["clients"], data["domain_type"], data["seed"])
    packed = _pack(parts, tok, tok, dom)
    seq = packed.pop("x")
    packed.pop("y")
    te = torch.from_numpy(np.concatenate(enc_te))
    return {"vocab": vocab, "train": {"x": seq[:, :-1].contiguous(), "y": seq[:, 1:].contiguous(), **packed},
            "test": {"x": te[:, :-1].contiguous(), "y": te[:, 1:].contiguous(),
                     "domain": torch.from_numpy(np.concatenate([np.full(len(e), i) for i, e in enumerate(enc_te)]))}}


def load_data(path: str | Path, device: torch.device, target: int | None = None) -> dict[str, Any]:
    """The clients (:class:`DomainClients`) and per-domain test sets of an experiment on ``device``.

    Parameters
    ----------
    path : path
        :func:`build_data`'s tensors.
    device : torch.device
        Where every tensor goes.
    target : int, optional
        Keep only the examples of this domain (FedAvg target-only); clients left empty are dropped.

    Returns
    -------
    dict
        ``clients``: :class:`DomainClients` (M clients, a domain id per example); ``test``: per domain id, its test
        ``(x, y)``; ``domains``: names in domain-id order; ``vocab`` (LM experiments, else None); ``truth`` (the
        toy's ``w_star``, ``lambda_star``, ``centres``, else None).

    Raises
    ------
    ValueError
        If no client holds an example of ``target``.
    """
    d = torch.load(path, map_location="cpu", weights_only=True)
    tr = d["train"]
    off = tr["offsets"].numpy()
    xs, ys, ds = [], [], []
    for k in range(len(off) - 1):
        sl = slice(int(off[k]), int(off[k + 1]))
        x, y, dom = tr["x"][sl], tr["y"][sl], tr["domain"][sl]
        if target is not None:
            keep = dom == target
            x, y, dom = x[keep], y[keep], dom[keep]
        if len(dom):
            xs.append(x.to(device))
            ys.append(y.to(device))
            ds.append(dom.to(device))
    if not xs:
        raise ValueError(f"{path}: no client holds an example of domain {target}")
    clients = DomainClients.from_clients(xs, ys, ds, len(d["domains"]))
    te = d["test"]
    test = [(te["x"][te["domain"] == i].to(device), te["y"][te["domain"] == i].to(device))
            for i in range(len(d["domains"]))]
    return {"clients": clients, "test": test, "domains": list(d["domains"]), "vocab": d.get("vocab"),
            "truth": d.get("truth")}

