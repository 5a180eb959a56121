"""FedPALS configuration: experiments (``defaults`` merged), their checks, and each run's resolved hyper-parameters.

Run ids (labels, :attr:`fedshift.contract.RunSpec.run`): ``fedavg``, ``fedprox``, ``scaffold``, ``oracle``, and
one id per FedPALS λ candidate: ``fedpals~lam<λ>`` (λ given) or ``fedpals~ess<p>`` (λ found by binary search
so that ESS = p % of N), likewise ``fedprox_fedpals~...``. The candidate's value travels in the run's
resolved hyper-parameters (``variant``: ``{"lambda": λ}`` or ``{"ess_fraction": p}``), never parsed back
from the id. Part of :mod:`fedshift.papers.fedpals` (Listo Zec et al. 2024).
"""

from __future__ import annotations

import logging
from typing import Any

from fedshift.budget import apply_budget
from fedshift.errors import ConfigError
from fedshift.contract import experiments_of as _merged_experiments
from fedshift.core.simplex import check_marginal
from fedshift.data.registry import num_classes

__all__ = ["NUM_LABELS", "FILE_DATASETS", "WEIGHTS", "experiments_of", "merged_section", "algorithm_ids", "setting",
           "check_section", "enabled_outputs", "active_experiments", "weights_file", "resolved_runs", "resolve_run",
           "registered_algorithm", "synthetic_spec"]

log = logging.getLogger(__name__)


#: Number of labels K of each dataset FedPALS uses.
NUM_LABELS = {name: num_classes(name) for name in ("fashion_mnist", "cifar10", "pacs", "iwildcam")}
#: (channels, side) of the image datasets.
IMAGE_SHAPE = {"fashion_mnist": (1, 28), "cifar10": (3, 32)}
PALS_KINDS = ("fedpals", "fedprox_fedpals")
#: algorithm kinds of this paper that are not themselves registered names (fedshift.algorithms.registry)
REGISTERED = {"oracle": "fedavg", "fedprox_fedpals": "fedpals"}
#: Datasets whose images stay files (decoded per batch, :class:`fedshift.core.engine.FilePool`).
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


# Over 80 lines: one check per key path in the section's order, each raising with its own path.
def check_section(section: dict[str, Any], datasets: dict[str, Any]) -> None:
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


def enabled_outputs(section: dict[str, Any]) -> list[str]:
    """The tables and figures that ``rule all`` builds: ``outputs`` if given, else all of them."""
    return list(section.get("outputs", [*section["tables"], *section["figures"]]))


def active_experiments(section: dict[str, Any]) -> list[str]:
    """Experiments that the active outputs (:func:`enabled_outputs`) read, in config order."""
    used = set()
    for name in enabled_outputs(section):
        if name in section["tables"]:
            used |= {r["experiment"] for r in section["tables"][name]["rows"]}
        else:
            used |= set(section["figures"][name].get("experiments", []))
    return [e for e in section["experiments"] if e in used]



def weights_file(experiment: dict[str, Any]) -> str | None:
    """Path of the verified ImageNet weights an experiment's model starts from (None: from scratch)."""
    if not experiment.get("pretrained"):
        return None
    entry, name = WEIGHTS[experiment["model"]]
    return f"data/raw/{entry}/{name}"


def resolved_runs(section: dict[str, Any], experiment: str, budget: dict[str, Any] | None = None,
                  experiments: dict[str, dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
    """Every run of one experiment: run id → its complete, JSON-ready hyper-parameters (``RunSpec.hparams``).

    The run id is a label made here from the algorithm entry (``fedpals~ess25``); the λ candidate itself is the
    hparams' ``variant`` (``{"lambda": λ}`` or ``{"ess_fraction": p}``), which
    :func:`fedshift.papers.fedpals.fit.build_run_algorithm` hands to the QP.
    ``budget`` (the configuration's top-level ``budget``, e.g. the rehearsal's ``{max_rounds: 2}``) caps
    ``train.rounds`` and its periods (:func:`fedshift.budget.apply_budget`); None leaves them as configured.
    ``experiments``: the section's :func:`experiments_of`, when the caller has it (merged once for every
    experiment's runs, not once per experiment); read, not edited.

    Raises
    ------
    ConfigError
        For an unknown experiment.
    """
    experiments = experiments_of(section) if experiments is None else experiments
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
    the client step (the same tuning for every method, so no method gains by a step chosen for it; the paper
    tunes on validation and gives no step for Fashion-MNIST/CIFAR-10).
    """
    grid = (select or {}).get("client_lr") or []
    return {f"lr{_fmt(float(v))}": float(v) for v in grid} or {"": None}


def resolve_run(section: dict[str, Any], experiment: str, algorithm_id: str,
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


def registered_algorithm(kind: str) -> str:
    """The registered algorithm (:mod:`fedshift.algorithms.registry`) that trains a run of this ``kind``."""
    return REGISTERED.get(kind, kind)


def synthetic_spec(section: dict[str, Any], budget: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The ``fedpals.synthetic`` section as its jobs' ``params``, ``train.rounds`` capped by ``budget``.

    Returns None when the section has no ``synthetic`` part; ``budget`` as in :func:`resolve_run`
    (:func:`fedshift.budget.apply_budget`).
    """
    spec = section.get("synthetic")
    if spec is None:
        return None
    return {**spec, "train": apply_budget(spec["train"], budget)}
