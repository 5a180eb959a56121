"""AFL (Mohri, Sivek, Suresh: Agnostic Federated Learning, ICML 2019) as a plug-in of the paper contract.

Switched on by ``papers: {afl: fedshift.papers.afl.paper:AflPaper}`` (``config/papers/afl.yaml``); its section
``afl:`` holds ``defaults``, ``experiments`` and ``tables`` (schema ``schema.yaml``). Tables 1 (Adult) and 2
(Fashion-MNIST): every model is Stochastic-AFL (Fig. 3) — ``afl`` learns λ over Λ = Δ_p, the baselines keep it
fixed (``uniform``: the pooled sample L_Û; ``domain~k``: domain k alone). Each table is a named output
(``afl_table1``: csv, md, tex and the per-run ``_runs.csv`` that claims pair by seed) with its figure
(``afl_table1_figure``). Experiments with ``batch_seeds`` train all their seeds in one job (:meth:`train_many`).
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from fedshift.contract import Fit, OutputSpec, Paper, PartitionSpec, RunSpec, experiments_of
from fedshift.papers.afl import config
from fedshift.papers.afl.config import SECTION
from fedshift.seeds import seed_list

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

#: The columns of a run's metrics (and of a table's ``_runs.csv``), in order.
METRIC_COLUMNS = ["experiment", "model", "seed", "column", "metric", "value"]


def paper_label(title: str) -> str:
    """The paper's number at the start of a table title: ``"Table 1"``."""
    m = re.match(r"(Table|Fig\.|Figure)\s*\d+[a-z]?(\([a-z]\))?", title)
    return m.group(0) if m else title


