"""AgnosticFedAvg paper (Ro et al. 2021, arXiv:2104.02748) and the AFL language-model Table 3 (Mohri et al. 2019).

Configuration checks, the data of each experiment, and the training run; the paper plug-in
(:class:`fedshift.papers.agnostic_fedavg.paper.AgnosticFedAvgPaper`) wires them into the generic stages.

Per experiment of the ``agnostic_fedavg:`` config section: one partition (:func:`build_data`: raw files →
clients with a domain id per example, per-domain test sets, and its summary; the summary also as a JSON
partition, :func:`write_summary`) → one training run per (algorithm, seed) (:func:`train_run`: per-domain test
metrics every ``log_every`` rounds, λ over rounds; the final evaluation and λ as the run's artifacts) → tidy
final metrics (:func:`metrics_rows`) → tables and figures (:mod:`fedshift.papers.agnostic_fedavg.report`).

Experiment kinds: ``toy`` (App. A), ``classification`` (Fashion-MNIST with the three AFL domains, EMNIST-62
high school / census, App. B), ``lm`` (Stack Overflow question / answer, §5.1; PTB document + Cornell
conversation, Mohri et al. §5.3). Algorithms (keys of an experiment's ``algorithms:``): ``kind: fedavg``
(FedAvg uniform, or FedAvg target-only with ``target: <domain>``) or ``kind: agnostic_fedavg``.
"""

from __future__ import annotations

import logging
import math
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from fedshift.algorithms import registry
from fedshift.algorithms.agnostic_fedavg import (
    DomainClients,
    cross_entropy_loss,
    scaled_client_lr,
)
from fedshift.budget import apply_budget
from fedshift.config import ConfigError
from fedshift.contract import Fit
from fedshift.core.training import run_training
from fedshift.data import cornell, emnist, stackoverflow
from fedshift.data.fashion_mnist import load_fashion_mnist
from fedshift.data.ptb import load_ptb
from fedshift.io import torch_save_atomic, write_json
from fedshift.lm import LM_MODELS, build_vocab, encode, lm_sums, token_loss
from fedshift.models import LogisticRegression, forward, init_params
from fedshift.papers.agnostic_fedavg.data import spread_over_clients, toy_regression
from fedshift.papers.agnostic_fedavg.models import EmnistCNN, ToyRegression, squared_loss

__all__ = ["KINDS", "OUTPUT_KINDS", "SOURCE_DATASETS", "check_config", "datasets_of", "experiments_of", "runs_of",
           "resolve_run", "domain_names", "build_data", "write_summary", "load_data", "build_module", "loss_of",
           "evaluator", "effective_client_lr", "build_algorithm", "registered_algorithm", "train_run",
           "metrics_rows"]

log = logging.getLogger(__name__)

KINDS = ("toy", "classification", "lm")
OUTPUT_KINDS = ("toy", "curves", "table", "stats")
#: Datasets each data source needs (registry names).
SOURCE_DATASETS = {"fashion_mnist": ["fashion_mnist"], "emnist": ["emnist_tff"], "stackoverflow": ["stackoverflow_tff"],
                   "ptb": ["ptb"], "cornell": ["cornell_movie_dialogs"]}


def _err(where: str, msg: str) -> ConfigError:
    return ConfigError(f"config error at agnostic_fedavg.{where}: {msg}")


def domain_names(exp: dict[str, Any]) -> list[str]:
    """The experiment's domain names, in domain-id order."""
    if exp["kind"] == "toy":
        return [f"domain{i}" for i in range(exp["data"]["num_domains"])]
    return list(exp["data"]["domains"])


