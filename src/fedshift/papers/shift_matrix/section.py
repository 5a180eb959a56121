"""The shift matrix's section: its grids as lists of settings (:func:`expand_grid`) and its checks
(:meth:`.paper.ShiftMatrixPaper.check_raw_section` and :meth:`~.paper.ShiftMatrixPaper.validate`): the section as
written, then the paper object it builds.

Imports no torch (the plan's view): the checks read the algorithms' declarations (:mod:`.rows`), the data
registry's facts and the shift classes.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import jsonschema

from fedshift.data.registry import FACTS
from fedshift.errors import ConfigError
from fedshift.papers.shift_matrix import rows
from fedshift.seeds import seed_list
from fedshift.validation import strict_schema

if TYPE_CHECKING:
    from fedshift.papers.shift_matrix.paper import ShiftMatrixPaper
    from fedshift.shifts import Shift

__all__ = ["expand_grid", "shift_clients", "seed_ids", "check_raw_section", "validate", "check_shift",
           "check_shift_rounds"]


def expand_grid(spec: Sequence[Mapping[str, Any]] | Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """A grid as its list of values: a list of settings as it is; a mapping key → values as their product.

    ``{client_lr: [0.03, 0.1, 0.3], mu: [0.01, 0.1, 1.0]}`` is the 9 settings of the Cartesian product, the first
    key varying slowest (``itertools.product``); a value that is itself a list (FedMM's μ pair) is one value. A key
    starting with ``_`` lists whole settings, merged into the product (a knob of several keys moved together, or
    settings with different keys: ``{client_lr: [...], _knob: [{lam: 0.0}, {ess_fraction: 0.5}]}``).
    """
    if isinstance(spec, Mapping):
        keys = list(spec)
        out = []
        for combo in itertools.product(*(spec[k] for k in keys)):
            value: dict[str, Any] = {}
            for k, v in zip(keys, combo, strict=True):
                value |= dict(v) if k.startswith("_") else {k: v}
            out.append(value)
        return out
    return [dict(v) for v in spec]


def shift_clients(shift: Any) -> int | None:
    """The clients a configured shift makes (``clients``, or the sum of ``clients_per_domain``); None if unstated."""
    if not isinstance(shift, dict):
        return None
    if isinstance(shift.get("clients"), int):
        return shift["clients"]
    per = shift.get("clients_per_domain")
    if isinstance(per, list) and all(isinstance(c, int) for c in per):
        return sum(per)
    return None


def seed_ids(section: Mapping[str, Any]) -> list[int]:
    """The seeds of every cell: ``seeds`` as a count n (0 … n − 1) or as its list (:func:`fedshift.seeds.seed_list`).

    Parameters
    ----------
    section : mapping
        The ``shift_matrix:`` section.

    Returns
    -------
    list of int

    Raises
    ------
    ValueError
        For a value that is neither (the schema refuses it first, naming ``shift_matrix.seeds``).
    """
    return seed_list(section["seeds"], "shift_matrix.seeds")


def check_raw_section(name: str, section: Mapping[str, Any]) -> None:
    """Participants per round ≤ clients, a baseline the matrix runs, and each shift against its protocol.

    * ``train.clients_per_round``, each model's ``model_train.<m>.clients_per_round`` and any grid value's ≤ the
      clients of every active shift (a cell would otherwise silently train fewer);
    * ``baseline`` a registered algorithm the matrix runs;
    * each configured shift against its kind's protocol (:meth:`fedshift.shifts.Shift.protocol`): an unseen
      domain or transformation really unseen, validation never the test distribution, counts consistent with
      each other and rows within the data registry's splits (:attr:`fedshift.data.registry.DatasetFacts.splits`).

    Raises
    ------
    ConfigError
        Naming the participation key and the clients it exceeds, ``<name>.baseline``, or
        ``<name>.shifts.<shift>.<key>`` with the protocol's condition.
    """
    from fedshift.algorithms import registry
    from fedshift.shifts import SHIFTS, discover
    from fedshift.validation import config_error

    shifts = section.get("shifts") or {}
    active = section.get("active_shifts") or list(shifts)
    asks = [([name, "train", "clients_per_round"], (section.get("train") or {}).get("clients_per_round"))]
    asks += [([name, "model_train", m, "clients_per_round"], (t or {}).get("clients_per_round"))
             for m, t in (section.get("model_train") or {}).items()]
    for a, vs in (section.get("grids") or {}).items():
        if isinstance(vs, list):  # a list of settings
            asks += [([name, "grids", a, i, "clients_per_round"], v.get("clients_per_round"))
                     for i, v in enumerate(vs) if isinstance(v, dict)]
        elif isinstance(vs, dict) and isinstance(vs.get("clients_per_round"), list):  # a product grid's values
            asks += [([name, "grids", a, "clients_per_round", j], v)
                     for j, v in enumerate(vs["clients_per_round"])]
    for where, k in asks:
        for sname in active:
            n = shift_clients(shifts.get(sname))
            if isinstance(k, int) and n is not None and k > n:
                raise config_error(where, f"{k} participants per round, but shift {sname} has {n} clients")
    base = section.get("baseline")
    if isinstance(base, str):
        known = registry.declared_names()
        if base not in known:
            raise config_error([name, "baseline"], f"{base!r} is not a registered algorithm; registered: {known}")
        algs = section.get("algorithms", "all")
        if isinstance(algs, list) and base not in algs:
            raise config_error([name, "baseline"], f"{base!r} is not one of the matrix's algorithms {algs}")
    discover()

    def sizes(dataset: str, split: str) -> int | None:
        facts = FACTS.get(dataset)
        return dict(facts.splits).get(split) if facts is not None else None

    for shift, params in shifts.items():
        cls = SHIFTS.get((params or {}).get("kind")) if isinstance(params, dict) else None
        if cls is None:
            continue
        for key, problem in cls.protocol(params, sizes):
            raise ConfigError(f"config error at {name}.shifts.{shift}.{key}: {problem} (the {cls.kind} shift's "
                              "protocol)")


def validate(paper: ShiftMatrixPaper) -> None:
    """Grids of equal size, known shift kinds and algorithms, a baseline that runs in every shift.

    Raises
    ------
    ConfigError
        Naming the key path.
    """
    from fedshift.algorithms import registry

    s = paper.section
    size = s["grid_size"]
    for alg, values in s["grids"].items():
        if len(expand_grid(values)) != size:
            raise ConfigError(f"config error at {paper.name}.grids.{alg}: {len(expand_grid(values))} values, but "
                              f"every method gets grid_size = {size} (the fair protocol: grids of equal size)")
    for i, model in enumerate(paper.models):
        if model not in rows.MODEL_PARTS:
            at = f"model[{i}]" if isinstance(s["model"], list) else "model"
            raise ConfigError(f"config error at {paper.name}.{at}: unknown model {model!r}; the matrix's models: "
                              f"{sorted(rows.MODEL_PARTS)}")
    for key in ("model_train", "model_fixed"):
        for model in s.get(key) or {}:
            if model not in paper.models:
                raise ConfigError(f"config error at {paper.name}.{key}.{model}: not a model of the matrix "
                                  f"(model: {paper.models})")
    for model, algs in (s.get("model_fixed") or {}).items():
        for alg in algs:
            if alg not in registry.declared_names():
                raise ConfigError(f"config error at {paper.name}.model_fixed.{model}.{alg}: algorithm "
                                  f"{alg!r} is not registered")
    for i, name in enumerate(s.get("active_shifts") or []):
        if name not in s["shifts"]:
            raise ConfigError(f"config error at {paper.name}.active_shifts[{i}]: unknown shift {name!r}; "
                              f"configured: {sorted(s['shifts'])}")
    try:
        shifts = paper.shifts
    except KeyError as err:
        raise ConfigError(f"config error at {err.args[0]}") from err
    for name, shift in shifts.items():
        check_shift(paper.name, name, shift)
    for i, model in enumerate(paper.models):  # a model too large for a shift's images fails every one of its cells
        for name, shift in shifts.items():
            if shift.image_side < rows.MODEL_MIN_SIDE.get(model, 0):
                at = f"model[{i}]" if isinstance(s["model"], list) else "model"
                raise ConfigError(
                    f"config error at {paper.name}.{at}: model {model!r} needs images of at least "
                    f"{rows.MODEL_MIN_SIDE[model]} px a side, but shift {name!r} ({paper.name}.shifts.{name}) reads "
                    f"{shift.image_side}×{shift.image_side} images from its dataset; use model logreg for it, or "
                    "leave the shift out (active_shifts)")
    known = registry.declared_names()
    for key in ("grids", "fixed", "baseline_copies"):
        for alg in s.get(key) or {}:
            if alg != "default" and alg not in known:
                raise ConfigError(f"config error at {paper.name}.{key}.{alg}: algorithm {alg!r} is not registered; "
                                  f"registered: {known}")
    for alg in paper.algorithms():
        if alg not in known:
            raise ConfigError(f"config error at {paper.name}.algorithms: {alg!r} is not registered; "
                              f"registered: {known}")
    wanted = seed_ids(s)
    if wanted != list(range(len(wanted))):  # listed seeds: the runs must be those, never 0 … n − 1 silently
        try:
            drawn = sorted({spec.seed for spec in paper.runs()})
        except TypeError as err:  # a plan that takes only a count
            raise ConfigError(f"config error at {paper.name}.seeds: a list of seeds ({wanted}), but the matrix's "
                              "plan (ShiftMatrixPaper.runs) takes only a count; it must draw them from "
                              "fedshift.papers.shift_matrix.section.seed_ids") from err
        if drawn != sorted(wanted):
            raise ConfigError(f"config error at {paper.name}.seeds: the matrix would run seeds {drawn}, not the "
                              f"listed {wanted}")
    check_shift_rounds(paper, shifts)
    for name, shift in shifts.items():
        for model in paper.models:
            reason = paper.status(s["baseline"], shift, model)
            if reason is not None:
                raise ConfigError(f"config error at {paper.name}.baseline: {s['baseline']!r} does not run under "
                                  f"shift {name} with model {model} ({reason})")


def check_shift_rounds(paper: ShiftMatrixPaper, shifts: Mapping[str, Shift]) -> None:
    """``shift_rounds``: known shifts and models, and rounds the plan really gives those cells (never ignored).

    Raises
    ------
    ConfigError
        Naming ``<paper>.shift_rounds.<shift>[.<model>]``.
    """
    wanted = paper.section.get("shift_rounds") or {}
    if not wanted:
        return
    for name, per in wanted.items():
        if name not in paper.section["shifts"]:
            raise ConfigError(f"config error at {paper.name}.shift_rounds.{name}: unknown shift; configured: "
                              f"{sorted(paper.section['shifts'])}")
        for model in per:
            if model not in paper.models:
                raise ConfigError(f"config error at {paper.name}.shift_rounds.{name}.{model}: not a model of the "
                                  f"matrix (model: {paper.models})")
    counted = dict(paper.section, seeds=len(seed_ids(paper.section)))  # the cells, whichever form of seeds
    plan = type(paper)(dict(paper.config) | {paper.name: counted}).runs()
    for spec in plan:
        for model, train in spec.hparams["models"].items():
            r = (wanted.get(spec.experiment) or {}).get(model)
            if r is not None and train["rounds"] != r:
                raise ConfigError(f"config error at {paper.name}.shift_rounds.{spec.experiment}.{model}: {r} "
                                  f"rounds, but the matrix's plan trains that cell {train['rounds']} (ShiftMatrixPaper"
                                  ".runs must take each model's rounds from shift_rounds)")


def check_shift(paper: str, name: str, shift: Shift) -> None:
    """A plug-in kind's keys against its class's ``schema``; every dataset a registered image dataset.

    Raises
    ------
    ConfigError
        Naming ``<paper>.shifts.<name>`` and the key.
    """
    where = f"{paper}.shifts.{name}"
    if type(shift).schema is not None:
        common = {"kind": {"type": "string"}, "description": {"type": "string"},
                  "columns": {"type": "array", "minItems": 1, "items": {"type": "string"}}}
        own = dict(type(shift).schema)
        schema = {**own, "type": "object", "properties": {**common, **own.get("properties", {})}}
        error = jsonschema.exceptions.best_match(
            jsonschema.Draft202012Validator(strict_schema(schema)).iter_errors(shift.params))
        if error is not None:
            at = ".".join([where, *map(str, error.absolute_path)])
            raise ConfigError(f"config error at {at}: {error.message}")
    for d in shift.datasets():
        at = _key_of(shift.params, d, where)
        if d not in FACTS or FACTS[d].image_shape is None:
            images = sorted(n for n, f in FACTS.items() if f.image_shape is not None)
            raise ConfigError(f"config error at {at}: dataset {d!r} is not a registered image dataset; "
                              f"registered: {images}")


def _key_of(params: Mapping[str, Any], value: str, where: str) -> str:
    """The key path under ``where`` of the first entry of ``params`` that is ``value`` (or lists it)."""
    for key, v in params.items():
        if v == value:
            return f"{where}.{key}"
        if isinstance(v, list) and value in v:
            return f"{where}.{key}[{v.index(value)}]"
    return where
