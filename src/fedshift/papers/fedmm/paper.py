"""FedMM (Shen et al., AAMAS 2023; arXiv:2110.08477) as a paper plug-in (:mod:`fedshift.contract`).

Switched on by ``papers: {fedmm: fedshift.papers.fedmm.paper:FedmmPaper}`` (``config/papers/fedmm.yaml``); the
generic rules of ``workflow/rules/runs.smk`` run it:

* partitions ``data/partitions/fedmm/<task>/<clients>.json``, one per (task, client setting)
  (:func:`~fedshift.papers.fedmm.data.write_partition`);
* runs ``results/runs/fedmm/<task>/<run>/seed~<s>/``: one per (task, run setting, seed) of the enabled outputs,
  the run id a label ``<optimizer>-<head>-<clients>-M<M>-e<η₃>``; the hyper-parameters are
  :func:`~fedshift.papers.fedmm.config.resolve_setting`'s dict, built from the typed settings
  (:func:`~fedshift.papers.fedmm.config.settings_of`), never parsed back from the id;
* training evaluates the target test set every ``eval_every`` rounds (the history); :meth:`FedmmPaper.evaluate`
  turns that history into tidy metric rows; a diverged run (non-finite objective) is recorded
  (``diverged: true``, accuracy NaN, an empty model: Fig. 5's blank cell), not failed;
* outputs ``fedmm_fig1`` … ``fedmm_table1`` (:mod:`fedshift.papers.fedmm.report`) from the runs' metrics.

A task is an experiment of the contract (``RunSpec.experiment``). ``fedmm.defaults`` (optional) is merged into
every task (:func:`fedshift.contract.experiments_of`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from fedshift.errors import ConfigError
from fedshift.contract import Fit, OutputSpec, Paper, PartitionSpec, RunSpec
from fedshift.papers.fedmm import config
from fedshift.seeds import seed_list

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["FedmmPaper", "train_job"]


class FedmmPaper(Paper):
    """FedMM's Figs. 1, 4–7 (MNIST → MNIST-M) and Table 1 (Office-31): see the module docstring."""

    title = "FedMM (Shen et al., AAMAS 2023)"
    # plotting: the code of its outputs only (editing it retrains nothing)
    output_modules = ("fedshift.papers.fedmm.report", "fedshift.reporting")
    # training: the code of its partition, training and evaluation jobs only (editing it reruns no plot)
    train_modules = ("fedshift.papers.fedmm.data", "fedshift.papers.fedmm.fit")
    schema = "schema.yaml"
    caption = "report.rst"

    def __init__(self, config: Mapping[str, Any]):
        super().__init__(config)
        self._merged: dict[str, Any] | None = None

    @property
    def merged(self) -> dict[str, Any]:
        """The section, ``defaults`` merged into every task (computed once)."""
        if self._merged is None:
            self._merged = config.merged_section(self.section)
        return self._merged

    # ---- configuration --------------------------------------------------------------------------------
    def validate(self) -> None:
        """:func:`~fedshift.papers.fedmm.config.check_section` of the merged section (figures, tasks, settings)."""
        config.check_section(self.merged)


    def _prepared(self, task: str, role: str) -> str:
        return f"data/prepared/{config.prepared_name(self.merged['tasks'][task], role)}.pt"

    # ---- partitions -------------------------------------------------------------------------------------
    def _partition_name(self, task: str, clients: str) -> str:
        return f"{task}/{clients}.json"

    def partitions(self) -> list[PartitionSpec]:
        """One partition per (task, client setting) the runs use; params: the task's data settings."""
        seen = dict.fromkeys((s.experiment, s.hparams["clients"]) for s in self.runs())
        tasks = self.merged["tasks"]
        return [PartitionSpec(self._partition_name(t, c),
                              {"source": self._prepared(t, "source"), "target": self._prepared(t, "target")},
                              {"clients": c, "data": {k: tasks[t].get(k) for k in (
                                  "source", "target", "transfer", "source_size", "target_size", "partition_seed")}})
                for t, c in seen]

    def write_partition(self, spec: PartitionSpec, output: str) -> None:
        """Split the task's source and target rows over the setting's clients (:func:`.data.write_partition`)."""
        from fedshift.papers.fedmm import data

        data.write_partition(dict(spec.params["data"]), spec.params["clients"], spec.inputs["source"],
                             spec.inputs["target"], output)

    # ---- runs ---------------------------------------------------------------------------------------------
    def runs(self) -> list[RunSpec]:
        """Every (task, run setting, seed) of the enabled outputs, budget applied (``config["budget"]``)."""
        sec, budget = self.merged, self.config.get("budget")
        out: dict[str, RunSpec] = {}
        for name in config.enabled_outputs(sec):
            for task in config.output_tasks(sec, name):
                for setting in config.settings_of(sec, name, task):
                    hparams = config.resolve_setting(sec, task, setting, budget)
                    for seed in seed_list(sec["tasks"][task]["seeds"]):
                        spec = RunSpec(self.name, task, hparams["run"], seed, (setting["optimizer"],), hparams)
                        out.setdefault(spec.path, spec)
        return list(out.values())

    def inputs(self, spec: RunSpec) -> dict[str, str]:
        """Source and target prepared data, the run's partition and (Office-31) the MobileNetV2 weights."""
        task = spec.experiment
        files = {"source": self._prepared(task, "source"), "target": self._prepared(task, "target"),
                 "partition": f"data/partitions/{self.name}/{self._partition_name(task, spec.hparams['clients'])}"}
        if spec.hparams["network"]["kind"] == "office":
            weights = self.config["datasets"]["mobilenet_v2"]["files"][0]["name"]
            files["weights"] = f"data/raw/mobilenet_v2/{weights}"
        return files

    def resources(self, spec: RunSpec) -> dict[str, int]:
        """8 GiB and 12 hours per training job (the paper-scale MNIST-M and Office-31 runs)."""
        return {"mem_mb": 8192, "runtime": 720}

    def train(self, spec: RunSpec, inputs: Mapping[str, str], *, device: Any, checkpoint: str | None,
              fingerprint: str) -> Fit:
        """Train one (task, run, seed) (:func:`.fit.train_run`): the final model and the target accuracy by round.

        The target test set is evaluated every ``eval_every`` rounds; a diverged run is recorded as such (Fig. 5's
        blank cell), not failed.
        """
        from fedshift.papers.fedmm import fit

        return fit.train_run(dict(spec.hparams), spec.seed, source_path=inputs["source"], target_path=inputs["target"],
                             partition_path=inputs["partition"], device=device, checkpoint_path=checkpoint,
                             fingerprint=fingerprint, weights_path=inputs.get("weights"))

    def evaluate(self, spec: RunSpec, inputs: Mapping[str, str], run_files: Mapping[str, str], *,
                 device: Any) -> pd.DataFrame:
        """The run's target test accuracy by round, from its history (:func:`.fit.evaluate_run`)."""
        from fedshift.papers.fedmm import fit

        return fit.evaluate_run(dict(spec.hparams), run_files["history"])

    def evaluate_inputs(self, spec: RunSpec) -> dict[str, str]:
        """None besides the run's own files: the evaluation reads its history."""
        return {}  # the run's own history only

    # ---- outputs -----------------------------------------------------------------------------------------
    def outputs(self) -> list[OutputSpec]:
        """``fedmm_fig1`` … ``fedmm_table1`` of ``fedmm.outputs``: tidy and per-run CSVs, PDF/PNG; or CSV, Markdown."""
        sec = self.merged
        out = []
        for name in config.enabled_outputs(sec):
            # in runs_of's order (task, run, seed): the tables aggregate seeds in this order
            inputs = [f"results/runs/{self.name}/{task}/{run}/seed~{seed}/metrics.csv"
                      for task, run, seed in config.runs_of(sec, name)]
            if name == "table1":
                files = {x: f"results/tables/{self.name}/table1.{x}" for x in ("csv", "md")}
            else:
                files = {"csv": f"results/tables/{self.name}/{name}.csv",
                         "runs": f"results/tables/{self.name}/{name}_runs.csv",  # per run and seed: paired claims
                         **{x: f"results/figures/{self.name}/{name}.{x}" for x in ("pdf", "png")}}
                if name in ("fig1", "fig4", "fig7"):  # the figure as a table: accuracies and FedMM's lead
                    files["md"] = f"results/tables/{self.name}/{name}.md"
            label = "Table 1" if name == "table1" else f"Figure {name[3:]}"
            out.append(OutputSpec(f"{self.name}_{name}", files, inputs, label, dict(sec["figures"][name])))
        return out

    def make_output(self, spec: OutputSpec, inputs: Sequence[str], files: Mapping[str, str]) -> None:
        """Write one figure or Table 1 (:func:`fedshift.papers.fedmm.report.make_output`) from the runs' metrics."""
        from fedshift.papers.fedmm.report import make_output

        name = spec.name.removeprefix(f"{self.name}_")
        if name not in config.OUTPUTS:
            raise ConfigError(f"{self.name}: unknown output {spec.name!r}")
        make_output(name, dict(spec.params), list(inputs), dict(files))


