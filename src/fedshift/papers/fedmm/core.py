"""FedMM paper (Shen et al., AAMAS 2023; arXiv:2110.08477): configuration checks, runs, data and training.

The paper plug-in (:class:`fedshift.papers.fedmm.paper.FedmmPaper`, the generic rules of
``workflow/rules/runs.smk``) runs, for the ``fedmm:`` config section: fetch the raw files by
the registry's download rules (:func:`datasets_of`: MNIST, MNIST-M, Office-31, BSDS500, MobileNetV2 weights;
:mod:`fedshift.data.download`) → the shared prepare rules (:mod:`fedshift.data.prepare`: MNIST-M generated from
BSDS500, the full MNIST-M archive, Office-31 decoded) → one partition
per (task, client setting) (:func:`write_partition`) → one training job per run
(:meth:`~fedshift.papers.fedmm.paper.FedmmPaper.train`: the target test accuracy every ``eval_every`` rounds is
the run's history) → Figs. 1, 4–7 and Table 1 (:mod:`fedshift.papers.fedmm.report`).

A *task* is one source → target problem (``digits``: MNIST → MNIST-M; ``office_A_W`` …: Office-31); a *run*
is (optimizer, head, client setting, M, η₃) (:func:`settings_of`), labelled
``<optimizer>-<head>-<clients>-M<M>-e<η₃>``, e.g. ``fedmm-dann-p1-M20-e1`` (a label: the values travel typed,
:func:`resolve_setting`). Client settings: ``p<v>``, two clients, client 1 holds the fraction v of the source
and 1 − v of the target, client 2 the rest (Figs. 1 and 4); ``s<k>t<l>``, k clients with source data only and
l with target data only, equal shares (Fig. 7; ``s1t1`` is ``p1``).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedshift.algorithms import registry
from fedshift.algorithms.domain_adaptation import build_digits_network, build_office_network
from fedshift.algorithms.sgda import AdaptationClient, network_directions
from fedshift.budget import apply_budget
from fedshift.config import ConfigError
from fedshift.data.digits import preprocess
from fedshift.data.digits import scaled_pixels as _pixels  # [0, 1] digits on 28 x 28 RGB
from fedshift.data.office31 import TASKS as OFFICE_TASKS
from fedshift.data.prepare import load_prepared, raw_datasets_of
from fedshift.io import write_json
from fedshift.partition import largest_remainder

__all__ = ["OUTPUTS", "OPTIMIZERS", "check_config", "datasets_of", "run_id", "merged_section",
           "parse_run_id", "settings_of", "runs_of", "resolve_setting", "resolve_run", "client_settings",
           "split_clients", "write_partition", "load_data", "build_network", "build_algorithm", "accuracy",
           "prepared_name", "BATCH_SPLITS", "PREPROCESSINGS", "official_images"]

log = logging.getLogger(__name__)

#: Named outputs (rules ``<paper>_<name>``, e.g. ``fedmm_fig1``).
OUTPUTS = ("fig1", "fig4", "fig5", "fig6", "fig7", "table1")
#: Figures on the digits task.
OPTIMIZERS = ("fedmm", "fedavg_sgda", "fedprox_sgda", "fedsgda")
#: Target datasets of the digits task: MNIST-M's train and test splits as mirrored (registry ``mnist_m``), the
#: canonical archive of the same images (registry ``mnist_m_full``) and MNIST-M generated from MNIST and BSDS500
#: (``mnist_m_bsds``, made from the registry's ``mnist`` and ``bsds500``: :data:`fedshift.data.prepare.GENERATED`).
#: The target's train split gives the clients' unlabelled rows, its test split the test set.
DIGIT_TARGETS = ("mnist_m", "mnist_m_full", "mnist_m_bsds")
#: Fig. 7's curves unless ``figures.fig7.optimizers`` names fewer.
FIG7_OPTIMIZERS = ("fedmm", "fedavg_sgda", "fedprox_sgda")
#: Per-client batch compositions (``train.batch_split``, :func:`build_algorithm`): by the client's shares of the
#: two domains (official code, the default) or by its own rows.
BATCH_SPLITS = ("domain_shares", "client_rows")
#: Digits input preprocessing (task key ``preprocessing``, :func:`load_data`): per-domain standardisation (ours,
#: the default) or the official code's binarised MNIST and per-batch centring.
PREPROCESSINGS = ("per_domain", "official")
_SETTING = re.compile(r"^(?:p(?P<p>[0-9.]+)|s(?P<s>\d+)t(?P<t>\d+))$")
_RUN = re.compile(r"^(?P<opt>[a-z_]+)-(?P<head>dann|cdan|mdd)-(?P<clients>[a-z0-9.]+)-M(?P<m>\d+)-e(?P<e>[0-9.e+-]+)$")


def _fmt(v: float) -> str:
    return f"{float(v):g}"


def run_id(optimizer: str, head: str, clients: str, local_steps: int, eta3: float) -> str:
    """``<optimizer>-<head>-<clients>-M<M>-e<η₃>`` (η₃ in ``%g`` form; 0 for the baselines)."""
    return f"{optimizer}-{head}-{clients}-M{int(local_steps)}-e{_fmt(eta3)}"


def parse_run_id(rid: str) -> dict[str, Any]:
    """Inverse of :func:`run_id`.

    Raises
    ------
    ConfigError
        For a malformed id, an unknown optimizer or client setting.
    """
    m = _RUN.match(rid)
    if m is None or m["opt"] not in OPTIMIZERS:
        raise ConfigError(f"malformed FedMM run id {rid!r}; expected <optimizer>-<head>-<clients>-M<M>-e<eta3> "
                          f"with an optimizer of {OPTIMIZERS}")
    client_settings(m["clients"])
    return {"optimizer": m["opt"], "head": m["head"], "clients": m["clients"], "local_steps": int(m["m"]),
            "eta3": float(m["e"])}


def client_settings(setting: str) -> list[tuple[float, float]]:
    """(source share, target share) of every client of a setting (module docstring).

    Raises
    ------
    ConfigError
        For a malformed setting, p outside [0.5, 1], or no client.
    """
    m = _SETTING.match(setting)
    if m is None:
        raise ConfigError(f"client setting {setting!r}: expected p<value> or s<k>t<l>")
    if m["p"] is not None:
        p = float(m["p"])
        if not 0.5 <= p <= 1:
            raise ConfigError(f"client setting {setting!r}: p must be in [0.5, 1]")
        return [(p, 1 - p), (1 - p, p)]
    s, t = int(m["s"]), int(m["t"])
    if s < 1 or t < 1:
        raise ConfigError(f"client setting {setting!r}: needs at least one source and one target client")
    return [(1 / s, 0.0)] * s + [(0.0, 1 / t)] * t


# ---------------------------------------------------------------------------------------------- config

#: Keys every task must hold once ``fedmm.defaults`` is merged in (the schema cannot see the merge).
TASK_KEYS = ("source", "target", "partition_seed", "network", "seeds", "train", "fedmm", "fedprox", "heads")


def merged_section(section: dict[str, Any]) -> dict[str, Any]:
    """The ``fedmm:`` section with ``defaults`` merged into every task (:func:`fedshift.contract.experiments_of`).

    A section without ``defaults`` comes back as it is (the functions below accept either).

    Raises
    ------
    ConfigError
        ``fedmm.tasks.<task>.<key>``: a task that lacks a key of :data:`TASK_KEYS` even with the defaults.
    """
    from fedshift.contract import experiments_of

    if "defaults" not in section:
        return section
    tasks = experiments_of({"defaults": section["defaults"], "experiments": section.get("tasks")})
    for name, task in tasks.items():
        for key in TASK_KEYS:
            if key not in task:
                raise ConfigError(f"config error at fedmm.tasks.{name}.{key}: required (in the task or in "
                                  "fedmm.defaults)")
    return {**{k: v for k, v in section.items() if k != "defaults"}, "tasks": tasks}


def _task_of(section: dict[str, Any], name: str) -> str | list[str]:
    fig = section["figures"].get(name, {})
    return fig.get("tasks", []) if name == "table1" else fig.get("task")


def _enabled(section: dict[str, Any]) -> list[str]:
    return [o for o in OUTPUTS if o in section["outputs"]]


def check_config(section: dict[str, Any]) -> None:
    """Cross-reference checks of the ``fedmm:`` section (after its JSON schema).

    That the registry lists :func:`datasets_of` is checked by the workflow for every paper
    (:func:`fedshift.config.check_registered`).

    Raises
    ------
    ConfigError
        An enabled output without its figure entry; a figure naming an unknown task, a digits figure on an
        Office-31 task or Table 1 on a digits task; a head a task does not configure; a malformed client
        setting; ``checkpoint_every`` not a multiple of ``eval_every``; a p value outside [0.5, 1]; Fig. 6
        without M values.
    """
    section = merged_section(section)
    tasks = section["tasks"]
    for name in _enabled(section):
        where = f"fedmm.figures.{name}"
        if name not in section["figures"]:
            raise ConfigError(f"config error at {where}: output {name!r} is enabled but not configured")
        fig = section["figures"][name]
        names = fig["tasks"] if name == "table1" else [fig["task"]]
        for t in names:
            if t not in tasks:
                raise ConfigError(f"config error at {where}: unknown task {t!r}; known: {sorted(tasks)}")
            office = tasks[t]["network"]["kind"] == "office"
            if office != (name == "table1"):
                raise ConfigError(f"config error at {where}: task {t!r} is "
                                  + ("an Office-31 task" if office else "not an Office-31 task"))
            for h in fig["heads"]:
                if h not in tasks[t]["heads"]:
                    raise ConfigError(f"config error at {where}.heads: task {t!r} configures no head {h!r}")
        for key in ("clients", "p"):
            for v in fig.get(key, []):
                client_settings(v if key == "clients" else f"p{_fmt(v)}")
    for t, task in tasks.items():
        base = f"fedmm.tasks.{t}"
        tr = task["train"]
        if tr["checkpoint_every"] % tr["eval_every"]:
            raise ConfigError(f"config error at {base}.train.checkpoint_every: must be a multiple of eval_every")
        for h, hs in task["heads"].items():
            if hs.get("rounds", tr["rounds"]) < tr["eval_every"]:
                raise ConfigError(f"config error at {base}.heads.{h}.rounds: fewer rounds than eval_every")
        office = task["network"]["kind"] == "office"
        if office and task.get("transfer") not in OFFICE_TASKS:
            raise ConfigError(f"config error at {base}.transfer: one of {sorted(OFFICE_TASKS)} for Office-31")
        if not office and task["target"] not in DIGIT_TARGETS:
            raise ConfigError(f"config error at {base}.target: one of {DIGIT_TARGETS} for the digits task")


def _used_tasks(section: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for name in _enabled(section):
        t = _task_of(section, name)
        out += t if isinstance(t, list) else [t]
    return list(dict.fromkeys(out))


def datasets_of(section: dict[str, Any]) -> list[str]:
    """Registry datasets (``config/datasets.yaml``) the enabled outputs need (downloaded, checked in the mirror).

    Digits tasks: ``mnist``, and the target's raw files (``mnist_m``, ``mnist_m_full``, or ``bsds500`` for
    MNIST-M generated from it); Office-31 tasks: ``office31`` and the ``mobilenet_v2`` weights.
    """
    section = merged_section(section)
    out = set()
    for t in _used_tasks(section):
        task = section["tasks"][t]
        if task["network"]["kind"] == "office":
            out |= {"office31", "mobilenet_v2"}
            continue
        out.add("mnist")
        out.update(raw_datasets_of(task["target"]))
    return sorted(out)


def prepared_name(task: dict[str, Any], role: str) -> str:
    """File stem under ``data/prepared/`` of a task's ``source`` or ``target`` data.

    Every one is a shared prepared dataset (:mod:`fedshift.data.prepare`, rules ``prepare`` and
    ``prepare_generated``): ``mnist``, ``mnist_m``, ``mnist_m_full``, ``mnist_m_bsds`` or ``office31``.
    """
    return "office31" if task["network"]["kind"] == "office" else task[role]


def _setting(optimizer: str, head: str, clients: str, local_steps: int, eta3: float) -> dict[str, Any]:
    return {"optimizer": optimizer, "head": head, "clients": clients, "local_steps": int(local_steps),
            "eta3": float(eta3)}


def settings_of(section: dict[str, Any], name: str, task: str) -> list[dict[str, Any]]:
    """The run settings one output needs on one task, in the output's order, without repeats.

    Each is ``{"optimizer", "head", "clients", "local_steps", "eta3"}`` (η₃ 0 for the baselines), typed as
    :func:`parse_run_id` returns them; :func:`run_id` labels it.
    """
    section = merged_section(section)
    fig = section["figures"][name]
    t = section["tasks"][task]
    m0, e0 = t["train"]["local_steps"], t["fedmm"]["eta3"]
    out = []
    for h in fig["heads"]:
        if name in ("fig1", "fig4"):
            opts = ["fedavg_sgda"] if name == "fig1" else ["fedavg_sgda", "fedmm"]
            out += [_setting(o, h, f"p{_fmt(p)}", m0, e0 if o == "fedmm" else 0) for o in opts for p in fig["p"]]
        elif name == "fig5":
            out += [_setting("fedmm", h, "p1", m, e) for m in fig["local_steps"] for e in fig["eta3"]]
        elif name == "fig6":
            out += [_setting("fedmm", h, "p1", m, e0) for m in fig["local_steps"]]
            out.append(_setting("fedsgda", h, "p1", 1, 0))
        elif name == "fig7":
            for c in fig["clients"]:
                c = "p1" if c == "s1t1" else c  # the same two clients
                out += [_setting(o, h, c, m0, e0 if o == "fedmm" else 0)
                        for o in fig.get("optimizers", FIG7_OPTIMIZERS)]
        else:
            for o in fig["optimizers"]:
                out.append(_setting(o, h, "p1", 1 if o == "fedsgda" else m0, e0 if o == "fedmm" else 0))
    return list({run_id(**s): s for s in out}.values())


def _ids_of(section: dict[str, Any], name: str, task: str) -> list[str]:
    return [run_id(**s) for s in settings_of(section, name, task)]


def runs_of(section: dict[str, Any], name: str | None = None) -> list[tuple[str, str, int]]:
    """(task, run id, seed) of every training job of one output (or of all enabled outputs)."""
    section = merged_section(section)
    out: list[tuple[str, str, int]] = []
    for n in ([name] if name else _enabled(section)):
        t = _task_of(section, n)
        for task in (t if isinstance(t, list) else [t]):
            seeds = range(section["tasks"][task]["seeds"])
            out += [(task, r, s) for r in _ids_of(section, n, task) for s in seeds]
    return list(dict.fromkeys(out))


def resolve_run(section: dict[str, Any], task: str, rid: str, budget: dict[str, Any] | None = None
                ) -> dict[str, Any]:
    """:func:`resolve_setting` of the setting a run id labels (:func:`parse_run_id`).

    Raises
    ------
    ConfigError
        For an unknown task or head, or a malformed run id.
    """
    return resolve_setting(section, task, parse_run_id(rid), budget)


def resolve_setting(section: dict[str, Any], task: str, run: dict[str, Any], budget: dict[str, Any] | None = None
                    ) -> dict[str, Any]:
    """Everything a training job of (task, run setting) depends on: the run's ``hparams``.

    ``run`` is one of :func:`settings_of` (optimizer, head, clients, local_steps, eta3). ``budget`` (the
    configuration's top-level ``budget``, e.g. the rehearsal's ``{max_rounds: 2}``) caps ``train.rounds``
    (after the head's and FedSGDA's own rounds) and its periods (:func:`fedshift.budget.apply_budget`); None
    leaves them as configured.

    Raises
    ------
    ConfigError
        For an unknown task or head.
    """
    section = merged_section(section)
    if task not in section["tasks"]:
        raise ConfigError(f"unknown FedMM task {task!r}")
    t = section["tasks"][task]
    run = _setting(**run)
    if run["head"] not in t["heads"]:
        raise ConfigError(f"task {task!r} configures no head {run['head']!r}")
    head = t["heads"][run["head"]]
    train = {**t["train"], "local_steps": run["local_steps"], "rounds": head.get("rounds", t["train"]["rounds"])}
    if run["optimizer"] == "fedsgda":
        train["rounds"] = t.get("fedsgda", {}).get("rounds", train["rounds"])
    train = apply_budget(train, budget)
    opt: dict[str, Any] = {}
    if run["optimizer"] == "fedmm":
        opt = {**t["fedmm"], "eta3": run["eta3"], "eta3_decay": head["eta3_decay"]}
    elif run["optimizer"] == "fedprox_sgda":
        opt = dict(t["fedprox"])
    return {"task": task, "run": run_id(**run), **run, "nu": head["nu"], "network": t["network"],
            "preprocessing": t.get("preprocessing", "per_domain"), "train": train,
            "optimizer_settings": opt, "data": {k: t.get(k) for k in ("source", "target", "transfer", "source_size",
                                                                       "target_size", "partition_seed")}}


# ---------------------------------------------------------------------------------------------- data

def split_clients(n_source: int, n_target: int, shares: list[tuple[float, float]], seed: int
                  ) -> list[dict[str, list[int]]]:
    """Split source rows 0…n_s−1 and target rows 0…n_t−1 over clients by their shares.

    One random permutation per domain (``default_rng([seed, 7])``); client k takes the next share · n rows of
    each, rounded by largest remainders (:func:`fedshift.partition.largest_remainder`: the counts sum to n and
    each is within one row of share · n), so every row goes to exactly one client.

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
        The task's data settings (``resolve_run(...)["data"]``).
    clients : str
        Client setting (``p0.75``, ``s2t1``, …).
    source_path, target_path : path
        Prepared source and target datasets (the same file for Office-31).

    Returns
    -------
    dict
        ``{"source_split", "target_split", "test_split", "clients": [{"source": rows, "target": rows}],
        "test": rows, "sizes": [[n_s, n_t], ...]}``: rows index the named splits of the prepared files.
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


