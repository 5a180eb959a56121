"""FedMM data (issue 7): client splits by p and by source/target client counts, partitions and tensors from
prepared files, Office-31 and MNIST-M (canonical archive; generated from BSDS500) read from fixtures written in
their real on-disk formats (their fetch, like every registry dataset's, is tested in test_download.py)."""

import gzip
import io
import struct
import tarfile

import numpy as np
import pytest
import torch
from PIL import Image

from fedshift.errors import ConfigError
from fedshift.data.mnist_m import blend_mnist_m, read_bsds500_train
from fedshift.data.office31 import load_office31
from fedshift.data.prepare import load_prepared, prepare_dataset, prepare_generated, raw_datasets_of
from fedshift.io import torch_save_atomic
from fedshift.papers import fedmm as P
from fedshift.papers.fedmm.paper import train_job

# ---------------------------------------------------------------------------------------------- splits


@pytest.mark.parametrize("setting", ["p0.75", "p1", "p0.5", "s2t1", "s1t3"])
def test_split_clients_assigns_every_row_once_by_the_shares(setting):
    shares = P.client_settings(setting)
    parts = P.split_clients(1000, 300, shares, seed=4)
    for key, n, j in (("source", 1000, 0), ("target", 300, 1)):
        rows = sum((p[key] for p in parts), [])
        assert sorted(rows) == list(range(n))
        for p, s in zip(parts, shares, strict=True):
            assert abs(len(p[key]) - s[j] * n) < 1
    if setting == "p0.75":
        assert [len(p["source"]) for p in parts] == [750, 250] and [len(p["target"]) for p in parts] == [75, 225]
    if setting == "p1":
        assert parts[0]["target"] == [] and parts[1]["source"] == []
    assert P.split_clients(1000, 300, shares, seed=4) == parts
    if setting == "s1t3":  # 302 / 3 = 100.67: largest remainders, not 100, 100 and the rest (102) on the last
        assert [len(p["target"]) for p in P.split_clients(1000, 302, shares, seed=4)] == [0, 101, 101, 100]
    if setting != "p1":
        assert P.split_clients(1000, 300, shares, seed=5) != parts


def _prepared_digits(tmp_path, target_train=True):
    g = np.random.default_rng(0)
    mnist = {"x_train": torch.from_numpy(g.integers(0, 255, (50, 28, 28), dtype=np.uint8)),
             "y_train": torch.from_numpy(g.integers(0, 10, 50)),
             "x_test": torch.from_numpy(g.integers(0, 255, (10, 28, 28), dtype=np.uint8)),
             "y_test": torch.from_numpy(g.integers(0, 10, 10))}
    mm = {"x_test": torch.from_numpy(g.integers(0, 120, (12, 32, 32, 3), dtype=np.uint8)),
          "y_test": torch.from_numpy(g.integers(0, 10, 12))}
    if target_train:  # brighter than the test split: its statistics must not be the test split's own
        mm |= {"x_train": torch.from_numpy(g.integers(100, 255, (40, 32, 32, 3), dtype=np.uint8)),
               "y_train": torch.from_numpy(g.integers(0, 10, 40))}
    torch_save_atomic(mnist, tmp_path / "mnist.pt")
    torch_save_atomic(mm, tmp_path / "mnist_m.pt")
    return tmp_path / "mnist.pt", tmp_path / "mnist_m.pt"


def test_partition_trains_on_the_target_train_split_and_tests_on_its_test_split(tmp_path):
    """Issue 19: the clients' unlabelled target rows come from MNIST-M's train split (``target_size`` of them),
    the test set is the whole test split, standardised with the statistics of the clients' target rows."""
    src, tgt = _prepared_digits(tmp_path)
    data = {"source": "mnist", "target": "mnist_m", "transfer": None, "source_size": 30, "target_size": 20,
            "partition_seed": 0}
    part = P.write_partition(data, "p0.8", src, tgt, tmp_path / "p.json")
    assert (part["source_split"], part["target_split"], part["test_split"]) == ("train", "train", "test")
    train_t = sum((c["target"] for c in part["clients"]), [])
    assert part["test"] == list(range(12)) and len(set(train_t)) == 20 and max(train_t) < 40
    assert part["sizes"] == [[24, 4], [6, 16]]
    resolved = {"network": {"kind": "digits"}}
    clients, x_test, y_test = P.load_data(resolved, part, src, tgt, torch.device("cpu"))
    assert [(c.num_source, c.num_target) for c in clients] == [(24, 4), (6, 16)]
    assert clients[0].x_source.shape[1:] == (3, 28, 28) and x_test.shape == (12, 3, 28, 28)
    mm = load_prepared(tgt)
    assert torch.equal(y_test, mm["y_test"])
    assert torch.equal(clients[1].y_source, load_prepared(src)["y_train"][torch.as_tensor(
        part["clients"][1]["source"])])
    # each domain is standardised with its clients' rows; the darker test split sits far below their mean
    xs, xt = torch.cat([c.x_source for c in clients]), torch.cat([c.x_target for c in clients])
    assert xs.mean().abs() < 1e-4 and xt.mean().abs() < 1e-4 and x_test.mean() < -1
    ref = P.images({"x_all": torch.cat([mm["x_train"][torch.as_tensor(sorted(train_t))], mm["x_test"]])},
                    "all", "digits")
    assert not torch.allclose(x_test, ref[20:], atol=1e-3)  # pooled statistics would give this
    assert P.write_partition({**data, "target_size": None}, "p1", src, tgt, tmp_path / "q.json")["sizes"] == \
        [[30, 0], [0, 40]]


