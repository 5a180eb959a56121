"""The smoke-scale workflow on a real SLURM cluster, through the unchanged cluster profile.

``slurm_up.sh`` installs Debian's SLURM, munge, slurmdbd and MariaDB (when missing) and starts a
single-node cluster on loopback with two stand-in GPUs, the partition and the account named in
``profiles/slurm/config.yaml``. The smoke-scale workflow (target ``afl``) then runs with
``--workflow-profile profiles/slurm`` plus the CI overlay ``tests/cluster/profile`` (status command,
2-s first poll, 2-thread cap), while one training job is made to fail once (``FEDSHIFT_FAIL_ONCE``)
and must succeed when resubmitted. Its outputs must equal, byte for byte, those of a local run of
the same workflow. ``slurm_down.sh`` stops every daemon by pid file in a finalizer, so also when an
assertion fails; each Snakemake run has a time limit after which its process group gets SIGINT
(Snakemake then cancels its SLURM jobs).

Needs root on Debian/Ubuntu (apt-get); skips elsewhere, but fails under ``CI=true``. The package install
(``slurm_install.sh``) starts in the background as the session begins and these tests run last
(tests/cluster/conftest.py), so that on a fresh machine its minutes overlap the rest of the suite.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.workflow

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
# the training job that fails on its first attempt (its log path; see fedshift.logs)
FAULTY = "results/logs/afl/train/afl_fashion_mnist/afl/seed~0.log"
# AFL's tables and figures at smoke scale (25 jobs in 6 DAG levels; other papers' jobs would only add time)
SMOKE = ["afl", "--configfile", "tests/workflow/smoke.yaml"]


def bounded(args: list[str], cwd: Path, timeout: float, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run ``args`` in a new process group; past ``timeout`` s send the group SIGINT, then SIGKILL.

    SIGINT (not SIGTERM) makes Snakemake cancel its SLURM jobs before it exits. Raises
    AssertionError on a timeout, with the tail of the combined output.
    """
    proc = subprocess.Popen([str(a) for a in args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
        raise AssertionError(f"{' '.join(map(str, args[:4]))} ran past {timeout} s:\n{out[-6000:]}") from None
    return subprocess.CompletedProcess(args, proc.returncode, out, "")


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "DVC_NO_ANALYTICS": "1", "PATH": f"{BIN}:{os.environ['PATH']}", **extra}


@pytest.fixture(scope="module")
def cluster(repo_root, request, slurm_packages):
    """A running loopback cluster (torn down by a finalizer, whatever happens).

    ``slurm_packages`` (tests/cluster/conftest.py) skips where the cluster cannot run, and waits for the package
    install it started in the background when the session began.
    """
    print(slurm_packages)
    # The cluster's ports are fixed: one test cluster per machine at a time.
    lock = open(Path(tempfile.gettempdir()) / "fedshift-slurm-test.lock", "w")  # noqa: SIM115
    fcntl.flock(lock, fcntl.LOCK_EX)
    # Outside pytest's 0700 tmp folders: munged and MariaDB run as their own users.
    state = Path(tempfile.mkdtemp(prefix="fedshift-slurm-"))
    state.chmod(0o755)
    site = yaml.safe_load((repo_root / "profiles/slurm/config.yaml").read_text())["default-resources"]
    env = _env(SLURM_STATE=str(state), PARTITION=site["slurm_partition"], ACCOUNT=site["slurm_account"],
               WITH_DBD="1", FAKE_GPUS="2")

    def down():
        try:
            subprocess.run(["bash", str(HERE / "slurm_down.sh")], env=env, timeout=300, check=False)
        finally:
            shutil.rmtree(state, ignore_errors=True)
            lock.close()

    request.addfinalizer(down)
    t0 = time.monotonic()
    up = bounded(["bash", HERE / "slurm_up.sh"], cwd=state, timeout=600, env=env)
    assert up.returncode == 0, f"slurm_up.sh failed:\n{up.stdout}"
    print(up.stdout, f"slurm_up.sh: {time.monotonic() - t0:.1f} s", sep="\n")
    return {"state": state, "env": env, "site": site}


def _digest(root: Path, sub: str) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((root / sub).rglob("*")) if p.is_file() and p.name != "run.json"}


