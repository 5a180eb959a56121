"""The power calculation behind config/decisive.yaml (benchmarks/claims_power.py), on synthetic pilots."""

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

from fedshift.claims import claim_sample, t_interval

ROOT = Path(__file__).resolve().parents[2]


def _load():
    spec = importlib.util.spec_from_file_location("claims_power", ROOT / "benchmarks" / "claims_power.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["claims_power"] = mod
    spec.loader.exec_module(mod)
    return mod


cp = _load()
GREATER0 = {"op": "greater", "value": 0}
AROUND20 = {"op": "within", "value": 20, "tolerance": 10}


def values_with(mean, sd, n):
    """n values whose sample mean and sd (ddof 1) are exactly mean and sd."""
    z = np.linspace(-1.0, 1.0, n)
    z = (z - z.mean()) / z.std(ddof=1)
    return mean + sd * z


def runs_sample(mean, sd, n):
    return {"form": "runs", "values": values_with(mean, sd, n), "method": "t", "keys": None}


def test_literal_rule_gives_the_n_where_the_interval_first_clears():
    # d chosen so that t_0.975,9 · 1/√10 < d ≤ t_0.975,8 · 1/√9: the interval first excludes 0 at n = 10
    d = stats.t.ppf(0.975, 9) / math.sqrt(10) + 1e-6
    assert d <= stats.t.ppf(0.975, 8) / 3
    p = cp.plan_claim("c", ["e"], runs_sample(d, 1.0, 3), GREATER0, n_pilot=3, cap=30, power=0.0, half_width=1.0)
    assert (p.rule, p.n) == ("clear", 10)
    # and at that n the interval claims.py computes, from values with that mean and sd, does exclude 0
    mean, lo, hi = t_interval(values_with(d, 1.0, 10))
    assert lo > 0 and t_interval(values_with(d, 1.0, 9))[1] <= 0


def test_power_rule_matches_guenthers_closed_form():
    # Guenther (1981): n = (z_0.975 + z_power)² σ² / Δ² + z_0.975² / 2, for the two-sided one-sample t test
    sd, delta, power = 1.0, 0.25, 0.8
    z_a, z_b = stats.norm.ppf(0.975), stats.norm.ppf(power)
    closed = (z_a + z_b) ** 2 * sd**2 / delta**2 + z_a**2 / 2
    p = cp.plan_claim("c", ["e"], runs_sample(delta, sd, 5), GREATER0, n_pilot=5, cap=400, power=power,
                      half_width=1.0)
    assert p.rule == "clear"
    assert abs(p.n - math.ceil(closed)) <= 1
    assert p.power_at(p.n) >= power > p.power_at(p.n - 1)


def test_clear_probability_is_the_share_of_intervals_that_exclude_the_boundary():
    rng = np.random.default_rng(0)
    n, d, sd = 6, 0.8, 1.0
    x = rng.normal(d, sd, size=(20000, n))
    half = stats.t.ppf(0.975, n - 1) * x.std(axis=1, ddof=1) / math.sqrt(n)
    share = float(np.mean(x.mean(axis=1) - half > 0))
    assert cp.clear_probability(n, d, sd) == pytest.approx(share, abs=0.01)


def test_a_mean_on_the_boundary_is_planned_for_the_stated_half_width():
    sd, w = 2.0, 1.0
    p = cp.plan_claim("c", ["e"], runs_sample(0.0, sd, 5), GREATER0, n_pilot=5, cap=30, power=0.8, half_width=w)
    assert p.rule == "bound"
    assert cp.t_half_width(p.n, sd) <= w < cp.t_half_width(p.n - 1, sd)
    assert p.n == 18   # t_0.975,17 · 2/√18 = 0.995; n = 17: 1.028
    capped = cp.plan_claim("c", ["e"], runs_sample(0.0, sd, 5), GREATER0, n_pilot=5, cap=10, power=0.8,
                           half_width=w)
    assert (capped.rule, capped.n) == ("bound", 10)


def test_a_within_test_clears_its_nearer_edge_and_pilot_seeds_are_a_floor():
    within = {"op": "within", "value": 20, "tolerance": 10}      # boundaries 10 and 30
    p = cp.plan_claim("c", ["e"], runs_sample(26.0, 1.0, 5), within, n_pilot=5, cap=30, power=0.8, half_width=1)
    assert p.boundary == 30 and p.distance == pytest.approx(4.0)
    assert (p.rule, p.n) == ("pilot", 5)                       # 5 seeds already clear by far: no more planned


def test_welch_rows_use_both_sides_spread():
    sample = {"form": "summary", "a": (1.0, 1.0, 5), "b": (0.0, 1.0, 5)}
    p = cp.plan_claim("c", ["e"], sample, {"op": "at_least", "value": 0}, n_pilot=5, cap=60, power=0.0,
                      half_width=1)
    assert p.sd == pytest.approx(math.sqrt(2))
    assert cp.welch_half_width(p.n, 1.0, 1.0) < 1.0 <= cp.welch_half_width(p.n - 1, 1.0, 1.0)


def test_one_pilot_run_and_exact_claims():
    one = cp.plan_claim("c", ["e"], runs_sample(5.0, 1.0, 2) | {"values": np.array([5.0])}, GREATER0, n_pilot=1,
                        cap=12, power=0.8, half_width=1)
    assert (one.rule, one.n) == ("no spread", 12)
    exact = cp.plan_claim("c", ["e"], None, GREATER0, n_pilot=1, cap=12, power=0.8, half_width=1, exact=True)
    assert (exact.rule, exact.n) == ("exact", 1)


def test_the_sample_is_the_one_claims_py_reads():
    t = pd.DataFrame({"model": ["a"] * 3 + ["b"] * 3, "seed": [0, 1, 2, 2, 1, 0], "value": [3, 4, 8, 1, 1, 1]})
    s = claim_sample(t, {"a": {"model": "a"}, "b": {"model": "b"}})
    assert s["form"] == "runs" and sorted(s["values"].tolist()) == [2.0, 3.0, 7.0]


def _pilot(tmp_path, lead_sd=1.0):
    """A pilot with two experiments: AFL Adult (a clear lead, cheap) and Fashion-MNIST (a lead on the boundary)."""
    rows = []
    for exp_table, mean, sd in (("table1_adult_runs", 0.02, 0.01 * lead_sd), ("table2_fashion_mnist_runs", 0.0, 0.02)):
        diffs = values_with(mean, sd, 3)
        for s, d in enumerate(diffs):
            rows.append((exp_table, {"model": "afl", "seed": s, "column": "D", "value": 0.5 + d}))
            rows.append((exp_table, {"model": "uniform", "seed": s, "column": "D", "value": 0.5}))
    for name in ("table1_adult_runs", "table2_fashion_mnist_runs"):
        f = tmp_path / "results" / "tables" / "afl" / f"{name}.csv"
        f.parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame([r for t, r in rows if t == name]).to_csv(f, index=False)
    for exp, cpu in (("afl_adult", 30.0), ("afl_fashion_mnist", 300.0)):
        for run in ("afl", "uniform"):
            b = tmp_path / "results" / "benchmarks" / "afl" / "train" / exp / run / "seeds.tsv"
            b.parent.mkdir(parents=True, exist_ok=True)
            b.write_text(f"s\tcpu_time\n1\t{cpu / 2}\n")
            for s in range(3):
                (tmp_path / "results" / "runs" / "afl" / exp / run / f"seed~{s}").mkdir(parents=True)
    claim = {"where": "w", "quote": "q", "paper_value": 1.0, "test": GREATER0}
    config = {"claims": {"afl": [
        {**claim, "id": "adult", "quantity": {"table": "results/tables/afl/table1_adult_runs.csv", "scale": 100,
                                              "a": {"model": "afl"}, "b": {"model": "uniform"}}},
        {**claim, "id": "fmnist", "quantity": {"table": "results/tables/afl/table2_fashion_mnist_runs.csv",
                                               "scale": 100, "a": {"model": "afl"}, "b": {"model": "uniform"}}},
    ]}, "afl": {"experiments": {"afl_adult": {"seeds": 3}, "afl_fashion_mnist": {"seeds": 3}}}}
    return config


def test_plan_costs_extra_seeds_only_and_fits_the_budget_bound_only_first(tmp_path):
    config = _pilot(tmp_path, lead_sd=3.0)
    kw = {"cap": 30, "power": 0.8, "half_width": 1.0, "start_s": 0.0, "sd_ucl": None}
    free = cp.make_plan(config, tmp_path, budget_s=1e9, **kw)
    adult, fmnist = ("afl", "experiments", "afl_adult", "seeds"), ("afl", "experiments", "afl_fashion_mnist", "seeds")
    assert free["costs"][adult] == pytest.approx(10.0) and free["costs"][fmnist] == pytest.approx(100.0)
    assert free["have"] == {adult: 3, fmnist: 3}
    plans = {p.claim: p for p in free["plans"]}
    assert plans["adult"].rule == "clear" and plans["fmnist"].rule == "bound"
    assert free["total_s"] == pytest.approx((free["seeds"][adult] - 3) * 10 + (free["seeds"][fmnist] - 3) * 100)
    budget = (free["seeds"][adult] - 3) * 10 + 200.0          # room for the clear claim and 2 bound seeds
    fit = cp.make_plan(config, tmp_path, budget_s=budget, **kw)
    assert fit["total_s"] <= budget
    assert fit["seeds"][adult] == free["seeds"][adult]        # the decidable claim keeps its seeds
    assert fit["seeds"][fmnist] == 5


def test_overlay_is_yaml_with_the_calculation_beside_each_value(tmp_path):
    config = _pilot(tmp_path, lead_sd=3.0)
    result = cp.make_plan(config, tmp_path, cap=30, power=0.8, half_width=1.0, budget_s=1e9, start_s=0.0,
                          sd_ucl=None)
    header = {"command": "python benchmarks/claims_power.py", "power": 0.8, "half_width": 1.0, "cap": 30,
              "budget": 4.0, "pilot": "test", "total_h": 0.1, "wanted_h": 0.1, "wall_h": 0.05, "pilot_h": 0.7,
              "overhead": 0.1, "one_plus": 1.1, "run_h": 0.9, "pilot_src": "given",
              "expected": 1.5, "rows": 2}
    text = cp.overlay_text(result, header)
    data = yaml.safe_load(text)
    assert data["scale"] == "decisive" and data["jobs"] == {"seeds_together": False}
    assert data["afl"]["experiments"]["afl_adult"]["seeds"] == result["seeds"][("afl", "experiments", "afl_adult",
                                                                                "seeds")]
    lines = text.splitlines()
    i = lines.index("    afl_adult:")
    assert "adult: mean" in lines[i - 1] and "rule clear" in lines[i - 1] and "P(clear)" in lines[i - 1]


def test_the_committed_overlay_keeps_every_quick_run_and_a_changed_setting_is_caught(tmp_path):
    """The decisive overlay adds seeds and experiments only: every run of the quick scale keeps its path, algorithms
    and hyper-parameters (Snakemake's params), so the quick run's files are reused. An overlay that changes a quick
    setting is reported run by run."""
    assert cp.check_reuse(["config/quick.yaml"], ["config/decisive.yaml"]) == []
    changed = tmp_path / "changed.yaml"
    changed.write_text("wafl:\n  experiments:\n    mnist:\n      train: {rounds: 61}\n")
    bad = cp.check_reuse(["config/quick.yaml"], [str(changed)])
    assert bad and all(b.startswith("wafl/mnist/") and b.endswith("hyper-parameters differ") for b in bad)
    fewer = tmp_path / "fewer.yaml"
    fewer.write_text("wafl:\n  experiments:\n    mnist:\n      seeds: 2\n")
    assert any(b.endswith("/seed~2: not a run of the overlay") for b in cp.check_reuse(["config/quick.yaml"],
                                                                                      [str(fewer)]))


def test_a_batched_experiment_pays_for_all_its_seeds_when_they_grow(tmp_path):
    config = _pilot(tmp_path, lead_sd=3.0)
    kw = {"cap": 30, "power": 0.8, "half_width": 1.0, "start_s": 0.0, "sd_ucl": None, "budget_s": 1e9}
    plain = cp.make_plan(config, tmp_path, **kw)
    config["afl"]["defaults"] = {"batch_seeds": True}                   # AFL's batched path: one job, every seed
    batched = cp.make_plan(config, tmp_path, **kw)
    fmnist = ("afl", "experiments", "afl_fashion_mnist", "seeds")
    n = batched["seeds"][fmnist]
    assert n == plain["seeds"][fmnist] > 3
    assert plain["extra"][fmnist] == n - 3 and batched["extra"][fmnist] == n
    assert batched["total_s"] - plain["total_s"] == pytest.approx(3 * 100.0 + (3 if batched["extra"][
        ("afl", "experiments", "afl_adult", "seeds")] else 0) * 10.0)


def test_expected_decided_rows_sum_the_planned_power(tmp_path):
    config = _pilot(tmp_path, lead_sd=3.0)
    result = cp.make_plan(config, tmp_path, cap=30, power=0.8, half_width=1.0, budget_s=1e9, start_s=0.0,
                          sd_ucl=None)
    expected, rows = cp.expected_decided(result)
    plans = {p.claim: p for p in result["plans"]}
    n = result["seeds"]
    want = plans["adult"].power_at(n[("afl", "experiments", "afl_adult", "seeds")]) + plans["fmnist"].power_at(
        n[("afl", "experiments", "afl_fashion_mnist", "seeds")])
    assert rows == 2 and expected == pytest.approx(want) and 0.8 <= expected < 2


def test_prior_claims_are_read_from_a_readme_block_or_a_claims_csv(tmp_path):
    from fedshift.claims import claims_markdown, evaluate_claims

    per_model = (("a", [0.72, 0.73, 0.74]), ("b", [0.70] * 3))
    t = pd.DataFrame([{"model": m, "seed": s, "value": v} for m, vals in per_model for s, v in enumerate(vals)])
    claim = {"id": "lead", "where": "w", "quote": "q", "paper_value": 1.0, "test": GREATER0,
             "quantity": {"table": "t.csv", "scale": 100, "a": {"model": "a"}, "b": {"model": "b"}}}
    one = {**claim, "id": "one", "quantity": {**claim["quantity"], "table": "one.csv"}}
    out = evaluate_claims({"afl": [claim, one]}, {"t.csv": t, "one.csv": t[t.seed == 0]}, scale="quick")
    readme = tmp_path / "README.md"
    readme.write_text("x\n<!-- claims:begin (generated) -->\n" + claims_markdown(out) + "<!-- claims:end -->\n")
    out.to_csv(tmp_path / "claims.csv", index=False)
    for path in (readme, tmp_path / "claims.csv"):
        prior = cp.read_prior_claims(path)
        assert set(prior) == {"lead"}                                   # one run: no interval, left out
        mean, lo, hi, n = prior["lead"]["ci"]
        assert (mean, n) == (pytest.approx(3.0), 3) and lo == pytest.approx(out.iloc[0]["ci_low"], abs=0.01)
        assert cp.prior_sample(prior["lead"])["a"][1] == pytest.approx(1.0, abs=0.01)   # the sd back from the CI


def test_a_partly_benchmarked_experiment_is_scaled_to_its_run_ids_and_prefers_a_documented_cost(tmp_path):
    config = _pilot(tmp_path)
    key = ("afl", "experiments", "afl_fashion_mnist", "seeds")
    whole = cp.pilot_cost(tmp_path, key, run_ids=2, seeds=3)
    assert whole.cpu_s == pytest.approx(300.0) and "scaled" not in whole.source
    part = cp.pilot_cost(tmp_path, key, run_ids=3, seeds=3)             # a third run id not benchmarked yet
    assert part.cpu_s == pytest.approx(450.0) and "2 of 3 training jobs benchmarked, scaled" in part.source
    assert part.per_seed(0.0) == pytest.approx(150.0)
    kw = {"cap": 30, "power": 0.8, "half_width": 1.0, "start_s": 0.0, "sd_ucl": None, "budget_s": 1e9}
    plan = cp.make_plan(config, tmp_path, run_ids={("afl", "afl_adult"): 2, ("afl", "afl_fashion_mnist"): 3}, **kw)
    assert plan["costs"][key] == pytest.approx(cp.PRIOR_COSTS[key][0])  # partial: the documented idle-core cost
    assert plan["costs"][("afl", "experiments", "afl_adult", "seeds")] == pytest.approx(10.0)   # complete: measured


def test_prior_claims_are_read_from_the_older_block_layout_too(tmp_path):
    """The changelog keeps blocks written before issue 47 (claim first, a "paper" column twice, no details cell)."""
    readme = tmp_path / "README.md"
    readme.write_text("<!-- claims:begin (generated) -->\n"
                      "| claim | paper | where | quantity | paper | test | ours [95 % CI] | runs | verdict |\n"
                      "|---|---|---|---|---:|---|---:|---:|---|\n"
                      "| w[column=mt_mm] | wafl | T2 | a \\| b | 2.52 | x > 0 | -0.09 [-0.37, 0.19] | 3 | **x** |\n"
                      "| one | wafl | T2 | q | 20 | x > 0 | 8.73 | 1 | **inconclusive** |\n"
                      "<!-- claims:end -->\n")
    prior = cp.read_prior_claims(readme)
    assert set(prior) == {"w[column=mt_mm]"} and prior["w[column=mt_mm]"]["ci"] == (-0.09, -0.37, 0.19, 3)


# --- issue 47: the edges of the size verdicts, the replication interval, protected seeds ---------------------------


def test_a_row_is_planned_against_the_edge_that_decides_it_first():
    # WAFL Table 2 mt→mm's pilot: −0.09, sd 0.113 over 3 seeds; paper +2.52; margin 0.5
    effect = {"margin": 0.5, "reason": "r"}
    assert cp.decision_distance(-0.09, GREATER0) == (pytest.approx(0.09), 0.0, "direction")
    assert cp.decision_distance(-0.09, GREATER0, 2.52, effect) == (pytest.approx(2.61), 2.52, "size")
    # a claim without a paper number: the equivalence margin (0.5 − 0.09) beats the boundary (0.09)
    assert cp.decision_distance(-0.09, GREATER0, None, effect) == (pytest.approx(0.41), -0.5, "equivalence")
    # a size tolerance moves the edge: 33 less a quarter
    d, edge, how = cp.decision_distance(1.08, GREATER0, 33.0, {"margin": 1, "size_tolerance": "25%", "reason": "r"})
    assert (edge, how) == (pytest.approx(24.75), "size") and d == pytest.approx(23.67)
    sample = runs_sample(-0.09, 0.113, 3)
    old = cp.plan_claim("t2", ["e"], sample, GREATER0, n_pilot=3, cap=30, power=0.8, half_width=1.0)
    new = cp.plan_claim("t2", ["e"], sample, GREATER0, n_pilot=3, cap=30, power=0.8, half_width=1.0,
                        paper_value=2.52, effect=effect)
    assert old.n == 15 and (new.rule, new.n) == ("pilot", 3)               # 15 seeds for the sign; 3 rule out 2.52
    assert "decided by its size edge" in new.note


def test_fedmm_within_band_is_planned_on_the_band_edge_and_bounded_at_five_points():
    """FedMM's scratch lead: 'around 20 %' (10–30), at the decisive run's sd (~12 points from [−107.5, 110] at 2)."""
    effect = {"margin": 5, "size_tolerance": 10, "reason": "r"}
    sd = (110.0 + 107.5) / 2 * math.sqrt(2) / stats.t.ppf(0.975, 1)
    assert sd == pytest.approx(12.1, abs=0.05)
    lead = cp.plan_claim("f", ["e"], runs_sample(1.25, sd, 2), AROUND20, n_pilot=2, cap=60, power=0.8,
                         half_width=5.0, paper_value=20.0, effect=effect)
    assert lead.rule == "clear" and lead.boundary == 10.0 and lead.power_at(lead.n) >= 0.8 > lead.power_at(lead.n - 1)
    last4 = cp.plan_claim("f4", ["e"], runs_sample(12.1, 11.2, 3), AROUND20, n_pilot=2, cap=60, power=0.8,
                          half_width=5.0, paper_value=20.0, effect=effect)
    assert last4.rule == "bound" and last4.half_width(last4.n) <= 5.0 < last4.half_width(last4.n - 1)


def test_a_row_that_could_flip_is_planned_for_the_wider_interval():
    sample = runs_sample(1.0, 1.0, 5)
    plain = cp.plan_claim("c", ["e"], sample, GREATER0, n_pilot=5, cap=100, power=0.8, half_width=1.0)
    wide = cp.plan_claim("c", ["e"], sample, GREATER0, n_pilot=5, cap=100, power=0.8, half_width=1.0,
                         widen=math.sqrt(2))
    assert wide.n > plain.n and math.sqrt(2) * wide.half_width(wide.n) < 1.0
    # its P(clear) is the share of replication intervals (√2 wider) that exclude the boundary
    rng = np.random.default_rng(1)
    x = rng.normal(1.0, 1.0, size=(20000, wide.n))
    half = math.sqrt(2) * stats.t.ppf(0.975, wide.n - 1) * x.std(axis=1, ddof=1) / math.sqrt(wide.n)
    assert wide.power_at(wide.n) == pytest.approx(float(np.mean(x.mean(axis=1) - half > 0)), abs=0.01)


def test_protected_seeds_are_never_taken_back_and_the_overrun_is_stated(tmp_path):
    config = _pilot(tmp_path, lead_sd=3.0)
    kw = {"cap": 30, "power": 0.8, "half_width": 1.0, "start_s": 0.0, "sd_ucl": None}
    free = cp.make_plan(config, tmp_path, budget_s=1e9, **kw)
    tight = cp.make_plan(config, tmp_path, budget_s=0.0, **kw)
    kept = cp.make_plan(config, tmp_path, budget_s=0.0, protect=["afl"], **kw)
    assert kept["seeds"] == free["seeds"] != tight["seeds"]
    assert kept["over_budget_s"] == pytest.approx(free["total_s"]) and tight["over_budget_s"] <= free["total_s"]
    assert kept["protected"] == sorted(free["seeds"])
    # the second run repeats the protected paper's planned seeds at the portable factor
    assert cp.second_run_cpu(kept, ["afl"], 2.0) == pytest.approx(
        2.0 * sum(n * kept["costs"][k] for k, n in kept["seeds"].items()))
    assert cp.second_run_cpu(kept, ["wafl"], 2.0) == 0.0


def test_a_flagged_row_is_planned_to_keep_its_verdict_on_its_own_edge():
    """WAFL Table 2 mt→up (pilot −0.25, sd 0.264; paper +0.86): not reproduced at the decisive run, could flip. The
    size edge would decide it sooner, but only the side of 0 keeps the label 'not reproduced'."""
    sample, eff = runs_sample(-0.25, 0.264, 3), {"margin": 0.5, "reason": "r"}
    any_edge = cp.plan_claim("u", ["e"], sample, GREATER0, n_pilot=3, cap=60, power=0.8, half_width=1.0,
                             paper_value=0.86, effect=eff, widen=math.sqrt(2))
    kept = cp.plan_claim("u", ["e"], sample, GREATER0, n_pilot=3, cap=60, power=0.8, half_width=1.0,
                         paper_value=0.86, effect=eff, widen=math.sqrt(2), keep="not reproduced")
    assert kept.boundary == 0.0 and any_edge.boundary == 0.86 and (kept.n, any_edge.n) == (17, 4)
