"""One small training job per paper, on fixture data, for crash, NaN and reproducibility tests.

``setup(paper, root)`` writes a job's inputs (random data of the real shapes, its partition, and ``job.json``
with the resolved configuration) under ``root``; ``run(root, out)`` trains it, writing ``model.pt``,
``history.csv`` and ``run.json`` (and a checkpoint) under ``root / out``. ``run`` is what a killed subprocess
executes (``python -c "import paper_jobs; paper_jobs.run(...)"`` with ``tests/`` on the path), so that the job's
environment (instruction-set caps, the portable-CPU switch) is set before torch is imported.

Each job checkpoints after every logged round; ``rounds`` and the number of logged rounds are small on purpose.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PAPERS = ("afl", "agnostic_fedavg", "wafl", "fedmm", "fedpals")


def _yaml(name: str) -> dict[str, Any]:
    from fedshift.errors import load_yaml

    return load_yaml(REPO / "config" / "papers" / f"{name}.yaml")


def _digits(n: int, seed: int, channels: int = 0, side: int = 28) -> dict[str, Any]:
    import torch

    g = torch.Generator().manual_seed(seed)
    shape = (n, side, side, channels) if channels else (n, side, side)
    return {"x": torch.randint(0, 256, shape, generator=g, dtype=torch.uint8),
            "y": torch.randint(0, 10, (n,), generator=g)}


def setup(paper: str, root: Path, *, rounds: int | None = None, lr: float | None = None) -> None:
    """Write the inputs of ``paper``'s small job under ``root``; ``lr`` overrides the step size (NaN tests)."""
    import torch

    from fedshift.io import torch_save_atomic, write_json

    root.mkdir(parents=True, exist_ok=True)
    job: dict[str, Any] = {"paper": paper}
    if paper == "afl":  # the batched multi-seed job (two seeds in one, Paper.train_many), Adult-like
        from fedshift.contract import experiments_of
        from fedshift.papers.afl.config import resolve_run
        from fedshift.papers.afl.data import make_partition

        g = torch.Generator().manual_seed(0)
        prepared = {"domain_names": ["doctorate", "other"], "num_classes": 2}
        for split, n in (("train", 60), ("test", 30)):
            prepared[f"x_{split}"] = torch.randn(n, 6, generator=g)
            prepared[f"y_{split}"] = torch.randint(0, 2, (n,), generator=g)
            prepared[f"domain_{split}"] = (torch.arange(n) % 3 == 0).long()
        torch_save_atomic(prepared, root / "prepared.pt")
        section = _yaml("afl")["afl"]
        train = section["experiments"]["afl_adult"]["train"]
        train.pop("select")  # one γ_w, T and iterate: the plain batched job (select's loop is test_afl_validation's)
        train.update(rounds=rounds or 40, log_every=10, checkpoint_every=10, **({"client_lr": lr} if lr else {}))
        job["resolved"] = resolve_run(section, "afl_adult", "afl")
        write_json(root / "partition.json", make_partition(experiments_of(section)["afl_adult"], prepared, 0))
    elif paper == "agnostic_fedavg":  # Fig. 1's toy regression (generated data), AgnosticFedAvg
        from fedshift.papers.agnostic_fedavg import config as afa_config
        from fedshift.papers.agnostic_fedavg import data as afa_data

        section = _yaml("agnostic_fedavg")["agnostic_fedavg"]
        exp = section["experiments"]["toy"]
        exp["data"].update(points_per_domain=20, clients=6)
        afa_data.build_data(exp, {}, root / "data.pt", root / "data.json")
        r = afa_config.resolve_run(section, "toy", "agnostic_fedavg")
        r["train"].update(rounds=rounds or 8, log_every=2, checkpoint_every=2, clients_per_round=3,
                          **({"client_lr": lr} if lr else {}))
        job["resolved"] = r
    elif paper == "wafl":
        job["resolved"] = _wafl(root, rounds, lr)
    elif paper == "fedmm":  # MNIST → MNIST-M (28 px digits, 32 px target), FedMM with DANN, p = 1
        from fedshift.papers import fedmm as P

        src, tgt = _digits(80, 1), _digits(60, 2, channels=3, side=32)
        torch_save_atomic({"x_train": src["x"], "y_train": src["y"], "x_test": src["x"][:8], "y_test": src["y"][:8]},
                          root / "source.pt")
        torch_save_atomic({"x_train": tgt["x"][:40], "y_train": tgt["y"][:40], "x_test": tgt["x"][40:],
                           "y_test": tgt["y"][40:]}, root / "target.pt")  # unlabelled rows from the train split
        section = _yaml("fedmm")["fedmm"]
        task = section["tasks"]["digits"]
        task.update(target="mnist_m", source_size=None, target_size=None)
        task["network"].update(conv_layers=2)
        task["train"].update(rounds=rounds or 6, batch_size=8, local_steps=2, eval_every=2, checkpoint_every=2,
                             **({"client_lr": lr, "client_lr_adversary": lr} if lr else {}))
        task["heads"]["dann"]["rounds"] = rounds or 6
        r = P.resolve_run(section, "digits", "fedmm-dann-p1-M2-e1")
        P.write_partition(r["data"], "p1", root / "source.pt", root / "target.pt", root / "partition.json")
        job["resolved"] = r
    elif paper == "fedpals":  # Fashion-MNIST-like, sparsity C = 3 over 4 clients, the 2-layer CNN, FedAvg
        from fedshift.papers import fedpals as FP

        d = _digits(240, 3)
        t = _digits(60, 4)
        torch_save_atomic({"x_train": d["x"], "y_train": d["y"], "x_test": t["x"], "y_test": t["y"]},
                          root / "prepared.pt")
        section = _yaml("fedpals")["fedpals"]
        exp = copy.deepcopy(FP.experiments_of(section)["fedpals_fmnist_c3"])  # defaults merged
        exp.update(num_clients=4, seeds=1)
        del section["defaults"]
        exp["train"].update(rounds=rounds or 6, batch_size=16, eval_every=2, checkpoint_every=2,
                            **({"client_lr": lr} if lr else {}))
        section["experiments"] = {"fedpals_fmnist_c3": exp}
        r = FP.resolve_run(section, "fedpals_fmnist_c3", "fedavg")
        write_json(root / "partition.json", FP.make_partition(exp, d["y"].numpy(), t["y"].numpy(), 0))
        job["resolved"] = r
    else:
        raise ValueError(f"unknown paper {paper!r}; one of {PAPERS}")
    (root / "job.json").write_text(json.dumps(job, default=str))


