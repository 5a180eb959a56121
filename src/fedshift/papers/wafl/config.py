"""WAFL configuration (arXiv:2206.01432): the section's merging, cross-key checks, experiments, run ids and runs.

Every function reads the ``wafl:`` section in its merged form (:func:`merged_section`: ``defaults:`` merged into every
experiment, Table 2's ``protocols.official`` over an experiment that asks for it). Part of
:mod:`fedshift.papers.wafl`; :class:`fedshift.papers.wafl.paper.WaflPaper` turns these into the contract's specs.

Fig. 4's γ: with ``fig4_gammas`` an experiment trains WAFL at each candidate γ and the figure takes, per seed
and per fraction of shifted clients, the γ with the best validation accuracy ([ours]; the paper says γ "needs to
be tuned" for every scenario, §6, without saying on what data); WAFL at ``compare_gamma`` is always trained too
(the untuned "fixed" row). ``fig4_grid`` gives FedPGM's (ε, step) and FedFGSM's ε candidate lists of the same size
as ``fig4_gammas``, chosen the same way (an equal tuning budget, so that no method wins by more candidates); their configured
``adversarial_training`` run stays the fixed row.

Algorithm ids (run ids): ``fedavg``, ``fedpgm``, ``fedfgsm``, ``wafl~<γ>`` (γ formatted with ``%g``) and the
baselines' grid candidates ``fedpgm~eps<ε>_step<α>[_steps<K>]`` / ``fedfgsm~eps<ε>`` (:func:`baseline_id`; a
candidate equal to ``adversarial_training`` is the plain id). Labels: a run's γ travels as
``hparams["perturb"]["gamma"]`` and a candidate's ε / step as ``hparams["perturb"]`` (:func:`resolve`).
"""

from __future__ import annotations

from typing import Any

from fedshift.budget import apply_budget
from fedshift.errors import ConfigError
from fedshift.contract import deep_merge
from fedshift.contract import experiments_of as merged_experiments
from fedshift.seeds import seed_list

__all__ = ["OUTPUTS", "BASELINES", "PROTOCOLS", "merged_section", "figure_experiments", "check_section",
           "active_experiments", "algorithm_runs", "algorithm_ids", "runs_of", "curve_algorithm",
           "resolve_run", "resolve", "parse_algorithm", "gamma_id", "baseline_id", "fig4_choices",
           "registered_algorithm"]

#: Named outputs of the paper (the rule names are ``wafl_<name>``).
OUTPUTS = ("fig2", "fig3", "fig4", "fig5", "table2")
BASELINES = ("fedavg", "fedpgm", "fedfgsm")
#: Table 2's protocols (an experiment's ``protocol``): the paper's text (100 label-skewed source clients) or the
#: official code's domain-adaptation commands (the section's ``protocols.official`` settings merged over it)
PROTOCOLS = ("text", "official")
#: kinds that are not themselves registered names: WAFL's FedAvg is the robust trainer without a perturbation
REGISTERED = {"fedavg": "robust_fedavg"}


def registered_algorithm(kind: str) -> str:
    """The registered algorithm (:mod:`fedshift.algorithms.registry`) that trains a run of this ``kind``."""
    return REGISTERED.get(kind, kind)


def gamma_id(gamma: float) -> str:
    """``wafl~<γ>`` with γ in ``%g`` form (``wafl~0.5``)."""
    return f"wafl~{float(gamma):g}"


def _attack_of(kind: str, attack: dict[str, Any]) -> dict[str, Any]:
    """The perturbation settings a baseline run uses: FedPGM's ε, step, steps; FedFGSM's ε only."""
    return {"eps": float(attack["eps"])} if kind == "fedfgsm" else {k: attack[k] for k in ("eps", "step", "steps")}


