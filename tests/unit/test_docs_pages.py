"""The reader's pages: paper pages in the researchers' shape (citation, scales, hyper-parameters with sources), the
Algorithms page from the registry, the API page's cross-references, no development residue, and the conventions
(LICENSE, CITATION.cff, no web font, the README's first command)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from fedshift import docsgen
from fedshift.algorithms import registry

ROOT = Path(__file__).resolve().parents[2]
PAPERS = ("afl", "wafl", "fedmm", "agnostic_fedavg", "fedpals")
#: Pages another issue owns and the history page: the residue test reads every other page.
NOT_CHECKED = {"changelog.md"}


# --- residue ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["see papers_spec §3.2", "(issue 21)", "issues #4", "No GPU was lent to this task",
                                  "data_mirror=../shared/data", "the tree `/work/wt48/results`"])
def test_the_residue_pattern_finds_each_kind_of_development_reference(text):
    assert docsgen.RESIDUE.search(text)


def test_no_user_page_holds_development_residue():
    """Every docs page as a fresh clone's reader sees it (markers expanded over the committed snapshot), the
    snapshot's own pages, and the README."""
    snapshot = ROOT / docsgen.SNAPSHOT
    found = []
    pages = [p for p in (ROOT / "docs").rglob("*.md") if snapshot not in p.parents]
    for page in sorted(pages):
        rel = page.relative_to(ROOT / "docs")
        if rel.as_posix() in NOT_CHECKED:
            continue
        text = docsgen.expand_markers(page.read_text(), root=ROOT, results=snapshot, page_depth=len(rel.parts) - 1)
        found += [f"{rel}: {m.group(0)}" for m in docsgen.RESIDUE.finditer(text)]
    for page in sorted((snapshot / "pages").glob("*.md")):
        found += [f"{page.name}: {m.group(0)}" for m in docsgen.RESIDUE.finditer(page.read_text())]
    found += [f"README.md: {m.group(0)}" for m in docsgen.RESIDUE.finditer((ROOT / "README.md").read_text())]
    assert found == []


#: A work-log pointer ("issue 16", "Issues 6, 19", "issue #4") instead of the reason it stands for.
WORK_LOG = re.compile(r"\bissues? #?\d+", re.I)
#: The sources a reader or a user reads: the library (docstrings, comments, messages), the configuration and the docs.
SOURCES = ("src", "config", "docs")
SOURCE_SUFFIXES = {".py", ".yaml", ".yml", ".md", ".rst", ".smk", ".json", ".txt", ".cfg", ".toml", ".css"}


def test_no_source_points_at_an_issue_number_instead_of_its_reason():
    """Every file of ``src/``, ``config/`` and ``docs/`` (changelog and snapshot included) states its reasons.

    This reads the sources; the rendered text of a built site (the API reference's docstrings included) is read by
    ``tests/unit/test_docs.py::test_no_page_of_the_built_site_points_at_an_issue_number``, on the one site that file
    builds.
    """
    found = []
    for top in SOURCES:
        for path in sorted((ROOT / top).rglob("*")):
            if path.suffix not in SOURCE_SUFFIXES or not path.is_file() or "__pycache__" in path.parts:
                continue
            text = path.read_text(errors="replace")
            found += [f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
                      for m in WORK_LOG.finditer(text)]
    assert found == []


@pytest.mark.parametrize("text", ["(issue 16)", "Issue 39 added", "issues 6, 19", "issue #4", "# issue 47: could"])
def test_the_work_log_pattern_finds_each_spelling(text):
    assert WORK_LOG.search(text)


@pytest.mark.parametrize("text", ["a known issue with the mirror", "issues of the data", "tissue 5"])
def test_the_work_log_pattern_leaves_plain_words(text):
    assert not WORK_LOG.search(text)


def test_config_notes_lose_their_development_references():
    assert docsgen.clean_note("[code] --alpha 1 (papers_spec §3.4)") == "[code] --alpha 1"
    assert docsgen.clean_note("(x; papers_spec §3.4)") == "(x)"
    assert docsgen.clean_note("beside Fig. 4 (issue 16).") == "beside Fig. 4."
    assert docsgen.clean_note("official code, papers_spec §3") == "official code"


# --- paper pages ------------------------------------------------------------------------------------------------------


