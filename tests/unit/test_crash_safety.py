"""Crash safety of every write: umask permissions, no partial file after kill -9, sweeps of stale temporaries.

A job is run in a subprocess and SIGKILLed at a chosen atomic write (``kill_at`` in ``tests/conftest.py``); the
rerun (a sweep, as the workflow's ``onstart`` does, then the same call) must leave the tree an uninterrupted run
leaves, byte for byte and mode for mode.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import pytest
import torch

from fedshift.io import TEMPORARY_PATTERN, atomic_write, sweep_temporaries, umask, write_json


@pytest.fixture
def mask022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def _temporaries(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if TEMPORARY_PATTERN.match(p.name)]


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o002])
def test_outputs_get_the_umask_permissions(tmp_path, mask):
    old = os.umask(mask)
    try:
        assert umask() == mask
        write_json(tmp_path / "new" / "deeper" / "a.json", {"a": 1})
        with atomic_write(tmp_path / "b.pt", "wb") as fh:
            torch.save({"w": torch.ones(2)}, fh)
    finally:
        os.umask(old)
    assert (tmp_path / "new" / "deeper" / "a.json").stat().st_mode & 0o777 == 0o666 & ~mask
    assert (tmp_path / "b.pt").stat().st_mode & 0o777 == 0o666 & ~mask
    assert (tmp_path / "new" / "deeper").stat().st_mode & 0o777 == 0o777 & ~mask


def test_a_sweep_removes_dead_temporaries_only(tmp_path, mask022, kill_at):
    kill_at.run_killed(f"from fedshift.io import write_json\nwrite_json({str(tmp_path / 'dead.json')!r}, [1])",
                       "before:dead.json:1", tmp_path)
    (dead,) = _temporaries(tmp_path)
    assert dead.name.startswith(".dead.json.") and not (tmp_path / "dead.json").exists()
    (tmp_path / ".notes.tmp").write_text("not ours")  # no random part: not a fedshift temporary
    with atomic_write(tmp_path / "live.json") as fh:
        fh.write("{}")
        assert sweep_temporaries(tmp_path, tmp_path / "missing") == [dead]  # the live writer holds its lock
        assert [p.name for p in _temporaries(tmp_path)][0].startswith(".live.json.")
    assert _temporaries(tmp_path) == [] and (tmp_path / ".notes.tmp").exists()
    assert (tmp_path / "live.json").read_text() == "{}"


# ---------------------------------------------------------------------------------------------- downloads

def _fake_dataset(root: Path):
    from fedshift.data.sources import DatasetSpec

    mirror = root / "mirror" / "fake"
    mirror.mkdir(parents=True)
    files = []
    for i, name in enumerate(("a.bin", "b.bin", "c.bin")):
        data = bytes(range(256)) * (400 * (i + 1))
        (mirror / name).write_bytes(data)
        files.append({"name": name, "urls": [], "sha256": hashlib.sha256(data).hexdigest()})
    registry = {"fake": {"title": "t", "homepage": "h", "licence": "l", "citation": "c", "mirror_dir": "fake",
                         "files": files}}
    return DatasetSpec.from_registry("fake", registry), root / "mirror"


_DOWNLOAD = """
import pickle
from fedshift.data.download import fetch_dataset
spec, mirror, dest = pickle.loads(bytes.fromhex("{blob}"))
fetch_dataset(spec, dest, mirror, progress=False)
"""


@pytest.mark.parametrize("at", ["before:b.bin:1", "after:a.bin:1", "before:c.bin:1"])
def test_a_download_killed_and_rerun_leaves_what_an_uninterrupted_one_leaves(tmp_path, mask022, kill_at, at):
    import pickle

    from fedshift.data.download import fetch_dataset

    spec, mirror = _fake_dataset(tmp_path)
    fetch_dataset(spec, tmp_path / "ref", mirror, progress=False)
    dest = tmp_path / "data" / "raw" / "fake"
    blob = pickle.dumps((spec, mirror, dest)).hex()
    kill_at.run_killed(_DOWNLOAD.format(blob=blob), at, tmp_path)
    left = _temporaries(dest)  # the reported leftover: a complete temporary file inside the dataset's folder
    assert [p.name.split(".")[1] for p in left] == (["b", "c"][:1] if at == "before:b.bin:1" else
                                                     ["c"] if at == "before:c.bin:1" else [])
    assert sweep_temporaries(tmp_path / "data") == sorted(left)
    fetch_dataset(spec, dest, mirror, progress=False)
    assert kill_at.tree(dest) == kill_at.tree(tmp_path / "ref")
    assert all(mode == 0o644 for _, mode in kill_at.tree(dest).values())


# ---------------------------------------------------------------------------------------------- prepare, partition

_PREPARE = """
from fedshift.data.prepare import load_prepared, prepare_dataset
from fedshift.papers.afl.data import make_partition
from fedshift.io import read_json, write_json
prepare_dataset("adult", "{raw}", "{out}/adult.pt")
exp = read_json("experiment.json")
write_json("{out}/afl_adult.json", make_partition(exp, load_prepared("{out}/adult.pt"), 0))
"""


@pytest.mark.parametrize("at", ["before:adult.pt:1", "before:afl_adult.json:1"])
def test_a_prepare_and_partition_job_killed_and_rerun(tmp_path, mask022, kill_at, mirror_dir, repo_root, at):
    from fedshift.errors import load_yaml
    from fedshift.contract import experiments_of

    experiment = experiments_of(load_yaml(repo_root / "config/papers/afl.yaml")["afl"])["afl_adult"]
    write_json(tmp_path / "experiment.json", experiment)
    kill_at.run_killed(_PREPARE.format(raw=mirror_dir / "adult", out="job"), at, tmp_path)
    (left,) = _temporaries(tmp_path / "job")
    assert left.name.startswith("." + at.split(":")[1] + ".")
    for out in ("job", "ref"):
        sweep_temporaries(tmp_path / out)
        exec(_PREPARE.format(raw=mirror_dir / "adult", out=tmp_path / out).replace(
            '"experiment.json"', repr(str(tmp_path / "experiment.json"))))
    assert kill_at.tree(tmp_path / "job") == kill_at.tree(tmp_path / "ref")


# ---------------------------------------------------------------------------------------------- figures, tables

_FIGURE = """
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from fedshift.io import atomic_write
from fedshift.reporting import save_figure
with atomic_write("{out}/table.csv") as fh:
    fh.write("model,accuracy\\nafl,0.7\\n")
