r"""Seeds per headline claim from a pilot run: the power calculation behind ``config/decisive.yaml``.

Reads a pilot run's tables (the quick scale: ``results/tables/...``, the per-seed values every claim's interval is
computed from, through :func:`fedshift.claims.claim_sample`) and benchmark files (``results/benchmarks/...``, CPU
seconds per job), and decides, before the decisive run and once (a fixed design, so that its 95 % intervals keep
their coverage), how many paired seeds each claim gets:

1. **clear** — the smallest n at which the claim's 95 % interval (the one :mod:`fedshift.claims` computes: Student
   t over paired seeds, Welch for two summarised cells) excludes the test's nearest decision boundary with
   probability ``power`` (default 0.8), were the true mean and standard deviation the pilot's. For a one-sample
   (paired) t interval this is the power of the t test of H₀: x = b at level 0.05, computed exactly from the
   noncentral t distribution (Cohen, 1988, *Statistical Power Analysis for the Behavioral Sciences*, ch. 2),
   counting the tail on the pilot mean's side only; large-n check: Guenther (1981), The American Statistician
   35(4), 243–244 (tests/unit/test_claims_power.py). ``--power 0`` is the literal rule "the interval clears the
   boundary at the pilot's mean and sd" (t₀.₉₇₅,ₙ₋₁ · s / √n < d), which clears in about half the replications.
2. **bound** — where no n ≤ the cap clears (the pilot mean sits on the boundary), the smallest n whose expected
   half-width is at most ``--half-width`` points (default 1): the verdict will be *inconclusive* with that bound.
3. Claims that are deterministic (``exact``) or need data the mirror lacks get no seeds. Where the pilot has no
   values or one run (no spread), a documented earlier run of the same settings stands in (:data:`PRIORS`, each
   with its source in the README); else a row with one pilot run borrows the largest sd of its experiment's other
   rows, and a row without any pilot value gets ``no_pilot_seeds`` (rule *no pilot*).

An experiment trains the largest n of the claims that read it. Its CPU cost per extra seed is the pilot's CPU
seconds of its training and evaluation jobs (Snakemake ``benchmark:`` files, column ``cpu_time``) divided by the
pilot's seeds, plus a process start per new job; seeds the pilot already trained cost nothing (their run ids and
bytes are the same: ``--check-reuse``). The decisive run from a fresh clone trains the pilot too, so the budget
``--budget-cpu-hours`` (default 4) holds the pilot's CPU (every benchmark file of it), ``--overhead`` (default 10 %)
of everything for the jobs without benchmark files (data, partitions, tables) and the extra seeds. If the total
exceeds it, seeds are taken back one at a time: first the seeds that only rows which cannot clear want (rules
*bound*, *no spread*, *no pilot*), most expensive first; then the seed that adds the least expected number of
decided rows (the sum of its experiment's rows' P(clear) gains) per CPU-second, down to the pilot's. The resulting
n is the claim's cap, written beside it.

Usage (from the repository root, after the pilot ``snakemake --cores 2 --configfile config/quick.yaml``)::

    python benchmarks/claims_power.py --pilot . --data-mirror ../shared/data --out config/decisive.yaml
    python benchmarks/claims_power.py --check-reuse     # quick's run ids keep their hyper-parameters under decisive

While the pilot is still running, ``--prior-claims README.md`` takes the rows it has not tabulated yet from the
README's generated quick-scale block, and ``--pilot-cpu-hours`` states the pilot's CPU (its benchmark files are
incomplete); the overlay's header records the command.

Issue 47: a row is decided by more than its test (:func:`fedshift.claims.effect_verdict`): it is planned against the
edge it can clear first (:func:`decision_distance`: the test's boundary, the paper's value less its size tolerance,
or the equivalence margin). ``--protect fedmm`` keeps a paper's seeds out of the budget's reach (the header states
any overrun); ``--half-width-for fedmm=5`` sets its rule *bound* target; ``--replicate-from <claims.csv>`` plans the
rows a decided run marked *could flip* for the √2-wider replication interval on the edge that decided them; and
``--second-papers`` projects the CPU of the second run under ``portable_cpu`` (``--portable-factor``). From the
last decisive results (the decisive tree as the pilot)::

    python benchmarks/claims_power.py --pilot <decisive tree> --configs config/quick.yaml config/decisive.yaml \
        --data-mirror ../shared/data --budget-cpu-hours 9.5 --protect fedmm --half-width-for fedmm=5 \
        --replicate-from <decisive tree>/results/tables/claims.csv --second-papers fedmm,fedpals,wafl --out FILE

The pilot's standard deviation from 3–5 seeds is itself uncertain (Browne, 1995, "On the use of a pilot sample for
sample size determination", Statistics in Medicine 14, 1933–1940): ``--sd-ucl 0.8`` plans with the 80 % upper
confidence limit of the pilot's sd instead of the point estimate, at several times the cost.
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml
from scipy import stats

from fedshift.claims import NoRowsError, boundaries, claim_sample, paper_number, size_tolerance

ROOT = Path(__file__).resolve().parents[1]

# ---- the statistics ---------------------------------------------------------------------------------------------


def t_half_width(n: int, sd: float, confidence: float = 0.95) -> float:
    """Half-width of the Student-t interval of a mean of n values with standard deviation sd (n ≥ 2)."""
    return float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * sd / math.sqrt(n)


def welch_half_width(n: int, sd_a: float, sd_b: float, confidence: float = 0.95) -> float:
    """Half-width of Welch's interval of mean(a) − mean(b), n runs on each side (Welch–Satterthwaite df)."""
    va, vb = sd_a**2 / n, sd_b**2 / n
    if va + vb == 0:
        return 0.0
    df = (va + vb) ** 2 / (va**2 / (n - 1) + vb**2 / (n - 1))
    return float(stats.t.ppf(0.5 + confidence / 2, df)) * math.sqrt(va + vb)


def clear_probability(n: int, distance: float, sd: float, df: float | None = None,
                      confidence: float = 0.95, widen: float = 1.0) -> float:
    """Probability that the 95 % t interval of n values excludes a boundary at ``distance`` from the true mean.

    The interval excludes the boundary on the mean's side when T = (x̄ − b) / (s/√n) exceeds t₀.₉₇₅,df; T follows
    the noncentral t distribution with df degrees of freedom and noncentrality d√n / σ (Cohen, 1988, ch. 2).
    ``df`` defaults to n − 1 (one sample, or paired differences); for Welch's interval pass its df and the sd of
    one difference (√(σa² + σb²)). ``widen`` (e.g. √2): the interval widened by that factor about its mean (the
    replication interval of :func:`fedshift.claims.replication_robust`) must exclude it: T > widen · t₀.₉₇₅,df.
    """
    if sd == 0:
        return 1.0 if distance > 0 else 0.0
    df = n - 1 if df is None else df
    crit = float(stats.t.ppf(0.5 + confidence / 2, df)) * widen
    return float(stats.nct.sf(crit, df, distance * math.sqrt(n) / sd))


