"""One validation of the whole merged configuration, before any job: every error names its key path.

:func:`validate_workflow_config` runs, in order,

1. value checks over every key at any depth (:func:`check_values`): numbers are finite (YAML's ``.nan`` /
   ``.inf`` are refused), mapping keys are plain names (letters, digits, ``_``; free-text labels only under
   ``reference:``), domain names cannot leave a folder (no ``.``, backslash, leading ``/`` or empty part), probability
   vectors lie on the simplex, class/label lists hold no duplicate and no class the dataset does not have;
2. the JSON schemas, made strict (:func:`strict_schema`: an object schema that lists its ``properties`` refuses
   any other key, at any depth, unless it says otherwise);
3. each paper section's own cross-reference checks (unknown experiments, datasets, outputs, ...), the dataset
   registry check of every section, the rehearsal's stand-ins (:func:`fedshift.config.check_standin`: only at
   ``scale: rehearsal``, for registry datasets with a generator), and that every algorithm named in the config is
   registered (:mod:`fedshift.algorithms.registry`).

Issue 39 added, still before any job: upper bounds by key name (:data:`UPPER_BOUNDS`, each with its reason) and
non-negative step sizes (:data:`STEP_KEYS`) at any depth; paper sections validated with ``defaults`` merged into
their experiments (:func:`merged_view`: partial overrides accepted); errors inside conditional and ``oneOf``
schemas reported at the offending key (:func:`_best_error`); optimiser keyword dictionaries checked against the
optimiser (:func:`check_optimizer_kwargs`); every grid/fixed entry typed by a schema generated from the registry,
``**kwargs`` factories included (:func:`hparam_schema`, :func:`check_algorithm_entries`); participants per round ≤
clients and a registered matrix baseline (:func:`check_participation`); the ``claims:`` section typed, with paper
keys that exist and tables under ``results/tables/`` (:func:`check_claims`); plain-http unpinned downloads refused
without ``allow_http`` (:func:`check_http_sources`); traversal in ``mirror_dir`` refused. Config files are
pre-parsed so a YAML error names its file (:func:`check_yaml_file`; ``python -m fedshift.validation FILE``), and
the workflow's ``onerror`` names jobs killed by SIGKILL or for memory with their ``mem_mb``
(:func:`explain_killed_jobs`).

The workflow calls it once in ``workflow/rules/common.smk``; the tests call it directly. Jobs never import this
module, so editing it reruns nothing (:mod:`fedshift.codehash`).
"""

from __future__ import annotations

import copy
import functools
import importlib
import inspect
import math
import re
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import jsonschema

from fedshift.config import (
    ConfigError,
    _path,
    check_registered,
    check_standin,
    load_yaml,
)
from fedshift.data.registry import FACTS

__all__ = ["PROBABILITY_KEYS", "CLASS_KEYS", "UPPER_BOUNDS", "STEP_KEYS", "strict_schema",
           "check_values", "check_yaml_file", "validate_workflow_config", "VAR_KEYWORDS", "hparam_types",
           "hparam_schema", "killed_jobs", "explain_killed_jobs"]

#: Keys whose numeric-list values are probability vectors (or lists of them): non-negative, summing to 1.
PROBABILITY_KEYS = ("init_lambda", "init_domain_weights", "target", "client_marginals", "target_start",
                    "target_end")
