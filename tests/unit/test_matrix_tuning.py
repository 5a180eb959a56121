"""Issue 50, items 1 and 3: equal tuning by successive halving on validation, the grid-edge rate and tuning cost,
and the field's aggregates (IQM of the normalised score, probability of improvement, stratified bootstrap)."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from scipy import stats
from test_shift_matrix import SECTION, SHIFTS, _fake, paper, train_cell

from fedshift.errors import ConfigError
from fedshift.papers.shift_matrix import aggregate, cells, report, tuning_table
from fedshift.papers.shift_matrix.section import expand_grid
from fedshift.shifts import shift_of


def test_rungs_follow_successive_halving():
    """Jamieson & Talwalkar 2016 / Hyperband's inner loop: 9 values, η = 3: 9 to R/9, 3 to R/3, 1 to R."""
    assert cells.rungs(45, 9, 3) == [(5, 9), (15, 3), (45, 1)]
    assert cells.rungs(40, 9, 3) == [(4, 9), (13, 3), (40, 1)]
    assert cells.rungs(10, 1, 3) == [(10, 1)]
    assert cells.rungs(2, 9, 3) == [(1, 9), (2, 1)]          # a rung that cannot end later is left out
    # the rounds it trains: Σ_k n_k (r_k − r_{k−1}) = 9·5 + 3·10 + 1·30 = 105 of 9 · 45 = 405 for the whole grid
    plan = cells.rungs(45, 9, 3)
    assert sum(n * (end - prev) for (end, n), prev in zip(plan, [0] + [e for e, _ in plan], strict=False)) == 105
    with pytest.raises(ValueError):
        cells.rungs(10, 9, 1)


def test_successive_halving_keeps_the_best_on_validation_and_its_survivor_is_one_full_run():
    data = {"mnist": _fake("mnist"), "usps": _fake("usps"), "mnist_m": _fake("mnist_m")}
    inst = shift_of("mixture", SHIFTS["mixture"]).instance(data, 0)
    train = SECTION["train"] | {"rounds": 9}
    grid = [{"client_lr": v} for v in (0.001, 0.01, 0.03, 0.1, 0.3, 0.5, 0.003, 0.05, 0.2)]
    calls = []

    def score(module, params):  # validation accuracy, recorded to check that test data is never scored
        calls.append(id(params))
        from fedshift.models import forward
        with torch.no_grad():
            return float((forward(module, params, inst.validation.x).argmax(1) == inst.validation.y).double().mean())

    tuned = cells.successive_halving("fedavg", inst, 0, model="logreg", train=train, fixed={}, grid=grid,
                                     device="cpu", score=score, eta=3)
    assert sorted(tuned.rounds) == [1] * 6 + [3] * 2 + [9]                # 9 → 3 → 1 (rungs at 1, 3, 9 rounds)
    assert len(calls) == 9 + 3            # the last rung's lone survivor is scored by the evaluation, not here
    rung1 = [g for g, r in enumerate(tuned.rounds) if r >= 3]
    assert tuned.chosen in rung1 and all(tuned.params[g] is None for g in range(9) if g != tuned.chosen)
    # those kept after rung 0 scored at least as well there as every value dropped (by their rung-0 scores)
    dropped = [tuned.validation[g] for g in range(9) if tuned.rounds[g] == 1]
    assert max(dropped) <= min(score_at_rung0(grid, g, inst, train, score) for g in rung1) + 1e-12
    # the survivor's parameters are one uninterrupted run of its value (train_cell: setup_cell, then run_training)
    ((ref, _),) = train_cell("fedavg", inst, 0, model="logreg", train=train, fixed={},
                                   grid=[grid[tuned.chosen]], device="cpu")
    for k in ref:
        torch.testing.assert_close(tuned.params[tuned.chosen][k], ref[k], rtol=0, atol=0)
    assert tuned.cpu_seconds > 0
    exhaustive = cells.successive_halving("fedavg", inst, 0, model="logreg", train=train, fixed={}, grid=grid[:3],
                                          device="cpu", score=score, eta=None)
    assert exhaustive.rounds == [9, 9, 9]


def score_at_rung0(grid, g, inst, train, score):
    """The validation score of grid value g after the first rung (1 round)."""
    ((p, _),) = train_cell("fedavg", inst, 0, model="logreg", train=train | {"rounds": 1}, fixed={},
                                 grid=[grid[g]], device="cpu")
    return score(cells.model_of("logreg", 28, 10), p)


