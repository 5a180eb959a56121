"""The shift matrix as a paper plug-in (:mod:`fedshift.contract`).

One module over 400 lines: the plug-in's contract methods; the rows (:mod:`.rows`), the section's grids and checks
(:mod:`.section`), cells (:mod:`.cells`) and tables (:mod:`.report`) live in their own modules. Its top imports no
torch (the plan's view); training imports it.

Switched on by ``papers: {shift_matrix: fedshift.papers.shift_matrix.paper:ShiftMatrixPaper}``
(``config/papers/shift_matrix.yaml``). One experiment per configured shift (``shift_matrix.shifts``), one run id
per algorithm (every registered one by default), seeds 0 … S − 1::

    results/runs/shift_matrix/<shift>/<algorithm>/seed~<s>/      model.pt (per model, the grid value selected on
                                                                the primary validation metric, keys
                                                                ``<model>/<parameter>``), artifacts.pt (every
                                                                model's and grid value's parameters),
                                                                metrics.csv (every model and grid value,
                                                                validation and test)

``model`` is one model or a list (the quick matrix: ``[logreg, cnn2]``): the model is a dimension *inside* each
job, so a second model adds training, not jobs. A cell runs with every listed model it can train
(:func:`~.rows.cell_status`: an algorithm declaring ``model_parts=("features", "head")``, the DANN family, only
with ``cnn2``); ``model_train.<model>`` overrides the common
``train`` for one model (the CNN's rounds at quick scale), the same in every cell of that model's matrix. Each
model gets its own table, heatmap and ranks (:meth:`ShiftMatrixPaper.outputs`).

All seeds, models and grid values of one cell train in one job (:meth:`ShiftMatrixPaper.seeds_per_job`); the
selection per (model, column, seed) on validation is made from ``metrics.csv`` by the outputs (:mod:`.report`),
never on test.
"""

from __future__ import annotations

import functools
import json
import math
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from fedshift.contract import Fit, OutputSpec, Paper, RunSpec, deep_merge
from fedshift.papers.shift_matrix import rows
from fedshift.papers.shift_matrix import section as matrix_section
from fedshift.papers.shift_matrix.section import expand_grid

if TYPE_CHECKING:  # the plan imports no torch: shifts, cells and pandas are imported where they run
    import pandas as pd

    from fedshift.shifts import Shift

#: The three named outputs. The table's target is ``shift_matrix_table``: the name ``shift_matrix`` is the paper's
#: own rule (``workflow/rules/runs.smk`` names one rule per paper after it), which builds all three.
OUTPUTS = ("shift_matrix_table", "shift_matrix_figure", "shift_ranks")


