"""What each paper's results ran on: the datasets read for real, and those built only on stand-ins.

A paper declares its data through its plug-in (:meth:`fedshift.contract.Paper.datasets`: the registry datasets its
enabled outputs read, at paper scale, from ``config/config.yaml``, ``config/datasets.yaml`` and
``config/papers/*.yaml``). A results tree says which of them its run lacked: a claim whose table needs a dataset
the data mirror lacks reads ``needs data: <datasets>`` (:func:`fedshift.claims.evaluate_claims`). Such a dataset's
tables were built and tested on stand-in files only (the CI rehearsal's, :mod:`fedshift.validation.standin`);
the others ran on the real data. Pretrained weights (a registry title naming weights) are not data and are not
listed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

__all__ = ["PAPER_CONFIG_FILES", "DataCoverage", "short_dataset_name", "lacking_datasets", "paper_datasets",
           "data_coverage", "coverage_text"]

#: The configuration a paper's data are declared by, at paper scale, in Snakemake's stacking order.
PAPER_CONFIG_FILES = ("config/config.yaml", "config/datasets.yaml", "config/papers/*.yaml")


@dataclass(frozen=True)
class DataCoverage:
    """One paper's data in a results tree: ``real`` (read for real) and ``standin`` (stand-ins only), short names."""

    real: tuple[str, ...]
    standin: tuple[str, ...]


def short_dataset_name(title: str) -> str:
    """A registry title as a table cell: ``"UCI Adult (Census Income)"`` → ``"UCI Adult"``."""
    name = title.split(" (")[0].split(",")[0].split(" in the ")[0]
    return name.removesuffix(" handwritten digits")


def lacking_datasets(claims: pd.DataFrame | None) -> set[str]:
    """The registry datasets the run's ``needs data: <a>, <b>`` verdicts name (none without a claims table)."""
    if claims is None or "verdict" not in claims:
        return set()
    needs = claims["verdict"].astype(str).str.extract(r"^needs data: (.+)$")[0].dropna()
    return {d.strip() for names in needs for d in names.split(",") if d.strip()}


def paper_datasets(root: Path) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Each switched-on paper's declared datasets at paper scale, and every registry dataset's title.

    Parameters
    ----------
    root : Path
        The repository root.

    Returns
    -------
    tuple of dict
        Paper → the registry datasets its outputs read (:meth:`fedshift.contract.Paper.datasets`); dataset → its
        registry title.

    Raises
    ------
    ConfigError
        On an invalid paper section (:meth:`fedshift.contract.Paper.validate`).
    """
    from fedshift.contract import deep_merge, load_papers

    config: dict = {}
    for pattern in PAPER_CONFIG_FILES:
        for path in sorted(root.glob(pattern)):
            config = deep_merge(config, yaml.safe_load(path.read_text()) or {})
    papers = load_papers(config)
    out = {}
    for name, paper in papers.items():
        paper.validate()
        out[name] = paper.datasets()
    titles = {k: str(v.get("title", k)) for k, v in (config.get("datasets") or {}).items()}
    return out, titles


def data_coverage(root: Path, claims: pd.DataFrame | None) -> dict[str, DataCoverage]:
    """Per paper judged in the claims table, the datasets its results read for real and those on stand-ins only.

    Parameters
    ----------
    root : Path
        The repository root.
    claims : DataFrame or None
        The results tree's claims table (:func:`fedshift.docsgen.read_claims`); a paper it does not judge (or no
        table at all) has no entry: nothing is said of data a run did not use.
    """
    from fedshift.docsgen.results import verdict_counts

    if claims is None:
        return {}
    judged = set(verdict_counts(claims)["paper"].astype(str))
    lacking = lacking_datasets(claims)
    declared, titles = paper_datasets(root)
    out = {}
    for paper, names in declared.items():
        if paper not in judged:
            continue
        data = [n for n in names if " weights" not in titles.get(n, "")]
        real = dict.fromkeys(short_dataset_name(titles.get(n, n)) for n in data if n not in lacking)
        standin = dict.fromkeys(short_dataset_name(titles.get(n, n)) for n in data if n in lacking)
        out[paper] = DataCoverage(tuple(real), tuple(standin))
    return out


def coverage_text(cov: DataCoverage | None) -> str:
    """A table cell: ``"real: Adult, Fashion-MNIST; stand-ins only: CIFAR-10"`` (``"–"`` when nothing is known)."""
    if cov is None:
        return "–"
    parts = ([f"real: {', '.join(cov.real)}"] if cov.real else []) + \
        ([f"stand-ins only: {', '.join(cov.standin)}"] if cov.standin else [])
    return "; ".join(parts) or "–"
