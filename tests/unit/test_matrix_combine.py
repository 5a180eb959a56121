"""The benchmark matrix joined from its shards (fedshift.papers.shift_matrix.combine): the joined tables are the ones
the matrix's own table code writes from one tree of the same runs, byte for byte, and a shard not run to its end,
a run off the plan's seeds or rounds, a shift in two shards and a missing shift are refused, naming shift and seed.

Tiny fabricated metrics.csv files (rows as :meth:`ShiftMatrixPaper.evaluate` writes them, as
test_matrix_join_scores.py fabricates them) for a two-shift, two-algorithm, two-seed matrix; nothing trains."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedshift.papers.shift_matrix import combine, report

SHIFTS = {
    "none_iid": {"kind": "none", "dataset": "fashion_mnist", "split": "iid", "clients": 6, "samples_per_client": 50,
                 "validation_size": 100, "test_size": 200},
    "none_dirichlet": {"kind": "none", "dataset": "fashion_mnist", "split": "dirichlet", "beta": 0.3, "clients": 6,
                       "samples_per_client": 50, "validation_size": 100, "test_size": 200},
}
GRID = [{"client_lr": 0.05}, {"client_lr": 0.2}, {"client_lr": 0.8}]
CONFIG = {"scale": "benchmark", "shift_matrix": {
    "outputs": ["shift_matrix_table", "shift_matrix_figure", "shift_ranks"], "algorithms": ["fedavg", "fedprox"],
    "baseline": "fedavg", "seeds": [2000, 2001], "model": "logreg", "grid_size": 3,
    "train": {"rounds": 9, "clients_per_round": 3, "local_epochs": 1, "batch_size": 10, "client_lr": 0.1},
    "shift_rounds": {"none_iid": {"logreg": 6}, "none_dirichlet": {"logreg": 9}},
    "grids": {"default": GRID, "fedprox": [{"mu": 0.01}, {"mu": 0.1}, {"mu": 1.0}]}, "shifts": SHIFTS}}
TABLES, FIGURES = "results/tables/shift_matrix", "results/figures/shift_matrix"


def _config(shifts=None) -> dict:
    c = copy.deepcopy(CONFIG)
    if shifts is not None:
        c["shift_matrix"]["active_shifts"] = list(shifts)
    return c


def _metrics(spec, rng, rounds=None) -> pd.DataFrame:
    """One run's rows: grid values 0 and 1 eliminated at rounds // 3 (primary validation score only), 2 the survivor
    at the plan's rounds (validation and test), its rung-before score, and the tuning's CPU-seconds row."""
    r = rounds or spec.hparams["models"]["logreg"]["rounds"]
    v = float(rng.uniform(0.5, 0.8))
    base = {"shift": spec.experiment, "kind": "none", "model": "logreg", "algorithm": spec.run, "seed": spec.seed}
    rows = []
    for g, value in enumerate(spec.hparams["grid"]):
        survivor = g == 2
        for role in ("validation", "test"):
            x = v + 0.02 * rng.standard_normal() if survivor else (v - 0.1 - 0.01 * g if role == "validation"
                                                                   else np.nan)
            rung = {"rung_rounds": r // 3, "rung_value": v - 0.01} if survivor and role == "validation" else {}
            rows.append(base | {"grid": g, "value_of": json.dumps(value, sort_keys=True),
                                "rounds": r if survivor else r // 3, "role": role, "metric": "accuracy",
                                "value": x} | rung)
    rows.append(base | {"grid": -1, "value_of": "", "rounds": 0, "role": "tuning", "metric": "cpu_seconds",
                        "value": float(rng.uniform(1, 2))})
    return pd.DataFrame(rows)


def _outputs(paper, root: Path, out: Path | None = None) -> None:
    """What the target ``shift_matrix`` writes from the runs under ``root``: every output, into ``out`` (``tables/``
    and ``figures/``), else into ``root`` (``results/...``, as the target does)."""
    for spec in paper.outputs():
        files = {k: str(out / f.replace(TABLES, "tables").replace(FIGURES, "figures")) if out else str(root / f)
                 for k, f in spec.files.items()}
        for f in files.values():
            Path(f).parent.mkdir(parents=True, exist_ok=True)
        paper.make_output(spec, [str(root / f) for f in spec.inputs], files)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One tree of every run and its tables; each shift's shard (its runs and one-shift tables) collected."""
    tmp = tmp_path_factory.mktemp("combine")
    rng = np.random.default_rng(11)
    whole = combine.matrix_paper(_config())
    runs = {}
    for spec in whole.runs():
        path = tmp / "one" / spec.file("metrics")
        path.parent.mkdir(parents=True)
        _metrics(spec, rng).to_csv(path, index=False)
        runs[spec.file("metrics")] = path
    _outputs(whole, tmp / "one", tmp / "reference")
    for shift in SHIFTS:  # each shard in its own session: its runs, its tables from them alone, then collect
        shard_root = tmp / f"session_{shift}"
        for rel, path in runs.items():
            if f"/{shift}/" in rel:
                (shard_root / rel).parent.mkdir(parents=True)
                shutil.copy(path, shard_root / rel)
        _outputs(combine.matrix_paper(_config([shift])), shard_root)
        combine.collect_shard(shift, _config([shift]), root=shard_root, out=tmp / "snapshot" / shift, cpu_s=12.5,
                              wall_s=20.0)
    return tmp


