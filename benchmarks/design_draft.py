r"""Draft the confirmatory design (``config/design/confirmatory.yaml``) from the committed snapshot's spread.

For every claim row with per-seed values in the committed snapshot (``docs/results/snapshot/tables``), the row's
sample sd over seeds (:func:`fedshift.claims.claim_sample`; a summarised difference: √(s_a² + s_b²)) and a target
half-width fixed by the claim's own pre-stated numbers give the seeds, by
:func:`fedshift.claims.design.seeds_for_precision`. The earlier runs' means play no part. The target half-width is
the smallest of: half the equivalence margin (an interval about 0 of that half-width fits inside the margin), half
the paper's number for the row (its effect, if real, clears 0), and the test's tolerance (where > 0). An experiment
trains the largest n of the rows that read it, on fresh seeds (:func:`fedshift.claims.design.fresh_seeds`, from
``--first-seed`` on, none that :func:`fedshift.claims.design.used_seeds` finds).

Usage (repository root; reads only committed files, trains nothing)::

    python benchmarks/design_draft.py --out config/design/confirmatory.yaml
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from claims_power import claim_rows, merged_config, seed_keys  # noqa: E402

from fedshift.claims import paper_number  # noqa: E402
from fedshift.claims.design import expected_half_width, fresh_seeds, seeds_for_precision, used_seeds  # noqa: E402

OVERLAYS = ["config/quick.yaml", "config/decisive.yaml"]
SNAPSHOT = "docs/results/snapshot"


def target_half_width(claim: Mapping[str, Any], group: str) -> tuple[float | None, str]:
    """The design's half-width for one row, from the claim's margin, paper number and tolerance (never data).

    Returns (None, reason) where the claim states none of them.
    """
    effect = claim.get("effect") or {}
    options = []
    if effect.get("margin") is not None:
        options.append((float(effect["margin"]) / 2, f"half the equivalence margin {effect['margin']:g}"))
    pv = paper_number(claim, group)
    if pv:
        options.append((abs(pv) / 2, f"half the paper's {pv:g}"))
    tol = float(claim["test"].get("tolerance", 0) or 0)
    if tol > 0:
        options.append((tol, f"the test's tolerance {tol:g}"))
    if not options:
        return None, "the claim states no margin, number or tolerance"
    return min(options)


def row_sd(sample: Mapping[str, Any]) -> tuple[float, int]:
    """The sample sd of a row's per-seed values (or of a summarised difference) and the runs behind it."""
    import numpy as np

    if sample["form"] == "runs":
        vals = np.asarray(sample["values"], dtype=float)
        return (float(vals.std(ddof=1)) if vals.size > 1 else float("nan")), int(vals.size)
    (_, sa, na), b = sample["a"], sample["b"]
    if b is None:
        return float(sa), int(na)
    _, sb, nb = b
    return math.sqrt(sa**2 + sb**2), int(min(na, nb))