def baseline_id(kind: str, attack: dict[str, Any] | None, default: dict[str, Any]) -> str:
    """Run id of a baseline run: the plain kind at the experiment's ``adversarial_training``, else a labelled id.

    ``fedpgm~eps0.3_step0.03`` (``_steps<K>`` when K differs) or ``fedfgsm~eps0.2`` (numbers in ``%g`` form).

    Parameters
    ----------
    kind : {"fedavg", "fedpgm", "fedfgsm"}
    attack : dict or None
        A ``fig4_grid`` candidate (``eps``, ``step``, optional ``steps``), merged over ``default``; None: the default.
    default : dict
        The experiment's ``adversarial_training`` (``eps``, ``step``, ``steps``).

    Returns
    -------
    str
        A run id (one folder name; :attr:`fedshift.contract.RunSpec.run`).
    """
    if kind == "fedavg" or attack is None:
        return kind
    mine, base = _attack_of(kind, {**default, **attack}), _attack_of(kind, default)
    if mine == base:
        return kind
    if kind == "fedfgsm":
        return f"fedfgsm~eps{mine['eps']:g}"
    steps = f"_steps{mine['steps']}" if mine["steps"] != base["steps"] else ""
    return f"fedpgm~eps{float(mine['eps']):g}_step{float(mine['step']):g}{steps}"


def parse_algorithm(algorithm: str) -> tuple[str, float | None]:
    """``wafl~0.5`` -> ("wafl", 0.5); ``fedavg`` -> ("fedavg", None).

    Raises
    ------
    ConfigError
        For an unknown kind or a γ that is not a non-negative number.
    """
    kind, _, g = algorithm.partition("~")
    if kind == "wafl":
        try:
            gamma = float(g)
        except ValueError:
            raise ConfigError(f"algorithm {algorithm!r}: γ {g!r} is not a number") from None
        if gamma < 0:
            raise ConfigError(f"algorithm {algorithm!r}: γ must be >= 0")
        return kind, gamma
    if kind in BASELINES and not g:
        return kind, None
    raise ConfigError(f"unknown algorithm {algorithm!r}; known: {BASELINES} and wafl~<gamma>")


def merged_section(section: dict[str, Any]) -> dict[str, Any]:
    """The ``wafl:`` section with its ``defaults:`` merged into every experiment (and dropped).

    An experiment with ``protocol: official`` then gets the section's ``protocols.official`` settings merged over
    it (they win: one key switches Table 2 to the official code's commands). Every function of this module reads
    experiments in this merged form (:func:`fedshift.contract.experiments_of`).

    Parameters
    ----------
    section : dict
        The ``wafl:`` section as configured (schema-checked); not modified.

    Returns
    -------
    dict
        Its keys but ``defaults``, ``experiments`` merged.

    Raises
    ------
    ConfigError
        For a ``protocol`` that is not one of :data:`PROTOCOLS`, or ``official`` without ``protocols.official``,
        naming the key path.
    """
    out = {k: v for k, v in deep_merge(section, {}).items() if k != "defaults"}
    exps = merged_experiments(section)
    for name, e in exps.items():
        protocol = e.get("protocol", "text")
        if protocol not in PROTOCOLS:
            raise ConfigError(f"config error at wafl.experiments.{name}.protocol: {protocol!r} is not one of "
                              f"{list(PROTOCOLS)}")
        if protocol != "text":
            if protocol not in (section.get("protocols") or {}):
                raise ConfigError(f"config error at wafl.protocols: experiment {name!r} asks for protocol "
                                  f"{protocol!r}, which has no settings here")
            exps[name] = deep_merge(e, section["protocols"][protocol])
    out["experiments"] = exps
    return out


def figure_experiments(section: dict[str, Any], name: str) -> list[str]:
    """The experiments one output reads, in its ``figures:`` order; none when the output is not enabled.

    Parameters
    ----------
    section : dict
        The merged ``wafl:`` section (:func:`merged_section`).
    name : str
        An output of :data:`OUTPUTS` (``"fig4"``, ``"table2"``).

    Returns
    -------
    list of str
        ``figures.<name>`` when ``name`` is in ``outputs``, else ``[]``.
    """
    return list(section["figures"].get(name, [])) if name in section["outputs"] else []


