"""FedPALS experiments (Listo Zec et al. 2024): configuration, partitions, training and evaluation.

What the paper plug-in :class:`fedshift.papers.fedpals.paper.FedpalsPaper` calls (the contract's generic
rules run it, :mod:`fedshift.contract`); the algorithms live in :mod:`fedshift.algorithms` (``fedpals``,
``fedavg``, ``fedprox``, ``scaffold``).

Setting (§2, §5): M clients are drawn by a label-shift mechanism (sparsity: C labels per client;
Dirichlet(β)); clients 0..M−2 train and client M−1 is the target, whose label marginal T is known
to the server. The target's own examples form the validation set ("a validation set that reflects
the target distribution", §5), used for early-stopping selection and for choosing λ; the target's
test set is drawn from the test split with label marginal T. The Oracle (App. A.1) is FedAvg on
M−1 clients drawn like the target from the remaining training examples.

Run ids (labels, :attr:`fedshift.contract.RunSpec.run`): ``fedavg``, ``fedprox``, ``scaffold``, ``oracle``, and
one id per FedPALS λ candidate: ``fedpals~lam<λ>`` (λ given) or ``fedpals~ess<p>`` (λ found by binary search
so that ESS = p % of N), likewise ``fedprox_fedpals~...``. The candidate's value travels in the run's
resolved hyper-parameters (``variant``: ``{"lambda": λ}`` or ``{"ess_fraction": p}``), never parsed back
from the id.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from fedshift.algorithms import registry
from fedshift.algorithms.base import ClientData, FederatedAlgorithm
from fedshift.algorithms.fedavg import build_fedavg
from fedshift.algorithms.fedpals import (
    build_fedpals,
    check_marginal,
    effective_sample_size,
    fedpals_weights,
    lambda_for_ess,
    projection_distance,
)
from fedshift.algorithms.selection import with_model_selection
from fedshift.budget import apply_budget
from fedshift.config import ConfigError
from fedshift.contract import Fit
from fedshift.contract import experiments_of as _merged_experiments
from fedshift.data.prepare import load_prepared
from fedshift.data.wilds import ImageFiles, image_transform, images_dir_of
from fedshift.engine import FilePool
from fedshift.io import atomic_write, read_json
from fedshift.models import LogisticRegression, build_model, forward, init_params
from fedshift.partition import (
    dirichlet_partition,
    domain_heterogeneity_partition,
    label_marginals,
    label_removal_partition,
    largest_remainder,
    sample_label_counts,
    sample_with_marginal,
    sparsity_partition,
    split_label_counts,
)
from fedshift.training import NonFiniteLossError, run_training

__all__ = ["NUM_LABELS", "FILE_DATASETS", "WEIGHTS", "setting", "targets_of", "active_experiments", "datasets_of",
           "experiments_of", "algorithm_ids", "resolved_runs", "validate", "resolve", "make_partition",
           "make_domain_partition", "fit_run", "evaluate_run", "synthetic_job", "synthetic_spec", "accuracy_and_f1",
           "weights_file", "registered_algorithm"]

log = logging.getLogger(__name__)

#: Number of labels K of each dataset FedPALS uses.
NUM_LABELS = {"fashion_mnist": 10, "cifar10": 10, "pacs": 7, "iwildcam": 182}
#: (channels, side) of the image datasets.
IMAGE_SHAPE = {"fashion_mnist": (1, 28), "cifar10": (3, 32)}
PALS_KINDS = ("fedpals", "fedprox_fedpals")
#: algorithm kinds of this paper that are not themselves registered names (fedshift.algorithms.registry)
REGISTERED = {"oracle": "fedavg", "fedprox_fedpals": "fedpals"}
#: Datasets whose images stay files (decoded per batch, :class:`fedshift.engine.FilePool`).
FILE_DATASETS = ("pacs", "iwildcam")
#: Label-shift mechanisms of the file datasets: their own train/validation/test splits, no target client.
DOMAIN_KINDS = ("label_removal", "domain_heterogeneity")
#: Keys every experiment has once its ``defaults:`` are merged (the schema cannot require them of either alone).
REQUIRED = ("dataset", "model", "preprocess", "label_shift", "num_clients", "seeds", "train", "algorithms")
TRAIN_REQUIRED = ("rounds", "local_epochs", "batch_size", "client_lr", "eval_every")
#: Registry entry and file of the ImageNet weights of each pretrained model.
WEIGHTS = {"resnet50": ("resnet50_imagenet", "resnet50-0676ba61.pth")}


def _fmt(value: float) -> str:
    return format(value, "g").replace(".", "p").replace("+", "")


def _variants(spec: dict[str, Any]) -> dict[str, dict[str, float]]:
    """FedPALS candidates of an algorithm entry: ``{"lam600": {"lambda": 600.0}, "ess25": {"ess_fraction": 0.25}}``."""
    out: dict[str, dict[str, float]] = {}
    for lam in spec.get("lambdas", []):
        out[f"lam{_fmt(float(lam))}"] = {"lambda": float(lam)}
    for frac in spec.get("ess_fractions", []):
        out[f"ess{_fmt(round(100 * float(frac), 6))}"] = {"ess_fraction": float(frac)}
    return out


def experiments_of(section: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The section's experiments with ``defaults:`` merged in (:func:`fedshift.contract.experiments_of`).

    One rule beyond the deep merge, for ``algorithms``: an entry set to ``false`` is not trained (it removes
    an algorithm of the defaults), and the order is the experiment's own entries first, then the defaults'
    others (the order of its runs, table columns and figure series).
    """
    merged = _merged_experiments(section)
    defaults = (section.get("defaults") or {}).get("algorithms") or {}
    for name, exp in merged.items():
        own = (section["experiments"][name] or {}).get("algorithms") or {}
        algs = exp.get("algorithms") or {}
        exp["algorithms"] = {k: algs[k] for k in dict.fromkeys([*own, *defaults]) if algs[k] is not False}
    return merged


