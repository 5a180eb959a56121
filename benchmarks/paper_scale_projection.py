"""Project the paper-scale wall time of every paper, and of the whole reproduction, on this device (issue 38, item 3).

For every (paper, experiment, run id) of the paper-scale DAG (``config/config.yaml`` + ``config/papers/*.yaml``, merged
as the Snakefile merges them; never ``config/quick.yaml``), the group's representative run (its lowest seed) is built
at the real sizes and trained for a few rounds on the device; its paper-scale wall time is projected from them:

* **Inputs.** Every dataset the run reads is made from stand-ins in the real on-disk format and at the real sizes
  (timing does not depend on pixel values): :mod:`fedshift.data.standin` where it has a generator (CIFAR-10, PACS,
  iWildCam, Office-31, BSDS500, EMNIST, Stack Overflow, Cornell, ImageNet weights), the generators below for the
  datasets the mirror holds (MNIST, Fashion-MNIST: IDX; USPS: ESL text; Adult: UCI CSV; PTB: text), then decoded by
  :func:`fedshift.data.prepare.prepare_dataset`; MNIST-M (both registry entries) is written as the prepared tensors
  of its real shape (59,001 + 9,001 images of 32 × 32 × 3) since decoding 68,002 PNGs is a prepare-stage cost. The
  run's partitions are written by the paper itself (:meth:`Paper.write_partition`). All of it lands in a scratch
  folder (``--work``), in the workflow's layout (``data/raw``, ``data/prepared``, ``data/partitions``), shared by
  the groups that read the same files.
* **Timing.** Three short trainings through :meth:`Paper.train` (the contract; no Snakemake, no files written),
  their rounds capped by the configuration's ``budget: {max_rounds: R}`` (:mod:`fedshift.budget`, the rehearsal's
  knob, which also shrinks every logging / evaluation / snapshot period to 1):
  ``A`` = 1 round (1 evaluation event), ``B`` = 2 rounds with the event periods set to 2 (1 event), ``C`` = 2 rounds
  with the periods at 1 (2 events; only where the run has such periods). Then ``per_round = B − A``,
  ``per_event = C − B`` (one logging / evaluation / snapshot) and ``fixed = A − per_round − per_event`` (data
  loading, model build, set-up), each clamped at 0.
* **Projection.** ``fixed + T × per_round + E × per_event``, with T the unbudgeted rounds of the run (AFL: steps;
  found as the key the budget changes) and E = T / (its smallest logging / evaluation / snapshot period), times the
  number of seeds of the group. Summed per experiment, per paper and in all: training jobs only, one seed after the
  other (no seeds-together batching), no evaluation, partition, prepare or table jobs (their stand-in build times are
  recorded beside, under ``data_s``).
* **Budget.** ``--budget-s`` seconds for everything (data build included). Groups are taken round-robin over the
  papers, each paper's experiments cheapest first (a guess from the model) until every experiment has one measured
  group, then the remaining groups cheapest first by their experiment's measured cost; a group whose estimate does
  not fit the time left is skipped, and a training running when the time is up is interrupted (SIGALRM) and
  recorded. Every group not measured is *extrapolated*: the median fixed / per-round / per-event costs of its
  experiment's measured groups, else of its paper's measured groups reading the same data files, else of its
  paper's measured groups, with its own rounds and seeds; ``basis`` says which. The JSON and Markdown are rewritten
  after every group, so a run killed at its limit keeps what it measured.

Usage::

    python benchmarks/paper_scale_projection.py --device cuda --budget-s 95 --out OUT_DIR
    python benchmarks/paper_scale_projection.py --device cpu --tiny --out OUT_DIR   # CI: one group per paper

``--tiny``: stand-ins at 1 % of the real counts (classes, domains and clients kept where the generators keep them;
at most 12,000 training rows of the digit and Adult sets generated here, their test splits whole), trainings A and
B only, and one measured group per paper (the first of its three cheapest guesses that trains); projections then
describe the tiny data, not the paper scale. Writes ``projection.json`` and ``projection.md`` into ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
#: Rounds of the three timed trainings (the budget's max_rounds); B and C train R2 rounds.
R1, R2 = 1, 2
#: Period keys (fedshift.budget.PERIOD_KEYS) that cost an event each time they fire; checkpoints are not written here.
EVENT_KEYS = ("log_every", "eval_every", "snapshot_every")
PERIOD_KEYS = (*EVENT_KEYS, "checkpoint_every")
#: Real example counts (train, test) of the datasets generated here (the loaders' documented shapes).
REAL_COUNTS = {"mnist": (60000, 10000), "fashion_mnist": (60000, 10000), "usps": (7291, 2007),
               "adult": (32561, 16281), "mnist_m": (59001, 9001), "mnist_m_full": (59001, 9001)}
PTB_LINES = {"train": 42068, "valid": 3370, "test": 3761}
#: --tiny: fraction of the stand-in counts of fedshift.data.standin and of the PTB lines; the digit and Adult sets
#: generated here keep at most 12,000 training rows and their whole test splits (the shift matrix draws 10,000 rows).
TINY_FRACTION, TINY_OWN_FRACTION, TINY_ROWS = 0.01, 0.05, 12000


# ------------------------------------------------------------------------------------------------- configuration

def paper_config(root: Path = ROOT, overlay: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The paper-scale configuration as the Snakefile merges it (config.yaml, datasets.yaml, papers/*.yaml)."""
    from fedshift.contract import deep_merge

    cfg: dict[str, Any] = {}
    for f in [root / "config" / "config.yaml", root / "config" / "datasets.yaml",
              *sorted((root / "config" / "papers").glob("*.yaml"))]:
        cfg = deep_merge(cfg, yaml.safe_load(f.read_text()) or {})
    return deep_merge(cfg, overlay)


