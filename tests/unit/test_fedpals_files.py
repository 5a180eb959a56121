"""FedPALS on image-file datasets (issue 4): PACS and iWildCam in the WILDS layout, their partitions
(App. A.3, A.4), the frozen-BN ResNet-50 and the streamed local-training path, on fixtures written in the
real on-disk format (the archives cannot be fetched here)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from fedshift.algorithms.fedavg import build_fedavg
from fedshift.contract import RUN_FILES, load_paper
from fedshift.core.engine import FilePool, local_sgd
from fedshift.core.rng import RoundKey
from fedshift.data.prepare import load_prepared, prepare_dataset
from fedshift.data.wilds import ImageFiles, image_transform, images_dir_of
from fedshift.io import read_json, write_json
from fedshift.jobs import evaluate_job, train_job
from fedshift.models import build_model, init_params
from fedshift.papers import fedpals as FP
from fedshift.partition import domain_heterogeneity_partition, label_marginals, label_removal_partition


def paper_datasets(section):
    """The registry datasets the paper needs for ``section`` (the contract's ``Paper.datasets``)."""
    return load_paper("fedpals", "fedshift.papers.fedpals.paper:FedpalsPaper", {"fedpals": section}).datasets()


def test_prepare_pacs_indexes_splits_and_unpacks_images(tmp_path: Path, wilds_archives) -> None:
    df = wilds_archives.write_pacs(tmp_path / "raw")
    out = tmp_path / "prepared" / "pacs.pt"
    prepare_dataset("pacs", tmp_path / "raw", out)
    d = load_prepared(out)
    assert d["domain_names"] == sorted(wilds_archives.PACS_DOMAINS) and d["class_names"][2] == "giraffe"
    for split in ("train", "id_val", "val", "test"):
        want = df[df.split == split]
        np.testing.assert_array_equal(d[f"y_{split}"].numpy(), want.y.to_numpy())
        assert d[f"path_{split}"] == list(want.path)
        assert all((images_dir_of(out) / p).is_file() for p in d[f"path_{split}"])
    assert {d["domain_names"][i] for i in d["domain_test"].tolist()} == {"photo"}
    x, y = ImageFiles(images_dir_of(out), d["path_test"][:1], d["y_test"][:1].numpy(), image_transform(32, False))[0]
    assert x.shape == (3, 32, 32) and x.dtype == torch.float32 and int(y) == 0


def test_prepare_iwildcam_reads_locations_and_category_names(tmp_path: Path, wilds_archives) -> None:
    df = wilds_archives.write_iwildcam(tmp_path / "raw")
    out = tmp_path / "iwildcam.pt"
    prepare_dataset("iwildcam", tmp_path / "raw", out)
    d = load_prepared(out)
    train = df[df.split == "train"]
    np.testing.assert_array_equal(d["domain_train"].numpy(), train.location_remapped.to_numpy())
    assert d["path_train"][0] == "train/" + train.filename.iloc[0]
    assert len(d["class_names"]) == 182 and d["class_names"][181] == "zebra" and d["class_names"][1] == "1"


def test_bad_archives_fail_clearly(tmp_path: Path, wilds_archives) -> None:
    raw = tmp_path / "raw"
    raw.mkdir()
    wilds_archives.archive(raw / "pacs_v1.0.tar.gz", {"readme.txt": b"no metadata"})
    with pytest.raises(FileNotFoundError, match="metadata.csv"):
        prepare_dataset("pacs", raw, tmp_path / "p.pt")
    wilds_archives.archive(raw / "pacs_v1.0.tar.gz", {"metadata.csv": b"path,split,y,domain\na.png,holdout,0,photo\n"})
    with pytest.raises(ValueError, match="unknown split names"):
        prepare_dataset("pacs", raw, tmp_path / "p.pt")
    assert not (tmp_path / "p.pt").exists()


def test_label_removal_partition_follows_app_a3() -> None:
    y = np.repeat(np.arange(7), 60)
    parts = label_removal_partition(y, [0, 1, 2], small_client=2, small_fraction=0.1, seed=3)
    for j, p in enumerate(parts):
        assert set(y[p]) == set(range(7)) - {j}        # client j lacks exactly label j
    flat = np.concatenate(parts)
    assert len(flat) == len(np.unique(flat))            # disjoint
    # a third of the data each (140), less the removed label (~1/7); client 2 then keeps 10 %
    assert 100 < len(parts[0]) < 140 and 100 < len(parts[1]) < 140 and 8 <= len(parts[2]) <= 14
    again = label_removal_partition(y, [0, 1, 2], small_client=2, small_fraction=0.1, seed=3)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))
    with pytest.raises(ValueError, match="small_fraction"):
        label_removal_partition(y, [0, 1, 2], small_client=2, small_fraction=0.0, seed=3)