def merged_section(section: dict[str, Any]) -> dict[str, Any]:
    """``section`` with its experiments merged (:func:`experiments_of`) and no ``defaults``."""
    out = {k: v for k, v in section.items() if k != "defaults"}
    out["experiments"] = experiments_of(section)
    return out


def algorithm_ids(experiment: dict[str, Any]) -> list[str]:
    """The run ids of one (merged) experiment, in config order (the ids :func:`resolved_runs` gives)."""
    steps = _client_lr_candidates((experiment.get("train") or {}).get("select"))
    return [_run_id(kind, label, lr_label) for kind, spec in experiment["algorithms"].items()
            for label in (_variants(spec) if kind in PALS_KINDS else {"": None}) for lr_label in steps]


def _run_id(kind: str, variant_label: str, lr_label: str) -> str:
    """``kind``, then the λ candidate's and the client step's labels where there are: ``fedpals~ess50~lr0p1``."""
    return "~".join(filter(None, (kind, variant_label, lr_label)))


def setting(experiment: dict[str, Any], path: str) -> Any:
    """The value at a dotted key path of an experiment (``"label_shift.beta"``), or None if unset."""
    value: Any = experiment
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def validate(section: dict[str, Any], datasets: dict[str, Any]) -> None:
    """Cross-reference checks of the ``fedpals:`` section (after its schema).

    Raises
    ------
    ConfigError
        Naming the key path: unknown dataset; C larger than the dataset's number of labels or a
        sparsity/Dirichlet entry without C/β; ``target_coverage`` on a PACS/iWildCam split; a target that
        is not a probability vector over the dataset's labels; a FedPALS entry without λ candidates; a
        table or figure naming an unknown experiment or algorithm column; synthetic marginals that are
        not probability vectors; an experiment that lacks a required key after its ``defaults:`` merge.
    """
    section = merged_section(section)
    for name, exp in section["experiments"].items():
        base = f"fedpals.experiments.{name}"
        for key in REQUIRED:
            if key not in exp:
                raise ConfigError(f"config error at {base}.{key}: required (in the experiment or fedpals.defaults)")
        for key in TRAIN_REQUIRED:
            if key not in exp["train"]:
                raise ConfigError(f"config error at {base}.train.{key}: required (in the experiment or "
                                  "fedpals.defaults.train)")
        if not exp["algorithms"]:
            raise ConfigError(f"config error at {base}.algorithms: no algorithm left to train")
        if (exp["train"].get("select") or {}).get("client_lr"):
            for kind, entry in exp["algorithms"].items():
                if "client_lr" in ((entry or {}).get("train") or {}):
                    raise ConfigError(f"config error at {base}.algorithms.{kind}.train.client_lr: set while "
                                      f"{base}.train.select.client_lr chooses every algorithm's step on validation")
        ds = exp["dataset"]
        if ds not in datasets or ds not in NUM_LABELS:
            raise ConfigError(f"config error at {base}.dataset: {ds!r} is not a registered FedPALS dataset "
                              f"(registered: {sorted(set(datasets) & set(NUM_LABELS))})")
        k = NUM_LABELS[ds]
        shift = exp["label_shift"]
        for i, c in enumerate(exp.get("target_drop_labels") or []):  # (the dataset may come from the defaults)
            if not 0 <= c < k:
                raise ConfigError(f"config error at {base}.target_drop_labels[{i}]: class {c} is out of range: "
                                  f"{ds} has classes 0…{k - 1}")
        if (shift["kind"] in DOMAIN_KINDS) != (ds in FILE_DATASETS):
            raise ConfigError(f"config error at {base}.label_shift.kind: {shift['kind']!r} does not apply to {ds} "
                              f"({'/'.join(DOMAIN_KINDS)} are for {'/'.join(FILE_DATASETS)} only)")
        if (exp["model"] == "resnet50") != (ds in FILE_DATASETS):
            raise ConfigError(f"config error at {base}.model: resnet50 is the model of {'/'.join(FILE_DATASETS)} "
                              f"and only of them, not of {ds} with {exp['model']}")
        if exp.get("pretrained") and exp["model"] not in WEIGHTS:
            raise ConfigError(f"config error at {base}.pretrained: no ImageNet weights registered for {exp['model']}")
        if shift["kind"] == "label_removal":
            bad = [c for c in shift.get("removed_labels", []) if c >= k]
            if bad or not shift.get("removed_labels"):
                raise ConfigError(f"config error at {base}.label_shift.removed_labels: one label < {k} per client")
            if len(shift["removed_labels"]) != exp["num_clients"]:
                raise ConfigError(f"config error at {base}.label_shift.removed_labels: one label per client "
                                  f"({exp['num_clients']}), got {len(shift['removed_labels'])}")
        if shift["kind"] in DOMAIN_KINDS:
            if "target_coverage" in shift:
                raise ConfigError(f"config error at {base}.label_shift.target_coverage: applies to sparsity and "
                                  f"Dirichlet draws only ({shift['kind']} has no drawn target)")
            for key in ("validation_split", "test_split"):
                if key not in exp:
                    raise ConfigError(f"config error at {base}.{key}: required for {ds}")
        elif shift["kind"] == "sparsity":
            c = shift.get("labels_per_client")
            if c is None or c > k:
                raise ConfigError(f"config error at {base}.label_shift.labels_per_client: C = {c} must be given "
                                  f"and at most the number of labels of {ds} ({k})")
        elif "beta" not in shift:
            raise ConfigError(f"config error at {base}.label_shift.beta: Dirichlet sampling needs beta")
        if "target" in shift:
            try:
                t = check_marginal(shift["target"], "target")
            except ValueError as err:
                raise ConfigError(f"config error at {base}.label_shift.target: {err}") from None
            if t.shape != (k,):
                raise ConfigError(f"config error at {base}.label_shift.target: needs {k} entries for {ds}, "
                                  f"got {t.shape[0]}")
        for kind in PALS_KINDS:
            if kind in exp["algorithms"] and not _variants(exp["algorithms"][kind]):
                raise ConfigError(f"config error at {base}.algorithms.{kind}: give lambdas and/or ess_fractions")
        if exp["train"].get("client_optimizer", "sgd") != "sgd" and ds not in FILE_DATASETS:
            raise ConfigError(f"config error at {base}.train.client_optimizer: only file datasets "
                              f"({'/'.join(FILE_DATASETS)}) train clients with Adam")
        if exp["model"] == "cnn2" and ds not in IMAGE_SHAPE:
            raise ConfigError(f"config error at {base}.model: cnn2 needs 28×28 or 32×32 images, not {ds}")
    for name, table in section["tables"].items():
        for i, row in enumerate(table["rows"]):
            if row["experiment"] not in section["experiments"]:
                raise ConfigError(f"config error at fedpals.tables.{name}.rows[{i}].experiment: unknown "
                                  f"experiment {row['experiment']!r}")
            exp = section["experiments"][row["experiment"]]
            if table.get("layout") == "algorithms":
                if row.get("algorithm") not in algorithm_ids(exp):
                    raise ConfigError(f"config error at fedpals.tables.{name}.rows[{i}].algorithm: "
                                      f"{row.get('algorithm')!r} is not trained by {row['experiment']} "
                                      f"(algorithm ids {algorithm_ids(exp)})")
                continue
            if "columns" not in table:
                raise ConfigError(f"config error at fedpals.tables.{name}.columns: required for layout methods")
            for col in table["columns"]:
                if col not in exp["algorithms"]:
                    raise ConfigError(f"config error at fedpals.tables.{name}.columns: {col!r} is not trained by "
                                      f"{row['experiment']} (algorithms {list(exp['algorithms'])})")
    unknown = [t for t in section.get("outputs", []) if t not in section["tables"] and t not in section["figures"]]
    if unknown:
        raise ConfigError(f"config error at fedpals.outputs: {unknown} name no table or figure")
    for name, fig in section["figures"].items():
        if fig["kind"] == "synthetic" and "synthetic" not in section:
            raise ConfigError(f"config error at fedpals.figures.{name}: needs the fedpals.synthetic section")
        for e in fig.get("experiments", []):
            if e not in section["experiments"]:
                raise ConfigError(f"config error at fedpals.figures.{name}.experiments: unknown experiment {e!r}")
        if fig["kind"] != "synthetic" and not fig.get("experiments"):
            raise ConfigError(f"config error at fedpals.figures.{name}.experiments: required for {fig['kind']}")
        if fig["kind"] == "weights":
            e = fig["experiments"][0]
            if len(fig["experiments"]) != 1 or "fedpals" not in section["experiments"][e]["algorithms"]:
                raise ConfigError(f"config error at fedpals.figures.{name}.experiments: weights needs exactly one "
                                  "experiment that trains fedpals")
        if fig["kind"] == "sweep":
            x = fig.get("x")
            missing = [e for e in fig["experiments"] if x is None or setting(section["experiments"][e], x) is None]
            if missing:
                raise ConfigError(f"config error at fedpals.figures.{name}.x: {x!r} must be set in every "
                                  f"experiment of the figure (missing in {missing})")
            if fig.get("marginals_of") not in (None, *section["experiments"]):
                raise ConfigError(f"config error at fedpals.figures.{name}.marginals_of: unknown experiment "
                                  f"{fig['marginals_of']!r}")
    syn = section.get("synthetic")
    if syn is not None:
        try:
            check_marginal(syn["client_marginals"], "synthetic.client_marginals")
            check_marginal(syn["target_start"], "synthetic.target_start")
            check_marginal(syn["target_end"], "synthetic.target_end")
        except ValueError as err:
            raise ConfigError(f"config error at fedpals.synthetic: {err}") from None
        if len(syn["client_sizes"]) != len(syn["client_marginals"]):
            raise ConfigError("config error at fedpals.synthetic.client_sizes: one size per client marginal")


