"""Stand-in data for the rehearsal: seeded, generated files in the real on-disk formats of datasets the mirror lacks.

The rehearsal (``config/rehearsal.yaml``) runs every job of the paper-scale DAG with the training length
capped; where the offline mirror lacks a dataset, it reads a *stand-in* instead: files generated here, in the exact
format the real loader reads (same archive, member names, pickle/HDF5/CSV layout, class names, domains, clients),
with pattern-and-noise images or random words in place of the real content. They exist to prove that every loader,
partitioner, model, table and figure of the paper scale runs; **no number computed on them is a result**.

Counts. Real counts, class and domain structure where they are cheap: CIFAR-10 (50,000 + 10,000 images, 10
classes), PACS (9,991 images; 7 classes; art_painting 2,048, cartoon 2,344, photo 1,670, sketch 3,929, the
official split), Office-31 (4,110 images, 31 classes; amazon 2,817, dslr 498, webcam 795), Cornell (617 movies,
304,713 lines), BSDS500 (200 train, 100 val, 200 test photographs of 481 x 321). A documented reduction where the
real size is prohibitive, keeping the class / client / domain counts: iWildCam (182 classes, 323 camera locations,
WILDS's location split: 243 train, 32 val, 48 test locations; 12 images per train location, 4 per val / test
location, instead of 203,029 images), federated EMNIST (3,400 writers as clients, 62 classes, the high-school /
census writer ids; 10 train + 2 test examples per writer instead of 671,585 + 77,483), Stack Overflow (clients cut
100-fold: 3,425 train, 388 held-out, 2,041 test users, 8 sentences each over a 12,000-word vocabulary, questions
and answers; the word-count file lists all 12,000 words). Within a class the per-domain / per-class counts of
PACS and Office-31 are spread evenly (the real per-class counts are not needed by any partitioner). The
torchvision weight files hold a randomly initialised model's ``state_dict`` (same keys and shapes as
IMAGENET1K_V1).

Stand-ins never pass a real checksum: their bytes differ from the real files', so a pinned sha256 refuses them
(:func:`fedshift.data.download.fetch_dataset` is told explicitly, by ``standin=True``, to skip verification, and
writes no trust-on-first-use record for them), and they live in their own folder (``data/standin/``), never the
data mirror. Generation is deterministic for a seed (archives are written with fixed member times and owners).
"""

from __future__ import annotations

import gzip
import io
import os
import pickle
import tarfile
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from PIL import Image

from fedshift.data.cifar10 import CLASS_NAMES as CIFAR10_CLASSES
from fedshift.data.wilds import PACS_CLASSES

__all__ = ["STANDINS", "OFFICE31_CLASSES", "PACS_COUNTS", "OFFICE31_COUNTS", "IWILDCAM_LOCATIONS", "generate"]

PACS_DOMAINS = ("art_painting", "cartoon", "photo", "sketch")
#: PACS v1.0 images per domain (Li et al. 2017; 9,991 in all).
PACS_COUNTS = {"art_painting": 2048, "cartoon": 2344, "photo": 1670, "sketch": 3929}
OFFICE31_CLASSES = ["back_pack", "bike", "bike_helmet", "bookcase", "bottle", "calculator", "desk_chair",
                    "desk_lamp", "desktop_computer", "file_cabinet", "headphones", "keyboard", "laptop_computer",
                    "letter_tray", "mobile_phone", "monitor", "mouse", "mug", "paper_notebook", "pen", "phone",
                    "printer", "projector", "punchers", "ring_binder", "ruler", "scissors", "speaker", "stapler",
                    "tape_dispenser", "trash_can"]
#: Office-31 images per domain (Saenko et al. 2010; 4,110 in all).
OFFICE31_COUNTS = {"amazon": 2817, "dslr": 498, "webcam": 795}
#: WILDS iWildCam v2.0 camera locations per split (323 in all; id_val / id_test come from the train locations).
IWILDCAM_LOCATIONS = {"train": 243, "val": 32, "test": 48}
IWILDCAM_CLASSES = 182
EMNIST_CLIENTS, EMNIST_CLASSES = 3400, 62
STACKOVERFLOW_CLIENTS = {"train": 3425, "held_out": 388, "test": 2041}
STACKOVERFLOW_WORDS = 12000
CORNELL_MOVIES, CORNELL_LINES = 617, 304713

