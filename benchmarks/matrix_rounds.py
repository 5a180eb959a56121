"""Pilot for the shift matrix's benchmark scale: FedAvg's validation curve per (model, shift) and the rounds it picks.

Usage::

    nice -n 15 .venv/bin/python benchmarks/matrix_rounds.py [--out docs/results/matrix_pilot] [--seeds 900 901]
        [--max-rounds logreg=300 cnn2=120] [--step logreg=5 cnn2=2] [--presearch-rounds logreg=100 cnn2=30]
    .venv/bin/python benchmarks/matrix_rounds.py --choose-only --out docs/results/matrix_pilot   # re-pick from csv

Exploratory, validation data only (never a test population), on pilot seeds disjoint from every reported run. The
matrix is the quick scale's (``config/papers/shift_matrix.yaml`` with ``config/quick.yaml``: the data sizes and the
common round the benchmark scale keeps). Per (model, shift):

1. *η pre-search*: FedAvg at each client step of ``--etas`` (points of its grid ``grids.default``) for
   ``--presearch-rounds`` on the first pilot seed; the best validation score wins (ties: the smaller η). The
   benchmark tunes η by successive halving anyway; the pilot's η is the one that scores best early, as the
   halving's first rungs favour.
2. *Curve*: FedAvg at that η for R_max = ``--max-rounds`` on every pilot seed, the shift's primary validation metric
   every ``--step`` rounds (the adversarial shift: clean validation accuracy; its training population is clean and
   the attack only moves evaluation rows).
3. *Rounds*: :func:`fedshift.papers.shift_matrix.plateau.choose_rounds` on the mean curve; ``--cap`` bounds each
   model's rounds where the benchmark's CPU budget requires (the projection: ``benchmarks/shift_matrix_rounds.py
   --overlay config/benchmark.yaml --timings ...``), as ``benchmark_rounds``.

No two shifts share a curve: each draws its own clients and validation population (same dataset and split law
differ in sizes or partition, e.g. ``none_iid`` Fashion-MNIST i.i.d. vs ``adversarial`` MNIST Dirichlet(0.5)).

Writes ``presearch.csv`` (model, shift, eta, rounds, validation, cpu_seconds), ``curves.csv`` (model, shift, seed,
eta, round, validation, cpu_seconds: this process's CPU time since the curve began, evaluations included) and
``rounds.csv`` (model, shift, eta, step, max_rounds, rounds, score, best_after, third, plateau, benchmark_rounds,
cpu_per_round); one torch thread.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import pandas as pd
import torch

from fedshift.contract import deep_merge
from fedshift.core.rng import RoundKey
from fedshift.errors import load_yaml
from fedshift.io import atomic_write
from fedshift.papers.shift_matrix import cells
from fedshift.papers.shift_matrix.paper import ShiftMatrixPaper, load_images
from fedshift.papers.shift_matrix.plateau import choose_rounds, mean_curve

ROOT = Path(__file__).resolve().parents[1]


def _per_model(items: list[str], cast=int) -> dict[str, int]:
    return {k: cast(v) for k, v in (s.split("=", 1) for s in items)}


def _score(shift, module, params, instance, seed: int) -> float:
    """The shift's primary validation metric; clean accuracy on the adversarial shift."""
    from fedshift.models import forward

    if shift.kind == "adversarial":
        with torch.no_grad():
            pred = forward(module, params, instance.validation.x).argmax(1)
        return float((pred == instance.validation.y).float().mean())
    return float(shift.metric(module, params, instance.validation, role="validation", seed=seed)[shift.metrics()[0]])


def _train(paper, shift, instance, model: str, seed: int, eta: float, rounds: int, step: int):
    """Yield (round, validation score, CPU seconds so far) every ``step`` rounds of FedAvg at client step ``eta``."""
    module = cells.model_of(model, instance.image_side, instance.num_labels)
    alg, params0, clients = cells.setup_cell("fedavg", module, instance, seed, train=paper.train_of(model),
                                             fixed=paper.fixed_of("fedavg", model), value={"client_lr": eta})
    state, t0 = alg.init(params0), time.process_time()
    for r in range(rounds):
        state, _ = alg.apply(state, clients, RoundKey(seed, r))
        if (r + 1) % step == 0:
            params = alg.eval_params(state)
            finite = all(torch.isfinite(v).all() for v in params.values())
            yield r + 1, (_score(shift, module, params, instance, seed) if finite else math.nan), \
                time.process_time() - t0
            if not finite:
                return