def targets_of(section: dict[str, Any]) -> list[str]:
    """The tables and figures that ``rule all`` builds: ``outputs`` if given, else all of them."""
    return list(section.get("outputs", [*section["tables"], *section["figures"]]))


def active_experiments(section: dict[str, Any]) -> list[str]:
    """Experiments that the active outputs (:func:`targets_of`) read, in config order."""
    used = set()
    for name in targets_of(section):
        if name in section["tables"]:
            used |= {r["experiment"] for r in section["tables"][name]["rows"]}
        else:
            used |= set(section["figures"][name].get("experiments", []))
    return [e for e in section["experiments"] if e in used]


def datasets_of(section: dict[str, Any]) -> list[str]:
    """Datasets the active targets need (downloaded, and checked in the mirror).

    Includes the registry entries of the ImageNet weights of pretrained models.
    """
    out = set()
    section = merged_section(section)
    for e in active_experiments(section):
        exp = section["experiments"][e]
        out.add(exp["dataset"])
        if exp.get("pretrained") and exp["model"] in WEIGHTS:
            out.add(WEIGHTS[exp["model"]][0])
    return sorted(out)


def weights_file(experiment: dict[str, Any]) -> str | None:
    """Path of the verified ImageNet weights an experiment's model starts from (None: from scratch)."""
    if not experiment.get("pretrained"):
        return None
    entry, name = WEIGHTS[experiment["model"]]
    return f"data/raw/{entry}/{name}"


