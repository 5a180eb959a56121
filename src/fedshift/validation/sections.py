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

from fedshift.errors import ConfigError
from fedshift.validation.hparams import choice_refusal, declared_bounds, hparam_schema
from fedshift.validation.schemas import UNKNOWN_KEY, best_error
from fedshift.validation.values import config_error, is_number

__all__ = ["OPTIMIZER_KWARGS", "check_optimizer_kwargs", "check_algorithm_entries", "check_paper_section",
           "check_http_sources", "CLAIM_TABLES", "check_claims", "check_dataset_plugins", "check_claim_tables",
           "check_run_algorithms"]

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
                raise config_error(where, f"{k!r} is not a keyword of the {name or 'any'} optimiser; it takes "
                                    f"{sorted(known)} (fedshift.core.optim)")
            default = known[k]
            if isinstance(default, bool):
                if not isinstance(v, bool):
                    raise config_error(where, f"{v!r} is not a boolean")
            elif not is_number(v):
                raise config_error(where, f"{v!r} is not a number")
            elif v < 0 or (k in ("momentum", "beta1", "beta2") and v >= 1):
                unit = "[0, 1)" if k in ("momentum", "beta1", "beta2") else "≥ 0"
                raise config_error(where, f"{v!r} is out of range ({unit})")
    for k, v in node.items():
        check_optimizer_kwargs(v, [*parts, k])


def _entry_keys(paper: Any, alg: str) -> dict[str, Any]:
    """Keys besides the factory's that a paper's grid/fixed entry of ``alg`` may set, with their schemas."""
    own = getattr(paper, "hparam_extras", None)
    return dict(own(alg)) if callable(own) else {}