def decision_distance(mean: float, test: Mapping[str, Any], paper_value: float | None = None,
                      effect: Mapping[str, Any] | None = None, only: str = "") -> tuple[float, float, str]:
    """How far a mean lies from the nearest edge whose exclusion decides the row, the edge, and which decision.

    An interval decides a row (:func:`fedshift.claims.effect_verdict`) when it excludes the test's nearest boundary
    (*direction*: reproduced, not reproduced, or a size verdict), lies wholly short of the paper's value less its
    size tolerance (*size*: smaller than claimed), or lies inside the equivalence margin (*equivalence*). Each
    option alone decides, so the farthest edge on the mean's side is the one an interval clears first; the
    probability of clearing it is a lower bound of the row's probability of a decision (for *equivalence* a
    one-sided approximation, optimistic by at most the other side's tail where the mean sits near 0).

    ``only``: the one decision to plan for (a row that must keep its verdict under replication keeps it only on
    the same side of the edge that decided it: :data:`DECIDED_BY`); empty: the farthest.

    Returns
    -------
    distance, edge : float
    decision : str
        ``direction``, ``size`` or ``equivalence``.
    """
    bounds = boundaries(test)
    b = min(bounds, key=lambda v: abs(mean - v))
    options = [(abs(mean - b), b, "direction")]
    effect = effect or {}
    if paper_value:
        tol = size_tolerance(effect.get("size_tolerance"), paper_value) or 0.0
        edge = paper_value - tol if paper_value > 0 else paper_value + tol
        if (paper_value > 0 and mean < edge) or (paper_value < 0 and mean > edge):
            options.append((abs(edge - mean), edge, "size"))
    margin = effect.get("margin")
    if margin is not None and abs(mean) < float(margin):
        options.append((float(margin) - abs(mean), math.copysign(float(margin), mean), "equivalence"))
    if only:
        options = [o for o in options if o[2] == only] or options[:1]
    return max(options, key=lambda o: o[0])


#: The edge whose side keeps each verdict (a row planned to keep its verdict under replication).
DECIDED_BY = {"reproduced": "direction", "not reproduced": "direction", "smaller than claimed": "size",
              "equivalent to zero": "equivalence"}


def sd_upper_limit(sd: float, n: int, level: float) -> float:
    """Upper ``level`` confidence limit of σ from a sample sd of n values (Browne, 1995).

    s · √((n − 1) / χ²₁₋level,n−1): the chi-square interval of a normal sample's variance.
    """
    return sd * math.sqrt((n - 1) / float(stats.chi2.ppf(1 - level, n - 1)))


@dataclass
class Plan:
    """The planned seeds of one claim row (a claim, or one group of its ``each``), with the calculation."""

    claim: str
    experiments: list[str]
    n_pilot: int
    rule: str                       # clear | bound | pilot (already decided) | exact | no spread | prior | needs data
    n: int                          # seeds wanted (before the budget)
    mean: float = float("nan")
    sd: float = float("nan")
    boundary: float = float("nan")
    distance: float = float("nan")
    half_width: Callable[[int], float] | None = field(default=None, repr=False)
    power_at: Callable[[int], float] | None = field(default=None, repr=False)
    source: str = "pilot"
    note: str = ""


def plan_claim(claim: str, experiments: list[str], sample: Mapping[str, Any] | None, test: Mapping[str, Any], *,
               n_pilot: int, cap: int, power: float, half_width: float, sd_ucl: float | None = None,
               exact: bool = False, sd_fallback: float | None = None, confidence: float = 0.95,
               paper_value: float | None = None, effect: Mapping[str, Any] | None = None,
               widen: float = 1.0, keep: str = "") -> Plan:
    """Seeds one claim row needs: the rules *clear*, *bound*, *exact* and *no spread* of the module docstring.

    Parameters
    ----------
    claim : str
        The row's name (``id[group]``).
    experiments : list of str
        The config keys of the experiments whose seeds the row reads (their ``seeds`` are set to the plan).
    sample : dict or None
        :func:`fedshift.claims.claim_sample` of the pilot's table (None: not built at the pilot).
    test : dict
        The claim's test (its boundaries: :func:`fedshift.claims.boundaries`).
    paper_value, effect : optional
        The paper's number for the row and the claim's ``effect``: the edges of the size verdicts
        (:func:`decision_distance`); without them the test's boundary alone.
    widen : float
        Plan for the interval widened by this factor (√2: the replication interval, for a row whose verdict could
        flip on another CPU); 1: the interval itself.
    keep : str
        The verdict the row must keep (with ``widen``): plan on the edge that decides it (:data:`DECIDED_BY`).
    n_pilot : int
        Seeds the pilot trained (never planned below: they are already paid for).
    cap : int
        Most seeds planned for a row.
    power : float
        Probability, at the pilot's mean and sd, that the interval clears the boundary (rule *clear*).
    half_width : float
        Target half-width (the quantity's units) where no n ≤ cap clears (rule *bound*).
    sd_ucl : float, optional
        Plan with this upper confidence limit of the pilot sd (:func:`sd_upper_limit`) instead of the sd.
    exact : bool
        The claim is deterministic: the pilot's run is the answer.
    sd_fallback : float, optional
        The sd to plan with where the pilot has one run (no sd of its own): :func:`make_plan` passes the largest
        sd of the rows on the same experiment. Without it such a row is planned at the cap (rule *no spread*).
    """
    if exact:
        return Plan(claim, experiments, n_pilot, "exact", n_pilot, note="deterministic: one run is the value")
    if sample is None:
        return Plan(claim, experiments, n_pilot, "no pilot", n_pilot, note="not built at the pilot")
    if sample["form"] == "runs":
        vals = np.asarray(sample["values"], dtype=float)
        n0 = int(vals.size)
        mean = float(vals.mean())
        sd = float(vals.std(ddof=1)) if n0 > 1 else float("nan")
        welch = None
    else:
        (ma, sa, na), b = sample["a"], sample["b"]
        if b is None:
            mean, sd, n0, welch = ma, sa, na, None
        else:
            mb, sb, nb = b
            mean, n0 = ma - mb, min(na, nb)
            sd, welch = math.sqrt(sa**2 + sb**2), (sa, sb)
    distance, boundary, decision = decision_distance(mean, test, paper_value, effect, DECIDED_BY.get(keep, ""))
    borrowed = ""
    if not math.isfinite(sd) and sd_fallback is not None and math.isfinite(sd_fallback):
        sd, n0, borrowed = sd_fallback, max(n0, 2), f"{n0} pilot run: sd borrowed from the experiment's other rows"
    if not math.isfinite(sd):
        return Plan(claim, experiments, n_pilot, "no spread", cap, mean, sd, boundary, distance,
                    note=f"{n0} pilot run: no sd, planned at the cap")
    sd_plan = sd_upper_limit(sd, n0, sd_ucl) if sd_ucl else sd
    if welch is None:
        def hw(n: int) -> float:
            return t_half_width(n, sd_plan, confidence)

        def pw(n: int) -> float:
            return clear_probability(n, distance, sd_plan, confidence=confidence, widen=widen)
    else:
        k = sd_plan / sd if sd > 0 else 1.0
        sa, sb = welch[0] * k, welch[1] * k

        def hw(n: int) -> float:
            return welch_half_width(n, sa, sb, confidence)

        def pw(n: int) -> float:
            va, vb = sa**2 / n, sb**2 / n
            df = (va + vb) ** 2 / (va**2 / (n - 1) + vb**2 / (n - 1)) if va + vb > 0 else 2 * (n - 1)
            return clear_probability(n, distance, math.sqrt(sa**2 + sb**2), df=df, confidence=confidence,
                                     widen=widen)

    notes = [borrowed, f"decided by its {decision} edge" if decision != "direction" else "",
             "planned for the √2-wider replication interval" if widen != 1.0 else ""]
    plan = Plan(claim, experiments, n_pilot, "", 0, mean, sd, boundary, distance, hw, pw,
                note="; ".join(x for x in notes if x))
    n_clear = next((n for n in range(2, cap + 1) if widen * hw(n) < distance and pw(n) >= power), None)
    if n_clear is not None:
        plan.rule, plan.n = ("pilot" if n_clear <= n_pilot else "clear"), max(n_clear, n_pilot)
        return plan
    n_bound = next((n for n in range(2, cap + 1) if hw(n) <= half_width), cap)
    plan.rule, plan.n = "bound", max(n_bound, n_pilot)
    return plan