def resolved_runs(section: dict[str, Any], experiment: str, budget: dict[str, Any] | None = None
                  ) -> dict[str, dict[str, Any]]:
    """Every run of one experiment: run id → its complete, JSON-ready hyper-parameters (``RunSpec.hparams``).

    The run id is a label made here from the algorithm entry (``fedpals~ess25``); the λ candidate itself is the
    hparams' ``variant`` (``{"lambda": λ}`` or ``{"ess_fraction": p}``), which :func:`_build` hands to the QP.
    ``budget`` (the configuration's top-level ``budget``, e.g. the rehearsal's ``{max_rounds: 2}``) caps
    ``train.rounds`` and its periods (:func:`fedshift.budget.apply_budget`); None leaves them as configured.

    Raises
    ------
    ConfigError
        For an unknown experiment.
    """
    experiments = experiments_of(section)
    if experiment not in experiments:
        raise ConfigError(f"unknown FedPALS experiment {experiment!r}")
    exp = experiments[experiment]
    keys = ("dataset", "model", "preprocess", "label_shift", "num_clients", "samples_per_label", "validation_size",
            "test_size", "pretrained", "image_size", "num_workers", "eval_batch_size", "select_metric",
            "validation_split", "test_split", "target_drop_labels")
    out = {}
    for kind, entry in exp["algorithms"].items():
        spec = dict(entry)
        train = {"server_lr": 1.0, "clients_per_round": None, "checkpoint_every": 0, **exp["train"],
                 **spec.pop("train", {})}
        spec.pop("lambdas", None)
        spec.pop("ess_fractions", None)
        train.setdefault("client_optimizer", "sgd")
        train = apply_budget(train, budget)
        steps = _client_lr_candidates(train.pop("select", None))
        variants = _variants(entry) if kind in PALS_KINDS else {"": None}
        for label, variant in variants.items():
            for lr_label, lr in steps.items():
                run_id = _run_id(kind, label, lr_label)
                run_train = {**train, "client_lr": lr} if lr_label else dict(train)
                out[run_id] = {"experiment": experiment, "algorithm": run_id, "kind": kind, "variant": variant,
                               **{k: exp.get(k) for k in keys}, "train": run_train, "options": dict(spec)}
    return out


def _client_lr_candidates(select: dict[str, Any] | None) -> dict[str, float | None]:
    """Run-id labels of ``train.select.client_lr``: ``{"lr0p05": 0.05, ...}``, or ``{"": None}`` without a grid.

    Each candidate is a run of its own; :func:`fedshift.papers.fedpals.report.select_per_seed` keeps, per
    (experiment, algorithm kind, seed), the run with the best target-like validation score, jointly over λ and
    the client step (issue 18: "the client step size chosen on the validation set for every method"; the paper
    tunes on validation and gives no step for Fashion-MNIST/CIFAR-10).
    """
    grid = (select or {}).get("client_lr") or []
    return {f"lr{_fmt(float(v))}": float(v) for v in grid} or {"": None}


def resolve(section: dict[str, Any], experiment: str, algorithm_id: str,
            budget: dict[str, Any] | None = None) -> dict[str, Any]:
    """The hyper-parameters of one run, looked up by its id in :func:`resolved_runs` (never parsed from it).

    Raises
    ------
    ConfigError
        For an unknown experiment or run id.
    """
    runs = resolved_runs(section, experiment, budget)
    if algorithm_id not in runs:
        raise ConfigError(f"no algorithm {algorithm_id!r}; known: {list(runs)}")
    return runs[algorithm_id]


# ---------------------------------------------------------------------------------------------
# Partition


#: Redraws of the label-shift draw allowed before ``target_coverage: covered`` gives up.
MAX_TARGET_REDRAWS = 1000
#: Stream of the redraws: redraw r ≥ 1 draws the clients from ``default_rng([seed, 2, r])``.
_REDRAW_STREAM = 2


