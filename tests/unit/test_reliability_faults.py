"""Issue 39 (reliability), part 2: faults beyond ``kill -9``, bad prepared data, and divergence that says what it did.

* a full disk (ENOSPC) half-way through a table, a checkpoint and a model: a clear error naming the file, the
  previous file intact, no temporary left, and the rerun after "freeing space" gives the uninterrupted bytes;
* SIGTERM / SIGUSR1 (SLURM's time limit or preemption, ``--signal=USR1@N``): the job finishes its round, writes a
  checkpoint, exits 128 + signal, and the requeued job resumes to the uninterrupted bytes, losing at most one
  round; SIGTERM then SIGKILL (the grace ran out) is the kill -9 case;
* a job killed for memory is SIGKILLed by the kernel's OOM killer: the kill -9 tests of ``test_crash_safety.py``
  (``test_a_training_job_killed_and_rerun_gives_the_uninterrupted_result``) cover its rerun;
* prepared data with non-finite features or labels out of range are refused at prepare and at load, naming the
  file;
* a diverged run that the paper records says exactly what it wrote (no "No result was written").
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from fedshift.io import TEMPORARY_PATTERN, DiskFullError, atomic_write, torch_save_atomic, write_json

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
sys.path.insert(0, str(TESTS))
import paper_jobs  # noqa: E402


def _temporaries(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if TEMPORARY_PATTERN.match(p.name)]


def _tree(root: Path, skip: tuple[str, ...] = ()) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name not in skip}


class _Full:
    """``os.fsync`` that fails with ENOSPC on the n-th sync of a temporary file of ``name`` (its bytes half
    written: the data are flushed to the temporary file, the sync is where a full disk is reported)."""

    def __init__(self, name: str, nth: int = 1, code: int = errno.ENOSPC) -> None:
        self.name, self.nth, self.code, self.seen, self.real = name, nth, code, 0, os.fsync

    def __call__(self, fd: int) -> None:
        target = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
        if target.startswith(f".{self.name}.") and target.endswith(".tmp"):
            self.seen += 1
            if self.seen == self.nth:
                raise OSError(self.code, os.strerror(self.code))
        return self.real(fd)


# ---------------------------------------------------------------------------------------------- ENOSPC


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_a_full_disk_half_way_through_a_table_keeps_the_previous_table(tmp_path, monkeypatch, code):
    table = tmp_path / "results" / "tables" / "t.csv"
    write_json(table, {"old": 1})
    old = table.read_bytes()

    def half_then_full(fh):
        fh.write("a,b\n" + "1,2\n" * 1000)
        raise OSError(code, os.strerror(code))

    with pytest.raises(DiskFullError) as err:
        with atomic_write(table) as fh:
            half_then_full(fh)
    assert err.value.errno == code and str(table) in str(err.value) and "previous version is intact" in str(err.value)
    assert table.read_bytes() == old and _temporaries(tmp_path) == []
    monkeypatch.setattr(os, "fsync", _Full("t.csv"))  # the same when the disk fills at the final sync
    with pytest.raises(DiskFullError):
        write_json(table, {"new": 2})
    assert table.read_bytes() == old and _temporaries(tmp_path) == []
    monkeypatch.undo()  # space freed: the rerun writes what an uninterrupted write writes
    write_json(table, {"new": 2})
    write_json(tmp_path / "ref.json", {"new": 2})
    assert table.read_bytes() == (tmp_path / "ref.json").read_bytes()


def test_a_full_disk_with_no_previous_file_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "fsync", _Full("m.pt"))
    with pytest.raises(DiskFullError, match="nothing was written there"):
        torch_save_atomic({"w": torch.ones(1000)}, tmp_path / "m.pt")
    assert list(tmp_path.iterdir()) == []


def test_other_os_errors_are_not_called_a_full_disk(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "fsync", _Full("x.json", code=errno.EIO))
    with pytest.raises(OSError) as err:
        write_json(tmp_path / "x.json", 1)
    assert not isinstance(err.value, DiskFullError) and err.value.errno == errno.EIO


@pytest.fixture(scope="module")
def toy_job(tmp_path_factory):
    """AgnosticFedAvg's toy job (8 rounds, a checkpoint every 2), trained once uninterrupted under ``ref``."""
    root = tmp_path_factory.mktemp("toy")
    paper_jobs.setup("agnostic_fedavg", root)
    paper_jobs.run(root, "ref")
    return root