def test_official_preprocessing_binarises_mnist_and_centres_the_test_set_by_its_mean(tmp_path):
    """``preprocessing: official`` (official ``dataset_factory.py``, ``adv_loss.py:15``): MNIST pixels become 0 or
    1 (x > 0, then / 255) on 3 channels, MNIST-M's stay x / 255 (resized to 28 x 28); the clients' rows are left
    uncentred (each batch is centred in training) and the test set, one batch in the official evaluation, is
    centred by its own scalar mean. Office-31 refuses the option."""
    src, tgt = _prepared_digits(tmp_path)
    data = {"source": "mnist", "target": "mnist_m", "transfer": None, "source_size": 30, "target_size": 20,
            "partition_seed": 0}
    part = P.write_partition(data, "p0.8", src, tgt, tmp_path / "p.json")
    resolved = {"task": "digits", "network": {"kind": "digits"}, "preprocessing": "official", "data": data}
    clients, x_test, _ = P.load_data(resolved, part, src, tgt, torch.device("cpu"))
    xs, xt = torch.cat([c.x_source for c in clients]), torch.cat([c.x_target for c in clients])
    assert set(xs.unique().tolist()) == {0.0, 1.0} and xs.shape[1:] == (3, 28, 28)
    mnist = load_prepared(src)["x_train"][torch.as_tensor(part["clients"][0]["source"])]
    assert torch.equal(clients[0].x_source[:, 0], (mnist > 0).float())
    assert xt.min() >= 0 and xt.max() <= 1 and len(xt.unique()) > 2  # MNIST-M is not binarised
    assert x_test.shape == (12, 3, 28, 28) and abs(float(x_test.mean())) < 1e-6
    raw_test = P.official_images(load_prepared(tgt)["x_test"].numpy(), binarise=False)
    assert torch.allclose(x_test, raw_test - raw_test.mean(), atol=1e-6)
    with pytest.raises(ConfigError, match="preprocessing"):
        P.load_data({**resolved, "network": {"kind": "office"}}, part, src, tgt, torch.device("cpu"))


def test_a_digits_target_without_a_train_split_is_refused(tmp_path):
    src, tgt = _prepared_digits(tmp_path, target_train=False)
    data = {"source": "mnist", "target": "mnist_m", "transfer": None, "source_size": 30, "target_size": None,
            "partition_seed": 0}
    with pytest.raises(ValueError, match="no train split"):
        P.write_partition(data, "p1", src, tgt, tmp_path / "p.json")
    assert not (tmp_path / "p.json").exists()


# ---------------------------------------------------------------------------------------------- Office-31

def _jpeg(rgb, size=(12, 10)):
    buf = io.BytesIO()
    Image.new("RGB", size, rgb).save(buf, format="JPEG")
    return buf.getvalue()


def _add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


@pytest.mark.parametrize("top", ["", "domain_adaptation_images/"])
def test_office31_reads_the_archive_layout(tmp_path, top):
    with tarfile.open(tmp_path / "domain_adaptation_images.tar.gz", "w:gz") as tar:
        for d, shade in (("amazon", 40), ("dslr", 120), ("webcam", 200)):
            for c in ("mug", "back_pack"):
                for k in range(2 if d == "amazon" else 1):
                    _add(tar, f"{top}{d}/images/{c}/frame_{k:04d}.jpg", _jpeg((shade, 0, 0)))
        _add(tar, f"{top}README.txt", b"not an image")
    out = load_office31(tmp_path, size=16)
    assert out["class_names"] == ["back_pack", "mug"]
    assert out["x_amazon"].shape == (4, 16, 16, 3) and out["x_dslr"].shape == (2, 16, 16, 3)
    assert out["y_amazon"].tolist() == [0, 0, 1, 1] and out["y_webcam"].tolist() == [0, 1]
    assert abs(int(out["x_webcam"][..., 0].mean()) - 200) < 8