_MTIME = 0  # fixed archive member times: the same seed gives the same bytes


def _rng(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng([seed, *name.encode()])


def _scaled(n: int, fraction: float, minimum: int = 1) -> int:
    return max(minimum, round(n * fraction))


def _pattern(rng: np.random.Generator, label: int, num_labels: int, size: tuple[int, int]) -> np.ndarray:
    """A low-entropy RGB image: a label-dependent colour ramp plus a little noise (compresses well, learnable)."""
    h, w = size
    hue = np.array([(37 * label) % 256, (91 * label + 60) % 256, (151 * label + 120) % 256], dtype=np.float32)
    ramp = np.linspace(0, 40, w, dtype=np.float32)[None, :, None]
    noise = rng.integers(0, 8, (h, w, 1)).astype(np.float32)
    return np.clip(hue[None, None, :] * 0.8 + ramp + noise, 0, 255).astype(np.uint8)


def _encode(img: np.ndarray, fmt: str) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format=fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return buf.getvalue()


def _write_tar(path: Path, files: dict[str, bytes], mode: str = "w:gz") -> list[Path]:
    """A tar archive with fixed member metadata, written through a temporary file then renamed; returns [path]."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".part")
    os.close(fd)
    try:
        if mode == "w:gz":  # gzip header without a time stamp: deterministic bytes
            with open(tmp, "wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as gz, \
                    tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tar:
                _add_all(tar, files)
        else:
            with tarfile.open(tmp, mode, format=tarfile.GNU_FORMAT) as tar:
                _add_all(tar, files)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return [path]


def _add_all(tar: tarfile.TarFile, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        info = tarfile.TarInfo(name)
        info.size, info.mtime, info.mode = len(data), _MTIME, 0o644
        tar.addfile(info, io.BytesIO(data))


# ---------------------------------------------------------------------------------------------- images

def _cifar10(out: Path, seed: int, fraction: float) -> list[Path]:
    rng = _rng(seed, "cifar10")
    files: dict[str, bytes] = {}

    def batch(n: int) -> dict[bytes, Any]:
        labels = np.arange(n) % 10
        rng.shuffle(labels)
        x = np.stack([_pattern(rng, int(y), 10, (32, 32)) for y in labels])
        data = x.transpose(0, 3, 1, 2).reshape(n, 3072)  # 1024 red, then green, then blue values per row
        return {b"data": data, b"labels": [int(y) for y in labels]}

    per = _scaled(10000, fraction, 10)
    for i in range(1, 6):
        files[f"cifar-10-batches-py/data_batch_{i}"] = pickle.dumps(batch(per), protocol=2)
    files["cifar-10-batches-py/test_batch"] = pickle.dumps(batch(per), protocol=2)
    files["cifar-10-batches-py/batches.meta"] = pickle.dumps(
        {b"label_names": [c.encode() for c in CIFAR10_CLASSES], b"num_vis": 3072}, protocol=2)
    return _write_tar(out / "cifar-10-python.tar.gz", files)


def _even(total: int, parts: int) -> list[int]:
    """``total`` split into ``parts`` counts differing by at most one (the first ones larger)."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def _pacs(out: Path, seed: int, fraction: float) -> list[Path]:
    """PACS in the official split (FedDG_Benchmark).

    Train + id_val (every 10th image) on cartoon and sketch, val on art_painting, test on photo.
    """
    rng = _rng(seed, "pacs")
    rows, files = [], {}
    for domain in PACS_DOMAINS:
        for y, n in enumerate(_even(_scaled(PACS_COUNTS[domain], fraction, len(PACS_CLASSES)), len(PACS_CLASSES))):
            for j in range(n):
                path = f"kfold/{domain}/{PACS_CLASSES[y]}/pic_{j:04d}.png"
                split = {"photo": "test", "art_painting": "val"}.get(domain, "id_val" if j % 10 == 9 else "train")
                rows.append({"path": path, "split": split, "y": y, "domain": domain})
                files[path] = _encode(_pattern(rng, y, 7, (12, 12)), "PNG")
    files["metadata.csv"] = pd.DataFrame(rows).to_csv(index=False).encode()
    return _write_tar(out / "pacs_v1.0.tar.gz", files)


def _iwildcam(out: Path, seed: int, fraction: float) -> list[Path]:
    """IWildCam in the WILDS v2.0 layout.

    Per train location 12 images (10 train, 1 id_val, 1 id_test), 4 per val / test location; the train split's
    labels cycle through all 182 classes, the others are drawn uniformly.
    """
    rng = _rng(seed, "iwildcam")
    rows, files = [], {}
    loc = 0
    per = {"train": _scaled(12, fraction, 3), "val": _scaled(4, fraction), "test": _scaled(4, fraction)}
    k = 0
    for split, count in IWILDCAM_LOCATIONS.items():
        for _ in range(count):
            for j in range(per[split]):
                s = split if split != "train" else ("id_val" if j == 0 else "id_test" if j == 1 else "train")
                y = k % IWILDCAM_CLASSES if split == "train" else int(rng.integers(IWILDCAM_CLASSES))
                k += split == "train"
                name = f"{loc:03d}_{j:03d}.jpg"
                rows.append({"filename": name, "split": s, "y": y, "location_remapped": loc, "sequence_remapped": loc,
                             "datetime": "2013-06-01 10:00:00.000"})
                files[f"train/{name}"] = _encode(_pattern(rng, y % 17, 17, (16, 16)), "JPEG")
            loc += 1
    files["metadata.csv"] = pd.DataFrame(rows).to_csv(index=False).encode()
    files["categories.csv"] = pd.DataFrame({"y": range(IWILDCAM_CLASSES),
                                            "name": [f"standin_class_{i}" for i in range(IWILDCAM_CLASSES)]}
                                           ).to_csv(index=False).encode()
    return _write_tar(out / "iwildcam_v2.0.tar.gz", files)


def _office31(out: Path, seed: int, fraction: float) -> list[Path]:
    rng = _rng(seed, "office31")
    files = {}
    for domain, total in OFFICE31_COUNTS.items():
        for c, n in enumerate(_even(_scaled(total, fraction, 31), 31)):
            for j in range(n):
                img = _pattern(rng, c, 31, (16, 16))
                files[f"domain_adaptation_images/{domain}/images/{OFFICE31_CLASSES[c]}/frame_{j:04d}.jpg"] = \
                    _encode(img, "JPEG")
    return _write_tar(out / "domain_adaptation_images.tar.gz", files)


def _bsds500(out: Path, seed: int, fraction: float) -> list[Path]:
    rng = _rng(seed, "bsds500")
    files = {}
    for split, n in (("train", 200), ("val", 100), ("test", 200)):
        for i in range(_scaled(n, fraction)):
            h, w = (321, 481) if i % 2 == 0 else (481, 321)
            img = rng.integers(0, 256, (h // 8 + 1, w // 8 + 1, 3), dtype=np.uint8).repeat(8, 0).repeat(8, 1)[:h, :w]
            files[f"BSR/BSDS500/data/images/{split}/{1000 + i}.jpg"] = _encode(img, "JPEG")
    return _write_tar(out / "BSR_bsds500.tgz", files)


# ---------------------------------------------------------------------------------------------- TFF HDF5

def _h5(path: Path, clients: dict[str, dict[str, np.ndarray]]) -> bytes:
    """A TFF HDF5ClientData file (group ``examples``, one sub-group per client, one dataset per feature)."""
    import h5py

    with tempfile.TemporaryDirectory() as tmp:
        f_path = Path(tmp) / path.name
        with h5py.File(f_path, "w", track_order=False) as f:
            ex = f.create_group("examples")
            for cid, feats in clients.items():
                g = ex.create_group(cid)
                for key, val in feats.items():
                    g.create_dataset(key, data=val, track_times=False)
        return f_path.read_bytes()


def _emnist(out: Path, seed: int, fraction: float) -> list[Path]:
    """Writers ``f<writer>_<nn>``: writer ids 0000-3399, so 500 high-school writers (2100-2599) and 2,900 census."""
    rng = _rng(seed, "emnist")
    n_train, n_test = _scaled(10, fraction), _scaled(2, fraction)
    clients = max(2, round(EMNIST_CLIENTS * min(fraction * 10, 1.0)))
    writers = np.linspace(0, EMNIST_CLIENTS - 1, clients).round().astype(int)
    split_files = {}
    for split, n in (("train", n_train), ("test", n_test)):
        data = {}
        for i, w in enumerate(writers):
            labels = (np.arange(n) + 7 * i) % EMNIST_CLASSES
            pixels = 1.0 - rng.random((n, 28, 28), dtype=np.float32) * 0.05  # 1.0 = background, as TFF's
            for j, y in enumerate(labels):
                pixels[j, 4 + y % 20, 4:24] -= 0.9  # a stroke whose row encodes the label
            data[f"f{w:04d}_{i % 100:02d}"] = {"pixels": pixels, "label": labels.astype(np.int32)}
        split_files[f"fed_emnist_{split}.h5"] = _h5(Path(f"fed_emnist_{split}.h5"), data)
    path = out / "fed_emnist.tar.bz2"
    _write_tar(path, {f"datasets/{k}": v for k, v in split_files.items()}, mode="w:bz2")
    return [path]


def _words(n: int) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return [letters[i % 26] + letters[(i // 26) % 26] + letters[(i // 676) % 26] + str(i // 17576 or "")
            for i in range(n)]


def _stackoverflow(out: Path, seed: int, fraction: float) -> list[Path]:
    import h5py

    rng = _rng(seed, "stackoverflow")
    vocab = _words(STACKOVERFLOW_WORDS)
    zipf = 1.0 / np.arange(1, STACKOVERFLOW_WORDS + 1)
    zipf /= zipf.sum()
    per = _scaled(8, fraction, 2)
    split_files = {}
    for split, count in STACKOVERFLOW_CLIENTS.items():
        data = {}
        for c in range(max(2, round(count * min(fraction * 10, 1.0)))):
            words = rng.choice(STACKOVERFLOW_WORDS, size=(per, 12), p=zipf)
            tokens = np.array([" ".join(vocab[w] for w in row).encode() for row in words], dtype=object)
            types = np.array([b"question" if (c + j) % 3 == 0 else b"answer" for j in range(per)], dtype=object)
            data[f"{10000 + c:08d}"] = {
                "tokens": np.array(tokens, dtype=h5py.string_dtype()),
                "type": np.array(types, dtype=h5py.string_dtype()),
                "title": np.array([b"stand-in"] * per, dtype=h5py.string_dtype()),
                "tags": np.array([b"standin"] * per, dtype=h5py.string_dtype()),
                "creation_date": np.array([b"2010-01-01 00:00:00 UTC"] * per, dtype=h5py.string_dtype()),
                "score": np.zeros(per, dtype=np.int64)}
        split_files[f"stackoverflow_{split}.h5"] = _h5(Path(f"stackoverflow_{split}.h5"), data)
    path = out / "stackoverflow.tar.bz2"
    _write_tar(path, {f"stackoverflow/{k}": v for k, v in split_files.items()}, mode="w:bz2")
    counts = (1e7 * zipf).astype(np.int64) + 1
    wc = "".join(f"{w} {int(c)}\n" for w, c in zip(vocab, counts, strict=True)).encode()
    wc_path = out / "stackoverflow.word_count.tar.bz2"
    _write_tar(wc_path, {"stackoverflow.word_count": wc}, mode="w:bz2")
    return [path, wc_path]


def _cornell(out: Path, seed: int, fraction: float) -> list[Path]:
    rng = _rng(seed, "cornell")
    vocab = _words(15000)
    zipf = 1.0 / np.arange(1, len(vocab) + 1)
    zipf /= zipf.sum()
    n = _scaled(CORNELL_LINES, fraction, CORNELL_MOVIES)
    lengths = rng.integers(3, 15, n)
    words = rng.choice(len(vocab), size=int(lengths.sum()), p=zipf)
    ends = np.cumsum(lengths)
    lines = []
    start = 0
    for i, end in enumerate(ends):
        text = " ".join(vocab[w] for w in words[start:end])
        start = end
        lines.append(f"L{i} +++$+++ u{i % 9035} +++$+++ m{i % CORNELL_MOVIES} +++$+++ NAME +++$+++ {text}.")
    path = out / "cornell_movie_dialogs_corpus.zip"
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        info = zipfile.ZipInfo("cornell movie-dialogs corpus/movie_lines.txt", date_time=(1980, 1, 1, 0, 0, 0))
        info.compress_type = zipfile.ZIP_DEFLATED
        zf.writestr(info, ("\n".join(lines) + "\n").encode("iso-8859-1"))
    path.write_bytes(buf.getvalue())
    return [path]


# ---------------------------------------------------------------------------------------------- weights

def _weights(builder: str, file: str) -> Callable[[Path, int, float], list[Path]]:
    def make(out: Path, seed: int, fraction: float) -> list[Path]:
        import torch
        import torchvision

        torch.manual_seed(seed)
        model = getattr(torchvision.models, builder)(weights=None)
        path = out / file
        path.parent.mkdir(parents=True, exist_ok=True)
        buf = io.BytesIO()
        torch.save(model.state_dict(), buf)
        path.write_bytes(buf.getvalue())
        return [path]

    return make


#: Registry dataset -> generator ``f(out_dir, seed, fraction) -> files``; ``fraction`` < 1 (tests only) scales the
#: example counts down, keeping classes and domains.
STANDINS: dict[str, Callable[[Path, int, float], list[Path]]] = {
    "cifar10": _cifar10,
    "pacs": _pacs,
    "iwildcam": _iwildcam,
    "office31": _office31,
    "bsds500": _bsds500,
    "emnist_tff": _emnist,
    "stackoverflow_tff": _stackoverflow,
    "cornell_movie_dialogs": _cornell,
    "resnet50_imagenet": _weights("resnet50", "resnet50-0676ba61.pth"),
    "mobilenet_v2": _weights("mobilenet_v2", "mobilenet_v2-b0353104.pth"),
}


def generate(name: str, out_dir: str | os.PathLike, seed: int = 0, fraction: float = 1.0) -> list[Path]:
    """Write the stand-in raw files of registry dataset ``name`` into ``out_dir``, as the real dataset names them.

    Parameters
    ----------
    name : str
        A key of :data:`STANDINS` (``cifar10``, ``pacs``, ``iwildcam``, ``office31``, ``bsds500``, ``emnist_tff``,
        ``stackoverflow_tff``, ``cornell_movie_dialogs``, ``resnet50_imagenet``, ``mobilenet_v2``).
    out_dir : path
        Folder to write into (created); the files get the registry's names (``config/datasets.yaml``).
    seed : int
        Seed of every random draw: the same seed gives the same bytes.
    fraction : float
        In (0, 1]: scale of the example counts (1 = the rehearsal's counts in the module docstring; tests use
        less). Classes, domains and locations are kept; client counts of the TFF sets shrink only below 0.1.

    Returns
    -------
    list of Path
        The files written, in registry order.

    Raises
    ------
    ValueError
        An unknown ``name`` (names the known ones) or ``fraction`` outside (0, 1].
    """
    if name not in STANDINS:
        raise ValueError(f"no stand-in for dataset {name!r}; stand-ins exist for {', '.join(sorted(STANDINS))}")
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must lie in (0, 1], got {fraction}")
    return STANDINS[name](Path(out_dir), seed, fraction)

