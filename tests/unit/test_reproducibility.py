"""The portable-CPU switch: the same bytes under an environment standing in for an older CPU, recorded in run.json.

A FedPALS (2-layer CNN) and a FedMM (gradient-reversal CNN) training job (``tests/paper_jobs.py``, a few rounds)
run in fresh processes, since the switch's variables must be set before torch is imported:

- with the switch (``PORTABLE_CPU_ENV``, as the workflow sets it) on this machine, and with the switch plus an
  environment that hides AVX, AVX2, FMA and AVX-512 from glibc and limits MKL to SSE4.2 (what an older x86 CPU
  offers the libraries the switch does not pin outright): identical bytes;
- without the switch, on this machine and with the instruction set capped at AVX2 (ATen, oneDNN, MKL, glibc): the
  bytes differ, so the stand-in does change the kernels (this part is skipped on a CPU without AVX-512, where the
  cap changes nothing).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fedshift.io import read_json
from fedshift.provenance import (
    PORTABLE_CPU_ENV,
    apply_reproducibility,
    cpu_info,
    environment_info,
    portable_cpu_environment,
)

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))
import paper_jobs  # noqa: E402

OLDER_CPU = {"GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX512F,-AVX512BW,-AVX512VL,-AVX512DQ,-AVX512CD,-AVX2,-FMA,"
                               "-FMA4,-AVX,-BMI1,-BMI2",
             "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"}
AVX2_CAP = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
            "GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX512F"}
PAPERS = ("fedpals", "fedmm")


def _train(root: Path, out: str, env: dict[str, str], papers: tuple[str, ...] = PAPERS) -> None:
    """Train the jobs set up under ``root / <paper>`` in one fresh process with ``env`` added."""
    clean = {k: v for k, v in os.environ.items() if k not in {*PORTABLE_CPU_ENV, *AVX2_CAP, *OLDER_CPU}}
    full = {**clean, **env, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(TESTS.parent / "src"),
                                                                                 str(TESTS)])}
    code = f"import paper_jobs\nfor p in {papers!r}:\n    paper_jobs.run({str(root)!r} + '/' + p, {out!r})"
    proc = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]


def _bytes(root: Path, out: str) -> dict[str, bytes]:
    return {f"{p}/{f}": (root / p / out / f).read_bytes() for p in PAPERS for f in ("model.pt", "history.csv")}


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    root = tmp_path_factory.mktemp("repro")
    for p in PAPERS:
        paper_jobs.setup(p, root / p, rounds=2)
    return root


def test_with_the_switch_an_older_cpu_gives_the_same_bytes(jobs):
    _train(jobs, "switch", portable_cpu_environment({}))
    _train(jobs, "switch_older_cpu", {**portable_cpu_environment({}), **OLDER_CPU})
    assert _bytes(jobs, "switch") == _bytes(jobs, "switch_older_cpu")
    for p in PAPERS:
        env = read_json(jobs / p / "switch" / "run.json")["environment"]
        assert env["reproducibility"]["portable_cpu"] and env["reproducibility"]["deterministic_algorithms"]
        assert env["cpu"]["torch_capability"] == "DEFAULT" and env["cpu"]["numpy_simd"] == []
        assert env["reproducibility"]["environment"]["ONEDNN_MAX_CPU_ISA"] == "SSE41"
        older = read_json(jobs / p / "switch_older_cpu" / "run.json")["environment"]["reproducibility"]
        assert older["environment"]["MKL_ENABLE_INSTRUCTIONS"] == "SSE4_2"


@pytest.mark.skipif("avx512f" not in cpu_info()["isa_flags"], reason="capping at AVX2 changes nothing here")
def test_without_the_switch_the_stand_in_changes_the_bytes(jobs):
    """The stand-in is not vacuous: without the switch, kernels capped at AVX2 give other bytes."""
    paper_jobs.run(jobs / "fedmm", "plain")  # this process: no switch, this machine's kernels
    _train(jobs, "avx2", AVX2_CAP, ("fedmm",))
    assert (jobs / "fedmm/plain/model.pt").read_bytes() != (jobs / "fedmm/avx2/model.pt").read_bytes()
    env = read_json(jobs / "fedmm/plain/run.json")["environment"]
    assert not env["reproducibility"]["portable_cpu"] and env["cpu"]["torch_capability"] != "DEFAULT"


def test_the_switch_refuses_a_process_whose_torch_already_chose_its_kernels(monkeypatch):
    monkeypatch.delenv("FEDSHIFT_PORTABLE_CPU", raising=False)
    assert apply_reproducibility() is False
    if torch.backends.cpu.get_cpu_capability() == "DEFAULT":
        pytest.skip("this CPU runs ATen's default kernels anyway")
    for k, v in PORTABLE_CPU_ENV.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(RuntimeError, match="before torch is imported"):
        apply_reproducibility()
    assert not torch.are_deterministic_algorithms_enabled()


def test_the_switch_keeps_a_users_glibc_tunables_and_run_json_records_the_cpu():
    env = portable_cpu_environment({"GLIBC_TUNABLES": "glibc.malloc.check=3"})
    assert env["GLIBC_TUNABLES"] == f"glibc.malloc.check=3:{PORTABLE_CPU_ENV['GLIBC_TUNABLES']}"
    assert portable_cpu_environment({"GLIBC_TUNABLES": OLDER_CPU["GLIBC_TUNABLES"]})["GLIBC_TUNABLES"] == \
        OLDER_CPU["GLIBC_TUNABLES"]  # masks more already: kept as it is
    info = environment_info(torch.device("cpu"))
    assert info["cpu"]["machine"] and info["cpu"]["torch_capability"] == torch.backends.cpu.get_cpu_capability()
    assert set(info["libraries"]) == {"mkl", "onednn", "cudnn", "numpy_blas"}
    assert set(PORTABLE_CPU_ENV) <= set(info["reproducibility"]["environment"])
