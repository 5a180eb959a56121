"""The shift matrix's benchmark scale (config/benchmark.yaml): fresh seeds, and rounds the pilot's curves choose.

The rounds criterion (:func:`fedshift.papers.shift_matrix.plateau.choose_rounds`) on small curves, then the committed
configuration against the committed pilot (docs/results/matrix_pilot/curves.csv, benchmarks/matrix_rounds.py):
the overlay passes the matrix's schema and raw-section checks, lists at least 5 seeds disjoint from the pilot's and
the quick scale's, and gives each model the largest of its shifts' rounds recomputed from the curves.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pandas as pd
import pytest

from fedshift.claims.rejudge import merged_config
from fedshift.errors import ConfigError, load_yaml
from fedshift.papers.shift_matrix import section as matrix_section
from fedshift.papers.shift_matrix.plateau import choose_rounds, mean_curve
from fedshift.validation.schemas import validate_strict

ROOT = Path(__file__).resolve().parents[2]
PILOT = ROOT / "docs" / "results" / "matrix_pilot"
OVERLAYS = ["config/quick.yaml", "config/experiments_together.yaml", "config/benchmark.yaml"]
SCHEMA = ROOT / "src" / "fedshift" / "papers" / "shift_matrix" / "schema.yaml"


def test_the_smallest_round_near_the_later_best_and_past_the_gate_is_chosen():
    # rises to 0.80 by 30, 0.805 at 60: 15 is within a point of the later best but moved 0.78 − 0.40 from 5; 30 is
    # the first candidate (multiple of 3 × 5) near the best whose move from 10 (0.76 → 0.80) stays within 0.05
    curve = {5: 0.40, 10: 0.76, 15: 0.78, 20: 0.79, 25: 0.795, 30: 0.80, 35: 0.80, 40: 0.80, 45: 0.80, 50: 0.80,
             55: 0.80, 60: 0.805}
    c = choose_rounds(curve, 5)
    assert (c.rounds, c.plateau) == (30, True) and c.third == 0.76 and c.best_after == 0.805
    # the gate binds: 15 is near the later best, but 15/3 = 5 scored 0.40 (a move of 0.38 > 0.05)
    steep = {5: 0.40, 10: 0.79, 15: 0.80, 20: 0.80, 25: 0.80, 30: 0.80}
    assert choose_rounds(steep, 5).rounds == 30
    assert choose_rounds(steep, 5, plateau_tolerance=0.5).rounds == 15
    # still climbing at R_max: the last candidate, flagged
    climbing = {r: r / 100 for r in range(2, 61, 2)}
    c = choose_rounds(climbing, 2)
    assert (c.rounds, c.plateau) == (60, False)


def test_a_curve_with_a_gap_or_no_candidate_is_refused():
    with pytest.raises(ValueError, match="lacks rounds"):
        choose_rounds({5: 0.5, 15: 0.6}, 5)
    with pytest.raises(ValueError, match="no multiple"):
        choose_rounds({5: 0.5, 10: 0.6}, 5)
    with pytest.raises(ValueError, match="step must be"):
        choose_rounds({5: 0.5}, 0)


def test_the_mean_curve_averages_seeds_and_counts_a_diverged_score_as_zero():
    rows = [{"round": 2, "validation": 0.5}, {"round": 2, "validation": 0.7}, {"round": 4, "validation": float("nan")},
            {"round": 4, "validation": 0.8}]
    assert mean_curve(rows) == pytest.approx({2: 0.6, 4: 0.4})


@pytest.fixture(scope="module")
def benchmark() -> dict:
    return merged_config(OVERLAYS, ROOT)


@pytest.fixture(scope="module")
def curves() -> pd.DataFrame:
    return pd.read_csv(PILOT / "curves.csv")


def test_the_benchmark_overlay_passes_the_matrix_checks_with_fresh_seeds(benchmark, curves):
    section = benchmark["shift_matrix"]
    validate_strict(section, SCHEMA, "shift_matrix")
    matrix_section.check_raw_section("shift_matrix", section)
    assert benchmark["scale"] == "benchmark"
    seeds = matrix_section.seed_ids(section)
    quick = merged_config(["config/quick.yaml"], ROOT)["shift_matrix"]
    assert len(seeds) >= 5
    assert not set(seeds) & set(matrix_section.seed_ids(quick))        # the quick matrix's 0 … 2
    assert not set(seeds) & set(curves["seed"].unique())                # the pilot's


def test_the_benchmark_rounds_are_the_pilot_choice_recomputed_from_its_curves(benchmark, curves):
    """Each shift's R per model is the criterion's on the committed curves, capped at the model's budget rounds."""
    from fedshift.papers.shift_matrix.paper import ShiftMatrixPaper

    section = benchmark["shift_matrix"]
    committed = pd.read_csv(PILOT / "rounds.csv")
    paper = ShiftMatrixPaper({"shift_matrix": section})
    assert set(committed["shift"]) == set(paper.shifts) == set(section["shift_rounds"])   # a curve for every shift
    for model in paper.models:
        cap = paper.train_of(model)["rounds"]             # train / model_train: the model's largest R (its cap)
        chosen = {}
        for shift, g in curves[curves["model"] == model].groupby("shift"):
            row = committed[(committed["model"] == model) & (committed["shift"] == shift)].iloc[0]
            c = choose_rounds(mean_curve(g.to_dict("records")), int(row["step"]),
                              plateau_tolerance=section["plateau_tolerance"])
            assert (c.rounds, c.plateau) == (row["rounds"], row["plateau"]), (model, shift)
            chosen[shift] = min(c.rounds, cap)
            assert section["shift_rounds"][shift][model] == chosen[shift] == row["benchmark_rounds"], (model, shift)
        assert cap == max(chosen.values()), model