#: Keys whose integer-list values are classes/labels: no duplicates, each within the dataset's classes.
CLASS_KEYS = ("classes", "removed_labels", "target_drop_labels")
#: Keys whose string-list values (or string value) name domains.
DOMAIN_KEYS = ("names", "domains")
#: Mappings whose keys are free-text labels (a table's published numbers by row and column label).
FREE_TEXT = ("reference",)
SIMPLEX_ATOL = 1e-6
#: Upper bound of every key of this name, at any depth (a number, or each number of a list), and why: far above
#: every shipped value (the largest shipped is in brackets), so only an orders-of-magnitude slip (``rounds:
#: 1000000000000``) is refused, before it reaches a job that would run for years or allocate terabytes.
UPPER_BOUNDS: dict[str, tuple[float, str]] = {
    "rounds": (10**6, "training rounds/steps [50,000 AFL steps]; 10^6 is ≥ 20× the longest run"),
    "max_rounds": (10**6, "as rounds"),
    "local_epochs": (10**3, "local passes per round [40]"),
    "local_steps": (10**5, "local steps per round [50]"),
    "inner_steps": (10**4, "inner ascent steps per example [10]"),
    "steps": (10**4, "attack/ascent steps [40]"),
    "seeds": (10**3, "runs per cell [50]"),
    "batch_size": (10**7, "examples per batch [100,000: AFL's full batch]"),
    "eval_batch_size": (10**7, "as batch_size"),
    "clients": (10**6, "clients of a split [200]"),
    "num_clients": (10**6, "as clients"),
    "clients_per_round": (10**6, "as clients (and ≤ the clients, checked per section)"),
    "clients_per_domain": (10**6, "as clients"),
    "samples_per_client": (10**8, "examples [500]"), "samples_per_label": (10**8, "examples [300]"),
    "train_per_client": (10**8, "examples [500]"), "validation_per_client": (10**8, "examples [100]"),
    "test_per_client": (10**8, "examples [200]"), "validation_per_domain": (10**8, "examples [1,000]"),
    "test_per_domain": (10**8, "examples [2,000]"), "validation_size": (10**8, "examples [2,000]"),
    "test_size": (10**8, "examples [10,000]"), "unlabelled_size": (10**8, "examples [10,000]"),
    "source_size": (10**8, "examples [20,000]"), "target_size": (10**8, "examples [20,000]"),
    "log_every": (10**6, "≤ rounds"), "eval_every": (10**6, "≤ rounds"), "checkpoint_every": (10**6, "≤ rounds"),
    "snapshot_every": (10**6, "≤ rounds"), "eta3_every": (10**6, "≤ rounds"),
    "client_lr": (10**3, "a step size [1.0]; 10^3 diverges in any of our models"),
    "server_lr": (10**3, "as client_lr"), "lambda_lr": (10**3, "as client_lr"), "domain_lr": (10**3, "as client_lr"),
    "lr_lambda": (10**3, "as client_lr"), "lr_w": (10**3, "as client_lr"), "inner_lr": (10**3, "as client_lr [10]"),
    "client_lr_adversary": (10**3, "as client_lr"), "step": (10**3, "as client_lr"),
    "threads_per_job": (4096, "CPU threads of one job [1]"),
    "retries": (100, "download attempts [3]"), "timeout_s": (86_400, "one download's timeout: a day [60 s]"),
    "mem_mb": (4 * 1024**2, "a job's memory: 4 TiB [32 GiB]"),
    "runtime": (60 * 24 * 30, "a job's minutes: 30 days [1,440]"),
    "hidden": (10**5, "layer width [670]"), "embed_dim": (10**5, "width [200]"),
    "vocab_size": (10**7, "words [10,000]"),
}
#: Step sizes: non-negative wherever they appear (a grid value, fixed settings, a paper's train block).
STEP_KEYS = ("client_lr", "server_lr", "lambda_lr", "domain_lr", "lr_lambda", "lr_w", "inner_lr",
             "client_lr_adversary", "step", "lr", "eta3", "eps")
#: Keys whose string value is a folder under the data mirror: plain relative parts, no ``..``.
_MIRROR_DIR = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*)*$")

_NAME = re.compile(r"^[A-Za-z0-9_]+$")
_DOMAIN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_ /-]*$")


def _error(parts: list[Any], msg: str) -> ConfigError:
    return ConfigError(f"config error at {_path(parts)}: {msg}")


def _walk(node: Any, parts: list[Any], free: bool = False) -> Iterator[tuple[list[Any], Any, bool]]:
    yield parts, node, free
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _walk(v, [*parts, k], free or k in FREE_TEXT)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, [*parts, i], free)


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _numbers(value: Any) -> list[tuple[int | None, float]]:
    """``value`` itself when a number, else the numbers of a list (with their index)."""
    if _number(value):
        return [(None, value)]
    if isinstance(value, list):
        return [(i, v) for i, v in enumerate(value) if _number(v)]
    return []


def _dataset_of(config: dict[str, Any], parts: list[Any]) -> str | None:
    """The ``dataset`` of the nearest enclosing mapping that has one."""
    node, found = config, None
    for p in parts:
        if isinstance(node, dict) and isinstance(node.get("dataset"), str):
            found = node["dataset"]
        try:
            node = node[p]
        except (KeyError, IndexError, TypeError):
            break
    return found


def _check_simplex(parts: list[Any], vec: list[Any]) -> None:
    if not all(_number(v) for v in vec):
        return  # the schema names the wrong type
    if any(v < 0 for v in vec):
        raise _error(parts, f"{vec} is not a probability vector (a negative entry)")
    if abs(sum(vec) - 1.0) > SIMPLEX_ATOL:
        raise _error(parts, f"{vec} is not a probability vector: it sums to {sum(vec):g}, not 1")


