"""Crash safety of every write: umask permissions, no partial file after kill -9, sweeps of stale temporaries.

A job is run in a subprocess and SIGKILLed at a chosen atomic write (``kill_at`` in ``tests/conftest.py``); the
rerun (a sweep, as the workflow's ``onstart`` does, then the same call) must leave the tree an uninterrupted run
leaves, byte for byte and mode for mode.
"""

from __future__ import annotations

import hashlib
import os
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
    from fedshift.data.download import DatasetSpec

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


# ---------------------------------------------------------------------------------------------- AFL training

_AFL = """
import json, sys
from fedshift.io import read_json
from fedshift.runner import train_runs
a = read_json("args.json")
train_runs(a["resolved"], [0, 1], prepared_path="prepared.pt", partition_path="partition.json",
           outputs=[{{"model": f"{{o}}/seed~{{s}}/model.pt", "history": f"{{o}}/seed~{{s}}/history.csv",
                      "run": f"{{o}}/seed~{{s}}/run.json"}} for s in (0, 1) for o in ["{out}"]],
           checkpoint_path="{out}/ckpt.pt", device="cpu")
"""


def _afl_job(root: Path, rounds: int = 40) -> dict:
    """A tiny Adult-like AFL job (two domains, 6 features), 40 rounds, checkpoints every 10: its resolved config."""
    from fedshift.config import load_yaml, resolve_hparams
    from fedshift.experiments import make_partition
    from fedshift.io import torch_save_atomic

    g = torch.Generator().manual_seed(0)
    prepared = {"domain_names": ["doctorate", "other"], "num_classes": 2}
    for split, n in (("train", 60), ("test", 30)):
        prepared[f"x_{split}"] = torch.randn(n, 6, generator=g)
        prepared[f"y_{split}"] = torch.randint(0, 2, (n,), generator=g)
        prepared[f"domain_{split}"] = (torch.arange(n) % 3 == 0).long()
    torch_save_atomic(prepared, root / "prepared.pt")
    config = load_yaml(Path(__file__).resolve().parents[2] / "config/papers/afl.yaml")
    config["experiments"]["afl_adult"]["train"].update(rounds=rounds, log_every=10, checkpoint_every=10)
    resolved = resolve_hparams(config, "afl_adult", "afl")
    write_json(root / "partition.json", make_partition(config["experiments"]["afl_adult"], prepared, 0))
    write_json(root / "args.json", {"resolved": resolved})
    return resolved


@pytest.mark.parametrize("at", ["after:ckpt.pt:2", "before:ckpt.pt:3", "after:model.pt:1", "before:run.json:2"])
def test_a_batched_afl_job_killed_and_rerun_gives_the_same_runs(tmp_path, mask022, kill_at, at):
    """Kill points: after the round-20 checkpoint, inside the round-30 one, between the two seeds' outputs."""
    import pandas as pd

    from fedshift.io import read_json
    from fedshift.runner import train_runs

    resolved = _afl_job(tmp_path)

    def rerun(out):
        sweep_temporaries(tmp_path)
        return train_runs(resolved, [0, 1], prepared_path=tmp_path / "prepared.pt",
                          partition_path=tmp_path / "partition.json", checkpoint_path=tmp_path / out / "ckpt.pt",
                          outputs=[{k: tmp_path / out / f"seed~{s}" / f for k, f in
                                    (("model", "model.pt"), ("history", "history.csv"), ("run", "run.json"))}
                                   for s in (0, 1)], device="cpu")

    rerun("ref")
    kill_at.run_killed(_AFL.format(out="job"), at, tmp_path)
    assert (tmp_path / "job" / "ckpt.pt").exists()
    assert bool(_temporaries(tmp_path / "job")) == at.startswith("before")
    infos = rerun("job")
    assert infos[0]["resumed_from_round"] == (20 if "ckpt" in at else 30)  # checkpoints at rounds 10, 20, 30
    volatile = ("run.json",)
    assert kill_at.tree(tmp_path / "job", volatile) == kill_at.tree(tmp_path / "ref", volatile)
    for s in (0, 1):
        run = read_json(tmp_path / "job" / f"seed~{s}" / "run.json")
        assert run["final_lambda"] == read_json(tmp_path / "ref" / f"seed~{s}" / "run.json")["final_lambda"]
        assert pd.read_csv(tmp_path / "job" / f"seed~{s}" / "history.csv")["round"].tolist() == [10, 20, 30, 40]