def check_config(section: dict[str, Any]) -> None:
    """Cross-reference checks of the ``agnostic_fedavg:`` section (after its JSON schema).

    Raises
    ------
    ConfigError
        An enabled output naming an unknown output or experiment; a table row that is not an algorithm of
        its experiment; a target domain that is not a domain of the experiment; an LM source list that mixes
        Stack Overflow with the PTB / Cornell corpora; an AgnosticFedAvg algorithm without ``lambda_lr`` > 0
        or ``window_size`` >= 1; more clients per round than clients; ``checkpoint_every`` not a multiple of
        ``log_every``, or ``rounds`` not a multiple of ``log_every`` (the last row must hold an evaluation).
    """
    outs = section["outputs"]
    exps = section["experiments"]
    for name in section["build"]:
        if name not in outs:
            raise _err("build", f"unknown output {name!r}; known: {sorted(outs)}")
    for name, o in outs.items():
        for e in o.get("experiments", [o.get("experiment")]):
            if e not in exps:
                raise _err(f"outputs.{name}", f"unknown experiment {e!r}; known: {sorted(exps)}")
            for row in o.get("rows", {}):
                if row not in exps[e]["algorithms"]:
                    raise _err(f"outputs.{name}.rows", f"{row!r} is not an algorithm of experiment {e}")
    for name, e in exps.items():
        tr = e["train"]
        doms = domain_names(e)
        if e["kind"] == "lm":
            src = e["data"]["sources"]
            if "stackoverflow" in src and len(src) > 1:
                raise _err(f"experiments.{name}.data.sources", "stackoverflow cannot be mixed with other corpora")
            if "stackoverflow" not in src and len(src) != len(doms):
                raise _err(f"experiments.{name}.data.domains", f"one domain per source {src}, got {doms}")
        for alg, a in e["algorithms"].items():
            hp = {**tr, **a}
            where = f"experiments.{name}.algorithms.{alg}"
            if a.get("target") is not None and a["target"] not in doms:
                raise _err(f"{where}.target", f"{a['target']!r} is not a domain of {name} ({doms})")
            if a["kind"] == "agnostic_fedavg":
                if not hp.get("lambda_lr", 0) > 0:
                    raise _err(f"{where}.lambda_lr", f"must be > 0 (η_λ of the EG step), got {hp.get('lambda_lr')}")
                if not hp.get("window_size", 0) >= 1:
                    raise _err(f"{where}.window_size", f"must be >= 1, got {hp.get('window_size')}")
            if hp["checkpoint_every"] % hp["log_every"] or hp["rounds"] % hp["log_every"]:
                raise _err(f"{where}", "rounds and checkpoint_every must be multiples of log_every")
        clients = e["data"].get("clients")
        if clients is not None and tr["clients_per_round"] > clients:
            raise _err(f"experiments.{name}.train.clients_per_round", f"{tr['clients_per_round']} > {clients} clients")


def experiments_of(section: dict[str, Any]) -> list[str]:
    """Experiments the enabled outputs need."""
    used = set()
    for name in section["build"]:
        o = section["outputs"][name]
        used.update(o.get("experiments", [o.get("experiment")]))
    return sorted(used)


def datasets_of(section: dict[str, Any]) -> list[str]:
    """Registry names of the raw datasets the enabled outputs need."""
    out = set()
    for e in experiments_of(section):
        for src in section["experiments"][e].get("data", {}).get("sources", []):
            out.update(SOURCE_DATASETS[src])
    return sorted(out)


def runs_of(section: dict[str, Any], experiment: str) -> list[tuple[str, int]]:
    """(algorithm, seed) of every training run of an experiment."""
    e = section["experiments"][experiment]
    return [(a, s) for a in e["algorithms"] for s in range(e["seeds"])]


def resolve_run(section: dict[str, Any], experiment: str, algorithm: str,
                budget: dict[str, Any] | None = None) -> dict[str, Any]:
    """Everything a training job of (experiment, algorithm) depends on, as its ``params``.

    ``budget`` (the configuration's top-level ``budget``, e.g. the rehearsal's ``{max_rounds: 2}``) caps
    ``train.rounds`` and its periods (:func:`fedshift.budget.apply_budget`); None leaves them as configured.

    Raises
    ------
    ConfigError
        For an unknown experiment or algorithm.
    """
    if experiment not in section["experiments"]:
        raise ConfigError(f"unknown AgnosticFedAvg experiment {experiment!r}")
    e = section["experiments"][experiment]
    if algorithm not in e["algorithms"]:
        raise ConfigError(f"experiment {experiment}: unknown algorithm {algorithm!r}; known: {sorted(e['algorithms'])}")
    a = dict(e["algorithms"][algorithm])
    return {"experiment": experiment, "algorithm": algorithm, "kind": e["kind"], "domains": domain_names(e),
            "model": e["model"], "data": e["data"], "train": apply_budget({**e["train"], **a}, budget)}


# ---------------------------------------------------------------------------------------------- data

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
    target : int, optional
        Keep only the examples of this domain (FedAvg target-only); clients left empty are dropped.
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


# ---------------------------------------------------------------------------------------------- train