def test_domain_heterogeneity_partition_keeps_domains_whole_at_iid_0() -> None:
    domains = np.repeat(np.arange(10), np.arange(1, 11) * 5)  # domain d has 5(d+1) examples
    parts = domain_heterogeneity_partition(domains, 4, iid=0.0, seed=0)
    owners = [{int(d) for d in np.unique(domains[p])} for p in parts]
    assert sorted(d for o in owners for d in o) == list(range(10))   # each domain on exactly one client
    assert sum(len(p) for p in parts) == domains.size
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 50                              # greedy balancing (largest domain: 50)
    mixed = domain_heterogeneity_partition(domains, 4, iid=1.0, seed=0)
    assert all(len(np.unique(domains[p])) == 10 for p in mixed)       # homogeneous: every client sees every domain
    with pytest.raises(ValueError, match="only 10 domains"):
        domain_heterogeneity_partition(domains, 11, iid=0.0, seed=0)


def _pacs_experiment(**over: object) -> dict:
    exp = {"dataset": "pacs", "model": "resnet50", "pretrained": False, "image_size": 32, "preprocess": {},
           "label_shift": {"kind": "label_removal", "removed_labels": [0, 1, 2], "small_label": 2,
                           "small_fraction": 0.5},
           "num_clients": 3, "seeds": 1, "validation_split": "id_val", "test_split": "test",
           "target_drop_labels": [2], "eval_batch_size": 16,
           "train": {"rounds": 2, "local_epochs": 1, "batch_size": 8, "client_lr": 1e-4, "eval_every": 1,
                     "client_optimizer": "adam", "checkpoint_every": 1},
           "algorithms": {"fedpals": {"lambdas": [0]}, "fedavg": {}, "oracle": {}}}
    exp.update(over)
    return exp