def check_values(config: dict[str, Any]) -> None:
    """Check every value and key of a merged configuration, at any depth (step 1 of the module docstring).

    Raises
    ------
    ConfigError
        Naming the first offending key path, e.g. ``wafl.experiments.mnist.train.client_lr: nan is not a finite
        number`` or ``afl.experiments.afl_fashion_mnist.domains.classes: class 0 appears twice``.
    """
    for parts, value, free in _walk(config, []):
        key = parts[-1] if parts else None
        if isinstance(value, float) and not math.isfinite(value):
            raise _error(parts, f"{value} is not a finite number")
        if isinstance(value, dict) and not free:
            for k in value:
                if not (isinstance(k, str) and _NAME.match(k)):
                    raise _error([*parts, k], f"{k!r} is not a plain name (letters, digits and _ only)")
        if key in DOMAIN_KEYS:
            names = [value] if isinstance(value, str) else value if isinstance(value, list) else []
            for i, name in enumerate(names):
                if isinstance(name, str) and not (_DOMAIN.match(name) and "//" not in name
                                                  and not name.endswith("/")):
                    raise _error([*parts, i] if isinstance(value, list) else parts,
                                 f"domain name {name!r} is not a plain name (letters, digits, _, -, space, "
                                 "inner /; no '.', '\\' or empty part)")
        if key in UPPER_BOUNDS and not free:
            bound, why = UPPER_BOUNDS[key]
            for i, v in _numbers(value):
                if v > bound:
                    raise _error(parts if i is None else [*parts, i],
                                 f"{v:g} is above the upper bound {bound:g} ({why}; validation.UPPER_BOUNDS)")
        if key in STEP_KEYS and not free:
            for i, v in _numbers(value):
                if v < 0:
                    raise _error(parts if i is None else [*parts, i], f"{v:g} is negative: a step size is ≥ 0")
        if key == "mirror_dir" and isinstance(value, str) and not _MIRROR_DIR.match(value):
            raise _error(parts, f"{value!r} is not a relative folder inside the data mirror (plain parts "
                                "separated by /; no '..', no leading / or '.')")
        if (isinstance(value, dict) and isinstance(value.get("domains"), list)
                and isinstance(value.get("clients_per_domain"), list)
                and len(value["clients_per_domain"]) != len(value["domains"])):
            raise _error([*parts, "clients_per_domain"],
                         f"{len(value['clients_per_domain'])} entries for {len(value['domains'])} domains "
                         f"({value['domains']}): one count per domain")
        if key in PROBABILITY_KEYS and isinstance(value, list) and value:
            if all(isinstance(v, list) for v in value):
                for i, v in enumerate(value):
                    _check_simplex([*parts, i], v)
            else:
                _check_simplex(parts, value)
        if key in CLASS_KEYS and isinstance(value, list) and all(_number(v) for v in value):
            seen = set()
            for i, c in enumerate(value):
                if c in seen:
                    raise _error([*parts, i], f"class {c} appears twice in {value}")
                seen.add(c)
            dataset = _dataset_of(config, parts)
            n = FACTS[dataset].num_classes if dataset in FACTS else None  # the data registry's K
            if n is not None:
                for i, c in enumerate(value):
                    if not 0 <= c < n:
                        raise _error([*parts, i], f"class {c} is out of range: {dataset} has classes 0…{n - 1}")


def strict_schema(schema: Any) -> Any:
    """A copy of a JSON schema in which every ``type: object`` schema with ``properties`` refuses other keys.

    Adds ``unevaluatedProperties: false`` (which sees the properties of ``$ref``, ``allOf`` and ``if``/``then``
    beside it) wherever none of ``additionalProperties``, ``unevaluatedProperties``, ``patternProperties`` is
    given; fragments without ``type: object`` (``then: {properties: ...}``) are left alone.
    """
    out = copy.deepcopy(schema)

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            if (node.get("type") == "object" and "properties" in node
                    and not {"additionalProperties", "unevaluatedProperties", "patternProperties"} & set(node)):
                node["unevaluatedProperties"] = False
            for v in node.values():
                visit(v)
        elif isinstance(node, list):
            for v in node:
                visit(v)

    visit(out)
    return out


@functools.cache
def _strict_validator(schema_path: Path, mtime_ns: int) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(strict_schema(load_yaml(schema_path)))


_UNKNOWN_KEY = ("additionalProperties", "unevaluatedProperties")


def _best_error(errors: list[jsonschema.ValidationError]) -> jsonschema.ValidationError | None:
    """The error to report: the offending key itself, not the mapping around it.

    A value that fails inside a conditional (``if``/``then``) schema also makes ``unevaluatedProperties`` reject
    every key of its mapping (the failed branch evaluated none): that error lists every valid key without naming
    the bad one. So an unknown-key error is reported only when it is the only kind there is
    (``labels_per_client: -3`` is named, not its shift); among the others jsonschema's relevance chooses, and
    inside a ``oneOf``/``anyOf`` the branch closest to the value (fewest errors) is the one reported.
    """
    if not errors:
        return None
    real = [e for e in errors if e.validator not in _UNKNOWN_KEY]
    best = max(real or errors, key=jsonschema.exceptions.relevance)
    if not best.context:
        return best
    # a oneOf/anyOf: report the closest branch (fewest errors; then the most specific), e.g. the digits network
    # with one unknown key rather than the office network's "kind: 'office' was expected"
    branches: dict[Any, list[jsonschema.ValidationError]] = {}
    for e in best.context:
        branches.setdefault(e.relative_schema_path[0] if e.relative_schema_path else None, []).append(e)
    closest = min(branches.values(), key=lambda b: (len(b), -max(len(e.absolute_path) for e in b)))
    return _best_error(closest)


def _validate_strict(section: Any, schema_path: Path, prefix: str | None) -> None:
    validator = _strict_validator(schema_path, schema_path.stat().st_mtime_ns)
    error = _best_error(list(validator.iter_errors(section)))
    if error is not None:
        where = _path([*([prefix] if prefix else []), *error.absolute_path])
        msg = error.message
        if error.validator in ("additionalProperties", "unevaluatedProperties"):
            msg = re.sub(r"^(Additional|Unevaluated) properties are not allowed", "unknown key(s)", msg)
        raise ConfigError(f"config error at {where}: {msg}")


#: Keys of a paper section whose entries get the section's ``defaults`` merged in (fedshift.contract.experiments_of).
MERGED_KEYS = ("experiments", "tasks")