def _write(df: pd.DataFrame, path: Path) -> None:
    with atomic_write(path) as fh:
        df.to_csv(fh, index=False, float_format="%.6g")


def choose(curves: pd.DataFrame, steps: dict[str, int], tolerance: float, cap: dict[str, int] | None = None
           ) -> pd.DataFrame:
    """rounds.csv's rows from the curves (:func:`choose_rounds` per (model, shift)).

    ``benchmark_rounds`` is ``rounds`` capped at ``cap[model]`` (the budget's cap; none: the rounds themselves).
    """
    cap = cap or {}
    out = []
    for (model, shift), g in curves.groupby(["model", "shift"], sort=False):
        c = choose_rounds(mean_curve(g.to_dict("records")), steps[model], plateau_tolerance=tolerance)
        last = g[g["round"] == g["round"].max()]
        out.append({"model": model, "shift": shift, "eta": g["eta"].iloc[0], "step": steps[model],
                    "max_rounds": int(g["round"].max()), "rounds": c.rounds, "score": c.score,
                    "best_after": c.best_after, "third": c.third, "plateau": c.plateau,
                    "benchmark_rounds": min(c.rounds, cap.get(model, c.rounds)),
                    "cpu_per_round": float((last["cpu_seconds"] / last["round"]).mean())})
    return pd.DataFrame(out)


