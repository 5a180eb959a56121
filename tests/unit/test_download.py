"""Tests for fedshift.data.download: registry parsing, mirror copies, HTTP downloads, rollback, trust on first
use of unpinned files (the ``<file>.sha256`` record) and the refusal of HTML pages."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from fedshift.data.download import ChecksumError, MissingSourceError, check_mirror, fetch_dataset
from fedshift.data.sources import DatasetSpec, FileSpec, file_sha256, recorded_sha256

PAYLOADS = {"a.txt": b"alpha\n" * 100, "b.bin": bytes(range(256)) * 40, "c.txt": b"gamma"}


def sha(data: bytes) -> str:
    """Hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def registry(files: dict[str, dict], name: str = "toy") -> dict:
    """Build a ``datasets:`` mapping with one dataset; ``files`` maps name -> fields."""
    return {
        name: {
            "title": "Toy",
            "homepage": "https://example.org",
            "licence": "MIT",
            "citation": "nobody",
            "mirror_dir": "toy-dir",
            "files": [{"name": n, **fields} for n, fields in files.items()],
        }
    }


def toy_spec(payloads: dict[str, bytes], overrides: dict[str, dict] | None = None) -> DatasetSpec:
    """Spec of the toy dataset: one raw-hashed file per payload, fields overridable."""
    files = {n: {"urls": [], "sha256": sha(p), "hash_of": "raw"} for n, p in payloads.items()}
    for n, fields in (overrides or {}).items():
        files[n].update(fields)
    return DatasetSpec.from_registry("toy", registry(files))


def make_mirror(root: Path, payloads: dict[str, bytes]) -> Path:
    """Write ``payloads`` into ``root/mirror/toy-dir`` and return the mirror root."""
    folder = root / "mirror" / "toy-dir"
    folder.mkdir(parents=True)
    for n, p in payloads.items():
        (folder / n).write_bytes(p)
    return root / "mirror"


def test_from_registry_parses_fields_and_rejects_unknown_names() -> None:
    """Registry entries parse; unknown names and malformed files are rejected."""
    spec = toy_spec(PAYLOADS)
    assert spec.name == "toy" and spec.mirror_dir == "toy-dir"
    assert [f.name for f in spec.files] == list(PAYLOADS)
    assert spec.files[0] == FileSpec("a.txt", (), sha(PAYLOADS["a.txt"]), "raw")
    with pytest.raises(KeyError, match="known: toy"):
        DatasetSpec.from_registry("nope", registry({}))
    with pytest.raises(ValueError, match="hash_of"):
        toy_spec(PAYLOADS, {"a.txt": {"hash_of": "md5"}})
    with pytest.raises(ValueError, match="64 hex digits"):
        toy_spec(PAYLOADS, {"a.txt": {"sha256": "abc"}})


def test_file_sha256_raw_and_gunzip(tmp_path: Path) -> None:
    """Raw hashes the container, gunzip the payload; non-gzip input is rejected."""
    payload = PAYLOADS["b.bin"]
    path = tmp_path / "p.gz"
    path.write_bytes(gzip.compress(payload))
    assert file_sha256(path) == sha(path.read_bytes())
    assert file_sha256(path, "gunzip") == sha(payload)
    plain = tmp_path / "plain.txt"
    plain.write_bytes(b"plain")
    with pytest.raises(ValueError, match="not a valid gzip"):
        file_sha256(plain, "gunzip")


def test_fetch_copies_from_mirror(tmp_path: Path) -> None:
    """Every file is copied from the mirror, verified, with no temporary left."""
    mirror = make_mirror(tmp_path, PAYLOADS)
    dest = tmp_path / "raw"
    paths = fetch_dataset(toy_spec(PAYLOADS), dest, mirror, progress=False)
    assert paths == [dest / n for n in PAYLOADS]
    assert {p.name: p.read_bytes() for p in paths} == PAYLOADS
    assert sorted(os.listdir(dest)) == sorted(PAYLOADS)  # no temporary files left


def test_present_file_with_right_hash_is_kept_wrong_one_replaced(tmp_path: Path) -> None:
    """A verified file is not rewritten; a stale one is replaced."""
    mirror = make_mirror(tmp_path, PAYLOADS)
    dest = tmp_path / "raw"
    dest.mkdir()
    (dest / "a.txt").write_bytes(PAYLOADS["a.txt"])
    (dest / "b.bin").write_bytes(b"stale")
    before = (dest / "a.txt").stat()
    fetch_dataset(toy_spec(PAYLOADS), dest, mirror, progress=False)
    after = (dest / "a.txt").stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert (dest / "b.bin").read_bytes() == PAYLOADS["b.bin"]


