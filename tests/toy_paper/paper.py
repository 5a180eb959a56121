"""A toy sixth paper, written only against the paper contract (fedshift.contract): the proof that a paper is a plug-in.

Two Gaussian domains of a 2-class problem, spread over clients; FedAvg and FedProx (registered algorithms, chosen
by name in ``toy.yaml``); one table of mean test accuracy per algorithm. Nothing outside this folder names it:
``--configfile tests/toy_paper/toy.yaml`` switches it on (``papers: {toy: tests/toy_paper/paper.py:ToyPaper}``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from fedshift.algorithms import registry
from fedshift.errors import ConfigError
from fedshift.contract import Fit, OutputSpec, Paper, PartitionSpec, RunSpec
from fedshift.io import atomic_write, read_json, write_json


def run_training(*args: Any, **kwargs: Any) -> Any:
    """:func:`fedshift.core.training.run_training`, imported on the first call: the plan (``snakemake -n``) imports
    this module and no torch. A module attribute, so that a test can replace the paper's training loop."""
    from fedshift.core.training import run_training as loop

    return loop(*args, **kwargs)


class ToyPaper(Paper):
    title = "Toy paper (the contract's test plug-in)"
    schema = "toy.schema.yaml"
    caption = "toy.rst"

    def validate(self) -> None:
        for name in self.section.get("outputs", []):
            for exp in self.section["tables"][name]["experiments"]:
                if exp not in self.section["experiments"]:
                    raise ConfigError(f"config error at toy.tables.{name}.experiments: unknown experiment {exp!r}")

    def partitions(self) -> list[PartitionSpec]:
        return [PartitionSpec(f"{e}.json", {}, {k: v for k, v in x.items() if k in ("clients", "dim", "points")})
                for e, x in self.section["experiments"].items()]

    def write_partition(self, spec: PartitionSpec, output: str) -> None:
        p = spec.params
        rng = np.random.default_rng(0)
        clients = []
        for c in range(p["clients"]):
            shift = 1.0 if c % 2 else -1.0  # two domains: odd clients' inputs shifted
            y = rng.integers(0, 2, p["points"])
            x = rng.normal(size=(p["points"], p["dim"])) + (2 * y[:, None] - 1) + shift
            clients.append({"x": x.round(6).tolist(), "y": y.tolist(), "domain": c % 2})
        yt = rng.integers(0, 2, 200)
        xt = rng.normal(size=(200, p["dim"])) + (2 * yt[:, None] - 1)
        write_json(output, {"clients": clients, "test": {"x": xt.round(6).tolist(), "y": yt.tolist()}})

    def runs(self) -> list[RunSpec]:
        out = []
        for e, x in self.section["experiments"].items():
            for alg, hp in x["algorithms"].items():
                hparams = {"train": dict(x["train"]), "algorithm": alg, "hparams": dict(hp or {}), "dim": x["dim"]}
                out += [RunSpec(self.name, e, alg, s, (alg,), hparams) for s in range(x["seeds"])]
        return out

    def inputs(self, spec: RunSpec) -> dict[str, str]:
        return {"partition": f"data/partitions/{self.name}/{spec.experiment}.json"}

    def train(self, spec: RunSpec, inputs: Mapping[str, str], *, device: Any, checkpoint: str | None,
              fingerprint: str) -> Fit:
        import torch  # here, not at the top: the plan (snakemake -n) imports this module and no torch

        from fedshift.core.base import ClientData
        from fedshift.models import build_model, init_params

        part = read_json(inputs["partition"])
        clients = [ClientData(i, torch.tensor(c["x"], dtype=torch.float32, device=device),
                              torch.tensor(c["y"], device=device), c["domain"]) for i, c in enumerate(part["clients"])]
        module = build_model("logreg", input_dim=spec.hparams["dim"], num_classes=2).to(device)
        tr = spec.hparams["train"]
        alg = registry.get(spec.hparams["algorithm"]).build(
            module, clients_per_round=tr["clients_per_round"], local_epochs=tr["local_epochs"],
            batch_size=tr["batch_size"], client_lr=tr["client_lr"], **spec.hparams["hparams"])
        result = run_training(alg, init_params(module, spec.seed, device=device), clients, rounds=tr["rounds"],
                              seed=spec.seed, checkpoint_path=checkpoint, checkpoint_every=1,
                              log_every=1, fingerprint=fingerprint)
        return Fit(alg.eval_params(result.state), pd.DataFrame(result.history), {"rounds": tr["rounds"]}, result)

    def evaluate(self, spec: RunSpec, inputs: Mapping[str, str], run_files: Mapping[str, str], *,
                 device: Any) -> pd.DataFrame:
        import torch

        from fedshift.models import build_model

        test = read_json(inputs["partition"])["test"]
        module = build_model("logreg", input_dim=spec.hparams["dim"], num_classes=2)
        params = torch.load(run_files["model"], weights_only=True)
        logits = torch.func.functional_call(module, params, (torch.tensor(test["x"], dtype=torch.float32),))
        acc = (logits.argmax(1) == torch.tensor(test["y"])).double().mean().item()
        return pd.DataFrame([{"metric": "accuracy", "value": acc}])

    def outputs(self) -> list[OutputSpec]:
        out = []
        for name in self.section.get("outputs", []):
            exps = self.section["tables"][name]["experiments"]
            runs = [s for s in self.runs() if s.experiment in exps]
            out.append(OutputSpec(name, {"csv": f"results/tables/{self.name}/{name}.csv",
                                         "md": f"results/tables/{self.name}/{name}.md"},
                                  [s.file("metrics") for s in runs], "Table 1", {"experiments": exps}))
        return out

    def make_output(self, spec: OutputSpec, inputs: Sequence[str], files: Mapping[str, str]) -> None:
        df = pd.concat([pd.read_csv(f) for f in inputs])
        t = df.groupby(["experiment", "run"])["value"].agg(["mean", "std", "count"]).reset_index()
        with atomic_write(files["csv"]) as fh:
            t.to_csv(fh, index=False)
        with atomic_write(files["md"]) as fh:
            fh.write(t.to_markdown(index=False) + "\n")