class AflPaper(Paper):
    """AFL's Tables 1 and 2 (module docstring)."""

    title = "AFL (Mohri, Sivek, Suresh: Agnostic Federated Learning, ICML 2019)"
    schema = "schema.yaml"
    caption = "report.rst"
    output_modules = ("fedshift.papers.afl.report", "fedshift.reporting")
    train_modules = ("fedshift.papers.afl.data", "fedshift.papers.afl.fit")

    # ---- configuration --------------------------------------------------------------------------------
    def experiments(self) -> dict[str, dict[str, Any]]:
        """The section's experiments, ``defaults`` merged in: merged once per instance (every run's ``inputs``
        reads it, 1,320 runs at paper scale); callers read it, none edits it."""
        return self._experiments

    @functools.cached_property
    def _experiments(self) -> dict[str, dict[str, Any]]:
        return experiments_of(self.section)

    def tables(self) -> dict[str, dict[str, Any]]:
        """The enabled tables (``outputs``, default: all of ``tables``), by name (:func:`.config.enabled_outputs`)."""
        return config.enabled_outputs(self.section)

    def validate(self) -> None:
        """The section's cross-references (:func:`~fedshift.papers.afl.config.check_section`); raises ConfigError."""
        config.check_section(self.section, self.config.get("datasets") or {})


    # ---- partitions -------------------------------------------------------------------------------------
    def partitions(self) -> list[PartitionSpec]:
        """One domain partition per needed experiment: ``data/partitions/afl/<experiment>.json``."""
        out = []
        for name in config.active_experiments(self.section):
            e = self.experiments()[name]
            params = {k: e[k] for k in ("dataset", "domains", "partition_seed")}
            params["validation_fraction"] = e.get("validation_fraction", 0.0)
            out.append(PartitionSpec(f"{name}.json", {"prepared": f"data/prepared/{e['dataset']}.pt"}, params))
        return out

    def write_partition(self, spec: PartitionSpec, output: str) -> None:
        """The experiment's per-domain train/validation/test index map (:func:`.data.make_partition`)."""
        from fedshift.data.prepare import load_prepared
        from fedshift.io import write_json
        from fedshift.papers.afl import data

        part = data.make_partition(dict(spec.params), load_prepared(spec.inputs["prepared"]),
                                   spec.params["partition_seed"])
        for split in ("train", "test"):
            log.info("%s: %s", split, {k: len(v) for k, v in part[split].items()})
        write_json(output, part)

    # ---- runs ---------------------------------------------------------------------------------------------
    def runs(self) -> list[RunSpec]:
        """Per needed experiment, model and seed, hyper-parameters resolved with the budget (:mod:`.config`).

        Every model runs the registered algorithm ``afl`` (Stochastic-AFL; the baselines with λ fixed).
        """
        out = []
        exps = self.experiments()
        for name in config.active_experiments(self.section):
            for alg in config.algorithm_ids(exps[name]):
                hp = config.resolve_run(self.section, name, alg, self.config.get("budget"))
                out += [RunSpec(self.name, name, alg, s, ("afl",), hp) for s in seed_list(exps[name]["seeds"])]
        return out

    def inputs(self, spec: RunSpec) -> dict[str, str]:
        """The prepared dataset and the experiment's partition."""
        e = self.experiments()[spec.experiment]
        return {"prepared": f"data/prepared/{e['dataset']}.pt",
                "partition": f"data/partitions/{self.name}/{spec.experiment}.json"}

    def seeds_per_job(self, experiment: str) -> int:
        """All seeds of an experiment with ``batch_seeds: true`` in one job (the batched path), else one."""
        e = self.experiments()[experiment]
        return len(seed_list(e["seeds"])) if e.get("batch_seeds", False) else 1

    def resources(self, spec: RunSpec) -> dict[str, int]:
        """A logistic regression on CPU: 2 GB, 2 hours."""
        return {"mem_mb": 2048, "runtime": 120}

    def train(self, spec: RunSpec, inputs: Mapping[str, str], *, device: Any, checkpoint: str | None,
              fingerprint: str) -> Fit:
        """One run: :func:`~fedshift.papers.afl.fit.train_run` (:func:`~fedshift.papers.afl.fit.train_runs` with a
        run axis of one)."""
        from fedshift.papers.afl import fit

        return fit.train_run(spec.hparams, spec.seed, prepared_path=inputs["prepared"],
                             partition_path=inputs["partition"], device=device, checkpoint_path=checkpoint,
                             fingerprint=fingerprint)

    def train_many(self, specs: Sequence[RunSpec], inputs: Mapping[str, str], *, device: Any,
                   checkpoint: str | None, fingerprint: str) -> list[Fit]:
        """All seeds of one (experiment, algorithm) at once, batched over the run axis (same results as alone)."""
        from fedshift.papers.afl import fit

        return fit.train_runs(specs[0].hparams, [s.seed for s in specs], prepared_path=inputs["prepared"],
                          partition_path=inputs["partition"], device=device, checkpoint_path=checkpoint,
                          fingerprint=fingerprint)

    def evaluate(self, spec: RunSpec, inputs: Mapping[str, str], run_files: Mapping[str, str], *,
                 device: Any) -> pd.DataFrame:
        """Test accuracy and loss per domain, U and D_Λ (:func:`.fit.evaluate_run`)."""
        from fedshift.papers.afl import fit

        df = fit.evaluate_run(spec.hparams, spec.seed, prepared_path=inputs["prepared"],
                          partition_path=inputs["partition"], model_path=run_files["model"], device=device)
        log.info("\n%s", df.to_string(index=False))
        return df

    # ---- outputs -----------------------------------------------------------------------------------------
    def outputs(self) -> list[OutputSpec]:
        """Per enabled table: ``<name>`` (csv, md, tex, _runs.csv) and ``<name>_figure`` (pdf, png)."""
        out = []
        exps = self.experiments()
        for name, t in self.tables().items():
            e = exps[t["experiment"]]
            stem = f"results/tables/{self.name}/{t['file']}"
            metrics = [f"results/runs/{self.name}/{t['experiment']}/{a}/seed~{s}/metrics.csv"
                       for a in config.algorithm_ids(e) for s in seed_list(e["seeds"])]
            params = {"table": dict(t), "experiment": e}
            out.append(OutputSpec(name, {"csv": f"{stem}.csv", "md": f"{stem}.md", "tex": f"{stem}.tex",
                                         "runs": f"{stem}_runs.csv"}, metrics, paper_label(t["title"]), params))
            fig = f"results/figures/{self.name}/{t['file']}"
            out.append(OutputSpec(f"{name}_figure", {"pdf": f"{fig}.pdf", "png": f"{fig}.png"}, [f"{stem}.csv"],
                                  paper_label(t["title"]), params))
        return out

    def make_output(self, spec: OutputSpec, inputs: Sequence[str], files: Mapping[str, str]) -> None:
        """Write a table or its figure.

        A table: mean ± std over seeds → tidy CSV, the paper's layout in Markdown and LaTeX, and the per-run rows
        (``_runs.csv``, what claims pair by seed); a figure: per-domain accuracy from the table's CSV.
        """
        import pandas as pd

        from fedshift.io import atomic_write
        from fedshift.papers.afl.report import aggregate, plot_domain_accuracy, to_latex, to_markdown
        from fedshift.reporting import save_figure

        table = spec.params["table"]
        if "pdf" in files:
            fig = plot_domain_accuracy(pd.read_csv(inputs[0]), table)
            save_figure(fig, files["pdf"], files["png"], dpi=200)
            return
        runs = pd.concat([pd.read_csv(p)[METRIC_COLUMNS] for p in inputs], ignore_index=True)
        agg = aggregate(runs)
        with atomic_write(files["runs"]) as fh:
            runs.to_csv(fh, index=False)
        with atomic_write(files["csv"]) as fh:
            agg.to_csv(fh, index=False)
        md = to_markdown(agg, table)
        with atomic_write(files["md"]) as fh:
            fh.write(md)
        with atomic_write(files["tex"]) as fh:
            fh.write(to_latex(agg, table))
        log.info("\n%s", md)


__all__ = ["AflPaper", "METRIC_COLUMNS", "SECTION", "paper_label"]
