"""The job planner (fedshift.plan) as plain Python: the workflow's rule functions without Snakemake."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from fedshift.contract import Paper, PartitionSpec, RunSpec
from fedshift.plan import PartitionJobs, RunJobs, experiment_jobs, experiment_resource, run_jobs, run_table


class Batched(Paper):
    """Two experiments: ``together`` trains its seeds in one job, ``alone`` one job per run; one shared partition."""

    name = "p"

    def partitions(self):
        return [PartitionSpec("together.json", {"prepared": "data/prepared/x.pt"}, {"k": 1}),
                PartitionSpec("alone.json")]

    def runs(self):
        return [RunSpec("p", e, a, s, (a,), {"lr": s / 10}) for e in ("together", "alone")
                for a in ("fedavg", "fedprox") for s in (0, 1)]

    def inputs(self, spec):
        return {"partition": f"data/partitions/p/{spec.experiment}.json", "seeded": f"data/s{spec.seed}.pt"}

    def seeds_per_job(self, experiment):
        return 0 if experiment == "together" else 1

    def resources(self, spec):
        return {"mem_mb": 1000 + 100 * spec.seed, "runtime": 10}


def _code_of(script, algorithms=None, paper=None, modules=()):
    return f"{script}:{','.join(algorithms or [])}:{paper.name}"


def test_run_jobs_name_each_experiments_jobs_and_resolve_them_by_path():
    paper = Batched({})
    runs = run_table([paper])
    jobs = run_jobs(runs, {"p": paper}, {}, _code_of)
    assert list(jobs) == [("p", "alone"), ("p", "together")]
    alone, together = jobs["p", "alone"], jobs["p", "together"]
    assert alone.seeds is None and together.seeds == [0, 1]
    assert alone.job == "{run}/seed~{seed}" and together.job == "{run}/seeds"
    assert together.run_files(["model"]) == {"model_0": "results/runs/p/together/{run}/seed~0/model.pt",
                                             "model_1": "results/runs/p/together/{run}/seed~1/model.pt"}
    w = SimpleNamespace(run="fedprox")
    # shared files by key, a seed's own by <key>__seed<s> (split back by the job script)
    assert together.train_inputs(w) == {"partition": "data/partitions/p/together.json",
                                        "seeded__seed0": "data/s0.pt", "seeded__seed1": "data/s1.pt"}
    assert together.hparams(w) == {0: {"lr": 0.0}, 1: {"lr": 0.1}}
    assert together.train_code(w) == "job_train.py:fedprox:p"
    assert together.resource("mem_mb", 4096)(w) == 1000  # the seeds' memory differs: a function of the job
    assert alone.resource("mem_mb", 4096)(SimpleNamespace(run="fedavg", seed="1")) == 1100
    assert together.resource("runtime", 240) == 10  # every run's the same: the value, no function per job
    assert together.resource("gpus", 0) == 0  # none declares it: the default
    assert alone.seeds_of(SimpleNamespace(run="fedavg", seed="1")) == [1]
    with pytest.raises(ValueError, match="no paper lists the run p/alone/scaffold/seed~0"):
        alone.specs(SimpleNamespace(run="scaffold", seed="0"))


def test_an_experiment_that_is_one_job_whole_leaves_the_run_and_partition_rules():
    paper = Batched({})
    runs = run_table([paper])
    whole = experiment_jobs(runs, {"p": paper})
    assert run_jobs(runs, {"p": paper}, {("p", "alone"): whole["p", "alone"]}, _code_of).keys() == {("p", "together")}
    parts = PartitionJobs(paper, {("p", "alone"): whole["p", "alone"]}, _code_of)
    assert sorted(parts.partitions) == ["together.json"]  # alone.json is written inside the experiment's job
    assert parts.inputs(SimpleNamespace(partition="together.json")) == {"prepared": "data/prepared/x.pt"}
    assert parts.code(None) == "job_partition.py::p"
    with pytest.raises(ValueError, match="lists no partition alone.json"):
        parts.spec(SimpleNamespace(partition="alone.json"))
    assert experiment_resource(whole["p", "alone"], {"p": paper}, "mem_mb", 0) == 1100  # the largest run's
    assert experiment_resource(whole["p", "alone"], {"p": paper}, "runtime", 0) == 20  # the run ids' sum


def test_run_jobs_are_plain_objects():
    """No Snakemake object is needed: a wildcard is anything with ``run`` (and ``seed``)."""
    paper = Batched({})
    job = RunJobs(paper, "alone", run_table([paper]), _code_of)
    assert job.algorithms(SimpleNamespace(run="fedavg", seed=0)) == ["fedavg"]