def test_product_grids_expand_and_count_towards_the_equal_budget():
    assert expand_grid({"client_lr": [0.03, 0.1, 0.3], "mu": [0.01, 0.1, 1.0]})[:4] == [
        {"client_lr": 0.03, "mu": 0.01}, {"client_lr": 0.03, "mu": 0.1}, {"client_lr": 0.03, "mu": 1.0},
        {"client_lr": 0.1, "mu": 0.01}]
    assert len(expand_grid({"mu": [[0.2, 0.2], [2.0, 2.0]], "client_lr": [0.1]})) == 2
    section = copy.deepcopy(SECTION) | {"grid_size": 4}
    section["grids"] = {"default": {"client_lr": [0.05, 0.1, 0.2, 0.4]},
                        "fedprox": {"client_lr": [0.05, 0.2], "mu": [0.01, 0.1]},
                        "fedpals": [{"lam": 0.0}, {"ess_fraction": 0.5}, {"lam": 0.5}, {"ess_fraction": 0.25}]}
    p = paper(section)
    p.validate()
    assert len(p.grid("fedprox")) == len(p.grid("fedavg")) == 4
    section["grids"]["fedprox"] = {"client_lr": [0.05, 0.2], "mu": [0.01, 0.1, 1.0]}
    with pytest.raises(ConfigError, match=r"grids\.fedprox: 6 values, but every method gets grid_size = 4"):
        paper(section).validate()


def test_the_configured_quick_grids_give_every_method_at_least_nine_configurations():
    from pathlib import Path

    from fedshift.contract import deep_merge

    root = Path(__file__).resolve().parents[2]
    section = deep_merge(yaml.safe_load((root / "config/papers/shift_matrix.yaml").read_text())["shift_matrix"],
                         yaml.safe_load((root / "config/quick.yaml").read_text())["shift_matrix"])
    p = paper(section)
    p.validate()
    for alg in p.algorithms():
        grid = p.grid(alg)
        assert len(grid) >= 9 and len({tuple(sorted(map(str, v.items()))) for v in grid}) == len(grid), alg
    assert section.get("tuning", {}).get("eta", 3) == 3


def test_grid_edge_rate_and_tuning_cost():
    grid = expand_grid({"client_lr": [0.03, 0.1, 0.3], "mu": [0.01, 0.1, 1.0]})
    assert tuning_table.on_edge({"client_lr": 0.1, "mu": 0.1}, grid) is False
    assert tuning_table.on_edge({"client_lr": 0.3, "mu": 0.1}, grid) and tuning_table.on_edge(
        {"client_lr": 0.1, "mu": 1.0}, grid)
    assert tuning_table.on_edge({"mu": [2.0, 2.0]}, [{"mu": [0.2, 0.2]}, {"mu": [2.0, 2.0]}])
    chosen = pd.DataFrame({"algorithm": ["a"] * 4 + ["b"] * 2, "grid": [4, 4, 5, 0, 4, 4], "column": "c",
                           "seed": [0, 1, 2, 3, 0, 1], "validation": [0.5] * 6, "test": [0.5] * 6})
    metrics = pd.DataFrame({"algorithm": ["a", "a", "b"], "role": "tuning", "metric": "cpu_seconds",
                            "value": [2.0, 3.0, 4.0]})
    tab = tuning_table.tuning(metrics, chosen, {"algorithms": ["a", "b"], "grids": {"a": grid, "b": grid}})
    a, b = tab.set_index("algorithm").loc["a"], tab.set_index("algorithm").loc["b"]
    assert (a["configurations"], a["cpu_seconds"], a["cells"], a["edge_rate"], a["flag"]) == (9, 5.0, 4, 0.5, "")
    assert a["edges"] == "client_lr low 0.25, mu high 0.25, mu low 0.25"   # grid 5 = (0.1, 1.0), 0 = (0.03, 0.01)
    assert tuning_table.edges({"client_lr": 0.3, "mu": 0.1}, grid) == {"client_lr": "high"}
    assert (b["edge_rate"], b["flag"]) == (0.0, "")
    chosen.loc[chosen["algorithm"] == "b", "grid"] = 8
    assert tuning_table.tuning(metrics, chosen, {"algorithms": ["b"], "grids": {"b": grid}})["flag"].tolist() == [
        "grid too narrow"]