def merged_view(section: Any) -> Any:
    """``section`` with ``defaults`` merged into each entry of its experiments (or tasks), as the paper reads it.

    A partial override of a block that ``defaults`` completes (FedMM ``tasks.digits.fedmm: {mu: 1.0}``) is then
    valid, and a block the merge leaves incomplete is refused at the experiment's key path; ``defaults`` itself is
    validated as written. Sections without ``defaults`` are returned unchanged.
    """
    from fedshift.contract import deep_merge

    if not (isinstance(section, dict) and isinstance(section.get("defaults"), dict)):
        return section
    out = dict(section)
    for key in MERGED_KEYS:
        entries = section.get(key)
        if isinstance(entries, dict):
            out[key] = {n: deep_merge(section["defaults"], e or {}) if e is None or isinstance(e, dict) else e
                        for n, e in entries.items()}
    return out


#: Keyword dictionaries of an optimiser, by the key naming the optimiser beside them.
OPTIMIZER_KWARGS = {"optimizer_kwargs": "optimizer", "server_optimizer_kwargs": "server_optimizer"}


def _optimizer_params(name: str | None) -> dict[str, Any]:
    """Keyword → default of optimiser ``name`` (every optimiser's, for None), less the step ``lr``."""
    import inspect

    from fedshift.core.optim import OPTIMIZERS

    out: dict[str, Any] = {}
    for n, fn in OPTIMIZERS.items():
        if name is None or n == name:
            out |= {k: p.default for k, p in inspect.signature(fn).parameters.items() if k != "lr"}
    return out


def check_optimizer_kwargs(node: Any, parts: list[Any]) -> None:
    """Every ``optimizer_kwargs`` / ``server_optimizer_kwargs`` mapping, at any depth, against its optimiser.

    Its keys must be keyword parameters of the optimiser named beside it (``optimizer: adam`` → ``beta1``,
    ``beta2``, ``eps``; any optimiser's when none is named there, e.g. in ``defaults``), read from the signatures
    of :data:`fedshift.core.optim.OPTIMIZERS`; each value has the type of that parameter's default, numbers ≥ 0 and
    momentum/β in [0, 1).

    Raises
    ------
    ConfigError
        At ``...optimizer_kwargs.<key>``.
    """
    if isinstance(node, list):
        for i, v in enumerate(node):
            check_optimizer_kwargs(v, [*parts, i])
        return
    if not isinstance(node, dict):
        return
    for kw_key, name_key in OPTIMIZER_KWARGS.items():
        kwargs = node.get(kw_key)
        if not isinstance(kwargs, dict):
            continue
        name = node.get(name_key) if isinstance(node.get(name_key), str) else None
        known = _optimizer_params(name)
        for k, v in kwargs.items():
            where = [*parts, kw_key, k]
            if k not in known:
                raise _error(where, f"{k!r} is not a keyword of the {name or 'any'} optimiser; it takes "
                                    f"{sorted(known)} (fedshift.core.optim)")
            default = known[k]
            if isinstance(default, bool):
                if not isinstance(v, bool):
                    raise _error(where, f"{v!r} is not a boolean")
            elif not _number(v):
                raise _error(where, f"{v!r} is not a number")
            elif v < 0 or (k in ("momentum", "beta1", "beta2") and v >= 1):
                unit = "[0, 1)" if k in ("momentum", "beta1", "beta2") else "≥ 0"
                raise _error(where, f"{v!r} is out of range ({unit})")
    for k, v in node.items():
        check_optimizer_kwargs(v, [*parts, k])


#: Types of the keys a shift-matrix cell offers every algorithm besides its factory's (the common round,
#: :data:`fedshift.papers.shift_matrix.cells.OFFERED`, and the adapters' own keys, ``cells.extra_keys``).
_CELL_KEY_SCHEMAS = {
    "clients_per_round": {"type": "integer", "minimum": 1}, "local_epochs": {"type": "integer", "minimum": 1},
    "batch_size": {"type": "integer", "minimum": 1}, "client_lr": {"type": "number", "exclusiveMinimum": 0},
    "num_clients": {"type": "integer", "minimum": 1}, "nu": {"type": "number", "minimum": 0},
    "ess_fraction": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
}


def _from_package(paper: Any, package: str) -> bool:
    """Whether the plug-in ``paper`` is (a subclass of) a class of ``package`` (the contract wraps each class)."""
    return any(c.__module__.startswith(package) for c in type(paper).__mro__)


def _entry_keys(paper: Any, alg: str) -> dict[str, Any]:
    """Keys besides the factory's that a paper's grid/fixed entry of ``alg`` may set, with their schemas."""
    own = getattr(paper, "hparam_extras", None)
    if callable(own):
        return dict(own(alg))
    if _from_package(paper, "fedshift.papers.shift_matrix"):
        from fedshift.papers.shift_matrix import cells

        keys = set(cells.OFFERED) | (set(cells.extra_keys(alg)) if alg != "default" else set())
        return {k: _CELL_KEY_SCHEMAS.get(k, {}) for k in keys}
    return {}


