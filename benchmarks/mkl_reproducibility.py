r"""MKL's Conditional Numerical Reproducibility (``MKL_CBWR``), which importing fedshift sets to ``AUTO``.

Three measurements, each mode in fresh processes (MKL reads the variable at its first call), ``MKL_CBWR=""``
standing for "not set" (MKL ignores an empty value; importing fedshift keeps a value already there):

1. ``repeats``: a batch-1 ResNet-50 (fedshift's FedPALS model, 7 classes, 32 px) forward + backward repeated
   ``--repeats`` times on ``--threads`` threads; how many repeats give other gradient bits than the first.
2. ``ms_per_step``: ResNet-50 (batch 32, 32 px) and the McMahan CNN (batch 64, 28 px) training steps.
3. ``paper_jobs_same_bytes``: the FedPALS and FedMM training jobs of ``tests/paper_jobs.py`` (2 rounds) at 1 and 2
   threads, model and history bytes compared between the two modes.

Usage (from the repository root)::

    python benchmarks/mkl_reproducibility.py --out results/benchmarks/mkl_reproducibility.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODES = {"unset": "", "AUTO": "AUTO"}

_REPEATS = """
import fedshift, torch
from fedshift.models import build_model
torch.set_num_threads({threads})
torch.manual_seed(0)
m = build_model("resnet50", num_classes=7).train()
x, y = torch.randn(1, 3, 32, 32), torch.tensor([3])
def grads():
    return torch.autograd.grad(torch.nn.functional.cross_entropy(m(x), y), list(m.parameters()))
ref = grads()
print(sum(not all(torch.equal(a, b) for a, b in zip(grads(), ref)) for _ in range({repeats})))
"""

_STEPS = """
import json, time, fedshift, torch
from fedshift.models import McMahanCNN, build_model
torch.set_num_threads({threads})
torch.manual_seed(0)
out = {{}}
for name, m, shape, n in [("resnet50", build_model("resnet50", num_classes=7), (32, 3, 32, 32), 10),
                          ("cnn", McMahanCNN(10), (64, 1, 28, 28), 50)]:
    m.train()
    x, y = torch.randn(*shape), torch.randint(0, 7, (shape[0],))
    step = lambda: torch.autograd.grad(torch.nn.functional.cross_entropy(m(x), y), list(m.parameters()))
    step(); step()
    t = time.perf_counter()
    for _ in range(n):
        step()
    out[name] = round((time.perf_counter() - t) / n * 1000, 1)
print(json.dumps(out))
"""

_JOBS = """
import paper_jobs
for p in ("fedpals", "fedmm"):
    paper_jobs.run({root!r} + "/" + p, {out!r})
"""


def _python(code: str, mode: str, threads: int) -> str:
    env = {k: v for k, v in os.environ.items() if k != "MKL_CBWR"}
    env.update(MKL_CBWR=MODES[mode], OMP_NUM_THREADS=str(threads),
               PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")]))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return proc.stdout.strip().splitlines()[-1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, help="write the record here too (JSON)")
    ap.add_argument("--threads", type=int, default=2, help="threads of the repeats and step timings")
    ap.add_argument("--repeats", type=int, default=8)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT / "tests"))
    import paper_jobs

    record: dict = {"threads": args.threads, "repeats": args.repeats, "differing_repeats": {}, "ms_per_step": {},
                    "paper_jobs_same_bytes": {}}
    for mode in MODES:
        record["differing_repeats"][mode] = int(_python(_REPEATS.format(threads=args.threads,
                                                                         repeats=args.repeats), mode, args.threads))
        record["ms_per_step"][mode] = json.loads(_python(_STEPS.format(threads=args.threads), mode, args.threads))
    with tempfile.TemporaryDirectory() as tmp:
        for p in ("fedpals", "fedmm"):
            paper_jobs.setup(p, Path(tmp) / p, rounds=2)
        for threads in (1, 2):
            files = {}
            for mode in MODES:
                out = f"{mode}_{threads}"
                _python(_JOBS.format(root=tmp, out=out) + "\nprint('ok')", mode, threads)
                files[mode] = {f"{p}/{f}": (Path(tmp) / p / out / f).read_bytes()
                               for p in ("fedpals", "fedmm") for f in ("model.pt", "history.csv")}
            record["paper_jobs_same_bytes"][str(threads)] = files["unset"] == files["AUTO"]
    text = json.dumps(record, indent=1)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