def _chosen(values: dict[str, list[list[float]]]) -> pd.DataFrame:
    """Tidy chosen rows from algorithm → per column the seeds' test values."""
    rows = []
    for alg, cols in values.items():
        for c, seeds in enumerate(cols):
            rows += [{"column": f"c{c}", "algorithm": alg, "seed": s, "grid": 0, "validation": v, "test": v}
                     for s, v in enumerate(seeds)]
    return pd.DataFrame(rows)


def test_normalised_scores_put_chance_at_0_and_the_baseline_at_1():
    """Fixed references (tests/unit/test_matrix_norm.py has the pool-invariance): here, frames without a declared
    chance level, whose lower reference is 0."""
    chosen = _chosen({"fedavg": [[0.5, 0.5], [0.8, 0.8]], "x": [[0.6, 0.7], [0.7, 0.7]], "y": [[0.4, 0.4], [0.6, 0.6]]})
    params = {"baseline": "fedavg", "chance": {"c0": 0.1, "c1": 0.2}}
    norm = aggregate.normalised(chosen, params).groupby(["column", "algorithm"])["score"].mean()
    assert norm["c0", "fedavg"] == pytest.approx(1) and norm["c0", "x"] == pytest.approx((0.65 - 0.1) / 0.4)
    assert norm["c0", "y"] == pytest.approx(0.75)
    assert norm["c1", "fedavg"] == pytest.approx(1) and norm["c1", "y"] == pytest.approx(0.4 / 0.6)
    bare = aggregate.normalised(chosen, {"baseline": "fedavg"}).groupby(["column", "algorithm"])["score"].mean()
    assert bare["c0", "x"] == pytest.approx(0.65 / 0.5)                     # no chance given: 0


def test_iqm_and_probability_of_improvement_with_stratified_bootstrap_intervals():
    rng = np.random.default_rng(0)
    base = [list(0.5 + 0.01 * rng.standard_normal(5)) for _ in range(4)]
    better = [[v + 0.1 for v in col] for col in base]
    mixed = [list(np.array(col) + d) for col, d in zip(base, (0.1, -0.1, 0.1, -0.1), strict=True)]
    chosen = _chosen({"fedavg": base, "better": better, "mixed": mixed})
    agg = aggregate.aggregates(chosen, {"algorithms": ["fedavg", "better", "mixed"], "baseline": "fedavg"}).set_index(
        "algorithm")
    assert agg.loc["better", "p_improvement"] == 1.0 and agg.loc["mixed", "p_improvement"] == pytest.approx(0.5)
    assert np.isnan(agg.loc["fedavg", "p_improvement"])
    norm = aggregate.normalised(chosen, {"baseline": "fedavg"})
    mine = norm[norm["algorithm"] == "mixed"]["score"].to_numpy()
    assert agg.loc["mixed", "iqm"] == pytest.approx(stats.trim_mean(mine, 0.25))
    for alg in ("better", "mixed", "fedavg"):
        r = agg.loc[alg]
        assert r["iqm_low"] <= r["iqm"] <= r["iqm_high"] and (r["columns"], r["runs"]) == (4, 20)
    assert agg.loc["better", "iqm_low"] > agg.loc["mixed", "iqm_high"]    # separated beyond the intervals
    # each column's runs are separated (all above or all below): resampling within a column cannot move P
    assert agg.loc["mixed", "p_low"] == agg.loc["mixed", "p_high"] == 0.5
    again = aggregate.aggregates(chosen, {"algorithms": ["mixed"], "baseline": "fedavg"})
    assert again["iqm_low"].iloc[0] == agg.loc["mixed", "iqm_low"]        # seeded: reproducible


def test_the_table_output_writes_the_aggregates_and_the_tuning_table(tmp_path):
    chosen = _chosen({"fedavg": [[0.5, 0.52], [0.8, 0.79]], "x": [[0.6, 0.7], [0.7, 0.72]]})
    metrics = []
    for r in chosen.itertuples():
        for role in ("validation", "test"):
            metrics.append({"shift": r.column, "algorithm": r.algorithm, "seed": r.seed, "grid": 0, "rounds": 3,
                            "role": role, "metric": "acc", "value": r.test})
        metrics.append({"shift": r.column, "algorithm": r.algorithm, "seed": r.seed, "grid": -1, "rounds": 0,
                        "role": "tuning", "metric": "cpu_seconds", "value": 1.5})
    params = {"columns": [{"shift": c, "metric": "acc", "label": c} for c in ("c0", "c1")], "baseline": "fedavg",
              "algorithms": ["fedavg", "x"], "na": {}, "grids": {"fedavg": [{"client_lr": 0.1}],
                                                                 "x": [{"client_lr": 0.1}]}}
    files = {k: str(tmp_path / f"t.{k}") for k in ("csv", "md", "tex")}
    report.write("shift_matrix_table", pd.DataFrame(metrics), params, files)
    md = (tmp_path / "t.md").read_text()
    assert "IQM of normalised score" in md and "P(better than fedavg)" in md and "Agarwal et al." in md
    assert "grid-edge rate" in md and "| x " in md and "6 " in md.split("tuning CPU-s")[1]   # 4 runs × 1.5 s


