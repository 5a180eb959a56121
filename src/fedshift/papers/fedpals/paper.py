"""FedPALS (Listo Zec et al. 2024, arXiv:2411.03799) as a paper plug-in (:mod:`fedshift.contract`).

Switched on by ``papers: {fedpals: fedshift.papers.fedpals.paper:FedpalsPaper}`` (config/papers/fedpals.yaml).
The generic rules (``workflow/rules/runs.smk``) partition, train and evaluate its runs::

    data/partitions/fedpals/<experiment>/seed~<s>.json                 one per (experiment, seed)
    results/runs/fedpals/<experiment>/<run id>/seed~<s>/               run ids fedavg, fedprox, scaffold, oracle,
                                                                       fedpals~lam0, fedpals~ess25, ...

and make its tables (``results/tables/fedpals/<file>.{csv,md,tex}``) and figures (tidy data
``results/tables/fedpals/<file>.csv``, drawn ``results/figures/fedpals/<file>.{pdf,png}``). The synthetic task
(§5.2; many small models per seed, no engine run to store) is a stage of the paper's own rule file
(:meth:`FedpalsPaper.rules`, ``synthetic.smk``): ``results/runs/fedpals/synthetic/seed~<s>/metrics.csv``.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from fedshift.errors import ConfigError
from fedshift.contract import Fit, OutputSpec, Paper, PartitionSpec, RunSpec
from fedshift.papers.fedpals import config
from fedshift.seeds import seed_list

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

#: Keys of an experiment its partition depends on (:func:`data.make_partition`, :func:`data.make_domain_partition`).
PARTITION_KEYS = ("dataset", "label_shift", "num_clients", "samples_per_label", "validation_size", "test_size",
                  "validation_split", "test_split", "target_drop_labels")


def _label(title: str) -> str:
    """The paper's number at the start of a table or figure title: "Table 1", "Fig. 4", "Fig. 8(a)"."""
    m = re.match(r"(Table|Fig\.|Figure)\s*\d+[a-z]?(\([a-z]\))?", title)
    if m is None:
        raise ConfigError(f"config error at fedpals: title {title!r} does not start with its table or figure number")
    return m.group(0)