def _images(prepared: dict[str, Any], split: str, kind: str) -> torch.Tensor:
    """float32 (n, 3, H, W) inputs of one split.

    Digits are standardised per domain (28 x 28 RGB); Office-31 images with the ImageNet statistics of
    MobileNetV2's pre-training.
    """
    x = prepared[f"x_{split}"].numpy()
    if kind == "digits":
        return preprocess(x, "digits_rgb28")
    t = torch.from_numpy(x).float().div_(255).permute(0, 3, 1, 2).contiguous()
    return (t - _IMAGENET[0]) / _IMAGENET[1]


def _standardised(prepared: dict[str, Any], split: str, rows: np.ndarray, kind: str) -> torch.Tensor:
    """The rows of one split of a domain, standardised with the statistics of exactly these rows."""
    return _images({"x_all": prepared[f"x_{split}"][torch.as_tensor(rows, dtype=torch.long)]}, "all", kind)


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
    training batches are centred by their own mean (:func:`build_algorithm`) and the test set, which the
    official code evaluates as one batch, by the test set's scalar mean. Office-31: ImageNet statistics.

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


def build_network(resolved: dict[str, Any], weights_path: str | Path | None = None) -> torch.nn.Module:
    """The digits or Office-31 network of a run (:mod:`fedshift.algorithms.domain_adaptation`)."""
    net = resolved["network"]
    if net["kind"] == "digits":
        return build_digits_network(resolved["head"], conv_layers=net["conv_layers"],
                                    task_hidden=net["task_hidden"], domain_hidden=net["domain_hidden"])
    return build_office_network(resolved["head"], bottleneck_dim=net["bottleneck_dim"],
                                task_hidden=net["task_hidden"], domain_hidden=net["domain_hidden"],
                                dropout=net["dropout"],
                                weights_path=None if weights_path is None else str(weights_path))


