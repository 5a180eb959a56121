"""Cost of the portable-CPU switch (config ``portable_cpu``): seconds per round, off vs on.

Usage: python benchmarks/portable_cpu.py [--rounds-fedpals 3] [--rounds-fedmm 10] [--repeats 1] [--threads 1]

Times two quick-sized CNN training jobs, each in a fresh process (the switch's variables must be set before torch is
imported), once with the environment as it is and once with the switch's (``fedshift.provenance.PORTABLE_CPU_ENV``):

- FedPALS, Fashion-MNIST C = 3 at quick scale (``config/quick.yaml``: 100 examples per label, 10 clients, the
  2-layer CNN, 5 local epochs of batch 32), FedAvg;
- FedMM, MNIST → MNIST-M at quick scale (20,000 source digits, the 2-conv-layer extractor with the DANN head,
  batch 32, M = 20 local steps, p = 1).

The data are random images of the real shapes (the time of a step does not depend on the pixel values). The time
per round is ``run.json``'s ``seconds_per_round`` (training only; data loading and start-up are not counted).
Prints a Markdown table with the median over ``--repeats`` and the ratio on / off.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from fedshift.errors import load_yaml
from fedshift.io import torch_save_atomic, write_json
from fedshift.papers import fedmm as P
from fedshift.papers import fedpals as FP
from fedshift.provenance import cpu_info, portable_cpu_environment

REPO = Path(__file__).resolve().parents[1]

_JOB = """
import json, sys
from pathlib import Path
root, out = Path(sys.argv[1]), Path(sys.argv[2])
job = json.loads((root / "job.json").read_text())
paths = dict(model_path=out / "model.pt", history_path=out / "history.csv", run_json_path=out / "run.json",
             checkpoint_path=None, device="cpu", threads=int(sys.argv[3]))
if job["paper"] == "fedpals":  # the plug-in through the one job skeleton
    from fedshift.contract import RunSpec, load_paper
    from fedshift.jobs import train_job
    r = job["resolved"]
    paper = load_paper("fedpals", "fedshift.papers.fedpals.paper:FedpalsPaper", {})
    files = {k: str(out / f) for k, f in (("model", "model.pt"), ("history", "history.csv"),
                                         ("artifacts", "artifacts.pt"), ("run", "run.json"))}
    train_job(paper, [RunSpec("fedpals", r["experiment"], r["algorithm"], 0, ("fedavg",), r)],
              {"prepared": str(root / "prepared.pt"), "partition": str(root / "partition.json")}, [files],
              checkpoint=None, device="cpu", threads=int(sys.argv[3]))
else:
    from fedshift.papers.fedmm.paper import train_job
    train_job(job["resolved"], 0, source_path=root / "source.pt", target_path=root / "target.pt",
              partition_path=root / "partition.json", **paths)
