"""The shift matrix's per-seed table (report.per_seed, ``shift_matrix_runs.csv``) and the score of a new algorithm
against a committed per-seed baseline (fedshift.papers.shift_matrix.score): every aggregate is recomputable from the
committed per-seed rows, and a new method is paired with them by seed, beside the noise floor."""

from __future__ import annotations

import copy
import json

import numpy as np
import pandas as pd
import pytest
from test_shift_matrix import SECTION

from fedshift.papers.shift_matrix import report, score
from fedshift.papers.shift_matrix.paper import ShiftMatrixPaper

SEEDS = (0, 1, 2)
COLUMNS = [{"shift": "s1", "metric": "accuracy", "label": "s1: accuracy"},
           {"shift": "s2", "metric": "worst_accuracy", "label": "s2: worst_accuracy"},
           {"shift": "s2", "metric": "average_accuracy", "label": "s2: average_accuracy"}]
GRID = [{"client_lr": 0.01}, {"client_lr": 0.1}, {"client_lr": 1.0}]
RNG = np.random.default_rng(7)
LEVEL = {"fedavg": 0.6, "copy": 0.6, "a": 0.68, "new": 0.64}


def _metrics(algorithms, rounds=6) -> pd.DataFrame:
    """Rows as ShiftMatrixPaper.evaluate writes them: per (shift, algorithm, seed) three configurations; 0 and 1
    eliminated at rounds // 3 (primary validation score only), 2 the survivor at ``rounds`` (validation and test on
    every metric, its own score at the rung before as ``rung_value``)."""
    rows = []
    for alg in algorithms:
        for sh, metrics in (("s1", ("accuracy",)), ("s2", ("worst_accuracy", "average_accuracy"))):
            for seed in SEEDS:
                v = float(np.clip(LEVEL[alg] + 0.03 * RNG.standard_normal(), 0, 1))
                base = {"shift": sh, "kind": "none", "model": "logreg", "algorithm": alg, "seed": seed}
                for g, value in enumerate(GRID):
                    survivor = g == 2
                    for m, metric in enumerate(metrics):
                        for role in ("validation", "test"):
                            x = v + 0.05 * m if survivor or (role == "validation" and m == 0) else np.nan
                            if not survivor and role == "validation" and m == 0:
                                x = v - 0.1 - 0.01 * g
                            rung = ({"rung_rounds": rounds // 3, "rung_value": v - 0.05}
                                    if survivor and role == "validation" and m == 0 else {})
                            rows.append(base | {"grid": g, "value_of": json.dumps(value, sort_keys=True),
                                                "rounds": rounds if survivor else rounds // 3, "role": role,
                                                "metric": metric, "value": x} | rung)
    return pd.DataFrame(rows)


def _params(algorithms):
    return {"columns": COLUMNS, "algorithms": list(algorithms), "baseline": "fedavg", "na": {}, "model": "logreg",
            "grids": dict.fromkeys(algorithms, GRID), "chance": {"s1": 0.1, "s2": 0.1},
            "copies": {"copy": ["s1", "s2"]} if "copy" in algorithms else {}, "plateau_tolerance": None,
            "confidence": 0.95, "grid_size": 3, "seeds": len(SEEDS), "train": {"rounds": 6}}


def _committed(tmp_path, algorithms=("fedavg", "copy", "a")):
    metrics = _metrics(algorithms)
    files = {k: str(tmp_path / f"shift_matrix.{k}") for k in ("csv", "md", "tex")} | {
        "runs": str(tmp_path / "shift_matrix_runs.csv")}
    report.write("shift_matrix_table", metrics, _params(algorithms), files)
    return metrics, pd.read_csv(files["runs"]), pd.read_csv(files["csv"])


def test_the_per_seed_table_recomputes_a_cells_mean_and_delta(tmp_path):
    metrics, runs, table = _committed(tmp_path)
    assert list(runs.columns) == report.RUNS_COLUMNS
    assert len(runs) == len(COLUMNS) * 3 * len(SEEDS)            # (column, algorithm, seed)
    cell = runs[(runs["column"] == "s2: worst_accuracy") & (runs["algorithm"] == "a")].set_index("seed")
    base = runs[(runs["column"] == "s2: worst_accuracy") & runs["baseline"]].set_index("seed")
    want = table[(table["column"] == "s2: worst_accuracy") & (table["algorithm"] == "a")].iloc[0]
    assert cell["test"].mean() == pytest.approx(want["mean"], abs=1e-12)
    assert (cell["test"] - base["test"]).mean() == pytest.approx(want["delta"], abs=1e-12)
    # the selected configuration, its rounds, and the tuning's validation trace of every configuration
    assert set(runs["grid"]) == {2} and set(runs["rounds"]) == {6}
    assert set(runs["configuration"]) == {json.dumps(GRID[2], sort_keys=True)}
    trace = json.loads(cell.loc[0, "trace"])
    raw = metrics[(metrics["algorithm"] == "a") & (metrics["seed"] == 0) & (metrics["shift"] == "s2")
                  & (metrics["metric"] == "worst_accuracy") & (metrics["role"] == "validation")]
    assert [p[:2] for p in trace] == [[0, 2], [1, 2], [2, 2], [2, 6]]   # two eliminated at R/3, the survivor twice
    assert trace[0][2] == pytest.approx(raw[raw["grid"] == 0]["value"].iloc[0])
    assert trace[3][2] == pytest.approx(cell.loc[0, "validation"])
    # a secondary column: eliminated configurations were never scored on its metric
    other = runs[(runs["column"] == "s2: average_accuracy") & (runs["algorithm"] == "a")].iloc[0]
    assert [p[:2] for p in json.loads(other["trace"])] == [[2, 6]]
    assert runs.loc[runs["algorithm"] == "copy", "baseline_copy"].all()
    assert not runs.loc[runs["algorithm"] != "copy", "baseline_copy"].any()


def test_the_paper_writes_a_per_seed_table_per_model():
    section = copy.deepcopy(SECTION) | {"model": ["logreg", "cnn2"]}
    [table] = [o for o in ShiftMatrixPaper({"shift_matrix": section}).outputs() if o.name == "shift_matrix_table"]
    assert table.files["runs"] == "results/tables/shift_matrix/shift_matrix_runs.csv"
    assert table.files["runs_cnn2"] == "results/tables/shift_matrix/shift_matrix_runs_cnn2.csv"


def test_a_new_method_is_scored_against_the_committed_per_seed_baseline(tmp_path):
    _, base, _ = _committed(tmp_path)
    new = _metrics(["new"])
    got = score.score(new, base, "new").set_index("column")
    chosen = report.selected(new, COLUMNS)
    for col in ("s1: accuracy", "s2: worst_accuracy"):
        mine = chosen[chosen["column"] == col].set_index("seed")["test"]
        ref = base[(base["column"] == col) & base["baseline"]].set_index("seed")["test"]
        copy_d = (base[(base["column"] == col) & base["baseline_copy"]].set_index("seed")["test"] - ref).abs()
        assert got.loc[col, "delta"] == pytest.approx((mine - ref).mean(), abs=1e-12)
        assert got.loc[col, "mean"] == pytest.approx(mine.mean(), abs=1e-12)
        assert got.loc[col, "seeds"] == len(SEEDS)
        assert got.loc[col, "floor_max_abs"] == pytest.approx(copy_d.max(), abs=1e-12)
    floor = score.floor_summary(base)
    assert list(floor["algorithm"]) == ["copy"] and floor["pairs"].iloc[0] == 2 * len(SEEDS)  # one block a shift
    with pytest.raises(ValueError, match="trained 9 rounds, the committed fedavg 6"):
        score.score(_metrics(["new"], rounds=9), base, "new")


def test_the_command_names_both_machines_and_refuses_a_method_without_runs(tmp_path, capsys):
    snap = tmp_path / "snapshot"
    (snap / "tables" / "shift_matrix").mkdir(parents=True)
    (snap / "snapshot.json").write_text(json.dumps({"papers": {"shift_matrix": {"machines": ["Intel Xeon (AVX512 "
                                                                                             "kernels)"]}}}))
    _, base, _ = _committed(snap / "tables" / "shift_matrix")
    runs = tmp_path / "runs"
    new = _metrics(["new"])
    for (sh, seed), g in new.groupby(["shift", "seed"]):
        cell = runs / sh / "new" / f"seed~{seed}"
        cell.mkdir(parents=True)
        g.to_csv(cell / "metrics.csv", index=False)
        (cell / "run.json").write_text(json.dumps({"environment": {"cpu": {"model": "AMD EPYC",
                                                                           "torch_capability": "AVX2"}}}))
    baseline = snap / "tables" / "shift_matrix" / "shift_matrix_runs.csv"
    out = tmp_path / "score.csv"
    assert score.main(["--method", "new", "--runs", str(runs), "--baseline", str(baseline), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "Runs of new made on: AMD EPYC (AVX2 kernels), portable-CPU switch off." in text
    assert "Committed baseline made on: Intel Xeon (AVX512 kernels)." in text and "Different machines" in text
    assert "Noise floor over the committed blocks" in text and "| s2: worst_accuracy | 3 |" in text
    assert set(pd.read_csv(out)["column"]) == {c["label"] for c in COLUMNS}
    assert score.main(["--method", "absent", "--runs", str(runs), "--baseline", str(baseline)]) == 2
    assert "no metrics.csv of 'absent'" in capsys.readouterr().err


def test_the_snapshot_commits_the_per_seed_table_and_names_its_machine(tmp_path):
    """``python -m fedshift.docsgen snapshot`` copies every table's csv: the per-seed table goes with the means, and
    the stamp's machine is what the score command names for the committed baseline."""
    from fedshift.docsgen.snapshot import take_snapshot

    results = tmp_path / "results"
    _committed(results / "tables" / "shift_matrix")
    cell = results / "runs" / "shift_matrix" / "s1" / "fedavg" / "seed~0"
    cell.mkdir(parents=True)
    (cell / "run.json").write_text(json.dumps({"paper": "shift_matrix", "seed": 0, "rounds": 6, "environment": {
        "cpu": {"model": "AMD EPYC", "torch_capability": "AVX512"}}}))
    out = tmp_path / "snapshot"
    take_snapshot(results, out, name="tiny", root=tmp_path, date="2026-01-01", scale="quick")
    committed = out / "tables" / "shift_matrix" / "shift_matrix_runs.csv"
    assert committed.read_bytes() == (results / "tables" / "shift_matrix" / "shift_matrix_runs.csv").read_bytes()
    assert score.machines_of_snapshot(committed) == ["AMD EPYC (AVX512 kernels), portable-CPU switch off"]
    assert score.machines_of_runs(results / "runs" / "shift_matrix", "fedavg") == score.machines_of_snapshot(committed)
