"""Data of the AgnosticFedAvg / AFL-LM experiments: PTB (mirror), and the Cornell, federated-EMNIST and
Stack Overflow loaders on fixtures written here in the real on-disk formats (zip; TFF HDF5 in .tar.bz2);
the language-model pipeline; the registry's explicit handling of files without a known sha256."""

import io
import math
import tarfile
import zipfile

import h5py
import numpy as np
import pytest
import torch

from fedshift.data import cornell, emnist, stackoverflow
from fedshift.data.ptb import load_ptb
from fedshift.data.text import BOS, EOS, PAD, UNK, build_vocab, encode, normalize
from fedshift.lm import StackedLSTM, lm_sums, token_loss
from fedshift.models import init_params


def test_ptb_from_mirror(mirror_dir):
    ptb = load_ptb(mirror_dir / "ptb")
    assert [len(ptb[s]) for s in ("train", "valid", "test")] == [42068, 3370, 3761]  # lines (SOURCE.md)
    words = sum(len(s) for s in ptb["train"])
    assert 870_000 < words < 887_521  # tokens made only of punctuation ("&", "$", "'") vanish
    vocab = build_vocab(ptb["train"], 10_000)
    assert len(vocab) < 10_000 and "<unk>" not in vocab and vocab[0] == "the"
    ids = encode(ptb["test"], vocab, 30)
    assert (ids == UNK).any() and (ids[:, 0] == BOS).all()


def test_normalize_and_encode():
    assert normalize("Hello, World! It's <unk> 3.5") == ["hello", "world", "its", "<unk>", "35"]
    assert normalize("<unk> ok", unk_markers=()) == ["unk", "ok"]
    vocab = build_vocab([["b", "a", "b"], ["c", "a", "<unk>", "<unk>"]], 2)
    assert vocab == ["a", "b"]
    rows = encode([["a", "z", "b"], ["b", "a", "b", "a"]], vocab, 3)
    np.testing.assert_array_equal(rows, [[BOS, 4, UNK, 5, EOS], [BOS, 5, 4, 5, EOS]])
    with pytest.raises(ValueError, match="max_len"):
        encode([["a"]], vocab, 0)


def test_lm_loss_and_metrics_definitions():
    torch.manual_seed(0)
    module = StackedLSTM(9, embed_dim=4, hidden=5, layers=2)
    params = init_params(module, 0)
    seq = torch.tensor(encode([["a", "b"], ["c", "x", "a", "b"]], ["a", "b", "c", "d", "e"], 4))
    x, y = seq[:, :-1], seq[:, 1:]
    logits = torch.func.functional_call(module, params, (x,))
    ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), y, reduction="none")
    real = y != PAD
    np.testing.assert_allclose(token_loss(module, params, x, y, scale=2.0).detach().numpy(),
                               ((ce * real).sum(1) / 2).detach().numpy(), rtol=1e-6)
    s = lm_sums(module, params, x, y)
    assert s["tokens"] == 3 + 5  # words + EOS, no PAD
    assert s["words"] == 2 + 4  # EOS excluded, UNK ("x") counted
    assert s["loss"] == pytest.approx(float((ce * real).sum()), rel=1e-6)
    pred = logits.clone()
    pred[..., :4] = -torch.inf
    pred = pred.argmax(-1)
    want = ((pred == y) & real & (y != UNK) & (y != EOS)).sum().item()
    assert s["correct"] == want
    assert math.isfinite(math.exp(s["loss"] / s["tokens"]))


def _cornell_zip(path, lines):
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("cornell movie-dialogs corpus/movie_lines.txt", "\n".join(lines).encode("iso-8859-1"))
        zf.writestr("__MACOSX/cornell movie-dialogs corpus/._movie_lines.txt", b"\x00junk")


def test_cornell_loader_on_fixture(tmp_path):
    sep = cornell.SEPARATOR
    lines = [sep.join([f"L{i}", f"u{i}", f"m{i % 12}", "BIANCA", f"Hey, Café number {i}!"]) for i in range(36)]
    _cornell_zip(tmp_path / cornell.ARCHIVE, lines)
    data = cornell.load_cornell(tmp_path)
    assert sum(len(v) for v in data.values()) == 36
    assert data["train"][0] == ["hey", "café", "number", "0"]
    # split by movie: movies m8 and m9 (sorted ids) go to valid / test with all their lines
    assert len(data["valid"]) == 3 and len(data["test"]) == 3
    assert {s[-1] for s in data["test"]} == {"9", "21", "33"}
    bad = tmp_path / "bad"
    bad.mkdir()
    _cornell_zip(bad / cornell.ARCHIVE, ["L1 +++$+++ only three +++$+++ fields"])
    with pytest.raises(ValueError, match="line 1: expected 5 fields"):
        cornell.load_cornell(bad)
    with pytest.raises(FileNotFoundError, match="Cornell"):
        cornell.load_cornell(tmp_path / "nowhere")


def _tar_bz2(path, files):
    with tarfile.open(path, "w:bz2") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))