def test_gunzip_hash_accepts_recompressed_mirror_copy(tmp_path: Path) -> None:
    """A recompressed .gz with the canonical payload passes a gunzip hash only."""
    payload = PAYLOADS["b.bin"] * 10
    canonical = gzip.compress(payload, compresslevel=9, mtime=0)
    recompressed = gzip.compress(payload, compresslevel=1, mtime=123456)
    assert canonical != recompressed
    mirror = make_mirror(tmp_path, {"d.gz": recompressed})
    dest = tmp_path / "raw"
    spec = toy_spec({"d.gz": canonical}, {"d.gz": {"sha256": sha(payload), "hash_of": "gunzip"}})
    [path] = fetch_dataset(spec, dest, mirror, progress=False)
    assert path.read_bytes() == recompressed
    # The same mirror copy fails a raw hash of the canonical container.
    with pytest.raises(ChecksumError):
        fetch_dataset(toy_spec({"d.gz": canonical}), tmp_path / "raw2", mirror, progress=False)


def test_checksum_mismatch_removes_everything_this_call_wrote(tmp_path: Path) -> None:
    """A mismatch raises with file, source and hashes and rolls the dataset back."""
    mirror = make_mirror(tmp_path, PAYLOADS)
    dest = tmp_path / "raw"
    dest.mkdir()
    (dest / "unrelated.txt").write_text("keep me")
    wrong = "0" * 64
    spec = toy_spec(PAYLOADS, {"b.bin": {"sha256": wrong}})
    with pytest.raises(ChecksumError) as err:
        fetch_dataset(spec, dest, mirror, progress=False)
    msg = str(err.value)
    assert "b.bin" in msg and wrong in msg and sha(PAYLOADS["b.bin"]) in msg
    assert str(mirror / "toy-dir" / "b.bin") in msg
    # a.txt was copied before b.bin failed; it must be gone, and so must any temporary file.
    assert os.listdir(dest) == ["unrelated.txt"]


