"""Tests for the Adult and Fashion-MNIST loaders and the prepared-tensor round trip."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fedshift.data.adult import ATTRIBUTES, COLUMNS, load_adult
from fedshift.data.fashion_mnist import load_fashion_mnist, read_idx
from fedshift.data.prepare import PREPARERS, load_prepared, prepare_dataset

BLOCK_SIZES = {"workclass": 8, "education": 16, "marital-status": 7, "occupation": 14,
               "relationship": 6, "race": 5, "sex": 2, "native-country": 41}  # fmt: skip
RAW_DIRS = {"adult": "adult", "fashion_mnist": "fashion-mnist"}


@pytest.fixture(scope="module")
def adult(mirror_dir: Path) -> dict[str, Any]:
    """Adult decoded from the mirror, once per module."""
    return load_adult(mirror_dir / "adult")


@pytest.fixture(scope="module")
def fmnist(mirror_dir: Path) -> dict[str, Any]:
    """Fashion-MNIST decoded from the mirror, once per module."""
    return load_fashion_mnist(mirror_dir / "fashion-mnist")


def raw_adult_rows(path: Path, skip_first: bool) -> list[list[str]]:
    """Parse a raw Adult file into stripped fields, independently of the loader."""
    lines = path.read_text().splitlines()[1 if skip_first else 0 :]
    return [[f.strip() for f in ln.split(",")] for ln in lines if ln.strip()]


# --- Adult ------------------------------------------------------------------------------------


def test_adult_shapes_dtypes_and_labels(adult: dict[str, Any]) -> None:
    """Shapes, dtypes, label counts and feature names match UCI Adult."""
    assert adult["x_train"].shape == (32561, 99) and adult["x_test"].shape == (16281, 99)
    assert adult["x_train"].dtype == np.float32
    for key in ("y_train", "y_test", "domain_train", "domain_test"):
        assert adult[key].dtype == np.int64
    assert int(adult["y_train"].sum()) == 7841 and int(adult["y_test"].sum()) == 3846
    assert set(np.unique(adult["y_train"])) == {0, 1}
    assert len(adult["feature_names"]) == 99 == len(set(adult["feature_names"]))
    assert adult["feature_names"][21] == "education=Doctorate"
    assert adult["domain_names"] == ["doctorate", "non-doctorate"]
    assert [len(v) for v in ATTRIBUTES.values()] == list(BLOCK_SIZES.values())


@pytest.mark.parametrize(
    "split, file, skip_first", [("train", "adult.data", False), ("test", "adult.test", True)]
)
def test_adult_one_hot_blocks_match_raw_file(
    adult: dict[str, Any], mirror_dir: Path, split: str, file: str, skip_first: bool
) -> None:
    """Each block has one 1 unless '?', and decodes back to the raw text."""
    rows = raw_adult_rows(mirror_dir / "adult" / file, skip_first)
    x = adult[f"x_{split}"]
    assert len(rows) == len(x)
    assert set(np.unique(x)) == {0.0, 1.0}
    assert (x.sum(axis=1) <= 8).all()
    offset = 0
    for attr, size in BLOCK_SIZES.items():
        block_sums = x[:, offset : offset + size].sum(axis=1)
        missing = np.array([r[COLUMNS.index(attr)] == "?" for r in rows])
        np.testing.assert_array_equal(block_sums, np.where(missing, 0.0, 1.0), err_msg=attr)
        offset += size
    # Spot-check the decoded value of one block against the raw text.
    edu = [r[COLUMNS.index("education")] for r in rows]
    decoded = [adult["feature_names"][8 + i].split("=", 1)[1] for i in x[:, 8:24].argmax(axis=1)]
    assert decoded == edu
    n_doc = sum(v == "Doctorate" for v in edu)
    assert int((adult[f"domain_{split}"] == 0).sum()) == n_doc > 0
    np.testing.assert_array_equal(adult[f"domain_{split}"] == 0, x[:, 21] == 1)
    labels = np.array([r[-1].rstrip(".") == ">50K" for r in rows])
    np.testing.assert_array_equal(adult[f"y_{split}"], labels.astype(np.int64))


ADULT_ROW = ("39, State-gov, 77516, Bachelors, 13, Never-married, Adm-clerical, Not-in-family,"
             " White, Male, 2174, 0, 40, {country}, {income}")  # fmt: skip


def write_tiny_adult(folder: Path, country: str = "United-States") -> None:
    """Write a two-row adult.data and a one-row adult.test into ``folder``."""
    folder.mkdir(exist_ok=True)
    (folder / "adult.data").write_text(
        ADULT_ROW.format(country=country, income="<=50K")
        + "\n"
        + ADULT_ROW.format(country="?", income=">50K").replace("Bachelors", "Doctorate")
        + "\n\n"
    )
    (folder / "adult.test").write_text(
        "|1x3 Cross validator\n" + ADULT_ROW.format(country="Cuba", income=">50K.") + "\n"
    )


def test_adult_encodes_tiny_file_exactly(tmp_path: Path) -> None:
    """The exact one-hot columns, labels and domains of a hand-made file."""
    write_tiny_adult(tmp_path)
    d = load_adult(tmp_path)
    names = d["feature_names"]
    on = [[names[j] for j in np.flatnonzero(row)] for row in d["x_train"]]
    common = ["workclass=State-gov", "marital-status=Never-married", "occupation=Adm-clerical",
              "relationship=Not-in-family", "race=White", "sex=Male"]  # fmt: skip
    assert sorted(on[0]) == sorted(common + ["education=Bachelors", "native-country=United-States"])
    assert sorted(on[1]) == sorted(common + ["education=Doctorate"])  # '?' country: zero block
    assert d["y_train"].tolist() == [0, 1] and d["domain_train"].tolist() == [1, 0]
    assert d["y_test"].tolist() == [1] and "native-country=Cuba" in [
        names[j] for j in np.flatnonzero(d["x_test"][0])
    ]


def test_adult_unknown_value_names_row_and_attribute(tmp_path: Path) -> None:
    """A value not in adult.names raises naming the line and attribute."""
    write_tiny_adult(tmp_path, country="Atlantis")
    expected = r"adult\.data line 1: unknown native-country value 'Atlantis'"
    with pytest.raises(ValueError, match=expected):
        load_adult(tmp_path)


# --- Fashion-MNIST ----------------------------------------------------------------------------


def test_fashion_mnist_shapes_and_class_balance(fmnist: dict[str, Any]) -> None:
    """60000/10000 images of 28 x 28 uint8, 6000/1000 per class."""
    assert fmnist["x_train"].shape == (60000, 28, 28) and fmnist["x_train"].dtype == np.uint8
    assert fmnist["x_test"].shape == (10000, 28, 28) and fmnist["x_test"].dtype == np.uint8
    assert fmnist["y_train"].dtype == np.int64 and fmnist["y_test"].dtype == np.int64
    assert np.bincount(fmnist["y_train"]).tolist() == [6000] * 10
    assert np.bincount(fmnist["y_test"]).tolist() == [1000] * 10
    assert fmnist["class_names"][0] == "T-shirt/top" and fmnist["class_names"][9] == "Ankle boot"
    assert fmnist["x_train"].max() == 255 and fmnist["x_train"].min() == 0


def idx_bytes(arr: np.ndarray, dtype_code: int = 0x08) -> bytes:
    """Encode ``arr`` as an IDX file with the given dtype code."""
    header = bytes([0, 0, dtype_code, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape)
    return header + arr.astype(np.uint8).tobytes()


def test_read_idx_roundtrip_plain_and_gzip(tmp_path: Path) -> None:
    """Plain and gzip IDX files decode to the encoded array."""
    arr = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    (tmp_path / "a-idx3-ubyte").write_bytes(idx_bytes(arr))
    (tmp_path / "a-idx3-ubyte.gz").write_bytes(gzip.compress(idx_bytes(arr)))
    for name in ("a-idx3-ubyte", "a-idx3-ubyte.gz"):
        out = read_idx(tmp_path / name)
        np.testing.assert_array_equal(out, arr)
        assert out.dtype == np.uint8 and out.flags.writeable


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda b: bytes([0, 0, 0x0D]) + b[3:], "dtype code 0x0d"),  # float32 code
        (lambda b: b"\x01" + b[1:], "not an IDX file"),
        (lambda b: b[:-1], "payload has 23 bytes"),
        (lambda b: b + b"\x00", "longer than shape"),
    ],
)
def test_read_idx_rejects_corrupt_files(tmp_path: Path, mutate: Any, message: str) -> None:
    """Bad magic, dtype code or payload size raise ValueError naming the file."""
    good = idx_bytes(np.zeros((2, 3, 4), dtype=np.uint8))
    path = tmp_path / "bad-idx3-ubyte.gz"
    path.write_bytes(gzip.compress(mutate(good)))
    with pytest.raises(ValueError, match=message) as err:
        read_idx(path)
    assert "bad-idx3-ubyte.gz" in str(err.value)


# --- prepared tensors -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["adult", "fashion_mnist"])
def test_prepare_roundtrip_loads_with_weights_only(
    name: str, mirror_dir: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Prepared files reload with weights_only=True, equal to the loader output."""
    source = request.getfixturevalue("adult" if name == "adult" else "fmnist")
    out = tmp_path / f"{name}.pt"
    prepare_dataset(name, mirror_dir / RAW_DIRS[name], out)
    assert [p.name for p in tmp_path.iterdir()] == [out.name]
    loaded = torch.load(out, weights_only=True)
    assert loaded.keys() == source.keys()
    assert load_prepared(out).keys() == source.keys()
    for key, value in source.items():
        if isinstance(value, np.ndarray):
            assert isinstance(loaded[key], torch.Tensor)
            assert loaded[key].numpy().dtype == value.dtype
            np.testing.assert_array_equal(loaded[key].numpy(), value)
        else:
            assert loaded[key] == value


def test_prepare_unknown_name_lists_known(tmp_path: Path) -> None:
    """An unknown dataset name raises listing the known ones."""
    known = "adult, cifar10, fashion_mnist, iwildcam, mnist, mnist_m, mnist_m_full, mnist_m_split, office31, pacs, usps"
    with pytest.raises(ValueError, match=f"known: {known}"):
        prepare_dataset("cifar", tmp_path, tmp_path / "x.pt")
    assert sorted(PREPARERS) == ["adult", "cifar10", "fashion_mnist", "mnist", "mnist_m", "mnist_m_full",
                                 "mnist_m_split", "office31", "usps"]
    assert not (tmp_path / "x.pt").exists()