def test_every_paper_page_opens_with_its_citation_and_holds_scales_and_hyper_parameters():
    for paper in PAPERS:
        text = (ROOT / "docs" / "papers" / f"{paper}.md").read_text()
        markers = [text.find(f"<!-- fedshift:{m} {paper} -->") for m in ("citation", "scales", "hparams", "results")]
        assert -1 not in markers and markers == sorted(markers), paper
        assert text.find("<!-- fedshift:citation") < text.find("\n## About\n")
        assert '??? note "Implementation notes' in text  # the long implementation notes are folded
        for section in ("## Choices where the paper is silent", "## Deviations from the paper"):
            body = text.split(f"\n{section}\n", 1)[1].split("\n## ", 1)[0]
            prose = re.sub(r"<!--.*?-->", "", body).strip()
            assert len(prose) > 300, (paper, section)  # real content, not a pointer elsewhere


@pytest.mark.parametrize("paper", PAPERS)
def test_a_citation_has_authors_year_venue_and_links_in_markdown_and_bibtex(paper):
    c = docsgen.CITATIONS[paper]
    md = docsgen.citation_markdown(paper)
    bib = docsgen.bibtex(c)
    assert len(c.authors) >= 3 and ", ".join(c.authors) in md
    assert f"https://arxiv.org/abs/{c.arxiv}" in md and c.url in md
    assert f"author        = {{{' and '.join(c.authors)}}}" in bib and f"year          = {{{c.year}}}" in bib
    assert bib.startswith(f"@{c.kind}{{{c.key},") and "url" in bib
    assert 150 < len(c.abstract) < 600  # two or three lines


def test_citation_cff_lists_the_software_and_the_five_papers_as_in_the_pages():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["license"] == "MIT" and cff["type"] == "software"
    refs = {(r["title"], r["year"], r["url"]) for r in cff["references"]}
    assert refs == {(c.title, c.year, c.url) for c in docsgen.CITATIONS.values()}
    assert "MIT License" in (ROOT / "LICENSE").read_text()
    assert 'license = { text = "MIT" }' in (ROOT / "pyproject.toml").read_text()


@pytest.mark.parametrize("note,source", [
    ("[ours] 20 % held out: the paper gives no validation protocol", "ours"),  # the explicit tag wins
    ("\"we used PERDOMAIN stochastic gradients\" (§5)", "paper"),
    ("silent in the paper, 10 as in fair_flearn's AFL.", "code"),  # the code's value, though the paper is silent
    ("silent in the paper; a moderate tilt", "ours"),
    ("--learning_rate 0.001 (README)", "code"),
    ("T", ""),  # names no source
])
def test_a_values_source_is_read_from_its_note(note, source):
    assert docsgen.value_source(note) == source


def test_the_hyper_parameter_table_gives_each_annotated_value_with_its_source():
    rows = {r["key"]: r for r in docsgen.hparam_rows(ROOT, "afl")}
    assert rows["defaults.validation_fraction"]["value"] == "0.2" and rows["defaults.validation_fraction"]["source"] \
        == "ours"
    seeds = rows["experiments.afl_adult.seeds"]
    assert (seeds["value"], seeds["source"]) == ("50", "paper")
    assert rows["defaults.train.w_gradient"]["source"] == "paper"
    # a file whose header says "Paper settings … unless marked" gives its unmarked notes the paper as source
    wafl = {r["key"]: r for r in docsgen.hparam_rows(ROOT, "wafl")}
    assert wafl["defaults.train.local_epochs"]["source"] == "paper"
    assert not any("papers_spec" in r["note"] for r in wafl.values())
    md = docsgen.hparams_markdown(ROOT, "afl")
    assert "| `defaults.validation_fraction` | `0.2` | [ours] |" in md
    # a commented mapping shows its keys and values, not a blank cell
    assert rows["experiments.afl_adult.domains"]["value"] == "{\"by\": \"domain\"}"
    assert all(r["value"] for r in rows.values())


def test_the_scales_table_stacks_the_overlays_and_shows_measured_cpu():
    rows = {r["scale"]: r for r in docsgen.scale_rows(ROOT, "afl", {"quick": 7200.0})}
    assert rows["paper"]["seeds"] == "10–50" and rows["quick"]["seeds"] == "3–5"  # quick.yaml: 5 and 3 seeds
    assert rows["quick"]["cpu"] == "2.00 CPU-h" and rows["paper"]["cpu"] == "–"
    assert docsgen.scale_rows(ROOT, "afl", {"quick": 71.6})[1]["cpu"] == "1.2 CPU-min"
    wafl = {r["scale"]: r for r in docsgen.scale_rows(ROOT, "wafl")}
    assert wafl["paper"]["outputs"] == "fig2, fig3, fig4, fig5, table2" and wafl["quick"]["outputs"] == "fig4"