def check_algorithm_entries(name: str, section: Any, paper: Any) -> None:
    """Every grid value and fixed setting of a paper section, typed by its algorithm's registry schema.

    Entries are ``grids: {alg: [{key: value}, ...]}``, ``fixed: {alg: {...}}`` and
    ``model_fixed: {model: {alg: {...}}}`` (the shift matrix's shape); each is validated against
    :func:`hparam_schema` of ``alg`` (from the registry) plus the keys the paper's cells add
    (:func:`_entry_keys`). ``grids.default`` may set the common round only. So a typo'd key of a factory taking
    ``**kwargs`` (FedProx's ``muu``) and a wrong type or negative value are refused before any job.

    Raises
    ------
    ConfigError
        At ``<paper>.grids.<alg>[i].<key>``, ``<paper>.fixed.<alg>.<key>`` or ``<paper>.model_fixed.<m>.<alg>.<key>``.
    """
    from fedshift.algorithms import registry

    if not isinstance(section, dict):
        return
    entries: list[tuple[list[Any], str, Any]] = []
    for alg, values in (section.get("grids") or {}).items():
        entries += [([name, "grids", alg, i], alg, v) for i, v in enumerate(values or [])]
    for alg, value in (section.get("fixed") or {}).items():
        entries.append(([name, "fixed", alg], alg, value))
    for model, algs in (section.get("model_fixed") or {}).items():
        for alg, value in (algs or {}).items():
            entries.append(([name, "model_fixed", model, alg], alg, value))
    for parts, alg, value in entries:
        extra = _entry_keys(paper, alg)
        if alg == "default":
            schema = {"type": "object", "properties": extra, "additionalProperties": False}
        else:
            try:
                schema = hparam_schema(alg)
            except KeyError:
                raise _error(parts, f"algorithm {alg!r} is not registered; registered: {registry.names()}") from None
            schema = {**schema, "properties": {**extra, **schema["properties"]}}
        error = _best_error(list(jsonschema.Draft202012Validator(schema).iter_errors(value)))
        if error is not None:
            msg = error.message
            if error.validator in _UNKNOWN_KEY:
                msg = re.sub(r"^(Additional|Unevaluated) properties are not allowed", "unknown key(s)", msg)
                msg += f"; {alg!r} takes {sorted(schema['properties'])} (validation.hparam_schema)"
            raise _error([*parts, *error.absolute_path], msg)


def _shift_clients(shift: Any) -> int | None:
    if not isinstance(shift, dict):
        return None
    if isinstance(shift.get("clients"), int):
        return shift["clients"]
    per = shift.get("clients_per_domain")
    if isinstance(per, list) and all(isinstance(c, int) for c in per):
        return sum(per)
    return None


def check_participation(name: str, section: Any, paper: Any) -> None:
    """Participants per round ≤ the clients there are, and a matrix baseline that is one of its algorithms.

    * FedPALS (``fedshift.papers.fedpals``): each experiment's ``train.clients_per_round`` (defaults merged) ≤
      ``num_clients − 1`` training clients (the last client is the target);
    * the shift matrix (``fedshift.papers.shift_matrix``): ``train.clients_per_round``, each model's
      ``model_train.<m>.clients_per_round`` and any grid value's ≤ the clients of every active shift (a cell would
      otherwise silently train fewer), and ``baseline`` a registered algorithm the matrix runs.

    Raises
    ------
    ConfigError
        Naming the participation key and the clients it exceeds.
    """
    if not isinstance(section, dict):
        return
    if _from_package(paper, "fedshift.papers.fedpals"):
        view = merged_view(section)
        for exp, e in (view.get("experiments") or {}).items():
            if not isinstance(e, dict):
                continue
            k, n = (e.get("train") or {}).get("clients_per_round"), e.get("num_clients")
            if isinstance(k, int) and isinstance(n, int) and k > n - 1:
                raise _error([name, "experiments", exp, "train", "clients_per_round"],
                             f"{k} participants per round, but num_clients = {n} leaves {n - 1} training clients "
                             "(the last is the target)")
    if _from_package(paper, "fedshift.papers.shift_matrix"):
        from fedshift.algorithms import registry

        shifts = section.get("shifts") or {}
        active = section.get("active_shifts") or list(shifts)
        asks = [([name, "train", "clients_per_round"], (section.get("train") or {}).get("clients_per_round"))]
        asks += [([name, "model_train", m, "clients_per_round"], (t or {}).get("clients_per_round"))
                 for m, t in (section.get("model_train") or {}).items()]
        asks += [([name, "grids", a, i, "clients_per_round"], v.get("clients_per_round"))
                 for a, vs in (section.get("grids") or {}).items() for i, v in enumerate(vs or [])
                 if isinstance(v, dict)]
        for where, k in asks:
            for sname in active:
                n = _shift_clients(shifts.get(sname))
                if isinstance(k, int) and n is not None and k > n:
                    raise _error(where, f"{k} participants per round, but shift {sname} has {n} clients")
        base = section.get("baseline")
        if isinstance(base, str):
            known = registry.names()
            if base not in known:
                raise _error([name, "baseline"], f"{base!r} is not a registered algorithm; registered: {known}")
            algs = section.get("algorithms", "all")
            if isinstance(algs, list) and base not in algs:
                raise _error([name, "baseline"], f"{base!r} is not one of the matrix's algorithms {algs}")