fig, ax = plt.subplots()
ax.plot([0, 1], [1, 0])
save_figure(fig, "{out}/fig.pdf", "{out}/fig.png")
"""


@pytest.mark.parametrize("at", ["before:fig.png:1", "after:fig.pdf:1"])
def test_a_table_and_figure_job_killed_and_rerun(tmp_path, mask022, kill_at, at):
    kill_at.run_killed(_FIGURE.format(out="job"), at, tmp_path)
    assert bool(_temporaries(tmp_path / "job")) == at.startswith("before")
    for folder in ("ref", "job"):
        sweep_temporaries(tmp_path / folder)
        exec(_FIGURE.format(out=tmp_path / folder))  # the rerun, in this process
    assert kill_at.tree(tmp_path / "job") == kill_at.tree(tmp_path / "ref")


# ---------------------------------------------------------------------------------------------- training, per paper

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))
import paper_jobs  # noqa: E402

# Two kill points per paper's job (tests/paper_jobs.py; each checkpoints at every logged round): inside the
# second checkpoint's write (the first one stays), and between the outputs (after the model, before run.json; for
# AFL's batched two-seed job: after the first seed's model). The rerun resumes from the last checkpoint.
KILLS = {"afl": ["before:ckpt.pt:2", "after:model.pt:1"], "agnostic_fedavg": ["before:ckpt.pt:2", "before:run.json:1"],
         "wafl": ["before:ckpt.pt:2", "after:artifacts.pt:1"], "fedmm": ["before:ckpt.pt:2", "before:run.json:1"],
         "fedpals": ["before:ckpt.pt:2", "after:model.pt:1"]}
# run.json fields that differ between a resumed and an uninterrupted run by nature
VOLATILE = ("resumed_from_round", "train_wall_time_s", "job_wall_time_s", "seconds_per_round")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Each paper's job set up once and trained uninterrupted (``<root>/<paper>/ref``)."""
    root = tmp_path_factory.mktemp("jobs")
    for paper in paper_jobs.PAPERS:
        paper_jobs.setup(paper, root / paper)
        paper_jobs.run(root / paper, "ref")
    return root


def _run_json(path: Path) -> dict:
    from fedshift.io import read_json

    return {k: v for k, v in read_json(path).items() if k not in VOLATILE}


@pytest.mark.parametrize("paper,at", [(p, a) for p, kills in KILLS.items() for a in kills])
def test_a_training_job_killed_and_rerun_gives_the_uninterrupted_result(reference, mask022, kill_at, paper, at):
    root = reference / paper
    out = f"job-{at.replace(':', '-')}"
    kill_at.run_killed(f"import sys\nsys.path.insert(0, {str(TESTS)!r})\nimport paper_jobs\n"
                       f"paper_jobs.run({str(root)!r}, {out!r})", at, root)
    assert (root / out / "ckpt.pt").exists()  # kept until run.json is written
    assert bool(_temporaries(root / out)) == at.startswith("before")
    sweep_temporaries(root / out)
    info = paper_jobs.run(root, out)
    assert info["resumed_from_round"] > 0 and not (root / out / "ckpt.pt").exists()
    assert kill_at.tree(root / out, ("run.json",)) == kill_at.tree(root / "ref", ("run.json",))
    for run_json in (root / "ref").rglob("run.json"):
        assert _run_json(root / out / run_json.relative_to(root / "ref")) == _run_json(run_json)


@pytest.mark.parametrize("paper", paper_jobs.PAPERS)
def test_a_non_finite_loss_stops_the_job_naming_the_round(tmp_path, caplog, paper):
    """Every paper's job stops at the first logged round whose loss is NaN/inf and writes no result; FedMM records
    the run as diverged instead (Fig. 5 leaves diverged settings blank): no model, accuracy NaN; so does FedPALS (a
    diverged grid value loses the validation choice of the client step or λ)."""
    from fedshift.core.training import NonFiniteLossError

    paper_jobs.setup(paper, tmp_path, lr=1e38)
    if paper in ("fedmm", "fedpals"):
        info = paper_jobs.run(tmp_path)
        assert info["diverged"] and torch.load(tmp_path / "out/model.pt", weights_only=True) == {}
        if paper == "fedmm":
            assert info["final_target_accuracy"] != info["final_target_accuracy"]  # NaN
        else:
            assert info["selected_round"] is None and "by round 2" in info["diverged_error"]
        assert "by round 2" in caplog.text
        return
    with pytest.raises(NonFiniteLossError, match=r"by round (2 \(seed 0\)|10 .*Seeds of the runs: \[0, 1\])"):
        paper_jobs.run(tmp_path)
    assert [p.name for p in (tmp_path / "out").rglob("*") if p.is_file()] in ([], ["ckpt.pt"])