# --- algorithms -------------------------------------------------------------------------------------------------------


def test_the_algorithms_page_lists_every_registered_algorithm_with_the_imported_hyper_parameters():
    docs = {d.name: d for d in docsgen.algorithm_docs(ROOT)}
    assert sorted(docs) == registry.names()
    for name, d in docs.items():
        spec = registry.get(name)
        assert [h.name for h in d.hparams] == list(spec.hparams), name  # read from the source == the imported spec
        assert d.bounds == {k: str(v) for k, v in spec.bounds.items()}
        assert set(d.needs) == spec.needs
    assert docs["fedpals"].columns == ("label",)  # only the label shift gives T
    assert "fedpals" in docs["fedpals"].papers and docs["fedpals"].link == "../papers/fedpals.md"
    assert docs["fedadam"].tests[0] == "test_fedopt.py::test_three_rounds_match_algorithm_2_computed_by_hand"
    md = docsgen.algorithms_markdown(ROOT)
    assert md.count("\n## `") == len(docs)
    assert "| `mu` | `float` | *required* | `[0, inf)` |" in md  # FedProx's μ: no default, its declared range


def test_an_algorithms_matrix_columns_are_those_where_the_matrix_gives_it_a_cell_that_runs():
    """Read from the matrix's own cells (its ``status`` per column and model), not from the side information alone."""
    from fedshift.papers.shift_matrix.paper import ShiftMatrixPaper

    section = yaml.safe_load((ROOT / "config" / "papers" / "shift_matrix.yaml").read_text())["shift_matrix"]
    matrix = ShiftMatrixPaper({"shift_matrix": section})  # the matrix itself, imported here
    docs = {d.name: d for d in docsgen.algorithm_docs(ROOT)}
    for name, d in docs.items():
        runs = [c for c, s in matrix.shifts.items() if any(matrix.status(name, s, m) is None for m in matrix.models)]
        assert list(d.columns) == runs, name
    assert docs["fedbn"].columns == ()  # its own loop and no cell hook: n/a in every column
    assert "fedavg" in docs and len(docs["fedavg"].columns) == len(matrix.shifts)
    assert "- **Matrix columns**: –" in docsgen.algorithms_markdown(ROOT).split("## `fedbn`")[1]


def test_a_declared_range_and_a_fixed_argument_are_shown_from_the_declaration_alone(tmp_path):
    code = ("import sys\nfrom pathlib import Path\nfrom fedshift import docsgen\n"
            f"md = docsgen.algorithms_markdown(Path({str(ROOT)!r}))\n"
            "assert not any(m == 'torch' or m.startswith('torch.') for m in sys.modules)\nprint(md)")
    md = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "| `beta1` | `float` | `0.9` | `[0, 1)` |" in md  # FedAdam's settings field, its range and default
    assert "| `client_lr` | `float` | *required* | `(0, inf)` |" in md  # the common round's, declared once
    assert "fixes `kind='adam'`" in md and "| `num_clients` |" not in md  # the data-derived count drops out


# --- API page ---------------------------------------------------------------------------------------------------------


def test_sphinx_roles_become_links_to_the_anchor_the_relative_name_resolves_to():
    html = ('<h2 id="fedshift.contract">m</h2><div><h3 id="fedshift.contract.Paper">P</h3>'
            '<h4 id="fedshift.contract.Paper.runs">r</h4><p>see :meth:<code>Paper.runs</code>, '
            ':func:<code>~fedshift.jobs.train_job</code> and :class:<code>Unknown</code>.</p></div>')
    out = docsgen.sphinx_roles_to_links(html)
    assert '<a href="#fedshift.contract.Paper.runs"><code>Paper.runs</code></a>' in out
    assert '<autoref identifier="fedshift.jobs.train_job" optional><code>train_job</code></autoref>' in out
    assert '<autoref identifier="Unknown" optional><code>Unknown</code></autoref>' in out
    assert not re.search(r":(func|meth|class):<code>", out)