def test_pacs_partition_and_training_end_to_end(tmp_path: Path, wilds_archives) -> None:
    wilds_archives.write_pacs(tmp_path / "raw", per=5)
    prepared = tmp_path / "pacs.pt"
    prepare_dataset("pacs", tmp_path / "raw", prepared)
    exp = _pacs_experiment(num_workers=1)  # decoding in a worker process, for training and evaluation
    table = {"file": "t", "title": "Table 3. PACS", "metric": "accuracy", "columns": ["fedavg"],
             "rows": [{"label": "PACS", "experiment": "fedpals_pacs"}]}
    section = {"experiments": {"fedpals_pacs": exp}, "tables": {"fedpals_t": table}, "figures": {}}
    FP.check_section(section, {"pacs": {}})
    part = FP.make_domain_partition(exp, load_prepared(prepared), seed=0)
    d = load_prepared(prepared)
    y_train, y_test = d["y_train"].numpy(), d["y_test"].numpy()
    assert [sorted(set(range(7)) - set(y_train[c])) for c in part["clients"][:2]] == [[0], [1]]
    assert 2 not in set(y_train[part["clients"][2]])    # the shrunk client lacks label 2
    assert 2 not in set(y_test[part["test"]]) and 2 not in set(d["y_id_val"].numpy()[part["validation"]])
    np.testing.assert_allclose(part["target"], label_marginals(y_test, [np.array(part["test"])], 7)[0])
    assert part["target"][2] == 0 and len(part["oracle"]) == 3
    write_json(tmp_path / "part.json", part)
    run = {}
    paper = load_paper("fedpals", "fedshift.papers.fedpals.paper:FedpalsPaper",
                       {"fedpals": section, "datasets": {"pacs": {}}})
    specs = {s.run: s for s in paper.runs()}  # the λ travels in the spec's hparams, not in its id
    assert specs["fedpals~lam0"].hparams["variant"] == {"lambda": 0.0} and specs["fedpals~lam0"].seed == 0
    inputs = {"prepared": str(prepared), "partition": str(tmp_path / "part.json")}
    for alg in ("fedpals~lam0", "fedavg", "oracle"):
        out = tmp_path / alg
        files = {k: str(out / f) for k, f in RUN_FILES.items() if k != "metrics"}
        run[alg] = train_job(paper, [specs[alg]], inputs, [files], checkpoint=str(out / "ckpt.pt"), device="cpu")[0]
        evaluate_job(paper, specs[alg], inputs, files, out / "metrics.csv", device="cpu")
        m = pd.read_csv(out / "metrics.csv")
        assert set(m.run) == {alg} and set(m.paper) == {"fedpals"}
        acc = m[(m.split == "test") & (m.metric == "accuracy")].value.item()
        assert len(m[m.split == "test"]) == 3
        hist = pd.read_csv(out / "history.csv")
        assert list(hist["round"]) == [1, 2] and np.isfinite(hist["loss"]).all()
        # the model each job saved is what its evaluation reads: the history's test accuracy at the selected round
        selected = hist[hist["round"] == run[alg]["selected_round"]]
        assert acc == pytest.approx(selected["eval/test_accuracy"].item(), abs=1e-9)
        trained = part["oracle"] if alg == "oracle" else part["clients"]
        assert run[alg]["client_sizes"] == [len(c) for c in trained]
    alpha = np.array(run["fedpals~lam0"]["alpha_all_clients"])
    sizes = np.array(part["sizes"])
    assert not np.allclose(alpha, sizes / sizes.sum())  # FedPALS reweights towards the target
    assert read_json(tmp_path / "fedavg" / "run.json")["selection_metric"] == "accuracy"


def test_iwildcam_domain_partition_targets_the_test_split(tmp_path: Path, wilds_archives) -> None:
    wilds_archives.write_iwildcam(tmp_path / "raw", locations=9)
    prepared = tmp_path / "iwildcam.pt"
    prepare_dataset("iwildcam", tmp_path / "raw", prepared)
    exp = {"dataset": "iwildcam", "model": "resnet50", "num_clients": 3, "validation_split": "val",
           "test_split": "test", "label_shift": {"kind": "domain_heterogeneity", "iid": 0.0},
           "algorithms": {"fedavg": {}}}
    d = load_prepared(prepared)
    part = FP.make_domain_partition(exp, d, seed=1)
    dom = d["domain_train"].numpy()
    assert sum(part["sizes"]) == len(dom)
    assert all(len({int(x) for x in dom[c]} & {int(x) for x in dom[o]}) == 0
               for i, c in enumerate(part["clients"]) for o in part["clients"][i + 1:])  # whole locations
    np.testing.assert_allclose(part["target"], label_marginals(d["y_test"].numpy(), [np.arange(len(d["y_test"]))],
                                                               182)[0])