def check_http_sources(config: dict[str, Any]) -> None:
    """Refuse a dataset file fetched over plain http with no pinned sha256, unless the user opted in.

    A pinned sha256 authenticates the bytes whatever the channel; ``sha256: unpinned`` trusts the first fetch, and
    over plain http anyone on the path can replace it. Such a file needs an https URL, a pinned sha256 (the
    digest recorded in ``data/raw/<dataset>/<file>.sha256`` by a first fetch), or ``allow_http: <reason>``.

    Raises
    ------
    ConfigError
        At ``datasets.<name>.files[i].urls[j]``.
    """
    for name, entry in (config.get("datasets") or {}).items():
        for i, f in enumerate((entry or {}).get("files") or []):
            if not isinstance(f, dict) or f.get("sha256") != "unpinned" or f.get("allow_http"):
                continue
            for j, url in enumerate(f.get("urls") or []):
                if isinstance(url, str) and url.lower().startswith("http://"):
                    raise _error(["datasets", name, "files", i, "urls", j],
                                 f"{url!r} is plain http and the file's sha256 is unpinned (trust on first use over "
                                 "an unauthenticated channel can be tampered with): use an https URL, pin its "
                                 f"sha256 (a first fetch records it in data/raw/{name}/{f.get('name')}.sha256), or "
                                 "opt in with allow_http: <reason>")


#: The folder every claim's table must lie in.
CLAIM_TABLES = "results/tables/"


def check_claims(config: dict[str, Any], papers: Any) -> None:
    """The ``claims:`` section beyond its schema: paper keys that exist, tables inside ``results/tables/``.

    Also runs :func:`fedshift.claims.validate_claims` (required keys, duplicate ids, test ops) so that its
    errors come before any job with the ``config error at`` prefix.

    Raises
    ------
    ConfigError
        ``claims.<paper>`` for a paper that is not a plug-in of ``papers:`` (its claims would never be judged);
        ``claims.<paper>[i].quantity.table`` for a path that leaves ``results/tables/``.
    """
    claims = config.get("claims")
    if not isinstance(claims, dict):
        return
    for paper, items in claims.items():
        if paper not in papers:
            raise _error(["claims", paper], f"{paper!r} is not a paper of this workflow (papers: {sorted(papers)}); "
                                            "its claims would never be judged")
        for i, c in enumerate(items or []):
            table = ((c or {}).get("quantity") or {}).get("table") if isinstance(c, dict) else None
            if isinstance(table, str):
                parts = Path(table).parts
                if (not table.startswith(CLAIM_TABLES) or ".." in parts or "\\" in table
                        or Path(table).is_absolute()):
                    raise _error(["claims", paper, i, "quantity", "table"],
                                 f"{table!r} is not a file under {CLAIM_TABLES} (a claim reads only the "
                                 "pipeline's own tables)")
    from fedshift.claims import validate_claims

    try:
        validate_claims(claims)
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        msg = str(err)
        raise ConfigError(f"config error at {msg}" if msg.startswith("claims.") else f"config error at claims: {msg}"
                          ) from err


# ---- typed hyper-parameter schemas of the registered algorithms (here, not in the registry: jobs import the
# registry, so an edit there would change every training job's code hash; jobs never import this module)

#: Where a factory's ``**kwargs`` go, for factories that take them: ``"module.qualname"`` of the factory →
#: ``(target, excluded)``, the function (``"module:qualname"``) whose keyword-only parameters the ``**kwargs`` may
#: hold, less ``excluded`` (the ones the factory passes itself). A signature alone cannot say what ``**kwargs``
#: accepts, so without an entry the algorithm's schema stays open (any further key passes); a plug-in declares its
#: own by adding an entry (``validation.VAR_KEYWORDS["mypkg.mymod.build_x"] = ("mypkg.base:build_y", ())``), or by
#: giving the factory a ``var_hparams`` attribute: a mapping name → type.
VAR_KEYWORDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "fedshift.algorithms.fedprox.build_fedprox": ("fedshift.algorithms.fedavg:build_fedavg",
                                                  ("prox_mu", "prox_squared")),
    "fedshift.algorithms.fedpals.build_fedpals": ("fedshift.algorithms.fedavg:build_fedavg",
                                                  ("prox_mu", "prox_squared")),
    "fedshift.algorithms.wafl.build_robust_fedavg": ("fedshift.algorithms.wafl:make_perturb", ("kind",)),
}


def _resolve(target: str) -> Callable[..., Any]:
    module, _, qualname = target.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def hparam_types(name: str) -> tuple[dict[str, Any], bool]:
    """Every hyper-parameter algorithm ``name`` accepts by keyword, with its type, and whether that list is closed.

    The factory's keyword-only parameters less the name's fixed ones (:attr:`AlgorithmSpec.hparams`), plus, for a
    factory taking ``**kwargs``, the keyword-only parameters of the function they are passed to
    (:data:`VAR_KEYWORDS`, or the factory's ``var_hparams`` attribute), recursively.

    Returns
    -------
    types : dict
        Name → annotation (``Any`` or a string where unknown).
    closed : bool
        False when a ``**kwargs`` is not declared: any other key may be meant for it.

    Raises
    ------
    KeyError
        For an unregistered name.
    """
    from fedshift.algorithms import registry

    spec = registry.get(name)
    out = dict(spec.hparams)

    def forwarded(factory: Callable[..., Any], skip: set[str]) -> bool:
        params = inspect.signature(factory).parameters.values()
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            return True
        declared = getattr(factory, "var_hparams", None)
        if isinstance(declared, Mapping):
            for k, v in declared.items():
                out.setdefault(k, v)
            return True
        entry = VAR_KEYWORDS.get(f"{factory.__module__}.{factory.__qualname__}")
        if entry is None:
            return False
        target = _resolve(entry[0])
        drop = skip | set(entry[1]) | {p.name for p in params}
        for k, v in registry._typed_hparams(target, {}).items():
            if k not in drop:
                out.setdefault(k, v)
        return forwarded(target, drop)

    closed = forwarded(spec.factory, set(spec.fixed))
    for k in spec.fixed:
        out.pop(k, None)
    return out, closed


