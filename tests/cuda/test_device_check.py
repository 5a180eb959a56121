"""The device check's CPU mode (issue 38, point 4: it cannot rot), its bundle maker and its report, on the CPU."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import device_bundle  # noqa: E402
import device_report  # noqa: E402


def _wheel(folder: Path, name: str, version: str, requires: list[str]) -> Path:
    """A minimal pure-Python wheel (importable module ``name``) whose METADATA has ``requires``."""
    dist = f"{name}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name}/__init__.py", f"__version__ = {version!r}\n")
        z.writestr(f"{dist}/METADATA", meta)
        z.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{dist}/RECORD", "")
    return path


def test_select_wheels_follows_requirements_on_the_target_minus_the_image(tmp_path):
    graph = {
        "solver": ["numpy>=2", "clarabel>=0.5", "helper; python_version >= '3.12'", "old; python_version < '3.12'",
                   "winonly; sys_platform == 'win32'", "docs; extra == 'doc'"],
        "clarabel": ["cffi", "numpy"],
        "cffi": ["pycparser"],
        "pycparser": [],
        "helper": ["solver"],  # a cycle back to a root
        "schema": ["pycparser"],
    }
    fetched = []

    def fetch(req: Requirement) -> Path:
        name = device_bundle.normalise(req.name)
        fetched.append(name)
        return _wheel(tmp_path, name, "1.0", graph[name])

    chosen = device_bundle.select_wheels([Requirement("solver>=1"), Requirement("Schema")],
                                         frozenset({"numpy"}), fetch)
    assert set(chosen) == {"solver", "clarabel", "cffi", "pycparser", "helper", "schema"}
    assert sorted(fetched) == sorted(chosen)  # each fetched once, numpy (in the image) never
    reqs = device_bundle.requirements_of(device_bundle.wheel_metadata(chosen["solver"]))
    assert [r.name for r in reqs] == ["numpy", "clarabel", "helper"]  # markers for cp312 linux, no extras


def test_the_wheel_set_covers_what_the_image_lacks_and_leaves_out_the_unneeded():
    roots = {device_bundle.normalise(r.name) for r in device_bundle.project_requirements()}
    missing = roots - device_bundle.IMAGE_PACKAGES
    assert {"cvxpy", "jsonschema"} <= missing and "torch" not in missing and "numpy" not in missing
    assert set(device_bundle.NOT_CARRIED) & device_bundle.IMAGE_PACKAGES == set()
    assert "cvxpy" not in device_bundle.NOT_CARRIED and "clarabel" not in device_bundle.NOT_CARRIED
    # fedshift solves with CLARABEL only: the solvers left out must not be named in its code
    src = "\n".join(p.read_text() for p in (REPO / "src" / "fedshift").rglob("*.py"))
    assert "cp.CLARABEL" in src and "cp.SCS" not in src and "cp.HIGHS" not in src


def test_pinned_takes_the_tested_version_when_it_satisfies_the_requirement():
    from importlib.metadata import version

    v = version("numpy")
    assert device_bundle.pinned(Requirement("numpy>=1.0")) == f"numpy=={v}"
    assert device_bundle.pinned(Requirement("numpy<1")) == "numpy<1"
    assert device_bundle.pinned(Requirement("no-such-package-xyz>=2")) == "no-such-package-xyz>=2"


def test_bundle_data_are_the_first_rows_of_the_mirror_in_its_own_format(mirror_dir, tmp_path):
    from fedshift.data.fashion_mnist import read_idx

    m = device_bundle.make_data(mirror_dir, tmp_path / "data", train=50, test=20)
    for name, src in device_bundle.DATASETS.items():
        for fname, entry in m[name].items():
            got = read_idx(tmp_path / "data" / name / fname)
            full = read_idx(mirror_dir / src / fname)
            assert np.array_equal(got, full[: entry["rows"]]) and entry["of"] == len(full)
            assert entry["subset_sha256"] == hashlib.sha256(got.tobytes()).hexdigest()
    assert m["fashion-mnist"]["train-images-idx3-ubyte.gz"]["rows"] == 50
    # the same rows give the same bytes (gzip without a timestamp)
    first = (tmp_path / "data" / "mnist" / "t10k-labels-idx1-ubyte.gz").read_bytes()
    device_bundle.make_data(mirror_dir, tmp_path / "data", train=50, test=20)
    assert (tmp_path / "data" / "mnist" / "t10k-labels-idx1-ubyte.gz").read_bytes() == first
    assert gzip.decompress(first)[:4] == bytes([0, 0, 8, 1])


def test_report_names_failed_and_missing_steps(tmp_path):
    (tmp_path / "steps.tsv").write_text("install\t0\t3\t60\nengine\t124\t150\t150\n")
    (tmp_path / "cuda_tests.xml").write_text(
        '<testsuites><testsuite tests="2" failures="1" errors="0" skipped="0" time="1.5">'
        '<testcase classname="t" name="a"/><testcase classname="t" name="b">'
        '<failure message="AssertionError: relative error 3e-3 &gt; 1e-4">tb</failure></testcase>'
        '</testsuite></testsuites>')
    rec = device_report.main(str(tmp_path))
    assert not rec["ok"] and rec["steps"][1]["timed_out"]
    assert rec["cuda_tests"]["failures"] == 1 and rec["cuda_tests"]["failed"][0]["test"] == "t::b"
    md = (tmp_path / "summary.md").read_text()
    assert "124 (timed out)" in md and "relative error 3e-3" in md and md.count("no result") == 3  # +projection
    assert not (tmp_path / "steps.tsv").exists()


@pytest.mark.workflow  # the whole script end to end (two pytest sessions, the engine benchmark): the full run
def test_device_check_cpu_mode_runs_every_step(mirror_dir, tmp_path):
    bundle = tmp_path / "bundle"
    device_bundle.make_data(mirror_dir, bundle / "data", train=160, test=20)
    (bundle / "wheels").mkdir()
    _wheel(bundle / "wheels", "fedshift_probe", "0.1", [])
    out, scratch = tmp_path / "out", tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "PYTHON": sys.executable, "TMPDIR": str(scratch)}
    env.pop("OUT", None)
    proc = subprocess.run(["bash", str(REPO / "benchmarks" / "device_check"), "--device", "cpu", "--tiny", "--out",
                           str(out), "--bundle", str(bundle)], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8 and {"summary.md", "device_check.json", "engine.json", "env.json", "log.txt",
                                "projection.json"} <= set(files)
    rec = json.loads((out / "device_check.json").read_text())
    assert rec["ok"] and [s["step"] for s in rec["steps"]] == ["install", "env", "cuda", "compat", "engine", "project"]
    assert rec["env"]["device"] == "cpu"
    assert rec["cuda_tests"]["tests"] >= 20 and rec["cuda_tests"]["failures"] == 0  # collected, skipped here
    assert rec["compat_tests"]["tests"] >= 1 and rec["compat_tests"]["failures"] == 0
    rows = rec["engine"]["rows"]
    assert len(rows) == 8 and all(r["s_per_round"] > 0 and np.isfinite(r["final_loss"]) for r in rows)
    assert rec["engine"]["workload"]["data"].startswith("Fashion-MNIST")  # the bundle's real rows
    assert "fedshift_probe" in (out / "log.txt").read_text()  # the carried wheel was installed
    assert "| cnn | 4 |" in (out / "summary.md").read_text()
    _check_projection(json.loads((out / "projection.json").read_text()), (out / "summary.md").read_text())
    assert not list(scratch.glob("fedshift-projection-*"))  # the projection's stand-ins do not outlive it


def _check_projection(proj: dict, summary: str) -> None:
    """The project step's record: every paper plug-in present and projected, the counts adding up."""
    import yaml

    papers = {}
    for f in sorted((REPO / "config" / "papers").glob("*.yaml")):
        papers |= yaml.safe_load(f.read_text()).get("papers") or {}
    assert proj["tiny"] and proj["final"] and proj["device"] == "cpu"
    assert set(proj["papers"]) == set(papers)
    total = 0
    for name, p in proj["papers"].items():
        assert p["measured"] >= 1 and p["projected_s"] > 0, (name, p)
        assert p["measured"] + p["extrapolated"] + p["unprojected"] == p["groups"] == len(
            [g for g in proj["groups"] if g["paper"] == name])
        assert p["unprojected"] == 0  # one measured group per paper: every other group extrapolates from it
        assert sum(e["groups"] for e in p["experiments"].values()) == p["groups"]
        total += p["groups"]
    assert total == proj["all"]["groups"] == len(proj["groups"])
    for g in proj["groups"]:
        assert g["projected_s"] > 0 and g["seeds"] >= 1
        assert (g["basis"] == "measured") == (g["status"] == "measured")
        if g["basis"] == "measured":
            assert set(g["times_s"]) in ({"A", "B"}, {"full"}) and g["per_round_s"] >= 0
    assert proj["all"]["projected_s"] > 0 and "## Paper-scale projection (TINY" in summary
    assert f"| **all** | **{proj['all']['measured']} / {proj['all']['groups']}**" in summary
