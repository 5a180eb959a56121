r"""The final confirmatory design (``config/design/confirmatory.yaml``): settings, seeds, CPU plan, fixed before data.

Starts from the draft (:func:`design_draft.draft`: every row's seed count from the committed snapshot's spread by
:func:`fedshift.claims.design.seeds_for_precision`, never an earlier mean) and fixes what the draft leaves open:

* **Settings** (:func:`settings`, written to :data:`SETTINGS` on top of ``config/quick.yaml`` +
  ``config/decisive.yaml``): the paper's own for AFL, AgnosticFedAvg and WAFL (Fig. 4 both settings, Table 2 at
  200 rounds); FedPALS Fashion-MNIST reduced (150 rounds of E = 1, 200 examples a label); FedMM at the most rounds
  (a multiple of :data:`FEDMM_STEP`) whose plan fits :data:`BUDGET_CPU_H` with every experiment at :data:`FLOOR`
  seeds. Each row records its work ratio to the paper (:func:`fedshift.claims.work_ratio`: rounds × clients × local
  steps × data) and ``paper`` or ``reduced``.
* **Cost** (:func:`per_run_cost`). Per experiment, CPU seconds a run at a measured setting (:data:`MEASURED`, each
  with its source and machine kind; WAFL: :data:`WAFL_PER_ROUND`), scaled linearly in rounds × clients × local
  steps, Intel numbers × :data:`INTEL_TO_AMD` to put all on the 2-core AMD EPYC kind, plus job starts where the
  measurement leaves them out (:data:`START_S_PER_RUN`); runs a seed from the workflow's own plan
  (:func:`fedshift.claims.confirmatory.shard_targets`).
* **Cut.** ``n = max(FLOOR, min(n_precision, c))`` for every experiment, ``c`` the largest common cap ≤ 30 whose
  projected total fits the budget; then what is left of the budget raises the experiments cheapest a seed first, each
  up to its ``n_precision``. Never below :data:`FLOOR` seeds for a decided row.

Usage (repository root; reads only committed files, trains nothing)::

    python benchmarks/design_final.py --out config/design/confirmatory.yaml
    python -m fedshift.claims.confirmatory shards config/design/shards
"""

from __future__ import annotations

import argparse
import copy
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from claims_power import merged_config  # noqa: E402
from design_draft import OVERLAYS, draft, write_design  # noqa: E402

from fedshift.claims import work_ratio  # noqa: E402
from fedshift.claims.confirmatory import experiment_of, shard_targets  # noqa: E402
from fedshift.claims.design import expected_half_width, fresh_seeds, used_seeds  # noqa: E402

SETTINGS = "config/design/settings.yaml"
FINAL_OVERLAYS = [*OVERLAYS, SETTINGS]
#: FedMM's rounds: the largest multiple of this that fits the budget with every experiment at FLOOR seeds.
FEDMM_STEP, FEDMM_MIN_ROUNDS, FEDMM_PAPER_ROUNDS = 100, 400, 15000
_ROUNDS_200 = {"train": {"rounds": 200, "log_every": 20, "checkpoint_every": 100}}
_FEDPALS = {"samples_per_label": 200,
            "train": {"rounds": 150, "local_epochs": 1, "eval_every": 5, "checkpoint_every": 50}}


def settings(fedmm_rounds: int) -> dict[str, Any]:
    """The confirmatory settings overlay (:data:`SETTINGS`), on top of quick + decisive, FedMM at ``fedmm_rounds``.

    Paper settings: AFL Fashion-MNIST's 10,000 steps (T chosen in {3000, 10000} on validation, as at paper scale),
    WAFL's T = 200 rounds for Fig. 4 (quick settings) and Table 2 (AgnosticFedAvg's Fashion-MNIST and AFL Adult are at
    paper settings under quick already). Reduced: FedPALS Fashion-MNIST at the paper's 150 rounds of E = 1 on 200
    examples a label (paper ≈ 2,000); FedMM's digits at ``fedmm_rounds`` with η₃'s decay compressed to span the run,
    ρ = 1.05^(15000 / rounds), as ``config/fedmm_medium.yaml`` does for 400 rounds (ρ = 6.2317), evaluation every 25.
    """
    rho = round(1.05 ** (FEDMM_PAPER_ROUNDS / fedmm_rounds), 4)
    return {
        "afl": {"experiments": {"afl_fashion_mnist": {"train": {
            "rounds": 10000, "select": {"client_lr": [0.001, 0.01], "rounds": [3000, 10000],
                                        "iterate": ["averaged", "last"]}}}}},
        "wafl": {"experiments": {e: copy.deepcopy(_ROUNDS_200)
                                 for e in ("mnist", "da_mt_mm", "da_mt_up", "da_mm_up", "da_mm_mt")}},
        "fedpals": {"experiments": {e: copy.deepcopy(_FEDPALS) for e in ("fedpals_fmnist_c2", "fedpals_fmnist_c3")}},
        "fedmm": {"tasks": {"digits": {
            "train": {"rounds": fedmm_rounds, "eval_every": 25, "checkpoint_every": 100},
            "heads": {"dann": {"nu": 1.0, "eta3_decay": rho, "rounds": fedmm_rounds}}}}},
    }