def check_algorithm_entries(name: str, section: Any, paper: Any) -> None:
    """Every grid value and fixed setting of a paper section, typed by its algorithm's registry schema.

    Entries are ``grids: {alg: [{key: value}, ...]}``, ``fixed: {alg: {...}}`` and
    ``model_fixed: {model: {alg: {...}}}`` (one fixed setting per model); each is validated against
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
                raise config_error(parts, f"algorithm {alg!r} is not registered; "
                                    f"registered: {registry.declared_names()}") from None
            schema = {**schema, "properties": {**extra, **schema["properties"]}}
        error = best_error(list(jsonschema.Draft202012Validator(schema).iter_errors(value)))
        if error is not None:
            msg = error.message
            path = [*parts, *error.absolute_path]
            if error.validator in UNKNOWN_KEY:
                msg = re.sub(r"^(Additional|Unevaluated) properties are not allowed", "unknown key(s)", msg)
                msg += f"; {alg!r} takes {sorted(schema['properties'])} (validation.hparam_schema)"
                unknown = [k for k in (error.instance if isinstance(error.instance, dict) else {})
                           if k not in schema["properties"]]
                path += unknown[:1]  # name the offending key itself
            keys = [p for p in error.absolute_path if isinstance(p, str)]
            bounds = declared_bounds(alg) if alg != "default" else {}
            if error.validator in _RANGE and keys and keys[0] in bounds:
                msg += f" (allowed range {bounds[keys[0]]}, declared where {alg!r} is registered)"
            if alg != "default" and len(keys) == 1 and isinstance(value, dict):  # a string outside a Literal
                msg = choice_refusal(alg, keys[0], value.get(keys[0])) or msg
            raise config_error(path, msg)
    _check_cells(name, section, paper, entries)


def _dotted(parts: list[Any]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts).lstrip(".")


#: JSON-schema keywords of a numeric range.
_RANGE = ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum")


def _check_cells(name: str, section: dict[str, Any], paper: Any, entries: list[tuple[list[Any], str, Any]]) -> None:
    """What one cell combines, beyond each entry alone: cross-knob ranges and the keys a grid must give.

    A cell builds its algorithm from the common round (``train``, ``model_train.<m>``), the fixed settings
    (``fixed.<alg>``, ``model_fixed.<m>.<alg>``) and one grid value (``grids.<alg>[i]``, or ``grids.default[i]``
    for a method without a grid of its own), the later winning. Each combination is checked against the
    algorithm's cross-knob ranges (``bounds`` keys ``"a*b"``, e.g. FedNova's η·μ < 1); and a grid value of a method
    whose factory requires a key must give it, or the fixed settings must (FedSR's ``cmi``): the cell would
    otherwise be marked n/a silently.

    Raises
    ------
    ConfigError
        At the grid value (``<paper>.grids.<alg>[i]``) or the fixed settings that complete the failing combination.
    """
    cell_gap = getattr(paper, "cell_gap", None)  # a paper whose runs are cells of algorithm × setting
    if not callable(cell_gap):
        return
    from fedshift.algorithms import registry

    grids = section.get("grids") or {}
    fixed = section.get("fixed") or {}
    bases = [("train", section.get("train") or {})]
    bases += [(f"model_train.{m}", {**(section.get("train") or {}), **(t or {})})
              for m, t in (section.get("model_train") or {}).items()]
    algs = sorted({alg for _, alg, _ in entries if alg != "default"})
    for alg in algs:
        crosses = {k: r for k, r in declared_bounds(alg).items() if "*" in k}
        factors = {f.strip() for k in crosses for f in k.split("*")}
        own = grids.get(alg)
        grid_of = getattr(paper, "grid", None)  # the paper's own expansion of a product grid {key: [values]}
        where_grid = [name, "grids", alg if own is not None else "default"]
        listed = own if own is not None else grids.get("default")
        if isinstance(listed, dict) and callable(grid_of):
            values = [(where_grid, v) for v in grid_of(alg)]
        else:
            values = [([*where_grid, i], v) for i, v in enumerate(listed or []) if isinstance(listed, list)]
        values = values or [([name, "fixed", alg], {})]
        fixes = [([name, "fixed", alg], fixed.get(alg) or {})]
        fixes += [([name, "model_fixed", m, alg], {**(fixed.get(alg) or {}), **((algs_m or {}).get(alg) or {})})
                  for m, algs_m in (section.get("model_fixed") or {}).items() if alg in (algs_m or {})]
        for where, value in values:
            if not isinstance(value, dict):
                continue
            for fwhere, fx in fixes:
                if not isinstance(fx, dict):
                    continue
                if own is not None:
                    gap = cell_gap(alg, [*fx, *value])
                    if gap is not None and gap.startswith("its factory needs"):
                        raise config_error(where, f"{alg!r} needs more than this grid value and {_dotted(fwhere)} "
                                                  f"give: {gap} (the cell would be n/a)")
                for _, base in bases:
                    merged = {**base, **fx, **value}
                    for _, msg in registry.range_errors(crosses, merged):
                        in_fixed = sorted(factors & set(fx))
                        at = where if (own is not None and factors & set(value)) or not in_fixed else \
                            [*fwhere, in_fixed[0]]
                        raise config_error(at, f"{msg}, in the cell of {_dotted(where)} with {_dotted(fwhere)} and the "
                                         f"common round (a cross-knob range declared where {alg!r} is registered)")


def check_paper_section(name: str, section: Any, paper: Any) -> None:
    """The paper's own checks of its section as written (:meth:`fedshift.contract.Paper.check_raw_section`).

    What only one paper's layout gives a meaning to (participants per round against that paper's clients, the
    protocols of the shifts it configures) is the plug-in's to check; validation knows no paper by name.

    Raises
    ------
    ConfigError
        Whatever the plug-in raises, naming the key path.
    """
    hook = getattr(paper, "check_raw_section", None)
    if callable(hook) and isinstance(section, dict):
        hook(name, section)


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
                    raise config_error(["datasets", name, "files", i, "urls", j],
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
        ``claims.<paper>[i].quantity.table`` for a path that leaves ``results/tables/`` (once the papers' own
        checks have passed, :func:`check_claim_tables` refuses a table no paper's output writes).
    """
    claims = config.get("claims")
    if not isinstance(claims, dict):
        return
    for paper, items in claims.items():
        if paper not in papers:
            raise config_error(["claims", paper], f"{paper!r} is not a paper of this workflow (papers: "
                                                  f"{sorted(papers)}); its claims would never be judged")
        for i, c in enumerate(items or []):
            table = ((c or {}).get("quantity") or {}).get("table") if isinstance(c, dict) else None
            if isinstance(table, str):
                parts = Path(table).parts
                if (not table.startswith(CLAIM_TABLES) or ".." in parts or "\\" in table
                        or Path(table).is_absolute()):
                    raise config_error(["claims", paper, i, "quantity", "table"],
                                 f"{table!r} is not a file under {CLAIM_TABLES} (a claim reads only the "
                                 "pipeline's own tables)")
    from fedshift.claims import validate_claims

    try:
        validate_claims(claims)
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        msg = str(err)
        raise ConfigError(f"config error at {msg}" if msg.startswith("claims.") else f"config error at claims: {msg}"
                          ) from err



def check_run_algorithms(paper: Any) -> None:
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