def _flat(d: Mapping[str, Any], pre: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, Mapping):
            out |= _flat(v, f"{pre}{k}.")
        else:
            out[f"{pre}{k}"] = v
    return out


def _set(d: Mapping[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    """A copy of nested mapping ``d`` with key path ``dotted`` set to ``value``."""
    head, _, rest = dotted.partition(".")
    out = dict(d)
    out[head] = _set(d[head], rest, value) if rest else value
    return out


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def length_keys(full: Mapping[str, Any], capped: Mapping[str, Any]) -> tuple[str | None, int | None, list[str]]:
    """(rounds key, unbudgeted rounds, period keys) of a run: the keys :func:`fedshift.budget.apply_budget` changed.

    The rounds key is the integer the R2 budget set to R2; the period keys those it set to 1 (their names end in one
    of :data:`PERIOD_KEYS`). Without a change (a run of at most R2 rounds) the rounds key is found by name.
    """
    a, b = _flat(full), _flat(capped)
    rounds_key = periods = None
    periods = []
    for k, v in a.items():
        w = b.get(k)
        if not _is_int(v) or not _is_int(w) or v == w:
            continue
        if k.rsplit(".", 1)[-1] in PERIOD_KEYS:
            periods.append(k)
        elif w == R2 and v > R2:
            rounds_key = k
    if rounds_key is None:
        named = [k for k, v in a.items() if _is_int(v) and k.rsplit(".", 1)[-1] in ("rounds", "steps")]
        rounds_key = named[0] if named else None
    return rounds_key, (int(a[rounds_key]) if rounds_key else None), sorted(periods)


def events_of(hparams: Mapping[str, Any], rounds: int) -> int:
    """Logging / evaluation / snapshot events of a paper-scale run: rounds / its smallest such period (at least 1)."""
    periods = [v for k, v in _flat(hparams).items() if k.rsplit(".", 1)[-1] in EVENT_KEYS and _is_int(v) and v > 0]
    return max(1, rounds // min(periods)) if periods else 1


def guess_cost(hparams: Mapping[str, Any]) -> float:
    """A prior guess of a run's relative cost before anything is measured (orders experiments cheapest first)."""
    text = json.dumps(hparams, default=str).lower()
    factor = 1.0
    for word, f in (("resnet50", 200.0), ("iwildcam", 4.0), ("mobilenet", 30.0), ("office", 2.0), ("lstm", 10.0),
                    ("stackoverflow", 10.0), ("emnist", 5.0), ("cnn", 4.0), ("cifar", 2.0), ("lm", 3.0)):
        if word in text:
            factor *= f
    return factor


# ------------------------------------------------------------------------------------------------- stand-in data

def _write_idx(path: Path, arr: np.ndarray) -> None:
    header = bytes([0, 0, 8, arr.ndim]) + np.asarray(arr.shape, dtype=">u4").tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.GzipFile(path, "wb", compresslevel=1, mtime=0) as fh:
        fh.write(header + np.ascontiguousarray(arr, dtype=np.uint8).tobytes())


def _digits(rng: np.random.Generator, n: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    y = (np.arange(n) % 10).astype(np.uint8)
    rng.shuffle(y)
    x = rng.integers(0, 40, (n, size, size), dtype=np.uint8)
    for k in range(10):  # a bar whose row encodes the label
        x[y == k, 2 + k * (size - 4) // 10, 2:size - 2] = 255
    return x, y


def _idx_dataset(out: Path, counts: tuple[int, int], rng: np.random.Generator) -> None:
    for split, n in zip(("train", "t10k"), counts, strict=True):
        x, y = _digits(rng, n, 28)
        _write_idx(out / f"{split}-images-idx3-ubyte.gz", x)
        _write_idx(out / f"{split}-labels-idx1-ubyte.gz", y)


def _usps(out: Path, counts: tuple[int, int], rng: np.random.Generator) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, n in zip(("zip.train.gz", "zip.test.gz"), counts, strict=True):
        x, y = _digits(rng, n, 16)
        v = x.reshape(n, -1) / 127.5 - 1.0
        lines = [f"{int(lab)} " + " ".join(f"{p:.3f}" for p in row) for lab, row in zip(y, v, strict=True)]
        with gzip.open(out / name, "wt", compresslevel=1) as fh:
            fh.write("\n".join(lines) + "\n")


def _adult(out: Path, counts: tuple[int, int], rng: np.random.Generator) -> None:
    from fedshift.data.adult import ATTRIBUTES, COLUMNS

    out.mkdir(parents=True, exist_ok=True)
    for name, n, test in (("adult.data", counts[0], False), ("adult.test", counts[1], True)):
        rows = []
        for i in range(n):
            fields = []
            for col in COLUMNS[:-1]:
                values = ATTRIBUTES.get(col)
                fields.append(values[int(rng.integers(len(values)))] if values else str(int(rng.integers(1, 90))))
            if i % 20 == 0:  # the Doctorate domain (AFL's two clients), about 1.3 % in the real file
                fields[COLUMNS.index("education")] = "Doctorate"
            income = ">50K" if rng.random() < 0.24 else "<=50K"
            rows.append(", ".join([*fields, income + ("." if test else "")]))
        head = "|1x3 Cross validator\n" if test else ""
        (out / name).write_text(head + "\n".join(rows) + "\n", encoding="ascii")


def _ptb(out: Path, fraction: float, rng: np.random.Generator) -> None:
    out.mkdir(parents=True, exist_ok=True)
    vocab = [f"w{i}" for i in range(9999)] + ["<unk>"]
    zipf = 1.0 / np.arange(1, len(vocab) + 1)
    zipf /= zipf.sum()
    for split, n in PTB_LINES.items():
        n = max(20, round(n * fraction))
        words = rng.choice(len(vocab), size=(n, 21), p=zipf)
        (out / f"ptb.{split}.txt").write_text("".join(" " + " ".join(vocab[w] for w in row) + " \n" for row in words))


def _mnist_m_prepared(path: Path, counts: tuple[int, int], rng: np.random.Generator) -> None:
    data: dict[str, Any] = {"class_names": [str(d) for d in range(10)]}
    for split, n in zip(("train", "test"), counts, strict=True):
        x, y = _digits(rng, n, 32)
        data[f"x_{split}"] = torch.from_numpy(np.repeat(x[..., None], 3, axis=3))
        data[f"y_{split}"] = torch.from_numpy(y.astype(np.int64))
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(data, path)


class DataKit:
    """Builds the files runs read, under ``work`` in the workflow's layout, once each; records seconds per file."""

    def __init__(self, work: Path, config: Mapping[str, Any], fraction: float, own_fraction: float):
        self.work, self.config, self.fraction, self.own_fraction = work, config, fraction, own_fraction
        self.seconds: dict[str, float] = {}
        self.standin: set[str] = set()

    def _timed(self, key: str, make: Any) -> None:
        t0 = time.perf_counter()
        make()
        self.seconds[key] = round(time.perf_counter() - t0, 2)

    def _counts(self, name: str) -> tuple[int, int]:
        train, test = REAL_COUNTS[name]
        return (train, test) if self.own_fraction >= 1 else (min(train, TINY_ROWS), test)

    def raw(self, ds: str) -> Path:
        """``data/raw/<ds>/``, generated once: a fedshift.data.standin stand-in or a generator of this module."""
        from fedshift.data.standin import STANDINS, generate

        out = self.work / "data" / "raw" / ds
        names = [f["name"] for f in self.config["datasets"][ds]["files"]]
        if names and all((out / n).exists() for n in names):
            return out
        rng = np.random.default_rng([0, *ds.encode()])
        if ds in STANDINS:
            make = lambda: generate(ds, out, seed=0, fraction=self.fraction)  # noqa: E731
        elif ds in ("mnist", "fashion_mnist"):
            make = lambda: _idx_dataset(out, self._counts(ds), rng)  # noqa: E731
        elif ds == "usps":
            make = lambda: _usps(out, self._counts(ds), rng)  # noqa: E731
        elif ds == "adult":
            make = lambda: _adult(out, self._counts(ds), rng)  # noqa: E731
        elif ds == "ptb":
            make = lambda: _ptb(out, self.own_fraction, rng)  # noqa: E731
        else:
            raise ValueError(f"no stand-in generator for raw dataset {ds!r}")
        self.standin.add(ds)
        self._timed(f"raw/{ds}", make)
        return out

    def prepared(self, name: str) -> Path:
        """``data/prepared/<name>.pt``, decoded once from its stand-in raw files (MNIST-M: written directly)."""
        from fedshift.data.prepare import GENERATED, prepare_dataset, prepare_generated

        path = self.work / "data" / "prepared" / f"{name}.pt"
        if path.exists():
            return path
        if name in ("mnist_m", "mnist_m_full"):
            rng = np.random.default_rng([1, *name.encode()])
            self.standin.add(name)
            self._timed(f"prepared/{name}", lambda: _mnist_m_prepared(path, self._counts(name), rng))
        elif name in GENERATED:
            dirs = [self.raw(d) for d in GENERATED[name]]
            self._timed(f"prepared/{name}", lambda: prepare_generated(name, dirs, path))
        else:
            raw = self.raw(name)
            self._timed(f"prepared/{name}", lambda: prepare_dataset(name, raw, path))
        return path

    def ensure(self, paper: Any, inputs: Mapping[str, Any], parts: Mapping[str, Any]) -> None:
        """Make every file of an input mapping (values: paths or lists of paths) exist."""
        for value in inputs.values():
            for f in (value if isinstance(value, list | tuple) else [value]):
                self.file(paper, str(f), parts)

    def file(self, paper: Any, f: str, parts: Mapping[str, Any]) -> None:
        """Make one input file (a partition of ``paper``, a prepared dataset or a raw file) exist."""
        if (self.work / f).exists():
            return
        bits = f.split("/")
        if f.startswith(f"data/partitions/{paper.name}/"):
            spec = parts[f.split("/", 3)[3]]
            self.ensure(paper, spec.inputs, parts)
            (self.work / f).parent.mkdir(parents=True, exist_ok=True)
            self._timed(f"partition/{paper.name}/{spec.name}", lambda: paper.write_partition(spec, f))
        elif f.startswith("data/prepared/") and f.endswith(".pt"):
            self.prepared(bits[2][:-3])
        elif f.startswith("data/raw/"):
            self.raw(bits[2])
        else:
            raise ValueError(f"{paper.name}: cannot build input {f!r}")


# ------------------------------------------------------------------------------------------------- timing

class OutOfTime(Exception):
    """The projection's time budget ran out during a training."""


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raise :class:`OutOfTime` in the body after ``seconds`` (SIGALRM; a no-op where signals are unavailable)."""
    if not hasattr(signal, "setitimer") or seconds <= 0:
        if seconds <= 0:
            raise OutOfTime("no time left")
        yield
        return

    def fire(signum: int, frame: Any) -> None:
        raise OutOfTime("time budget ran out")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def timed_train(paper: Any, spec: Any, inputs: Mapping[str, Any], device: torch.device) -> float:
    """Seconds of one :meth:`Paper.train` on ``device`` (synchronised), no checkpoint."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    paper.train(spec, dict(inputs), device=device, checkpoint=None, fingerprint=f"projection:{spec.path}")
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - t0


# ------------------------------------------------------------------------------------------------- the projection

class Projection:
    """Groups, their measurements and their projections; :meth:`write` renders JSON and Markdown."""

    def __init__(self, args: argparse.Namespace):
        from fedshift.contract import RunSpec, deep_merge, load_papers

        self.args, self.t0 = args, time.perf_counter()
        self.device = torch.device(args.device)
        over: dict[str, Any] = {}
        for f in args.overlay or ():  # merged in the order given, as Snakemake's --configfile
            over = deep_merge(over, yaml.safe_load(Path(f).read_text()) or {})
        self.config = paper_config(Path(args.root), over)
        self.papers = {n: p for n, p in load_papers(self.config).items() if not args.papers or n in args.papers}
        self.capped = {r: load_papers(paper_config(Path(args.root), deep_merge(over, {"budget": {"max_rounds": r}})))
                       for r in (R1, R2)}
        self.RunSpec = RunSpec
        self.groups: dict[tuple[str, str, str], dict[str, Any]] = {}
        for name, paper in self.papers.items():
            capped = {r: {s.path: s for s in self.capped[r][name].runs()} for r in (R1, R2)}
            for s in paper.runs():
                g = self.groups.setdefault((s.paper, s.experiment, s.run), {
                    "paper": s.paper, "experiment": s.experiment, "run": s.run, "seeds": [], "spec": s,
                    "specs": {r: capped[r][s.path] for r in (R1, R2)}})
                g["seeds"].append(s.seed)
                if s.seed < g["spec"].seed:
                    g["spec"], g["specs"] = s, {r: capped[r][s.path] for r in (R1, R2)}
        for g in self.groups.values():
            g["seeds"].sort()
            key, rounds, periods = length_keys(g["spec"].hparams, g["specs"][R2].hparams)
            g.update(rounds_key=key, rounds=rounds, period_keys=periods,
                     events=events_of(g["spec"].hparams, rounds) if rounds else 1,
                     guess=guess_cost(g["spec"].hparams), status="pending")
        self.parts = {name: {p.name: p for p in paper.partitions()} for name, paper in self.papers.items()}
        self.setup_s = round(time.perf_counter() - self.t0, 1)
        self.work = Path(args.work).resolve()
        self.work.mkdir(parents=True, exist_ok=True)
        self.data = DataKit(self.work, self.config, *((TINY_FRACTION, TINY_OWN_FRACTION) if args.tiny else (1.0, 1.0)))

    # ---- order ---------------------------------------------------------------------------------------
    def first_pass(self) -> list[tuple[str, str, str]]:
        """One group per experiment: round-robin over the papers, each paper's experiments cheapest guess first."""
        per_paper: dict[str, list[tuple[str, str, str]]] = {}
        seen: set[tuple[str, str]] = set()
        for key, _g in sorted(self.groups.items(), key=lambda kv: (kv[1]["guess"], kv[0])):
            if (key[0], key[1]) not in seen:
                seen.add((key[0], key[1]))
                per_paper.setdefault(key[0], []).append(key)
        order, queues = [], [per_paper[p] for p in self.papers if p in per_paper]
        while any(queues):
            for q in queues:
                if q:
                    order.append(q.pop(0))
        return order

    def left(self) -> float:
        """Seconds left of the budget."""
        return self.args.budget_s - (time.perf_counter() - self.t0)

    # ---- one group -------------------------------------------------------------------------------------
    def measure(self, key: tuple[str, str, str]) -> None:
        """Build one group's inputs and time its trainings (:meth:`_plan`); record the costs or the failure."""
        g = self.groups[key]
        t_start = time.perf_counter()
        g["status"] = "running"
        try:
            with deadline(self.left()):
                runs = self._plan(g)
                with _chdir(self.work):
                    for _label, p, spec in runs:  # inputs first: their build is not training time
                        self.data.ensure(p, p.inputs(spec), self.parts[g["paper"]])
                    times = {label: timed_train(p, spec, p.inputs(spec), self.device) for label, p, spec in runs}
        except OutOfTime as err:
            g.update(status="out_of_time", error=str(err))
        except Exception as err:  # noqa: BLE001 — recorded, the other groups go on
            g.update(status="failed", error=f"{type(err).__name__}: {err}"[:600])
            traceback.print_exc()
        else:
            g["times_s"] = {k: round(v, 4) for k, v in times.items()}
            if "full" in times:  # at most R2 rounds at paper scale: the full run itself
                g.update(fixed_s=times["full"], per_round_s=0.0, per_event_s=0.0)
            else:
                per_round = max(times["B"] - times["A"], 0.0)
                per_event = max(times["C"] - times["B"], 0.0) if "C" in times else 0.0
                g.update(per_round_s=per_round, per_event_s=per_event,
                         fixed_s=max(times["A"] - per_round - per_event, 0.0))
            g["status"] = "measured"
        g["wall_s"] = round(time.perf_counter() - t_start, 2)
        print(f"{key}: {g['status']} in {g['wall_s']} s {g.get('times_s', g.get('error', ''))}", flush=True)

    def _plan(self, g: dict[str, Any]) -> list[tuple[str, Any, Any]]:
        """The trainings of a group: (label, paper plug-in, RunSpec)."""
        if g["rounds_key"] is None or g["rounds"] <= R2:
            return [("full", self.papers[g["paper"]], g["spec"])]
        capped = {r: self.capped[r][g["paper"]] for r in (R1, R2)}
        a, c = g["specs"][R1], g["specs"][R2]
        events = [k for k in g["period_keys"] if k.rsplit(".", 1)[-1] in EVENT_KEYS]
        hp = dict(c.hparams)
        for k in g["period_keys"]:  # checkpoints too (a paper may ask it to be a multiple of the logging period)
            hp = _set(hp, k, R2)
        b = self.RunSpec(c.paper, c.experiment, c.run, c.seed, c.algorithms, hp, c.modules)
        plan = [("A", capped[R1], a), ("B", capped[R2], b)]
        return plan + ([("C", capped[R2], c)] if events and not self.args.tiny else [])  # --tiny: no event cost

    # ---- projection --------------------------------------------------------------------------------------
    def project(self) -> dict[str, Any]:
        """Every group's projection (measured, else extrapolated; ``basis`` says from what), summed."""
        measured = [g for g in self.groups.values() if g["status"] == "measured"]

        def pool(g: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
            same = [m for m in measured if (m["paper"], m["experiment"]) == (g["paper"], g["experiment"])]
            if same:
                return "experiment", same
            files = _data_files(self.papers[g["paper"]], g["spec"])
            alike = [m for m in measured if m["paper"] == g["paper"] and files
                     and _data_files(self.papers[m["paper"]], m["spec"]) == files]
            if alike:
                return "paper, same data files", alike
            mine = [m for m in measured if m["paper"] == g["paper"]]
            return ("paper", mine) if mine else ("none", [])

        rows = []
        for key in sorted(self.groups):
            g = self.groups[key]
            row = {k: g.get(k) for k in ("paper", "experiment", "run", "rounds", "rounds_key", "events", "status",
                                         "error", "times_s", "wall_s")}
            row["seeds"] = len(g["seeds"])
            rounds = g["rounds"] or R2
            if g["status"] == "measured":
                row["basis"] = "measured"
                fixed, per_round, per_event = g["fixed_s"], g["per_round_s"], g["per_event_s"]
            else:
                basis, src = pool(g)
                row["basis"] = f"extrapolated from {basis} ({len(src)} measured group(s))" if src else "none"
                if src:
                    fixed = statistics.median(m["fixed_s"] for m in src)
                    per_round = statistics.median(m["per_round_s"] for m in src)
                    per_event = statistics.median(m["per_event_s"] for m in src)
            if row["basis"] == "none":
                row["projected_s"] = None
            else:
                one = fixed + rounds * per_round + (g["events"] if g["rounds"] and g["rounds"] > R2 else 0) * per_event
                row.update(fixed_s=round(fixed, 4), per_round_s=round(per_round, 6),
                           per_event_s=round(per_event, 6), projected_s=round(one * len(g["seeds"]), 2))
            rows.append(row)
        return self._summarise(rows)

    def _summarise(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        def total(rs: list[dict[str, Any]]) -> dict[str, Any]:
            known = [r["projected_s"] for r in rs if r["projected_s"] is not None]
            return {"groups": len(rs), "runs": sum(r["seeds"] for r in rs),
                    "measured": sum(r["basis"] == "measured" for r in rs),
                    "extrapolated": sum(r["basis"].startswith("extrapolated") for r in rs),
                    "unprojected": sum(r["projected_s"] is None for r in rs),
                    "projected_s": round(sum(known), 1), "projected_h": round(sum(known) / 3600, 3)}

        papers = {}
        for p in self.papers:
            mine = [r for r in rows if r["paper"] == p]
            exps = sorted({r["experiment"] for r in mine})
            papers[p] = total(mine) | {"experiments": {e: total([r for r in mine if r["experiment"] == e])
                                                       for e in exps}}
        return {"papers": papers, "all": total(rows), "groups": rows}

    def write(self, final: bool = False) -> dict[str, Any]:
        """Write ``projection.json`` and ``projection.md`` (``final``: the run ended by itself); return the record."""
        proj = self.project()
        record = {
            "what": "paper-scale training wall time projected on this device from timed 1- and 2-round trainings "
                    "of each (paper, experiment, run id)'s representative run on stand-in data of the real sizes",
            "final": final, "tiny": self.args.tiny, "device": str(self.device),
            "device_name": _device_name(self.device),
            "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(), "label": self.args.label,
            "budget_s": self.args.budget_s, "elapsed_s": round(time.perf_counter() - self.t0, 1),
            "setup_s": self.setup_s, "data_s": self.data.seconds, "standin_datasets": sorted(self.data.standin),
            "method": {"A": f"{R1} round, 1 event", "B": f"{R2} rounds, event periods {R2} (1 event)",
                       "C": f"{R2} rounds, event periods 1 ({R2} events)", "per_round": "B - A",
                       "per_event": "C - B", "fixed": "A - per_round - per_event",
                       "projected": "(fixed + rounds x per_round + events x per_event) x seeds"},
            **proj}
        out = Path(self.args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "projection.json").write_text(json.dumps(record, indent=1, default=str))
        (out / "projection.md").write_text("\n".join(markdown(record)) + "\n")
        return record

    def run(self) -> dict[str, Any]:
        """Measure groups until the budget is spent (``--tiny``: one per paper); return the final record."""
        self.write()
        if self.args.tiny:  # one measured group per paper, cheapest first, up to 3 tries each
            for p in self.papers:
                for key in sorted((k for k in self.groups if k[0] == p), key=lambda k: self.groups[k]["guess"])[:3]:
                    if self.left() <= 0:
                        break
                    self.measure(key)
                    self.write()
                    if self.groups[key]["status"] == "measured":
                        break
            return self.write(final=True)
        for key in self.first_pass():
            if self.left() < self.args.min_left_s:
                break
            self.measure(key)
            self.write()
        while self.left() >= self.args.min_left_s:
            cost = {}
            for key, g in self.groups.items():
                done = [m["wall_s"] for m in self.groups.values() if m["status"] == "measured"
                        and (m["paper"], m["experiment"]) == key[:2]]
                if g["status"] == "pending" and done:
                    cost[key] = statistics.median(done)
            fits = sorted((c, k) for k, c in cost.items() if c <= self.left())
            if not fits:
                break
            self.measure(fits[0][1])
            self.write()
        return self.write(final=True)


def _data_files(paper: Any, spec: Any) -> frozenset[str]:
    """The prepared / raw files a run reads (its partitions left out): the key for a like-for-like extrapolation."""
    files: set[str] = set()
    for v in paper.inputs(spec).values():
        files |= {str(x) for x in (v if isinstance(v, list | tuple) else [v])}
    return frozenset(f for f in files if not f.startswith("data/partitions/"))


def _device_name(device: torch.device) -> str:
    if device.type == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name(device)
    return platform.processor() or platform.machine()


@contextlib.contextmanager
def _chdir(path: Path) -> Iterator[None]:
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def markdown(rec: dict[str, Any]) -> list[str]:
    """The per-paper table (and, below, per experiment) of a projection record."""
    dev = f"{rec['device']} ({rec['device_name']}), torch {rec['torch']}, CUDA {rec['cuda']}"
    md = ["## Paper-scale projection" + (" (TINY stand-ins: not the paper scale)" if rec["tiny"] else ""), "",
          f"Device: {dev}{'; ' + rec['label'] if rec.get('label') else ''}. Training jobs only, one seed after "
          f"the other; measured in {rec['elapsed_s']} s of a {rec['budget_s']} s budget"
          f"{'' if rec['final'] else ' (interrupted: partial)'}. Stand-in data: "
          f"{', '.join(rec['standin_datasets']) or 'none'}.", "",
          "| paper | measured groups / total | extrapolated | not projected | runs | projected hours on this device |",
          "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for p, s in rec["papers"].items():
        md.append(f"| {p} | {s['measured']} / {s['groups']} | {s['extrapolated']} | {s['unprojected']} | "
                  f"{s['runs']} | {s['projected_h']:.2f} |")
    a = rec["all"]
    md.append(f"| **all** | **{a['measured']} / {a['groups']}** | **{a['extrapolated']}** | **{a['unprojected']}** | "
              f"**{a['runs']}** | **{a['projected_h']:.2f}** |")
    md += ["", "Per experiment (measured / groups, projected hours):", ""]
    for p, s in rec["papers"].items():
        md.append(f"- **{p}**: " + "; ".join(f"{e} {x['measured']}/{x['groups']} {x['projected_h']:.2f} h"
                                              for e, x in s["experiments"].items()))
    bad = [g for g in rec["groups"] if g["status"] in ("failed", "out_of_time")]
    if bad:
        md += ["", "Not measured (failed or out of time): " + "; ".join(
            f"{g['paper']}/{g['experiment']}/{g['run']}: {(g.get('error') or '')[:160]}" for g in bad)]
    return md


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--budget-s", type=float, default=150.0, help="seconds for everything (data build included)")
    ap.add_argument("--min-left-s", type=float, default=3.0, help="start no group with less time left")
    ap.add_argument("--out", required=True, help="folder for projection.json and projection.md")
    ap.add_argument("--work", help="scratch folder for the stand-in data, kept afterwards "
                                    "(default: a temporary folder, removed at the end)")
    ap.add_argument("--root", default=str(ROOT), help="repository root (its config/)")
    ap.add_argument("--tiny", action="store_true", help="CI: 1 %% stand-ins, one measured group per paper")
    ap.add_argument("--papers", type=lambda v: v.split(","), help="only these papers (comma-separated)")
    ap.add_argument("--overlay", action="append",
                    help="a config overlay merged over the paper scale; repeat it to stack several, merged in order "
                         "(CI's --tiny: config/quick.yaml, then benchmarks/device_check_tiny.yaml, so that every step "
                         "runs in seconds; the projection is then of that scale)")
    ap.add_argument("--label", default="", help="free text recorded with the device (e.g. 'CPU, 2 cores, loaded')")
    args = ap.parse_args(argv)
    os.environ.setdefault("TQDM_DISABLE", "1")
    if args.work:  # the caller's folder: kept, and reused by a later run
        rec = Projection(args).run()
    else:  # a scratch folder of ~150 MB of stand-ins, removed even when the run fails
        with tempfile.TemporaryDirectory(prefix="fedshift-projection-") as work:
            args.work = work
            rec = Projection(args).run()
    print("\n".join(markdown(rec)))
    return rec


if __name__ == "__main__":
    rec = main()
    sys.exit(0 if rec["all"]["measured"] else 1)