# ---- where a claim's seeds live, and what a seed costs ---------------------------------------------------------


def seed_keys(table: str, group: Mapping[str, str], config: Mapping[str, Any]) -> list[tuple[str, ...]]:
    """The config paths (``(paper, "experiments", name, "seeds")``) of the seeds a claim row's table reads.

    One entry per table the claims read (config/papers/*.yaml ``claims:``); a table not listed here is an error,
    so that a new claim cannot silently get no seeds.
    """
    t = table.removeprefix("results/tables/")
    if t == "afl/table1_adult_runs.csv":
        return [("afl", "experiments", "afl_adult", "seeds")]
    if t == "afl/table2_fashion_mnist_runs.csv":
        return [("afl", "experiments", "afl_fashion_mnist", "seeds")]
    if t == "afl/afl_table3_lm.csv":
        return [("agnostic_fedavg", "experiments", "afl_lm", "seeds")]
    if t == "agnostic_fedavg/fig1_toy.csv":
        return [("agnostic_fedavg", "experiments", "toy", "seeds")]
    if t == "agnostic_fedavg/fmnist.csv":
        return [("agnostic_fedavg", "experiments", group["experiment"], "seeds")]
    if t in ("fedmm/fig7_runs.csv", "fedmm/fig4_runs.csv"):
        return [("fedmm", "tasks", "digits", "seeds")]
    if t == "fedpals/table1_runs.csv":
        rows = config["fedpals"]["tables"]["fedpals_table1"]["rows"]
        exp = next(r["experiment"] for r in rows if r["label"] == group["row"])
        return [("fedpals", "experiments", exp, "seeds")]
    if t == "fedpals/fig4_synthetic.csv":
        return [("fedpals", "synthetic", "seeds")]
    if t == "wafl/fig4_runs.csv":
        return [("wafl", "experiments", group["experiment"], "seeds")]
    if t == "wafl/table2.csv":
        column_of = config["wafl"]["table2_columns"]
        return [("wafl", "experiments", next(e for e, c in column_of.items() if c == group["column"]), "seeds")]
    raise KeyError(f"claims_power: no seeds key for table {table}; add it to seed_keys")


def benchmark_globs(key: tuple[str, ...]) -> list[str]:
    """The pilot's benchmark files of one seeds key's jobs (training and evaluation)."""
    if key == ("fedpals", "synthetic", "seeds"):
        return ["results/benchmarks/fedpals/synthetic/*.tsv"]
    paper, exp = key[0], key[2]
    return [f"results/benchmarks/{paper}/train/{exp}/*/*.tsv", f"results/benchmarks/{paper}/evaluate/{exp}/*/*.tsv"]


def run_globs(key: tuple[str, ...]) -> str:
    """The pilot's run folders of one seeds key (to count its seeds and run ids)."""
    if key == ("fedpals", "synthetic", "seeds"):
        return "results/benchmarks/fedpals/synthetic/seed~*.tsv"
    return f"results/runs/{key[0]}/{key[2]}/*/seed~*"


@dataclass
class Cost:
    """CPU seconds per extra seed of one experiment, from the pilot's benchmark files."""

    cpu_s: float                    # the pilot's CPU seconds (training + evaluation jobs)
    seeds: int                      # the pilot's seeds
    jobs_per_seed: int              # new jobs one more seed adds (run ids × training and evaluation)
    files: int                      # benchmark files read
    source: str = "pilot benchmarks"

    def per_seed(self, start_s: float) -> float:
        """CPU seconds of one more seed: the pilot's per seed plus ``start_s`` per new job."""
        return self.cpu_s / max(self.seeds, 1) + self.jobs_per_seed * start_s


def pilot_cost(pilot: Path, key: tuple[str, ...], run_ids: int | None = None, seeds: int | None = None) -> Cost | None:
    """:class:`Cost` of one seeds key from the pilot's ``results/benchmarks`` (None: the pilot ran none of it).

    A pilot still running has benchmark files for some run ids only: the mean CPU of a benchmarked training (and
    evaluation) job is scaled to ``run_ids``, the run ids the pilot configuration has for the key, over its
    ``seeds`` (a seeds-together job trains them all). Without them, the run folders present are counted.
    """
    files = sorted({f for g in benchmark_globs(key) for f in pilot.glob(g)})
    if not files:
        return None
    runs = sorted(pilot.glob(run_globs(key)))
    if key == ("fedpals", "synthetic", "seeds"):         # one job per seed
        cpu = sum(float(pd.read_csv(f, sep="\t")["cpu_time"].sum()) for f in files)
        return Cost(cpu, len(files), 1, len(files))
    present = len({r.parent.name for r in runs})
    run_ids = run_ids or present
    seeds = seeds or len({r.name for r in runs})
    cpu = 0.0
    for stage in ("train", "evaluate"):
        stage_files = [f for f in files if f"/{stage}/" in f.as_posix()]
        if stage_files:
            cpu += sum(float(pd.read_csv(f, sep="\t")["cpu_time"].sum()) for f in stage_files) / len(stage_files) \
                * run_ids
    trained = len([f for f in files if "/train/" in f.as_posix()])   # evaluation jobs: not every paper has them
    partial = "" if trained >= run_ids else f"; {trained} of {run_ids} training jobs benchmarked, scaled"
    return Cost(cpu, seeds, 2 * run_ids, len(files), source=f"pilot benchmarks{partial}")


