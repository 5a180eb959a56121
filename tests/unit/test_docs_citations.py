"""One source for every paper's title, authors, venue and links: :data:`fedshift.docsgen.CITATIONS`.

The README's paper table, each paper page's heading and opening, the results pages' paper names and
``CITATION.cff``'s references are read from it or compared with it here, so a wrong title anywhere fails.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
import yaml

from fedshift import docsgen
from fedshift.contract import Paper
from fedshift.docsgen.coverage import DataCoverage, data_coverage, lacking_datasets, short_dataset_name
from fedshift.docsgen.papers import FAMILY_NAMES, short_authors

ROOT = Path(__file__).resolve().parents[2]
PAPERS = tuple(docsgen.CITATIONS)


def test_the_readme_paper_table_is_the_one_generated_from_the_citations(tmp_path):
    readme = (ROOT / "README.md").read_text()
    coverage = data_coverage(ROOT, docsgen.read_claims(ROOT / docsgen.SNAPSHOT))  # the README's results: the snapshot
    assert docsgen.rewrite_block(readme, docsgen.PAPERS_BLOCK, docsgen.papers_table_markdown(coverage)) == readme
    assert docsgen.main(["papers", str(ROOT / "README.md"), "--check"]) == 0
    copy = tmp_path / "README.md"
    copy.write_text(readme.replace(docsgen.CITATIONS["fedmm"].title, "Federated Multi-Marginal Domain Adaptation"))
    assert docsgen.main(["papers", str(copy), "--check"]) == 1  # a hand-edited title is out of date
    assert docsgen.main(["papers", str(copy)]) == 0
    assert copy.read_text() == readme


@pytest.mark.parametrize("paper", PAPERS)
def test_the_readme_row_names_the_paper_as_the_citation_does(paper):
    c = docsgen.CITATIONS[paper]
    row = next(line for line in (ROOT / "README.md").read_text().splitlines()
               if line.startswith(f"| **{c.name}** "))
    assert f"*{c.title}*" in row and str(c.year) in row and f"[docs/papers/{paper}.md]" in row
    assert f"— {short_authors(c)}, " in row


@pytest.mark.parametrize("paper", PAPERS)
def test_each_paper_page_is_headed_by_its_name_and_title(paper):
    text = (ROOT / "docs" / "papers" / f"{paper}.md").read_text()
    assert text.splitlines()[0] == docsgen.page_heading(paper)
    assert docsgen.CITATIONS[paper].title in docsgen.page_heading(paper)


def test_a_wrong_title_on_a_page_heading_is_told_apart():
    assert docsgen.page_heading("fedmm") != "# FedMM — federated multi-marginal domain adaptation"
    assert docsgen.page_heading("fedmm") == "# " + docsgen.CITATIONS["fedmm"].title  # the title starts with the name
    assert docsgen.page_heading("afl") == "# AFL — Agnostic Federated Learning"


def test_the_site_navigation_names_each_paper_page_by_its_name():
    nav = (ROOT / "mkdocs.yml").read_text()
    for paper, c in docsgen.CITATIONS.items():
        assert re.search(rf"^\s*- {re.escape(c.name)}: papers/{paper}\.md$", nav, re.M), paper


def test_the_results_pages_name_each_paper_by_its_citation():
    for paper, c in docsgen.CITATIONS.items():
        assert c.name in docsgen.PAPERS[paper] and c.title in docsgen.PAPERS[paper]


def test_citation_cff_references_are_the_citations_authors_venues_and_arxiv_ids():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    refs = {r["title"]: r for r in cff["references"]}
    assert set(refs) == {c.title for c in docsgen.CITATIONS.values()}
    for c in docsgen.CITATIONS.values():
        r = refs[c.title]
        names = tuple(f"{a['given-names']} {a['family-names']}" for a in r["authors"])
        assert names == c.authors, c.title
        assert [a["family-names"] for a in r["authors"]] == [FAMILY_NAMES.get(a, a.split()[-1])
                                                             for a in c.authors]
        assert (r["year"], r["url"]) == (c.year, c.url)
        assert {"type": "other", "value": f"arXiv:{c.arxiv}"} in r["identifiers"]
        assert r.get("collection-title", r.get("journal")) == c.venue
        assert r["type"] == {"inproceedings": "conference-paper", "misc": "article"}[c.kind]


@pytest.mark.parametrize("paper", PAPERS)
def test_each_paper_plug_in_title_names_the_paper_and_year_of_its_citation(paper):
    """The report's category (``Paper.title``) is short, but its name and year are the citation's."""
    module = importlib.import_module(f"fedshift.papers.{paper}.paper")
    (cls,) = [v for v in vars(module).values()
              if isinstance(v, type) and issubclass(v, Paper) and v is not Paper and v.__module__ == module.__name__]
    c = docsgen.CITATIONS[paper]
    assert cls.title.startswith(c.name + " (") and str(c.year) in cls.title, cls.title


# --- what the results ran on ------------------------------------------------------------------------------------------


def test_the_needs_data_verdicts_name_the_datasets_a_run_lacked():
    import pandas as pd

    claims = pd.DataFrame({"verdict": ["reproduced", "needs data: cifar10", "needs data: pacs, resnet50_imagenet"]})
    assert lacking_datasets(claims) == {"cifar10", "pacs", "resnet50_imagenet"}
    assert lacking_datasets(None) == set()
    assert short_dataset_name("UCI Adult (Census Income)") == "UCI Adult"
    assert short_dataset_name("MNIST handwritten digits") == "MNIST"


@pytest.mark.skipif(not (ROOT / docsgen.SNAPSHOT / "snapshot.json").exists(), reason="no snapshot committed")
def test_the_paper_table_says_which_data_the_committed_results_ran_on_and_which_only_on_stand_ins():
    """From each paper's declared datasets (its plug-in's ``datasets()``) and the run's "needs data" verdicts."""
    coverage = data_coverage(ROOT, docsgen.read_claims(ROOT / docsgen.SNAPSHOT))
    assert coverage["fedpals"] == DataCoverage(("Fashion-MNIST",), ("CIFAR-10", "iWildCam 2020 v2.0", "PACS v1.0"))
    assert coverage["fedmm"].standin == ("Office-31",) and "MNIST-M" in coverage["fedmm"].real
    assert coverage["afl"] == DataCoverage(("UCI Adult", "Fashion-MNIST"), ())
    assert "CIFAR-10" in coverage["wafl"].standin and "USPS" in coverage["wafl"].real
    assert not any(" weights" in name or "ResNet" in name for c in coverage.values() for name in c.real + c.standin)
    table = docsgen.papers_table_markdown(coverage, pages="papers/")
    fedpals = "| real: Fashion-MNIST; stand-ins only: CIFAR-10, iWildCam 2020 v2.0, PACS v1.0 | [FedPALS](papers/fedpals.md) |"
    assert fedpals in table
    assert data_coverage(ROOT, None) == {}  # no results: nothing said