def _run_or_refused(section: dict, key: str, applied) -> None:
    """The plan applies ``section``'s ``key`` and validate passes (were it ever ignored, validate refuses it naming
    shift_matrix.<key>: the guard of :func:`fedshift.papers.shift_matrix.section.validate`)."""
    from fedshift.papers.shift_matrix.paper import ShiftMatrixPaper

    paper = ShiftMatrixPaper({"shift_matrix": section})
    assert applied(paper.runs()), key
    matrix_section.validate(paper)


def test_listed_seeds_are_run_or_refused_never_replaced(benchmark):
    """A list of seeds trains those seeds, or validation refuses it naming shift_matrix.seeds (never 0 … n − 1)."""
    section = {k: v for k, v in copy.deepcopy(benchmark["shift_matrix"]).items() if k != "shift_rounds"}
    _run_or_refused(section, "seeds", lambda runs: sorted({s.seed for s in runs}) == matrix_section.seed_ids(section))


def test_shift_rounds_are_trained_or_refused_never_ignored(benchmark):
    section = dict(copy.deepcopy(benchmark["shift_matrix"]), seeds=2)
    wanted = section["shift_rounds"]
    _run_or_refused(section, "shift_rounds", lambda runs: all(
        t["rounds"] == wanted[s.experiment][m] for s in runs for m, t in s.hparams["models"].items()))
    from fedshift.papers.shift_matrix.paper import ShiftMatrixPaper

    for bad, where in [({"nowhere": {"cnn2": 3}}, r"shift_rounds\.nowhere: unknown shift"),
                       ({"label": {"resnet": 3}}, r"shift_rounds\.label\.resnet: not a model")]:
        with pytest.raises(ConfigError, match=where):
            matrix_section.check_shift_rounds(ShiftMatrixPaper({"shift_matrix": dict(section, shift_rounds=bad)}),
                                              {})


def test_the_shards_cover_every_shift_once_within_the_budget(benchmark):
    shards = json.loads((ROOT / "config" / "benchmark_shards" / "shards.json").read_text())
    meta = shards.pop("_benchmark")
    overlays = {name: load_yaml(ROOT / s["overlay"])["shift_matrix"]["active_shifts"] for name, s in shards.items()}
    from fedshift.papers.shift_matrix.paper import ShiftMatrixPaper

    covered = [x for v in overlays.values() for x in v]
    assert sorted(covered) == sorted(ShiftMatrixPaper({"shift_matrix": benchmark["shift_matrix"]}).shifts)
    # a shard plans the very runs (paths, hyper-parameters) the whole matrix plans for its shift: shards add up
    counted = dict(benchmark["shift_matrix"], seeds=2)       # the plan's runs, whichever form of seeds it takes
    whole = {s.path: s.hparams for s in ShiftMatrixPaper({"shift_matrix": counted}).runs()}
    for name, shifts in overlays.items():
        shard = ShiftMatrixPaper({"shift_matrix": counted | {"active_shifts": shifts}})
        part = {s.path: s.hparams for s in shard.runs()}
        assert part and all(whole[p] == h for p, h in part.items()), name
        assert {p for p in whole if p.split("/")[1] in shifts} == set(part), name
    assert sum(s["projected_cpu_h"] for s in shards.values()) == pytest.approx(meta["projected_cpu_h"], abs=0.02)
    assert meta["projected_cpu_h"] <= meta["budget_cpu_h"] == 12