def test_the_joined_tables_equal_one_trees_tables_byte_for_byte(built, tmp_path):
    done = combine.join_shards(built / "snapshot", _config(), out=tmp_path / "tables", figures=tmp_path / "figures")
    assert done["missing"] == [] and set(done["shards"]) == set(SHIFTS)
    names = sorted(p.name for p in (built / "reference" / "tables").iterdir())
    assert sorted([*names, "shift_matrix_shards.json"]) == sorted(p.name for p in (tmp_path / "tables").iterdir())
    record = json.loads((tmp_path / "tables" / "shift_matrix_shards.json").read_text())
    assert record["missing"] == [] and record["shards"]["none_dirichlet"]["rounds"] == {"logreg": 9}
    assert {"shift_matrix.csv", "shift_matrix.md", "shift_matrix_runs.csv", "shift_ranks.md"} <= set(names)
    for name in names:
        assert (tmp_path / "tables" / name).read_bytes() == (built / "reference" / "tables" / name).read_bytes(), name
    table = pd.read_csv(tmp_path / "tables" / "shift_matrix.csv")
    assert set(table["shift"]) == set(SHIFTS) and table["seeds"].eq(2).all()
    md = (tmp_path / "tables" / "shift_matrix.md").read_text()
    assert md.startswith("Scale: **benchmark**.") and "Partial" not in md


def test_collect_records_the_shard_and_copies_its_runs_and_tables(built):
    folder = built / "snapshot" / "none_iid"
    stamp = json.loads((folder / combine.STAMP).read_text())
    assert stamp["shift"] == "none_iid" and stamp["seeds"] == [2000, 2001] and stamp["runs"] == 4
    assert stamp["rounds"] == {"logreg": 6} and (stamp["cpu_s"], stamp["wall_s"]) == (12.5, 20.0)
    assert stamp["machine"] and "commit" in stamp
    assert sorted(p.relative_to(folder).as_posix() for p in folder.glob("runs/*/*/metrics.csv")) == [
        f"runs/{a}/seed~{s}/metrics.csv" for a in ("fedavg", "fedprox") for s in (2000, 2001)]
    shard_table = pd.read_csv(folder / "tables" / "shift_matrix.csv")
    assert set(shard_table["shift"]) == {"none_iid"}


def test_collect_refuses_a_shard_not_run_to_its_end_or_off_the_plan(built, tmp_path):
    root = tmp_path / "session"
    shutil.copytree(built / "session_none_dirichlet", root)
    run = root / "results/runs/shift_matrix/none_dirichlet/fedprox/seed~2001/metrics.csv"
    good = pd.read_csv(run)
    cfg = _config(["none_dirichlet"])
    run.unlink()
    with pytest.raises(FileNotFoundError, match=r"shard none_dirichlet is not run to its end: .*fedprox, seed 2001"):
        combine.collect_shard("none_dirichlet", cfg, root=root, out=tmp_path / "out")
    good.assign(rounds=good["rounds"] * 2).to_csv(run, index=False)  # trained 18 rounds where the plan says 9
    with pytest.raises(ValueError, match=r"shift none_dirichlet, fedprox, seed 2001: logreg trained 18 rounds, the "
                                         r"plan 9"):
        combine.collect_shard("none_dirichlet", cfg, root=root, out=tmp_path / "out")
    good.assign(seed=0).to_csv(run, index=False)  # another seed's rows in the planned seed's file
    with pytest.raises(ValueError, match=r"seed 2001: its metrics.csv holds seed \[0\]"):
        combine.collect_shard("none_dirichlet", cfg, root=root, out=tmp_path / "out")
    good.to_csv(run, index=False)
    with pytest.raises(ValueError, match=r"runs shifts \['none_dirichlet'\], not \[none_iid\]"):
        combine.collect_shard("none_iid", cfg, root=root, out=tmp_path / "out")
    assert not (tmp_path / "out").exists()  # nothing written on a refusal


