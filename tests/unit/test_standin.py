"""Stand-in data (fedshift.data.standin): real formats read by the real loaders, deterministic, never the real data."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from fedshift.errors import ConfigError, load_yaml
from fedshift.validation.standin import check_standin
from fedshift.data import standin
from fedshift.data.cifar10 import CLASS_NAMES, load_cifar10
from fedshift.data.cornell import load_cornell
from fedshift.data.download import STANDIN_MARKER, ChecksumError, fetch_dataset, fetch_standin, standin_datasets
from fedshift.data.emnist import load_emnist
from fedshift.data.mnist_m import read_bsds500_train
from fedshift.data.office31 import DOMAINS as OFFICE_DOMAINS
from fedshift.data.office31 import load_office31
from fedshift.data.sources import DatasetSpec, file_sha256, recorded_sha256
from fedshift.data.stackoverflow import DOMAIN_NAMES as SO_DOMAINS
from fedshift.data.stackoverflow import h5_path, load_split, read_word_counts
from fedshift.data.tff_h5 import client_ids, extract_member
from fedshift.data.wilds import PACS_CLASSES, load_iwildcam, load_pacs


@pytest.fixture(scope="module")
def registry(repo_root):
    return load_yaml(repo_root / "config" / "datasets.yaml")["datasets"]


def _digests(files):
    return [file_sha256(f) for f in files]


def test_every_standin_is_a_registry_dataset_with_its_file_names(registry, tmp_path):
    for name in standin.STANDINS:
        assert name in registry
    files = standin.generate("pacs", tmp_path, fraction=0.01)
    assert [f.name for f in files] == [f["name"] for f in registry["pacs"]["files"]]


@pytest.mark.parametrize("name", ["cifar10", "pacs", "iwildcam", "office31", "bsds500", "emnist_tff",
                                  "stackoverflow_tff", "cornell_movie_dialogs", "mobilenet_v2"])
def test_standin_is_deterministic_for_a_seed_and_fails_the_real_checksum(name, registry, tmp_path):
    fraction = 0.002 if name.endswith("_tff") else 0.01
    a = standin.generate(name, tmp_path / "a", seed=3, fraction=fraction)
    b = standin.generate(name, tmp_path / "b", seed=3, fraction=fraction)
    c = standin.generate(name, tmp_path / "c", seed=4, fraction=fraction)
    assert _digests(a) == _digests(b)
    assert _digests(a) != _digests(c)
    spec = DatasetSpec.from_registry(name, registry)
    for fs, path in zip(spec.files, a, strict=True):
        assert path.name == fs.name
        if fs.pinned:  # the real file's pin refuses the stand-in
            assert not fs.accepts(file_sha256(path, fs.hash_of))


def test_cifar10_standin_real_pickle_format(tmp_path):
    standin.generate("cifar10", tmp_path, fraction=0.02)  # 200 images per batch (rehearsal: 10,000)
    d = load_cifar10(tmp_path)
    assert d["x_train"].shape == (1000, 32, 32, 3) and d["x_test"].shape == (200, 32, 32, 3)
    assert d["class_names"] == CLASS_NAMES
    assert np.bincount(d["y_train"], minlength=10).tolist() == [100] * 10


def test_pacs_standin_full_counts_domains_and_official_split(tmp_path):
    standin.generate("pacs", tmp_path / "raw")
    d = load_pacs(tmp_path / "raw", tmp_path / "img")
    assert sum(len(d[f"y_{s}"]) for s in ("train", "id_val", "val", "test")) == 9991
    assert d["class_names"] == PACS_CLASSES and d["domain_names"] == list(standin.PACS_DOMAINS)
    names = d["domain_names"]
    assert {names[i] for i in d["domain_train"]} == {"cartoon", "sketch"}
    assert {names[i] for i in d["domain_test"]} == {"photo"} and len(d["y_test"]) == 1670
    assert {names[i] for i in d["domain_val"]} == {"art_painting"} and len(d["y_val"]) == 2048
    assert set(d["y_train"]) == set(range(7))


def test_iwildcam_standin_classes_and_locations(tmp_path):
    standin.generate("iwildcam", tmp_path / "raw")
    d = load_iwildcam(tmp_path / "raw", tmp_path / "img")
    assert len(d["class_names"]) == 182 and len(d["domain_names"]) == 323
    loc = standin.IWILDCAM_LOCATIONS
    assert len(set(d["domain_train"])) == loc["train"]
    assert len(set(d["domain_val"])) == loc["val"] and len(set(d["domain_test"])) == loc["test"]
    assert not set(d["domain_train"]) & set(d["domain_test"])
    assert set(d["y_train"]) | set(d["y_id_val"]) | set(d["y_id_test"]) == set(range(182))
    assert set(d["domain_id_val"]) == set(d["domain_train"])


def test_office31_standin_classes_and_domains(tmp_path):
    standin.generate("office31", tmp_path, fraction=0.05)
    d = load_office31(tmp_path, size=8)
    assert d["class_names"] == standin.OFFICE31_CLASSES and len(d["class_names"]) == 31
    for dom in OFFICE_DOMAINS:
        assert set(d[f"y_{dom}"]) == set(range(31))
    assert sum(standin.OFFICE31_COUNTS.values()) == 4110


def test_office31_standin_full_count_in_archive(tmp_path):
    import tarfile

    (path,) = standin.generate("office31", tmp_path)
    with tarfile.open(path) as tar:
        names = [m.name for m in tar if m.isfile()]
    assert len(names) == 4110
    for dom, n in standin.OFFICE31_COUNTS.items():
        assert sum(f"/{dom}/images/" in x for x in names) == n


def test_bsds500_standin_train_photographs(tmp_path):
    (path,) = standin.generate("bsds500", tmp_path, fraction=0.05)
    imgs = read_bsds500_train(path)
    assert len(imgs) == 10 and {im.shape for im in imgs} <= {(321, 481, 3), (481, 321, 3)}


def test_emnist_standin_writers_and_domains(tmp_path):
    standin.generate("emnist_tff", tmp_path, fraction=0.01)  # 340 of the 3,400 writers (full: all)
    d = load_emnist(tmp_path, tmp_path / "work")
    tr = d["train"]
    assert len(tr["client_ids"]) == 340 and tr["client_ids"] == d["test"]["client_ids"]
    assert set(tr["domain"]) == {0, 1} and tr["y"].max() <= 61 and len(set(tr["y"])) == 62
    assert tr["x"].shape[1:] == (28, 28) and 0.0 <= tr["x"].min() and tr["x"].max() <= 1.0


def test_stackoverflow_standin_splits_vocab_and_domains(tmp_path):
    files = standin.generate("stackoverflow_tff", tmp_path, fraction=0.01)
    vocab = read_word_counts(extract_member(files[1], "stackoverflow.word_count", tmp_path / "w"), 10000)
    assert len(vocab) == 10000
    for split, full in standin.STACKOVERFLOW_CLIENTS.items():
        assert len(client_ids(h5_path(tmp_path, tmp_path / "w", split))) == round(full * 0.1)
    d = load_split(h5_path(tmp_path, tmp_path / "w", "train"), vocab, 20)
    assert set(d["domain"]) == {0, 1} and SO_DOMAINS == ["question", "answer"]
    assert d["tokens"].shape[1] == 22


def test_cornell_standin_movies_split(tmp_path):
    standin.generate("cornell_movie_dialogs", tmp_path, fraction=0.01)
    d = load_cornell(tmp_path)
    assert set(d) == {"train", "valid", "test"} and all(d[s] for s in d)
    assert sum(map(len, d.values())) == round(standin.CORNELL_LINES * 0.01)


def test_weights_standin_loads_into_torchvision(tmp_path):
    import torch
    import torchvision

    (path,) = standin.generate("mobilenet_v2", tmp_path)
    model = torchvision.models.mobilenet_v2()
    model.load_state_dict(torch.load(path, weights_only=True))  # strict: same keys and shapes


def test_generate_refuses_unknown_names_and_fractions(tmp_path):
    with pytest.raises(ValueError, match="no stand-in for dataset 'adult'"):
        standin.generate("adult", tmp_path)
    with pytest.raises(ValueError, match="fraction"):
        standin.generate("pacs", tmp_path, fraction=0)


def test_fetch_standin_marks_and_a_real_fetch_never_trusts_it(registry, tmp_path, caplog):
    src = tmp_path / "standin"
    standin.generate("pacs", src, fraction=0.01)
    spec = DatasetSpec.from_registry("pacs", registry)  # unpinned: trust on first use must not take the stand-in
    dest = tmp_path / "data" / "raw" / "pacs"
    with caplog.at_level(logging.WARNING):
        fetch_standin(spec, dest, src)
    assert "STAND-IN" in caplog.text
    assert (dest / STANDIN_MARKER).is_file() and recorded_sha256(dest / "pacs_v1.0.tar.gz") is None
    assert standin_datasets(tmp_path / "data" / "raw") == ["pacs"]
    mirror = tmp_path / "mirror" / "pacs"
    mirror.mkdir(parents=True)
    (mirror / "pacs_v1.0.tar.gz").write_bytes(b"\x1f\x8b real bytes stand here")
    fetch_dataset(spec, dest, tmp_path / "mirror", progress=False)
    assert (dest / "pacs_v1.0.tar.gz").read_bytes() == b"\x1f\x8b real bytes stand here"
    assert not (dest / STANDIN_MARKER).exists() and standin_datasets(tmp_path / "data" / "raw") == []


def test_fetch_standin_refuses_a_file_that_passes_the_real_checksum(registry, tmp_path):
    spec = DatasetSpec.from_registry("adult", registry)  # pinned real files from the mirror-less registry
    src = tmp_path / "s"
    src.mkdir()
    for fs in spec.files:
        (src / fs.name).write_bytes(b"x")
    real = spec.files[0]
    object.__setattr__(real, "sha256", file_sha256(src / real.name))  # pretend the real file were these bytes
    with pytest.raises(ChecksumError, match="passes the real checksum"):
        fetch_standin(spec, tmp_path / "d", src)


def test_check_standin_only_at_rehearsal_scale(registry):
    cfg = {"datasets": registry, "standin": {"seed": 0, "datasets": ["cifar10"]}}
    with pytest.raises(ConfigError, match="standin.datasets: stand-in data is for the rehearsal only"):
        check_standin(cfg)
    check_standin({**cfg, "scale": "rehearsal"})
    with pytest.raises(ConfigError, match="no stand-in generator for 'adult'"):
        check_standin({**cfg, "scale": "rehearsal", "standin": {"seed": 0, "datasets": ["adult"]}})