def test_a_value_that_diverges_is_replaced_by_the_next_of_the_ranking():
    """Successive halving drops a diverged value and promotes the next one, so a cell keeps a result unless every
    value diverges (FedAvg at η = 1e38 overflows in its first round)."""
    data = {"mnist": _fake("mnist"), "usps": _fake("usps"), "mnist_m": _fake("mnist_m")}
    inst = shift_of("mixture", SHIFTS["mixture"]).instance(data, 0)
    train = SECTION["train"] | {"rounds": 9}
    grid = [{"client_lr": v} for v in (1e38, 0.1, 1e38)]

    def score(module, params):  # favours the diverging values at no rung: they have no score
        return 0.0

    tuned = cells.successive_halving("fedavg", inst, 0, model="logreg", train=train, fixed={}, grid=grid,
                                     device="cpu", score=score, eta=3)
    assert tuned.chosen == 1 and tuned.rounds[1] == 9 and {d["grid"] for d in tuned.diverged} == {0, 2}
    assert np.isnan(tuned.validation[0]) and tuned.params[1] is not None
    gone = cells.successive_halving("fedavg", inst, 0, model="logreg", train=train, fixed={}, grid=grid[:1],
                                    device="cpu", score=score, eta=3)
    assert gone.chosen is None and gone.params == [None]


def _configured(quick: bool):
    """The configured matrix section: the paper scale, or the quick scale over it."""
    from pathlib import Path

    from fedshift.contract import deep_merge

    root = Path(__file__).resolve().parents[2]
    section = yaml.safe_load((root / "config/papers/shift_matrix.yaml").read_text())["shift_matrix"]
    if quick:
        section = deep_merge(section, yaml.safe_load((root / "config/quick.yaml").read_text())["shift_matrix"])
    return paper(section)


@pytest.mark.parametrize("quick", [False, True])
def test_every_method_tunes_the_client_step_over_the_same_range_within_the_same_budget(quick):
    """One search space: every row's η lies in and spans FedAvg's [0.01, 1], log-evenly, in 9 configurations."""
    p = _configured(quick)
    p.validate()
    common = p.section["train"]["client_lr"]
    ranges, knobless = {}, []
    for alg in p.algorithms():
        grid = p.grid(alg)
        assert len(grid) == p.section["grid_size"] == 9, alg
        etas = sorted({v.get("client_lr", common) for v in grid})
        ranges[alg] = (min(etas), max(etas))
        steps = np.diff(np.log10(etas))
        assert np.allclose(steps, steps.mean(), atol=0.01), (alg, etas)    # log-even (to the grid's rounding)
        if len(etas) == 9:
            knobless.append(alg)
        else:
            assert etas == [0.01, 0.1, 1.0], (alg, etas)                   # 3 η × 3 of its own knob
            assert all(sum(v["client_lr"] == e for v in grid) == 3 for e in etas), alg
    assert set(ranges.values()) == {(0.01, 1.0)}, ranges
    assert {"fedavg", "fednova", "scaffold"} <= set(knobless)
    assert len(ranges) - len(knobless) >= 17                                # the methods with a knob of their own


@pytest.mark.parametrize("quick", [False, True])
def test_the_first_halving_cut_comes_at_5_percent_of_the_rounds_or_later(quick):
    p = _configured(quick)
    eta = (p.section.get("tuning") or {}).get("eta", 3)
    seen = {}
    for model in p.models:
        rounds = p.train_of(model)["rounds"]
        first = cells.rungs(rounds, p.section["grid_size"], eta)[0][0]
        assert first >= max(1, int(np.ceil(0.05 * rounds))) and first >= 1, (model, rounds, first)
        seen[model] = (rounds, first)
    # quick: MLR 40 rounds (cut at 4 ≥ 2), the CNN 6 (cut at 1 = ⌈0.3⌉); paper scale: the CNN's 200 (22 ≥ 10)
    assert seen == ({"logreg": (40, 4), "cnn2": (6, 1)} if quick else {"cnn2": (200, 22)})