BUDGET_CPU_H = 20.0
#: The most projected CPU-h one shard may take: its session must run it to its end and commit its tables, and a
#: session lasts at most 3 hours on a 2-core machine (≈ 5 CPU-h usable, less the session's own setup, data, tests
#: and commits); 3.0 leaves room for the projection to be 1.5 times short (FedMM's cost is extrapolated linearly
#: from 80-round runs). A shard above it is split into seed groups (fedshift.claims.confirmatory.seed_groups).
SHARD_CPU_H = 3.0
SHARD_RULE = ("a shard's session (at most 3 h on a 2-core machine, ≈ 5 CPU-h usable, less its own setup, data, tests "
              "and commits) must run the shard to its end and commit its per-run tables; 3.0 CPU-h leaves room for a "
              "projection 1.5 times short. A shard (the experiments one claim table reads together) projected above "
              "it is split into consecutive seed groups each within it (one seed's runs the smallest unit), their "
              "tables combined by python -m fedshift.claims.combine; added before any confirmatory run")
FLOOR = 5
MACHINE = "2-core AMD EPYC (no AVX-512), one job per (run id, seed)"
#: Intel Xeon → AMD EPYC for training: the decisive run of AFL, AgnosticFedAvg, FedPALS and WAFL took 3.19 CPU-h on
#: the Intel kind (docs/performance.md, Decisive scale), the first decisive run 3.33 CPU-h on the AMD kind
#: (docs/changelog.md) on about the same work (it had FedMM's 14 runs at 2 seeds, ≈ 0.44 CPU-h, where the Intel run
#: had 13 more seeds of FedPALS and WAFL, ≈ 0.40 CPU-h).
INTEL_TO_AMD = 3.33 / 3.19
#: Job starts and Snakemake, where a measured cost leaves them out (benchmark files, a paper's share of the jobs' own
#: CPU): 2 jobs a run (train, evaluate) × 5.0 CPU-s a job on the Intel kind (docs/performance.md, Decisive scale)
#: × 2.35 on the AMD kind (the same page: its start-up figures cost 2.1–2.6 times the Intel ones).
START_S_PER_RUN = 2 * 5.0 * 2.35
_PILOT = "config/decisive.yaml header: the quick pilot's benchmark files at 9032c6d, AMD EPYC, job starts included"
_WAFL = ("docs/results/snapshot/snapshot.json: WAFL 5,854.8 CPU-s over its 120 decisive runs, 10,000 run-rounds "
         "(24 × 60 mnist, 20 × 200 mnist_official, 76 × 60 Table 2) = 0.5855 CPU-s a run-round, Intel Xeon")