@pytest.mark.parametrize(("name", "nth"), [("ckpt.pt", 2), ("model.pt", 1), ("history.csv", 1), ("run.json", 1)])
def test_a_full_disk_in_a_training_job_fails_clearly_and_the_rerun_gives_the_same_bytes(toy_job, monkeypatch,
                                                                                        name, nth):
    out = f"full-{name}"
    monkeypatch.setattr(os, "fsync", _Full(name, nth))
    with pytest.raises(DiskFullError) as err:
        paper_jobs.run(toy_job, out)
    assert name in str(err.value) and "Free space and rerun" in str(err.value)
    o = toy_job / out
    assert _temporaries(o) == [] and not (o / "run.json").exists()  # nothing that looks complete
    saved = torch.load(o / "ckpt.pt", weights_only=True)  # the previous checkpoint, intact
    assert saved["round"] == (2 if name == "ckpt.pt" else 6)
    monkeypatch.undo()
    info = paper_jobs.run(toy_job, out)
    assert info["resumed_from_round"] == saved["round"] and not (o / "ckpt.pt").exists()
    assert _tree(o, ("run.json",)) == _tree(toy_job / "ref", ("run.json",))


# ---------------------------------------------------------------------------------------------- SIGTERM

# Run in the child before the job: at the n-th os.replace onto a file named NAME, send SIGNAL to itself (as
# SLURM would, while the job runs) and go on; with KILL, follow it by SIGKILL before the next round ends.
_SIGNAL_PRELUDE = '''
import os, signal
_name, _nth, _sig, _kill = os.environ["FEDSHIFT_TEST_SIGNAL_AT"].split(":")
_replace, _seen = os.replace, [0]
def _signal_point(src, dst, *args, **kwargs):
    out = _replace(src, dst, *args, **kwargs)
    if os.path.basename(os.fspath(dst)) == _name:
        _seen[0] += 1
        if _seen[0] == int(_nth):
            os.kill(os.getpid(), getattr(signal, _sig))
            if _kill == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
    return out
os.replace = _signal_point
'''


