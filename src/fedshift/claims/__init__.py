"""Headline claims as data: each paper's claims, our value with a 95 % interval over seeds, and a verdict.

A paper's config declares its claims (``claims: {<paper>: [...]}`` in ``config/papers/<paper>.yaml``); each
names the tidy table it reads (a table or figure CSV the pipeline already writes), the quantity (one cell, or
the difference of two cells, paired by seed where the table holds one row per run), the paper's value and the
test. :func:`evaluate_claims` computes, at the scale that ran, our value, a Student-t confidence interval over
seeds and the verdict:

* ``reproduced`` — the whole interval satisfies the test (the claim's direction) and, where the claim states a
  size (``effect.size_tolerance``), does not lie wholly short of the paper's value less that tolerance;
* ``smaller than claimed`` — the interval lies wholly on 0's side of the paper's value (less its tolerance): the
  claimed effect, at its size, is ruled out although its direction may not be;
* ``equivalent to zero`` — the whole interval lies within the claim's margin of 0 (``effect.margin``, below the
  paper's value): the two one-sided tests of equivalence reject a difference of the margin or more;
* ``not reproduced`` — the whole interval violates the test (the effect lies on the other side);
* ``inconclusive`` — the interval is wider than all of these (or one run gives no interval); its ``note`` states
  the bound reached (``x within [lo, hi] at n runs``: what the data rule out);
* ``not judged`` — a rehearsal or smoke run (too small to decide anything);
* ``needs data: <dataset>`` — the claim's table is not built because a dataset it needs (claim key ``data``) is
  not in the data mirror; ``not run`` — the table is not built at this scale, the ``note`` says why;
* a claim that reads no table has a ``status`` instead (:data:`STATUSES`: ``needs data``, ``cannot be
  reproduced``, ``not yet judged``) and a ``reason``, so that every headline claim has a row.

Claims are counted as claims: rows with the same per-seed data are one comparison (``same_as``), counted once per
category (:data:`CATEGORIES`: paper settings, reduced settings, ..., proxy; :func:`claim_counts`). Each computed
row carries the p-value of the test behind its verdict (:func:`decision_p_value`); the multiplicity policy is
Benjamini–Hochberg at 5 % over the family, Holm as a sensitivity column (:func:`adjust_multiplicity`, statsmodels),
with the ``exploratory`` rows (chosen after the data were seen) a family of their own. Each row's ``work_ratio``
is our rounds × clients × local steps × data fraction over the paper's (:func:`work_ratio`, our side read from the
configuration). :mod:`~fedshift.claims.rejudge` judges a committed snapshot again from its own tables.

The rules, with the order in which they apply, are :func:`effect_verdict`'s; ``direction`` keeps the verdict of the
test alone (reproduced / not reproduced / inconclusive), and each claim's ``effect`` (its margin, tolerance and the
reason for them) sits in its config next to its value. Where the paper states a number (a numeric ``paper_value``,
or ``paper_values`` per group), ``paper_in_ci`` says whether it lies inside our interval. ``cpu_robust`` says
whether a decided verdict survives the interval widened by √2, the 95 % interval of where the mean of an
independent replication of the same design falls (Cumming and Maillardet, 2006, "Confidence intervals and
replication: where will the next mean fall?", Psychological Methods 11(3), 217–227). Another instruction set
changes the rounding of every run, which over many rounds can move a CNN run's result as far as a new draw of its
training noise (the seed still fixes the data and initialisation, so a rerun is at most an independent
replication): a verdict that the √2-wide interval still decides is not expected to flip with the CPU, one marked
``could flip`` may. :func:`compare_runs` puts a second run's verdicts (the same claims under ``portable_cpu``)
beside each row: the measured counterpart.

Intervals (scipy.stats.t): per-run values → mean ± t₀.₉₇₅,n−1 · s/√n (a paired difference is the interval of the
per-seed differences); aggregated rows (mean, std, n) → the same from the summary; the difference of two
aggregated rows → Welch's interval (Welch–Satterthwaite degrees of freedom), which ignores any pairing and so is
conservative where the runs pair.

The package's modules: :mod:`~fedshift.claims.spec` (a claim's keys checked, its test and effect in words),
:mod:`~fedshift.claims.work` (the work ratio), :mod:`~fedshift.claims.intervals` (a claim's quantity and its
interval), :mod:`~fedshift.claims.verdicts` (the verdict's rules), :mod:`~fedshift.claims.multiplicity` (the
p-values, the multiplicity policy and the claim counts), :mod:`~fedshift.claims.judge` (:func:`evaluate_claims`),
:mod:`~fedshift.claims.render` (the Markdown table and the README block), :mod:`~fedshift.claims.compare` (a second
run's verdicts beside), :mod:`~fedshift.claims.rejudge` (a snapshot judged again), :mod:`~fedshift.claims.cli` (the
command line) and :mod:`~fedshift.claims.design` with :mod:`~fedshift.claims.seeds` (the confirmatory design); every
name in ``__all__`` is importable from ``fedshift.claims`` itself.
"""

from __future__ import annotations

from fedshift.claims.cli import main
from fedshift.claims.compare import SECOND_COLUMNS, agreement_counts, compare_runs, read_claims_csv
from fedshift.claims.intervals import (
    NoRowsError,
    claim_sample,
    estimate,
    interval_text,
    t_interval,
    t_interval_from_stats,
    welch_interval,
)
from fedshift.claims.judge import COLUMNS, claim_groups, evaluate_claims
from fedshift.claims.multiplicity import (
    CATEGORIES,
    MULTIPLICITY_ALPHA,
    adjust_multiplicity,
    category,
    claim_counts,
    decision_p_value,
    multiplicity_text,
)
from fedshift.claims.render import (
    MARKS,
    claims_markdown,
    claims_summary,
    machines_text,
    rewrite_readme_block,
    runs_machine,
    verdict_mark,
)
from fedshift.claims.spec import (
    NOT_AMONG_CLAIMS_PAPERS,
    STATUSES,
    claim_tables,
    claim_test_text,
    config_label,
    effect_text,
    validate_claims,
)
from fedshift.claims.verdicts import (
    COMPUTED,
    DECIDED,
    TESTS,
    UNJUDGED_SCALES,
    bound_note,
    boundaries,
    effect_verdict,
    paper_number,
    replication_robust,
    size_tolerance,
    verdict,
)
from fedshift.claims.work import WORK_FACTORS, work_ratio

__all__ = ["TESTS", "UNJUDGED_SCALES", "DECIDED", "COMPUTED", "NOT_AMONG_CLAIMS_PAPERS", "STATUSES", "CATEGORIES",
           "WORK_FACTORS", "MULTIPLICITY_ALPHA", "COLUMNS", "MARKS", "SECOND_COLUMNS", "NoRowsError",
           "validate_claims", "claim_test_text", "effect_text", "claim_tables", "config_label", "work_ratio",
           "t_interval", "t_interval_from_stats", "welch_interval", "interval_text", "claim_sample", "estimate",
           "verdict", "effect_verdict", "size_tolerance", "boundaries", "bound_note", "paper_number",
           "replication_robust", "decision_p_value", "adjust_multiplicity", "category", "claim_counts",
           "multiplicity_text", "claim_groups", "evaluate_claims", "runs_machine", "machines_text",
           "verdict_mark", "claims_markdown", "claims_summary", "rewrite_readme_block", "compare_runs",
           "agreement_counts", "read_claims_csv", "main"]