# --- conventions ------------------------------------------------------------------------------------------------------


def test_the_theme_requests_no_web_font_and_the_algorithms_page_is_in_the_nav():
    text = (ROOT / "mkdocs.yml").read_text()
    assert re.search(r"^  font: false\b", text, re.M)
    assert "reference/algorithms.md" in text


def test_the_readme_first_command_downloads_and_names_the_mirror_variant_beside_it():
    text = (ROOT / "README.md").read_text()
    first = re.findall(r"```bash\n(.*?)```", text, re.S)[0]
    assert "data_mirror" not in first
    after = text.split(first, 1)[1].split("```bash", 1)[0]
    assert "data_mirror=" in after  # the mirror variant follows it


# --- schema descriptions ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("section,path", docsgen.schema_files(ROOT), ids=lambda x: str(x))
def test_every_configuration_key_has_its_own_schema_description(section, path):
    """A key's meaning is the schema's description, never an empty cell nor one config file's comment."""
    keys = docsgen.schema_keys(yaml.safe_load(path.read_text()), section)
    empty = [k.path for k in keys if not k.meaning.strip() and not k.path.endswith(".*")]
    assert keys and empty == []


def test_the_description_test_names_a_key_without_one():
    schema = {"type": "object", "properties": {"a": {"type": "integer", "description": "A count."},
                                               "b": {"type": "object", "properties": {"c": {"type": "number"}}}}}
    keys = docsgen.schema_keys(schema, "x")
    assert [k.path for k in keys if not k.meaning] == ["x.b", "x.b.c"]


# --- the results snapshot ---------------------------------------------------------------------------------------------


def test_a_snapshot_copies_tables_and_figures_stamped_and_renders_as_the_run_did(tmp_path):
    from test_docs import small_run

    results = tmp_path / "results"
    files = small_run(results)
    snap = tmp_path / "snap"
    stamp = docsgen.take_snapshot(results, snap, name="test-run", root=ROOT, date="2026-11-28")
    copied = sorted(p.relative_to(snap).as_posix() for p in snap.rglob("*") if p.is_file())
    assert "tables/wafl/fig4.csv" in copied and "figures/wafl/fig4.png" in copied and "tables/claims.csv" in copied
    assert not any(c.startswith("runs/") for c in copied)  # the run.json files stay behind; their facts are stamped
    assert (snap / "figures" / "wafl" / "fig4.png").read_bytes() == files["figure"].read_bytes()
    assert stamp["name"] == "test-run" and stamp["date"] == "2026-11-28" and stamp["scale"] == "quick"
    assert stamp["commits"] == ["0123456789"] and stamp["papers"]["wafl"]["cpu_s"] == 11.2
    assert any("NVIDIA H100 80GB HBM3" in m for m in stamp["machines"])
    # the snapshot's pages say where they come from and show what the run's own tree shows
    claims = docsgen.read_claims(results)
    own = docsgen.paper_results_markdown(results, "wafl", "../figures", claims)
    from_snap = docsgen.paper_results_markdown(snap, "wafl", "../figures", docsgen.read_claims(snap))
    assert from_snap == own
    pages = dict(docsgen.snapshot_pages(snap))
    assert set(pages) == {"verdicts.md", "afl.md", "wafl.md"}
    assert 'Where these results come from' in pages["wafl.md"] and "committed snapshot test-run" in pages["wafl.md"]
    assert '"Results from the committed snapshot' not in pages["wafl.md"]  # titled for a reader, not by its run
    assert "0.9211" in pages["wafl.md"]
    assert docsgen.source_note(results) == ""  # a run's own tree says nothing of a snapshot
    assert "| wafl | quick | 3 | 11.2 |" in docsgen.benchmarks_markdown(snap)  # the CPU it stamped
    assert "Not in the committed snapshot" in docsgen.paper_results_markdown(snap, "fedmm", "../figures")
    assert docsgen.main(["snapshot-pages", str(snap), "--check"]) == 0
    (snap / "tables" / "wafl" / "fig4.csv").write_text("fraction,accuracy\n0.0,0.5\n")  # a hand edit
    assert docsgen.main(["snapshot-pages", str(snap), "--check"]) == 1
    assert docsgen.main(["snapshot-pages", str(snap)]) == 0  # rewritten from the snapshot's own files
    assert docsgen.main(["snapshot-pages", str(snap), "--check"]) == 0
    assert "0.5" in (snap / "pages" / "wafl.md").read_text()


