"""The generated pages of the documentation site (``docs/``, built with MkDocs).

Configuration reference, verdicts, expected results per paper, the shift matrix and the measurements, each rendered
by code from the repository's schemas and config files and from a results tree (``results/tables``,
``results/figures``, ``results/runs``, ``results/benchmarks``), never copied by hand.

A leaf package: it reads YAML, csv, Markdown and ``run.json`` files and imports nothing of fedshift but
:mod:`fedshift.claims` (the verdict table's rendering), :mod:`fedshift.io`, the papers' plan side (the paper plug-ins
as the plan loads them, :func:`fedshift.contract.load_papers`: their declared datasets and the shift matrix's cells)
and, for the Algorithms page, the registry's declarations read without importing an algorithm
(:func:`fedshift.algorithms.registry.declarations`; no torch at build time). The MkDocs hook ``docs/hooks.py`` calls
it at every build; the Snakemake target ``docs`` (``workflow/rules/docs.smk``) builds the site from the results tree of
whatever scale was run. Its modules, by the page they make: :mod:`~fedshift.docsgen.schema` and
:mod:`~fedshift.docsgen.configref` (the configuration reference), :mod:`~fedshift.docsgen.results` (verdicts and each
paper's results), :mod:`~fedshift.docsgen.benchmarks` (the measurements), :mod:`~fedshift.docsgen.papers` (a paper
page's citation, scales and hyper-parameters), :mod:`~fedshift.docsgen.algorithms` (the Algorithms page),
:mod:`~fedshift.docsgen.coverage` (the data each paper's results ran on, real or stand-ins only),
:mod:`~fedshift.docsgen.pages` (the markers of the docs pages, the figures, the command line) and
:mod:`~fedshift.docsgen.text` (shared cell and table rendering); every name is importable from ``fedshift.docsgen`` itself. Command line::

    python -m fedshift.docsgen config config/README.md          # rewrite the reference block of config/README.md
    python -m fedshift.docsgen readme README.md results          # rewrite the README's verdict-count block
    python -m fedshift.docsgen papers README.md                  # rewrite the README's paper table (CITATIONS)
    python -m fedshift.docsgen snapshot results --name NAME      # a run's tables and figures into docs/results/snapshot
    python -m fedshift.docsgen pages results OUT                 # write the generated pages to OUT (to look at)
"""

from fedshift.docsgen.benchmarks import benchmark_records, benchmark_summary, benchmarks_markdown
from fedshift.docsgen.configref import (
    CONFIG_BLOCK,
    CONFIG_FILES,
    README_BLOCK,
    config_notes,
    config_reference,
    config_values,
    default_text,
    key_html,
    rewrite_block,
    yaml_comments,
)
from fedshift.docsgen.algorithms import AlgorithmDoc, algorithm_docs, algorithms_markdown, matrix_columns
from fedshift.docsgen.coverage import DataCoverage, coverage_text, data_coverage, lacking_datasets
from fedshift.docsgen.pages import (MARK_COLOURS, expand_markers, generated_pages, main, mark_svg, site_figures,
                                    sphinx_roles_to_links, verdict_marks_to_svg)
from fedshift.docsgen.papers import (
    CITATIONS,
    PAPERS_BLOCK,
    Citation,
    bibtex,
    citation_markdown,
    page_heading,
    papers_table_markdown,
    hparam_rows,
    hparams_markdown,
    scale_rows,
    scales_markdown,
    value_source,
)
from fedshift.docsgen.results import (
    NOT_RESULTS,
    PAPERS,
    SHOWN_ROWS,
    VERDICTS,
    paper_results_markdown,
    provenance,
    provenance_markdown,
    read_claims,
    run_records,
    verdict_counts,
    verdict_counts_markdown,
    verdicts_markdown,
)
from fedshift.docsgen.snapshot import (
    SNAPSHOT,
    add_second_run,
    docs_results,
    is_snapshot,
    read_stamp,
    snapshot_pages,
    source_note,
    take_snapshot,
)
from fedshift.docsgen.schema import EXTRA_SCHEMAS, PAPER_SCHEMAS, WORKFLOW_SCHEMA, KeyDoc, schema_files, schema_keys
from fedshift.docsgen.text import MAX_CSV_ROWS, RESIDUE, clean_note, csv_markdown, format_cell

__all__ = ["WORKFLOW_SCHEMA", "PAPER_SCHEMAS", "EXTRA_SCHEMAS", "PAPERS", "VERDICTS", "NOT_RESULTS", "MAX_CSV_ROWS",
           "README_BLOCK", "CONFIG_BLOCK", "KeyDoc", "schema_keys", "schema_files", "CONFIG_FILES", "yaml_comments",
           "config_notes", "config_values", "config_reference", "rewrite_block", "default_text", "key_html", "read_claims", "verdict_counts",
           "verdict_counts_markdown", "run_records", "provenance", "provenance_markdown", "format_cell",
           "csv_markdown", "paper_results_markdown", "verdicts_markdown", "benchmark_summary", "benchmark_records",
           "benchmarks_markdown", "site_figures", "expand_markers", "sphinx_roles_to_links", "MARK_COLOURS",
           "mark_svg", "verdict_marks_to_svg", "generated_pages", "main",
           "AlgorithmDoc", "algorithm_docs", "algorithms_markdown", "matrix_columns", "DataCoverage", "coverage_text",
           "data_coverage", "lacking_datasets", "CITATIONS", "Citation", "bibtex",
           "citation_markdown", "page_heading", "papers_table_markdown", "PAPERS_BLOCK", "hparam_rows", "hparams_markdown", "scale_rows", "scales_markdown", "value_source",
           "RESIDUE", "clean_note", "SNAPSHOT", "docs_results", "is_snapshot", "read_stamp", "snapshot_pages",
           "source_note", "take_snapshot", "add_second_run", "SHOWN_ROWS"]