def _run_json_core(root: Path) -> dict[str, dict]:
    """What a run.json says about the result (not about the host, the times or the GPU assignment)."""
    keep = ("paper", "experiment", "run", "algorithm", "seed", "resolved", "domains", "domain_sizes", "final_lambda",
            "average_lambda", "rounds", "batched_with_seeds")
    return {str(p.relative_to(root)): {k: v for k, v in json.loads(p.read_text()).items() if k in keep}
            for p in sorted((root / "results/runs").rglob("run.json"))}


COMPARED = ["results/runs", "results/tables", "results/figures", "data/partitions", "data/raw"]


@pytest.fixture(scope="module")
def local_reference(copy_repo, mirror_dir, tmp_path_factory):
    """Outputs of a local run of the smoke workflow (profiles/default), in its own copy."""
    repo = copy_repo(tmp_path_factory.mktemp("local") / "repo")
    t0 = time.monotonic()
    proc = bounded([BIN / "snakemake", "--cores", "2", *SMOKE, "--config", f"data_mirror={mirror_dir}"],
                   cwd=repo, timeout=900, env=_env())
    assert proc.returncode == 0, proc.stdout[-6000:]
    print(f"local smoke run: {time.monotonic() - t0:.1f} s")
    return {"digest": {sub: _digest(repo, sub) for sub in COMPARED}, "run_json": _run_json_core(repo)}


@pytest.fixture(scope="module")
def slurm_run(cluster, copy_repo, mirror_dir, tmp_path_factory):
    """The same workflow through profiles/slurm + the CI overlay, one training job failing once."""
    repo = copy_repo(tmp_path_factory.mktemp("slurm") / "repo")
    args = [BIN / "snakemake", "--workflow-profile", "profiles/slurm", "--profile", "tests/cluster/profile",
            *SMOKE, "--config", f"data_mirror={mirror_dir}"]
    t0 = time.monotonic()
    # 16 one-GPU jobs through sbatch and sacct polling, each starting two Snakemake processes, beside another pytest
    # worker's tests on the same two cores: 6-10 minutes; the limit only catches a hang
    proc = bounded(args, cwd=repo, timeout=1500, env=_env(FEDSHIFT_FAIL_ONCE=FAULTY))
    seconds = time.monotonic() - t0
    print(f"SLURM smoke run: {seconds:.1f} s")
    acct = subprocess.run(["sacct", "-a", "-X", "-n", "-P", "-o", "JobID,State,Account,AllocTRES"],
                          capture_output=True, text=True, check=True, env=cluster["env"]).stdout
    jobs = [dict(zip(("id", "state", "account", "tres"), line.split("|"), strict=True))
            for line in acct.splitlines() if line.strip()]
    return {"repo": repo, "proc": proc, "seconds": seconds, "jobs": jobs}


def test_workflow_through_the_cluster_profile_completes(slurm_run):
    proc = slurm_run["proc"]
    assert proc.returncode == 0, proc.stdout[-8000:]
    assert "steps (100%) done" in proc.stdout
    # local rules (downloads, tables, figures) ran on the submit host, everything else in SLURM
    logs = slurm_run["repo"] / ".snakemake/slurm_logs"
    submitted = {p.name for p in logs.iterdir()}
    assert submitted == {"rule_prepare", "rule_paper_partition_afl"} | {
        f"rule_paper_{stage}_afl_afl_{e}" for stage in ("train", "evaluate") for e in ("adult", "fashion_mnist")
    }, submitted