def test_a_second_run_added_to_a_snapshot_replaces_only_its_papers_and_each_page_names_its_own_run(tmp_path):
    from test_docs import small_run

    snap = tmp_path / "snap"
    small_run(tmp_path / "first")
    docsgen.take_snapshot(tmp_path / "first", snap, name="papers-run", root=ROOT, date="2026-11-27")
    with pytest.raises(FileNotFoundError, match="no snapshot"):
        docsgen.take_snapshot(tmp_path / "first", tmp_path / "none", name="x", root=ROOT, add=True)
    second = tmp_path / "second"  # a later run of one paper only (as the matrix's own run), no claims
    small_run(second)
    shutil.rmtree(second / "tables" / "afl")
    shutil.rmtree(second / "runs" / "afl")
    (second / "tables" / "claims.csv").unlink()
    (second / "tables" / "wafl" / "fig4.csv").write_text("fraction,accuracy\n0.0,0.4242\n")
    for run_json in (second / "runs" / "wafl").rglob("run.json"):
        run_json.write_text(run_json.read_text().replace("0123456789", "abcdef0123"))
    stamp = docsgen.take_snapshot(second, snap, name="matrix-run", root=ROOT, date="2026-11-28", add=True)
    assert stamp["papers"]["afl"]["snapshot"] == "papers-run" and stamp["papers"]["wafl"]["snapshot"] == "matrix-run"
    assert stamp["name"] == "papers-run; matrix-run" and stamp["date"] == "2026-11-28"
    assert stamp["commits"] == ["0123456789", "abcdef0123"]
    assert (snap / "tables" / "afl" / "table1_adult.md").is_file() and (snap / "tables" / "claims.csv").is_file()
    pages = dict(docsgen.snapshot_pages(snap))
    assert "0.4242" in pages["wafl.md"] and "0.9211" not in pages["wafl.md"]  # the new run's numbers replace
    assert "snapshot matrix-run" in pages["wafl.md"] and "`abcdef0123`" in pages["wafl.md"]
    assert "snapshot papers-run" in pages["afl.md"] and "of 2026-11-27" in pages["afl.md"]
    # the verdicts name the runs of the papers that have claims (here both: the claims came with the first run)
    assert "snapshot papers-run; matrix-run" in pages["verdicts.md"]
    assert docsgen.main(["snapshot-pages", str(snap), "--check"]) == 0


def test_a_snapshot_refuses_an_empty_tree_and_a_folder_inside_the_results(tmp_path):
    (tmp_path / "results" / "tables").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="no table"):
        docsgen.take_snapshot(tmp_path / "results", tmp_path / "snap", name="x", root=ROOT)
    with pytest.raises(ValueError, match="inside the results tree"):
        docsgen.take_snapshot(tmp_path / "results", tmp_path / "results" / "snap", name="x", root=ROOT)


def test_the_site_renders_the_readers_results_else_the_committed_snapshot(tmp_path):
    assert docsgen.docs_results(tmp_path, str(tmp_path / "elsewhere")) == (tmp_path / "elsewhere").resolve()
    assert docsgen.docs_results(tmp_path) == (tmp_path / docsgen.SNAPSHOT).resolve()  # no run: the snapshot
    (tmp_path / "results" / "tables" / "afl").mkdir(parents=True)
    (tmp_path / "results" / "tables" / "afl" / "t.csv").write_text("a\n1\n")
    assert docsgen.docs_results(tmp_path) == (tmp_path / "results").resolve()  # a run's own tables win


SNAP = ROOT / docsgen.SNAPSHOT


@pytest.mark.skipif(not (SNAP / "snapshot.json").exists(), reason="no snapshot committed")
def test_the_committed_snapshot_pages_are_what_the_generator_makes_from_the_committed_files():
    made = dict(docsgen.snapshot_pages(SNAP))
    committed = {p.relative_to(SNAP / "pages").as_posix(): p.read_text() for p in (SNAP / "pages").rglob("*.md")}
    assert committed == made
    stamp = docsgen.read_stamp(SNAP)
    assert stamp["name"] and stamp["scale"] and stamp["commits"] and stamp["machines"] and stamp["date"]
    assert all(p.stat().st_size < 400_000 for p in SNAP.rglob("*") if p.is_file())  # small files only


