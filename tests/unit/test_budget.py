"""The rehearsal's training budget (fedshift.budget) in every paper's resolution, and the rehearsal marks."""

from __future__ import annotations

import pandas as pd
import pytest

from fedshift.budget import (
    REHEARSAL_MARK,
    apply_budget,
    is_rehearsal,
    job_scale,
    largest_proper_divisor,
    standin_of_workflow,
)
from fedshift.errors import load_yaml
from fedshift.papers import agnostic_fedavg, fedmm, fedpals, wafl
from fedshift.papers.afl.config import resolve_run
from fedshift.reporting import REHEARSAL_COLUMN, mark_rehearsal, save_figure

BUDGET = {"max_rounds": 2}


@pytest.fixture(scope="module")
def papers(repo_root):
    cfg = {}
    for name in ("afl", "agnostic_fedavg", "wafl", "fedmm", "fedpals"):
        cfg.update(load_yaml(repo_root / "config" / "papers" / f"{name}.yaml"))
    return cfg


@pytest.fixture(scope="module")
def rehearsal(repo_root):
    return load_yaml(repo_root / "config" / "rehearsal.yaml")


def test_apply_budget_caps_rounds_and_keeps_periods_consistent():
    train = {"rounds": 3000, "log_every": 100, "checkpoint_every": 1000, "eval_every": 0, "lr": 0.1}
    out = apply_budget(train, BUDGET)
    assert out == {"rounds": 2, "log_every": 1, "checkpoint_every": 1, "eval_every": 0, "lr": 0.1}
    assert train["rounds"] == 3000  # a copy
    big = apply_budget({"rounds": 15000, "log_every": 50, "checkpoint_every": 250, "snapshot_every": 10},
                       {"max_rounds": 100})
    assert big["rounds"] == 100 and big["log_every"] == 50 and big["checkpoint_every"] == 50
    assert big["snapshot_every"] == 10
    for key in ("log_every", "checkpoint_every", "snapshot_every"):  # each divides R; checkpoints before the end
        assert 100 % big[key] == 0
    assert big["checkpoint_every"] % big["log_every"] == 0 and big["checkpoint_every"] < 100
    assert apply_budget({"rounds": 2, "log_every": 2}, {"max_rounds": 5}) == {"rounds": 2, "log_every": 2}
    assert apply_budget(train, None) == train
    assert [largest_proper_divisor(n) for n in (1, 2, 3, 4, 12, 13)] == [1, 1, 1, 2, 6, 1]


def test_apply_budget_refuses_bad_caps():
    with pytest.raises(ValueError, match="budget.max_rounds"):
        apply_budget({"rounds": 5}, {"max_rounds": 0})
    with pytest.raises(ValueError, match="lack 'rounds'"):
        apply_budget({"steps": 5}, BUDGET)


def test_rehearsal_overlay_sets_the_knob_the_scale_and_standins(rehearsal):
    assert rehearsal["scale"] == "rehearsal" and rehearsal["budget"] == BUDGET
    assert {"cifar10", "pacs", "iwildcam", "office31", "emnist_tff", "stackoverflow_tff", "cornell_movie_dialogs",
            "resnet50_imagenet", "mobilenet_v2"} <= set(rehearsal["standin"]["datasets"])
    assert is_rehearsal(rehearsal) and not is_rehearsal({"scale": "paper"})
    assert rehearsal["jobs"] == {"seeds_together": True, "experiments_together": True}  # one job per experiment


