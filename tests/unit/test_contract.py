"""The paper contract (fedshift.contract) and the one job skeleton (fedshift.jobs), on the toy paper of
tests/toy_paper: config merging, typed run specs, plug-in loading errors, and a train → kill → resume → evaluate
cycle through the skeleton that equals an uninterrupted run."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

from fedshift.contract import (
    RUN_FILES,
    Paper,
    PartitionSpec,
    RunSpec,
    deep_merge,
    experiments_of,
    load_paper,
    load_papers,
    run_file,
)
from fedshift.errors import ConfigError
from fedshift.jobs import evaluate_job, experiment_job, input_fingerprint, partition_job, run_outputs, train_job
from fedshift.plan import experiment_jobs, run_table, seed_batched, seeds_inputs, split_seeds_inputs

TOY = Path(__file__).resolve().parents[1] / "toy_paper"


def toy_config() -> dict:
    return yaml.safe_load((TOY / "toy.yaml").read_text())


def test_deep_merge_and_defaults_merge_nested_keys_without_touching_inputs():
    base = {"train": {"rounds": 5, "client_lr": 0.1}, "seeds": 3, "tags": [1]}
    merged = deep_merge(base, {"train": {"rounds": 9}, "tags": [2]})
    assert merged == {"train": {"rounds": 9, "client_lr": 0.1}, "seeds": 3, "tags": [2]}
    assert base["train"]["rounds"] == 5  # not modified
    exps = experiments_of({"defaults": base, "experiments": {"a": {"seeds": 1}, "b": None}})
    assert exps["a"]["seeds"] == 1 and exps["a"]["train"] == {"rounds": 5, "client_lr": 0.1}
    assert exps["b"] == deep_merge(base, {})
    exps["b"]["train"]["rounds"] = 0
    assert base["train"]["rounds"] == 5


@pytest.mark.parametrize(("field", "value", "needle"), [
    ("paper", "../x", "not a plain name"), ("experiment", "a/b", "not a plain name"),
    ("run", "fed/avg", "not one folder name"), ("seed", -1, "seed must be >= 0"),
])
def test_run_spec_refuses_names_that_leave_their_folder(field, value, needle):
    args = {"paper": "toy", "experiment": "e", "run": "fedavg", "seed": 0} | {field: value}
    with pytest.raises(ConfigError, match=needle):
        RunSpec(**args)


def test_run_spec_path_and_files():
    spec = RunSpec("toy", "e", "wafl~0.02", 3, ("wafl",), {"gamma": 0.02})
    assert spec.path == "toy/e/wafl~0.02/seed~3"
    assert spec.file("metrics") == "results/runs/toy/e/wafl~0.02/seed~3/metrics.csv"
    assert spec == RunSpec("toy", "e", "wafl~0.02", 3, ("wafl",), {"gamma": 0.5})  # identity, not values
    # the workflow's rule patterns (run_file with wildcards) name the same file once filled in
    pattern = run_file("toy", "e", "{run}", "{seed}", "metrics")
    assert pattern.format(run="wafl~0.02", seed=3) == spec.file("metrics")
    with pytest.raises(KeyError):
        run_file("toy", "e", "fedavg", 0, "weights")


@pytest.mark.parametrize(("target", "needle"), [
    ("no_colon", "expected 'package.module:Class'"),
    ("fedshift.nope:X", "cannot import"),
    ("fedshift.contract:RunSpec", "is not a fedshift.contract.Paper subclass"),
    ("tests/toy_paper/missing.py:ToyPaper", "no file"),
])
def test_load_paper_names_the_papers_key(target, needle):
    with pytest.raises(ConfigError, match=rf"papers\.toy: .*{needle}"):
        load_paper("toy", target, {})


def test_load_papers_sets_name_and_module_file_and_run_table_is_keyed_by_path(monkeypatch):
    monkeypatch.chdir(TOY.parents[1])
    papers = load_papers(toy_config())
    toy = papers["toy"]
    assert isinstance(toy, Paper) and toy.name == "toy" and Path(toy.module_file) == TOY / "paper.py"
    assert toy.resolve_path(toy.schema) == TOY / "toy.schema.yaml"
    table = run_table(papers.values())
    assert sorted(table) == [f"toy/two_domains/{a}/seed~{s}" for a in ("fedavg", "fedprox") for s in (0, 1)]
    assert table["toy/two_domains/fedprox/seed~1"].hparams["hparams"] == {"mu": 0.1}


def test_the_plans_papers_resolve_their_runs_once(monkeypatch):
    """load_papers' papers compute runs() once: later calls give the same runs, each a list of its own; an error
    is raised again, nothing kept."""
    from fedshift.contract import _runs_once

    monkeypatch.chdir(TOY.parents[1])
    toy = load_papers(toy_config())["toy"]
    first = toy.runs()
    assert len(first) == 4 and first == type(toy).runs(toy)
    first.clear()  # a caller's edit stays its own
    assert len(toy.runs()) == 4 and toy.runs() is not toy.runs()

    calls = []

    def runs():
        calls.append(1)
        if len(calls) == 1:
            raise ConfigError("first call fails")
        return [RunSpec("p", "e", "fedavg", 0)]

    once = _runs_once(runs)
    with pytest.raises(ConfigError):
        once()
    assert once() == once() == [RunSpec("p", "e", "fedavg", 0)] and len(calls) == 2


def test_run_table_refuses_two_runs_on_one_path():
    class Twice(Paper):
        name = "twice"

        def runs(self):
            return [RunSpec("twice", "e", "fedavg", 0), RunSpec("twice", "e", "fedavg", 0)]

    with pytest.raises(ConfigError, match="two runs share the path twice/e/fedavg/seed~0"):
        run_table([Twice({})])


def test_input_fingerprint_follows_partition_content_and_hparams(tmp_path):
    part = tmp_path / "p.json"
    part.write_text("[1]")
    a = input_fingerprint({"x": 1}, 0, {"partition": str(part)})
    assert a == input_fingerprint({"x": 1}, 0, {"partition": str(part)})
    assert a != input_fingerprint({"x": 2}, 0, {"partition": str(part)})
    assert a != input_fingerprint({"x": 1}, 1, {"partition": str(part)})
    part.write_text("[2]")
    assert a != input_fingerprint({"x": 1}, 0, {"partition": str(part)})
    # the job's code hash: a checkpoint from before a code edit is not resumed after it (reviewer B4)
    b = input_fingerprint({"x": 1}, 0, {"partition": str(part)}, code="c0")
    assert b == input_fingerprint({"x": 1}, 0, {"partition": str(part)}, code="c0")
    assert b != input_fingerprint({"x": 1}, 0, {"partition": str(part)}, code="c1")


def _toy_job(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    paper = load_papers(toy_config() | {"papers": {"toy": f"{TOY / 'paper.py'}:ToyPaper"}})["toy"]
    part = paper.partitions()[0]
    out = f"data/partitions/toy/{part.name}"
    Path(out).parent.mkdir(parents=True)
    partition_job(paper, part, out)
    spec = run_table([paper])["toy/two_domains/fedprox/seed~1"]
    files = run_outputs(spec)
    for f in files.values():
        Path(f).parent.mkdir(parents=True, exist_ok=True)
    return paper, spec, paper.inputs(spec), files


def test_train_job_resumes_a_killed_run_to_the_same_bytes_and_evaluate_adds_identity_columns(tmp_path, monkeypatch):
    paper, spec, inputs, files = _toy_job(tmp_path, monkeypatch)
    ckpt = "results/checkpoints/toy.pt"
    [run] = train_job(paper, [spec], inputs, [files], checkpoint=ckpt, device="cpu")
    assert run["paper"] == "toy" and run["run"] == "fedprox" and run["seed"] == 1 and run["rounds"] == 4
    assert not Path(ckpt).exists() and torch.load(files["artifacts"]) == {}
    first = torch.load(files["model"])
    # a killed job: the paper's loop stops after round 2 of 4, leaving its checkpoint; the rerun resumes from it
    import functools
    import sys

    module = sys.modules[type(paper).__mro__[1].__module__]
    full = module.run_training
    monkeypatch.setattr(module, "run_training", functools.partial(full, stop_after=2))
    fp = input_fingerprint(spec.hparams, spec.seed, inputs)
    paper.train(spec, inputs, device=torch.device("cpu"), checkpoint=ckpt, fingerprint=fp)
    monkeypatch.setattr(module, "run_training", full)
    assert Path(ckpt).exists()
    [again] = train_job(paper, [spec], inputs, [files], checkpoint=ckpt, device="cpu")
    assert again["resumed_from_round"] == 2 and not Path(ckpt).exists()
    second = torch.load(files["model"])
    assert all(torch.equal(first[k], second[k]) for k in first)
    evaluate_job(paper, spec, inputs, files, "metrics.csv", device="cpu")
    m = pd.read_csv("metrics.csv")
    assert set(m.columns) == {"paper", "experiment", "run", "seed", "metric", "value"}
    assert m.loc[0, "seed"] == 1 and 0.5 < m.loc[0, "value"] <= 1


def test_train_job_refuses_specs_of_two_runs(tmp_path, monkeypatch):
    paper, spec, inputs, files = _toy_job(tmp_path, monkeypatch)
    other = RunSpec("toy", "two_domains", "fedavg", 1, ("fedavg",), spec.hparams)
    with pytest.raises(ValueError, match="one outputs entry each"):
        train_job(paper, [spec, other], inputs, [files, files], checkpoint=None, device="cpu")


def test_partition_job_fails_when_the_paper_writes_nothing(tmp_path):
    class Lazy(Paper):
        name = "lazy"

        def write_partition(self, spec, output):
            pass

    with pytest.raises(RuntimeError, match="wrote no"):
        partition_job(Lazy({}), PartitionSpec("p.json"), tmp_path / "p.json")


def test_seeds_inputs_share_common_files_and_split_back_per_seed():
    per_seed = {0: {"prepared": "d.pt", "partition": "p/seed~0.json"},
                1: {"prepared": "d.pt", "partition": "p/seed~1.json"}}
    merged = seeds_inputs(per_seed)
    assert merged == {"prepared": "d.pt", "partition__seed0": "p/seed~0.json", "partition__seed1": "p/seed~1.json"}
    assert split_seeds_inputs(merged, [0, 1]) == [per_seed[0], per_seed[1]]
    assert split_seeds_inputs({"prepared": "d.pt"}, [3]) == [{"prepared": "d.pt"}]


def test_train_job_trains_seeds_with_their_own_inputs_one_after_the_other(tmp_path, monkeypatch):
    paper, spec, inputs, files = _toy_job(tmp_path, monkeypatch)
    other = RunSpec("toy", "two_domains", "fedprox", 0, spec.algorithms, spec.hparams)
    shutil.copy(inputs["partition"], "copy.json")  # the same data under another name: a per-seed input
    out0 = {k: str(Path("s0") / Path(v).name) for k, v in files.items()}
    Path("s0").mkdir()
    runs = train_job(paper, [other, spec], [{"partition": "copy.json"}, inputs], [out0, files],
                     checkpoint="ck.pt", device="cpu")
    assert [r["seed"] for r in runs] == [0, 1] and runs[0]["fingerprint"] != runs[1]["fingerprint"]
    alone = tmp_path / "alone"
    alone.mkdir()
    files_alone = {k: str(alone / Path(v).name) for k, v in files.items()}
    train_job(paper, [spec], inputs, [files_alone], checkpoint=None, device="cpu")
    a, b = torch.load(files["model"]), torch.load(files_alone["model"])
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # the same as the seed's own job
    assert not Path("ck.pt").exists() and not list(Path(".").glob("ck.seed~*.pt"))


def test_seeds_train_together_when_asked_and_every_run_id_has_the_same_seeds():
    class Two(Paper):
        name = "p"

        def runs(self):
            same = [RunSpec("p", "same", a, s, ("fedavg",)) for a in ("fedavg", "fedprox") for s in (0, 1)]
            return same + [RunSpec("p", "ragged", "fedavg", s, ("fedavg",)) for s in (0, 1)] + [
                RunSpec("p", "ragged", "fedprox", 0, ("fedprox",))]

    together = Two({"jobs": {"seeds_together": True}})
    assert seed_batched(run_table([together]), {"p": together}) == [("p", "same")]
    assert seed_batched(run_table([Two({})]), {"p": Two({})}) == []


def test_experiment_jobs_group_runs_and_take_the_partitions_only_they_read():
    class Shared(Paper):
        name = "p"

        def partitions(self):
            return [PartitionSpec("a.json"), PartitionSpec("b.json"), PartitionSpec("common.json")]

        def runs(self):
            return [RunSpec("p", e, a, s, ("fedavg",)) for e in ("a", "b") for a in ("fedprox", "fedavg")
                    for s in (1, 0)]

        def inputs(self, spec):
            return {"own": f"data/partitions/p/{spec.experiment}.json", "common": "data/partitions/p/common.json",
                    "prepared": "data/prepared/x.pt"}

    paper = Shared({})
    jobs = experiment_jobs(run_table([paper]), {"p": paper})
    assert list(jobs) == [("p", "a"), ("p", "b")]
    a = jobs["p", "a"]
    assert [(s.run, s.seed) for s in a.runs] == [("fedavg", 0), ("fedavg", 1), ("fedprox", 0), ("fedprox", 1)]
    assert [p.name for p in a.partitions] == ["a.json"]  # common.json is b's too: it keeps its own job
    assert a.inputs({"p": paper}) == ["data/partitions/p/common.json", "data/prepared/x.pt"]
    assert a.outputs()[0] == "data/partitions/p/a.json" and len(a.outputs()) == 1 + 4 * 5
    assert "results/runs/p/a/fedprox/seed~1/metrics.csv" in a.outputs()


def test_experiment_job_writes_every_run_as_the_per_run_jobs_do_and_a_restart_restores_finished_run_ids(
        tmp_path, monkeypatch):
    paper, spec, inputs, files = _toy_job(tmp_path, monkeypatch)
    runs = run_table([paper])
    alone = {}
    for key, s in sorted(runs.items()):  # the per-run jobs, as rules paper_train_/paper_evaluate_toy_<exp> run them
        f = run_outputs(s)
        train_job(paper, [s], paper.inputs(s), [f], checkpoint=None, device="cpu")
        evaluate_job(paper, s, paper.inputs(s), f, s.file("metrics"), device="cpu")
        alone[key] = {k: Path(v).read_bytes() for k, v in (f | {"metrics": s.file("metrics")}).items()
                      if k != "run"}  # run.json: wall times and the job's fingerprint differ
    shutil.rmtree("results/runs")
    Path("data/partitions/toy/two_domains.json").unlink()
    [job] = experiment_jobs(runs, {"toy": paper}).values()
    assert [p.name for p in job.partitions] == ["two_domains.json"]
    trained = []
    real_train = type(paper).train

    def train(self, s, *args, **kwargs):
        if s.run == "fedprox":
            raise KeyboardInterrupt("killed")  # the job dies in its second run id
        trained.append((s.run, s.seed))
        return real_train(self, s, *args, **kwargs)

    monkeypatch.setattr(type(paper), "train", train)
    with pytest.raises(KeyboardInterrupt):
        experiment_job(paper, job, checkpoints="ck", device="cpu")
    assert trained == [("fedavg", 0), ("fedavg", 1)] and Path("ck/finished/fedavg/STAMP").is_file()
    for f in job.outputs():  # Snakemake deletes a failed job's outputs
        Path(f).unlink(missing_ok=True)
    monkeypatch.setattr(type(paper), "train", lambda self, s, *a, **k: trained.append((s.run, s.seed))
                        or real_train(self, s, *a, **k))
    experiment_job(paper, job, checkpoints="ck", device="cpu")
    assert trained[2:] == [("fedprox", 0), ("fedprox", 1)]  # fedavg restored, not trained again
    assert not Path("ck/fedprox").exists() and all(Path(f).is_file() for f in job.outputs())  # stashes stay
    for key, want in alone.items():
        s = runs[key]
        assert {k: Path(s.file(k)).read_bytes() for k in want} == want, key
    # a stash whose stamp no longer matches (other hyper-parameters) is not restored: the run id trains again
    from fedshift.jobs import stash_run_files

    stash_run_files(Path("ck/finished/fedavg"), "another stamp",
           [{"model": runs["toy/two_domains/fedavg/seed~0"].file("model")}])
    del trained[:]
    experiment_job(paper, job, checkpoints="ck", device="cpu")
    assert ("fedavg", 0) in trained


def test_an_experiment_job_grown_by_a_run_id_trains_only_that_run_id(tmp_path, monkeypatch):
    """A run id joining a finished experiment (a plug-in algorithm added to the shift matrix): Snakemake deletes the
    job's outputs and runs it again; the job restores the other run ids from their stashes (the same inodes and
    bytes: hard links) when each one's own code stamp (run_codes) is unchanged, and trains the new run id alone."""
    paper, *_ = _toy_job(tmp_path, monkeypatch)
    runs = run_table([paper])
    [full] = experiment_jobs(runs, {"toy": paper}).values()
    first = dataclasses.replace(full, runs=tuple(s for s in full.runs if s.run != "fedprox"))
    codes = {"fedavg": "hash-of-fedavg", "fedprox": "hash-of-fedprox"}
    experiment_job(paper, first, checkpoints="ck", device="cpu", code="job-code-1", run_codes=codes)
    kept = {f: (Path(f).stat().st_ino, Path(f).read_bytes()) for s in first.runs
            for f in (s.file(k) for k in RUN_FILES)}
    for f in full.outputs():  # Snakemake: the job has a new output, so it runs again, its old outputs deleted
        Path(f).unlink(missing_ok=True)
    trained = []
    real_train = type(paper).train
    monkeypatch.setattr(type(paper), "train", lambda self, s, *a, **k: trained.append((s.run, s.seed))
                        or real_train(self, s, *a, **k))
    experiment_job(paper, full, checkpoints="ck", device="cpu", code="job-code-2", run_codes=codes)
    assert {r for r, _ in trained} == {"fedprox"}
    assert {f: (Path(f).stat().st_ino, Path(f).read_bytes()) for f in kept} == kept
    # without per-run-id stamps the job's code (which counts every run id's algorithm) changed: all retrain
    for f in full.outputs():
        Path(f).unlink(missing_ok=True)
    del trained[:]
    experiment_job(paper, full, checkpoints="ck", device="cpu", code="job-code-3")
    assert {r for r, _ in trained} == {"fedavg", "fedprox"}


def test_datasets_read_maps_prepared_and_raw_inputs_to_registry_datasets():
    from fedshift.contract import datasets_read

    files = ["data/prepared/mnist.pt", "data/prepared/mnist_m_bsds.pt", "data/raw/resnet50_imagenet/r50.pth",
             "data/partitions/fedpals/x/seed~0.json", "results/runs/a/b/c/seed~0/model.pt"]
    assert datasets_read(files) == ["bsds500", "mnist", "resnet50_imagenet"]  # mnist_m_bsds: MNIST + BSDS500
    assert datasets_read([]) == []