@pytest.mark.skipif(not (SNAP / "snapshot.json").exists(), reason="no snapshot committed")
def test_without_a_run_a_paper_page_shows_the_snapshots_numbers_and_says_where_they_come_from():
    text = (ROOT / "docs" / "papers" / "afl.md").read_text()
    page = docsgen.expand_markers(text, root=ROOT, results=SNAP, page_depth=1)
    stamp = docsgen.read_stamp(SNAP)
    run = stamp["papers"]["afl"].get("snapshot", stamp["name"])  # the run that made this paper's results
    assert f"The committed snapshot {run}:" in page and "Where these results come from" in page
    table = (SNAP / "tables" / "afl" / "table1_adult.md").read_text()
    assert table in page and re.search(r"\d+\.\d+ ± \d+\.\d+", table)  # the run's numbers, in the paper's layout
    assert "(../generated/tables/afl/table1_adult.csv)" in page and "(../generated/figures/afl/table1_adult.png)" in page


def test_a_large_figure_is_stored_in_the_snapshot_as_a_smaller_palette_png_of_the_same_size(tmp_path):
    import numpy as np
    from PIL import Image
    from test_docs import small_run

    from fedshift.docsgen import snapshot

    results = tmp_path / "results"
    small_run(results)
    big = results / "figures" / "wafl" / "heatmap.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (400, 400, 3), dtype=np.uint8)).save(big)
    assert big.stat().st_size > snapshot.COMPACT_PNG_BYTES
    docsgen.take_snapshot(results, tmp_path / "snap", name="x", root=ROOT)
    kept = tmp_path / "snap" / "figures" / "wafl"
    with Image.open(kept / "heatmap.png") as im:
        assert im.mode == "P" and im.size == (400, 400)
    assert (kept / "heatmap.png").stat().st_size < big.stat().st_size
    assert (kept / "fig4.png").read_bytes() == (results / "figures" / "wafl" / "fig4.png").read_bytes()  # small: as is


def test_a_run_added_with_its_own_verdicts_replaces_only_its_papers_rows(tmp_path):
    """A FedMM-only run at another scale keeps the other papers' verdicts of the first run, in their order."""
    from test_docs import small_run

    snap = tmp_path / "snap"
    small_run(tmp_path / "first")
    docsgen.take_snapshot(tmp_path / "first", snap, name="papers-run", root=ROOT, date="2026-11-27")
    before = pd.read_csv(snap / "tables" / "claims.csv")
    second = tmp_path / "second"
    small_run(second)
    shutil.rmtree(second / "tables" / "afl")
    shutil.rmtree(second / "runs" / "afl")
    new = pd.read_csv(second / "tables" / "claims.csv")
    mine = new["paper"] == "wafl"
    new.loc[mine, "scale"], new.loc[mine, "ours"] = "decisive", 42.0
    new.loc[~mine, ["scale", "verdict"]] = ["decisive", "not run"]  # as claims_papers leaves the other papers
    new.to_csv(second / "tables" / "claims.csv", index=False)
    docsgen.take_snapshot(second, snap, name="wafl-run", root=ROOT, date="2026-11-28", add=True)
    after = pd.read_csv(snap / "tables" / "claims.csv")
    assert list(after["claim"]) == list(before["claim"]) and list(after.columns) == list(before.columns)
    wafl = after["paper"] == "wafl"
    assert wafl.any() and (after.loc[wafl, "ours"] == 42.0).all() and (after.loc[wafl, "scale"] == "decisive").all()
    pd.testing.assert_frame_equal(after[~wafl].reset_index(drop=True), before[~wafl].reset_index(drop=True))
    assert "42" in (snap / "tables" / "claims.md").read_text()
    assert docsgen.main(["snapshot-pages", str(snap), "--check"]) == 0
    # a third run with a second run's verdicts beside its rows: the columns stay, empty on the other papers' rows
    new.loc[mine, ["second_verdict", "agreement"]] = ["reproduced", "same"]
    new.to_csv(second / "tables" / "claims.csv", index=False)
    docsgen.take_snapshot(second, snap, name="wafl-twin", root=ROOT, date="2026-11-28", add=True)
    third = pd.read_csv(snap / "tables" / "claims.csv")
    assert list(third.columns) == [*before.columns, "second_verdict", "agreement"]
    assert (third.loc[wafl, "agreement"] == "same").all() and third.loc[~wafl, "agreement"].isna().all()
    assert docsgen.main(["snapshot-pages", str(snap), "--check"]) == 0