def test_prefix_and_unpinned_hashes(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A sha256 prefix (torch.hub's convention) verifies; ``unpinned`` needs a reason and is fetched unverified,
    with a warning that gives the hash to pin."""
    mirror = make_mirror(tmp_path, PAYLOADS)
    good = sha(PAYLOADS["b.bin"])
    spec = toy_spec(PAYLOADS, {"b.bin": {"sha256": good[:8]}})
    assert spec.files[1].pinned and spec.files[1].accepts(good) and not spec.files[1].accepts("f" + good[1:])
    fetch_dataset(spec, tmp_path / "p", mirror, progress=False)
    assert (tmp_path / "p" / "b.bin").read_bytes() == PAYLOADS["b.bin"]
    bad_prefix = ("0" if good[0] != "0" else "1") + good[1:8]
    with pytest.raises(ChecksumError, match=bad_prefix):
        fetch_dataset(toy_spec(PAYLOADS, {"b.bin": {"sha256": bad_prefix}}), tmp_path / "q", mirror, progress=False)
    with pytest.raises(ValueError, match="unpinned_reason"):
        toy_spec(PAYLOADS, {"b.bin": {"sha256": "unpinned"}})
    with pytest.raises(ValueError, match="prefix of at least 8"):
        toy_spec(PAYLOADS, {"b.bin": {"sha256": good[:7]}})
    spec = toy_spec(PAYLOADS, {"b.bin": {"sha256": "unpinned", "unpinned_reason": "no published hash"}})
    assert not spec.files[1].pinned
    with caplog.at_level("WARNING"):
        fetch_dataset(spec, tmp_path / "u", mirror, progress=False)
    assert good in caplog.text and "not verified (no published hash)" in caplog.text


def test_missing_mirror_folder_or_file(tmp_path: Path) -> None:
    """Missing mirror folders and files are named before anything is written."""
    spec = toy_spec(PAYLOADS)
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    with pytest.raises(MissingSourceError, match="toy-dir"):
        check_mirror(mirror, [spec])
    dest = tmp_path / "raw"
    with pytest.raises(MissingSourceError, match="toy-dir"):
        fetch_dataset(spec, dest, mirror, progress=False)
    assert not dest.exists() or not os.listdir(dest)
    (mirror / "toy-dir").mkdir()
    (mirror / "toy-dir" / "a.txt").write_bytes(PAYLOADS["a.txt"])
    with pytest.raises(MissingSourceError) as err:
        check_mirror(mirror, [spec])
    assert "b.bin" in str(err.value) and "c.txt" in str(err.value) and "a.txt" not in str(err.value)


UNPINNED = {"sha256": "unpinned", "unpinned_reason": "no published hash"}


def test_unpinned_file_is_trusted_on_first_use(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """An unpinned file's sha256 is recorded beside it on the first fetch; a later fetch must get the same bytes,
    else it fails naming the record to delete; a file present that matches its record is kept."""
    mirror = make_mirror(tmp_path, PAYLOADS)
    dest = tmp_path / "raw"
    spec = toy_spec(PAYLOADS, {"b.bin": UNPINNED})
    with caplog.at_level("WARNING"):
        fetch_dataset(spec, dest, mirror, progress=False)
    record = dest / "b.bin.sha256"
    assert record.read_text() == f"{sha(PAYLOADS['b.bin'])}  b.bin\n"  # sha256sum format
    assert recorded_sha256(dest / "b.bin") == sha(PAYLOADS["b.bin"]) and str(record) in caplog.text
    assert recorded_sha256(dest / "a.txt") is None and not (dest / "a.txt.sha256").exists()  # pinned: no record
    # the mirror's copy changes: the present file matches its record and is kept
    (mirror / "toy-dir" / "b.bin").write_bytes(b"other bytes")
    fetch_dataset(spec, dest, mirror, progress=False)
    assert (dest / "b.bin").read_bytes() == PAYLOADS["b.bin"]
    # fetched again, the other bytes differ from the record: refused, the record kept
    (dest / "b.bin").unlink()
    with pytest.raises(ChecksumError, match="recorded in") as err:
        fetch_dataset(spec, dest, mirror, progress=False)
    msg = str(err.value)
    assert f"delete {record}" in msg and sha(b"other bytes") in msg and sha(PAYLOADS["b.bin"]) in msg
    assert not (dest / "b.bin").exists() and recorded_sha256(dest / "b.bin") == sha(PAYLOADS["b.bin"])
    # a present file that differs from its record is replaced by a fetch that matches it
    (mirror / "toy-dir" / "b.bin").write_bytes(PAYLOADS["b.bin"])
    (dest / "b.bin").write_bytes(b"corrupted")
    fetch_dataset(spec, dest, mirror, progress=False)
    assert (dest / "b.bin").read_bytes() == PAYLOADS["b.bin"]
    # deleting the record accepts new bytes (and records them)
    (mirror / "toy-dir" / "b.bin").write_bytes(b"other bytes")
    (dest / "b.bin").unlink()
    record.unlink()
    fetch_dataset(spec, dest, mirror, progress=False)
    assert (dest / "b.bin").read_bytes() == b"other bytes" and recorded_sha256(dest / "b.bin") == sha(b"other bytes")
    # a file present without a record (fetched before records were kept) is kept and recorded
    record.unlink()
    (mirror / "toy-dir" / "b.bin").write_bytes(PAYLOADS["b.bin"])
    fetch_dataset(spec, dest, mirror, progress=False)
    assert (dest / "b.bin").read_bytes() == b"other bytes" and recorded_sha256(dest / "b.bin") == sha(b"other bytes")
    record.write_text("not a digest\n")
    with pytest.raises(ValueError, match="not a sha256 record"):
        fetch_dataset(spec, dest, mirror, progress=False)


def test_failed_fetch_removes_the_records_it_wrote(tmp_path: Path) -> None:
    """A dataset fetched all or nothing: a later file's mismatch removes an unpinned file and its new record."""
    mirror = make_mirror(tmp_path, PAYLOADS)
    dest = tmp_path / "raw"
    spec = toy_spec(PAYLOADS, {"a.txt": UNPINNED, "c.txt": {"sha256": "0" * 64}})
    with pytest.raises(ChecksumError, match="c.txt"):
        fetch_dataset(spec, dest, mirror, progress=False)
    assert os.listdir(dest) == []


def test_html_page_from_the_mirror_is_refused(tmp_path: Path) -> None:
    """A saved confirmation page in the mirror is no unpinned file (nothing kept, nothing recorded); a page
    present in the destination is replaced; a pin that accepts the bytes wins."""
    page = b"  \n<!DOCTYPE HTML><html>Google Drive can't scan this file for viruses</html>"
    mirror = make_mirror(tmp_path, {"x.tar.gz": page})
    dest = tmp_path / "raw"
    with pytest.raises(MissingSourceError, match="HTML page"):
        fetch_dataset(toy_spec({"x.tar.gz": page}, {"x.tar.gz": UNPINNED}), dest, mirror, progress=False)
    assert os.listdir(dest) == []
    [path] = fetch_dataset(toy_spec({"x.tar.gz": page}), dest, mirror, progress=False)  # pinned to these bytes
    assert path.read_bytes() == page
    (mirror / "toy-dir" / "x.tar.gz").write_bytes(b"\x1f\x8b archive")
    fetch_dataset(toy_spec({"x.tar.gz": page}, {"x.tar.gz": UNPINNED}), dest, mirror, progress=False)
    assert path.read_bytes() == b"\x1f\x8b archive" and recorded_sha256(path) == sha(b"\x1f\x8b archive")


# --- HTTP downloads from a local server -------------------------------------------------------


class _Server:
    """Serves ``routes[path]``: a list of (status, body) answered in turn, the last repeated."""

    def __init__(self) -> None:
        self.routes: dict[str, list[tuple[int, bytes]]] = {}
        self.hits: list[str] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server API)
                server.hits.append(self.path)
                queue = server.routes.get(self.path, [(404, b"not found")])
                status, body = queue.pop(0) if len(queue) > 1 else queue[0]
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"


@pytest.fixture
def server() -> Iterator[_Server]:
    """Run a local HTTP server on 127.0.0.1 in a thread."""
    srv = _Server()
    thread = threading.Thread(target=srv.httpd.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    yield srv
    srv.httpd.shutdown()
    srv.httpd.server_close()
    thread.join()


def url_spec(srv: _Server, urls: dict[str, list[str]], payloads: dict[str, bytes]) -> DatasetSpec:
    """Spec whose files download from ``srv`` at the given paths."""
    return toy_spec(payloads, {n: {"urls": [srv.base + u for u in us]} for n, us in urls.items()})


def test_download_falls_back_to_second_url_after_404(server: _Server, tmp_path: Path) -> None:
    """A 404 moves on to the next URL without retrying."""
    server.routes["/good/a.txt"] = [(200, PAYLOADS["a.txt"])]
    spec = url_spec(server, {"a.txt": ["/gone/a.txt", "/good/a.txt"]}, {"a.txt": PAYLOADS["a.txt"]})
    [path] = fetch_dataset(spec, tmp_path / "raw", retries=3, backoff=0, progress=True)
    assert path.read_bytes() == PAYLOADS["a.txt"]
    assert server.hits == ["/gone/a.txt", "/good/a.txt"]  # a 404 is not retried


def test_download_retries_server_errors(server: _Server, tmp_path: Path) -> None:
    """5xx answers are retried on the same URL until one succeeds."""
    body = PAYLOADS["b.bin"]
    server.routes["/flaky"] = [(503, b"busy"), (500, b"oops"), (200, body)]
    spec = url_spec(server, {"b.bin": ["/flaky"]}, {"b.bin": body})
    [path] = fetch_dataset(spec, tmp_path / "raw", retries=3, backoff=0, progress=False)
    assert path.read_bytes() == body
    assert server.hits == ["/flaky"] * 3


def test_download_gives_up_after_retries_and_rolls_back(server: _Server, tmp_path: Path) -> None:
    """Exhausted retries raise MissingSourceError and remove earlier files."""
    server.routes["/a"] = [(200, PAYLOADS["a.txt"])]
    server.routes["/b"] = [(503, b"busy")]
    payloads = {"a.txt": PAYLOADS["a.txt"], "b.bin": PAYLOADS["b.bin"]}
    spec = url_spec(server, {"a.txt": ["/a"], "b.bin": ["/b"]}, payloads)
    dest = tmp_path / "raw"
    with pytest.raises(MissingSourceError) as err:
        fetch_dataset(spec, dest, retries=2, backoff=0, progress=False)
    assert f"{server.base}/b" in str(err.value) and "503" in str(err.value)
    assert server.hits == ["/a", "/b", "/b"]
    assert os.listdir(dest) == []


def test_download_checksum_mismatch_names_url(server: _Server, tmp_path: Path) -> None:
    """A downloaded file with the wrong hash raises naming the URL."""
    server.routes["/c"] = [(200, b"tampered")]
    spec = url_spec(server, {"c.txt": ["/c"]}, {"c.txt": PAYLOADS["c.txt"]})
    dest = tmp_path / "raw"
    with pytest.raises(ChecksumError) as err:
        fetch_dataset(spec, dest, backoff=0, progress=False)
    assert f"{server.base}/c" in str(err.value) and sha(b"tampered") in str(err.value)
    assert os.listdir(dest) == []


def test_download_refuses_html_page_and_tries_the_next_url(server: _Server, tmp_path: Path) -> None:
    """Google Drive's confirmation page counts as that URL's failure; a later download that differs from the
    recorded sha256 fails naming the URL and the record."""
    page = b"<!doctype html><html>virus scan warning</html>"
    server.routes["/drive"] = [(200, page)]
    server.routes["/file"] = [(200, PAYLOADS["b.bin"])]
    dest = tmp_path / "raw"

    def unpinned(*paths: str) -> DatasetSpec:
        return toy_spec({"b.bin": b""}, {"b.bin": {**UNPINNED, "urls": [server.base + u for u in paths]}})

    with pytest.raises(MissingSourceError, match=r"every URL failed:\n.*/drive: b\.bin from .* is an HTML page"):
        fetch_dataset(unpinned("/drive"), dest, retries=1, backoff=0, progress=False)
    assert os.listdir(dest) == []
    server.hits.clear()
    spec = unpinned("/drive", "/file")
    [path] = fetch_dataset(spec, dest, retries=3, backoff=0, progress=False)
    assert path.read_bytes() == PAYLOADS["b.bin"] and recorded_sha256(path) == sha(PAYLOADS["b.bin"])
    assert server.hits == ["/drive", "/file"]  # an HTML page is not retried
    server.routes["/file"] = [(200, b"changed upstream")]
    path.unlink()
    with pytest.raises(ChecksumError, match="recorded in") as err:
        fetch_dataset(spec, dest, retries=1, backoff=0, progress=False)
    assert f"{server.base}/file" in str(err.value) and f"{path}.sha256" in str(err.value)
    assert not path.exists()


def test_download_verifies_a_sha256_prefix_after_a_404(server: _Server, tmp_path: Path) -> None:
    """torchvision's weights: the 8-digit prefix in the name is verified on the URL that answers."""
    weights = b"weights"
    server.routes["/w.pth"] = [(200, weights)]
    spec = toy_spec({"w.pth": weights}, {"w.pth": {"sha256": sha(weights)[:8],
                                                   "urls": [server.base + "/missing.pth", server.base + "/w.pth"]}})
    [path] = fetch_dataset(spec, tmp_path / "raw", retries=1, backoff=0, progress=False)
    assert path.read_bytes() == weights and not Path(f"{path}.sha256").exists()
    server.routes["/w.pth"] = [(200, b"other weights")]
    with pytest.raises(ChecksumError, match=sha(weights)[:8]):
        fetch_dataset(spec, tmp_path / "raw2", retries=1, backoff=0, progress=False)


# --- the real registry against the real mirror ------------------------------------------------


def load_registry(repo_root: Path) -> dict:
    """The ``datasets:`` mapping of config/datasets.yaml."""
    with open(repo_root / "config" / "datasets.yaml", encoding="utf-8") as fh:
        return yaml.safe_load(fh)["datasets"]


def test_real_registry_verifies_against_mirror(
    repo_root: Path, mirror_dir: Path, tmp_path: Path
) -> None:
    """config/datasets.yaml verifies against the real data mirror."""
    reg = load_registry(repo_root)
    specs = [DatasetSpec.from_registry(n, reg) for n in ("adult", "fashion_mnist")]
    check_mirror(mirror_dir, specs)
    for spec in specs:
        paths = fetch_dataset(spec, tmp_path / spec.name, mirror_dir, progress=False)
        assert sorted(p.name for p in (tmp_path / spec.name).iterdir()) == sorted(
            f.name for f in spec.files
        )
        for p, f in zip(paths, spec.files, strict=True):
            assert file_sha256(p, f.hash_of) == f.sha256


def test_registry_entries_parse_and_fedmm_sources_are_registered(repo_root: Path) -> None:
    """Every registry entry parses; FedMM's raw files are ordinary entries: MobileNetV2 pinned by torchvision's
    sha256 prefix, the archives with no published sha256 unpinned, each with its reason."""
    reg = load_registry(repo_root)
    specs = {n: DatasetSpec.from_registry(n, reg) for n in reg}
    layout = {n: (specs[n].mirror_dir, [f.name for f in specs[n].files], [f.sha256 for f in specs[n].files])
              for n in ("office31", "mnist_m_full", "bsds500", "mobilenet_v2")}
    assert layout == {
        "office31": ("office31", ["domain_adaptation_images.tar.gz"], ["unpinned"]),
        "mnist_m_full": ("mnist_m", ["mnist_m.tar.gz"], ["unpinned"]),
        "bsds500": ("bsds500", ["BSR_bsds500.tgz"], ["unpinned"]),
        "mobilenet_v2": ("torchvision", ["mobilenet_v2-b0353104.pth"], ["b0353104"]),
    }
    assert all(f.unpinned_reason for n in ("office31", "mnist_m_full", "bsds500") for f in specs[n].files)