def check_section(section: dict[str, Any]) -> None:
    """Cross-reference checks of the ``wafl:`` section (after its JSON schema).

    Raises
    ------
    ConfigError
        A figure naming an unknown experiment; Table 2 naming an experiment without a target or Figs. 2–5
        one with a target; a shift fraction of Fig. 3 / Fig. 5 not among the experiment's fractions; a
        checkpoint interval that is not a multiple of ``log_every``; more clients per round than clients;
        ``fig4_gammas`` without a validation split (``partition.validation_fraction`` > 0); a dataset without a
        registry entry is checked by the workflow (``datasets``).
    """
    exps = section["experiments"]
    for fig in OUTPUTS:
        for e in section["figures"].get(fig, []):
            where = f"wafl.figures.{fig}"
            if e not in exps:
                raise ConfigError(f"config error at {where}: unknown experiment {e!r}; known: {sorted(exps)}")
            has_target = exps[e].get("target") is not None
            if (fig == "table2") != has_target:
                raise ConfigError(f"config error at {where}: experiment {e!r} "
                                  + ("has no target dataset" if fig == "table2" else "is a domain-adaptation one"))
    for name, e in exps.items():
        base = f"wafl.experiments.{name}"
        tr = e["train"]
        if tr["checkpoint_every"] % tr["log_every"]:
            raise ConfigError(f"config error at {base}.train.checkpoint_every: must be a multiple of log_every")
        if tr["clients_per_round"] > e["partition"]["clients"]:
            raise ConfigError(f"config error at {base}.train.clients_per_round: {tr['clients_per_round']} > "
                              f"{e['partition']['clients']} clients")
        for key in ("fig3_fraction", "fig5_fraction"):
            if key in e and e[key] not in e["shift"]["fractions"]:
                raise ConfigError(f"config error at {base}.{key}: {e[key]} is not in shift.fractions "
                                  f"{e['shift']['fractions']}")
        if e.get("fig4_gammas") and not e["partition"].get("validation_fraction", 0):
            raise ConfigError(f"config error at {base}.fig4_gammas: choosing γ needs a validation split "
                              "(partition.validation_fraction > 0)")
        for kind, grid in (e.get("fig4_grid") or {}).items():
            if len(grid) != len(e.get("fig4_gammas") or []):
                raise ConfigError(f"config error at {base}.fig4_grid.{kind}: {len(grid)} candidates where "
                                  f"fig4_gammas has {len(e.get('fig4_gammas') or [])}; an equal tuning budget needs "
                                  "as many")
            ids = [baseline_id(kind, a, e["adversarial_training"]) for a in grid]
            if len(set(ids)) != len(ids):
                raise ConfigError(f"config error at {base}.fig4_grid.{kind}: repeated candidates {ids}")
        if e["partition"].get("whole_domain") and not e.get("target"):
            raise ConfigError(f"config error at {base}.partition.whole_domain: whole-domain clients are Table 2's "
                              "official protocol; the experiment has no target domain")
        if e["partition"].get("whole_domain") and e["partition"]["clients"] != 1:
            raise ConfigError(f"config error at {base}.partition.clients: a whole-domain partition has one client "
                              f"per source domain (1), not {e['partition']['clients']}")
        if name in figure_experiments(section, "fig5") and not tr.get("snapshot_every", 0):
            raise ConfigError(f"config error at {base}.train.snapshot_every: Fig. 5 needs snapshots (> 0)")



def active_experiments(section: dict[str, Any]) -> list[str]:
    """Experiments used by the enabled outputs, sorted by name (each trains, partitions and evaluates).

    Not :func:`fedshift.contract.experiments_of` (which merges ``defaults:``): this lists names only, of the merged
    section (:func:`merged_section`).
    """
    return sorted({e for fig in OUTPUTS for e in figure_experiments(section, fig)})