def test_a_second_runs_claims_go_beside_only_the_rows_it_judged_keeping_an_earlier_second_run(tmp_path):
    """The FedMM twin case: the first run's tree is gone; the snapshot and the second run's claims.csv suffice, and a
    second run made in parts adds up row by row."""
    from test_docs import small_run

    snap = tmp_path / "snap"
    small_run(tmp_path / "first")
    docsgen.take_snapshot(tmp_path / "first", snap, name="papers-run", root=ROOT, date="2026-11-27")
    with pytest.raises(FileNotFoundError, match="no snapshot"):
        docsgen.add_second_run(tmp_path / "first", tmp_path / "first" / "tables" / "claims.csv")
    before = pd.read_csv(snap / "tables" / "claims.csv")
    # an earlier second run judged afl only
    afl_twin = before.assign(machine="Twin CPU (baseline, portable_cpu on): 6 runs")
    afl_twin.loc[afl_twin["paper"] == "wafl", "verdict"] = "not run"
    afl_twin.to_csv(tmp_path / "afl_twin.csv", index=False)
    docsgen.add_second_run(snap, tmp_path / "afl_twin.csv")
    # now a second run of wafl alone, whose verdict differs; its afl rows are not run
    wafl_twin = before.assign(machine="Twin CPU (baseline, portable_cpu on): 3 runs", n=16)
    wafl = wafl_twin["paper"] == "wafl"
    wafl_twin.loc[wafl, ["verdict", "ours", "ci_low", "ci_high"]] = ["reproduced", 2.5, 0.5, 4.5]
    wafl_twin.loc[~wafl, "verdict"] = "not run"
    wafl_twin.to_csv(tmp_path / "wafl_twin.csv", index=False)
    assert docsgen.main(["snapshot-second", str(tmp_path / "wafl_twin.csv"), str(snap)]) == 0
    after = pd.read_csv(snap / "tables" / "claims.csv", keep_default_na=False)
    assert list(after.columns[:len(before.columns)]) == list(before.columns)
    by = after.set_index("claim")
    assert by.at["wafl_80", "second_verdict"] == "reproduced" and by.at["wafl_80", "agreement"] == "different"
    assert by.at["wafl_80", "second_ci_low"] == 0.5 and by.at["wafl_80", "second_n"] == 16
    assert by.at["wafl_80", "second_machine"] == "Twin CPU (baseline, portable_cpu on): 3 runs"
    # the afl rows keep the earlier second run's verdicts and machine
    assert by.at["afl_lead", "second_verdict"] == "reproduced" and by.at["afl_lead", "agreement"] == "same"
    assert by.at["afl_lead", "second_machine"] == "Twin CPU (baseline, portable_cpu on): 6 runs"
    pd.testing.assert_frame_equal(after[list(before.columns)].replace("", float("nan")), before, check_dtype=False)
    assert "2nd run 2.50 [0.50, 4.50] at 16 runs, **reproduced**" in (snap / "tables" / "claims.md").read_text()
    assert docsgen.main(["snapshot-pages", str(snap), "--check"]) == 0
    # a later part of afl's second run computed afl_gap only: afl_lead keeps the first part's columns
    part = afl_twin.assign(machine="Twin CPU (baseline, portable_cpu on): 2 runs")
    part.loc[part["claim"] == "afl_lead", "verdict"] = "needs data"
    part.loc[part["claim"] == "afl_gap", ["verdict", "ours"]] = ["reproduced", 9.0]
    part.to_csv(tmp_path / "afl_part.csv", index=False)
    by = docsgen.add_second_run(snap, tmp_path / "afl_part.csv").set_index("claim")
    assert by.at["afl_gap", "second_ours"] == 9.0 and by.at["afl_gap", "agreement"] == "different"
    assert by.at["afl_gap", "second_machine"] == "Twin CPU (baseline, portable_cpu on): 2 runs"
    assert by.at["afl_lead", "second_machine"] == "Twin CPU (baseline, portable_cpu on): 6 runs"
    assert by.at["wafl_80", "second_verdict"] == "reproduced"
    # another part of afl's with the same run count as the first reads as a part of its own, not as the same runs
    again = part.assign(machine="Twin CPU (baseline, portable_cpu on): 6 runs")
    again.loc[again["claim"] == "afl_gap", ["verdict", "ours"]] = ["reproduced", 3.0]
    again.to_csv(tmp_path / "afl_again.csv", index=False)
    by = docsgen.add_second_run(snap, tmp_path / "afl_again.csv").set_index("claim")
    assert by.at["afl_gap", "second_machine"] == "Twin CPU (baseline, portable_cpu on): 6 runs, part 2"
    assert by.at["afl_gap", "second_ours"] == 3.0
    assert by.at["afl_lead", "second_machine"] == "Twin CPU (baseline, portable_cpu on): 6 runs"
    assert docsgen.main(["snapshot-pages", str(snap), "--check"]) == 0
    assert "6 runs, part 2 (afl)" in (snap / "pages" / "verdicts.md").read_text()
    # so is another paper's run that happens to have the same count as an earlier run of other papers
    wafl_again = wafl_twin.assign(machine="Twin CPU (baseline, portable_cpu on): 6 runs")
    wafl_again.to_csv(tmp_path / "wafl_again.csv", index=False)
    by = docsgen.add_second_run(snap, tmp_path / "wafl_again.csv").set_index("claim")
    assert by.at["wafl_80", "second_machine"] == "Twin CPU (baseline, portable_cpu on): 6 runs, part 3"
    # a second run that computed nothing, or at another scale, is refused
    wafl_twin.assign(verdict="not run").to_csv(tmp_path / "none.csv", index=False)
    with pytest.raises(ValueError, match="no verdict"):
        docsgen.add_second_run(snap, tmp_path / "none.csv")
    wafl_twin.assign(scale="decisive").to_csv(tmp_path / "other_scale.csv", index=False)
    with pytest.raises(ValueError, match="different scales"):
        docsgen.add_second_run(snap, tmp_path / "other_scale.csv")