class ShiftMatrixPaper(Paper):
    """Every registered algorithm under every shift, on common data, model and budget (module docstring)."""

    name = "shift_matrix"  # the default; load_paper sets the configured name
    title = "Shift matrix (every algorithm under every shift)"
    schema = "schema.yaml"
    caption = "report.rst"
    output_modules = ("fedshift.papers.shift_matrix.report", "fedshift.papers.shift_matrix.ranking",
                      "fedshift.papers.shift_matrix.aggregate", "fedshift.papers.shift_matrix.tuning_table",
                      "fedshift.papers.shift_matrix.costs", "fedshift.reporting")

    def __init__(self, config: Mapping[str, Any]):
        from fedshift.shifts import load_plugins as load_shift_plugins

        super().__init__(config)
        load_shift_plugins(config.get("shift_plugins"))  # their @register_shift lines first: shifts name kinds
        self._data: dict[tuple[tuple[str, str], ...], Any] = {}

    # ---- configuration ----------------------------------------------------------------------------------------
    @functools.cached_property
    def shifts(self) -> dict[str, Shift]:
        """Experiment name → its shift (:func:`~fedshift.shifts.shift_of`), built once per paper object.

        Those of ``active_shifts`` when given (a config overlay cannot delete keys of ``shifts``), else all.
        """
        from fedshift.shifts import shift_of

        shifts = self.section.get("shifts") or {}
        active = self.section.get("active_shifts") or list(shifts)
        return {name: shift_of(name, shifts[name]) for name in active}

    def algorithms(self) -> list[str]:
        """The rows: ``algorithms`` of the section, or every registered algorithm (``all``), baseline first."""
        from fedshift.algorithms import registry

        chosen = self.section.get("algorithms", "all")
        names = registry.declared_names() if chosen == "all" else list(chosen)
        base = self.section["baseline"]
        return [base] + [n for n in names if n != base] if base in names else names

    @property
    def models(self) -> list[str]:
        """The matrix's models, in order (``model``: one name or a list); the first keeps the unsuffixed outputs."""
        m = self.section["model"]
        return [m] if isinstance(m, str) else list(m)

    def train_of(self, model: str, shift: str | None = None) -> dict[str, Any]:
        """The common round of ``model``'s matrix: ``train`` with ``model_train.<model>`` over it, budget applied.

        With ``shift``, that shift's ``shift_rounds.<shift>.<model>`` (the benchmark scale's rounds per shift,
        ``config/benchmark.yaml``) replaces the rounds, before the budget (the rehearsal's cap still applies).
        """
        from fedshift.budget import apply_budget

        over = dict((self.section.get("model_train") or {}).get(model, {}))
        own = ((self.section.get("shift_rounds") or {}).get(shift) or {}).get(model) if shift is not None else None
        if own is not None:
            over["rounds"] = own
        return apply_budget(deep_merge(dict(self.section["train"]), over), self.config.get("budget"))

    def fixed_of(self, algorithm: str, model: str) -> dict[str, Any]:
        """The algorithm's fixed settings for ``model``: ``fixed.<alg>``, ``model_fixed.<model>.<alg>`` over it.

        E.g. the CNN's PGD steps at quick scale.
        """
        base = (self.section.get("fixed") or {}).get(algorithm, {})
        over = ((self.section.get("model_fixed") or {}).get(model) or {}).get(algorithm, {})
        return deep_merge(dict(base), dict(over))

    def grid(self, algorithm: str) -> list[dict[str, Any]]:
        """The algorithm's hyper-parameter grid (``grids.<algorithm>``, else ``grids.default``; :func:`expand_grid`)."""
        grids = self.section["grids"]
        return expand_grid(grids.get(algorithm, grids["default"]))

    def status(self, algorithm: str, shift: Shift, model: str | None = None) -> str | None:
        """None when the cell runs with ``model`` (default: the first), else its "n/a: ..." (``rows.cell_status``)."""
        model = model or self.models[0]
        # asked per (shift, algorithm, model) by runs(), outputs() and validation: 7,020 times at quick scale
        memo = self.__dict__.setdefault("_status", {})
        key = (algorithm, shift.kind, tuple(sorted(shift.side_information)), model)
        if key not in memo:
            fixed = self.fixed_of(algorithm, model)  # what the run trains with (model_fixed included)
            keys = sorted({k for v in self.grid(algorithm) for k in v} | set(fixed))
            memo[key] = rows.cell_status(algorithm, shift, keys, model)
        return memo[key]

    def hparam_extras(self, algorithm: str) -> dict[str, Any]:
        """Keys besides its factory's that a grid or fixed entry of ``algorithm`` may set, with their JSON schemas.

        The common round, and the keys the algorithm's cell hook reads itself (:func:`.rows.entry_keys`); generic
        validation (``fedshift.validation.check_algorithm_entries``) types every entry with them.
        """
        return rows.entry_keys(algorithm)

    def cell_gap(self, algorithm: str, keys: Sequence[str]) -> str | None:
        """Why ``algorithm`` cannot be built in a cell whose grid value and fixed settings set ``keys``, else None.

        :func:`.rows.keyword_gap`; generic validation (``fedshift.validation.sections``) refuses a grid value that
        would leave its cell n/a silently (FedSR without its ``cmi``), through this method, importing no paper.
        """
        return rows.keyword_gap(algorithm, keys)

    def check_raw_section(self, name: str, section: Mapping[str, Any]) -> None:
        """Participants per round ≤ clients, a baseline the matrix runs, and each shift against its protocol.

        :func:`.section.check_raw_section`.

        Raises
        ------
        ConfigError
            Naming the participation key and the clients it exceeds, ``<name>.baseline``, or
            ``<name>.shifts.<shift>.<key>`` with the protocol's condition.
        """
        matrix_section.check_raw_section(name, section)

    def validate(self) -> None:
        """Grids of equal size, known shift kinds and algorithms, a baseline that runs in every shift.

        :func:`.section.validate`.

        Raises
        ------
        ConfigError
            Naming the key path.
        """
        matrix_section.validate(self)

    def datasets(self) -> list[str]:
        """Every dataset of every shift, when an output is enabled (``outputs: []`` needs none).

        Overrides the contract's derivation from the runs' inputs because the matrix lists its runs whether or not
        an output is enabled (a smoke config switches the outputs off and keeps the rules).
        """
        if not self.section.get("outputs", list(OUTPUTS)):
            return []
        return sorted({d for sh in self.shifts.values() for d in sh.datasets()})

    # ---- runs -------------------------------------------------------------------------------------------------
    def runs(self) -> list[RunSpec]:
        """One run per (shift, algorithm whose cell runs with at least one model, seed).

        ``hparams["models"]``: model → its round (:meth:`train_of`; the rehearsal's ``budget`` caps the rounds),
        for the models the cell runs with; ``hparams["fixed"]``: model → the algorithm's fixed settings
        (:meth:`fixed_of`).
        """
        from fedshift.shifts import shift_module_file

        s = self.section
        out = []
        for name, shift in self.shifts.items():
            for alg in self.algorithms():
                models = {m: self.train_of(m, name) for m in self.models if self.status(alg, shift, m) is None}
                if not models:
                    continue
                hparams = {"shift": dict(shift.params), "models": models,
                           "fixed": {m: self.fixed_of(alg, m) for m in models}, "grid": self.grid(alg),
                           "tuning": {"eta": (s.get("tuning") or {}).get("eta", 3)}}
                runs_shift = (shift_module_file(shift.kind),)  # found by discovery, not by an import
                # the code hash counts the algorithm's module and what it imports: its cell hook lives there
                out += [RunSpec(self.name, name, alg, seed, (alg,), hparams, runs_shift)
                        for seed in matrix_section.seed_ids(s)]
        return out

    def inputs(self, spec: RunSpec) -> dict[str, str]:
        """The shift's prepared datasets, by name."""
        return {d: f"data/prepared/{d}.pt" for d in self.shifts[spec.experiment].datasets()}

    def seeds_per_job(self, experiment: str) -> int:
        """0: every seed (and grid value) of a cell trains in one job, whatever ``jobs.seeds_together`` says."""
        return 0

    def resources(self, spec: RunSpec) -> dict[str, int]:
        """``resources`` of the section (default 3072 MB, 60 min)."""
        res = self.section.get("resources") or {}
        return {"mem_mb": res.get("mem_mb", 3072), "runtime": res.get("runtime", 60)}

    def _images(self, inputs: Mapping[str, str], shift: Shift) -> dict[str, Any]:
        key = tuple(sorted((d, inputs[d]) for d in shift.datasets()))
        if key not in self._data:
            self._data = {key: load_images(dict(key))}  # one cell's data at a time
        return self._data[key]

    def train(self, spec: RunSpec, inputs: Mapping[str, str], *, device: Any, checkpoint: str | None,
              fingerprint: str) -> Fit:
        """One seed of a cell (:meth:`train_many`)."""
        return self.train_many([spec], inputs, device=device, checkpoint=checkpoint, fingerprint=fingerprint)[0]

    def train_many(self, specs: Sequence[RunSpec], inputs: Mapping[str, str], *, device: Any,
                   checkpoint: str | None, fingerprint: str) -> list[Fit]:
        """Every seed of a cell and every model, each tuned over its grid (:func:`~.cells.successive_halving`).

        Per (model, seed) the grid values are tuned on the shift's primary *validation* metric by successive halving
        (``tuning.eta``, default 3; ``tuning.eta: null`` trains every value to the full budget). ``model.pt`` holds,
        per model, the survivor (keys ``<model>/<parameter>``); ``artifacts.pt`` ``{"grid": {"<model>/<g>": params
        or None}, "tuning": {model: {"validation", "rounds", "cpu_seconds"}}}`` (None for an eliminated or diverged
        value; the survivor alone has trained every round). The run's info gives per model ``selected_grid`` and, per
        grid value, ``validation_scores`` and ``validation_losses`` (the tie-break, :func:`.cells.validation_loss`;
        NaN where not scored) and ``rounds_trained``. No checkpoint: a cell trains in seconds to minutes and
        restarts whole.
        """
        import pandas as pd

        from fedshift.core.training import TrainResult
        from fedshift.papers.shift_matrix import cells
        from fedshift.shifts import shift_of

        fits = []
        for spec in specs:
            t0 = time.perf_counter()
            hp = spec.hparams
            shift = shift_of(spec.experiment, hp["shift"])
            instance = shift.instance(self._images(inputs, shift), spec.seed, device)
            primary = shift.metrics()[0]

            def score(module: Any, params: Any) -> float:
                return shift.metric(module, params, instance.validation, role="validation",  # noqa: B023
                                    seed=spec.seed)[primary]  # noqa: B023

            models, history, chosen, info, tuning = {}, [], {}, {}, {}
            for model, train in hp["models"].items():
                tuned = cells.successive_halving(spec.run, instance, spec.seed, model=model, train=train,
                                                 fixed=hp["fixed"][model], grid=hp["grid"], device=device,
                                                 score=score, eta=(hp.get("tuning") or {}).get("eta", 3))
                models |= {f"{model}/{g}": p for g, p in enumerate(tuned.params)}
                history += [{"model": model, **row} for row in tuned.history]
                if tuned.chosen is not None:
                    params = tuned.params[tuned.chosen]
                else:
                    module = cells.model_of(model, instance.image_side, instance.num_labels).to(device)
                    params = {k: v.detach().clone() for k, v in module.named_parameters()}
                chosen |= {f"{model}/{k}": v for k, v in params.items()}
                info[model] = {"rounds": train["rounds"], "selected_grid": tuned.chosen,
                               "validation_scores": tuned.validation, "validation_losses": tuned.validation_loss,
                               "rounds_trained": tuned.rounds,
                               "cpu_seconds": tuned.cpu_seconds, "diverged": tuned.diverged}
                tuning[model] = {"validation": tuned.validation, "rounds": tuned.rounds,
                                 "cpu_seconds": tuned.cpu_seconds}
            # rounds: the run.json's (fedshift.runner): every model's, summed (their seconds_per_round is per
            # round trained in the job); each model's own under models.<model>.rounds
            info = {"rounds": sum(t["rounds"] for t in hp["models"].values()), "grid": hp["grid"],
                    "selection_metric": primary, "models": info,
                    "side_information": sorted(shift.side_information)}
            result = TrainResult(None, [], 0, time.perf_counter() - t0)
            fits.append(Fit(chosen, pd.DataFrame(history), info, result, {"grid": models, "tuning": tuning}))
        return fits

    def evaluate(self, spec: RunSpec, inputs: Mapping[str, str], run_files: Mapping[str, str], *,
                 device: Any) -> pd.DataFrame:
        """Every model's and grid value's metrics on the validation and the test population, and the tuning cost.

        Rows ``shift, kind, model, algorithm, seed, grid, value_of, rounds, role, metric, value, rung_rounds,
        rung_value``: the survivor of the tuning (``rounds`` = the full budget) on both populations; a value
        eliminated by successive halving its primary validation score at the rung it reached (``rounds``), other
        metrics NaN (a diverged value: NaN); one row ``role: tuning, metric: cpu_seconds, grid: -1`` per model (the
        tuning's CPU time). The survivor's primary validation row also gives its own score at the rung before the
        full budget (``rung_value`` at ``rung_rounds``; the tuning's last rung of one value does not score it
        again): two points of the chosen configuration's validation curve, which the report's plateau gate reads
        (:func:`.ranking.validity`). NaN on every other row, and where the tuning had one rung.
        """
        import pandas as pd
        import torch

        from fedshift.papers.shift_matrix import cells
        from fedshift.shifts import shift_of

        hp = spec.hparams
        shift = shift_of(spec.experiment, hp["shift"])
        instance = shift.instance(self._images(inputs, shift), spec.seed, device)
        saved = torch.load(run_files["artifacts"], map_location=device, weights_only=True)
        models, tuning = saved["grid"], saved.get("tuning", {})
        primary = shift.metrics()[0]
        base = {"shift": spec.experiment, "kind": shift.kind, "algorithm": spec.run, "seed": spec.seed}
        out = []
        eta = (hp.get("tuning") or {}).get("eta", 3)
        for model, train in hp["models"].items():
            module = cells.model_of(model, instance.image_side, instance.num_labels).to(device)
            tuned = tuning.get(model, {})
            plan = cells.rungs(train["rounds"], len(hp["grid"]), eta) if eta else [(train["rounds"], len(hp["grid"]))]
            for g, value in enumerate(hp["grid"]):
                params = models.get(f"{model}/{g}")
                rounds = tuned["rounds"][g] if tuned else (train["rounds"] if params is not None else 0)
                rung = ({"rung_rounds": plan[-2][0], "rung_value": tuned["validation"][g]}
                        if params is not None and tuned and len(plan) > 1 and plan[-1][1] == 1 else {})
                for role in ("validation", "test"):
                    pop = getattr(instance, role)
                    got = (shift.metric(module, params, pop, role=role, seed=spec.seed) if params is not None
                           else dict.fromkeys(shift.metrics(), math.nan))
                    if params is None and role == "validation" and tuned:  # eliminated: its score at its last rung
                        got[primary] = tuned["validation"][g]
                    out += [base | {"model": model, "grid": g, "value_of": json.dumps(value, sort_keys=True),
                                    "rounds": rounds, "role": role, "metric": m, "value": v}
                            | (rung if role == "validation" and m == primary else {}) for m, v in got.items()]
            if tuned:
                out.append(base | {"model": model, "grid": -1, "value_of": "", "rounds": 0, "role": "tuning",
                                   "metric": "cpu_seconds", "value": tuned["cpu_seconds"]})
        return pd.DataFrame(out)

    # ---- outputs ------------------------------------------------------------------------------------------------
    def columns(self) -> list[dict[str, str]]:
        """The matrix's columns: per shift, its ``columns`` (default: the shift's own, :meth:`Shift.columns`)."""
        out = []
        for name, shift in self.shifts.items():
            for metric in shift.params.get("columns") or shift.columns():
                out.append({"shift": name, "metric": metric, "label": f"{name}: {metric}"})
        return out

    def outputs(self) -> list[OutputSpec]:
        """The three named outputs (those of ``outputs``), every run's metrics as inputs.

        ``shift_matrix_table`` (csv, md, tex, and runs: ``shift_matrix_runs.csv``, the per-seed values,
        :func:`.report.per_seed`), ``shift_matrix_figure`` (csv, pdf, png), ``shift_ranks`` (csv, md,
        pdf, png), for the first model; every further model ``m`` adds the same files with ``_m`` before the
        suffix, under the keys ``<key>_m`` (one matrix per model). Their params name the ``scale`` of the
        configuration (quick, benchmark, paper, ...), which the Markdown and the caption state.
        """
        enabled = self.section.get("outputs", list(OUTPUTS))
        runs = self.runs()
        inputs = [s.file("metrics") for s in runs]
        shifts = self.shifts
        na = {m: {alg: {name: r for name, sh in shifts.items() if (r := self.status(alg, sh, m)) is not None}
                  for alg in self.algorithms()} for m in self.models}
        s = self.section
        params = {"columns": self.columns(), "algorithms": self.algorithms(), "na": na, "baseline": s["baseline"],
                  "seeds": len(matrix_section.seed_ids(s)), "model": ", ".join(self.models), "models": self.models,
                  "train": {m: self.train_of(m) for m in self.models}, "grid_size": s["grid_size"],
                  "grids": {a: self.grid(a) for a in self.algorithms()}, "confidence": s.get("confidence", 0.95),
                  "copies": self.baseline_copies(), "plateau_tolerance": s.get("plateau_tolerance"),
                  "chance": {name: 1.0 / sh.num_labels for name, sh in shifts.items()},
                  "image_side": {name: sh.image_side for name, sh in shifts.items()},
                  "scale": str(self.config.get("scale", "paper"))}
        t, f = f"results/tables/{self.name}", f"results/figures/{self.name}"
        files = {"shift_matrix_table": {"csv": f"{t}/shift_matrix.csv", "md": f"{t}/shift_matrix.md",
                                        "tex": f"{t}/shift_matrix.tex", "runs": f"{t}/shift_matrix_runs.csv"},
                 "shift_matrix_figure": {"csv": f"{t}/shift_matrix_delta.csv", "pdf": f"{f}/shift_matrix_delta.pdf",
                                         "png": f"{f}/shift_matrix_delta.png"},
                 "shift_ranks": {"csv": f"{t}/shift_ranks.csv", "md": f"{t}/shift_ranks.md",
                                 "pdf": f"{f}/shift_ranks.pdf", "png": f"{f}/shift_ranks.png"}}
        for n in files:
            files[n] |= {f"{k}_{m}": _suffixed(f, m) for m in self.models[1:] for k, f in list(files[n].items())}
        labels = {"shift_matrix_table": "Table", "shift_matrix_figure": "Figure (Δ vs baseline)",
                  "shift_ranks": "Figure (ranks)"}
        return [OutputSpec(n, files[n], inputs, labels[n], params) for n in OUTPUTS if n in enabled]

    def baseline_copies(self) -> dict[str, list[str]]:
        """Per algorithm of ``baseline_copies`` (and of the matrix), the shifts where it is the baseline renamed.

        ``always``: every shift; ``equal_sizes``: the shifts whose clients hold equal numbers of rows (no ``sizes``
        draw: FedNova's τ_i are then all equal and its round is FedAvg's).
        """
        out = {}
        for alg, when in (self.section.get("baseline_copies") or {}).items():
            if alg in self.algorithms():
                out[alg] = [n for n, sh in self.shifts.items() if when == "always" or not sh.params.get("sizes")]
        return out

    def make_output(self, spec: OutputSpec, inputs: Sequence[str], files: Mapping[str, str]) -> None:
        """Write one output per model from the runs' tidy metrics (:mod:`fedshift.papers.shift_matrix.report`)."""
        import pandas as pd

        from fedshift.papers.shift_matrix import report

        metrics = pd.concat([pd.read_csv(p) for p in inputs], ignore_index=True) if inputs else pd.DataFrame()
        models = list(spec.params["models"])
        for i, m in enumerate(models):
            own = {k: f for k, f in files.items() if "_" not in k} if i == 0 else {
                k[: -len(m) - 1]: f for k, f in files.items() if k.endswith(f"_{m}")}
            own_rows = metrics[metrics["model"] == m] if "model" in metrics else metrics
            report.write(spec.name, own_rows, dict(spec.params) | {"na": spec.params["na"][m], "model": m,
                                                              "train": spec.params["train"][m]}, own)


def load_images(paths: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """The prepared datasets of a cell (:func:`fedshift.shifts.load_images`, imported when a job trains)."""
    from fedshift.shifts import load_images as load

    return load(paths)


def _suffixed(path: str, model: str) -> str:
    """``dir/name.ext`` → ``dir/name_<model>.ext`` (a further model's output file)."""
    stem, dot, ext = path.rpartition(".")
    return f"{stem}_{model}{dot}{ext}"