def algorithm_runs(section: dict[str, Any], experiment: str,
                   figure: str | None = None) -> dict[str, tuple[str, float | None, dict[str, Any] | None]]:
    """The runs one figure (or, with None, all enabled figures) needs of an experiment: run id → (kind, γ, attack).

    Figs. 2–3: WAFL at every γ of ``gammas`` (Fig. 3 also FedAvg); Fig. 4: FedAvg, FedPGM, FedFGSM and WAFL at
    ``compare_gamma`` (the fixed settings), WAFL at every γ of ``fig4_gammas`` and FedPGM / FedFGSM at every
    candidate of ``fig4_grid`` (chosen on validation by the figure, :func:`fig4_choices`); Fig. 5: WAFL at
    ``convergence_gamma``; Table 2: FedAvg and WAFL at ``compare_gamma``. γ is the configured number (a float,
    never parsed back from the run id ``wafl~<γ>``); ``attack`` is a grid candidate's settings (None: the
    experiment's ``adversarial_training``).

    Raises
    ------
    ConfigError
        If two different γ of the experiment give one run id (``%g`` keeps 6 significant digits).
    """
    e = section["experiments"][experiment]
    figs = [figure] if figure else [f for f in OUTPUTS if experiment in figure_experiments(section, f)]
    out: list[tuple[str, float | None, dict[str, Any] | None]] = []
    for f in figs:
        if f in ("fig2", "fig3"):
            out += [("wafl", float(g), None) for g in e["gammas"]] + ([("fedavg", None, None)] if f == "fig3" else [])
        elif f == "fig4":
            out += [(k, None, None) for k in BASELINES] + [("wafl", float(e["compare_gamma"]), None)]
            out += [("wafl", float(g), None) for g in e.get("fig4_gammas") or []]
            for kind, grid in (e.get("fig4_grid") or {}).items():
                out += [(kind, None, _attack_of(kind, {**e["adversarial_training"], **a})) for a in grid]
        elif f == "fig5":
            out.append(("wafl", float(e["convergence_gamma"]), None))
        elif f == "table2":
            out += [("fedavg", None, None), ("wafl", float(e["compare_gamma"]), None)]
    runs: dict[str, tuple[str, float | None, dict[str, Any] | None]] = {}
    for kind, gamma, attack in out:
        rid = gamma_id(gamma) if kind == "wafl" else baseline_id(kind, attack, e["adversarial_training"])
        if rid == kind:
            attack = None  # the configured adversarial_training
        if runs.setdefault(rid, (kind, gamma, attack)) != (kind, gamma, attack):
            raise ConfigError(f"config error at wafl.experiments.{experiment}: γ {runs[rid][1]} and {gamma} give "
                              f"one run id {rid!r}")
    return runs


def fig4_choices(section: dict[str, Any], experiment: str) -> dict[str, dict[str, Any]]:
    """What Fig. 4 compares per algorithm: the fixed run and the candidates chosen on validation.

    Returns
    -------
    dict
        kind → ``{"fixed": run id, "candidates": [run ids, weakest perturbation first]}``: WAFL's fixed run is
        ``compare_gamma``'s and its candidates ``fig4_gammas`` by decreasing γ; FedPGM's / FedFGSM's fixed run is
        ``adversarial_training``'s and its candidates ``fig4_grid``'s by increasing (ε, step, steps); FedAvg has no
        candidates. A tie on validation goes to the earlier (weaker) candidate, the one closer to FedAvg.
    """
    e = section["experiments"][experiment]
    out: dict[str, dict[str, Any]] = {"fedavg": {"fixed": "fedavg", "candidates": []}}
    gammas = sorted({float(g) for g in e.get("fig4_gammas") or []}, reverse=True)
    out["wafl"] = {"fixed": gamma_id(e["compare_gamma"]), "candidates": [gamma_id(g) for g in gammas]}
    for kind in ("fedpgm", "fedfgsm"):
        grid = [_attack_of(kind, {**e["adversarial_training"], **a}) for a in (e.get("fig4_grid") or {}).get(kind, [])]
        grid.sort(key=lambda a: (a["eps"], a.get("step", 0.0), a.get("steps", 0)))
        out[kind] = {"fixed": kind, "candidates": [baseline_id(kind, a, e["adversarial_training"]) for a in grid]}
    return out


def algorithm_ids(section: dict[str, Any], experiment: str, figure: str | None = None) -> list[str]:
    """Run ids one figure (or, with None, all enabled figures) needs of an experiment (:func:`algorithm_runs`)."""
    return list(algorithm_runs(section, experiment, figure))