def draft(root: Path = ROOT, *, first_seed: int = 1000, cap: int = 30, ucl: float = 0.8) -> dict[str, Any]:
    """The draft design (a mapping that :func:`fedshift.claims.design.validate_design` accepts)."""
    config = merged_config(OVERLAYS, root)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "results").mkdir()
        (Path(tmp) / "results" / "tables").symlink_to(root / SNAPSHOT / "tables")
        rows = claim_rows(config, Path(tmp))
    planned, skipped = [], []
    for r in rows:
        c, group = r["claim"], r["row"].split("[", 1)[1].rstrip("]") if "[" in r["row"] else ""
        if c.get("exact") or r["sample"] is None or r["prior"]:
            skipped.append((r["row"], "exact" if c.get("exact") else "no per-seed values in the snapshot"))
            continue
        sd, m = row_sd(r["sample"])
        h, h_src = target_half_width(c, group)
        if h is None or not math.isfinite(sd) or m < 2:
            skipped.append((r["row"], h_src if h is None else "fewer than 2 runs"))
            continue
        key = ".".join(seed_keys(c["quantity"]["table"], r["labels"], config)[0])
        n = seeds_for_precision(sd, m, h, sd_upper_confidence=ucl, cap=cap)
        planned.append({"row": r, "group": group, "sd": sd, "m": m, "h": h, "h_src": h_src, "key": key, "n": n})
    n_key: dict[str, int] = {}
    for p in planned:
        n_key[p["key"]] = max(n_key.get(p["key"], 0), p["n"])
    used = used_seeds(root)
    seeds_of = {k: fresh_seeds(n, used.get(k, set()), first_seed) for k, n in n_key.items()}
    claims = []
    for p in planned:
        c, effect = p["row"]["claim"], p["row"]["claim"].get("effect") or {}
        q = c["quantity"]
        comparison = " − ".join(
            ",".join(f"{k}={v}" for k, v in q[s].items()) if isinstance(q[s], Mapping) else str(q[s])
            for s in ("a", "b") if s in q)
        tol = effect.get("size_tolerance")
        claims.append({
            "id": c["id"],
            "rows": [p["group"]] if p["group"] else [],
            "confirmatory": True,
            "metric": q.get("description", q["table"]),
            "comparison": f"{comparison}; {q['table']}",
            "test": dict(c["test"]),
            "margin": {"value": effect.get("margin"),
                       "source": effect.get("reason", "claims config: no effect block (no margin)")},
            "size_tolerance": {"value": tol, "source": "claims config effect.size_tolerance" if tol is not None
                               else "none stated"},
            "settings": {"overlays": list(OVERLAYS), "seeds_key": p["key"]},
            "seeds": {"n": n_key[p["key"]], "list": list(seeds_of[p["key"]]), "half_width": round(p["h"], 6),
                      "sd": round(p["sd"], 6), "sd_runs": p["m"],
                      "source": (f"this row needs {p['n']} (sd {p['sd']:.3g} over {p['m']} snapshot seeds, "
                                 f"{ucl:.0%} upper limit; half-width {p['h']:g} = {p['h_src']}); "
                                 f"its experiment trains the largest n of its rows; expected half-width at n "
                                 f"{n_key[p['key']]}: "
                                 f"{expected_half_width(p['sd'], p['m'], n_key[p['key']], sd_upper_confidence=ucl):.3g}"
                                 + (" (the cap: the target is not reached)" if p["n"] >= cap else ""))},
            "decision_rule": ("fedshift.claims.effect_verdict on the 95 % Student-t interval over the listed seeds "
                              "(paired by seed where the table pairs); a decided verdict counts only if its "
                              "one-sided p-value survives the family's multiplicity procedure"),
        })
    return {
        "design": "confirmatory",
        "status": "draft",
        "version": 1,
        "description": ("DRAFT, generated by benchmarks/design_draft.py from the committed snapshot's spread. "
                        "The lead commits the final design (status: final) before any confirmatory run. Rows "
                        "left out: " + "; ".join(f"{r} ({why})" for r, why in skipped)),
        "interval": {"confidence": 0.95, "method": "Student t over seeds (paired t where the table pairs by seed; "
                                                   "Welch for two summarised cells), fedshift.claims.intervals"},
        "multiplicity": {
            "family": "confirmatory", "primary": "fdr_bh", "level": 0.05, "sensitivity": ["holm"],
            "p_value": ("one-sided t test against the test's decision boundary, on the side the verdict claims "
                        "over every confirmatory row; method names as statsmodels.stats.multitest.multipletests's (BH: "
                        "scipy.stats.false_discovery_control)"),
        },
        "seed_rule": {"method": "precision", "sd_upper_confidence": ucl, "cap": cap, "first_seed": first_seed,
                      "source": ("fedshift.claims.design.seeds_for_precision: sd over seeds from "
                                 f"{SNAPSHOT}/tables (earlier, exploratory runs), never their mean")},
        "claims": claims,
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="-")
    ap.add_argument("--first-seed", type=int, default=1000)
    ap.add_argument("--cap", type=int, default=30)
    args = ap.parse_args(argv)
    design = draft(first_seed=args.first_seed, cap=args.cap)
    write_design(design, OVERLAYS, args.out,
                 "# DRAFT confirmatory design (status: draft). Generated by benchmarks/design_draft.py from committed "
                 "files only;\n# the lead edits and commits the final one (status: final) before any confirmatory "
                 "run. Hash of this draft: {hash}\n# Format and rules: docs/results/design.md; loader and schema: "
                 "fedshift.claims.design.\n")
    return 0


def write_design(design: Mapping[str, Any], overlays: Sequence[str], out: str, header: str) -> None:
    """Validate a design and write it as YAML to ``out`` (``-``: standard output) under its comment ``header``.

    The design is validated against the claims of ``overlays``' merged config; ``{hash}`` in ``header`` becomes the
    design's hash.
    """
    from fedshift.claims.design import design_hash, validate_design

    validate_design(design, claims=merged_config(overlays)["claims"])
    body = yaml.safe_dump(dict(design), sort_keys=False, allow_unicode=True, width=118, default_flow_style=None)
    text = header.replace("{hash}", design_hash(design)) + body
    if out == "-":
        sys.stdout.write(text)
    else:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    raise SystemExit(main())
