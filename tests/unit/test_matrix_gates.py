"""The shift matrix's validity gates and its statistics without pseudo-replication (ranking.validity, blocks, ranks,
aggregates, noise_floor): a shift whose baseline is at or below chance or still moving is never ranked or tested;
one block per shift (its primary column); the baseline's copies are a noise floor, not methods."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest
from scipy import stats
import torch
from test_shift_matrix import SECTION, _fake, paper

from fedshift.errors import ConfigError
from fedshift.papers.shift_matrix import paper as matrix_paper
from fedshift.papers.shift_matrix import aggregate, ranking, report
from fedshift.papers.shift_matrix.paper import ShiftMatrixPaper

SEEDS = range(4)
# per shift its columns (the first is the primary); per algorithm per seed the primary value, the second column
# re-evaluates the same model (primary + 0.1)
COLUMNS = [{"shift": "s1", "metric": "accuracy", "label": "s1: accuracy"},
           {"shift": "s2", "metric": "worst_accuracy", "label": "s2: worst_accuracy"},
           {"shift": "s2", "metric": "average_accuracy", "label": "s2: average_accuracy"},
           {"shift": "s3", "metric": "accuracy", "label": "s3: accuracy"},
           {"shift": "lab", "metric": "accuracy", "label": "lab: accuracy"}]
PRIMARY = {"s1": "accuracy", "s2": "worst_accuracy", "s3": "accuracy", "lab": "accuracy"}
RNG = np.random.default_rng(3)
VALUES = {  # algorithm → shift → per-seed primary test value
    alg: {sh: [float(np.clip(level + off + 0.03 * RNG.standard_normal(), 0, 1)) for _ in SEEDS]
          for sh, off in zip(PRIMARY, (0.0, -0.1, 0.05, 0.0), strict=True)}
    for alg, level in (("fedavg", 0.6), ("a", 0.7), ("b", 0.5), ("c", 0.62), ("copy", 0.6))}
for alg in VALUES:  # the label-like shift: the baseline (and its copy) a constant predictor outside the target
    VALUES[alg]["lab"] = [0.0] * len(SEEDS) if alg in ("fedavg", "copy") else [0.3 + 0.02 * s for s in SEEDS]
VALUES["copy"] = {sh: [v + 0.001 * (s - 1.5) for s, v in enumerate(VALUES["fedavg"][sh])] for sh in PRIMARY}


def _metrics(values=VALUES, rung=None, eliminated=None) -> pd.DataFrame:
    """Tidy rows as :meth:`ShiftMatrixPaper.evaluate` writes them: the survivor (grid 0, R = 6 rounds) on validation
    and test; with ``rung`` (algorithm → shift → validation score) the survivor's own score at 2 rounds
    (``rung_value``); with ``eliminated`` (the same form) another value (grid 1) eliminated at 2 rounds."""
    rows = []
    for alg, by_shift in values.items():
        for sh, seeds in by_shift.items():
            for seed, v in zip(SEEDS, seeds, strict=True):
                for col in (c for c in COLUMNS if c["shift"] == sh):
                    x = v if col["metric"] == PRIMARY[sh] else min(1.0, v + 0.1)
                    own = ({"rung_rounds": 2, "rung_value": rung.get(alg, {}).get(sh, x)}
                           if rung is not None and col["metric"] == PRIMARY[sh] else {})
                    rows += [{"shift": sh, "algorithm": alg, "seed": seed, "grid": 0, "rounds": 6, "role": role,
                              "metric": col["metric"], "value": x} | (own if role == "validation" else {})
                             for role in ("validation", "test")]
                    if eliminated is not None and col["metric"] == PRIMARY[sh]:
                        rows += [{"shift": sh, "algorithm": alg, "seed": seed, "grid": 1, "rounds": 2, "role": role,
                                  "metric": col["metric"], "value": eliminated.get(alg, {}).get(sh, 0.0) if
                                  role == "validation" else np.nan} for role in ("validation", "test")]
    return pd.DataFrame(rows)


def _params(**extra):
    return {"columns": COLUMNS, "algorithms": ["fedavg", "a", "b", "c", "copy"], "baseline": "fedavg", "na": {},
            "grids": {a: [{"client_lr": 0.1}, {"client_lr": 0.3}] for a in ("fedavg", "a", "b", "c", "copy")},
            "chance": dict.fromkeys(PRIMARY, 0.1), "copies": {"copy": list(PRIMARY)},
            "plateau_tolerance": 0.05} | extra


def _gated(params, metrics):
    chosen = report.selected(metrics, params["columns"])
    valid = ranking.validity(chosen, metrics, params)
    return chosen, valid, dict(params) | {"gates": dict(zip(valid.loc[~valid["valid"], "shift"],
                                                            valid.loc[~valid["valid"], "reason"], strict=True))}


def test_a_reference_at_or_below_chance_gates_its_shift_out_of_ranks_tests_and_aggregates(tmp_path):
    """The committed quick CNN label column: FedAvg (and its copies) 0.0 on every seed, below the 10 % of chance,
    yet ranked and tested (FedDyn "first"). Gated, the shift is shown with its reason and never ranked."""
    metrics, params = _metrics(), _params()
    chosen, valid, gated = _gated(params, metrics)
    v = valid.set_index("shift")
    assert not v.loc["lab", "valid"] and "at or below chance (0.0 % ≤ 10.0 %" in v.loc["lab", "reason"]
    assert v.drop("lab")["valid"].all() and v.loc["s2", "column"] == "s2: worst_accuracy"
    files = {k: str(tmp_path / f"t.{k}") for k in ("csv", "md", "tex")}
    report.write("shift_matrix_table", metrics, params, files)
    md = (tmp_path / "t.md").read_text()
    lab = md.split("**lab**")[1].split("What wins where")[0]
    assert lab.startswith(" (not ranked: reference fedavg at or below chance")
    assert all(line.startswith("| — |") for line in lab.splitlines() if line.startswith("| ") and "rank" not in line
               and "---" not in line)
    assert "- **lab: accuracy**: not ranked or tested: reference fedavg at or below chance" in md
    assert "| 1 | a |" in md.split("**s1**")[1].split("**s2**")[0]           # a valid shift keeps its ranks
    table, info = ranking.ranks(chosen, gated)
    assert "lab: accuracy" not in info["blocks"] and info["gates"] == {"lab": v.loc["lab", "reason"]}
    agg = aggregate.aggregates(chosen, gated).set_index("algorithm")
    assert (agg["columns"] == 3).all()                                        # s1, s2 (primary), s3
    # the old protocol ranked the gated shift: a's lead there counted as a win over fedavg
    old = ranking.ranks(chosen, {k: v for k, v in params.items() if k not in ("copies",)} | {"columns": COLUMNS})[1]
    assert "lab: accuracy" in old["blocks"]


def test_a_reference_still_moving_between_the_last_two_rungs_is_not_at_plateau():
    """Plateau gate: the chosen configuration's validation score at R minus its own at R/η, mean over seeds; the
    scores of other configurations eliminated at R/η are not its curve and are not read."""
    steady = {sh: float(np.mean(v)) - 0.01 for sh, v in VALUES["fedavg"].items()}
    climbing = {"fedavg": steady | {"s3": 0.3}}                                 # s3: 0.3 at 2 rounds → ~0.65 at 6
    _, valid, _ = _gated(_params(), _metrics(rung=climbing))
    v = valid.set_index("shift")
    assert not v.loc["s3", "valid"] and "not at plateau" in v.loc["s3", "reason"]
    expected = np.mean(VALUES["fedavg"]["s3"]) - 0.3
    assert v.loc["s3", "plateau_gap"] == pytest.approx(expected) and expected > 0.05
    assert v.loc["s1", "valid"] and v.loc["s1", "plateau_gap"] == pytest.approx(0.01)
    _, off, _ = _gated(_params(plateau_tolerance=None), _metrics(rung=climbing))
    assert off.set_index("shift").loc["s3", "valid"]                           # null: the chance gate alone
    # without the survivor's own rung score (runs evaluated before it was recorded): unmeasured, not gated
    _, old, _ = _gated(_params(), _metrics(eliminated={"fedavg": dict.fromkeys(PRIMARY, 0.2)}))
    assert old.set_index("shift").loc["s3", "valid"] and old["plateau_gap"].isna().all()


def test_evaluate_records_the_survivors_own_score_at_the_rung_before_the_full_budget(tmp_path, monkeypatch):
    data = {name: _fake(name) for name in ("mnist", "usps", "mnist_m")}
    p = paper(copy.deepcopy(SECTION) | {"train": SECTION["train"] | {"rounds": 9}})
    spec = next(r for r in p.runs() if (r.experiment, r.run, r.seed) == ("mixture", "fedavg", 0))
    monkeypatch.setattr(matrix_paper, "load_images", lambda files: data)
    inputs = dict.fromkeys(p.shifts["mixture"].datasets(), "-")
    fit = p.train(spec, inputs, device=torch.device("cpu"), checkpoint=None, fingerprint="")
    torch.save(fit.artifacts, tmp_path / "artifacts.pt")
    rows = p.evaluate(spec, inputs, {"artifacts": str(tmp_path / "artifacts.pt")}, device=torch.device("cpu"))
    best = fit.info["models"]["logreg"]["selected_grid"]
    own = rows[rows["rung_value"].notna()]
    assert len(own) == 1 and own["grid"].iloc[0] == best and own["metric"].iloc[0] == "worst_domain_accuracy"
    assert own["role"].iloc[0] == "validation" and own["rounds"].iloc[0] == 9
    assert own["rung_rounds"].iloc[0] == 3                                      # rungs (9, 2 values, η = 3): 3, 9
    assert own["rung_value"].iloc[0] == fit.artifacts["tuning"]["logreg"]["validation"][best]
    chosen = report.selected(rows, [{"shift": "mixture", "metric": "worst_domain_accuracy", "label": "m"}])
    assert chosen["grid"].tolist() == [best]                                    # the extra columns select nothing


def test_one_block_per_shift_copies_left_out_and_aggregates_recomputed_from_per_seed_data():
    """Friedman, Wilcoxon-Holm, IQM and P(improvement) read one primary column per valid shift; the copy of the
    baseline is a noise floor. Each number is recomputed here from the per-seed values."""
    metrics = _metrics()
    chosen, _, gated = _gated(_params(), metrics)
    table, info = ranking.ranks(chosen, gated)
    blocks = ["s1", "s2", "s3"]
    assert info["blocks"] == [f"{sh}: {PRIMARY[sh]}" for sh in blocks] and info["n_columns"] == 3
    assert set(table["algorithm"]) == {"fedavg", "a", "b", "c"} and info["copies"] == ["copy"]
    means = {a: [np.mean(VALUES[a][sh]) for sh in blocks] for a in ("fedavg", "a", "b", "c")}
    assert info["friedman_statistic"] == pytest.approx(stats.friedmanchisquare(*means.values()).statistic)
    p = {a: stats.wilcoxon(np.concatenate([np.subtract(VALUES[a][sh], VALUES["fedavg"][sh]) for sh in blocks])).pvalue
         for a in ("a", "b", "c")}
    order = sorted(p, key=p.get)
    holm = np.maximum.accumulate([min(1, (len(order) - i) * p[a]) for i, a in enumerate(order)])
    t = table.set_index("algorithm")
    for a, h in zip(order, holm, strict=True):
        assert t.loc[a, "wilcoxon_p"] == pytest.approx(p[a]) and t.loc[a, "holm_p"] == pytest.approx(h)
    # IQM of a's normalised score over the three blocks, by hand: chance (0.1) 0, fedavg's mean 1
    agg = aggregate.aggregates(chosen, gated).set_index("algorithm")
    scores = []
    for sh in blocks:
        scores += [(x - 0.1) / (np.mean(VALUES["fedavg"][sh]) - 0.1) for x in VALUES["a"][sh]]
    assert agg.loc["a", "iqm"] == pytest.approx(stats.trim_mean(scores, 0.25))
    pi = np.mean([np.mean([(x > y) + 0.5 * (x == y) for x in VALUES["b"][sh] for y in VALUES["fedavg"][sh]])
                  for sh in blocks])
    assert agg.loc["b", "p_improvement"] == pytest.approx(pi)
    assert agg.loc["copy", "copy_columns"] == 3 and agg.loc["a", "copy_columns"] == 0
    floor = ranking.noise_floor(chosen, gated).set_index("algorithm")
    d = np.concatenate([np.subtract(VALUES["copy"][sh], VALUES["fedavg"][sh]) for sh in blocks])
    assert floor.loc["copy", "pairs"] == 12 and floor.loc["copy", "max_abs_delta"] == pytest.approx(np.abs(d).max())
    assert floor.loc["copy", "mean_delta"] == pytest.approx(d.mean())


def test_the_ranks_output_states_its_blocks_and_the_noise_floor(tmp_path):
    files = {k: str(tmp_path / f"r.{k}") for k in ("csv", "md", "pdf", "png")}
    report.write("shift_ranks", _metrics(), _params(), files)
    md = (tmp_path / "r.md").read_text()
    assert md.startswith("One block per shift, its primary column (s1: accuracy, s2: worst_accuracy, s3: accuracy)")
    assert "N = 3 blocks" in md and "- shift lab left out of ranks and tests: reference fedavg at or below" in md
    assert "Noise floor: fedavg against itself" in md and "| copy " in md
    assert "- left out of the tests: copy (fedavg under another name in at least one block" in md
    assert "copy" not in pd.read_csv(files["csv"])["algorithm"].tolist()


def test_the_paper_passes_copies_per_shift_chance_and_the_plateau_tolerance():
    """``baseline_copies``: ``always`` in every shift, ``equal_sizes`` only where no ``sizes`` draw makes clients
    unequal (FedNova is FedAvg when all τ_i are equal); an unregistered name is refused naming its key."""
    section = copy.deepcopy(SECTION)
    section["shifts"]["none_dirichlet"] |= {"sizes": {"law": "dirichlet", "beta": 0.5, "min_size": 5}}
    section |= {"baseline_copies": {"robust_fedavg": "always", "fednova": "equal_sizes"}, "plateau_tolerance": 0.05}
    p = ShiftMatrixPaper({"shift_matrix": section})
    params = p.outputs()[0].params
    assert params["copies"]["robust_fedavg"] == list(section["shifts"])
    assert "none_dirichlet" not in params["copies"]["fednova"] and "none_iid" in params["copies"]["fednova"]
    assert params["chance"]["label"] == pytest.approx(0.1) and params["plateau_tolerance"] == 0.05
    bad = copy.deepcopy(section)
    bad["baseline_copies"] = {"no_such_method": "always"}
    with pytest.raises(ConfigError, match="shift_matrix.baseline_copies.no_such_method"):
        ShiftMatrixPaper({"shift_matrix": bad}).validate()


def test_the_chance_gate_reads_accuracies_only():
    """1/K is the chance of an accuracy; a primary metric of another kind (a score where 0 is no floor) is not
    compared with it."""
    chosen = pd.DataFrame([{"column": "s: margin", "shift": "s", "metric": "margin", "algorithm": "fedavg",
                            "seed": 0, "grid": 0, "validation": 0.0, "test": 0.0}])
    params = {"columns": [{"shift": "s", "metric": "margin", "label": "s: margin"}], "baseline": "fedavg",
              "chance": {"s": 0.1}}
    assert ranking.validity(chosen, pd.DataFrame(), params)["valid"].tolist() == [True]
    chosen["column"] = "s: accuracy"
    params["columns"][0] |= {"metric": "accuracy", "label": "s: accuracy"}
    assert ranking.validity(chosen, pd.DataFrame(), params)["valid"].tolist() == [False]