def make_partition(experiment: dict[str, Any], y_train: np.ndarray, y_test: np.ndarray, seed: int) -> dict[str, Any]:
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
        :func:`_oracle_clients`; empty unless the experiment trains ``oracle``), ``marginals`` S (M−1 × K),
        ``target`` T, ``sizes``, ``label_sets`` (sparsity), ``projection_distance`` d(T, S),
        ``target_coverage`` and ``target_redraws`` (the number of redraws).

    Raises
    ------
    ValueError
        C > K, a client left empty, a target that cannot be drawn from the test split, or no covering
        draw within :data:`MAX_TARGET_REDRAWS` redraws.
    """
    k = NUM_LABELS[experiment["dataset"]]
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
    oracle = (_oracle_clients(y_train, t, m - 1, int(sizes.min()), validation, rng)
              if "oracle" in experiment["algorithms"] else [])
    return {
        "dataset": experiment["dataset"], "seed": seed, "num_labels": k,
        "clients": [c.tolist() for c in clients], "validation": validation.tolist(), "test": test.tolist(),
        "oracle": [o.tolist() for o in oracle], "marginals": s.tolist(), "target": t.tolist(),
        "sizes": sizes.tolist(), "label_sets": label_sets, "projection_distance": projection_distance(t, s),
        "target_coverage": coverage, "target_redraws": redraws,
    }


def _oracle_clients(y_train: np.ndarray, t: np.ndarray, count: int, cap: int, reserved: np.ndarray,
                    rng: np.random.Generator) -> list[np.ndarray]:
    """The Oracle's federation (App. A.1): ``count`` disjoint clients drawn like T.

    App. A.1: "the client data is drawn directly from the same distribution as the target". The
    clients are drawn jointly, from the training examples outside ``reserved``: each holds n =
    min(``cap``, ⌊F / ``count``⌋) examples, F = min over T's support of (free examples of label k) / T_k
    (the largest federation with marginal T that the free examples allow); the federation's
    per-label totals are T · ``count`` · n rounded by largest remainder (never more than the free
    examples of the label, since ``count`` · n · T_k <= free_k) and each label's total is split over
    the clients as evenly as possible (:func:`fedshift.partition.split_label_counts`), so every
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
        oracle = [o.tolist() for o in _oracle_clients(y_train, t, len(clients), int(sizes.min()),
                                                      np.zeros(0, dtype=np.int64), rng)]
    return {
        "dataset": experiment["dataset"], "seed": seed, "num_labels": k,
        "clients": [c.tolist() for c in clients], "validation": validation.tolist(), "test": test.tolist(),
        "validation_split": experiment["validation_split"], "test_split": experiment["test_split"],
        "oracle": oracle, "marginals": s.tolist(), "target": t.tolist(), "sizes": sizes.tolist(),
        "label_sets": None, "projection_distance": projection_distance(t, s),
    }


# ---------------------------------------------------------------------------------------------
# Training and evaluation


def _images(prepared: dict[str, Any], split: str, idx: list[int], pre: dict[str, Any], device: torch.device
            ) -> tuple[torch.Tensor, torch.Tensor]:
    index = torch.as_tensor(idx, dtype=torch.int64)
    x = prepared[f"x_{split}"][index]
    if x.dim() == 4 and x.shape[-1] in (1, 3):  # (n, H, W, C) images → (n, C, H, W), the models' layout
        x = x.permute(0, 3, 1, 2)
    x = x.to(torch.float32).flatten(1) / float(pre.get("scale", 1.0))
    x = (x - float(pre.get("mean", 0.0))) / float(pre.get("std", 1.0))
    return x.to(device).contiguous(), prepared[f"y_{split}"][index].to(torch.int64).to(device)


def _job_data(resolved: dict[str, Any], part: dict[str, Any], prepared_path: str | Path, dev: torch.device,
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
                        num_workers=_num_workers(resolved))
        return pool, sets, 0
    pre = resolved["preprocess"] or {}
    sets = {name: _images(prepared, split, part[name], pre, dev) for name, split in splits.items()}
    clients = ([ClientData(i, *_images(prepared, "train", idx, pre, dev), 0) for i, idx in enumerate(client_lists)]
               if with_clients else None)
    return clients, sets, sets["test"][0].shape[1]


def _num_workers(resolved: dict[str, Any]) -> int:
    """DataLoader worker processes for image files (``num_workers``; unset or null: 0, decode in the job)."""
    return resolved.get("num_workers") or 0


def _model(resolved: dict[str, Any], input_dim: int, weights_path: str | Path | None = None) -> torch.nn.Module:
    k = NUM_LABELS[resolved["dataset"]]
    if resolved["model"] == "resnet50":
        if resolved.get("pretrained") and weights_path is None:
            raise ValueError(f"{resolved['experiment']}: a pretrained resnet50 needs its weights file")
        return build_model("resnet50", num_classes=k, weights_path=str(weights_path) if weights_path else None)
    if resolved["model"] == "cnn2":
        c, side = IMAGE_SHAPE[resolved["dataset"]]
        return build_model("cnn2", num_classes=k, in_channels=c, image_size=side)
    return build_model("logreg", input_dim=input_dim, num_classes=k)


def _classification_metrics(yt: np.ndarray, yp: np.ndarray, loss_sum: float, num_labels: int) -> dict[str, float]:
    conf = np.zeros((num_labels, num_labels), dtype=np.int64)
    np.add.at(conf, (yt, yp), 1)
    tp = np.diag(conf).astype(np.float64)
    prec_den, rec_den = conf.sum(0), conf.sum(1)
    present = (rec_den > 0) | (prec_den > 0)
    f1 = np.where(prec_den + rec_den > 0, 2 * tp / np.maximum(prec_den + rec_den, 1), 0.0)
    return {"accuracy": float((yp == yt).mean()), "macro_f1": float(f1[present].mean()), "loss": loss_sum / len(yt)}