"""


def _images(n: int, shape: tuple[int, ...], seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randint(0, 256, (n, *shape), generator=g, dtype=torch.uint8),
            "y": torch.randint(0, 10, (n,), generator=g)}


def setup_fedpals(root: Path, rounds: int) -> None:
    """FedPALS Fashion-MNIST C = 3 at quick scale, FedAvg, on random 28 x 28 images."""
    tr, te = _images(20000, (28, 28), 0), _images(2000, (28, 28), 1)
    torch_save_atomic({"x_train": tr["x"], "y_train": tr["y"], "x_test": te["x"], "y_test": te["y"]},
                      root / "prepared.pt")
    section = load_yaml(REPO / "config/papers/fedpals.yaml")["fedpals"]
    exp = FP.experiments_of(section)["fedpals_fmnist_c3"]  # defaults merged
    del section["defaults"]
    quick = load_yaml(REPO / "config/quick.yaml")["fedpals"]["experiments"]["fedpals_fmnist_c3"]
    exp.update(samples_per_label=quick["samples_per_label"], seeds=1)
    exp["train"].update(quick["train"], rounds=rounds, eval_every=rounds, checkpoint_every=0)
    section["experiments"] = {"fedpals_fmnist_c3": exp}
    resolved = FP.resolve_run(section, "fedpals_fmnist_c3", "fedavg")
    write_json(root / "partition.json", FP.make_partition(exp, tr["y"].numpy(), te["y"].numpy(), 0))
    (root / "job.json").write_text(json.dumps({"paper": "fedpals", "resolved": resolved}, default=str))


def setup_fedmm(root: Path, rounds: int) -> None:
    """FedMM MNIST → MNIST-M at quick scale, p = 1, on random digits (28 x 28) and targets (32 x 32 x 3)."""
    src, tgt = _images(20000, (28, 28), 2), _images(9001, (32, 32, 3), 3)
    torch_save_atomic({"x_train": src["x"], "y_train": src["y"], "x_test": src["x"][:100],
                       "y_test": src["y"][:100]}, root / "source.pt")
    torch_save_atomic({"x_test": tgt["x"], "y_test": tgt["y"]}, root / "target.pt")
    section = load_yaml(REPO / "config/papers/fedmm.yaml")["fedmm"]
    quick = load_yaml(REPO / "config/quick.yaml")["fedmm"]["tasks"]["digits"]
    task = section["tasks"]["digits"]
    task.update(target=quick["target"], source_size=quick["source_size"])
    task["network"].update(quick["network"])
    task["train"].update(quick["train"], rounds=rounds, eval_every=rounds, checkpoint_every=rounds)
    task["heads"]["dann"]["rounds"] = rounds
    resolved = P.resolve_run(section, "digits", "fedmm-dann-p1-M20-e1")
    P.write_partition(resolved["data"], "p1", root / "source.pt", root / "target.pt", root / "partition.json")
    (root / "job.json").write_text(json.dumps({"paper": "fedmm", "resolved": resolved}, default=str))


def seconds_per_round(root: Path, out: Path, env: dict[str, str], threads: int) -> float:
    """Run the job under ``root`` in a fresh process with ``env`` added; its training seconds per round."""
    full = {**os.environ, **env, "OMP_NUM_THREADS": str(threads), "TQDM_DISABLE": "1"}
    subprocess.run([sys.executable, "-c", _JOB, str(root), str(out), str(threads)], env=full, check=True,
                   stdout=subprocess.DEVNULL)
    return json.loads((out / "run.json").read_text())["seconds_per_round"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds-fedpals", type=int, default=3)
    parser.add_argument("--rounds-fedmm", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per job (threads_per_job)")
    args = parser.parse_args()
    cpu = cpu_info()
    print(f"CPU: {cpu['model']}, torch kernels {cpu['torch_capability']}, {os.cpu_count()} cores, "
          f"{args.threads} thread(s) per job, load average {os.getloadavg()[0]:.1f}\n")
    print("| job | rounds | s/round, switch off | s/round, switch on | on / off |\n|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, setup, rounds in (("FedPALS Fashion-MNIST C = 3, FedAvg (quick)", setup_fedpals,
                                     args.rounds_fedpals),
                                    ("FedMM MNIST → MNIST-M, p = 1 (quick)", setup_fedmm, args.rounds_fedmm)):
            root = Path(tmp) / setup.__name__
            root.mkdir()
            setup(root, rounds)
            times: dict[str, list[float]] = {"off": [], "on": []}
            for r in range(args.repeats):
                for mode, env in (("off", {}), ("on", portable_cpu_environment())):
                    times[mode].append(seconds_per_round(root, root / f"{mode}{r}", env, args.threads))
            off, on = statistics.median(times["off"]), statistics.median(times["on"])
            print(f"| {name} | {rounds} | {off:.3f} | {on:.3f} | {on / off:.2f} |", flush=True)


if __name__ == "__main__":
    main()