def build_module(resolved: dict[str, Any], data: dict[str, Any]) -> torch.nn.Module:
    """The experiment's model (``model.name``: toy_regression, logreg, emnist_cnn, reddi_lstm, stacked_lstm)."""
    m = resolved["model"]
    name = m["name"]
    if name == "toy_regression":
        return ToyRegression(int(data["clients"].pool.y.shape[1]), m.get("init"))
    if name == "logreg":
        return LogisticRegression(int(data["clients"].pool.x[0].numel()), len(data["domains"]))
    if name == "emnist_cnn":
        return EmnistCNN(62)
    if name in LM_MODELS:
        kw = {k: v for k, v in m.items() if k != "name"}
        return LM_MODELS[name](len(data["vocab"]) + 4, **kw)
    raise ConfigError(f"unknown model {name!r}")


def loss_of(resolved: dict[str, Any]):
    """The per-example training loss of an experiment kind."""
    if resolved["kind"] == "toy":
        return squared_loss
    if resolved["kind"] == "lm":
        scale = float(resolved["train"].get("loss_scale", 1.0))
        return lambda module, params, x, y: token_loss(module, params, x, y, scale)
    return cross_entropy_loss


def evaluator(resolved: dict[str, Any], module: torch.nn.Module, data: dict[str, Any]):
    """``evaluate(params) -> {metric/domain: value}`` on the per-domain test sets.

    Classification: ``accuracy/<d>`` (fraction), ``loss/<d>`` (nats) and ``worst_accuracy``; LM:
    ``perplexity/<d>``, ``accuracy/<d>`` (in-vocab) and ``worst_perplexity``; toy: ``w/<i>`` and ``loss/<d>``
    (mean ‖w − y‖² of the domain) and ``max_loss``.
    """
    names, kind = data["domains"], resolved["kind"]

    def evaluate(params: dict[str, torch.Tensor]) -> dict[str, float]:
        out: dict[str, float] = {}
        with torch.no_grad():
            for name, (x, y) in zip(names, data["test"], strict=True):
                if not len(y):
                    continue
                if kind == "lm":
                    s = lm_sums(module, params, x, y)
                    out[f"perplexity/{name}"] = math.exp(s["loss"] / max(s["tokens"], 1))
                    out[f"accuracy/{name}"] = s["correct"] / max(s["words"], 1)
                elif kind == "toy":
                    out[f"loss/{name}"] = float(squared_loss(module, params, x, y).mean())
                else:
                    chunks = [(forward(module, params, x[i:i + 4096]), y[i:i + 4096]) for i in range(0, len(y), 4096)]
                    out[f"accuracy/{name}"] = float(sum((lg.argmax(1) == yy).sum() for lg, yy in chunks) / len(y))
                    out[f"loss/{name}"] = float(sum(cross_entropy_loss(module, params, xx, yy).sum()
                                                    for xx, yy in zip(x.split(4096), y.split(4096), strict=True))
                                                / len(y))
        if kind == "lm":
            out["worst_perplexity"] = max(v for k, v in out.items() if k.startswith("perplexity/"))
        elif kind == "toy":
            out.update({f"w/{i}": float(v) for i, v in enumerate(params["w"].flatten())})
            out["max_loss"] = max(v for k, v in out.items() if k.startswith("loss/"))
        else:
            out["worst_accuracy"] = min(v for k, v in out.items() if k.startswith("accuracy/"))
        return out

    return evaluate


def effective_client_lr(train: dict[str, Any], clients: DomainClients) -> float:
    """The client step size: ``client_lr``, times mean(n_k) / B with ``client_lr_scale: mean_client_size``.

    AgnosticFedAvg's local objective (1/β^k) Σ_{j∈B} α_{d_j} ℓ_j is a batch *sum* over the client's total
    weight, about B / n_k times FedAvg's batch mean (exactly, for one domain), so the step size that moves a
    client as far as FedAvg's per epoch is η · n_k / B. The scaling uses the mean client size of the training
    data, so one config holds at every scale [ours; FedJAX tunes the client lr by hand].
    """
    if train.get("client_lr_scale", "none") == "mean_client_size":
        return scaled_client_lr(train["client_lr"], clients.pool.sizes(), train["batch_size"])
    return float(train["client_lr"])