def build_algorithm(resolved: dict[str, Any], module: torch.nn.Module, client_ids: list[int],
                    domain_sizes: tuple[int, int] | None = None):
    """FedMM, FedAvgSGDA, FedProxSGDA or FedSGDA of a resolved run.

    ``train.batch_split`` (:data:`BATCH_SPLITS`) sets every client's batch composition: ``domain_shares`` (the
    default, official ``dataset_factory.py``) splits it by the client's shares of the two domains, whose sizes
    ``domain_sizes`` (source and target rows over all clients) gives; ``client_rows`` by the client's own rows
    (:func:`fedshift.algorithms.sgda.batch_split`). At p = 1 and in the s<k>t<l> settings every client holds one
    domain and both give its whole batch to it.

    Raises
    ------
    ConfigError
        ``domain_shares`` without ``domain_sizes``, or an unknown ``batch_split``.
    """
    tr, opt = resolved["train"], resolved["optimizer_settings"]
    m = tr["local_steps"]
    split = tr.get("batch_split", "domain_shares")
    if split not in BATCH_SPLITS:
        raise ConfigError(f"config error at fedmm.tasks.{resolved.get('task')}.train.batch_split: {split!r} is not "
                          f"one of {BATCH_SPLITS}")
    if split == "domain_shares" and domain_sizes is None:
        raise ConfigError("train.batch_split domain_shares needs the domain sizes (source and target rows)")
    dirs = network_directions(module, nu=resolved["nu"], batch_size=tr["batch_size"], steps=m,
                              domain_sizes=domain_sizes if split == "domain_shares" else None,
                              centre=resolved.get("preprocessing", "per_domain") == "official")
    lr = (tr["client_lr"], tr["client_lr_adversary"])  # (η₁, η₂): the clients' descent and ascent steps
    name = resolved["optimizer"]  # a registered name (fedshift.algorithms.registry)
    if name == "fedmm":
        hp = {"mu": (opt["mu"], opt["mu_adversary"]), "eta3": opt["eta3"], "eta3_decay": opt["eta3_decay"],
              "eta3_every": opt["eta3_every"]}
    else:
        hp = {"mu": opt.get("mu", 0.0) if name == "fedprox_sgda" else 0.0}
    return registry.build(name, registry.BuildContext(dirs, client_ids=client_ids), local_steps=m, lr=lr, **hp)