@torch.no_grad()
def accuracy_and_f1(module: torch.nn.Module, params: dict[str, torch.Tensor], x: torch.Tensor | ImageFiles,
                    y: torch.Tensor | None, num_labels: int, batch_size: int = 4096,
                    device: torch.device | None = None, num_workers: int = 0) -> dict[str, float]:
    """Accuracy, macro-F1 and mean cross-entropy of a model on one labelled set.

    Macro-F1 averages the per-class F1 over the classes present in ``y`` or predicted (WILDS's
    ``F1-macro_all`` for iWildCam averages over all classes present in the labels; a class never
    present and never predicted is left out).

    Parameters
    ----------
    x : Tensor (n, ...) or ImageFiles
        Inputs; or image files, decoded in batches of ``batch_size`` by ``num_workers`` DataLoader
        worker processes, as in training (then ``y`` is ignored and the batches go to ``device``; the
        module is evaluated in eval mode).
    y : Tensor (n,) or None

    Returns
    -------
    dict
        ``accuracy`` and ``macro_f1`` in [0, 1]; ``loss`` in nats.
    """
    preds, labels, loss = [], [], 0.0
    if isinstance(x, ImageFiles):
        was = module.training
        module.eval()
        # Predictions, labels and the loss (float64, the same sums as Python floats) stay on the device until the
        # set is done: no batch waits for the device to report.
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        try:
            loader = torch.utils.data.DataLoader(x, batch_size=batch_size, num_workers=num_workers,
                                                 pin_memory=device is not None and torch.device(device).type == "cuda")
            for xb, yb in loader:
                xb, yb = xb.to(device, non_blocking=True), yb.to(device, non_blocking=True)
                logits = forward(module, params, xb)
                preds.append(logits.argmax(1))
                labels.append(yb)
                loss_sum += F.cross_entropy(logits.double(), yb, reduction="sum")
        finally:
            module.train(was)
        yt, yp = torch.cat(labels).cpu().numpy(), torch.cat(preds).cpu().numpy()
        return _classification_metrics(yt, yp, float(loss_sum), num_labels)
    for i in range(0, y.shape[0], batch_size):
        logits = forward(module, params, x[i : i + batch_size])
        preds.append(logits.argmax(1))
        loss += float(F.cross_entropy(logits.double(), y[i : i + batch_size], reduction="sum"))
    return _classification_metrics(y.cpu().numpy(), torch.cat(preds).cpu().numpy(), loss, num_labels)


def _build(resolved: dict[str, Any], module: torch.nn.Module, partition: dict[str, Any],
           num_clients: int) -> tuple[FederatedAlgorithm, dict[str, Any]]:
    kind, variant = resolved["kind"], resolved["variant"]
    tr, opt = resolved["train"], resolved["options"]
    common = {"clients_per_round": tr["clients_per_round"] or num_clients, "local_epochs": tr["local_epochs"],
              "batch_size": tr["batch_size"], "client_lr": tr["client_lr"]}
    info: dict[str, Any] = {}
    if kind not in PALS_KINDS:  # the registered algorithm, with the options it declares
        spec = registry.get(registered_algorithm(kind))
        offered = {"num_clients": num_clients, "name": kind, "mu": 0.0}  # FedProx without mu: μ = 0, as before
        hp = {**{k: v for k, v in offered.items() if k in spec.hparams}, **opt}
        return spec.build(module, server_lr=tr["server_lr"], **common, **hp), info
    t, s, n = partition["target"], partition["marginals"], partition["sizes"]
    lam = variant["lambda"] if "lambda" in variant else lambda_for_ess(t, s, n, variant["ess_fraction"])
    alpha = fedpals_weights(t, s, n, lam)
    info = {"lambda": lam if math.isfinite(lam) else "inf", "alpha_all_clients": alpha.tolist(),
            "ess": effective_sample_size(alpha, n), "ess_fraction": effective_sample_size(alpha, n) / float(sum(n))}
    prox = opt.get("mu", 0.0) if kind == "fedprox_fedpals" else 0.0
    return build_fedpals(module, target=t, marginals=s, lam=lam, prox_mu=prox, prox_squared=opt.get("squared", True),
                         server_lr=tr["server_lr"], **common), info


def registered_algorithm(kind: str) -> str:
    """The registered algorithm (:mod:`fedshift.algorithms.registry`) that trains a run of this ``kind``."""
    return REGISTERED.get(kind, kind)