def test_the_first_rung_floor_binds_where_successive_halving_would_cut_earlier():
    # 81 values, η = 3: R/81 ≈ 2 rounds of 200 would be 1 %: the first cut moves to ⌈5 % · 200⌉ = 10 rounds, and
    # the rung at R/27 ≈ 7 (now ≤ 10) merges into it
    assert cells.rungs(200, 81, 3) == [(10, 81), (22, 9), (67, 3), (200, 1)]
    assert cells.rungs(200, 81, 3, first_fraction=0.0) == [(2, 81), (7, 27), (22, 9), (67, 3), (200, 1)]
    assert cells.rungs(20, 9, 3, first_fraction=0.5) == [(10, 9), (20, 1)]
    assert cells.rungs(3, 9, 3)[0][0] == 1                                  # at least one round
    with pytest.raises(ValueError, match="first_fraction"):
        cells.rungs(20, 9, 3, first_fraction=1.5)


def test_equal_validation_scores_go_to_the_lower_validation_loss_not_the_grid_order():
    data = {"mnist": _fake("mnist"), "usps": _fake("usps"), "mnist_m": _fake("mnist_m")}
    inst = shift_of("mixture", SHIFTS["mixture"]).instance(data, 0)
    train = SECTION["train"] | {"rounds": 3}
    grid = [{"client_lr": v} for v in (1e-6, 0.3, 0.1)]     # the first barely moves from w₀: the highest loss

    def tied(module, params):                                # every value ties on the selection score
        return 0.5

    tuned = cells.successive_halving("fedavg", inst, 0, model="logreg", train=train, fixed={}, grid=grid,
                                     device="cpu", score=tied, eta=3)
    assert cells.rungs(3, 3, 3) == [(1, 3), (3, 1)] and tuned.validation == [0.5] * 3
    # the recorded losses are each value's validation cross-entropy after the first rung (one round)
    from fedshift.models import forward

    module = cells.model_of("logreg", inst.image_side, inst.num_labels)
    for g in range(3):
        ((p1, _),) = train_cell("fedavg", inst, 0, model="logreg", train=train | {"rounds": 1}, fixed={},
                                      grid=[grid[g]], device="cpu")
        expected = float(torch.nn.functional.cross_entropy(
            forward(module, p1, inst.validation.x),
            inst.validation.y))
        assert tuned.validation_loss[g] == pytest.approx(expected, rel=1e-6)
    losses = tuned.validation_loss
    assert len(set(losses)) == 3 and int(np.argmin(losses)) != 0          # grid order would pick value 0
    assert tuned.chosen == int(np.argmin(losses)) and tuned.rounds[tuned.chosen] == 3

    def lossy(module, params):                               # a real score still ranks before the loss
        return cells.validation_loss(module, params, inst.validation)

    worst = cells.successive_halving("fedavg", inst, 0, model="logreg", train=train, fixed={}, grid=grid,
                                     device="cpu", score=lossy, eta=3)
    assert worst.chosen == int(np.argmax(losses))


def test_a_cell_records_each_values_validation_loss_beside_its_score(monkeypatch):
    from test_shift_matrix import SHAPES

    from fedshift.papers.shift_matrix import paper as matrix_paper

    section = copy.deepcopy(SECTION) | {"active_shifts": ["mixture"], "algorithms": ["fedavg"], "grid_size": 3,
                                        "grids": {"default": [{"client_lr": v} for v in (0.01, 0.1, 1.0)]}}
    p = paper(section)
    p.validate()
    data = {n: _fake(n) for n in SHAPES}
    monkeypatch.setattr(matrix_paper, "load_images", lambda files: data)
    spec = next(r for r in p.runs() if r.seed == 0)
    fit = p.train(spec, dict.fromkeys(p.shifts["mixture"].datasets(), "-"), device=torch.device("cpu"),
                  checkpoint=None, fingerprint="")
    info = fit.info["models"]["logreg"]
    scored = [g for g, v in enumerate(info["validation_scores"]) if np.isfinite(v)]
    assert scored and all(np.isfinite(info["validation_losses"][g]) and info["validation_losses"][g] > 0
                          for g in scored)
    assert len(info["validation_losses"]) == 3 and info["selected_grid"] in range(3)