def test_streamed_local_training_is_deterministic_and_matches_fedavg_weights(tmp_path: Path, wilds_archives) -> None:
    wilds_archives.write_pacs(tmp_path / "raw", per=3)
    prepared = tmp_path / "pacs.pt"
    prepare_dataset("pacs", tmp_path / "raw", prepared)
    d = load_prepared(prepared)
    files = ImageFiles(images_dir_of(prepared), d["path_train"][:12], d["y_train"][:12].numpy(),
                       image_transform(32, True))
    module = build_model("resnet50", num_classes=7)
    params = init_params(module, 0)
    pool = FilePool(files, np.array([0, 5, 12]), torch.device("cpu"), client_optimizer="adam")
    a = local_sgd(module, params, pool, [0, 1], RoundKey(3, 0), epochs=1, batch_size=4, lr=1e-3)
    b = local_sgd(module, params, pool, [0, 1], RoundKey(3, 0), epochs=1, batch_size=4, lr=1e-3)
    assert list(a.steps) == [2, 2]
    for k in params:
        assert torch.equal(a.params[k], b.params[k])
    moved = (a.params["classifier.weight"][0] - params["classifier.weight"]).abs().max()
    assert moved > 0
    bn = module.backbone.bn1
    assert not bn.training and torch.equal(bn.running_mean, torch.zeros_like(bn.running_mean))  # statistics frozen
    fedavg = build_fedavg(module, clients_per_round=2, local_epochs=1, batch_size=4, client_lr=1e-3)
    _, diag = fedavg.apply(fedavg.init(params), pool, RoundKey(3, 0))
    np.testing.assert_allclose(diag["weights"].numpy(), [5 / 12, 7 / 12], rtol=1e-6)
    with pytest.raises(ValueError, match="at least one example"):
        FilePool(files, np.array([0, 0, 12]), torch.device("cpu"))


def test_file_dataset_config_errors() -> None:
    def section(**over: object) -> dict:
        return {"experiments": {"fedpals_pacs": _pacs_experiment(**over)}, "tables": {}, "figures": {}}

    with pytest.raises(FP.ConfigError, match="removed_labels: one label per client"):
        FP.check_section(section(label_shift={"kind": "label_removal", "removed_labels": [0, 1]}), {"pacs": {}})
    with pytest.raises(FP.ConfigError, match="does not apply to pacs"):
        FP.check_section(section(label_shift={"kind": "sparsity", "labels_per_client": 2}), {"pacs": {}})
    with pytest.raises(FP.ConfigError, match="resnet50 is the model"):
        FP.check_section(section(model="cnn2"), {"pacs": {}})
    bad = section()
    del bad["experiments"]["fedpals_pacs"]["validation_split"]
    with pytest.raises(FP.ConfigError, match="validation_split: required"):
        FP.check_section(bad, {"pacs": {}})
    assert paper_datasets({**section(pretrained=True), "outputs": []}) == []
    s = section(pretrained=True)
    s["tables"] = {"fedpals_t": {"rows": [{"label": "PACS", "experiment": "fedpals_pacs"}], "columns": []}}
    assert paper_datasets(s) == ["pacs", "resnet50_imagenet"]
    assert FP.weights_file(s["experiments"]["fedpals_pacs"]) == "data/raw/resnet50_imagenet/resnet50-0676ba61.pth"


