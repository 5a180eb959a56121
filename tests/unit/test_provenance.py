"""Device choice (a local job claims a free GPU when it sees several; one visible GPU, as under SLURM, is
used as it is) and the versions run.json records."""

import fcntl
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
import torch

from fedshift import provenance
from fedshift.provenance import claim_gpu, environment_info, pick_device


@pytest.fixture(autouse=True)
def no_claims(monkeypatch):
    monkeypatch.setattr(provenance, "_CLAIMED", {})


def hold(path):
    """Lock a GPU's lock file as another job would (its own open file description)."""
    fh = open(path, "a")  # noqa: SIM115
    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fh


def test_one_visible_gpu_needs_no_lock(tmp_path):
    assert claim_gpu(1, tmp_path) == 0 and not list(tmp_path.iterdir())


def test_jobs_claim_different_gpus_and_keep_theirs(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    other = hold(tmp_path / "gpu-0.lock")  # another job holds GPU 0
    assert claim_gpu(3, tmp_path) == 1
    assert claim_gpu(3, tmp_path) == 1  # the same process keeps its GPU
    with pytest.raises(OSError):  # and holds it against other processes
        hold(tmp_path / "gpu-1.lock")
    other.close()


def test_locks_are_named_after_cuda_visible_devices(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,7")
    other = hold(tmp_path / "gpu-4.lock")
    assert claim_gpu(2, tmp_path) == 1 and (tmp_path / "gpu-7.lock").exists()
    other.close()


def test_all_gpus_held_shares_one_with_a_warning(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    held = [hold(tmp_path / f"gpu-{i}.lock") for i in range(2)]
    with pytest.warns(UserWarning, match="--resources gpu=2"):
        assert claim_gpu(2, tmp_path) in (0, 1)
    for fh in held:
        fh.close()


def test_pick_device(monkeypatch, tmp_path):
    assert pick_device("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match="'auto', 'cpu' or 'cuda'"):
        pick_device("gpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert pick_device("auto") == torch.device("cpu")
    with pytest.raises(RuntimeError, match="no CUDA device is visible"):
        pick_device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(provenance.tempfile, "tempdir", None)  # re-read TMPDIR
    (tmp_path / "fedshift-gpu-locks").mkdir()
    other = hold(tmp_path / "fedshift-gpu-locks" / "gpu-0.lock")
    assert pick_device("auto") == torch.device("cuda", 1)
    other.close()


def test_environment_info_records_versions_used():
    info = environment_info(torch.device("cpu"))
    assert info["torch"] == torch.__version__ and info["device"] == "cpu"
    assert info["packages"]["pandas"] == version("pandas")
    assert info["packages"]["snakemake"] == version("snakemake")


@pytest.mark.parametrize(("preset", "want"), [(None, "AUTO"), ("COMPATIBLE", "COMPATIBLE")])
def test_importing_fedshift_makes_mkl_run_to_run_reproducible(preset, want, monkeypatch):
    # Without MKL_CBWR, MKL split a batch-1 ResNet-50 backward's GEMMs differently from call to call on two
    # threads (the streamed PACS/iWildCam path; benchmarks/mkl_reproducibility.py: 7 of 8 repeats differed in the
    # last bits on the 2-core machine). The benchmark's probe, in a fresh process that imports fedshift first.
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from mkl_reproducibility import _REPEATS

    env = {k: v for k, v in os.environ.items() if k != "MKL_CBWR"}
    if preset:
        env["MKL_CBWR"] = preset
    code = _REPEATS.format(threads=2, repeats=6) + "import os\nprint(os.environ['MKL_CBWR'])\n"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["0", want]  # no repeat differed; the variable as set