def fit_run(resolved: dict[str, Any], seed: int, *, prepared_path: str | Path, partition_path: str | Path,
            device: torch.device, checkpoint_path: str | Path | None, fingerprint: str,
            weights_path: str | Path | None = None) -> Fit:
    """Train one (experiment, run id, seed) FedPALS-paper run with validation-based selection.

    The job skeleton (:func:`fedshift.jobs.train_job`) sets threads and device, computes ``fingerprint`` and
    writes the returned :class:`~fedshift.contract.Fit` (``model.pt`` = the selected parameters).

    Parameters
    ----------
    resolved : dict
        The run's hyper-parameters (:func:`resolved_runs`, ``RunSpec.hparams``).
    seed : int
        Seed of initialisation and every round's batches and sampling (the partition was drawn with
        the same seed by the partition job).
    prepared_path, partition_path : path
        The prepared dataset and :func:`make_partition`'s JSON.
    device : torch.device
    checkpoint_path : path, optional
        Resume point (taken only when its fingerprint matches).
    fingerprint : str
        The job's checkpoint identity (:func:`fedshift.jobs.input_fingerprint`).
    weights_path : path, optional
        ImageNet weights of a pretrained model (:func:`weights_file`).

    Returns
    -------
    Fit
        The selected parameters (best target-validation ``select_metric``, accuracy or macro-F1, checked every
        ``eval_every`` rounds), the per-check history (round, mean local loss,
        ``eval/validation_<select_metric>`` and the target test metrics ``eval/test_*``), and the ``run.json``
        fields: the selected round and score, α, λ and ESS for FedPALS. A run whose loss becomes NaN or infinite
        (:class:`~fedshift.training.NonFiniteLossError`, e.g. SCAFFOLD at the grid's larger client step) is
        recorded as diverged: an empty model, ``run.json`` ``diverged`` true with the error, a one-row history
        with a NaN score, ``Fit.result`` None; :func:`evaluate_run` and
        :func:`fedshift.papers.fedpals.report.select_per_seed` then rank it below every finite candidate.
    """
    dev = device
    part = read_json(partition_path)
    clients, sets, input_dim = _job_data(resolved, part, prepared_path, dev)
    module = _model(resolved, input_dim, weights_path).to(dev)
    k = part["num_labels"]
    num_clients = clients.num_clients if isinstance(clients, FilePool) else len(clients)
    algorithm, info = _build(resolved, module, part, num_clients)
    tr = resolved["train"]
    select = resolved.get("select_metric") or "accuracy"
    ebs = resolved.get("eval_batch_size") or 4096

    def metrics(p: dict[str, torch.Tensor], name: str) -> dict[str, float]:
        return accuracy_and_f1(module, p, *sets[name], k, batch_size=ebs, device=dev,
                               num_workers=_num_workers(resolved))

    algorithm = with_model_selection(
        algorithm, every=tr["eval_every"], rounds=tr["rounds"],
        score=lambda p: metrics(p, "validation")[select],
        monitor=lambda p: {f"test_{m}": v for m, v in metrics(p, "test").items()},
    )
    params0 = init_params(module, seed, device=dev)
    ckpt_every = tr["checkpoint_every"] - tr["checkpoint_every"] % tr["eval_every"]
    run = {"experiment": resolved["experiment"], "algorithm": resolved["algorithm"], "seed": seed,
           "resolved": resolved, "selection_metric": select, "num_clients": num_clients,
           "client_sizes": (clients.sizes().tolist() if isinstance(clients, FilePool)
                            else [c.num_examples for c in clients]),
           "projection_distance": part["projection_distance"], **info, "rounds": tr["rounds"],
           **{key: part[key] for key in ("target_coverage", "target_redraws") if key in part}}
    try:
        result = run_training(algorithm, params0, clients, rounds=tr["rounds"], seed=seed,
                              checkpoint_path=checkpoint_path, checkpoint_every=ckpt_every,
                              log_every=tr["eval_every"], fingerprint=fingerprint)
    except NonFiniteLossError as err:  # one grid value of a validation choice diverged: recorded, not a failure
        log.warning("%s / %s / seed %d diverged: %s (the job records it; fedshift.jobs logs what it writes)",
                    resolved["experiment"], resolved["algorithm"], seed, err)
        hist = pd.DataFrame([{"round": tr["rounds"], f"eval/validation_{select}": float("nan"), "diverged": True}])
        return Fit({}, hist, {**run, "selected_round": None, "selected_validation_score": None, "diverged": True,
                              "diverged_error": str(err)}, None)
    state = result.state
    hist = pd.DataFrame(result.history).rename(columns={"eval/score": f"eval/validation_{select}"})
    run |= {"selected_round": state.best_round, "selected_validation_score": state.best_score}
    return Fit(state.best_params, hist, run, result)


def evaluate_run(resolved: dict[str, Any], seed: int, *, prepared_path: str | Path, partition_path: str | Path,
                 model_path: str | Path, run_json_path: str | Path, device: torch.device,
                 weights_path: str | Path | None = None) -> pd.DataFrame:
    """Target metrics of a trained (selected) model: the tidy rows of its ``metrics.csv``.

    Rows ``experiment, algorithm, kind, seed, split, metric, value`` for split ∈ {validation, test}
    and metric ∈ {accuracy, macro_f1, loss}, plus split ``run`` rows with the projection distance,
    λ, ESS fraction and the selected round (the job skeleton adds the ``paper`` and ``run`` columns). A diverged
    run (``run.json`` ``diverged``) has NaN metrics, no model read, and a ``run`` row ``diverged`` = 1.
    """
    dev = device
    run = read_json(run_json_path)
    rows = []
    if run.get("diverged"):  # no model to evaluate: NaN metrics and a `diverged` flag (select_per_seed ranks it last)
        rows = [{"split": split, "metric": metric, "value": float("nan")} for split in ("validation", "test")
                for metric in ("accuracy", "macro_f1", "loss")]
        rows.append({"split": "run", "metric": "diverged", "value": 1.0})
    else:
        part = read_json(partition_path)
        _, sets, input_dim = _job_data(resolved, part, prepared_path, dev, with_clients=False)
        params = torch.load(model_path, map_location=dev, weights_only=True)
        module = _model(resolved, input_dim, weights_path).to(dev)  # (frozen BN statistics come from the weights)
        ebs = resolved.get("eval_batch_size") or 4096
        for split in ("validation", "test"):
            for metric, value in accuracy_and_f1(module, params, *sets[split], part["num_labels"], batch_size=ebs,
                                                 device=dev, num_workers=_num_workers(resolved)).items():
                rows.append({"split": split, "metric": metric, "value": value})
    for key in ("projection_distance", "ess_fraction", "selected_round"):
        if run.get(key) is not None:
            rows.append({"split": "run", "metric": key, "value": float(run[key])})
    if "lambda" in run:
        rows.append({"split": "run", "metric": "lambda", "value": float(run["lambda"])})
    df = pd.DataFrame(rows)
    df.insert(0, "seed", seed)
    df.insert(0, "kind", resolved["kind"])
    df.insert(0, "algorithm", resolved["algorithm"])
    df.insert(0, "experiment", resolved["experiment"])
    return df