# Claims the quick pilot does not build: values of a documented earlier run of the same settings (README), and
# its cost. Each entry: the claim row, the pilot-like summary (mean, low, high of the 95 % t interval, n) and
# where it comes from; the seeds key's cost per seed in CPU seconds, and its source.
PRIORS: dict[str, dict[str, Any]] = {
    # README "WAFL", Table 2 under the text's protocol (quick settings, config/verdicts.yaml, 3 seeds, paired)
    **{f"wafl_table2_over_fedavg[column={col}]": {"ci": ci, "source": "README WAFL Table 2, text's protocol, 3 seeds"}
       for col, ci in (("mt_mm", (-0.09, -0.37, 0.19, 3)), ("mt_up", (-0.25, -0.90, 0.41, 3)),
                       ("mm_up", (-1.03, -3.43, 1.37, 3)), ("mm_mt", (-1.91, -3.62, -0.21, 3)))},
    # README "WAFL", "At the official code's settings, with equal tuning" (config/wafl_official.yaml's Fig. 4, 3 seeds,
    # paired): the experiment mnist_official of the overlay is the same settings
    **{f"{cid}[experiment=mnist_official]": {"ci": ci, "source": "README WAFL official settings, 3 seeds"}
       for cid, ci in (("wafl_fig4_80_fixed_over_fedavg", (32.4, 31.0, 33.9, 3)),
                       ("wafl_fig4_80_fixed_over_fedpgm", (9.5, 8.2, 10.8, 3)),
                       ("wafl_fig4_80_fixed_over_fedfgsm", (-4.7, -5.6, -3.8, 3)),
                       ("wafl_fig4_80_over_fedavg", (32.3, 30.4, 34.3, 3)),
                       ("wafl_fig4_80_tuned_over_fedpgm", (-5.2, -5.7, -4.7, 3)),
                       ("wafl_fig4_80_tuned_over_fedfgsm", (-4.8, -5.4, -4.3, 3)))},
    # README "FedMM": the quick settings over seeds 0–2 (seed 0 the pipeline's), FedMM − FedAvgSGDA paired by seed
    # at p = 1: the quick pilot trains one seed, which gives no spread
    "fedmm_fig7_scratch_lead[head=dann,clients=p1]": {"ci": (0.8, -16.3, 17.9, 3),
                                                      "source": "README FedMM, quick settings, seeds 0-2"},
    "fedmm_fig7_scratch_lead_last4[head=dann,clients=p1]": {"ci": (12.1, -15.6, 39.8, 3),
                                                            "source": "README FedMM, quick settings, seeds 0-2"},
}
#: Groups the overlay adds to a pilot table (experiments the pilot does not train), by table.
EXTRA_GROUPS: dict[str, list[str]] = {"results/tables/wafl/fig4_runs.csv": ["experiment=mnist_official"],
                                      "results/tables/wafl/table2.csv": [f"column={c}" for c in
                                                                         ("mm_mt", "mm_up", "mt_mm", "mt_up")]}
#: CPU seconds per seed of seeds keys the pilot does not run, with their source.
PRIOR_COSTS: dict[tuple[str, ...], tuple[float, str]] = {
    # README "WAFL": "its 12 WAFL runs, ≈ 18 CPU-minutes" (4 columns × 3 seeds; a WAFL round ≈ 5 × FedAvg's, so
    # FedAvg adds ≈ 1/5): 18 × 60 / 12 × 1.2 ≈ 108 CPU-s per column and seed
    **{("wafl", "experiments", e, "seeds"): (108.0, "README: 12 WAFL runs ≈ 18 CPU-min, + FedAvg ≈ 1/5")
       for e in ("da_mt_mm", "da_mt_up", "da_mm_up", "da_mm_mt")},
    # README "Quick start": the quick scale on idle cores (90dcd22, Intel Xeon), training and evaluation jobs 32.9
    # CPU-min: WAFL 26 % (Fig. 4, 8 run ids × 3 seeds), FedPALS 39 % (its synthetic task ≈ 13 CPU-s a seed, the
    # rest for Table 1's two experiments × 3 seeds), AFL 4 % (Adult 5 seeds, Fashion-MNIST 3: split by seeds) —
    # used where a pilot still running has not benchmarked every job of the experiment yet (so that the costs
    # compared have one source: idle cores)
    ("wafl", "experiments", "mnist", "seeds"): (0.26 * 32.9 * 60 / 3, "README quick run, WAFL 26 % of 32.9 CPU-min"),
    **{("fedpals", "experiments", e, "seeds"): ((0.39 * 32.9 * 60 - 5 * 13) / 6, "README quick run, FedPALS 39 %")
       for e in ("fedpals_fmnist_c2", "fedpals_fmnist_c3")},
    **{("afl", "experiments", e, "seeds"): (0.04 * 32.9 * 60 / 8, "README quick run, AFL 4 % over 8 seeds")
       for e in ("afl_adult", "afl_fashion_mnist")},
    # FedMM's 16-seed decisive run (docs/performance.md, "FedMM at 16 seeds"; the snapshot's cpu_s): its training and
    # evaluation jobs 10,825.7 CPU-s over 16 seeds of 7 runs each. Before it: 1,479 CPU-s over 2 seeds (the first
    # decisive run), and before that the quick run's 27 % of 32.9 CPU-min, 533 s a seed
    ("fedmm", "tasks", "digits", "seeds"): (10825.7 / 16, "FedMM's decisive run: 10,826 CPU-s over 16 seeds"),
    # README "WAFL", official settings: "123 CPU-minutes of training jobs for the 30 runs" (10 run ids × 3 seeds)
    ("wafl", "experiments", "mnist_official", "seeds"): (123 * 60 / 3, "README: 123 CPU-min for 10 run ids × 3 seeds"),
}


def read_prior_claims(path: Path) -> dict[str, dict[str, Any]]:
    """Rows of an earlier run's verdicts as :data:`PRIORS` entries.

    ``path``: its ``claims.csv``, or a README whose ``<!-- claims:begin -->`` block the target ``claims`` wrote.
    Rows without an interval are left out.
    """
    out: dict[str, dict[str, Any]] = {}
    if path.suffix == ".csv":
        t = pd.read_csv(path)
        for r in t.itertuples():
            if all(math.isfinite(float(x)) for x in (r.ours, r.ci_low, r.ci_high)) and r.ci_low < r.ci_high:
                out[r.claim] = {"ci": (float(r.ours), float(r.ci_low), float(r.ci_high), int(r.n)),
                                "source": f"{path.name}, scale {r.scale}"}
        return out
    import re

    text = path.read_text(encoding="utf-8")
    block = re.search(r"<!-- claims:begin[^>]*-->\n(.*?)<!-- claims:end -->", text, re.S)
    if block is None:
        raise ValueError(f"{path}: no <!-- claims:begin --> block")
    ci = re.compile(r"^(-?[\d.e+-]+) \[(-?[\d.e+-]+), (-?[\d.e+-]+)\]$")
    columns: list[str] = []
    for line in block.group(1).splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if "claim" in cells and "runs" in cells:           # a table's header (one per paper in the new layout)
            columns = cells
            continue
        if not columns or len(cells) != len(columns):
            continue
        row = dict(zip(columns, cells, strict=True))
        m = ci.match(row.get("ours [95 % CI]", ""))
        if m and row["runs"].isdigit():
            mean, lo, hi = map(float, m.groups())
            if lo < hi:
                out[row["claim"]] = {"ci": (mean, lo, hi, int(row["runs"])), "source": f"{path.name} quick block"}
    return out


def prior_sample(entry: Mapping[str, Any]) -> dict[str, Any]:
    """A claim_sample-like summary from a documented interval: sd = half-width · √n / t₀.₉₇₅,n−1."""
    mean, lo, hi, n = entry["ci"]
    sd = (hi - lo) / 2 * math.sqrt(n) / float(stats.t.ppf(0.975, n - 1))
    return {"form": "summary", "a": (mean, sd, n), "b": None}


# ---- configuration ------------------------------------------------------------------------------------------------


def merged_config(overlays: Sequence[str | Path], root: Path = ROOT) -> dict[str, Any]:
    """The configuration Snakemake builds: config.yaml, datasets.yaml, every paper's YAML, then the overlays."""
    from fedshift.claims.rejudge import merged_config as merged

    return merged(overlays, root)