def _run_signalled(root: Path, out: str, at: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "FEDSHIFT_TEST_SIGNAL_AT": at, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(TESTS)!r})
        import paper_jobs
        paper_jobs.run({str(root)!r}, {out!r})
    """)
    return subprocess.run([sys.executable, "-c", _SIGNAL_PRELUDE + code], cwd=root, env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.mark.parametrize(("sig", "nth"), [("SIGTERM", 1), ("SIGUSR1", 2)])
def test_sigterm_checkpoints_exits_non_zero_and_the_requeued_job_gives_the_same_bytes(toy_job, sig, nth):
    """The signal comes while round 2's (4's) checkpoint is written; the job saves that round and exits 128 + n."""
    out = f"{sig}-{nth}"
    proc = _run_signalled(toy_job, out, f"ckpt.pt:{nth}:{sig}:")
    signum = getattr(signal, sig)
    assert proc.returncode == 128 + signum, proc.stderr[-3000:]
    assert "exit" in proc.stderr and "resumes there" in proc.stderr, proc.stderr[-3000:]
    o = toy_job / out
    assert not (o / "run.json").exists() and not (o / "model.pt").exists() and _temporaries(o) == []
    saved = torch.load(o / "ckpt.pt", weights_only=True)
    assert saved["round"] == 2 * nth  # the round in progress when the signal came: nothing lost
    info = paper_jobs.run(toy_job, out)  # the requeued job
    assert info["resumed_from_round"] == saved["round"]
    assert _tree(o, ("run.json",)) == _tree(toy_job / "ref", ("run.json",))


def test_a_signal_after_the_last_round_lets_the_job_finish(toy_job):
    """A stop asked for while the outputs are written: they are finished (exit 0), the same bytes."""
    proc = _run_signalled(toy_job, "late", "model.pt:1:SIGTERM:")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _tree(toy_job / "late", ("run.json",)) == _tree(toy_job / "ref", ("run.json",))


def test_sigterm_then_sigkill_before_the_safe_point_resumes_from_the_last_checkpoint(toy_job):
    out = "term-kill"
    proc = _run_signalled(toy_job, out, "ckpt.pt:2:SIGTERM:kill")
    assert proc.returncode == -signal.SIGKILL
    assert torch.load(toy_job / out / "ckpt.pt", weights_only=True)["round"] == 4
    paper_jobs.run(toy_job, out)
    assert _tree(toy_job / out, ("run.json",)) == _tree(toy_job / "ref", ("run.json",))


def _toy_training():
    from fedshift.algorithms.afl import build_stochastic_afl
    from fedshift.core.base import ClientData
    from fedshift.models import LogisticRegression

    g = torch.Generator().manual_seed(0)
    clients = [ClientData(k, torch.randn(n, 3, generator=g) + k, torch.randint(0, 2, (n,), generator=g), k)
               for k, n in enumerate((6, 9))]
    alg = build_stochastic_afl(LogisticRegression(3, 2), num_domains=2, domain_sizes=[6, 9], batch_size=4,
                               client_lr=0.1, lambda_lr=0.05)
    return alg, {"linear.weight": torch.zeros(2, 3), "linear.bias": torch.zeros(2)}, clients


def test_a_stop_between_log_rounds_resumes_to_the_same_history_and_model(tmp_path):
    """Round 7 of log windows of 5: the checkpoint carries the open window, so nothing differs after resuming."""
    from dataclasses import replace

    from fedshift.core import training
    from fedshift.core.base import state_to_dict

    alg, params, clients = _toy_training()
    ref = training.run_training(alg, params, clients, rounds=20, seed=0, log_every=5)
    apply = alg.apply

    def stopping_apply(state, cl, key):
        if key.round == 6:  # the signal arrives during round 7
            training.request_stop(signal.SIGTERM)
        return apply(state, cl, key)

    ckpt = tmp_path / "ckpt.pt"
    try:
        with pytest.raises(training.Preempted) as stop:
            training.run_training(replace(alg, apply=stopping_apply), params, clients, rounds=20, seed=0,
                                  log_every=5, checkpoint_every=10, checkpoint_path=ckpt, fingerprint="f")
    finally:
        training._STOP.clear()
    assert stop.value.round == 7 and torch.load(ckpt, weights_only=True)["round"] == 7
    res = training.run_training(alg, params, clients, rounds=20, seed=0, log_every=5, checkpoint_every=10,
                                checkpoint_path=ckpt, fingerprint="f")
    assert res.resumed_from == 7 and res.history == ref.history
    for k, v in state_to_dict(ref.state).items():
        if isinstance(v, torch.Tensor):
            assert torch.equal(v, state_to_dict(res.state)[k]), k


def test_preemption_handlers_are_restored_after_the_job():
    from fedshift.core.training import stop_requested
    from fedshift.runner import preemption_handlers

    before = signal.getsignal(signal.SIGTERM)
    with preemption_handlers():
        assert signal.getsignal(signal.SIGTERM) is not before
        os.kill(os.getpid(), signal.SIGUSR1)
        assert stop_requested() == signal.SIGUSR1
    assert signal.getsignal(signal.SIGTERM) is before and stop_requested() is None


# ---------------------------------------------------------------------------------------------- prepared data


def _prepared(**over):
    g = torch.Generator().manual_seed(0)
    data = {"x_train": torch.rand(20, 4, generator=g), "y_train": torch.randint(0, 3, (20,), generator=g),
            "x_test": torch.rand(5, 4, generator=g), "y_test": torch.tensor([0, 1, 2, 0, 1]),
            "domain_train": torch.zeros(20, dtype=torch.long), "class_names": ["a", "b", "c"]}
    return {**data, **over}


@pytest.mark.parametrize(("edit", "message"), [
    ({"x_train": torch.tensor([[0.0, float("nan")]] * 20)}, "x_train holds 20 non-finite values (first at example 0)"),
    ({"x_test": torch.cat([torch.zeros(4, 4), torch.full((1, 4), float("inf"))])},
     "x_test holds 4 non-finite values (first at example 4)"),
    ({"y_test": torch.tensor([0, 1, 2, 3, 1])}, "y_test has label 3 outside [0, 3)"),
    ({"y_train": torch.full((20,), -1)}, "y_train has label -1 outside [0, 3)"),
    ({"y_train": torch.zeros(20)}, "y_train has dtype torch.float32, not integer labels"),
    ({"y_train": torch.zeros(19, dtype=torch.long)}, "split 'train' arrays disagree in length"),
    ({"domain_train": torch.zeros(21, dtype=torch.long)}, "split 'train' arrays disagree in length"),
])
def test_bad_prepared_data_are_refused_at_load_naming_the_file(tmp_path, edit, message):
    from fedshift.data.prepare import PreparedDataError, load_prepared

    path = tmp_path / "data" / "prepared" / "toy.pt"
    path.parent.mkdir(parents=True)
    torch.save(_prepared(**edit), path)
    with pytest.raises(PreparedDataError) as err:
        load_prepared(path)
    assert str(path) in str(err.value) and message in str(err.value), err.value


def test_good_prepared_data_load_unchanged(tmp_path):
    from fedshift.data.prepare import load_prepared

    path = tmp_path / "ok.pt"
    torch.save(_prepared(), path)
    loaded = load_prepared(path)
    assert torch.equal(loaded["x_train"], _prepared()["x_train"]) and loaded["class_names"] == ["a", "b", "c"]


def test_prepare_refuses_to_write_bad_data(tmp_path, monkeypatch):
    import numpy as np

    from fedshift.data import prepare

    def bad_loader(raw_dir):
        return {"x_train": np.array([[1.0, np.nan]], dtype=np.float32), "y_train": np.array([0]),
                "class_names": ["a", "b"]}

    monkeypatch.setitem(prepare.PREPARERS, "toyset", bad_loader)
    out = tmp_path / "toyset.pt"
    with pytest.raises(prepare.PreparedDataError, match=r"toyset\.pt \(dataset toyset\): x_train holds 1 non-finite"):
        prepare.prepare_dataset("toyset", tmp_path, out)
    assert not out.exists() and _temporaries(tmp_path) == []


def test_a_stored_class_count_bounds_labels_without_class_names(tmp_path):
    from fedshift.data.prepare import PreparedDataError, check_prepared

    data = {"x_train": torch.zeros(2, 1), "y_train": torch.tensor([0, 2]), "num_classes": 2}
    with pytest.raises(PreparedDataError, match=r"label 2 outside \[0, 2\)"):
        check_prepared(data, "afl.pt")
    check_prepared({**data, "num_classes": 3}, "afl.pt")


# ---------------------------------------------------------------------------------------------- divergence


def test_a_recorded_divergence_says_what_it_wrote(tmp_path, caplog):
    """FedPALS records a diverged candidate: the log lists the files it writes (which exist), never claims that
    nothing was written, and run.json says where the divergence came from."""
    paper_jobs.setup("fedpals", tmp_path, lr=1e38)
    with caplog.at_level(logging.WARNING):
        info = paper_jobs.run(tmp_path)
    text = caplog.text
    assert "No result was written" not in text and "no result was written" not in text
    assert "recorded as such, not a result" in text and "run.json with diverged: true" in text
    assert (tmp_path / "out" / "run.json").exists() and (tmp_path / "out" / "model.pt").exists()
    assert info["diverged"] and info["diverged_cause"] == "optimisation"
    assert "diverged_fallback" in info


def test_an_unrecorded_divergence_writes_nothing_and_says_so(tmp_path):
    from fedshift.core.training import NonFiniteLossError

    paper_jobs.setup("wafl", tmp_path, lr=1e38)
    with pytest.raises(NonFiniteLossError) as err:
        paper_jobs.run(tmp_path)
    assert "No result was written" not in str(err.value)
    assert not any(p.name in ("model.pt", "run.json", "history.csv") for p in (tmp_path / "out").rglob("*"))


def test_a_diverged_fedpals_candidate_names_its_fallbacks():
    """With the shipped config, FedPALS's λ candidates stand in for each other; FedAvg (one candidate) has none."""
    import copy

    from test_config_validation import base

    from fedshift.contract import load_papers
    from fedshift.jobs import _candidates

    cfg = copy.deepcopy(base(None))
    paper = load_papers(cfg)["fedpals"]
    runs = [s for s in paper.runs() if s.experiment == "fedpals_fmnist_c3" and s.seed == 0]
    fedavg = next(s for s in runs if s.hparams.get("kind") == "fedavg")
    pals = [s for s in runs if s.hparams.get("kind") == "fedpals"]
    assert _candidates(paper, fedavg) == []
    assert len(pals) > 1 and _candidates(paper, pals[0]) == sorted(s.run for s in pals[1:])


