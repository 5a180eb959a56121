"""WAFL data: the MNIST / USPS / MNIST-M / CIFAR-10 loaders, the registry hashes, pre-processing and the
label-skew partition (issue 6)."""

from __future__ import annotations

import io
import pickle
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from fedshift.errors import load_yaml
from fedshift.data.cifar10 import CLASS_NAMES, load_cifar10
from fedshift.data.digits import label_skew_partition, partition_stats, preprocess
from fedshift.data.sources import file_sha256
from fedshift.data.mnist import load_mnist
from fedshift.data.mnist_m import load_mnist_m
from fedshift.data.prepare import PREPARERS
from fedshift.data.usps import load_usps


@pytest.mark.parametrize("name", ["mnist", "usps", "mnist_m"])
def test_registry_hashes_match_the_mirror(repo_root, mirror_dir, name):
    entry = load_yaml(repo_root / "config" / "datasets.yaml")["datasets"][name]
    assert name in PREPARERS
    for f in entry["files"]:
        assert file_sha256(mirror_dir / entry["mirror_dir"] / f["name"], f["hash_of"]) == f["sha256"], f["name"]


def test_mnist_from_the_mirror(mirror_dir):
    d = load_mnist(mirror_dir / "mnist")
    assert d["x_train"].shape == (60000, 28, 28) and d["x_test"].shape == (10000, 28, 28)
    assert np.bincount(d["y_train"]).tolist() == [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
    assert d["y_test"].dtype == np.int64 and d["class_names"][7] == "7"


def test_usps_from_the_mirror(mirror_dir):
    d = load_usps(mirror_dir / "usps")
    assert d["x_train"].shape == (7291, 16, 16) and d["x_test"].shape == (2007, 16, 16)
    assert np.bincount(d["y_train"]).tolist() == [1194, 1005, 731, 658, 652, 556, 664, 645, 542, 644]
    assert d["x_train"].dtype == np.uint8
    assert np.median(d["x_train"]) == 0  # background (-1) maps to 0, as in MNIST


def test_mnist_m_train_and_test_splits_from_the_mirror(mirror_dir):
    """The mirror's MNIST-M: the first 59,001 MNIST training digits and the first 9,001 test digits, blended."""
    d = load_mnist_m(mirror_dir / "mnist_m")
    assert d["x_test"].shape == (9001, 32, 32, 3) and d["x_train"].shape == (59001, 32, 32, 3)
    assert np.bincount(d["y_test"]).tolist() == [878, 1016, 933, 908, 890, 807, 856, 914, 880, 919]
    mnist = load_mnist(mirror_dir / "mnist")
    assert np.array_equal(d["y_train"], mnist["y_train"][:59001])
    assert np.array_equal(d["y_test"], mnist["y_test"][:9001])


def test_mnist_m_split_layout_names_a_missing_file(tmp_path):
    (tmp_path / "mnist_m_test.tar.gz").write_bytes(b"")
    (tmp_path / "mnist_m_test_labels.txt").write_text("")
    with pytest.raises(FileNotFoundError, match="mnist_m_train.tar.gz, mnist_m_train_labels.txt"):
        load_mnist_m(tmp_path)


def test_mnist_m_per_split_archives_give_both_splits(tmp_path):
    """Registry mnist_m (the mirror's layout): one archive and one label file per split."""
    rng = np.random.default_rng(1)
    for split, n in (("train", 3), ("test", 2)):
        with tarfile.open(tmp_path / f"mnist_m_{split}.tar.gz", "w:gz") as tar:
            for i in range(n):
                _add(tar, f"mnist_m_{split}/{i:08d}.png", _png(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)))
        (tmp_path / f"mnist_m_{split}_labels.txt").write_text("".join(f"{i:08d}.png {i + 1}\n" for i in range(n)))
    d = load_mnist_m(tmp_path)
    assert d["x_train"].shape == (3, 32, 32, 3) and d["y_train"].tolist() == [1, 2, 3]
    assert d["x_test"].shape == (2, 32, 32, 3) and d["y_test"].tolist() == [1, 2]


