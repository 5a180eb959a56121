"""AgnosticFedAvg (Ro et al. 2021) and the AFL language-model Table 3 as a paper plug-in (fedshift.contract).

Switched on by ``papers: {agnostic_fedavg: fedshift.papers.agnostic_fedavg.paper:AgnosticFedAvgPaper}``
(``config/papers/agnostic_fedavg.yaml``); its section ``agnostic_fedavg:`` is checked against ``schema.yaml``
here and by :func:`~fedshift.papers.agnostic_fedavg.config.check_section`.

Stages, per experiment the enabled outputs (``build:``) need:

* partitions ``data/partitions/agnostic_fedavg/<experiment>.pt`` (:func:`~.data.build_data` from the raw files:
  clients, per-domain test sets and the summary) and ``<experiment>.json`` (that summary alone,
  :func:`~.data.write_summary`, for the tables: they never load the tensors);
* one run per (experiment, algorithm, seed), run id = the algorithm's key (``fedavg_uniform``,
  ``agnostic_fedavg``): :func:`~.fit.train_run`; evaluation: the final per-domain test metrics and λ, computed
  at the end of training (the run's artifacts) and written as tidy rows (:func:`~.fit.evaluate_run`);
* one rule per output, ``afa_<name>`` (:func:`~.report.write_output`; files under ``results/tables/<paper>/`` and
  ``results/figures/<paper>/`` with ``<paper>`` the output's ``paper:``, ``afl`` for the AFL table).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from fedshift.contract import Fit, OutputSpec, Paper, PartitionSpec, RunSpec
from fedshift.papers.agnostic_fedavg import config

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["AgnosticFedAvgPaper"]


class AgnosticFedAvgPaper(Paper):
    """The AgnosticFedAvg paper's plug-in (module docstring)."""

    title = "AgnosticFedAvg (Ro et al., Interspeech 2021)"
    # plotting: the code of its outputs only (editing it retrains nothing)
    output_modules = ("fedshift.papers.agnostic_fedavg.report", "fedshift.reporting")
    # training: the code of its partition, training and evaluation jobs only (editing it reruns no plot)
    train_modules = ("fedshift.papers.agnostic_fedavg.data", "fedshift.papers.agnostic_fedavg.fit",
                     "fedshift.papers.agnostic_fedavg.models")
    schema = "schema.yaml"
    caption = "report.rst"

    # ---- configuration --------------------------------------------------------------------------------
    def validate(self) -> None:
        """:func:`~.config.check_section` (outputs, experiments, target domains, intervals; key path named)."""
        config.check_section(self.section)


    def _experiments(self) -> list[str]:
        return config.active_experiments(self.section) if self.section else []

    # ---- partitions -------------------------------------------------------------------------------------
    def _raw(self, experiment: str) -> dict[str, list[str]]:
        """Registry dataset → its verified raw files (outputs of its download rule)."""
        e = self.section["experiments"][experiment]
        names = sorted({d for s in e.get("data", {}).get("sources", []) for d in config.SOURCE_DATASETS[s]})
        return {d: [f"data/raw/{d}/{f['name']}" for f in self.config["datasets"][d]["files"]] for d in names}

    def partitions(self) -> list[PartitionSpec]:
        """Per needed experiment ``<experiment>.pt`` (from its raw files) and ``<experiment>.json`` (its summary)."""
        out = []
        for name in self._experiments():
            e = self.section["experiments"][name]
            raw = self._raw(name)
            # what the data depends on: the experiment's kind and data settings (not its training settings)
            out.append(PartitionSpec(f"{name}.pt", raw, {"kind": e["kind"], "data": e["data"],
                                                         "raw": {d: f"data/raw/{d}" for d in raw}}))
            out.append(PartitionSpec(f"{name}.json", {"data": self._data(name)}, {"summary_of": f"{name}.pt"}))
        return out

    def _data(self, experiment: str) -> str:
        return f"data/partitions/{self.name}/{experiment}.pt"

    def write_partition(self, spec: PartitionSpec, output: str) -> None:
        """:func:`~.data.build_data` for ``.pt``, :func:`~.data.write_summary` for ``.json`` (atomic writes)."""
        from fedshift.papers.agnostic_fedavg import data

        if spec.name.endswith(".json"):
            data.write_summary(spec.inputs["data"], output)
        else:
            data.build_data({"kind": spec.params["kind"], "data": spec.params["data"]}, spec.params["raw"], output)

    # ---- runs ---------------------------------------------------------------------------------------------
    def runs(self) -> list[RunSpec]:
        """The enabled outputs' runs (experiment, algorithm key, seed): :func:`~.config.resolve_run`, budget applied."""
        budget = self.config.get("budget")
        out = []
        for exp in self._experiments():
            for alg, seed in config.runs_of(self.section, exp):
                r = config.resolve_run(self.section, exp, alg, budget)
                out.append(RunSpec(self.name, exp, alg, seed, (config.registered_algorithm(r["train"]["kind"]),), r))
        return out

    def inputs(self, spec: RunSpec) -> dict[str, str]:
        """The experiment's tensors (``data``)."""
        return {"data": self._data(spec.experiment)}

    def resources(self, spec: RunSpec) -> dict[str, int]:
        """8 GiB, 12 h (CNN / LSTM at paper scale)."""
        return {"mem_mb": 8192, "runtime": 720}

    def train(self, spec: RunSpec, inputs: Mapping[str, str], *, device: Any, checkpoint: str | None,
              fingerprint: str) -> Fit:
        """:func:`~.fit.train_run` with the spec's resolved hyper-parameters."""
        from fedshift.papers.agnostic_fedavg import fit

        return fit.train_run(dict(spec.hparams), spec.seed, inputs["data"], device=device, checkpoint=checkpoint,
                              fingerprint=fingerprint)

    def evaluate(self, spec: RunSpec, inputs: Mapping[str, str], run_files: Mapping[str, str], *,
                 device: Any) -> pd.DataFrame:
        """Tidy final metrics and λ from the run's artifacts (:func:`~.fit.evaluate_run`)."""
        import torch

        from fedshift.papers.agnostic_fedavg import fit

        return fit.evaluate_run(dict(spec.hparams), spec.seed, torch.load(run_files["artifacts"], weights_only=True))

    def evaluate_inputs(self, spec: RunSpec) -> dict[str, str]:
        """None besides the run's own files."""
        return {}  # the final evaluation is in the run's artifacts: the data are not read again

    # ---- outputs -----------------------------------------------------------------------------------------
    def _files(self, name: str) -> dict[str, str]:
        o = self.section["outputs"][name]
        files = {x: f"results/tables/{o['paper']}/{name}.{x}" for x in ("csv", "md")}
        if o["kind"] in ("toy", "curves"):
            files |= {x: f"results/figures/{o['paper']}/{name}.{x}" for x in ("pdf", "png")}
        return files

    def outputs(self) -> list[OutputSpec]:
        """``afa_<name>`` for each output of ``build:``; inputs: run files, then the experiments' summaries."""
        out = []
        runs = self.runs() if self.section else []
        for name in self.section.get("build", []) if self.section else []:
            o = self.section["outputs"][name]
            exps = o.get("experiments", [o.get("experiment")])
            summaries = [f"data/partitions/{self.name}/{e}.json" for e in exps]
            inputs = list(summaries)
            if o["kind"] != "stats":
                key = "metrics" if o["kind"] == "table" else "history"
                rows = o.get("rows")
                inputs = [s.file(key) for e in exps for s in runs
                          if s.experiment == e and (rows is None or s.run in rows)] + summaries
            params = {"name": name, "output": dict(o),
                      "experiments": {e: self.section["experiments"][e] for e in exps}}
            out.append(OutputSpec(f"afa_{name}", self._files(name), inputs, o["label"], params))
        return out

    def make_output(self, spec: OutputSpec, inputs: Sequence[str], files: Mapping[str, str]) -> None:
        """:func:`~.report.write_output` (csv, md; pdf and png for the toy and the curves)."""
        from fedshift.papers.agnostic_fedavg.report import write_output

        p = spec.params
        summaries = [f for f in inputs if f.startswith(f"data/partitions/{self.name}/")]
        runs = [f for f in inputs if f not in summaries]
        write_output(p["name"], p["output"], p["experiments"], runs, summaries, dict(files))