def plan_shards(costs: Path, out: Path, overlays: list[str], budget: float) -> dict:
    """``shards.json`` and one overlay per shift (``active_shifts: [<shift>]``) from a cost estimate.

    ``costs``: the ``--json`` of ``benchmarks/shift_matrix_rounds.py`` run with ``overlays`` (its ``per_shift``
    training and evaluation CPU seconds; the job overhead spread evenly over the shards). Each shard's command
    trains and evaluates its shift's cells and builds the one-shift tables; its per-run ``metrics.csv`` and tables
    are what it commits.
    """
    import json

    est = json.loads(costs.read_text())
    out.mkdir(parents=True, exist_ok=True)
    shards: dict = {}
    names = list(est["per_shift"])
    for name, part in est["per_shift"].items():
        overlay = out / f"{name}.yaml"
        with atomic_write(overlay) as fh:
            fh.write(f"# Shard {name} of the shift matrix's benchmark scale (config/benchmark.yaml): its one shift.\n"
                     f"# Written by benchmarks/matrix_rounds.py --plan-shards.\nshift_matrix:\n"
                     f"  active_shifts: [{name}]\n")
        files = [*overlays, str(overlay.relative_to(ROOT))]
        cpu_h = (part["training"] + part["evaluation"] + est["job_overhead"] / len(names)) / 3600
        shards[name] = {
            "shift": name, "overlay": str(overlay.relative_to(ROOT)), "seeds": est.get("seed_ids", est["seeds"]),
            "projected_cpu_h": round(cpu_h, 2),
            "command": ("nice -n 10 snakemake --cores 2 shift_matrix --configfile " + " ".join(files)
                        + " --config data_mirror=<mirror>"),
            "commit": [f"results/runs/shift_matrix/{name}/*/seed~*/metrics.csv", "results/tables/shift_matrix/"],
            "snapshot_dir": f"docs/results/matrix_benchmark/{name}"}
    total = round(sum(s["projected_cpu_h"] for s in shards.values()), 2)
    meta = {"overlays": overlays, "costs": est["clock"] + " clock, " + str(costs.name), "budget_cpu_h": budget,
            "projected_cpu_h": total, "train": est["train"]}
    with atomic_write(out / "shards.json") as fh:
        fh.write(json.dumps({"_benchmark": meta, **shards}, indent=1) + "\n")
    return {"_benchmark": meta, **shards}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs/results/matrix_pilot")
    ap.add_argument("--seeds", type=int, nargs="+", default=[900, 901])
    ap.add_argument("--models", nargs="+", default=["logreg", "cnn2"])
    ap.add_argument("--shifts", nargs="*", default=None, help="default: every shift of the quick matrix")
    ap.add_argument("--max-rounds", nargs="+", default=["logreg=300", "cnn2=120"])
    ap.add_argument("--step", nargs="+", default=["logreg=5", "cnn2=2"])
    ap.add_argument("--presearch-rounds", nargs="+", default=["logreg=100", "cnn2=30"])
    ap.add_argument("--etas", type=float, nargs="+", default=[0.032, 0.1, 0.32, 1.0])
    ap.add_argument("--data", type=Path, default=ROOT / "data/prepared")
    ap.add_argument("--cap", nargs="*", default=[], metavar="MODEL=R",
                    help="the benchmark's largest rounds per model (its budget), e.g. cnn2=108: rounds.csv's "
                         "benchmark_rounds column")
    ap.add_argument("--choose-only", action="store_true", help="re-pick rounds.csv from the committed curves.csv")
    ap.add_argument("--plan-shards", type=Path, default=None, metavar="COSTS_JSON",
                    help="write config/benchmark_shards/ from a shift_matrix_rounds.py --json estimate, then stop")
    ap.add_argument("--budget", type=float, default=12.0, help="CPU-hours the benchmark run may take (--plan-shards)")
    args = ap.parse_args()
    if args.plan_shards is not None:
        plan = plan_shards(args.plan_shards, ROOT / "config/benchmark_shards",
                           ["config/quick.yaml", "config/experiments_together.yaml", "config/benchmark.yaml"],
                           args.budget)
        print(f"projected {plan['_benchmark']['projected_cpu_h']} CPU-h of {args.budget}")
        return
    torch.set_num_threads(1)
    section = deep_merge(load_yaml(ROOT / "config/papers/shift_matrix.yaml")["shift_matrix"],
                         load_yaml(ROOT / "config/quick.yaml")["shift_matrix"])
    tolerance = section["plateau_tolerance"]
    steps, r_max, r_pre = _per_model(args.step), _per_model(args.max_rounds), _per_model(args.presearch_rounds)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.choose_only:
        _write(choose(pd.read_csv(args.out / "curves.csv"), steps, tolerance, _per_model(args.cap)),
               args.out / "rounds.csv")
        return
    paper = ShiftMatrixPaper({"shift_matrix": section})
    names = args.shifts or list(paper.shifts)
    pre, curves = [], []
    for name in names:
        shift = paper.shifts[name]
        data = load_images({d: str(args.data / f"{d}.pt") for d in shift.datasets()})
        instances = {s: shift.instance(data, s, "cpu") for s in args.seeds}
        for model in args.models:
            seed0 = args.seeds[0]
            for eta in args.etas:
                for r, v, cpu in _train(paper, shift, instances[seed0], model, seed0, eta, r_pre[model],
                                        r_pre[model]):
                    pre.append({"model": model, "shift": name, "eta": eta, "rounds": r, "validation": v,
                                "cpu_seconds": cpu})
            got = pd.DataFrame([p for p in pre if p["model"] == model and p["shift"] == name])
            got = got.assign(v=got["validation"].fillna(-1.0)).sort_values(["v", "eta"], ascending=[False, True])
            eta = float(got["eta"].iloc[0]) if len(got) else min(args.etas)
            for seed in args.seeds:
                for r, v, cpu in _train(paper, shift, instances[seed], model, seed, eta, r_max[model], steps[model]):
                    curves.append({"model": model, "shift": name, "seed": seed, "eta": eta, "round": r,
                                   "validation": v, "cpu_seconds": cpu})
            last = [c for c in curves if c["model"] == model and c["shift"] == name]
            print(f"{name:24s} {model:7s} eta {eta:<6g} final {last[-1]['validation']:.3f} "
                  f"cpu/round {last[-1]['cpu_seconds'] / last[-1]['round']:.4f} s", flush=True)
        _write(pd.DataFrame(pre), args.out / "presearch.csv")  # each shift's rows as it ends
        _write(pd.DataFrame(curves), args.out / "curves.csv")
    _write(choose(pd.DataFrame(curves), steps, tolerance, _per_model(args.cap)), args.out / "rounds.csv")
    print(pd.read_csv(args.out / "rounds.csv").to_string(index=False))


if __name__ == "__main__":
    main()