def get_path(config: Mapping[str, Any], key: Sequence[str], default: Any = None) -> Any:
    node: Any = config
    for k in key:
        if not isinstance(node, Mapping) or k not in node:
            return default
        node = node[k]
    return node


def configured_seeds(config: Mapping[str, Any], key: tuple[str, ...]) -> int:
    """The seeds a configuration gives one seeds key (an experiment's own value, else its paper's defaults)."""
    value = get_path(config, key)
    if value is None and key[1] == "experiments":
        value = get_path(config, (key[0], "defaults", "seeds"))
    return int(value) if value is not None else 1


# ---- the plan ------------------------------------------------------------------------------------------------------


def claim_rows(config: Mapping[str, Any], pilot: Path) -> list[dict[str, Any]]:
    """Every planned claim row of the configuration with its pilot sample (None where the pilot has no table/cell).

    Claims with a ``status`` (no table) and ``exploratory`` claims are left out of the plan.
    """
    from fedshift.claims import claim_groups  # the groups and row names, as evaluate_claims writes them

    out = []
    for paper, items in config["claims"].items():
        for c in items:
            # a claim without a table (status: needs data, ...) has nothing to plan; an exploratory one (chosen
            # after the data were seen) gets its seeds from a confirmatory design of its own, not from this plan
            if "quantity" not in c or c.get("exploratory"):
                continue
            q = c["quantity"]
            path = pilot / q["table"]
            table = pd.read_csv(path) if path.is_file() else None
            if table is None:
                groups = [(g, {}, None) for g in _unbuilt_groups(c, config)]
            else:
                groups = claim_groups(table, q, context=f"claim {c['id']}")
            if table is not None:
                built = {g[0] for g in groups}
                groups += [(g, {}, None) for g in EXTRA_GROUPS.get(q["table"], []) if g not in built]
            for name, labels, sub in groups:
                row = f"{c['id']}[{name}]" if name else c["id"]
                sample = None
                if sub is not None:
                    try:
                        sample = claim_sample(sub, q, context=row)
                    except NoRowsError:
                        sample = None
                one_run = sample is not None and sample["form"] == "runs" and len(sample["values"]) < 2
                prior = row in PRIORS and (sample is None or one_run)   # a prior wins only where the pilot has
                if prior:                                               # no spread
                    sample = prior_sample(PRIORS[row])
                if not labels and name:
                    labels = dict(part.split("=", 1) for part in name.split(","))
                out.append({"row": row, "paper": paper, "claim": c, "labels": labels, "sample": sample,
                            "prior": prior})
    return out


def _unbuilt_groups(claim: Mapping[str, Any], config: Mapping[str, Any]) -> list[str]:
    """Group names of a claim whose table the pilot did not build (from its PRIORS rows, else one unnamed row)."""
    names = [*EXTRA_GROUPS.get(claim["quantity"]["table"], []),
             *(r.split("[", 1)[1].rstrip("]") for r in PRIORS if r.startswith(claim["id"] + "["))]
    return list(dict.fromkeys(names)) or [""]