#: shard → (CPU-s a run at the measured setting, its kind, the overlays of that setting, source).
MEASURED: dict[str, tuple[float, str, list[str], str]] = {
    "afl__afl_adult": (40 / 4, "amd", OVERLAYS, f"{_PILOT}: 40 CPU-s a seed over its 4 runs"),
    "afl__afl_fashion_mnist": (20 / 2, "amd", OVERLAYS, f"{_PILOT}: 20 CPU-s a seed over its 2 runs at 3,000 steps"),
    "agnostic_fedavg__fmnist_client": (36 / 2, "amd", OVERLAYS, f"{_PILOT}: 36 CPU-s a seed over its 2 runs"),
    "agnostic_fedavg__fmnist_data": (47 / 2, "amd", OVERLAYS, f"{_PILOT}: 47 CPU-s a seed over its 2 runs"),
    "fedmm__digits": (113.0, "intel", OVERLAYS,
                      "docs/performance.md, Decisive scale: FedMM at 16 seeds, 113 CPU-s a run at 80 rounds (its "
                      "whole process tree, job start included), Intel Xeon; cross-check: the 400-round runs of "
                      "2026-11-24 (docs/changelog.md at 4a53782, medium scale) took ≈ 80 CPU-min for 9 runs, 533 "
                      "CPU-s a run, kind not recorded"),
    "fedpals__fedpals_fmnist_c2": (117 / 6, "intel", OVERLAYS,
                                   "config/decisive.yaml header: 117 CPU-s a seed (README quick run, FedPALS 39 %) "
                                   "over its 6 runs at 15 rounds of E = 5 on 100 examples a label, Intel Xeon"),
    "fedpals__fedpals_fmnist_c3": (117 / 6, "intel", OVERLAYS,
                                   "config/decisive.yaml header: 117 CPU-s a seed (README quick run, FedPALS 39 %) "
                                   "over its 6 runs at 15 rounds of E = 5 on 100 examples a label, Intel Xeon"),
}
#: WAFL: CPU-s a run-round (Intel), times each experiment's rounds.
WAFL_PER_ROUND = 5854.8 / 10000


def _rounds(config: Mapping[str, Any], paper: str, experiment: str) -> float:
    """An experiment's training rounds under a merged config (the experiment's, else its paper's defaults)."""
    p = config[paper]
    section = "tasks" if paper == "fedmm" else "experiments"
    exp = p[section][experiment]
    return float((exp.get("train") or {}).get("rounds") or p["defaults"]["train"]["rounds"])


def _ratio(claim: Mapping[str, Any], config: Mapping[str, Any], group: str) -> tuple[float, str]:
    return work_ratio(claim.get("work"), config, path=f"claims.{claim['id']}.work", group=group)


_CADENCE = {"seeds", "log_every", "checkpoint_every", "snapshot_every"}


def _same_but_seeds(a: Mapping[str, Any], b: Mapping[str, Any], seeds_key: str) -> bool:
    """Whether the experiment block of ``seeds_key`` is the same in both configs, seeds and logging cadence aside."""
    def strip(x: Any) -> Any:
        return {k: strip(v) for k, v in x.items() if k not in _CADENCE} if isinstance(x, Mapping) else x

    def block(cfg: Mapping[str, Any]) -> Any:
        node: Any = cfg
        for part in seeds_key.split(".")[:-1]:
            node = node[part]
        return strip(node)

    return block(a) == block(b)


def _claims_by_id(config: Mapping[str, Any]) -> dict[str, Any]:
    return {c["id"]: c for items in config["claims"].values() for c in items}


def per_run_cost(shard: str, claim: Mapping[str, Any], group: str, ref: Mapping[str, Any],
                 final: Mapping[str, Any]) -> tuple[float, str]:
    """CPU-s a run on the AMD kind at the final settings, and how it was found (measured setting, scaling)."""
    paper, experiment = shard.split("__")
    if paper == "wafl":
        r = _rounds(final, paper, experiment)
        return WAFL_PER_ROUND * r * INTEL_TO_AMD + START_S_PER_RUN, (
            f"{_WAFL}; × {r:g} rounds (linear), × {INTEL_TO_AMD:.3f} Intel → AMD, + {START_S_PER_RUN:g} CPU-s of job "
            "starts and Snakemake")
    cost, kind, _, source = MEASURED[shard]
    compute = dict(claim)  # computation: rounds × clients × local steps (the data fraction is in the steps already)
    if claim.get("work"):
        compute["work"] = {**claim["work"], **{side: {**claim["work"][side], "data_fraction": 1}
                                              for side in ("paper", "ours")}}
    w_ref, _ = _ratio(compute, ref, group)
    w_fin, _ = _ratio(compute, final, group)
    if math.isfinite(w_ref) and math.isfinite(w_fin) and w_ref > 0:
        scale, how = w_fin / w_ref, "rounds × clients × local steps"
    else:
        scale, how = _rounds(final, paper, experiment) / _rounds(ref, paper, experiment), "rounds"
    kind_f = INTEL_TO_AMD if kind == "intel" else 1.0
    text = source + (f"; × {scale:.3g} ({how} at these settings over the measured ones, linear)" if scale != 1
                     else "; measured at these settings")
    if kind_f != 1:
        text += f", × {INTEL_TO_AMD:.3f} Intel → AMD"
    starts = START_S_PER_RUN if paper == "fedpals" else 0.0  # the others' measured costs include their starts
    if starts:
        text += f", + {starts:g} CPU-s of job starts and Snakemake"
    return cost * scale * kind_f + starts, text


