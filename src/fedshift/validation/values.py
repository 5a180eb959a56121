"""Value checks over every key of the merged configuration, at any depth (step 1 of :mod:`fedshift.validation`).

Finite numbers, plain mapping keys, domain names that cannot leave a folder, probability vectors on the simplex,
class lists without duplicates and within the dataset's classes, the upper bounds by key name (:data:`UPPER_BOUNDS`)
and non-negative step sizes (:data:`STEP_KEYS`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Any

from fedshift.config import key_path
from fedshift.errors import ConfigError
from fedshift.data.registry import FACTS

__all__ = ["PROBABILITY_KEYS", "CLASS_KEYS", "DOMAIN_KEYS", "FREE_TEXT", "SIMPLEX_ATOL", "UPPER_BOUNDS", "STEP_KEYS",
           "COUNT_OR_LIST_KEYS",
           "check_values", "config_error", "is_number"]

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
    "rounds": (10**6, "training rounds/steps [50,000]; 10^6 is ≥ 20× the longest run"),
    "max_rounds": (10**6, "as rounds"),
    "local_epochs": (10**3, "local passes per round [40]"),
    "local_steps": (10**5, "local steps per round [50]"),
    "inner_steps": (10**4, "inner ascent steps per example [10]"),
    "steps": (10**4, "attack/ascent steps [40]"),
    "seeds": (10**3, "runs per cell [50]"),
    "batch_size": (10**7, "examples per batch [100,000: a full batch]"),
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
    "server_lr": (10**3, "as client_lr"), "lambda_lr": (10**3, "as client_lr: a mixture weight λ's step"),
    "inner_lr": (10**3, "as client_lr [10]"),
    "client_lr_adversary": (10**3, "as client_lr"), "step": (10**3, "as client_lr"),
    "threads_per_job": (4096, "CPU threads of one job [1]"),
    "retries": (100, "download attempts [3]"), "timeout_s": (86_400, "one download's timeout: a day [60 s]"),
    "mem_mb": (4 * 1024**2, "a job's memory: 4 TiB [32 GiB]"),
    "runtime": (60 * 24 * 30, "a job's minutes: 30 days [1,440]"),
    "hidden": (10**5, "layer width [670]"), "embed_dim": (10**5, "width [200]"),
    "vocab_size": (10**7, "words [10,000]"),
}
#: Keys that hold a count or an explicit list of that many items (``seeds: 3`` or ``seeds: [1000, 1001, 1002]``,
#: :mod:`fedshift.seeds`): the upper bound applies to the count, or to the list's length, never to its items.
COUNT_OR_LIST_KEYS = ("seeds",)
#: Step sizes: non-negative wherever they appear (a grid value, fixed settings, a paper's train block).
STEP_KEYS = ("client_lr", "server_lr", "lambda_lr", "inner_lr",
             "client_lr_adversary", "step", "lr", "eta3", "eps")
#: Keys whose string value is a folder under the data mirror: plain relative parts, no ``..``.
_MIRROR_DIR = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*)*$")

_NAME = re.compile(r"^[A-Za-z0-9_]+$")
_DOMAIN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_ /-]*$")


def config_error(parts: list[Any], msg: str) -> ConfigError:
    """The error of a bad value at key path ``parts``: ``config error at a.b[0].c: msg`` (for plug-ins' checks).

    Parameters
    ----------
    parts : list of str or int
        The key path; integers are list indices.
    msg : str
        What is wrong.
    """
    return ConfigError(f"config error at {key_path(parts)}: {msg}")


def _walk(node: Any, parts: list[Any], free: bool = False) -> Iterator[tuple[list[Any], Any, bool]]:
    yield parts, node, free
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _walk(v, [*parts, k], free or k in FREE_TEXT)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, [*parts, i], free)


def is_number(x: Any) -> bool:
    """Whether ``x`` is an int or a float (a bool is not a number here)."""
    return isinstance(x, int | float) and not isinstance(x, bool)


def _numbers(value: Any) -> list[tuple[int | None, float]]:
    """``value`` itself when a number, else the numbers of a list (with their index)."""
    if is_number(value):
        return [(None, value)]
    if isinstance(value, list):
        return [(i, v) for i, v in enumerate(value) if is_number(v)]
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
    if not all(is_number(v) for v in vec):
        return  # the schema names the wrong type
    if any(v < 0 for v in vec):
        raise config_error(parts, f"{vec} is not a probability vector (a negative entry)")
    if abs(sum(vec) - 1.0) > SIMPLEX_ATOL:
        raise config_error(parts, f"{vec} is not a probability vector: it sums to {sum(vec):g}, not 1")


def check_values(config: dict[str, Any]) -> None:
    """Check every value and key of a merged configuration, at any depth (step 1 of :mod:`fedshift.validation`).

    Raises
    ------
    ConfigError
        Naming the first offending key path, e.g. ``<paper>.experiments.mnist.train.client_lr: nan is not a finite
        number`` or ``<paper>.experiments.<experiment>.domains.classes: class 0 appears twice``.
    """
    for parts, value, free in _walk(config, []):
        key = parts[-1] if parts else None
        if isinstance(value, float) and not math.isfinite(value):
            raise config_error(parts, f"{value} is not a finite number")
        if isinstance(value, dict) and not free:
            for k in value:
                if not (isinstance(k, str) and _NAME.match(k)):
                    raise config_error([*parts, k], f"{k!r} is not a plain name (letters, digits and _ only)")
        if key in DOMAIN_KEYS:
            names = [value] if isinstance(value, str) else value if isinstance(value, list) else []
            for i, name in enumerate(names):
                if isinstance(name, str) and not (_DOMAIN.match(name) and "//" not in name
                                                  and not name.endswith("/")):
                    raise config_error([*parts, i] if isinstance(value, list) else parts,
                                 f"domain name {name!r} is not a plain name (letters, digits, _, -, space, "
                                 "inner /; no '.', '\\' or empty part)")
        if key in UPPER_BOUNDS and not free:
            bound, why = UPPER_BOUNDS[key]
            counted = key in COUNT_OR_LIST_KEYS and isinstance(value, list)  # an explicit list: bound its length
            if counted and len(value) > bound:
                raise config_error(parts, f"{len(value)} entries are above the upper bound {bound:g} ({why}; "
                                   "validation.UPPER_BOUNDS)")
            for i, v in [] if counted else _numbers(value):
                if v > bound:
                    raise config_error(parts if i is None else [*parts, i],
                                 f"{v:g} is above the upper bound {bound:g} ({why}; validation.UPPER_BOUNDS)")
        if key in STEP_KEYS and not free:
            for i, v in _numbers(value):
                if v < 0:
                    raise config_error(parts if i is None else [*parts, i], f"{v:g} is negative: a step size is ≥ 0")
        if key == "mirror_dir" and isinstance(value, str) and not _MIRROR_DIR.match(value):
            raise config_error(parts, f"{value!r} is not a relative folder inside the data mirror (plain parts "
                                "separated by /; no '..', no leading / or '.')")
        if (isinstance(value, dict) and isinstance(value.get("domains"), list)
                and isinstance(value.get("clients_per_domain"), list)
                and len(value["clients_per_domain"]) != len(value["domains"])):
            raise config_error([*parts, "clients_per_domain"],
                         f"{len(value['clients_per_domain'])} entries for {len(value['domains'])} domains "
                         f"({value['domains']}): one count per domain")
        if key in PROBABILITY_KEYS and isinstance(value, list) and value:
            if all(isinstance(v, list) for v in value):
                for i, v in enumerate(value):
                    _check_simplex([*parts, i], v)
            else:
                _check_simplex(parts, value)
        if key in CLASS_KEYS and isinstance(value, list) and all(is_number(v) for v in value):
            seen = set()
            for i, c in enumerate(value):
                if c in seen:
                    raise config_error([*parts, i], f"class {c} appears twice in {value}")
                seen.add(c)
            dataset = _dataset_of(config, parts)
            n = FACTS[dataset].num_classes if dataset in FACTS else None  # the data registry's K
            if n is not None:
                for i, c in enumerate(value):
                    if not 0 <= c < n:
                        raise config_error([*parts, i], f"class {c} is out of range: {dataset} has classes 0…{n - 1}")

