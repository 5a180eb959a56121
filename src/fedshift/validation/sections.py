"""Cross-key checks of the merged configuration (step 3 of :mod:`fedshift.validation`).

Optimiser keyword dictionaries against their optimiser, grid/fixed entries against the registry's hyper-parameter
schemas, participants per round against the clients there are, plain-http unpinned downloads, the ``claims:``
section, and the algorithms a plug-in paper's runs name.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jsonschema

from fedshift.config import ConfigError
from fedshift.validation.hparams import hparam_schema
from fedshift.validation.schemas import _UNKNOWN_KEY, _best_error, merged_view
from fedshift.validation.values import _error, _number

__all__ = ["OPTIMIZER_KWARGS", "check_optimizer_kwargs", "check_algorithm_entries", "check_participation",
           "check_http_sources", "CLAIM_TABLES", "check_claims"]

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


def _from_package(paper: Any, package: str) -> bool:
    """Whether the plug-in ``paper`` is (a subclass of) a class of ``package`` (the contract wraps each class)."""
    return any(c.__module__.startswith(package) for c in type(paper).__mro__)


def _entry_keys(paper: Any, alg: str) -> dict[str, Any]:
    """Keys besides the factory's that a paper's grid/fixed entry of ``alg`` may set, with their schemas."""
    own = getattr(paper, "hparam_extras", None)
    return dict(own(alg)) if callable(own) else {}


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
        if isinstance(values, dict):  # a product grid {key: [values]}: each value checked as {key: value}
            entries += [([name, "grids", alg, k, i], alg, v if k.startswith("_") and isinstance(v, dict) else {k: v})
                        for k, vs in values.items() for i, v in enumerate(vs if isinstance(vs, list) else [vs])]
        else:
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