def test_budget_caps_every_paper_in_its_resolution(papers):
    for exp in ("afl_adult", "afl_fashion_mnist"):
        assert resolve_run(papers["afl"], exp, "afl")["hparams"]["rounds"] > 2
        hp = resolve_run(papers["afl"], exp, "afl", BUDGET)["hparams"]
        assert hp["rounds"] == 2
        # the validation choice of T (train.select) keeps its candidates, each capped by the budget
        assert resolve_run(papers["afl"], exp, "afl")["hparams"]["select"]["rounds"][0] > 2
        assert hp["select"]["rounds"] == [2]
    sec = papers["agnostic_fedavg"]
    for exp in agnostic_fedavg.config.active_experiments(sec):
        for alg, _ in agnostic_fedavg.config.runs_of(sec, exp):
            tr = agnostic_fedavg.config.resolve_run(sec, exp, alg, BUDGET)["train"]
            assert tr["rounds"] <= 2 and tr["rounds"] % tr["log_every"] == 0
    sec = wafl.merged_section(papers["wafl"])  # defaults: merged into each experiment
    for exp in wafl.active_experiments(sec):
        for alg, _ in wafl.runs_of(sec, exp):
            assert wafl.resolve_run(sec, exp, alg)["train"]["rounds"] == 200
            assert wafl.resolve_run(sec, exp, alg, BUDGET)["train"]["rounds"] == 2
    sec = papers["fedmm"]
    for task, rid, _ in fedmm.runs_of(sec):
        assert fedmm.resolve_run(sec, task, rid, BUDGET)["train"]["rounds"] == 2
    sec = papers["fedpals"]
    for exp in fedpals.active_experiments(sec):
        for alg in fedpals.algorithm_ids(fedpals.experiments_of(sec)[exp]):
            tr = fedpals.resolve_run(sec, exp, alg, BUDGET)["train"]
            assert tr["rounds"] == 2 and tr["eval_every"] == 1
    assert fedpals.synthetic_spec(sec, BUDGET)["train"]["rounds"] == 2
    assert fedpals.synthetic_spec(sec)["train"]["rounds"] == sec["synthetic"]["train"]["rounds"]


def test_mark_rehearsal_marks_tables_in_their_files(tmp_path):
    csv, md, tex, png = (tmp_path / f"t.{x}" for x in ("csv", "md", "tex", "png"))
    pd.DataFrame({"a": [1, 2]}).to_csv(csv, index=False)
    md.write_text("| a |\n", encoding="utf-8")
    tex.write_text("\\begin{tabular}\n", encoding="utf-8")
    png.write_bytes(b"png")
    assert mark_rehearsal([csv, md, tex, png], {"scale": "paper"}) == []
    assert mark_rehearsal([csv, md, tex, png], {"scale": "rehearsal"}) == [csv, md, tex]
    assert pd.read_csv(csv)[REHEARSAL_COLUMN].tolist() == [REHEARSAL_MARK] * 2
    assert md.read_text(encoding="utf-8").startswith(f"**{REHEARSAL_MARK}**")
    assert REHEARSAL_MARK in tex.read_text(encoding="utf-8").splitlines()[0]
    assert mark_rehearsal([csv, md, tex], {"scale": "rehearsal"}) == []  # not twice


def test_save_figure_marks_rehearsal_figures(tmp_path):
    import matplotlib.pyplot as plt

    def texts(scale):
        fig, _ = plt.subplots()
        seen = []
        orig = fig.savefig
        fig.savefig = lambda *a, **k: (seen.extend(t.get_text() for t in fig.texts), orig(*a, **k))
        with job_scale(scale):
            save_figure(fig, tmp_path / f"{scale}.png")
        return seen

    assert REHEARSAL_MARK in texts("rehearsal")
    assert REHEARSAL_MARK not in texts("paper")


def test_rehearsal_scale_and_standins_hold_for_the_job_that_sets_them_only(monkeypatch):
    monkeypatch.setenv("FEDSHIFT_SCALE", "rehearsal")  # the former channel: the environment no longer counts
    assert not is_rehearsal() and standin_of_workflow() == []
    with job_scale("rehearsal", ["pacs", "cifar10"]):
        assert is_rehearsal() and standin_of_workflow() == ["cifar10", "pacs"]
        with job_scale("paper"):
            assert not is_rehearsal() and standin_of_workflow() == []
        assert is_rehearsal()
    assert not is_rehearsal() and standin_of_workflow() == []
