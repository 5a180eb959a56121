"""Seconds per round of every running shift-matrix cell, per model, and the matrix's wall time from them.

Usage::

    .venv/bin/python benchmarks/shift_matrix_rounds.py [--scale paper|quick] [--rounds 3] [--device auto]
                                                       [--threads 1] [--cores 2] [--job-overhead 3.3]
                                                       [--overlay config/benchmark.yaml] [--clock wall|cpu]
                                                       [--json out.json]

Builds the configured matrix (``config/papers/shift_matrix.yaml``, with ``config/quick.yaml`` for ``--scale quick``)
on synthetic images of the common format (the cost of a round does not depend on the pixels). For every model of
the matrix and every algorithm it times ``--rounds`` rounds (after one warm-up round) under the first shift whose
cell runs (PGD-based methods cost the same under every shift; Stochastic-AFL runs under the mixture shift, the DANN
family under a domain shift), through the cells' own setup (:func:`fedshift.papers.shift_matrix.cells.setup_cell`:
cell hooks included). It also times one evaluation of a trained-size model per (shift, model): the validation
metric (computed twice: at training, for the selection, and in the evaluation job) and the test metric (PGD
attacks included). With successive halving (``tuning.eta``, :func:`~fedshift.papers.shift_matrix.cells.rungs`:
n_k values trained to r_k rounds at rung k, scored on validation after it but the last rung's lone survivor, which
the evaluation job scores) the estimate is

    training   = Σ_cells Σ_models seeds × Σ_k n_k (r_k − r_{k−1}) × (s per round of the cell)
    evaluation = Σ_cells Σ_models seeds × (Σ_k n_k × validation + test seconds of the shift and model)
    jobs       = (2 × cells, or shifts with ``--together``, + 2 × datasets + outputs + 1) × job_overhead
    wall       ≈ (training + evaluation + jobs) / cores

(without halving, ``tuning.eta: null``: grid_size × rounds and grid_size × (2 × validation + test)),
with ``--job-overhead`` the CPU seconds one job costs before and after its work (3.3 s measured on the quick
matrix, README "Shift matrix") and ``--cores`` jobs in parallel. One torch thread per job unless ``--threads``.
On ``--device cuda`` the CUDA clock is synchronised around every timing; ``--cores`` should then be 1.
``--overlay`` merges further overlays' ``shift_matrix:`` sections over the scale's (the benchmark scale:
``--scale quick --overlay config/benchmark.yaml``, whose ``shift_rounds`` give each shift's cells their own R);
``--clock cpu`` times with this process's CPU clock (user + system) instead of the wall clock, the measure of a
CPU-hour budget on a loaded machine; ``--timings`` reuses an earlier ``--json``'s times. The estimate is also
printed per shift (training + evaluation CPU seconds, job overhead apart), and ``--json`` writes it with the
per-round and per-evaluation times.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from fedshift.errors import load_yaml
from fedshift.contract import deep_merge
from fedshift.core.rng import RoundKey
from fedshift.papers.shift_matrix import cells
from fedshift.papers.shift_matrix.paper import ShiftMatrixPaper
from fedshift.provenance import pick_device
from fedshift.seeds import seed_list

ROOT = Path(__file__).resolve().parents[1]


def _fake(n_train: int, n_test: int = 10000) -> dict:
    g = torch.Generator().manual_seed(0)
    return {"x_train": torch.randint(0, 255, (n_train, 28, 28), generator=g, dtype=torch.uint8),
            "y_train": torch.arange(n_train) % 10,
            "x_test": torch.randint(0, 255, (n_test, 28, 28), generator=g, dtype=torch.uint8),
            "y_test": torch.arange(n_test) % 10}


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", choices=["paper", "quick"], default="paper")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cores", type=int, default=1, help="jobs in parallel (the estimate divides by it)")
    ap.add_argument("--job-overhead", type=float, default=3.3, help="CPU seconds per job outside its work")
    ap.add_argument("--together", action="store_true",
                    help="one job per shift (config/experiments_together.yaml), not two per cell")
    ap.add_argument("--overlay", type=Path, nargs="*", default=[],
                    help="further overlays whose shift_matrix: section is merged over the scale's, in order")
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="cpu: this process's user + system time (a CPU budget on a loaded machine)")
    ap.add_argument("--json", type=Path, default=None, help="write the timings and the per-shift estimate here")
    ap.add_argument("--timings", type=Path, default=None,
                    help="a --json file of an earlier measurement: its times, nothing timed again (other rounds or "
                         "seeds of the same cells)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dev = pick_device(args.device)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    section = load_yaml(ROOT / "config/papers/shift_matrix.yaml")["shift_matrix"]
    if args.scale == "quick":
        section = deep_merge(section, load_yaml(ROOT / "config/quick.yaml")["shift_matrix"])
    for overlay in args.overlay:
        section = deep_merge(section, load_yaml(overlay).get("shift_matrix") or {})
    seed_ids = seed_list(section["seeds"])
    # the cells, whichever form of seeds the plan takes (listed seeds cost what as many counted ones do)
    paper = ShiftMatrixPaper({"shift_matrix": dict(section, seeds=len(seed_ids))})
    shifts = paper.shifts
    data = {d: _fake(60000) for d in sorted({d for sh in shifts.values() for d in sh.datasets()})}
    instances = {name: sh.instance(data, 0, dev) for name, sh in shifts.items()}
    every = paper.runs()
    runs = [s for s in every if s.seed == min(r.seed for r in every)]
    per_round, per_eval = {}, {}
    if args.timings is not None:
        old = json.loads(args.timings.read_text())
        per_round = {tuple(k.split("/", 1)): v for k, v in old["seconds_per_round"].items()}
        per_eval = {tuple(k.split("/", 1)): (v["validation"], v["test"]) for k, v in old["evaluation_seconds"].items()}
    for model in paper.models if args.timings is None else []:
        train = paper.train_of(model)
        for alg in sorted({s.run for s in runs if model in s.hparams["models"]}):
            shift = next(s.experiment for s in runs if s.run == alg and model in s.hparams["models"])
            module = cells.model_of(model, instances[shift].image_side, instances[shift].num_labels).to(dev)
            fixed = paper.fixed_of(alg, model)
            algo, params0, clients = cells.setup_cell(alg, module, instances[shift], 0, train=train, fixed=fixed,
                                                      value=paper.grid(alg)[0])
            state, _ = algo.apply(algo.init(params0), clients, RoundKey(0, 0))
            _sync(dev)
            t0 = clock()
            for r in range(1, args.rounds + 1):
                state, _ = algo.apply(state, clients, RoundKey(0, r))
            _sync(dev)
            per_round[model, alg] = (clock() - t0) / args.rounds
        for name, sh in shifts.items():
            inst = instances[name]
            module = cells.model_of(model, inst.image_side, inst.num_labels).to(dev)
            params = {k: v.detach() for k, v in module.named_parameters()}
            _sync(dev)
            t0 = clock()
            sh.metric(module, params, inst.validation, role="validation", seed=0)
            _sync(dev)
            t1 = clock()
            sh.metric(module, params, inst.test, role="test", seed=0)
            _sync(dev)
            per_eval[model, name] = (t1 - t0, clock() - t1)  # validation, test
    seeds, size = len(seed_ids), section["grid_size"]
    eta = (section.get("tuning") or {}).get("eta", 3)
    training = evaluation = 0.0
    per_shift: dict[str, dict[str, float]] = {name: {"training": 0.0, "evaluation": 0.0} for name in shifts}
    for s in runs:
        before = training, evaluation
        for model, train in s.hparams["models"].items():
            # shift_rounds (the benchmark scale): that shift's own R, whether or not the plan applies it yet
            own = ((section.get("shift_rounds") or {}).get(s.experiment) or {}).get(model)
            train = dict(train, rounds=own) if own else train
            val, test = per_eval[model, s.experiment]
            if eta:
                plan = cells.rungs(train["rounds"], size, eta)
                rounds = sum(n * (end - prev) for (end, n), prev in zip(plan, [0] + [e for e, _ in plan],
                                                                        strict=False))
                scored = sum(n for _, n in plan) - (plan[-1][1] == 1) + 1  # a lone survivor: scored in evaluation
                training += seeds * rounds * per_round[model, s.run]
                evaluation += seeds * (scored * val + test)
            else:
                training += seeds * size * train["rounds"] * per_round[model, s.run]
                evaluation += seeds * size * (2 * val + test)
        per_shift[s.experiment]["training"] += training - before[0]
        per_shift[s.experiment]["evaluation"] += evaluation - before[1]
    cells_n = len({(s.experiment, s.run) for s in runs})
    work_jobs = len(shifts) if args.together else 2 * cells_n
    jobs = work_jobs + 2 * len(paper.datasets()) + len(paper.outputs()) + 1  # + download, prepare; the paper rule
    overhead = jobs * args.job_overhead
    print(f"scale {args.scale}, models {paper.models}, device {dev}, {args.threads} thread(s), {seeds} seeds, "
          f"grid {size}, successive halving η = {eta}")
    for model in paper.models:
        print(f"model {model}: train {paper.train_of(model)}")
        for (m, alg), sec in sorted(per_round.items()):
            if m == model:
                print(f"  {alg:16s} {sec:8.3f} s/round")
        for (m, name), (val, test) in sorted(per_eval.items()):
            if m == model:
                print(f"  eval {name:24s} validation {val:7.3f} s, test {test:7.3f} s")
    total = training + evaluation + overhead
    print(f"cells {cells_n}, jobs {jobs}; CPU seconds: training {training:.0f}, evaluation {evaluation:.0f}, "
          f"job overhead {overhead:.0f} ({args.job_overhead} s/job)")
    print(f"estimated wall time on {args.cores} parallel job slot(s): {total / args.cores / 60:.1f} min "
          f"({total / args.cores / 3600:.2f} h)")
    for name, part in per_shift.items():
        print(f"  shift {name:24s} training {part['training']:8.0f} s, evaluation {part['evaluation']:7.0f} s, "
              f"{(part['training'] + part['evaluation']) / 3600:.2f} CPU-h")
    if args.json is not None:
        out = {"scale": args.scale, "overlays": [str(o) for o in args.overlay], "clock": args.clock,
               "device": str(dev), "seeds": seeds, "seed_ids": seed_ids,
               "train": {m: paper.train_of(m) for m in paper.models}, "shift_rounds": section.get("shift_rounds"),
               "seconds_per_round": {f"{m}/{a}": v for (m, a), v in sorted(per_round.items())},
               "evaluation_seconds": {f"{m}/{n}": {"validation": v[0], "test": v[1]}
                                      for (m, n), v in sorted(per_eval.items())},
               "per_shift": per_shift, "training": training, "evaluation": evaluation, "job_overhead": overhead,
               "jobs": jobs}
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