def train_job(resolved: Mapping[str, Any], seed: int, *, source_path: Any, target_path: Any, partition_path: Any,
              model_path: Any, history_path: Any, run_json_path: Any, checkpoint_path: Any = None,
              weights_path: Any = None, device: str = "auto", threads: int = 1, workdir: Any = ".") -> dict[str, Any]:
    """Train one FedMM run outside the workflow, through the job skeleton (:func:`fedshift.jobs.train_job`).

    For tests and benchmarks: the same training and files as the workflow's ``paper_train_fedmm_<experiment>`` job
    of the run (``artifacts.pt`` beside ``model_path``).

    Parameters
    ----------
    resolved : mapping
        The run's hyper-parameters (:func:`~fedshift.papers.fedmm.config.resolve_run`).
    seed : int
    source_path, target_path, partition_path, weights_path : path
        The run's inputs (:meth:`FedmmPaper.inputs`; ``weights_path`` for Office-31 only).
    model_path, history_path, run_json_path : path
        Outputs (``run.json`` last).
    checkpoint_path : path, optional
        Resume point (removed once the outputs are written).

    Returns
    -------
    dict
        The run's ``run.json`` content.
    """
    from pathlib import Path

    from fedshift.contract import load_paper
    from fedshift.jobs import train_job as skeleton

    paper = load_paper("fedmm", "fedshift.papers.fedmm.paper:FedmmPaper", {})
    spec = RunSpec("fedmm", resolved["task"], resolved["run"], seed, (resolved["optimizer"],), dict(resolved))
    inputs = {"source": str(source_path), "target": str(target_path), "partition": str(partition_path)}
    if weights_path is not None:
        inputs["weights"] = str(weights_path)
    outputs = {"model": model_path, "history": history_path, "run": run_json_path,
               "artifacts": Path(model_path).with_name("artifacts.pt")}
    return skeleton(paper, [spec], inputs, [outputs], device=device, threads=threads, workdir=workdir,
                    checkpoint=None if checkpoint_path is None else str(checkpoint_path))[0]