def test_outputs_equal_a_local_run(slurm_run, local_reference):
    repo = slurm_run["repo"]
    for sub in COMPARED:
        got = _digest(repo, sub)
        assert got == local_reference["digest"][sub], f"{sub} differs between the SLURM and the local run"
    assert len(local_reference["digest"]["results/runs"]) == 4 * 12  # model, history, artifacts, metrics of 12 runs
    assert _run_json_core(repo) == local_reference["run_json"]


def test_jobs_ran_in_slurm_with_the_profiles_account_and_gpus(slurm_run, cluster):
    mine = [j for j in slurm_run["jobs"] if j["account"] == cluster["site"]["slurm_account"]]
    gpu = [j for j in mine if "gres/gpu=1" in j["tres"]]
    cpu = [j for j in mine if "gres/gpu" not in j["tres"]]
    # 4 one-seed training jobs + 4 batched (Adult) ones, the failed first attempt of one of them, 4 one-seed
    # evaluations and 4 batched (Adult) ones (evaluation asks for the GPU, as WAFL's attacks need it)
    assert sorted(j["state"] for j in gpu) == ["COMPLETED"] * (8 + 8) + ["FAILED"], gpu
    # prepare 2, partition 2 (plus slurm_up.sh's own `srun true`)
    assert sum(j["state"] == "COMPLETED" for j in cpu) >= 4, cpu
    # each training job ran on the GPU SLURM gave it (CPU build of torch here: device cpu)
    for run_json in (slurm_run["repo"] / "results/runs").rglob("run.json"):
        env = json.loads(run_json.read_text())["environment"]
        assert env["cuda_visible_devices"] in {"0", "1"}, (run_json, env)
        assert env["torch_threads"] == 1


def test_a_job_failing_once_succeeds_on_retry(slurm_run):
    repo, out = slurm_run["repo"], slurm_run["proc"].stdout
    failed = [j["id"] for j in slurm_run["jobs"] if j["state"] == "FAILED"]
    assert len(failed) == 1
    assert "Error in rule paper_train_afl_afl_fashion_mnist" in out
    assert f"SLURM-job '{failed[0]}' failed, SLURM status is: 'FAILED'" in out
    assert "Trying to restart job" in out
    assert (repo / (FAULTY + ".failed-once")).exists()
    # two SLURM jobs for that training job: the failed first attempt and the resubmitted one
    attempts = sorted((repo / ".snakemake/slurm_logs/rule_paper_train_afl_afl_fashion_mnist/afl_0").glob("*.log"),
                      key=lambda p: int(p.stem))
    assert [p.stem for p in attempts][0] == failed[0] and len(attempts) == 2
    assert "InjectedFailure" in attempts[0].read_text() and "InjectedFailure" not in attempts[1].read_text()
    # Snakemake starts the retry with a fresh rule log: it shows the second attempt, to the last round
    log = (repo / FAULTY).read_text()
    assert "it failed once already, so it runs now" in log and "round 200/200 (100%)" in log
    assert (repo / "results/runs/afl/afl_fashion_mnist/afl/seed~0/model.pt").exists()
    # no other job was touched by the knob
    others = [p for p in (repo / "results/logs").rglob("*.log") if not str(p).endswith(FAULTY)]
    assert len(others) > 20 and not any("FEDSHIFT_FAIL_ONCE" in p.read_text() for p in others)


def test_teardown_stops_every_daemon(cluster):
    state = cluster["state"]
    pidfiles = [state / "slurmd.pid", state / "slurmctld.pid", state / "slurmdbd.pid",
                state / "mysql/mariadbd.pid", state / "munge/munged.pid"]
    pids = [int(p.read_text()) for p in pidfiles]
    for pid in pids:
        os.kill(pid, 0)  # running now
    proc = subprocess.run(["bash", str(HERE / "slurm_down.sh")], env=cluster["env"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.count("stopped") == 5, proc.stdout + proc.stderr
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert not any(Path("/etc/slurm", f).is_symlink() for f in ("slurm.conf", "gres.conf", "slurmdbd.conf"))