def make_plan(config: Mapping[str, Any], pilot: Path, *, cap: int, power: float, half_width: float,
              budget_s: float, start_s: float, sd_ucl: float | None, missing_data: Sequence[str] = (),
              no_pilot_seeds: int = 3, run_ids: Mapping[tuple[str, str], int] | None = None,
              confidence: float = 0.95, half_width_for: Mapping[str, float] | None = None,
              protect: Sequence[str] = (), replicate: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Plans of every claim row, seeds per experiment fitted to the budget, and the costs (see module docstring).

    ``half_width_for``: paper → the rule *bound*'s target half-width for its rows (default ``half_width``).
    ``protect``: papers whose seeds the budget never takes back (FedMM's, whose rows need the most seeds); where they alone exceed the
    budget, the plan keeps them and ``over_budget_s`` says by how much. ``replicate``: claim row → its verdict, the
    rows planned for the √2-wider replication interval to keep that verdict (a decided run's *could flip* rows).
    """
    rows = claim_rows(config, pilot)
    pilot_costs: dict[tuple[str, ...], Cost | None] = {}

    def built_seeds(k: tuple[str, ...]) -> int:  # seeds of k the pilot trained (0: none)
        if k not in pilot_costs:
            ids = None if run_ids is None or k[1] == "synthetic" else run_ids.get((k[0], k[2]))
            pilot_costs[k] = pilot_cost(pilot, k, ids, configured_seeds(config, k) if ids else None)
        c = pilot_costs[k]
        return c.seeds if c is not None else 0

    # the largest pilot sd of each experiment's rows, lent to its rows with one pilot run (rule no spread)
    spread: dict[tuple[str, ...], float] = {}
    for r in rows:
        smp = r["sample"]
        if smp is None or r["claim"].get("exact"):
            continue
        sd = (float(np.std(smp["values"], ddof=1)) if smp["form"] == "runs" and len(smp["values"]) > 1 else
              (math.hypot(smp["a"][1], smp["b"][1]) if smp["form"] == "summary" and smp["b"] is not None
               else smp["a"][1] if smp["form"] == "summary" else float("nan")))
        try:
            key = tuple(seed_keys(r["claim"]["quantity"]["table"], r["labels"], config)[0])
        except (KeyError, StopIteration):
            continue
        if math.isfinite(sd):
            spread[key] = max(spread.get(key, 0.0), sd)
    plans: list[Plan] = []
    for r in rows:
        c = r["claim"]
        if any(d in missing_data for d in c.get("data", [])):
            plans.append(Plan(r["row"], [], 0, "needs data", 0,
                              note=f"needs data: {', '.join(d for d in c['data'] if d in missing_data)}"))
            continue
        try:
            keys = seed_keys(c["quantity"]["table"], r["labels"], config)
        except (KeyError, StopIteration):
            keys = []
        if not keys:
            plans.append(Plan(r["row"], [], 0, "no pilot", 0, note="no seeds key for its cell"))
            continue
        if c.get("exact"):
            plans.append(Plan(r["row"], [], 0, "exact", 0, note="deterministic: the pilot's one run is the value"))
            continue
        n_pilot = min(built_seeds(k) for k in keys)
        group = r["row"][len(c["id"]) + 1:-1] if r["row"] != c["id"] else ""
        p = plan_claim(r["row"], [".".join(k[:-1]) for k in keys], r["sample"], c["test"], n_pilot=n_pilot,
                       cap=cap, power=power, half_width=(half_width_for or {}).get(r["paper"], half_width),
                       sd_ucl=sd_ucl, paper_value=paper_number(c, group), effect=c.get("effect"),
                       widen=math.sqrt(2.0) if r["row"] in (replicate or {}) else 1.0,
                       keep=(replicate or {}).get(r["row"], ""),
                       sd_fallback=spread.get(tuple(keys[0])), confidence=confidence)
        if p.rule == "no pilot":
            p.n = max(n_pilot, no_pilot_seeds)
            p.note = f"no pilot values: {no_pilot_seeds} seeds (fixed)"
        if r["prior"]:
            p.source = PRIORS[r["row"]]["source"]
        p.keys = keys  # type: ignore[attr-defined]
        plans.append(p)
    # seeds per experiment: the largest plan of its rows
    want: dict[tuple[str, ...], int] = {}
    drivers: dict[tuple[str, ...], list[Plan]] = {}
    for p in plans:
        for k in getattr(p, "keys", []):
            want[k] = max(want.get(k, 0), p.n)
            drivers.setdefault(k, []).append(p)
    # the pilot's seeds: those its configuration trains (a pilot still running has not benchmarked them all yet)
    in_pilot = (lambda k: k[1] == "synthetic" or (k[0], k[2]) in run_ids) if run_ids is not None else built_seeds
    have = {k: configured_seeds(config, k) if in_pilot(k) else 0 for k in want}
    for k in want:  # never below the pilot's seeds: they stay run ids of the overlay
        want[k] = max(want[k], have[k])
    costs: dict[tuple[str, ...], float] = {}
    cost_src: dict[tuple[str, ...], str] = {}
    for k in want:
        c = pilot_costs[k]
        if c is not None and c.seeds > 0 and not ("scaled" in c.source and k in PRIOR_COSTS):
            costs[k], cost_src[k] = c.per_seed(start_s), (f"{c.source}: {c.cpu_s:.0f} CPU-s over {c.seeds} seeds "
                                                          f"({c.files} files) + {c.jobs_per_seed} job starts")
        elif k in PRIOR_COSTS:
            costs[k], cost_src[k] = PRIOR_COSTS[k][0], PRIOR_COSTS[k][1]
        else:
            costs[k], cost_src[k] = 0.0, "no cost known"
    n = dict(want)

    # an experiment whose seeds train batched in one job (AFL's batch_seeds) retrains all of them when seeds grow
    batched = {k for k in n if k[1] == "experiments" and get_path(
        config, (k[0], "experiments", k[2], "batch_seeds"), get_path(config, (k[0], "defaults", "batch_seeds"), False))}

    def extra(k: tuple[str, ...]) -> int:
        return 0 if n[k] <= have[k] else n[k] if k in batched else n[k] - have[k]

    def total() -> float:
        return sum(extra(k) * costs[k] for k in n)

    wanted_total = total()
    # fit the budget: first take back the seeds that only rows which cannot clear want (bound, no spread, no pilot),
    # most expensive first; then the seed that adds the least expected number of decided rows per CPU-second (the
    # sum over the experiment's rows of P(clear) at n minus at n − 1), down to the pilot's (at least 2)
    deciding = {k: max([have[k], *(p.n for p in drivers[k] if p.rule in ("clear", "pilot"))]) for k in n}

    def gain(k: tuple[str, ...]) -> float:
        m = n[k]
        return sum(p.power_at(m) - (p.power_at(m - 1) if m > 2 else 0.0)
                   for p in drivers[k] if p.power_at is not None and p.rule in ("clear", "pilot"))

    fixed = {k for k in n if k[0] in set(protect)}          # never taken back (e.g. FedMM's seeds)
    while total() > budget_s:
        movable = [k for k in n if n[k] > deciding[k] and k not in fixed]
        if not movable:
            break
        n[max(movable, key=lambda k: extra(k) * costs[k])] -= 1
    while total() > budget_s:
        movable = [k for k in n if n[k] > max(have[k], 2) and costs[k] > 0 and k not in fixed]
        if not movable:
            break
        n[min(movable, key=lambda k: (gain(k) / costs[k], -costs[k]))] -= 1
    return {"plans": plans, "want": want, "seeds": n, "have": have, "costs": costs, "cost_src": cost_src,
            "extra": {k: extra(k) for k in n}, "batched": batched,
            "total_s": total(), "wanted_s": wanted_total, "drivers": drivers,
            "over_budget_s": max(0.0, total() - budget_s), "protected": sorted(fixed)}


# ---- the overlay ---------------------------------------------------------------------------------------------------

HEADER = """\
# Decisive scale, an overlay on the quick scale:
#   snakemake --cores 2 --configfile config/quick.yaml config/decisive.yaml --config data_mirror=../shared/data
# GENERATED by benchmarks/claims_power.py from the pilot run named below (the quick scale, or the last decisive
# run); do not edit by hand:
#   {command}
# Every experiment a claim reads gets the seeds its claims need for their 95 % intervals to clear the edge that
# decides them (the test's boundary, the paper's value less its size tolerance, or the equivalence margin)
# with probability {power:g} at the pilot's mean and sd (rule `clear`; `pilot`: the pilot's seeds already
# do), or, where the pilot mean sits on the boundary, a half-width of {half_width:g} (rule `bound`: the verdict will be
# inconclusive with that bound); at most {cap} seeds a claim, fewer where the CPU budget ({budget:g} CPU-hours)
# takes seeds back (`cap`). Seeds 0 … n−1: the pilot's seeds keep their run ids and hyper-parameters (checked by
# `python benchmarks/claims_power.py --check-reuse`); one job per (run id, seed) (`jobs: seeds_together: false`).
# On top of a finished quick run (same commit), add `--rerun-triggers mtime software-env` to keep its runs: quick
# trained them in seeds-together jobs, whose params (all seeds' hparams, the seed list) differ from a one-seed job's.
# Pilot: {pilot}: {pilot_h:.2f} CPU-h ({pilot_src}). Extra seeds: {total_h:.2f} CPU-h
# ({wanted_h:.2f} before the budget). The decisive run from a fresh clone, with {overhead:g} more for the jobs
# without benchmark files: ({pilot_h:.2f} + {total_h:.2f}) × {one_plus:g} = {run_h:.2f} CPU-h, ≥ {wall_h:.2f} h of
# wall time on 2 cores. Expected decided claim rows at these seeds (the sum of P(clear), exact rows as 1):
# {expected:.1f} of {rows}.
"""

STATIC = """\
scale: decisive
jobs: {seeds_together: false}        # one job per (run id, seed): the pilot's seeds stay built when seeds grow
"""
#: Keys a paper's section of the overlay holds besides seeds (written first under ``<paper>:``).
SECTION_HEAD = {"wafl": """\
  outputs: [fig4, table2]            # Table 2 (quick settings, config/quick.yaml's columns) is judged here
  figures:
    fig4: [mnist, mnist_official]    # the quick settings and, as a second experiment, the official code's
"""}
#: Experiments the overlay adds (their keys, written under their ``seeds:``).
EXTRA_EXPERIMENTS = {("wafl", "experiments", "mnist_official"): """\
      # Fig. 4 at the official code's settings with equal tuning: config/wafl_official.yaml's mnist, the same keys
      # (README "WAFL"), so that its claims wafl_fig4_80_fixed_* and wafl_fig4_80_tuned_* are judged at this
      # scale; a second experiment, so that quick's `mnist` runs stay as they are.
      dataset: mnist
      preprocess: per_pixel
      partition: {labels_per_client: 3, validation_fraction: 0.1}                # [code] 3 labels; [ours] 10 %
      train: {client_lr: 0.001, rounds: 200, log_every: 20, checkpoint_every: 100, snapshot_every: 0}   # [code]
      wafl: {cost: code}                                                         # [code] (γ/2)‖ζ − z‖²
      shift: {fractions: [0.0, 0.2, 0.4, 0.6, 0.8]}
      gammas: [0.01, 0.05, 0.1, 0.5, 1, 5, 10, 50]
      compare_gamma: 0.05                                                        # [code] --gamma 0.05
      convergence_gamma: 0.05
      fig3_fraction: 0.4
      fig5_fraction: 0.4
      fig4_gammas: [0.01, 0.05, 0.5]
      fig4_grid:
        fedpgm: [{eps: 0.3, step: 0.01}, {eps: 0.2, step: 0.02}, {eps: 0.3, step: 0.03}]
        fedfgsm: [{eps: 0.1}, {eps: 0.3}, {eps: 0.5}]
"""}


def _fmt(x: float) -> str:
    return "–" if not math.isfinite(x) else f"{x:.3g}"


def plan_comment(p: Plan, n_final: int) -> str:
    """One line of calculation for a row: pilot mean, sd, n; boundary and distance; rule; what n_final reaches."""
    if p.rule in ("exact", "needs data", "no pilot"):
        return f"{p.claim}: {p.rule}" + (f" ({p.note})" if p.note else "")
    hw = p.half_width(n_final) if p.half_width and n_final >= 2 else float("nan")
    pw = p.power_at(n_final) if p.power_at and n_final >= 2 else float("nan")
    src = f"over {p.n_pilot} pilot seeds" if p.source == "pilot" else f"from {p.source} (pilot: {p.n_pilot})"
    capped = f", capped from {p.n}" if n_final < p.n else ""
    return (f"{p.claim}: mean {_fmt(p.mean)}, sd {_fmt(p.sd)} {src}; boundary "
            f"{_fmt(p.boundary)} at {_fmt(p.distance)}; rule {p.rule} → n {p.n}{capped}; at n = {n_final}: "
            f"half-width {_fmt(hw)}, P(clear) {_fmt(pw)}" + (f" ({p.note})" if p.note else ""))


def overlay_text(result: Mapping[str, Any], header: Mapping[str, Any]) -> str:
    """``config/decisive.yaml``: the header, the static keys and one ``seeds:`` per experiment with its calculation."""
    lines = [HEADER.format(**header).rstrip("\n"), *([header["extra"]] if header.get("extra") else []),
             STATIC.rstrip("\n")]
    n = result["seeds"]
    tree: dict[str, dict[str, list[tuple[tuple[str, ...], int]]]] = {}
    for k in sorted(n):
        tree.setdefault(k[0], {}).setdefault(k[1], []).append((k, n[k]))
    for paper in sorted(tree):
        lines.append(f"{paper}:")
        if paper in SECTION_HEAD:
            lines.append(SECTION_HEAD[paper].rstrip("\n"))
        for section in sorted(tree[paper]):
            entries = tree[paper][section]
            if len(entries[0][0]) == 3:              # fedpals.synthetic.seeds
                k, v = entries[0]
                lines += _comments(result, k, "  ") + [f"  {section}:", f"    seeds: {v}"]
                continue
            lines.append(f"  {section}:")
            for k, v in entries:
                lines += _comments(result, k, "    ") + [f"    {k[2]}:", f"      seeds: {v}"]
                if k[:3] in EXTRA_EXPERIMENTS:
                    lines.append(EXTRA_EXPERIMENTS[k[:3]].rstrip("\n"))
    not_planned = [p for p in result["plans"] if not getattr(p, "keys", [])]
    if not_planned:
        lines.append("# Not planned here:")
        lines += [f"#   {plan_comment(p, 0)}" for p in not_planned]
    return "\n".join(lines) + "\n"


def _comments(result: Mapping[str, Any], k: tuple[str, ...], indent: str) -> list[str]:
    n, have, costs = result["seeds"][k], result["have"][k], result["costs"][k]
    batched = " (batched: all seeds retrain)" if k in result["batched"] and n > have else ""
    head = (f"{indent}# {'.'.join(k)}: {n} seeds (pilot {have}); {costs:.0f} CPU-s per extra seed "
            f"({result['cost_src'][k]}) → {result['extra'][k] * costs / 3600:.2f} CPU-h{batched}")
    return [head] + [f"{indent}#   {plan_comment(p, n)}" for p in result["drivers"][k]]


# ---- reuse check ---------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=8)
def _runs(files: tuple[str, ...], root: Path) -> dict[str, Any]:
    """Every RunSpec of a configuration, by path, as the workflow builds them (validated first)."""
    from fedshift.contract import load_papers
    from fedshift.plan import run_table
    from fedshift.validation import validate_workflow_config

    cfg = merged_config(files, root)
    validate_workflow_config(cfg, root / "workflow" / "schemas")
    return run_table(load_papers(cfg).values())


def check_reuse(base: Sequence[str], overlay: Sequence[str], root: Path = ROOT) -> list[str]:
    """Run paths of ``base`` whose RunSpec (algorithms, hyper-parameters) differs under ``base + overlay``.

    Snakemake reuses a run's files when its path and ``params`` (the RunSpec's hparams, :mod:`fedshift.contract`)
    are unchanged; a path of ``base`` absent under the overlay is reported too. Empty: every pilot run is reused.
    """
    a, b = _runs(tuple(map(str, base)), root), _runs(tuple(map(str, [*base, *overlay])), root)
    bad = []
    for path, spec in a.items():
        other = b.get(path)
        if other is None:
            bad.append(f"{path}: not a run of the overlay")
        elif dict(other.hparams) != dict(spec.hparams) or tuple(other.algorithms) != tuple(spec.algorithms):
            bad.append(f"{path}: hyper-parameters differ")
    return bad


# ---- command line --------------------------------------------------------------------------------------------------


def missing_datasets(config: Mapping[str, Any], mirror: str) -> list[str]:
    """Datasets named by claims' ``data`` that the mirror lacks (as the claims rule decides)."""
    from fedshift.data.download import MissingSourceError, check_mirror
    from fedshift.data.sources import DatasetSpec

    names = sorted({d for items in config["claims"].values() for c in items for d in c.get("data", [])})
    if not mirror:
        return []
    out = []
    for d in names:
        try:
            check_mirror(Path(mirror), [DatasetSpec.from_registry(d, config["datasets"])])
        except MissingSourceError:
            out.append(d)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pilot", type=Path, default=ROOT, help="root of the pilot run (its results/ folder)")
    ap.add_argument("--configs", nargs="+", default=["config/quick.yaml"], help="the pilot's overlays")
    ap.add_argument("--out", type=Path, default=None, help="write the overlay here (default: print it)")
    ap.add_argument("--cap", type=int, default=30, help="most seeds a claim gets")
    ap.add_argument("--power", type=float, default=0.8)
    ap.add_argument("--half-width", type=float, default=1.0, help="target half-width where the mean sits on the "
                    "boundary (the quantity's units: points for accuracy leads)")
    ap.add_argument("--budget-cpu-hours", type=float, default=4.0, help="the whole decisive run from a fresh clone")
    ap.add_argument("--overhead", type=float, default=0.1, help="share added for jobs without benchmark files")
    ap.add_argument("--job-start-s", type=float, default=3.0, help="CPU seconds of one job's start (README: 2–4 s)")
    ap.add_argument("--sd-ucl", type=float, default=None, help="plan with this upper confidence limit of the sd")
    ap.add_argument("--data-mirror", default="", help="the mirror the decisive run reads (needs-data claims)")
    ap.add_argument("--check-reuse", action="store_true", help="only check that the pilot's runs are reused")
    ap.add_argument("--pilot-cpu-hours", type=float, default=None,
                    help="the pilot's CPU (default: its benchmark files; give it while the pilot is still running)")
    ap.add_argument("--prior-claims", type=Path, default=None,
                    help="an earlier run's claims.csv, or a README with its generated claims block: values for the "
                         "rows the pilot has not built (yet)")
    ap.add_argument("--protect", default="", help="papers whose seeds the budget never takes back (comma-separated; "
                    "e.g. fedmm); the header says how far they take the run over the budget")
    ap.add_argument("--half-width-for", default="", help="per paper, the rule bound's half-width, e.g. fedmm=5")
    ap.add_argument("--replicate-from", type=Path, default=None,
                    help="a decided run's claims.csv: its rows marked 'could flip' are planned for the √2-wider "
                         "replication interval")
    ap.add_argument("--second-papers", default="", help="papers the second run under portable_cpu repeats (its "
                    "cost in the header: their planned seeds × --portable-factor)")
    ap.add_argument("--portable-factor", type=float, default=2.2, help="CPU of a job under portable_cpu over "
                    "without (docs/concepts/reproducibility.md: 1.8-3.0, FedMM 1.8 and 2.6)")
    args = ap.parse_args(argv)
    if args.check_reuse:
        bad = check_reuse(args.configs, ["config/decisive.yaml"])
        print("\n".join(bad) if bad else "every pilot run keeps its path and hyper-parameters under the overlay")
        return 1 if bad else 0
    config = merged_config(args.configs)
    if args.prior_claims:  # documented rows of an earlier run stand in where the pilot has no table yet
        for row, entry in read_prior_claims(args.prior_claims).items():
            PRIORS.setdefault(row, entry)
    run_ids: dict[tuple[str, str], int] = {}
    for spec in _runs(tuple(args.configs), ROOT).values():
        run_ids.setdefault((spec.paper, spec.experiment), 0)
    for paper, exp in run_ids:
        run_ids[(paper, exp)] = len({s.run for s in _runs(tuple(args.configs), ROOT).values()
                                     if (s.paper, s.experiment) == (paper, exp)})
    pilot_s = args.pilot_cpu_hours * 3600 if args.pilot_cpu_hours is not None else pilot_cpu(args.pilot)
    extra_budget_s = args.budget_cpu_hours * 3600 / (1 + args.overhead) - pilot_s
    replicate: dict[str, str] = {}
    if args.replicate_from is not None:
        flagged = pd.read_csv(args.replicate_from, keep_default_na=False)
        flagged = flagged[flagged["cpu_robust"] == "could flip"]
        replicate = dict(zip(flagged["claim"], flagged["verdict"], strict=True))
    result = make_plan(config, args.pilot, cap=args.cap, power=args.power, half_width=args.half_width,
                       half_width_for=_pairs(args.half_width_for), protect=_names(args.protect), replicate=replicate,
                       budget_s=extra_budget_s, start_s=args.job_start_s, sd_ucl=args.sd_ucl, run_ids=run_ids,
                       missing_data=missing_datasets(config, args.data_mirror))
    expected, rows = expected_decided(result)
    command = "python benchmarks/claims_power.py " + " ".join(a for a in (argv if argv is not None else sys.argv[1:]))
    header = {"command": command.strip(), "power": args.power, "half_width": args.half_width, "cap": args.cap,
              "budget": args.budget_cpu_hours, "pilot": _pilot_label(args.pilot, str(config.get("scale", "quick"))),
              "total_h": result["total_s"] / 3600,
              "wanted_h": result["wanted_s"] / 3600, "pilot_h": pilot_s / 3600, "overhead": args.overhead,
              "pilot_src": "given" if args.pilot_cpu_hours is not None else "its benchmark files",
              "one_plus": 1 + args.overhead, "expected": expected, "rows": rows,
              "run_h": (pilot_s + result["total_s"]) * (1 + args.overhead) / 3600}
    header["wall_h"] = header["run_h"] / 2
    header["extra"] = extra_header(result, args, pilot_s)
    text = overlay_text(result, header)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    else:
        print(text)
    return 0


def _names(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _pairs(text: str) -> dict[str, float]:
    """``"fedmm=5,wafl=1"`` → ``{"fedmm": 5.0, "wafl": 1.0}``."""
    out = {}
    for item in _names(text):
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--half-width-for: {item!r} is not PAPER=HALF_WIDTH")
        out[key.strip()] = float(value)
    return out


def second_run_cpu(result: Mapping[str, Any], papers: Sequence[str], factor: float, start_s: float = 3.0) -> float:
    """CPU seconds of the second run under ``portable_cpu`` that repeats ``papers``' planned seeds.

    Every planned seed of those papers' experiments runs again from nothing (the switch changes every job's
    digest): seeds × (CPU per seed less its job starts) × ``factor`` + the job starts.
    """
    total = 0.0
    for k, n in result["seeds"].items():
        if k[0] in set(papers):
            total += n * result["costs"][k] * factor
    return total


def extra_header(result: Mapping[str, Any], args: argparse.Namespace, pilot_s: float) -> str:
    """The header's lines on protected papers (over the budget?) and the second run's projected CPU."""
    lines = []
    if result.get("protected"):
        keys = ", ".join(".".join(k) for k in result["protected"])
        over = result.get("over_budget_s", 0.0)
        lines.append(f"# Protected from the budget (--protect {args.protect}): {keys}"
                     + (f"; they take the run {over / 3600:.2f} CPU-h over it" if over > 0 else "") + ".")
    if args.second_papers:
        cpu = second_run_cpu(result, _names(args.second_papers), args.portable_factor)
        lines.append(f"# Second run under portable_cpu ({args.second_papers}, × {args.portable_factor:g}): "
                     f"{cpu * (1 + args.overhead) / 3600:.2f} CPU-h with the {args.overhead:g} overhead.")
    return "\n".join(lines)


def expected_decided(result: Mapping[str, Any]) -> tuple[float, int]:
    """Expected number of decided claim rows at the planned seeds (P(clear) summed; exact rows count 1) and rows."""
    total = 0.0
    for p in result["plans"]:
        keys = getattr(p, "keys", [])
        if p.rule == "exact":
            total += 1.0
        elif keys and p.power_at is not None:
            total += p.power_at(min(result["seeds"][k] for k in keys))
    return total, len(result["plans"])


def pilot_cpu(pilot: Path) -> float:
    """CPU seconds of every benchmarked job of the pilot (``results/benchmarks/**/*.tsv``, column ``cpu_time``)."""
    return sum(float(pd.read_csv(f, sep="\t")["cpu_time"].sum()) for f in pilot.glob("results/benchmarks/**/*.tsv"))


def _pilot_label(pilot: Path, scale: str = "quick") -> str:
    """The pilot's commit and machine, from one of its run.json files."""
    import json

    for f in sorted(pilot.glob("results/runs/*/*/*/seed~0/run.json"))[:1]:
        d = json.loads(f.read_text())
        cpu = (d.get("environment") or {}).get("cpu") or {}
        return f"{scale} scale at {str(d.get('git_commit', '?'))[:7]} on {cpu.get('model', '?')}"
    return str(pilot)


if __name__ == "__main__":
    raise SystemExit(main())