def _experiments(design: Mapping[str, Any], ref: Mapping[str, Any], fin: Mapping[str, Any],
                 paper_cfg: Mapping[str, Any], first_seed: int) -> dict[str, dict[str, Any]]:
    """Per experiment (shard): its seeds key, the precision rule's n, runs a seed, CPU-s a run and each row's work."""
    claims = _claims_by_id(fin)
    exps: dict[str, dict[str, Any]] = {}
    for c in design["claims"]:
        key = c["settings"]["seeds_key"]
        paper, experiment = experiment_of(key)
        group = c["rows"][0] if c["rows"] else ""
        w, w_text = _ratio(claims[c["id"]], fin, group)
        if math.isfinite(w):
            at = "paper" if math.isclose(w, 1.0) else "reduced"
        else:  # no work stated: at paper settings where the overlays change nothing of the experiment but its seeds
            at = "paper" if _same_but_seeds(fin, paper_cfg, key) else "reduced"
            w_text = ("the claim states no work; " + ("the overlays change only this experiment's seeds and "
                      "logging" if at == "paper" else "the overlays change this experiment's settings"))
        need = int(c["seeds"]["source"].split("needs ", 1)[1].split(" ", 1)[0])
        e = exps.setdefault(f"{paper}__{experiment}",
                            {"key": key, "need": 0, "claim": claims[c["id"]], "group": group, "work": {}})
        e["need"] = max(e["need"], need)
        e["work"][(c["id"], tuple(c["rows"]))] = {"ratio": None if not math.isfinite(w) else float(f"{w:.6g}"),
                                                  "at": at, "text": w_text}
    for shard, e in exps.items():
        paper, experiment = shard.split("__")
        cfg = copy.deepcopy(dict(fin))
        node = cfg
        for part in e["key"].split(".")[:-1]:
            node = node[part]
        node["seeds"] = [first_seed]
        e["runs_per_seed"] = len(shard_targets(cfg, paper, experiment))
        e["cpu_s_run"], e["source"] = per_run_cost(shard, e["claim"], e["group"], ref, fin)
    return exps


