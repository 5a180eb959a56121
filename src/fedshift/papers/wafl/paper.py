"""WAFL (arXiv:2206.01432) as a paper plug-in of :mod:`fedshift.contract` (config ``papers: {wafl: ...:WaflPaper}``).

Stages (the generic rules of ``workflow/rules/runs.smk``):

* partitions ``data/partitions/wafl/<experiment>.json`` (:func:`.data.write_partition`);
* runs ``results/runs/wafl/<experiment>/<run>/seed~<seed>/`` with run ids ``fedavg``, ``fedpgm``, ``fedfgsm`` and
  ``wafl~<γ>``; ``hparams`` = :func:`.config.resolve` (γ as ``hparams["perturb"]["gamma"]``), budget applied;
  ``artifacts.pt`` holds the θ snapshots Fig. 5 evaluates;
* evaluation: clean and PGD-shifted metrics (:func:`.fit.evaluate_run`); Table 2's runs also read the target's
  prepared dataset (:meth:`WaflPaper.evaluate_inputs`); the Fig. 5 run of an experiment evaluates its snapshots;
* outputs ``wafl_fig2`` … ``wafl_fig5``, ``wafl_table2`` and, per Table-2 experiment, ``wafl_lambda_<experiment>``
  (eq. 9's λ from the prepared data and the partition, no training: an output like the others, the simplest
  place for a table that reads files and trains nothing).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from fedshift.errors import ConfigError
from fedshift.contract import Fit, OutputSpec, Paper, PartitionSpec, RunSpec
from fedshift.papers.wafl import config
from fedshift.seeds import seed_list

if TYPE_CHECKING:
    import pandas as pd

FIGURES = ("fig2", "fig3", "fig4", "fig5")


class WaflPaper(Paper):
    """WAFL: Wasserstein robust federated learning (Figs. 2–5, Table 2 with eq. 9's λ)."""

    title = "WAFL (On the Generalization of Wasserstein Robust Federated Learning, 2022)"
    schema = "schema.yaml"
    caption = "report.rst"
    #: figures, Table 2 and eq. 9 only: editing them reruns those outputs, never a training or evaluation job
    output_modules = ("fedshift.papers.wafl.report", "fedshift.papers.wafl.wasserstein", "fedshift.reporting")
    #: training and evaluation only (``data`` is not: eq. 9's λ output loads the source through it)
    train_modules = ("fedshift.papers.wafl.fit",)

    @functools.cached_property
    def merged(self) -> dict[str, Any]:
        """The section with ``defaults:`` merged into every experiment (:func:`.config.merged_section`).

        Computed on first use, after the schema has checked the section (a plug-in is loaded before that).
        """
        return config.merged_section(self.section) if self.section else {}

    # ---- configuration ---------------------------------------------------------------------------------
    def validate(self) -> None:
        """Every merged experiment complete (the schema's ``$defs/complete``), then :func:`.config.check_section`.

        Raises
        ------
        ConfigError
            Naming the key path (``config error at wafl.experiments.mnist.train: 'client_lr' is a required
            property``).
        """
        import jsonschema

        from fedshift.errors import load_yaml

        defs = load_yaml(self.resolve_path(self.schema))["$defs"]
        complete = jsonschema.Draft202012Validator({"$ref": "#/$defs/complete", "$defs": defs})
        for name, exp in self.merged["experiments"].items():
            err = jsonschema.exceptions.best_match(complete.iter_errors(exp))
            if err is not None:
                where = ".".join([self.name, "experiments", name, *map(str, err.absolute_path)])
                raise ConfigError(f"config error at {where}: {err.message}")
        config.check_section(self.merged)


    def _used(self) -> list[str]:
        return config.active_experiments(self.merged) if self.merged else []

    def _exp(self, experiment: str) -> dict[str, Any]:
        return self.merged["experiments"][experiment]

    # ---- partitions -------------------------------------------------------------------------------------
    def partitions(self) -> list[PartitionSpec]:
        """``<experiment>.json`` per used experiment, from its source's prepared dataset and ``partition:``."""
        return [PartitionSpec(f"{e}.json", {"prepared": self._prepared(self._exp(e)["dataset"])},
                              {"experiment": e, "partition": self._exp(e)["partition"]}) for e in self._used()]

    def write_partition(self, spec: PartitionSpec, output: str) -> None:
        """The label-skew partition of the source over the clients (:func:`.data.write_partition`)."""
        from fedshift.papers.wafl import data

        data.write_partition(dict(spec.params), spec.inputs["prepared"], output)

    # ---- runs ---------------------------------------------------------------------------------------------
    def runs(self) -> list[RunSpec]:
        """Every (experiment, run id, seed) of the enabled outputs; γ from the config, never from the id."""
        budget = self.config.get("budget")
        out = []
        for e in self._used():
            for rid, (kind, gamma, attack) in config.algorithm_runs(self.merged, e).items():
                hparams = config.resolve(self.merged, e, kind, gamma, budget, attack)
                out += [RunSpec(self.name, e, rid, s, (config.registered_algorithm(kind),), hparams)
                        for s in seed_list(self._exp(e)["seeds"])]
        return out

    def inputs(self, spec: RunSpec) -> dict[str, str]:
        """The source's prepared dataset (``prepared``) and the experiment's partition (``partition``)."""
        return {"prepared": self._prepared(self._exp(spec.experiment)["dataset"]),
                "partition": f"data/partitions/{self.name}/{spec.experiment}.json"}

    def evaluate_inputs(self, spec: RunSpec) -> dict[str, str]:
        """:meth:`inputs`, plus the target's prepared dataset for a domain-adaptation experiment (Table 2)."""
        target = self._exp(spec.experiment).get("target")
        return {**self.inputs(spec), **({"target": self._prepared(target)} if target else {})}

    def evaluate_params(self, spec: RunSpec) -> dict[str, Any]:
        """What the evaluation reads besides the run: the shift attack and whether Fig. 5's curve is evaluated."""
        return {"shift": self._exp(spec.experiment)["shift"], "curve": self._curve(spec)}

    def _curve(self, spec: RunSpec) -> bool:
        """Whether the run is the one whose snapshots Fig. 5 evaluates (WAFL at ``convergence_gamma``)."""
        return (spec.experiment in config.figure_experiments(self.merged, "fig5")
                and spec.run == config.curve_algorithm(self.merged, spec.experiment))

    def train(self, spec: RunSpec, inputs: Mapping[str, str], *, device: Any, checkpoint: str | None,
              fingerprint: str) -> Fit:
        """:func:`.fit.train_run` with the run's ``hparams`` (γ at ``hparams["perturb"]["gamma"]``) and seed."""
        from fedshift.papers.wafl import fit

        return fit.train_run(dict(spec.hparams), spec.seed, prepared_path=inputs["prepared"],
                             partition_path=inputs["partition"], device=device, checkpoint_path=checkpoint,
                             fingerprint=fingerprint)

    def evaluate(self, spec: RunSpec, inputs: Mapping[str, str], run_files: Mapping[str, str], *,
                 device: Any) -> pd.DataFrame:
        """:func:`.fit.evaluate_run`: shifted metrics, ρ², and the snapshots in ``artifacts.pt`` for Fig. 5's run."""
        from fedshift.papers.wafl import fit

        ev = self.evaluate_params(spec)
        return fit.evaluate_run(dict(spec.hparams), spec.seed, ev["shift"], prepared_path=inputs["prepared"],
                                partition_path=inputs["partition"], model_path=run_files["model"],
                                artifacts_path=run_files["artifacts"], curve=ev["curve"],
                                target_path=inputs.get("target"), device=device)

    # ---- outputs -----------------------------------------------------------------------------------------
    def outputs(self) -> list[OutputSpec]:
        """Figs. 2–5 (tidy CSV, PDF, PNG; Fig. 4 also its per-run CSV), per Table-2 experiment eq. 9's λ, Table 2."""
        if not self.merged:
            return []
        sec, name = self.merged, self.name
        enabled = sec["outputs"]
        out = []
        for fig in FIGURES:
            if fig not in enabled:
                continue
            exps = sec["figures"].get(fig, [])
            files = {"csv": f"results/tables/{name}/{fig}.csv", "pdf": f"results/figures/{name}/{fig}.pdf",
                     "png": f"results/figures/{name}/{fig}.png"}
            fractions = {e: self._exp(e).get(f"{fig}_fraction", 0.4) for e in exps}
            params = {"kind": "figure", "figure": fig, "fractions": fractions}
            if fig == "fig4":  # the per-run table the claims pair by seed, and what is fixed or chosen
                files["runs"] = f"results/tables/{name}/fig4_runs.csv"
                params["choices"] = {e: config.fig4_choices(sec, e) for e in exps}
            out.append(OutputSpec(f"{name}_{fig}", files, self._metrics(fig), f"Figure {fig[3:]}", params))
        if "table2" in enabled:
            exps = sec["figures"].get("table2", [])
            lambdas = []
            for e in exps:
                x = self._exp(e)
                csv = f"results/tables/{name}/lambda_{e}.csv"
                lambdas.append(csv)
                out.append(OutputSpec(
                    f"{name}_lambda_{e}", {"csv": csv},
                    [self._prepared(x["dataset"]), self._prepared(x["target"]), f"data/partitions/{name}/{e}.json"],
                    "Eq. 9", {"kind": "lambda", "experiment": e, "points": x.get("lambda_points", 500),
                              "preprocess": x["preprocess"], "seed": x["partition"]["seed"]}))
            out.append(OutputSpec(f"{name}_table2", {"csv": f"results/tables/{name}/table2.csv",
                                                     "md": f"results/tables/{name}/table2.md"},
                                  self._metrics("table2") + lambdas, "Table 2",
                                  {"kind": "table2", "columns": sec["table2_columns"], "lambdas": lambdas}))
        return out

    def _metrics(self, figure: str) -> list[str]:
        """The metrics files one output reads, in the order of its experiments, run ids and seeds."""
        return [f"results/runs/{self.name}/{e}/{a}/seed~{s}/metrics.csv"
                for e in self.merged["figures"].get(figure, []) for a, s in config.runs_of(self.merged, e, figure)]

    def make_output(self, spec: OutputSpec, inputs: Sequence[str], files: Mapping[str, str]) -> None:
        """A figure (:func:`.report.write_figure`), eq. 9's λ (:func:`.wasserstein.write_lambda`) or Table 2."""
        import pandas as pd
        import torch

        from fedshift.papers.wafl import data, report, wasserstein

        kind = spec.params["kind"]
        if kind == "figure":
            report.write_figure(spec.params["figure"], report.collect(inputs), spec.params["fractions"], files,
                                spec.params.get("choices"))
        elif kind == "lambda":
            prepared, target, partition = inputs
            wasserstein.write_lambda(data.load_data({"preprocess": spec.params["preprocess"]}, prepared, partition,
                                                    torch.device("cpu"), target),
                                     spec.params["points"], spec.params["seed"], files["csv"])
        else:
            lambdas = list(spec.params["lambdas"])
            report.write_table2(report.collect([f for f in inputs if f not in lambdas]),
                                [pd.read_csv(f) for f in lambdas], spec.params["columns"], files)

    @staticmethod
    def _prepared(name: str) -> str:
        return f"data/prepared/{name}.pt"


__all__ = ["WaflPaper"]