def _type_schema(hint: Any) -> Any:
    """The JSON schema of a value of annotation ``hint`` (numbers non-negative; unknown hints: any value)."""
    if hint is Any or isinstance(hint, str):
        return {}
    if hint is bool:
        return {"type": "boolean"}
    if hint is int:
        return {"type": "integer", "minimum": 0}
    if hint is float:
        return {"type": "number", "minimum": 0}
    if hint is str:
        return {"type": "string"}
    if hint is type(None):
        return {"type": "null"}
    origin = typing.get_origin(hint) or hint
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [_type_schema(h) for h in args]}
    if origin in (dict, Mapping) or origin is typing.Mapping:
        return {"type": "object"}
    if origin is tuple:
        if args and Ellipsis not in args:
            return {"type": "array", "prefixItems": [_type_schema(a) for a in args], "minItems": len(args),
                    "maxItems": len(args)}
        return {"type": "array", "items": _type_schema(args[0]) if args else {"type": "number", "minimum": 0}}
    if origin in (list, typing.Sequence) or (isinstance(origin, type) and issubclass(origin, typing.Sequence)
                                              if isinstance(origin, type) else False):
        return {"type": "array", "items": _type_schema(args[0]) if args else {}}
    if origin is Callable or getattr(origin, "__name__", "") == "Callable" or callable(hint) and hint is not type:
        return False  # set by the code that builds the algorithm, never by a config file
    return {}


def hparam_schema(name: str) -> dict[str, Any]:
    """A JSON schema of the hyper-parameter mapping of algorithm ``name`` (a grid value or fixed settings).

    Built from the registry (:func:`hparam_types`): one property per keyword the factory accepts (through
    ``**kwargs`` too, where declared), typed from its annotation — ``float`` a non-negative number (no registered
    hyper-parameter is a negative quantity: steps, penalties, radii), ``int`` a non-negative integer, a tuple or
    sequence an array of those, a callable not settable from a config file — and no other key (unless a
    ``**kwargs`` is undeclared). Upper bounds are the config's, by key name
    (:data:`UPPER_BOUNDS`).
    """
    hints, closed = hparam_types(name)
    return {"type": "object", "properties": {k: _type_schema(v) for k, v in sorted(hints.items())},
            "additionalProperties": not closed}


def check_yaml_file(path: str | Path) -> dict[str, Any]:
    """Parse one configuration file, or fail naming the file, the line and what is wrong.

    Snakemake's own message for a broken config file ("Config file is not valid JSON or YAML", "must be given as
    JSON or YAML with keys at top level") names no file; pre-parsing each file with this names it: a tab used for
    indentation, an unclosed bracket, a list or a scalar at the top level.

    Returns
    -------
    dict
        The file's mapping (empty for an empty file).

    Raises
    ------
    ConfigError
        ``config file <path>, line L column C: <problem>``, or ``...: the top level is a <type>, not a mapping of
        keys``.
    """
    import yaml

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"config file {path}: cannot read it ({err.strerror or err})") from err
    except UnicodeDecodeError as err:
        raise ConfigError(f"config file {path}: not UTF-8 text ({err.reason} at byte {err.start})") from err
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
        where = f", line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        hint = " (a tab: YAML indents with spaces only)" if "'\\t'" in str(err) else ""
        raise ConfigError(f"config file {path}{where}: not valid YAML: {problem}{hint}") from err
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: the top level is a {type(data).__name__}, not a mapping of keys "
                          "(e.g. `scale: quick`)")
    return data


def _check_run_algorithms(paper: Any) -> None:
    """Every algorithm a plug-in paper's runs name is registered."""
    from fedshift.algorithms import registry

    known = registry.algorithm_modules()
    for spec in paper.runs():
        if not spec.algorithms:
            raise ConfigError(f"config error at {paper.name}.experiments.{spec.experiment}: run {spec.run} names no "
                              "registered algorithm (RunSpec.algorithms; its code hash would miss the algorithm)")
        for name in spec.algorithms:
            if name not in known:
                raise ConfigError(f"config error at {paper.name}.experiments.{spec.experiment}: run {spec.run}: "
                                  f"algorithm {name!r} is not registered; registered: {sorted(known)}")