def final(root: Path = ROOT, *, first_seed: int = 1000,
          budget: float = BUDGET_CPU_H) -> tuple[dict[str, Any], dict[str, Any]]:
    """The final design and its settings overlay.

    The design is the draft at :data:`FINAL_OVERLAYS`, cut to the budget, with its cost plan; the overlay is
    :func:`settings` at the FedMM rounds chosen.
    """
    from fedshift.contract import deep_merge

    design = draft(root, first_seed=first_seed, cap=30)
    ref, paper_cfg = merged_config(OVERLAYS, root), merged_config([], root)

    def plan_at(rounds: int) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        fin = deep_merge(ref, settings(rounds))
        return fin, _experiments(design, ref, fin, paper_cfg, first_seed)

    def total(exps: Mapping[str, Mapping[str, Any]], cap: int, n: Mapping[str, int] | None = None) -> float:
        return sum((n or {}).get(k, max(FLOOR, min(e["need"], cap))) * e["runs_per_seed"] * e["cpu_s_run"]
                   for k, e in exps.items()) / 3600

    rounds = FEDMM_MIN_ROUNDS
    while rounds + FEDMM_STEP <= FEDMM_PAPER_ROUNDS and total(plan_at(rounds + FEDMM_STEP)[1], FLOOR) <= budget:
        rounds += FEDMM_STEP
    fin, exps = plan_at(rounds)
    cap = max([c for c in range(FLOOR, 31) if total(exps, c) <= budget], default=FLOOR)
    n_of = {k: max(FLOOR, min(e["need"], cap)) for k, e in exps.items()}
    for k in sorted(exps, key=lambda k: exps[k]["runs_per_seed"] * exps[k]["cpu_s_run"]):  # the rest, cheapest first
        while n_of[k] < exps[k]["need"] and total(exps, cap, {**n_of, k: n_of[k] + 1}) <= budget:
            n_of[k] += 1
    for c in design["claims"]:
        c["settings"]["overlays"] = list(FINAL_OVERLAYS)
        c["work"] = exps["__".join(experiment_of(c["settings"]["seeds_key"]))]["work"][(c["id"], tuple(c["rows"]))]
    used = used_seeds(root)
    plan = {}
    for shard, e in exps.items():
        n = n_of[shard]
        e["n"], e["seeds"] = n, fresh_seeds(n, used.get(e["key"], set()), first_seed)
        plan[shard] = {"seeds_key": e["key"], "seeds": n, "precision_n": e["need"], "runs": n * e["runs_per_seed"],
                       "cpu_s_per_run": round(e["cpu_s_run"], 1),
                       "cpu_h": round(n * e["runs_per_seed"] * e["cpu_s_run"] / 3600, 2), "source": e["source"]}
    for c in design["claims"]:
        e = exps["__".join(experiment_of(c["settings"]["seeds_key"]))]
        s = c["seeds"]
        s["n"], s["list"] = e["n"], list(e["seeds"])
        cut = (f"; cut to {e['n']} by the budget (common cap {cap}, then the budget left to the cheapest "
               "experiments first)" if e["n"] < e["need"] else "")
        s["source"] = (s["source"].split("; its experiment", 1)[0] + f"; its experiment trains the largest n of its "
                       f"rows ({e['need']}){cut}; expected half-width at n {e['n']}: "
                       f"{expected_half_width(s['sd'], s['sd_runs'], e['n'], sd_upper_confidence=0.8):.3g}")
    design["status"] = "final"
    design["description"] = ("Final confirmatory design, generated by benchmarks/design_final.py from committed files "
                             "and committed before any confirmatory run. " + design["description"].split(
                                 "confirmatory run. ", 1)[1])
    design["seed_rule"]["source"] += (f"; n_precision (at most cap) then cut to the budget: n = max({FLOOR}, "
                                      f"min(n_precision, c)) per experiment, c the largest common cap ≤ 30 whose "
                                      f"projected total fits {budget:g} CPU-h, "
                                      "then the budget left to the cheapest experiments first, each up to its "
                                      "n_precision (fixed before any confirmatory data; budget.rule)")
    design["budget"] = {"cpu_h": budget, "projected_cpu_h": round(total(exps, cap, n_of), 2), "machine": MACHINE,
                        "shard_cpu_h": SHARD_CPU_H, "shard_rule": SHARD_RULE,
                        "rule": (f"settings first: the paper's where they fit (AFL, AgnosticFedAvg, WAFL), FedPALS "
                                 f"Fashion-MNIST reduced ({SETTINGS}), FedMM at the most rounds (a multiple of "
                                 f"{FEDMM_STEP}, here {rounds}) whose plan fits {budget:g} CPU-h with every experiment "
                                 f"at {FLOOR} seeds; then seeds n = max({FLOOR}, min(n_precision, c)) for every "
                                 f"experiment, c the largest ≤ 30 that fits (here {cap}); the budget left raises the "
                                 f"cheapest experiments (CPU a seed) first, each up to its n_precision"),
                        "experiments": plan}
    return design, settings(rounds)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="-")
    ap.add_argument("--settings-out", default=str(ROOT / SETTINGS), help="where the settings overlay is written")
    ap.add_argument("--budget", type=float, default=BUDGET_CPU_H)
    args = ap.parse_args(argv)
    design, overlay = final(budget=args.budget)
    Path(args.settings_out).write_text(
        "# Settings of the confirmatory run, on top of config/quick.yaml and config/decisive.yaml (the seeds come from "
        "the\n# design's shard overlays). GENERATED by benchmarks/design_final.py with "
        "config/design/confirmatory.yaml;\n# what each value is and why: benchmarks/design_final.py (settings) and "
        "docs/results/design.md.\n"
        + yaml.safe_dump(overlay, sort_keys=False, width=118, default_flow_style=None), encoding="utf-8")
    write_design(design, FINAL_OVERLAYS, args.out,
                 "# FINAL confirmatory design (status: final). Generated by benchmarks/design_final.py from committed "
                 "files only;\n# committed before any confirmatory run; shards: python -m "
                 "fedshift.claims.confirmatory shards config/design/shards.\n# Hash: {hash}\n# Format and rules: "
                 "docs/results/design.md; loader and schema: fedshift.claims.design.\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
