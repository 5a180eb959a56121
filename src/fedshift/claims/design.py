"""A preregistered confirmatory design: the claims, margins, settings, seeds and decision rules fixed before the data.

Every verdict of the decisive scale so far was planned after its data were seen (the design log,
``docs/results/design.md``): margins and tolerances were chosen with the decisive numbers on record, FedMM was looked
at 1, 3, 2, 10 and 16 seeds and replanned between looks, three rows got seeds by hand, the pilot's seeds are part of
the decisive sample and the number of seeds came from the pilot's mean. Those verdicts are *exploratory*. A
confirmatory verdict (Nosek et al. 2018, "The preregistration revolution", PNAS 115(11), 2600–2606) needs:

1. one committed design file (``config/design/confirmatory.yaml``) that fixes, per claim row, the metric, the
   comparison, the test, the margin and size tolerance with their source, the settings (config overlays), an
   explicit list of seeds, the decision rule and the multiplicity policy (Benjamini–Hochberg at 5 % over the
   confirmatory family, Holm as sensitivity) — :func:`load_design` validates it against :data:`DESIGN_SCHEMA`
   (errors name the key path) and :func:`design_hash` fingerprints its canonical form;
2. fresh seeds: :func:`used_seeds` collects every seed an earlier run of each experiment used (the committed
   snapshot's per-run tables, ``docs/results/snapshot/snapshot.json`` and every scale overlay in ``config/``, where
   ``seeds: n`` trains seeds 0 … n − 1), and :func:`reused_seeds` lists any design seed among them;
3. seed counts from earlier runs' spread only (:func:`seeds_for_precision`: the smallest n whose 95 % interval's
   half-width, at an upper confidence limit of the earlier sd, is at most a half-width the design fixes), never
   from an earlier mean;
4. results that record the design's hash, and a judge that refuses any other (:func:`check_design`).

Nothing here trains or reads a model.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from fedshift.claims.seeds import (
    expected_half_width,
    fresh_seeds,
    reused_seeds,
    seeds_by_key,
    seeds_for_precision,
    used_seeds,
)

__all__ = ["DESIGN_SCHEMA", "DesignError", "DesignMismatchError", "canonical_form", "check_design",
           "confirmatory_overlay", "design_hash", "expected_half_width", "fresh_seeds", "load_design",
           "require_design", "reused_seeds", "seeds_by_key", "seeds_for_precision", "used_seeds", "validate_design"]

#: Multiplicity procedures the design may name (``statsmodels.stats.multitest.multipletests`` method names).
MULTIPLICITY_METHODS = ("fdr_bh", "holm", "bonferroni", "fdr_by")

_SOURCE = {"type": "string", "minLength": 3}
_NUMBER_WITH_SOURCE = {
    "type": "object", "additionalProperties": False, "required": ["value", "source"],
    "properties": {"value": {"type": ["number", "string", "null"]}, "source": _SOURCE},
}

#: JSON schema (draft 2020-12) of a design file.
DESIGN_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "required": ["design", "status", "version", "interval", "multiplicity", "seed_rule", "claims"],
    "properties": {
        "design": {"type": "string", "minLength": 1},
        "status": {"enum": ["draft", "final"]},
        "version": {"type": "integer", "minimum": 1},
        "description": {"type": "string"},
        "interval": {
            "type": "object", "additionalProperties": False, "required": ["confidence", "method"],
            "properties": {"confidence": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
                           "method": {"type": "string"}},
        },
        "multiplicity": {
            "type": "object", "additionalProperties": False,
            "required": ["family", "primary", "level", "sensitivity", "p_value"],
            "properties": {
                "family": {"const": "confirmatory"},
                "primary": {"enum": list(MULTIPLICITY_METHODS)},
                "level": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
                "sensitivity": {"type": "array", "items": {"enum": list(MULTIPLICITY_METHODS)}},
                "p_value": {"type": "string", "minLength": 3},
            },
        },
        "seed_rule": {
            "type": "object", "additionalProperties": False,
            "required": ["method", "sd_upper_confidence", "cap", "first_seed", "source"],
            "properties": {
                "method": {"const": "precision"},
                "sd_upper_confidence": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
                "cap": {"type": "integer", "minimum": 2},
                "first_seed": {"type": "integer", "minimum": 0},
                "source": _SOURCE,
            },
        },
        "budget": {
            "type": "object", "additionalProperties": False,
            "required": ["cpu_h", "projected_cpu_h", "machine", "rule", "experiments"],
            "properties": {
                "cpu_h": {"type": "number", "exclusiveMinimum": 0},
                "projected_cpu_h": {"type": "number", "minimum": 0},
                "machine": _SOURCE, "rule": _SOURCE,
                "shard_cpu_h": {"type": "number", "exclusiveMinimum": 0}, "shard_rule": _SOURCE,
                "experiments": {"type": "object", "additionalProperties": {
                    "type": "object", "additionalProperties": False,
                    "required": ["seeds_key", "seeds", "precision_n", "runs", "cpu_s_per_run", "cpu_h", "source"],
                    "properties": {"seeds_key": {"type": "string"}, "seeds": {"type": "integer", "minimum": 2},
                                   "precision_n": {"type": "integer", "minimum": 2},
                                   "runs": {"type": "integer", "minimum": 1},
                                   "cpu_s_per_run": {"type": "number", "minimum": 0},
                                   "cpu_h": {"type": "number", "minimum": 0}, "source": _SOURCE}}},
            },
        },
        "claims": {
            "type": "array", "minItems": 1,
            "items": {
                "type": "object", "additionalProperties": False,
                "required": ["id", "rows", "confirmatory", "metric", "comparison", "test", "margin",
                             "size_tolerance", "settings", "seeds", "decision_rule"],
                "properties": {
                    "id": {"type": "string", "pattern": "^[a-z0-9_]+$"},
                    "rows": {"type": "array", "items": {"type": "string"}},
                    "confirmatory": {"type": "boolean"},
                    "metric": {"type": "string", "minLength": 3},
                    "comparison": {"type": "string", "minLength": 3},
                    "test": {
                        "type": "object", "additionalProperties": False, "required": ["op", "value"],
                        "properties": {"op": {"type": "string"}, "value": {"type": "number"},
                                       "tolerance": {"type": "number", "minimum": 0}},
                    },
                    "margin": _NUMBER_WITH_SOURCE,
                    "size_tolerance": _NUMBER_WITH_SOURCE,
                    "settings": {
                        "type": "object", "additionalProperties": False, "required": ["overlays", "seeds_key"],
                        "properties": {"overlays": {"type": "array", "minItems": 1, "items": {"type": "string"}},
                                       "seeds_key": {"type": "string", "pattern": r"^[a-z0-9_]+(\.[a-z0-9_]+)+$"}},
                    },
                    "seeds": {
                        "type": "object", "additionalProperties": False,
                        "required": ["n", "list", "half_width", "sd", "source"],
                        "properties": {
                            "n": {"type": "integer", "minimum": 2},
                            "list": {"type": "array", "minItems": 2, "uniqueItems": True,
                                     "items": {"type": "integer", "minimum": 0}},
                            "half_width": {"type": "number", "exclusiveMinimum": 0},
                            "sd": {"type": "number", "minimum": 0},
                            "sd_runs": {"type": "integer", "minimum": 2},
                            "source": _SOURCE,
                        },
                    },
                    "decision_rule": {"type": "string", "minLength": 3},
                    "work": {
                        "type": "object", "additionalProperties": False, "required": ["ratio", "at", "text"],
                        "properties": {"ratio": {"type": ["number", "null"], "exclusiveMinimum": 0},
                                       "at": {"enum": ["paper", "reduced"]}, "text": {"type": "string"}},
                    },
                    "note": {"type": "string"},
                },
            },
        },
    },
}


class DesignError(ValueError):
    """A design file that does not validate; the message names the key path (``claims[3].seeds.list``)."""


class DesignMismatchError(RuntimeError):
    """Results made under another design (or none): the judge refuses them."""


def _key_path(path: Iterable[Any]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<root>"


def validate_design(design: Mapping[str, Any], *, claims: Mapping[str, Any] | None = None) -> None:
    """Check a design against :data:`DESIGN_SCHEMA` and its cross-field rules.

    Parameters
    ----------
    design : mapping
        The parsed design file.
    claims : mapping, optional
        The claims config (``{paper: [claim, ...]}``); when given, every design claim id must be one of its ids and
        its test must equal the claim's ``test``.

    Raises
    ------
    DesignError
        Naming the key path of the first problem: a schema violation (``jsonschema``, the error deepest in the
        document first), a seed list whose length is not ``seeds.n``, claims that share a ``settings.seeds_key``
        with different overlays or seed lists, a duplicate (id, rows), an unknown claim id or a test that differs
        from the claims config's.
    """
    import jsonschema

    validator = jsonschema.Draft202012Validator(DESIGN_SCHEMA)
    errors = sorted(validator.iter_errors(design), key=lambda e: (-len(e.absolute_path), list(map(str, e.path))))
    if errors:
        err = errors[0]
        raise DesignError(f"design: {_key_path(err.absolute_path)}: {err.message}")
    by_key: dict[str, tuple[int, list[str], list[int]]] = {}
    seen: set[tuple[str, tuple[str, ...]]] = set()
    known = {c["id"]: c for items in (claims or {}).values() for c in items}
    for i, c in enumerate(design["claims"]):
        path = f"claims[{i}]"
        seeds = c["seeds"]
        if len(seeds["list"]) != seeds["n"]:
            raise DesignError(f"design: {path}.seeds.list: {len(seeds['list'])} seeds, but seeds.n is {seeds['n']}")
        ident = (c["id"], tuple(c["rows"]))
        if ident in seen:
            raise DesignError(f"design: {path}: claim {c['id']!r} rows {c['rows']} listed twice")
        seen.add(ident)
        key = c["settings"]["seeds_key"]
        if key in by_key:
            j, overlays, seed_list = by_key[key]
            if overlays != c["settings"]["overlays"]:
                raise DesignError(f"design: {path}.settings.overlays: differ from claims[{j}]'s, which trains the "
                                  f"same seeds key {key!r}")
            if seed_list != seeds["list"]:
                raise DesignError(f"design: {path}.seeds.list: differs from claims[{j}]'s, which trains the same "
                                  f"seeds key {key!r} (one experiment trains one seed list)")
        else:
            by_key[key] = (i, c["settings"]["overlays"], seeds["list"])
        if claims is not None:
            if c["id"] not in known:
                raise DesignError(f"design: {path}.id: {c['id']!r} is not a claim of the claims config")
            if dict(c["test"]) != dict(known[c["id"]]["test"]):
                raise DesignError(f"design: {path}.test: {dict(c['test'])} differs from the claims config's "
                                  f"{dict(known[c['id']]['test'])}")


def load_design(path: str | Path, *, claims: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Read and validate a design file (YAML).

    Raises
    ------
    DesignError
        If the file is missing, is not a YAML mapping, or fails :func:`validate_design` (the key path is named).
    """
    path = Path(path)
    if not path.is_file():
        raise DesignError(f"design: {path}: no such file")
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, Mapping):
        raise DesignError(f"design: {path}: not a YAML mapping")
    validate_design(data, claims=claims)
    return dict(data)