def test_join_refuses_a_shift_in_two_shards_a_missing_shift_and_a_run_off_the_plan(built, tmp_path):
    snap = tmp_path / "snapshot"
    shutil.copytree(built / "snapshot", snap)
    shutil.copytree(snap / "none_iid", snap / "none_iid_again")
    with pytest.raises(ValueError, match=r"shift none_iid is in two shards"):
        combine.join_shards(snap, _config(), out=tmp_path / "t", figures=tmp_path / "f")
    shutil.rmtree(snap / "none_iid_again")
    extra = snap / "none_iid/runs/fedavg/seed~0/metrics.csv"
    shutil.copytree(extra.parent.parent / "seed~2000", extra.parent)
    with pytest.raises(ValueError, match=r"shift none_iid: fedavg, seed 0 is not a run of the benchmark plan"):
        combine.join_shards(snap, _config(), out=tmp_path / "t", figures=tmp_path / "f")
    shutil.rmtree(extra.parent)
    (snap / "none_dirichlet/runs/fedavg/seed~2000/metrics.csv").unlink()
    with pytest.raises(FileNotFoundError, match=r"shift none_dirichlet: no metrics.csv of fedavg, seed 2000"):
        combine.join_shards(snap, _config(), out=tmp_path / "t", figures=tmp_path / "f")
    shutil.rmtree(snap / "none_dirichlet")
    with pytest.raises(ValueError, match=r"no shard under .* of shifts \['none_dirichlet'\] \(--partial"):
        combine.join_shards(snap, _config(), out=tmp_path / "t", figures=tmp_path / "f")
    done = combine.join_shards(snap, _config(), out=tmp_path / "t", figures=tmp_path / "f", partial=True)
    assert done["missing"] == ["none_dirichlet"]
    assert set(pd.read_csv(tmp_path / "t" / "shift_matrix.csv")["shift"]) == {"none_iid"}
    for md in ("shift_matrix.md", "shift_ranks.md"):
        assert (tmp_path / "t" / md).read_text().startswith(
            "Scale: **benchmark**. Partial matrix: no shard yet of none_dirichlet.")


def test_the_manifest_refuses_a_shift_in_two_shards(tmp_path):
    shards = tmp_path / "config" / "benchmark_shards"
    shards.mkdir(parents=True)
    for name in ("a", "b"):
        (shards / f"{name}.yaml").write_text("shift_matrix:\n  active_shifts: [label]\n")
    entry = {"shift": "label", "seeds": [2000]}
    (shards / "shards.json").write_text(json.dumps({
        "_benchmark": {"overlays": []}, "a": entry | {"overlay": "config/benchmark_shards/a.yaml"},
        "b": entry | {"overlay": "config/benchmark_shards/b.yaml"}}))
    with pytest.raises(ValueError, match=r"shift label is in two shards: a and b"):
        combine.load_manifest(tmp_path)
    (shards / "b.yaml").write_text("shift_matrix:\n  active_shifts: [label, mixture]\n")
    with pytest.raises(ValueError, match=r"shard b: .*b.yaml sets shift_matrix.active_shifts \['label', 'mixture'\]"):
        combine.load_manifest(tmp_path)


def test_the_committed_manifest_has_one_shard_per_shift_of_the_benchmark_matrix():
    root = Path(__file__).resolve().parents[2]
    manifest = combine.load_manifest(root)
    shifts = [e["shift"] for n, e in manifest.items() if not n.startswith("_")]
    paper = combine.matrix_paper(combine.benchmark_config(root, manifest))
    assert sorted(shifts) == sorted(paper.shifts)
    assert paper.outputs()[0].params["scale"] == "benchmark"


def test_the_heading_states_the_scale_and_at_quick_scale_that_it_draws_no_conclusion():
    assert report.heading({"scale": "quick"}) == ("Scale: **quick**: a taste (at most 45 minutes) that draws no "
                                                  "conclusion.\n\n")
    assert report.heading({"scale": "paper", "missing_shifts": []}) == "Scale: **paper**.\n\n"
    assert report.heading({}) == ""