def build_algorithm(resolved: dict[str, Any], module: torch.nn.Module, data: dict[str, Any], evaluate):
    """AgnosticFedAvg or the FedAvg baseline from a resolved run."""
    tr = resolved["train"]
    common = dict(clients_per_round=min(tr["clients_per_round"], data["clients"].num_clients),
                  local_epochs=tr["local_epochs"], batch_size=tr["batch_size"],
                  client_lr=effective_client_lr(tr, data["clients"]),
                  server_optimizer=tr["server_optimizer"], server_lr=tr["server_lr"],
                  server_optimizer_kwargs=tr.get("server_optimizer_kwargs") or {}, loss_fn=loss_of(resolved),
                  evaluate=evaluate, eval_every=tr["log_every"])
    name = registered_algorithm(tr["kind"])
    if name == "agnostic_fedavg":
        hp = dict(lambda_lr=tr["lambda_lr"], window_size=tr["window_size"],
                  init_domain_weights=tr.get("init_domain_weights", "uniform"),
                  init_domain_window=tr.get("init_domain_window"))
    else:
        hp = {"name": "fedavg"}
    return registry.build(name, registry.BuildContext(module, num_domains=len(data["domains"])), **hp, **common)


def registered_algorithm(kind: str) -> str:
    """The registered algorithm (:mod:`fedshift.algorithms.registry`) of ``kind`` (FedAvg: ``domain_fedavg``)."""
    return "domain_fedavg" if kind == "fedavg" else kind


def train_run(resolved: dict[str, Any], seed: int, data_path: str | Path, *, device: torch.device,
              checkpoint: str | Path | None, fingerprint: str) -> Fit:
    """Train one (experiment, algorithm, seed) run: what :meth:`AgnosticFedAvgPaper.train` returns.

    Parameters
    ----------
    resolved : dict
        :func:`resolve_run` (the run's ``RunSpec.hparams``).
    seed : int
        Initialisation (``init_params(module, seed)``) and every round's client sample and batches
        (``RoundKey(seed, round)``).
    data_path : path
        :func:`build_data`'s tensors.
    device : torch.device
    checkpoint : path, optional
        Resume point, used when its ``fingerprint`` matches.
    fingerprint : str
        The job's checkpoint identity (:func:`fedshift.jobs.input_fingerprint`).

    Returns
    -------
    Fit
        Final w; history: one row per logged round (loss, λ, per-domain mean loss L̄, per-domain test
        metrics, ``eval/`` prefix removed); artifacts: ``final`` (:func:`evaluator` of the final w) and
        ``lambda`` (the final λ, None for FedAvg), read by :func:`metrics_rows`.

    Raises
    ------
    NonFiniteLossError
        On NaN / inf (nothing is written).
    ValueError
        A target domain without examples.
    """
    target = resolved["train"].get("target")
    data = load_data(data_path, device, resolved["domains"].index(target) if target is not None else None)
    module = build_module(resolved, data).to(device)
    module.eval()  # dropout off: deterministic local steps [ours]
    evaluate = evaluator(resolved, module, data)
    alg = build_algorithm(resolved, module, data, evaluate)
    tr = resolved["train"]
    result = run_training(alg, init_params(module, seed, device=device), data["clients"], rounds=tr["rounds"],
                          seed=seed, checkpoint_path=checkpoint, checkpoint_every=tr["checkpoint_every"],
                          log_every=tr["log_every"], fingerprint=fingerprint)
    state = result.state
    final = alg.eval_params(state)
    history = pd.DataFrame(result.history)
    history.columns = [c.removeprefix("eval/") for c in history.columns]
    artifacts = {"final": evaluate(final), "lambda": state.lam.tolist() if hasattr(state, "lam") else None}
    info = {"resolved": resolved, "clients": data["clients"].num_clients, "rounds": state.round,
            "effective_client_lr": effective_client_lr(tr, data["clients"])}
    return Fit(final, history, info, result, artifacts)


def metrics_rows(resolved: dict[str, Any], seed: int, artifacts: dict[str, Any]) -> pd.DataFrame:
    """Tidy final metrics of one run from its artifacts (:func:`train_run`): ``metrics.csv``.

    Returns
    -------
    DataFrame
        Columns experiment, algorithm, seed, domain (``all`` for worst-domain / toy summaries), metric, value:
        every metric of :func:`evaluator` on the final w, then ``lambda`` per domain (AgnosticFedAvg only).
    """
    rows = []
    for k, v in artifacts["final"].items():
        metric, _, dom = k.partition("/")
        rows.append({"experiment": resolved["experiment"], "algorithm": resolved["algorithm"], "seed": seed,
                     "domain": dom or "all", "metric": metric, "value": v})
    if artifacts.get("lambda") is not None:
        rows += [{"experiment": resolved["experiment"], "algorithm": resolved["algorithm"], "seed": seed,
                  "domain": n, "metric": "lambda", "value": float(v)}
                 for n, v in zip(resolved["domains"], artifacts["lambda"], strict=True)]
    return pd.DataFrame(rows)