def _png(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def test_mnist_m_full_archive_layout(tmp_path):
    rng = np.random.default_rng(0)
    imgs = {s: [rng.integers(0, 256, (32, 32, 3), dtype=np.uint8) for _ in range(n)]
            for s, n in (("train", 3), ("test", 2))}
    with tarfile.open(tmp_path / "mnist_m.tar.gz", "w:gz") as tar:
        for s, arrs in imgs.items():
            for i, a in enumerate(arrs):
                _add(tar, f"mnist_m/mnist_m_{s}/{i:08d}.png", _png(a))
            _add(tar, f"mnist_m/mnist_m_{s}_labels.txt",
                 "".join(f"{i:08d}.png {(i + 4) % 10}\n" for i in range(len(arrs))).encode())
    d = load_mnist_m(tmp_path)
    assert d["x_train"].shape == (3, 32, 32, 3) and d["y_train"].tolist() == [4, 5, 6]
    assert np.array_equal(d["x_test"][1], imgs["test"][1])


def _cifar_tar(path: Path, per_batch: int, rng: np.random.Generator, names=CLASS_NAMES, payload=None) -> dict:
    """A CIFAR-10 python archive in the real on-disk format (pickled dicts of bytes keys)."""
    batches = {}
    with tarfile.open(path, "w:gz") as tar:
        for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
            data = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
            labels = rng.integers(0, 10, per_batch).tolist()
            batches[name] = (data, labels)
            obj = payload if (payload is not None and name == "test_batch") else \
                {b"batch_label": name.encode(), b"labels": labels, b"data": data, b"filenames": [b"x.png"] * per_batch}
            _add(tar, f"cifar-10-batches-py/{name}", pickle.dumps(obj, protocol=2))
        _add(tar, "cifar-10-batches-py/batches.meta",
             pickle.dumps({b"label_names": [n.encode() for n in names], b"num_vis": 3072}, protocol=2))
    return batches


def test_cifar10_fixture_archive(tmp_path):
    batches = _cifar_tar(tmp_path / "cifar-10-python.tar.gz", 4, np.random.default_rng(1))
    d = load_cifar10(tmp_path)
    assert d["x_train"].shape == (20, 32, 32, 3) and d["x_test"].shape == (4, 32, 32, 3)
    assert d["y_train"].dtype == np.int64 and d["class_names"] == CLASS_NAMES
    data, labels = batches["data_batch_2"]
    img = d["x_train"][4 + 1]  # batch 2, image 1: rows are R (1024), G, B planes, row-major
    assert np.array_equal(img[..., 0].ravel(), data[1, :1024]) and np.array_equal(img[..., 2].ravel(), data[1, 2048:])
    assert d["y_train"][4:8].tolist() == labels


def test_cifar10_refuses_foreign_pickles_and_bad_meta(tmp_path):
    _cifar_tar(tmp_path / "cifar-10-python.tar.gz", 2, np.random.default_rng(2), payload=Path("x"))
    with pytest.raises(pickle.UnpicklingError):
        load_cifar10(tmp_path)
    (tmp_path / "b").mkdir()
    _cifar_tar(tmp_path / "b" / "cifar-10-python.tar.gz", 2, np.random.default_rng(2), names=CLASS_NAMES[::-1])
    with pytest.raises(ValueError, match="class names"):
        load_cifar10(tmp_path / "b")
    with pytest.raises(FileNotFoundError):
        load_cifar10(tmp_path / "nowhere")


@pytest.mark.parametrize(("clients", "labels"), [(100, 2), (20, 3), (100, 3)])
def test_partition_label_counts(clients, labels):
    rng = np.random.default_rng(0)
    y = rng.integers(0, 10, 20000)
    parts = label_skew_partition(y, clients=clients, labels_per_client=labels, sigma=0.6, seed=1)
    used = np.concatenate([p["train"] + p["test"] for p in parts])
    assert len(used) == len(y) == len(np.unique(used))  # every example exactly once
    for u, p in enumerate(parts):
        own = set(y[p["train"] + p["test"]].tolist())
        assert own == {(u + j) % 10 for j in range(labels)} == set(p["labels"])
        assert len(own) == labels
        for lab in own:  # 75 / 25 per label
            n_tr = int((y[p["train"]] == lab).sum())
            n = n_tr + int((y[p["test"]] == lab).sum())
            assert n_tr == round(0.75 * n) and n >= 10
    stats = partition_stats(parts)
    assert stats["std"] > 0.2 * stats["mean"]  # unequal sizes
    again = label_skew_partition(y, clients=clients, labels_per_client=labels, sigma=0.6, seed=1)
    assert again == parts
    assert label_skew_partition(y, clients=clients, labels_per_client=labels, sigma=0.6, seed=2) != parts


def test_partition_validation_split_is_held_out_of_train_only():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 10, 20000)
    plain = label_skew_partition(y, clients=100, labels_per_client=2, sigma=0.6, seed=1)
    parts = label_skew_partition(y, clients=100, labels_per_client=2, sigma=0.6, seed=1, validation_fraction=0.1)
    assert all("validation" not in p for p in plain)
    for p, q in zip(parts, plain, strict=True):
        assert p["test"] == q["test"]  # the test sets do not move
        assert sorted(p["train"] + p["validation"]) == sorted(q["train"])
        assert not set(p["validation"]) & set(p["train"])
        for lab in p["labels"]:  # 10 % of each label's train part, rounded
            n_val = int((y[p["validation"]] == lab).sum())
            assert n_val == round(0.1 * int((y[q["train"]] == lab).sum()))
    assert partition_stats(parts) == partition_stats(plain)  # sizes count validation examples
    assert sum(len(p["validation"]) for p in parts) > 0.09 * sum(len(q["train"]) for q in plain)
    with pytest.raises(ValueError, match="validation_fraction"):
        label_skew_partition(y, clients=100, labels_per_client=2, sigma=0.6, seed=1, validation_fraction=1.0)
    with pytest.raises(ValueError, match="rounds to no validation example"):  # 10 train examples per label: 0.04 · 10
        label_skew_partition(np.repeat(np.arange(10), 14), clients=10, labels_per_client=1, sigma=0.0, seed=1,
                             min_per_label=14, validation_fraction=0.04)