class FedpalsPaper(Paper):
    """FedPALS: label shift with the target's label marginal known at the server (Tables 1-3, Figs. 2-9)."""

    title = "FedPALS (Listo Zec et al., 2024)"
    schema = "schema.yaml"
    caption = "report.rst"
    #: only the table/figure jobs run the report module (left out of the training jobs' code hash)
    output_modules = ("fedshift.papers.fedpals.report", "fedshift.reporting")
    #: only the partition, training and evaluation jobs run these (left out of the table/figure jobs' code hash)
    train_modules = ("fedshift.papers.fedpals.data", "fedshift.papers.fedpals.fit")

    # ---- configuration ----------------------------------------------------------------------------------
    @functools.cached_property
    def experiments(self) -> dict[str, dict[str, Any]]:
        """The section's experiments, ``defaults:`` merged (:func:`config.experiments_of`).

        Merged once per instance: every run's ``inputs`` reads it (1,656 runs at paper scale).
        """
        return config.experiments_of(self.section)

    def check_raw_section(self, name: str, section: Mapping[str, Any]) -> None:
        """Each experiment's ``train.clients_per_round`` (defaults merged) ≤ its ``num_clients − 1`` training
        clients (the last client is the target).

        Raises
        ------
        ConfigError
            At ``<name>.experiments.<experiment>.train.clients_per_round``.
        """
        # config.experiments_of, not fedshift.validation: what this module imports is in every FedPALS job's code
        # hash, and the schema has already typed the section (experiments and defaults are mappings)
        for exp, e in config.experiments_of(section).items():
            k, n = (e.get("train") or {}).get("clients_per_round"), e.get("num_clients")
            if isinstance(k, int) and isinstance(n, int) and k > n - 1:
                raise ConfigError(f"config error at {name}.experiments.{exp}.train.clients_per_round: {k} "
                                  f"participants per round, but num_clients = {n} leaves {n - 1} training clients "
                                  "(the last is the target)")

    def validate(self) -> None:
        """:func:`config.check_section`, then every experiment's algorithms (trained by an output or not) registered."""
        from fedshift.algorithms import registry

        config.check_section(self.section, self.config.get("datasets") or {})
        known = registry.algorithm_modules()
        for name, exp in self.experiments.items():
            for kind in exp["algorithms"]:
                if config.registered_algorithm(kind) not in known:
                    raise ConfigError(f"config error at {self.name}.experiments.{name}.algorithms.{kind}: algorithm "
                                      f"{config.registered_algorithm(kind)!r} is not registered; registered: "
                                      f"{sorted(known)}")


    # ---- partitions ---------------------------------------------------------------------------------------
    def partitions(self) -> list[PartitionSpec]:
        """One partition per (experiment, seed), ``<experiment>/seed~<s>.json``, of every experiment."""
        out = []
        for name, exp in self.experiments.items():
            params = {k: exp[k] for k in PARTITION_KEYS if k in exp}
            params["algorithms"] = list(exp["algorithms"])  # the Oracle's clients are drawn when it trains
            for s in seed_list(exp["seeds"]):
                out.append(PartitionSpec(f"{name}/seed~{s}.json", {"prepared": f"data/prepared/{exp['dataset']}.pt"},
                                         {**params, "seed": s}))
        return out

    def write_partition(self, spec: PartitionSpec, output: str) -> None:
        """Draw one (experiment, seed) partition (:func:`data.make_partition` / :func:`data.make_domain_partition`)."""
        from fedshift.data.prepare import load_prepared
        from fedshift.io import write_json
        from fedshift.papers.fedpals import data

        exp, seed = dict(spec.params), int(spec.params["seed"])
        prepared = load_prepared(spec.inputs["prepared"])
        if exp["dataset"] in config.FILE_DATASETS:
            part = data.make_domain_partition(exp, prepared, seed)
        else:
            part = data.make_partition(exp, prepared["y_train"].numpy(), prepared["y_test"].numpy(), seed)
        write_json(output, part)
        log.info("clients %s, target T = %s, d(T, S) = %.4f, validation %d, test %d", part["sizes"],
                 [round(v, 3) for v in part["target"]], part["projection_distance"], len(part["validation"]),
                 len(part["test"]))

    # ---- runs ---------------------------------------------------------------------------------------------
    def runs(self) -> list[RunSpec]:
        """Every run of the active experiments, one per (experiment, run id, seed) (:func:`config.resolved_runs`)."""
        out = []
        budget = self.config.get("budget")
        experiments = self.experiments
        for e in config.active_experiments(config.merged_section(self.section)):
            for run_id, hparams in config.resolved_runs(self.section, e, budget, experiments).items():
                alg = (config.registered_algorithm(hparams["kind"]),)
                out += [RunSpec(self.name, e, run_id, s, alg, hparams) for s in seed_list(experiments[e]["seeds"])]
        return out

    def inputs(self, spec: RunSpec) -> dict[str, str]:
        """Prepared data, the (experiment, seed) partition and, for a pretrained model, its ImageNet weights."""
        exp = self.experiments[spec.experiment]
        out = {"prepared": f"data/prepared/{exp['dataset']}.pt",
               "partition": f"data/partitions/{self.name}/{spec.experiment}/seed~{spec.seed}.json"}
        weights = config.weights_file(exp)
        if weights:
            out["weights"] = weights
        return out

    def resources(self, spec: RunSpec) -> dict[str, int]:
        """The experiment's ``resources`` (default 3072 MB, 120 min)."""
        res = self.experiments[spec.experiment].get("resources") or {}
        return {"mem_mb": res.get("mem_mb", 3072), "runtime": res.get("runtime", 120)}

    def train(self, spec: RunSpec, inputs: Mapping[str, str], *, device: Any, checkpoint: str | None,
              fingerprint: str) -> Fit:
        """Train one run (:func:`fit.train_run`): the λ of a FedPALS run is ``spec.hparams["variant"]``."""
        from fedshift.papers.fedpals import fit

        return fit.train_run(dict(spec.hparams), spec.seed, prepared_path=inputs["prepared"],
                            partition_path=inputs["partition"], device=device, checkpoint_path=checkpoint,
                            fingerprint=fingerprint, weights_path=inputs.get("weights"))

    def evaluate(self, spec: RunSpec, inputs: Mapping[str, str], run_files: Mapping[str, str], *,
                 device: Any) -> pd.DataFrame:
        """Target validation/test metrics of the selected model (:func:`fit.evaluate_run`)."""
        from fedshift.papers.fedpals import fit

        return fit.evaluate_run(dict(spec.hparams), spec.seed, prepared_path=inputs["prepared"],
                                 partition_path=inputs["partition"], model_path=run_files["model"],
                                 run_json_path=run_files["run"], device=device, weights_path=inputs.get("weights"))

    # ---- outputs ------------------------------------------------------------------------------------------
    def _run_files(self, experiment: str, key: str) -> list[str]:
        exp = self.experiments[experiment]
        return [RunSpec(self.name, experiment, a, s).file(key) for a in config.algorithm_ids(exp)
                for s in seed_list(exp["seeds"])]

    def synthetic_runs(self) -> list[str]:
        """The synthetic task's per-seed metrics (made by ``synthetic.smk``)."""
        return [f"results/runs/{self.name}/synthetic/seed~{s}/metrics.csv"
                for s in seed_list(self.section["synthetic"]["seeds"])]

    def _caption_params(self, spec: dict[str, Any], experiments: Sequence[str]) -> dict[str, Any]:
        exps = self.experiments
        return {"spec": spec,
                "experiments": {e: {k: exps[e].get(k) for k in ("description", "seeds", "train", "algorithms")}
                                for e in experiments},
                "synthetic": self.section.get("synthetic") if spec.get("kind") == "synthetic" else None}

    def outputs(self) -> list[OutputSpec]:
        """The enabled tables (csv, md, tex, and ``<file>_runs.csv`` per seed) and figures (tidy csv, pdf, png)."""
        out = []
        tables, figures = self.section.get("tables") or {}, self.section.get("figures") or {}
        for name in config.enabled_outputs(self.section):
            if name in tables:
                t = tables[name]
                exps = list(dict.fromkeys(r["experiment"] for r in t["rows"]))
                inputs = list(dict.fromkeys(f for r in t["rows"] for f in self._run_files(r["experiment"], "metrics")))
                files = {**{x: f"results/tables/{self.name}/{t['file']}.{x}" for x in ("csv", "md", "tex")},
                         "runs": f"results/tables/{self.name}/{t['file']}_runs.csv"}  # per seed: paired claims
                out.append(OutputSpec(name, files, inputs, _label(t["title"]), self._caption_params(t, exps)))
                continue
            f = figures[name]
            exps = list(f.get("experiments", []))
            if f["kind"] == "synthetic":
                inputs = self.synthetic_runs()
            elif f["kind"] == "weights":  # Fig. 5: α of every FedPALS variant, first seed
                e = exps[0]
                inputs = [RunSpec(self.name, e, a, 0).file("run") for a in config.algorithm_ids(self.experiments[e])
                          if a.startswith("fedpals~")]
            else:
                inputs = [p for e in exps for p in self._run_files(e, "metrics")]
                if f["kind"] == "curves":
                    inputs += [p for e in exps for p in self._run_files(e, "history")]
            if "marginals_of" in f:
                inputs.append(f"data/partitions/{self.name}/{f['marginals_of']}/seed~0.json")
            files = {"csv": f"results/tables/{self.name}/{f['file']}.csv",
                     "pdf": f"results/figures/{self.name}/{f['file']}.pdf",
                     "png": f"results/figures/{self.name}/{f['file']}.png"}
            params = self._caption_params(f, exps)
            params["x_of"] = {e: config.setting(self.experiments[e], f.get("x", "")) for e in exps}
            out.append(OutputSpec(name, files, inputs, _label(f["title"]), params))
        return out

    def make_output(self, spec: OutputSpec, inputs: Sequence[str], files: Mapping[str, str]) -> None:
        """Write one table or figure from tidy run files (:mod:`fedshift.papers.fedpals.report`)."""
        import pandas as pd

        from fedshift.io import atomic_write, read_json
        from fedshift.papers.fedpals import report as rep
        from fedshift.reporting import save_figure

        s = spec.params["spec"]
        if "rows" in s:  # a table
            metrics = pd.concat([pd.read_csv(p) for p in inputs], ignore_index=True)
            runs = rep.table_runs(metrics, s)
            tidy = rep.table(metrics, s, runs)
            for key, text in (("csv", tidy.to_csv(index=False)), ("runs", runs.to_csv(index=False)),
                              ("md", rep.table_markdown(tidy, s)), ("tex", rep.table_latex(tidy, s))):
                with atomic_write(files[key]) as fh:
                    fh.write(text)
            return
        kind = s["kind"]
        if kind == "weights":
            data = rep.weights_data([read_json(p) for p in inputs])
        else:
            runs = pd.concat([pd.read_csv(p) for p in inputs if p.endswith("metrics.csv")], ignore_index=True)
        if kind == "synthetic":
            data = rep.synthetic_summary(runs)
        elif kind == "curves":
            data = rep.curves_data(runs, pd.concat([_history(p) for p in inputs if p.endswith("history.csv")]),
                                   s.get("metric", "accuracy"), s.get("per_algorithm", False))
        elif kind == "sweep":
            data = rep.sweep_data(runs, dict(spec.params["x_of"]))
        with atomic_write(files["csv"]) as fh:
            data.to_csv(fh, index=False)
        data = pd.read_csv(files["csv"])  # as the drawing step always read it
        if kind == "sweep":
            part = [p for p in inputs if p.startswith("data/partitions/")]
            fig = rep.plot_sweep(data, s["title"], s["x"], read_json(part[0]) if part else None)
        elif kind == "curves":
            fig = rep.plot_curves(data, s["title"], s.get("metric", "accuracy"))
        else:
            fig = {"synthetic": rep.plot_synthetic, "weights": rep.plot_weights}[kind](data, s["title"])
        save_figure(fig, files["pdf"], files["png"], dpi=200)

    def rules(self) -> str | None:
        """``synthetic.smk`` (the synthetic task's stage) when the section has ``synthetic``."""
        return "synthetic.smk" if "synthetic" in self.section else None


def _history(path: str) -> pd.DataFrame:
    """A run's history with its (experiment, algorithm, seed) from the path .../<exp>/<run>/seed~<s>/history.csv."""
    import pandas as pd

    parts = path.split("/")
    return pd.read_csv(path).assign(experiment=parts[-4], algorithm=parts[-3], seed=int(parts[-2].split("~")[1]))
