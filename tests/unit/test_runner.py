"""The shared end of every training job: outputs, provenance, checkpoint removal."""

import json
import time

import pandas as pd
import pytest
import torch

from fedshift.core.training import TrainResult
from fedshift.runner import write_job_outputs


def _paths(tmp_path):
    return {"model_path": tmp_path / "model.pt", "history_path": tmp_path / "history.csv",
            "run_json_path": tmp_path / "run.json", "checkpoint_path": tmp_path / "ckpt.pt"}


def test_write_job_outputs_writes_everything_and_drops_the_checkpoint(tmp_path):
    paths = _paths(tmp_path)
    paths["checkpoint_path"].write_bytes(b"resume point")
    params = {"w": torch.ones(2, 3, requires_grad=True)}
    result = TrainResult(state=None, history=[], resumed_from=4, wall_time_s=12.0)
    run = write_job_outputs(params, pd.DataFrame({"round": [5, 10], "loss": [0.5, 0.25]}),
                            {"experiment": "e", "rounds": 10}, result=result, t0=time.time() - 20.0,
                            device=torch.device("cpu"), fingerprint="abc",
                            extra=[({"5": {"w": torch.zeros(1)}}, tmp_path / "snapshots.pt")], **paths)
    assert torch.equal(torch.load(paths["model_path"], weights_only=True)["w"], torch.ones(2, 3))
    assert set(torch.load(tmp_path / "snapshots.pt", weights_only=True)) == {"5"}
    assert pd.read_csv(paths["history_path"])["loss"].tolist() == [0.5, 0.25]
    on_disk = json.loads(paths["run_json_path"].read_text())
    assert on_disk["experiment"] == "e" and on_disk["fingerprint"] == "abc"
    assert on_disk["resumed_from_round"] == 4 and on_disk["train_wall_time_s"] == 12.0
    assert on_disk["seconds_per_round"] == pytest.approx(12.0 / 6)
    assert on_disk["job_wall_time_s"] >= 20.0
    assert "environment" in on_disk and "git_commit" in on_disk
    assert run == on_disk
    assert not paths["checkpoint_path"].exists()


def test_write_job_outputs_without_a_result_counts_the_job_time(tmp_path):
    run = write_job_outputs({}, pd.DataFrame({"round": [3]}), {"rounds": 3}, result=None, t0=time.time() - 6.0,
                            device=torch.device("cpu"), fingerprint="f", **_paths(tmp_path))
    assert run["resumed_from_round"] == 0
    assert run["train_wall_time_s"] >= 6.0 and run["seconds_per_round"] >= 2.0


def test_write_job_outputs_needs_the_round_count_before_writing(tmp_path):
    paths = _paths(tmp_path)
    with pytest.raises(KeyError, match="rounds"):
        write_job_outputs({}, pd.DataFrame(), {}, result=None, t0=time.time(), device=torch.device("cpu"),
                          fingerprint="f", **paths)
    assert not any(p.exists() for p in paths.values())