def _wafl(root: Path, rounds: int | None, lr: float | None) -> dict[str, Any]:
    """WAFL on an MNIST-like fixture (the MLR of Fig. 4's setting), its partition and the run's hparams."""
    from fedshift.io import torch_save_atomic
    from fedshift.papers import wafl as W

    d, t = _digits(120, 5), _digits(40, 6)
    torch_save_atomic({"x_train": d["x"], "y_train": d["y"], "x_test": t["x"], "y_test": t["y"]},
                      root / "prepared.pt")
    section = W.merged_section(_yaml("wafl")["wafl"])
    exp = section["experiments"]["mnist"]
    exp["partition"].update(clients=6, min_per_label=2)
    exp["train"].update(rounds=rounds or 8, clients_per_round=3, log_every=2, checkpoint_every=2, snapshot_every=4,
                        **({"client_lr": lr} if lr else {}))
    r = W.resolve(section, "mnist", "wafl", 0.5)
    W.write_partition(r, root / "prepared.pt", root / "partition.json")
    return r


def run(root: str | Path, out: str = "out", device: str = "cpu") -> dict[str, Any]:
    """Train the job set up under ``root`` on ``device``; outputs under ``root / out``; returns its run.json content."""
    root = Path(root)
    job = json.loads((root / "job.json").read_text())
    paper, r, o = job["paper"], job["resolved"], root / out
    paths = {"model_path": o / "model.pt", "history_path": o / "history.csv", "run_json_path": o / "run.json",
             "checkpoint_path": o / "ckpt.pt"}
    if paper == "afl":  # through the job skeleton, as the workflow's seeds-together rule paper_train_afl_<experiment>
        from fedshift.contract import RunSpec, load_paper
        from fedshift.jobs import train_job

        plugin = load_paper("afl", "fedshift.papers.afl.paper:AflPaper", {"afl": {}})
        specs = [RunSpec("afl", "afl_adult", "afl", s, ("afl",), r) for s in (0, 1)]
        outputs = [{k: str(o / f"seed~{s}" / f) for k, f in (("model", "model.pt"), ("history", "history.csv"),
                                                              ("artifacts", "artifacts.pt"), ("run", "run.json"))}
                   for s in (0, 1)]
        inputs = {"prepared": str(root / "prepared.pt"), "partition": str(root / "partition.json")}
        return train_job(plugin, specs, inputs, outputs, checkpoint=str(o / "ckpt.pt"), device=device)[0]
    if paper == "agnostic_fedavg":  # the paper plug-in through the one job skeleton (fedshift.jobs)
        from fedshift.contract import RunSpec, load_paper
        from fedshift.jobs import train_job

        plugin = load_paper(paper, "fedshift.papers.agnostic_fedavg.paper:AgnosticFedAvgPaper", {})
        spec = RunSpec(paper, r["experiment"], r["algorithm"], 0, ("agnostic_fedavg",), r)
        files = {"model": o / "model.pt", "history": o / "history.csv", "artifacts": o / "artifacts.pt",
                 "run": o / "run.json"}
        return train_job(plugin, [spec], {"data": str(root / "data.pt")}, [files], checkpoint=str(o / "ckpt.pt"),
                         device=device)[0]
    if paper == "wafl":  # through the paper contract's job skeleton
        from fedshift.contract import RunSpec, load_paper
        from fedshift.jobs import train_job

        plugin = load_paper("wafl", "fedshift.papers.wafl.paper:WaflPaper", {"wafl": {}})
        spec = RunSpec("wafl", "mnist", r["algorithm"], 0, ("wafl",), r)
        files = {"model": o / "model.pt", "history": o / "history.csv", "artifacts": o / "artifacts.pt",
                 "run": o / "run.json"}
        return train_job(plugin, [spec], {"prepared": str(root / "prepared.pt"),
                                          "partition": str(root / "partition.json")}, [files],
                         checkpoint=str(o / "ckpt.pt"), device=device)[0]
    if paper == "fedmm":
        from fedshift.papers.fedmm.paper import train_job as fedmm_train_job

        return fedmm_train_job(r, 0, source_path=root / "source.pt", target_path=root / "target.pt",
                               partition_path=root / "partition.json", device=device, **paths)
    from fedshift.contract import RunSpec, load_paper
    from fedshift.jobs import train_job

    # FedPALS: the paper plug-in through the one job skeleton (the RunSpec carries the resolved hparams)
    paper = load_paper("fedpals", "fedshift.papers.fedpals.paper:FedpalsPaper", {})
    spec = RunSpec("fedpals", r["experiment"], r["algorithm"], 0, ("fedavg",), r)
    files = {"model": str(o / "model.pt"), "history": str(o / "history.csv"), "artifacts": str(o / "artifacts.pt"),
             "run": str(o / "run.json")}
    return train_job(paper, [spec], {"prepared": str(root / "prepared.pt"), "partition": str(root / "partition.json")},
                     [files], checkpoint=str(o / "ckpt.pt"), device=device)[0]