# ---------------------------------------------------------------------------------------------- two Snakemakes


@pytest.mark.workflow  # Snakemake builds the whole DAG of `claims` (tens of seconds): the full run, not the unit loop
def test_a_second_snakemake_on_the_same_folder_is_refused_by_the_lock(copy_repo, tmp_path):
    """A Snakemake running in a folder holds lock files listing its outputs (``.snakemake/locks``); a second one
    whose jobs touch them is refused before any job with Snakemake's lock message, and nothing changes. (The
    first one is represented by its lock file; the profiles must not turn locking off.)"""
    repo = copy_repo(tmp_path / "repo")
    for profile in (REPO / "profiles").rglob("config.yaml"):
        assert "nolock" not in profile.read_text(), profile
    locks = repo / ".snakemake" / "locks"
    locks.mkdir(parents=True)
    (locks / "0.output.lock").write_text("results/tables/claims.csv\n")

    def snapshot():
        return {str(p.relative_to(repo)): p.stat().st_mtime_ns for p in repo.rglob("*")
                if p.is_file() and ".snakemake" not in p.parts}

    before = snapshot()
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.run([str(Path(sys.executable).with_name("snakemake")), "--cores", "1", "claims"], cwd=repo,
                          env=env, capture_output=True, text=True, timeout=300)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Directory cannot be locked" in text, text[-3000:]
    assert "--unlock" in text and "rule " not in text.split("Directory cannot be locked")[0][-300:]
    assert snapshot() == before