def _h5_bytes(tmp_path, name, clients):
    p = tmp_path / name
    with h5py.File(p, "w") as f:
        for cid, feats in clients.items():
            g = f.create_group(f"examples/{cid}")
            for k, v in feats.items():
                g.create_dataset(k, data=v)
    return p.read_bytes()


def test_emnist_loader_on_fixture(tmp_path):
    rng = np.random.default_rng(0)
    writers = {"f0000_14": 3, "f2100_01": 2, "f2599_33": 1, "f2600_07": 2}
    files = {}
    for split in ("train", "test"):
        clients = {c: {"pixels": rng.uniform(0, 1, (n, 28, 28)).astype(np.float32),
                       "label": rng.integers(0, 62, n).astype(np.int32)} for c, n in writers.items()}
        files[f"fed_emnist_{split}.h5"] = _h5_bytes(tmp_path, f"{split}.h5", clients)
        if split == "train":
            train_clients = clients
    raw = tmp_path / "raw"
    raw.mkdir()
    _tar_bz2(raw / emnist.ARCHIVE, files)
    data = emnist.load_emnist(raw, tmp_path / "work")
    tr = data["train"]
    assert tr["client_ids"] == sorted(writers)
    np.testing.assert_array_equal(tr["offsets"], [0, 3, 5, 6, 8])
    np.testing.assert_array_equal(tr["domain"], [1, 1, 1, 0, 0, 0, 1, 1])  # 2100..2599 = high school (0)
    np.testing.assert_allclose(tr["x"][:3], 1.0 - train_clients["f0000_14"]["pixels"])
    np.testing.assert_array_equal(tr["y"][3:5], train_clients["f2100_01"]["label"])
    assert data["test"]["x"].shape == (8, 28, 28)
    assert [emnist.writer_domain(c) for c in ("f2099_00", "f2100_00", "f2599_99", "f2600_00")] == [1, 0, 0, 1]
    with pytest.raises(ValueError, match="not a federated-EMNIST client id"):
        emnist.writer_domain("writer_12")


def test_stackoverflow_loader_on_fixture(tmp_path):
    def feats(sentences, types):
        n = len(types)
        return {"tokens": np.array([s.encode() for s in sentences], dtype=object),
                "type": np.array([t.encode() for t in types], dtype=object),
                "title": np.array([b"t"] * n, dtype=object), "tags": np.array([b"python"] * n, dtype=object),
                "creation_date": np.array([b"2010-01-01"] * n, dtype=object), "score": np.arange(n, dtype=np.int64)}

    clients = {"00000001": feats(["how do i sort a list", "use sorted"], ["question", "answer"]),
               "00000002": feats(["the list is sorted ?"], ["answer"]),
               "00000003": feats(["why", "because", "ok"], ["question", "answer", "answer"])}
    h5 = _h5_bytes(tmp_path, "so.h5", clients)
    raw = tmp_path / "raw"
    raw.mkdir()
    _tar_bz2(raw / stackoverflow.ARCHIVE, {f"stackoverflow/{f}": h5 for f in stackoverflow.SPLIT_FILES.values()})
    _tar_bz2(raw / stackoverflow.WORD_COUNT_ARCHIVE,
             {"stackoverflow.word_count": b"the 50\nlist 40\nsorted 40\nhow 3\nwhy 1\n"})
    wc = tarfile.open(raw / stackoverflow.WORD_COUNT_ARCHIVE)
    wc.extractall(tmp_path / "wc", filter="data")
    vocab = stackoverflow.read_word_counts(tmp_path / "wc" / "stackoverflow.word_count", 3)
    assert vocab == ["the", "list", "sorted"]
    path = stackoverflow.h5_path(raw, tmp_path / "work", "train")
    data = stackoverflow.load_split(path, vocab, 4)
    np.testing.assert_array_equal(data["offsets"], [0, 2, 3, 6])
    np.testing.assert_array_equal(data["domain"], [0, 1, 1, 0, 1, 1])
    np.testing.assert_array_equal(data["tokens"][2], [BOS, 4, 5, UNK, 6, EOS])  # "the list is sorted ?": 4 words
    capped = stackoverflow.load_split(path, vocab, 4, max_clients=2, max_sentences_per_client=1, seed=0)
    assert len(capped["client_ids"]) == 2 and len(capped["domain"]) == 2
    assert stackoverflow.split_statistics(path) == {"clients": 3, "sentences": 6, "answers": 4, "questions": 2}
    with pytest.raises(ValueError, match="fewer than the vocabulary size"):
        stackoverflow.read_word_counts(tmp_path / "wc" / "stackoverflow.word_count", 10)
    with pytest.raises(ValueError, match="unknown Stack Overflow split"):
        stackoverflow.h5_path(raw, tmp_path / "work", "validation")
    bad = {"00000009": feats(["x"], ["comment"])}
    (tmp_path / "bad.h5").write_bytes(_h5_bytes(tmp_path, "bad_src.h5", bad))
    with pytest.raises(ValueError, match="neither question nor answer"):
        stackoverflow.load_split(tmp_path / "bad.h5", vocab, 4)