def test_office31_rejects_missing_domains_and_archives(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_office31(tmp_path)
    with tarfile.open(tmp_path / "domain_adaptation_images.tar.gz", "w:gz") as tar:
        _add(tar, "amazon/images/mug/a.jpg", _jpeg((1, 2, 3)))
    with pytest.raises(ValueError, match="dslr"):
        load_office31(tmp_path)


# ---------------------------------------------------------------------------------------------- MNIST-M

def _bsds(tmp_path):
    path = tmp_path / "BSR_bsds500.tgz"
    with tarfile.open(path, "w:gz") as tar:
        for i, rgb in enumerate(((200, 10, 10), (10, 200, 10))):
            _add(tar, f"BSR/BSDS500/data/images/train/{i}.jpg", _jpeg(rgb, (48, 32)))
        _add(tar, "BSR/BSDS500/data/images/test/9.jpg", _jpeg((0, 0, 0), (48, 32)))
    return path


def test_mnist_m_generation_blends_digits_over_bsds500_crops(tmp_path):
    bgs = read_bsds500_train(_bsds(tmp_path))
    assert len(bgs) == 2 and bgs[0].shape == (32, 48, 3)  # the test image is not a background
    digits = np.zeros((6, 28, 28), dtype=np.uint8)
    digits[:, 10:18, 10:18] = 255
    out = blend_mnist_m(digits, bgs, seed=1)
    assert out.shape == (6, 28, 28, 3) and out.dtype == np.uint8
    # |patch − digit|: the stroke inverts the (almost uniform) background colour, the rest is the background
    for img in out:
        bg = img[0, 0].astype(int)
        assert np.abs(img[14, 14].astype(int) - np.abs(bg - 255)).max() <= 12
        assert {tuple(np.round(bg / 100))} <= {(2, 0, 0), (0, 2, 0)}
    assert np.array_equal(out, blend_mnist_m(digits, bgs, seed=1))
    with pytest.raises(ValueError, match="backgrounds"):
        blend_mnist_m(digits, [np.zeros((20, 20, 3), np.uint8)])


def _png(value):
    buf = io.BytesIO()
    Image.new("RGB", (32, 32), (value, value, value)).save(buf, format="PNG")
    return buf.getvalue()


def test_prepare_reads_the_canonical_mnist_m_archive(tmp_path):
    """Registry ``mnist_m_full`` through the shared prepare step: both splits of the canonical archive; the mirror's
    per-split layout is refused (that is the registry entry ``mnist_m``)."""
    raw = tmp_path / "raw"
    raw.mkdir()
    with tarfile.open(raw / "mnist_m.tar.gz", "w:gz") as tar:
        for split, n in (("train", 3), ("test", 2)):
            labels = "".join(f"{i:08d}.png {(i + 3) % 10}\n" for i in range(n))
            _add(tar, f"mnist_m/mnist_m_{split}_labels.txt", labels.encode())
            for i in range(n):
                _add(tar, f"mnist_m/mnist_m_{split}/{i:08d}.png", _png(10 * i))
    prepare_dataset("mnist_m_full", raw, tmp_path / "out.pt")
    d = load_prepared(tmp_path / "out.pt")
    assert tuple(d["x_train"].shape) == (3, 32, 32, 3) and d["y_test"].tolist() == [3, 4]
    assert d["x_train"][2, 0, 0].tolist() == [20, 20, 20]
    mirror_layout = tmp_path / "mirror"
    mirror_layout.mkdir()
    (mirror_layout / "mnist_m_test_labels.txt").write_text("00000000.png 1\n")
    with pytest.raises(FileNotFoundError, match="no mnist_m.tar.gz"):
        prepare_dataset("mnist_m_full", mirror_layout, tmp_path / "x.pt")
    assert not (tmp_path / "x.pt").exists()


def _mnist_raw(folder, n_train=4, n_test=2):
    folder.mkdir()
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        images = np.zeros((n, 28, 28), np.uint8)
        images[:, 8:20, 12:16] = 255
        labels = np.arange(n, dtype=np.uint8) % 10
        for kind, arr in (("images-idx3", images), ("labels-idx1", labels)):
            header = bytes([0, 0, 0x08, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape)
            (folder / f"{prefix}-{kind}-ubyte.gz").write_bytes(gzip.compress(header + arr.tobytes()))
    return folder


def test_generated_mnist_m_blends_both_mnist_splits(tmp_path):
    """``mnist_m_bsds`` (FedMM's target, WAFL's 70,000-image MNIST-M): MNIST's train and test digits over BSDS500
    crops, MNIST's labels, written through the shared prepare step; a second call gives the same tensors."""
    assert raw_datasets_of("mnist_m_bsds") == ("mnist", "bsds500") and raw_datasets_of("usps") == ("usps",)
    mnist = _mnist_raw(tmp_path / "mnist")
    bsds = tmp_path / "bsds500"
    bsds.mkdir()
    _bsds(bsds)
    prepare_generated("mnist_m_bsds", [mnist, bsds], tmp_path / "a.pt")
    d = load_prepared(tmp_path / "a.pt")
    assert tuple(d["x_train"].shape) == (4, 28, 28, 3) and tuple(d["x_test"].shape) == (2, 28, 28, 3)
    assert d["y_train"].tolist() == [0, 1, 2, 3] and d["y_test"].tolist() == [0, 1]
    assert d["x_train"].dtype == torch.uint8 and int(d["x_train"].float().std()) > 10  # coloured, not blank
    prepare_generated("mnist_m_bsds", [mnist, bsds], tmp_path / "b.pt")
    again = load_prepared(tmp_path / "b.pt")
    assert again.keys() == d.keys()
    assert all(torch.equal(again[k], v) if isinstance(v, torch.Tensor) else again[k] == v for k, v in d.items())
    with pytest.raises(ValueError, match="unknown generated dataset 'svhn'"):
        prepare_generated("svhn", [mnist, bsds], tmp_path / "x.pt")
    with pytest.raises(ValueError, match="needs the raw folders"):
        prepare_generated("mnist_m_bsds", [mnist], tmp_path / "x.pt")


# ---------------------------------------------------------------------------------------------- Office-31 job

def test_office31_training_job_with_mobilenet_weights(tmp_path, repo_root):
    """Table 1's path on a fixture: prepared Office-31 (32 px), saved MobileNetV2 weights, one FedMM job."""
    from torchvision.models import mobilenet_v2

    from fedshift.errors import load_yaml
    from fedshift.papers.fedmm.report import collect

    weights = tmp_path / "mobilenet_v2-b0353104.pth"
    torch.save(mobilenet_v2(weights=None).state_dict(), weights)
    g = np.random.default_rng(1)
    prepared = {f"{k}_{d}": v for d, n in (("amazon", 6), ("dslr", 2), ("webcam", 4)) for k, v in (
        ("x", torch.from_numpy(g.integers(0, 255, (n, 32, 32, 3), dtype=np.uint8))),
        ("y", torch.from_numpy(g.integers(0, 31, n))))}
    torch_save_atomic(prepared, tmp_path / "office31.pt")
    section = load_yaml(repo_root / "config/papers/fedmm.yaml")["fedmm"]
    task = section["tasks"]["office_A_W"]
    task["train"].update(rounds=2, batch_size=4, local_steps=1, eval_every=1, checkpoint_every=1)
    task["network"].update(bottleneck_dim=16, task_hidden=[8], domain_hidden=[8])
    resolved = P.resolve_run(section, "office_A_W", "fedmm-cdan-p1-M1-e1")
    part = P.write_partition(resolved["data"], "p1", tmp_path / "office31.pt", tmp_path / "office31.pt",
                             tmp_path / "part.json")
    assert part["sizes"] == [[6, 0], [0, 4]] and part["test"] == [0, 1, 2, 3]
    run = tmp_path / "runs" / "fedmm" / "office_A_W" / "fedmm-cdan-p1-M1-e1" / "seed~0"
    info = train_job(resolved, 0, source_path=tmp_path / "office31.pt", target_path=tmp_path / "office31.pt",
                     partition_path=tmp_path / "part.json", model_path=run / "model.pt",
                     history_path=run / "history.csv", run_json_path=run / "run.json",
                     checkpoint_path=tmp_path / "ck.pt", weights_path=weights)
    assert info["test_size"] == 4 and not info["diverged"] and (run / "run.json").is_file()
    model = torch.load(run / "model.pt", weights_only=True)
    ref = torch.load(weights, weights_only=True)
    # the backbone started from the weights file (not from init_params' re-initialisation) and stays near it
    w, w_file = model["features.0.0.0.weight"], ref["features.0.0.weight"]
    assert torch.allclose(w, w_file, atol=1e-3)
    assert not torch.allclose(mobilenet_v2(weights=None).state_dict()["features.0.0.weight"], w_file, atol=1e-3)
    assert collect([run / "history.csv"])["round"].tolist() == [1, 2]