EVAL_CHUNK_ELEMENTS = 2 ** 23
"""Input elements per evaluation forward pass (32 MiB of float32): 1,024 digits (3 × 28 × 28) but 55 Office-31
images (3 × 224 × 224) at a time, so that MobileNetV2's activations stay under ~1 GB (a fixed 1,024 images at
224 px asked for over 10 GB and was killed out of memory in the rehearsal, issue 16)."""


def eval_chunk(x: torch.Tensor, cap: int = 1024) -> int:
    """Images per evaluation forward pass: at most ``cap``, and at most :data:`EVAL_CHUNK_ELEMENTS` input elements.

    Parameters
    ----------
    x : torch.Tensor, shape (n, ...)
        The images to evaluate.
    cap : int
        The most images per pass (small inputs).

    Returns
    -------
    int
        In [1, cap].
    """
    per_image = max(int(x[0].numel()), 1) if len(x) else 1
    return max(1, min(cap, EVAL_CHUNK_ELEMENTS // per_image))


def accuracy(module: torch.nn.Module, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
             chunk: int | None = None) -> float:
    """Top-1 accuracy of the task classifier (eval mode, no gradient), in [0, 1].

    ``x`` (n, C, H, W) is evaluated ``chunk`` images at a time (default :func:`eval_chunk`: bounded memory at any
    image size).
    """
    chunk = chunk or eval_chunk(x)
    was = module.training
    module.eval()
    try:
        with torch.no_grad():
            hits = sum(int((torch.func.functional_call(module, params, (x[i: i + chunk],)).argmax(1)
                            == y[i: i + chunk]).sum()) for i in range(0, len(y), chunk))
    finally:
        module.train(was)
    return hits / max(len(y), 1)