# --- table captions ---------------------------------------------------------------------------------------------------


def _bracket_legend(markdown: str) -> bool:
    """Whether a table's Markdown says what its brackets hold: a bracketed header, a caption naming the brackets, or
    a caption that writes the layout with brackets itself ("ours [the paper's]", "mean [95 % t-interval]")."""
    rows = [line for line in markdown.splitlines() if line.startswith("|")]
    caption = "\n".join(line for line in markdown.splitlines() if not line.startswith("|"))
    bracketed_header = bool(rows) and "[" in rows[0]
    return bracketed_header or "bracket" in caption.lower() or bool(re.search(r"\w \[[^\]]+\]", caption))


@pytest.mark.skipif(not (ROOT / docsgen.SNAPSHOT / "snapshot.json").exists(), reason="no snapshot committed")
def test_every_committed_table_with_brackets_says_what_they_hold():
    """A cell such as "35.28 [79.27]" (WAFL Table 2: ours [the paper's]) is read only with its legend."""
    lacking = []
    for path in sorted((ROOT / docsgen.SNAPSHOT / "tables").rglob("*.md")):
        text = path.read_text()
        body = [line for line in text.splitlines() if line.startswith("|") and not line.startswith("|---")][1:]
        if any("[" in line for line in body) and not _bracket_legend(text):
            lacking.append(path.name)
        if any("(paper " in line for line in body):
            assert "(paper: the paper's value)" in text, path.name
    assert lacking == []
    assert not _bracket_legend("| a | b |\n|---|---|\n| 1 [2] | 3 |\n")


# --- home page --------------------------------------------------------------------------------------------------------


@pytest.mark.skipif(not (ROOT / docsgen.SNAPSHOT / "snapshot.json").exists(), reason="no snapshot committed")
def test_the_home_page_opens_with_the_verdict_counts_and_then_says_where_they_come_from():
    page = docsgen.expand_markers((ROOT / "docs" / "index.md").read_text(), root=ROOT, results=ROOT / docsgen.SNAPSHOT,
                                  page_depth=0)
    body = page.split("\n", 1)[1]  # under the page title
    first_table = body.index("\n|")
    assert body[first_table:].startswith("\n| paper |") and "reproduced" in body[first_table:].split("\n")[1]
    assert "##" not in body[:first_table] and "!!!" not in body[:first_table]  # no heading or box above the counts
    assert body.index("!!! info \"Where these results come from\"") > first_table
    assert "four papers\"" not in page  # the box is not titled by the run's name