def curve_algorithm(section: dict[str, Any], experiment: str) -> str:
    """The run of an experiment whose snapshots Fig. 5 evaluates (WAFL at ``convergence_gamma``)."""
    return gamma_id(section["experiments"][experiment]["convergence_gamma"])


def runs_of(section: dict[str, Any], experiment: str, figure: str | None = None) -> list[tuple[str, int]]:
    """(algorithm id, seed) of every training job of an experiment (for one figure, or all enabled)."""
    seeds = seed_list(section["experiments"][experiment]["seeds"])
    return [(a, s) for a in algorithm_ids(section, experiment, figure) for s in seeds]


def resolve_run(section: dict[str, Any], experiment: str, algorithm: str,
                budget: dict[str, Any] | None = None) -> dict[str, Any]:
    """:func:`resolve` of a run given by its id (``wafl~0.5``, ``fedavg``): for tests and tools.

    The workflow never parses ids back: :class:`fedshift.papers.wafl.paper.WaflPaper` resolves every run from
    :func:`algorithm_runs`' (kind, γ).

    Raises
    ------
    ConfigError
        For an unknown experiment or algorithm id.
    """
    if experiment in section["experiments"] and algorithm in (runs := algorithm_runs(section, experiment)):
        kind, gamma, attack = runs[algorithm]
        return resolve(section, experiment, kind, gamma, budget, attack)
    kind, gamma = parse_algorithm(algorithm)
    return resolve(section, experiment, kind, gamma, budget)


def resolve(section: dict[str, Any], experiment: str, kind: str, gamma: float | None,
            budget: dict[str, Any] | None = None, attack: dict[str, Any] | None = None) -> dict[str, Any]:
    """Everything a training run of (experiment, kind, γ) depends on: its ``hparams`` (:class:`RunSpec`).

    ``budget`` (the configuration's top-level ``budget``, e.g. the rehearsal's ``{max_rounds: 2}``) caps
    ``train.rounds`` and its periods (:func:`fedshift.budget.apply_budget`); None leaves them as configured.
    ``attack``: a FedPGM / FedFGSM candidate of ``fig4_grid`` (:func:`algorithm_runs`) replacing the experiment's
    ``adversarial_training``; None keeps it.

    Returns
    -------
    dict
        ``experiment``, ``algorithm`` (the run id), ``kind``, the experiment's ``dataset``, ``target``,
        ``preprocess``, ``model``, ``partition``, ``train`` (budget applied) and ``perturb``: WAFL's
        ``{"gamma": γ, inner_lr, inner_steps, cost, step_rule}``, FedPGM's ``{eps, step, steps}``, FedFGSM's
        ``{eps}``, FedAvg's ``{}`` — the keyword arguments of the registered algorithm's factory.

    Raises
    ------
    ConfigError
        For an unknown experiment or kind, or a WAFL run without γ.
    """
    if experiment not in section["experiments"]:
        raise ConfigError(f"unknown WAFL experiment {experiment!r}")
    if kind not in BASELINES + ("wafl",) or (kind == "wafl") != (gamma is not None):
        raise ConfigError(f"WAFL experiment {experiment!r}: unknown run kind {kind!r} with γ {gamma!r}")
    e = section["experiments"][experiment]
    perturb: dict[str, Any] = {}
    if attack is not None and kind not in ("fedpgm", "fedfgsm"):
        raise ConfigError(f"WAFL experiment {experiment!r}: only FedPGM and FedFGSM take attack settings, not {kind!r}")
    adv = {**e["adversarial_training"], **(attack or {})}
    if kind == "wafl":
        perturb = {"gamma": float(gamma), **e["wafl"]}
    elif kind == "fedpgm":
        perturb = {k: adv[k] for k in e["adversarial_training"]}
    elif kind == "fedfgsm":
        perturb = {"eps": adv["eps"]}
    keys = ("dataset", "target", "preprocess", "model", "partition", "train")
    algorithm = gamma_id(gamma) if kind == "wafl" else baseline_id(kind, attack, e["adversarial_training"])
    out = {"experiment": experiment, "algorithm": algorithm, "kind": kind, **{k: e.get(k) for k in keys},
           "perturb": perturb}
    out["train"] = apply_budget(out["train"], budget)
    return out