def test_a_diverged_grid_value_is_recorded_and_loses_the_validation_choice(tmp_path: Path, wilds_archives,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 18: SCAFFOLD at the larger client step diverged on one seed of the verdicts run and aborted the table.
    A diverged run is now recorded (empty model, run.json ``diverged``), evaluated as NaN, and the validation choice
    takes the grid value that did not diverge; a seed whose every value diverged is left out of the mean."""
    from fedshift.core.training import NonFiniteLossError
    from fedshift.papers.fedpals import fit as core  # where run_training is called
    from fedshift.papers.fedpals.report import select_per_seed, table, table_markdown

    wilds_archives.write_pacs(tmp_path / "raw", per=5)
    prepared = tmp_path / "pacs.pt"
    prepare_dataset("pacs", tmp_path / "raw", prepared)
    exp = _pacs_experiment(seeds=2, algorithms={"fedavg": {}})
    exp["train"]["select"] = {"client_lr": [1e-4, 1e-3]}
    spec_t = {"file": "t", "title": "T", "metric": "accuracy", "columns": ["fedavg"],
              "rows": [{"label": "PACS", "experiment": "fedpals_pacs"}]}
    section = {"experiments": {"fedpals_pacs": exp}, "tables": {"fedpals_t": spec_t}, "figures": {}}
    paper = load_paper("fedpals", "fedshift.papers.fedpals.paper:FedpalsPaper",
                       {"fedpals": section, "datasets": {"pacs": {}}})
    specs = {(s.run, s.seed): s for s in paper.runs()}
    assert set(specs) == {(r, s) for r in ("fedavg~lr0p0001", "fedavg~lr0p001") for s in (0, 1)}
    real = core.run_training

    def diverges_at_larger_step(algorithm, params, clients, **kw):  # as SCAFFOLD at η = 0.1 did, seed 1 of C = 3
        if current[0] == "fedavg~lr0p001" or current[1] == 1:
            raise NonFiniteLossError("loss became nan by round 2 (seed 1); lower the learning rate")
        return real(algorithm, params, clients, **kw)

    monkeypatch.setattr(core, "run_training", diverges_at_larger_step)
    frames = []
    for (rid, seed), spec in specs.items():
        current = (rid, seed)
        write_json(tmp_path / f"part{seed}.json", FP.make_domain_partition(exp, load_prepared(prepared), seed=seed))
        inputs = {"prepared": str(prepared), "partition": str(tmp_path / f"part{seed}.json")}
        out = tmp_path / rid / str(seed)
        files = {k: str(out / f) for k, f in RUN_FILES.items() if k != "metrics"}
        run = train_job(paper, [spec], inputs, [files], checkpoint=str(out / "ckpt.pt"), device="cpu")[0]
        diverged = rid == "fedavg~lr0p001" or seed == 1
        assert run.get("diverged", False) is diverged and read_json(files["run"]).get("diverged", False) is diverged
        if diverged:
            assert torch.load(files["model"], weights_only=True) == {} and "lower the learning rate" in run[
                "diverged_error"]
            assert run["selected_round"] is None
        evaluate_job(paper, spec, inputs, files, out / "metrics.csv", device="cpu")
        m = pd.read_csv(out / "metrics.csv")
        flag = m[(m.split == "run") & (m.metric == "diverged")]
        assert (len(flag) == 1 and flag.value.item() == 1.0) if diverged else flag.empty
        assert m[m.split == "test"].value.isna().all() == diverged
        frames.append(m)
    metrics = pd.concat(frames, ignore_index=True)
    chosen = select_per_seed(metrics).set_index("seed")
    # seed 0: the diverged step loses whatever the order; seed 1: every step diverged, the value is NaN
    assert chosen.loc[0, "algorithm"] == "fedavg~lr0p0001" and np.isfinite(chosen.loc[0, "value"])
    assert np.isnan(chosen.loc[1, "value"])
    tidy = table(metrics, spec_t).iloc[0]
    assert tidy["seeds"] == 1 and tidy["diverged"] == 1
    assert tidy["mean"] == pytest.approx(100 * chosen.loc[0, "value"])
    md = table_markdown(table(metrics, spec_t), spec_t)
    assert "(1 seed diverged)" in md and "Mean ± std over 1 seed;" in md  # the seeds counted, singular
    # a run that did not diverge but lacks its metric is still an error
    broken = metrics.drop(metrics[(metrics.seed == 0) & (metrics.run == "fedavg~lr0p0001")
                                  & (metrics.split == "test")].index)
    with pytest.raises(ValueError, match="lack"):
        select_per_seed(broken)


@pytest.mark.parametrize("panels", [1, 4])
def test_fig5_title_is_wrapped_inside_the_figure_whatever_its_panels(panels):
    # The reduced rehearsal draws Fig. 5 with one λ: a caption wrapped for four panels ran off both edges.
    import matplotlib

    matplotlib.use("Agg")
    from fedshift.papers.fedpals.report import plot_weights, weights_data

    sizes = [30, 20, 10]
    runs = [{"algorithm": f"fedpals~ess{k}", "lambda": float(k), "ess_fraction": k / 10, "client_sizes": sizes,
             "alpha_all_clients": [0.5, 0.3, 0.2]} for k in range(panels)]
    title = "Fig. 5. iWildCam: FedPALS aggregation weights per client (by size, descending) for each λ / ESS, " \
            "FedAvg's as dots (seed 0)."
    fig = plot_weights(weights_data(runs), title)
    fig.canvas.draw()
    box, text = fig.bbox, fig._suptitle.get_window_extent()
    assert box.x0 <= text.x0 and text.x1 <= box.x1, (text, box)
    assert fig._suptitle.get_text().replace("\n", " ") == title