def canonical_form(design: Mapping[str, Any]) -> str:
    """The design as canonical JSON: keys sorted, no whitespace, UTF-8 text, floats as Python's ``repr``.

    Comments, key order and YAML layout do not change it; any value does.
    """
    return json.dumps(design, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def design_hash(design: Mapping[str, Any]) -> str:
    """``sha256:<hex>`` of :func:`canonical_form`: the identity every confirmatory result records."""
    return "sha256:" + hashlib.sha256(canonical_form(design).encode("utf-8")).hexdigest()


# ---- the judge ------------------------------------------------------------------------------------------------------

def _records(results: str | Path | Iterable[Mapping[str, Any]]) -> list[tuple[str, Any]]:
    """(where, recorded design hash) of every run of a results tree, or of given records."""
    if isinstance(results, str | Path):
        root = Path(results)
        runs = sorted((root / "results" / "runs").glob("**/run.json")) or sorted(root.glob("**/run.json"))
        return [(str(p.relative_to(root)), json.loads(p.read_text(encoding="utf-8")).get("design_hash"))
                for p in runs]
    return [(str(r.get("run", r.get("path", f"record {i}"))), r.get("design_hash")) for i, r in enumerate(results)]


def _some(items: Sequence[str], shown: int = 5) -> str:
    """The first ``shown`` items, and how many more."""
    more = f" and {len(items) - shown} more" if len(items) > shown else ""
    return ", ".join(items[:shown]) + more


def check_design(results: str | Path | Iterable[Mapping[str, Any]], design: Mapping[str, Any], *,
                 allow_draft: bool = False) -> str:
    """Refuse results that were not made under this design; return its hash when every one was.

    Parameters
    ----------
    results : path or iterable of mapping
        A results tree (every ``results/runs/**/run.json`` is read) or the runs' records (``run.json`` contents or
        claims rows), each with a ``design_hash`` key.
    design : mapping
        The design (:func:`load_design`).
    allow_draft : bool
        Judge under a design whose ``status`` is ``draft`` (tests only: a confirmatory verdict needs ``final``).

    Returns
    -------
    str
        :func:`design_hash` of ``design``.

    Raises
    ------
    DesignMismatchError
        If the design is a draft (and ``allow_draft`` is false), there are no runs, or any run records no design
        hash or another one; the message names the run and both hashes.
    """
    if design.get("status") != "final" and not allow_draft:
        raise DesignMismatchError(f"design {design.get('design')!r} is status {design.get('status')!r}: "
                                  "confirmatory verdicts need the committed final design")
    expected = design_hash(design)
    records = _records(results)
    if not records:
        raise DesignMismatchError("check_design: no runs to judge")
    missing = [where for where, h in records if not h]
    if missing:
        raise DesignMismatchError(f"check_design: {len(missing)} run(s) record no design_hash (exploratory runs, not "
                                  f"made under the confirmatory overlay): {_some(missing)}")
    other = [(where, h) for where, h in records if h != expected]
    if other:
        raise DesignMismatchError(f"check_design: {len(other)} run(s) were made under another design: "
                                  f"{_some([f'{where} records {h}' for where, h in other])}; the design judged is "
                                  f"{expected}; a changed design needs new runs")
    return expected


def require_design(recorded: str, path: str | Path, *, claims: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The committed design at ``path``, if ``recorded`` is its hash and it is final (the workflow's start check).

    A run whose config names ``design_hash`` starts only under the committed final design of that hash; the
    workflow (``workflow/rules/claims.smk``) exits with this error otherwise.

    Raises
    ------
    DesignError
        If the design file does not validate (:func:`load_design`).
    DesignMismatchError
        If ``recorded`` differs from the file's :func:`design_hash` (a changed design needs new runs), or the design
        is a draft.
    """
    design = load_design(path, claims=claims)
    expected = design_hash(design)
    if recorded != expected:
        raise DesignMismatchError(f"{recorded} is not the committed design's hash ({expected}, {path}): a changed "
                                  "design needs new runs")
    if design["status"] != "final":
        raise DesignMismatchError(f"{path} is status {design['status']!r}; confirmatory runs need the committed final "
                                  "design")
    return design


def confirmatory_overlay(design: Mapping[str, Any]) -> dict[str, Any]:
    """The config overlay a confirmatory run adds on top of the design's overlays: the hash and each seeds key's list.

    ``design_hash`` is the top-level config key that :func:`require_design` checks when the workflow starts and every
    training job records in its ``run.json``. The seed lists replace the scale overlays' counts (:mod:`fedshift.seeds`:
    a ``seeds`` key takes a count or an explicit list); :mod:`fedshift.claims.confirmatory` splits the overlay into one
    per experiment (a shard) with its targets.

    Returns
    -------
    dict
        ``{"design_hash": ..., <paper>: {...: {"seeds": [seed, ...]}}}``.
    """
    out: dict[str, Any] = {"design_hash": design_hash(design)}
    for c in design["claims"]:
        node = out
        *parents, last = c["settings"]["seeds_key"].split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = copy.deepcopy(c["seeds"]["list"])
    return out