def test_partition_fraction_and_errors():
    y = np.repeat(np.arange(10), 100)
    parts = label_skew_partition(y, clients=20, labels_per_client=3, sigma=0.4, seed=0, use_fraction=0.5,
                                 min_per_label=2)
    assert partition_stats(parts)["total"] == 500
    with pytest.raises(ValueError, match="labels_per_client"):
        label_skew_partition(y, clients=20, labels_per_client=11, sigma=0.4, seed=0)
    with pytest.raises(ValueError, match="examples for"):
        label_skew_partition(y, clients=100, labels_per_client=2, sigma=0.4, seed=0, min_per_label=20)


def test_preprocess():
    rng = np.random.default_rng(0)
    gray = rng.integers(0, 256, (50, 16, 16), dtype=np.uint8)
    t = preprocess(gray, "per_pixel")
    assert t.shape == (50, 1, 16, 16)
    assert t.dtype == torch.float32
    assert torch.allclose(t.mean(0), torch.zeros(1, 16, 16, dtype=t.dtype), atol=1e-5)
    rgb = preprocess(gray, "digits_rgb28")
    assert rgb.shape == (50, 3, 28, 28) and torch.allclose(rgb[:, 0], rgb[:, 2])
    border = rgb[:, :, :4, :]  # USPS framed like MNIST: 4 blank rows (one value after standardising)
    assert torch.allclose(border, border.flatten()[0].expand_as(border)) and rgb[:, :, 4:24].std() > 0.5
    assert abs(float(rgb.mean())) < 1e-4 and abs(float(rgb.std()) - 1) < 1e-2
    col = preprocess(rng.integers(0, 256, (40, 32, 32, 3), dtype=np.uint8), "per_channel")
    assert col.shape == (40, 3, 32, 32)
    with pytest.raises(ValueError):
        preprocess(gray, "none")


def test_preprocess_with_the_statistics_of_other_rows():
    rng = np.random.default_rng(1)
    train, test = (rng.integers(lo, hi, (30, 32, 32, 3), dtype=np.uint8) for lo, hi in ((100, 256), (0, 120)))
    t = preprocess(test, "digits_rgb28", fit=train)
    ref = preprocess(train, "digits_rgb28")
    assert abs(float(ref.mean())) < 1e-4 and float(t.mean()) < -1  # the train split's mean, not the test split's
    both = preprocess(np.concatenate([train, test]), "digits_rgb28", fit=train)
    assert torch.allclose(both[:30], ref, atol=1e-5) and torch.allclose(both[30:], t, atol=1e-5)


def test_table2_target_is_its_test_split_standardised_by_its_train_split(tmp_path):
    """Issue 19: WAFL's Table 2 tests on the target's test split; eq. (9)'s W₂ sees its train split."""
    from fedshift.io import torch_save_atomic
    from fedshift.papers import wafl as W

    rng = np.random.default_rng(2)
    src = {"x_train": torch.from_numpy(rng.integers(0, 256, (300, 28, 28), dtype=np.uint8)),
           "y_train": torch.from_numpy(np.arange(300) % 10), "x_test": torch.zeros(0, 28, 28, dtype=torch.uint8),
           "y_test": torch.zeros(0, dtype=torch.int64)}
    tgt = {"x_train": torch.from_numpy(rng.integers(100, 256, (40, 32, 32, 3), dtype=np.uint8)),
           "y_train": torch.from_numpy(np.arange(40) % 10),
           "x_test": torch.from_numpy(rng.integers(0, 120, (12, 32, 32, 3), dtype=np.uint8)),
           "y_test": torch.from_numpy(np.arange(12) % 10)}
    torch_save_atomic(src, tmp_path / "s.pt")
    torch_save_atomic(tgt, tmp_path / "t.pt")
    exp = {"experiment": "da", "preprocess": "digits_rgb28",
           "partition": {"clients": 5, "labels_per_client": 2, "sigma": 0.0, "seed": 0, "train_fraction": 0.75}}
    W.write_partition(exp, tmp_path / "s.pt", tmp_path / "p.json")
    data = W.load_data(exp, tmp_path / "s.pt", tmp_path / "p.json", torch.device("cpu"), tmp_path / "t.pt")
    x, y = data["target"]
    assert x.shape == (12, 3, 28, 28) and torch.equal(y, tgt["y_test"])
    assert torch.allclose(x, preprocess(tgt["x_test"].numpy(), "digits_rgb28", fit=tgt["x_train"].numpy()))
    assert data["target_train"].shape == (40, 3, 28, 28) and float(x.mean()) < -1