def check_dataset_plugins(config: dict[str, Any]) -> None:
    """Every dataset a dataset plug-in registers can be prepared: it has a decoder (``DatasetFacts.loader``).

    A built-in name has its own (:data:`fedshift.data.prepare.PREPARERS`, ``IMAGE_FILE_PREPARERS``, ``GENERATED``);
    a plug-in's dataset without one would fail only in its ``prepare`` job.

    Raises
    ------
    ConfigError
        At ``dataset_plugins[i]``, naming the plug-in file and the dataset.
    """
    targets = config.get("dataset_plugins")
    if not isinstance(targets, list):
        return
    from fedshift.data.prepare import GENERATED, IMAGE_FILE_PREPARERS, PREPARERS
    from fedshift.data.registry import FACTS, load_plugins

    loaded = load_plugins(targets)
    for i, target in enumerate(targets):
        for name in loaded.get(target, ()):
            if FACTS[name].loader is None and name not in {*PREPARERS, *IMAGE_FILE_PREPARERS, *GENERATED}:
                shown = Path(target).resolve() if target.endswith(".py") else target
                raise config_error(["dataset_plugins", i], f"plug-in {shown} registers dataset {name!r} without a "
                                                          "decoder (DatasetFacts.loader): its raw files could never be "
                                                          "prepared")


def _output_files(papers: Any) -> set[str]:
    """Every file the papers' enabled outputs write."""
    return {f for paper in papers.values() for o in paper.outputs() for f in o.files.values()}


def _writable_tables(config: dict[str, Any], papers: Any) -> set[str]:
    """Every file some paper's output writes, with its selection as configured, left to its default (``outputs`` or
    ``build`` removed: every output), ``build`` set to every output the section defines, or ``outputs`` set to every
    name its schema allows: the tables a claim could ever read."""
    import copy

    from fedshift.contract import load_papers
    from fedshift.errors import load_yaml

    files = _output_files(papers)
    for name, paper in papers.items():
        variants = []
        for key in ("outputs", "build"):  # the selection keys of the shipped papers
            if key in (config.get(name) or {}):
                variants.append(copy.deepcopy(config))
                variants[-1][name].pop(key)
        section = config.get(name) or {}
        if isinstance(section.get("outputs"), dict) and "build" in section:  # every output it defines, built
            variants.append(copy.deepcopy(config))
            variants[-1][name]["build"] = list(section["outputs"])
        schema = load_yaml(paper.resolve_path(paper.schema)) if paper.schema is not None else {}
        enum = (((schema.get("properties") or {}).get("outputs") or {}).get("items") or {}).get("enum")
        if enum:
            variants.append(copy.deepcopy(config))
            variants[-1].setdefault(name, {})["outputs"] = list(enum)
        for cfg in variants:
            try:
                files |= {f for o in load_papers(cfg)[name].outputs() for f in o.files.values()}
            except Exception:  # noqa: BLE001, S112 — a selection the paper does not take adds nothing
                continue
    return files


def check_claim_tables(config: dict[str, Any], papers: Any) -> None:
    """Every claim's ``quantity.table`` is written by some paper's output, under some choice of its outputs.

    Run after each paper's own checks (its outputs must be buildable). A claim's table may be another paper's
    output (one paper's claim may read a table another paper's runs make), never one no rule writes. So
    the check is conclusive only when every paper of the package is a plug-in of ``papers:`` (as in the workflow,
    which reads every ``config/papers/*.yaml``); a configuration of fewer papers is not refused for a table that
    a paper it leaves out may write (the ``claims`` target then reads "not built").

    Raises
    ------
    ConfigError
        At ``claims.<paper>[i].quantity.table``, listing that paper's tables.
    """
    claims = config.get("claims")
    if not isinstance(claims, dict):
        return
    tables = [([paper, i], c["quantity"]["table"]) for paper, items in claims.items() if paper in papers
              for i, c in enumerate(items or []) if isinstance(c, dict) and isinstance(c.get("quantity"), dict)
              and isinstance(c["quantity"].get("table"), str)]
    if not tables:
        return
    built = _output_files(papers)
    if all(t in built for _, t in tables):
        return
    shipped = {p.name for p in Path(__file__).resolve().parents[1].joinpath("papers").iterdir()
               if p.joinpath("paper.py").is_file()}
    if not shipped <= set(papers):
        return
    writable = _writable_tables(config, papers)
    for (paper, i), table in tables:
        if table not in writable:
            near = sorted(f for f in writable if f.startswith(f"{CLAIM_TABLES}{paper}/") and f.endswith(".csv"))
            raise config_error(["claims", paper, i, "quantity", "table"],
                         f"{table!r} is written by no output of any paper (the claim could never be computed); "
                         f"{paper}'s tables: {near}")