# ---------------------------------------------------------------------------------------------- killed for memory


def test_a_job_killed_for_memory_is_named_with_its_mem_mb(tmp_path):
    """A toy workflow whose job for s=2 is SIGKILLed (as the OOM killer does) and whose s=1 job fails otherwise:
    the report read from Snakemake's own log names the killed job, its wildcards and mem_mb, and only it. The
    rerun of such a job resumes from its checkpoint to the same bytes (the kill -9 tests of test_crash_safety)."""
    from fedshift.validation import explain_killed_jobs

    (tmp_path / "Snakefile").write_text(textwrap.dedent("""
        rule all:
            input: expand("out/{s}.txt", s=[1, 2])
        rule train:
            output: "out/{s}.txt"
            resources: mem_mb=lambda wc: 1000 + int(wc.s)
            script: "job.py"
    """))
    # s=1 fails a second later: two jobs failing within the same millisecond print their exception and their
    # "Error in rule" block interleaved, and Snakemake's log then no longer says which exception is whose (seen once
    # in five runs under load: the kill was reported for s=1); killed.py's docstring states this limit
    (tmp_path / "job.py").write_text("import os, signal, time\n"
                                     "if snakemake.wildcards.s == '2':\n    os.kill(os.getpid(), signal.SIGKILL)\n"
                                     "time.sleep(1)\nraise SystemExit(3)\n")
    proc = subprocess.run([str(Path(sys.executable).with_name("snakemake")), "--cores", "2", "-k"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    (log,) = (tmp_path / ".snakemake" / "log").glob("*.snakemake.log")
    text = log.read_text()
    lines = explain_killed_jobs(text)
    assert len(lines) == 1, text
    (line,) = lines
    assert line.startswith("fedshift: job train (s=2), which had mem_mb = 1002, was killed by SIGKILL"), line
    assert "rerun to resume" in line and "resources.mem_mb" in line
    # the order of the two failures varies: the killed job's report is found after another job's too
    other = "RuleException:\nreturned non-zero exit status 3.\nError in rule train:\n    jobid: 6\n    output: x\n"
    slurm = other + "RuleException:\nJob 5 failed with state OUT_OF_MEMORY\nError in rule train:\n    jobid: 7\n"
    (oom,) = explain_killed_jobs("rule train:\n    jobid: 7\n    wildcards: s=3\n    resources: mem_mb=64\n" + slurm)
    assert "train (s=3), which had mem_mb = 64, was killed by SLURM for exceeding its memory" in oom


def test_the_workflow_reports_killed_jobs_when_it_fails():
    text = (REPO / "workflow" / "rules" / "common.smk").read_text()
    onerror = text[text.index("onerror:"):]
    assert "_explain_killed_jobs(log)" in onerror.split("\n\n")[0]


@pytest.mark.parametrize("paper", [p for p in paper_jobs.PAPERS if p != "agnostic_fedavg"])
def test_every_papers_job_survives_preemption_to_the_same_bytes(tmp_path, paper):
    """SIGTERM while the first checkpoint is written, in each paper's small job (tests/paper_jobs.py; AFL's batched
    two-seed job, WAFL, FedMM, FedPALS; each through the job skeleton's handlers): exit 128 + 15, a checkpoint of
    the round, and the rerun gives the uninterrupted bytes."""
    paper_jobs.setup(paper, tmp_path)
    paper_jobs.run(tmp_path, "ref")
    proc = _run_signalled(tmp_path, "job", "ckpt.pt:1:SIGTERM:")
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr[-3000:]
    assert (tmp_path / "job" / "ckpt.pt").exists() and _temporaries(tmp_path / "job") == []
    info = paper_jobs.run(tmp_path, "job")
    assert info["resumed_from_round"] > 0
    assert _tree(tmp_path / "job", ("run.json",)) == _tree(tmp_path / "ref", ("run.json",))