# ---------------------------------------------------------------------------------------------
# Synthetic task (§5.2, App. A.2)


def _gaussian_sample(means: np.ndarray, counts: np.ndarray, rng: np.random.Generator
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    xs, ys = [], []
    for k, c in enumerate(counts):
        xs.append(rng.normal(means[k], 1.0, size=(int(c), means.shape[1])))
        ys.append(np.full(int(c), k))
    return (torch.as_tensor(np.concatenate(xs), dtype=torch.float64),
            torch.as_tensor(np.concatenate(ys), dtype=torch.int64))


def synthetic_spec(section: dict[str, Any], budget: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The ``fedpals.synthetic`` section as its jobs' ``params``, ``train.rounds`` capped by ``budget``.

    Returns None when the section has no ``synthetic`` part; ``budget`` as in :func:`resolve`
    (:func:`fedshift.budget.apply_budget`).
    """
    spec = section.get("synthetic")
    if spec is None:
        return None
    return {**spec, "train": apply_budget(spec["train"], budget)}


def synthetic_job(spec: dict[str, Any], seed: int, metrics_path: str | Path) -> pd.DataFrame:
    """One run of the synthetic label-shift task for every δ: FedPALS vs FedAvg.

    Clients hold n_i points with label marginal S_i from p(x | y) = N(μ_y, I); the target label
    marginal is T_δ = (1 − δ)·``target_start`` + δ·``target_end``. FedAvg trains once; FedPALS
    trains once per (δ, λ candidate) with weights α^λ(T_δ), and for each δ the λ and round with the
    best accuracy on a validation sample drawn like T_δ are kept (as the paper tunes λ on a
    target-like validation set). Logistic regression in float64, full participation.

    Parameters
    ----------
    spec : dict
        The ``fedpals.synthetic`` section.
    seed : int
        Seed of the data, initialisation and batches of this run.
    metrics_path : path
        Output CSV: ``seed, delta, projection_distance, algorithm, lambda, ess_fraction, accuracy``.

    Returns
    -------
    DataFrame
        The rows written.
    """
    rng = np.random.default_rng([seed, 7])
    means = np.asarray(spec["means"], dtype=np.float64)
    s = check_marginal(spec["client_marginals"], "client marginals")
    sizes = np.asarray(spec["client_sizes"])
    k = means.shape[0]
    clients = []
    for i, (marg, n) in enumerate(zip(s, sizes, strict=True)):
        x, y = _gaussian_sample(means, largest_remainder(marg, int(n)), rng)
        clients.append(ClientData(i, x, y, 0))
    module = LogisticRegression(means.shape[1], k).to(torch.float64)
    tr = spec["train"]
    common = {"clients_per_round": len(clients), "local_epochs": tr["local_epochs"], "batch_size": tr["batch_size"],
              "client_lr": tr["client_lr"]}
    params0 = init_params(module, seed, dtype=torch.float64)
    rows = []

    def fit(algorithm: FederatedAlgorithm, x_val: torch.Tensor, y_val: torch.Tensor) -> tuple[dict, float]:
        sel = with_model_selection(algorithm, every=tr["eval_every"], rounds=tr["rounds"],
                                   score=lambda p: accuracy_and_f1(module, p, x_val, y_val, k)["accuracy"])
        res = run_training(sel, params0, clients, rounds=tr["rounds"], seed=seed, log_every=tr["eval_every"])
        return res.state.best_params, res.state.best_score

    t0, t1 = np.asarray(spec["target_start"], float), np.asarray(spec["target_end"], float)
    for delta in spec["deltas"]:
        t = (1 - delta) * t0 + delta * t1
        x_val, y_val = _gaussian_sample(means, largest_remainder(t, spec["validation_size"]), rng)
        x_test, y_test = _gaussian_sample(means, largest_remainder(t, spec["test_size"]), rng)
        d = projection_distance(t, s)
        fedavg_params, _ = fit(build_fedavg(module, **common), x_val, y_val)
        acc = accuracy_and_f1(module, fedavg_params, x_test, y_test, k)["accuracy"]
        rows.append({"delta": delta, "projection_distance": d, "algorithm": "fedavg", "lambda": math.inf,
                     "ess_fraction": 1.0, "accuracy": acc})
        best = None
        lams = [float(v) for v in spec["lambdas"]] + [lambda_for_ess(t, s, sizes, f) for f in spec["ess_fractions"]]
        for lam in lams:
            params, val = fit(build_fedpals(module, target=t, marginals=s, lam=lam, **common), x_val, y_val)
            if best is None or val > best[0]:
                best = (val, lam, params)
        _, lam, params = best
        alpha = fedpals_weights(t, s, sizes, lam)
        rows.append({"delta": delta, "projection_distance": d, "algorithm": "fedpals", "lambda": lam,
                     "ess_fraction": effective_sample_size(alpha, sizes) / sizes.sum(),
                     "accuracy": accuracy_and_f1(module, params, x_test, y_test, k)["accuracy"]})
    df = pd.DataFrame(rows)
    df.insert(0, "seed", seed)
    with atomic_write(metrics_path) as fh:
        df.to_csv(fh, index=False)
    return df