def validate_workflow_config(config: dict[str, Any], schema_dir: str | Path) -> dict[str, Any]:
    """Validate a merged workflow configuration completely, before any job (module docstring).

    Parameters
    ----------
    config : dict
        ``config/config.yaml`` + ``config/datasets.yaml`` + ``config/papers/*.yaml`` + overlays, merged.
    schema_dir : path
        ``workflow/schemas`` (``config.schema.yaml``; each paper plug-in's section has its own ``Paper.schema``).

    Returns
    -------
    dict
        ``config``, unchanged, when valid.

    Raises
    ------
    ConfigError
        For the first error found, naming its key path. A check that fails on input it did not expect (a
        ``KeyError``, ``TypeError``, ...) is reported as a ConfigError naming the section, never a traceback.
    """
    from fedshift.contract import load_papers

    schema_dir = Path(schema_dir)
    check_values(config)
    plugins = load_papers(config) if isinstance(config.get("papers"), dict) else {}
    # a plug-in's section is its own schema's business; the top-level schema sees the rest
    _validate_strict({k: v for k, v in config.items() if k not in plugins}, schema_dir / "config.schema.yaml", None)
    for name, paper in plugins.items():
        if paper.schema is not None:
            _validate_strict(merged_view(config.get(name) or {}), paper.resolve_path(paper.schema), name)
    check_claims(config, plugins)
    check_optimizer_kwargs(config, [])
    check_http_sources(config)
    section = "<root>"
    try:
        needed = {}
        for section, paper in plugins.items():
            check_participation(section, config.get(section), paper)
            paper.validate()
            check_algorithm_entries(section, config.get(section), paper)
            needed[section] = paper.datasets()
            _check_run_algorithms(paper)
        section = "datasets"
        check_registered(needed, config["datasets"])
        section = "standin"
        check_standin(config)
    except ConfigError:
        raise
    except Exception as err:  # noqa: BLE001 — a check's own crash must still name where it happened
        raise ConfigError(f"config error in section {section}: {type(err).__name__}: {err}") from err
    return config


# ---- the workflow's report of jobs killed by a signal (onerror, workflow/rules/common.smk) --------------------------

_JOB_HEADER = re.compile(r"^(?:local)?rule (\S+):$")
_JOB_ERROR = re.compile(r"RuleException:\n((?:(?!RuleException:).)*?)Error in rule (\S+):\n((?:    [^\n]*\n)*)",
                        re.S)
#: Texts of a Snakemake log that say a job was killed outright (SIGKILL: the kernel's OOM killer, a scheduler's
#: memory limit, ``kill -9``) or by SLURM for memory.
KILLED = ("<Signals.SIGKILL: 9>", "exit status 137", "exit status -9", "OUT_OF_MEMORY")


def killed_jobs(log_text: str) -> list[dict[str, str]]:
    """The jobs of a Snakemake log that failed by SIGKILL or for memory, with what the log says of each.

    Returns
    -------
    list of dict
        ``rule``, ``jobid``, ``wildcards`` and ``mem_mb`` (from the job's header in the log; empty when absent)
        and ``how`` (the text that shows the kill).
    """
    headers: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for line in log_text.splitlines():
        m = _JOB_HEADER.match(line)
        if m:
            current = {"rule": m.group(1)}
            continue
        if current is not None and line.startswith("    "):
            key, _, value = line.strip().partition(": ")
            if key == "jobid":
                headers[value] = current
            elif key in ("wildcards", "resources"):
                current[key] = value
        else:
            current = None
    out = []
    for m in _JOB_ERROR.finditer(log_text if log_text.endswith("\n") else log_text + "\n"):
        how = next((k for k in KILLED if k in m.group(1)), None)
        jobid = re.search(r"^    jobid: (\S+)$", m.group(3), re.M)
        if how is None or jobid is None:
            continue
        head = headers.get(jobid.group(1), {})
        mem = re.search(r"\bmem_mb=(\d+)", head.get("resources", ""))
        out.append({"rule": m.group(2), "jobid": jobid.group(1), "wildcards": head.get("wildcards", ""),
                    "mem_mb": mem.group(1) if mem else "", "how": how})
    return out


def explain_killed_jobs(log_text: str) -> list[str]:
    """One line per killed job of a Snakemake log: the job, its ``mem_mb``, the likely cause and what to do."""
    lines = []
    for j in killed_jobs(log_text):
        job = f"{j['rule']} ({j['wildcards']})" if j["wildcards"] else j["rule"]
        mem = f", which had mem_mb = {j['mem_mb']}," if j["mem_mb"] else ""
        cause = ("killed by SLURM for exceeding its memory" if j["how"] == "OUT_OF_MEMORY" else
                 "killed by SIGKILL (under a memory limit, most likely by the out-of-memory killer)")
        lines.append(f"fedshift: job {job}{mem} was {cause}. Its checkpoint is kept and every output it wrote "
                     "is atomic: rerun to resume; if it recurs, raise that run's resources.mem_mb in its paper's "
                     "config.")
    return lines


def main(argv: list[str] | None = None) -> int:
    """``python -m fedshift.validation FILE...``: parse config files (overlays), naming the file of a YAML error.

    Snakemake parses ``--configfile`` overlays before the workflow runs and reports a broken one without its
    name; this names it. Exit status 0 when every file parses to a mapping, 1 otherwise.
    """
    import sys

    status = 0
    for f in sys.argv[1:] if argv is None else argv:
        try:
            check_yaml_file(f)
        except ConfigError as err:
            print(f"fedshift: {err}", file=sys.stderr)
            status = 1
        else:
            print(f"{f}: ok")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
