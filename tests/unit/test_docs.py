"""The documentation: a short README without diaries, a configuration reference that covers every schema key, results
pages generated from a results tree (never hand-copied), recipes whose code exists, and a site that builds strictly."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from fedshift import docsgen

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAPER_SECTIONS = ["## About", "## What runs", "## Choices where the paper is silent", "## Expected results",
                  "## Deviations from the paper"]


# --- README --------------------------------------------------------------------------------------------------------


def test_readme_fits_two_screens_and_holds_no_commit_hash_stop_or_timing():
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    hashes = [t for t in re.findall(r"\b[0-9a-f]{7,40}\b", text) if re.search(r"[a-f]", t) and re.search(r"\d", t)]
    assert hashes == []
    assert not re.search(r"\bstop \d+", text, re.I)
    assert not re.search(r"\d+(\.\d+)? ?(min|s|CPU-minutes|CPU-s)\b", text)  # timings live with the benchmarks
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text)  # no dated measurements


def test_readme_starts_with_the_two_commands_and_the_test_command_is_what_ci_runs():
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(), re.S)
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert blocks[0].strip().startswith("bash bin/setup && .venv/bin/snakemake") and "config/quick.yaml" in blocks[0]
    assert blocks[1].strip() == ci == ("bash bin/setup && .venv/bin/python -m pytest --maxfail=1 "
                                       "--cpu-report results/benchmarks/suite_cpu.csv")


def test_readme_links_point_at_existing_files():
    for target in re.findall(r"\]\(((?!https?:)[^)#]+)\)", README.read_text()):
        assert (ROOT / target).exists(), target


def test_readme_verdict_counts_block_is_rewritten_from_claims_csv(tmp_path):
    results = tmp_path / "results"
    _claims(results, scale="quick")
    readme = tmp_path / "README.md"
    readme.write_text("a\n<!-- verdict-counts:begin (x) -->\nold\n<!-- verdict-counts:end -->\nb\n")
    assert docsgen.main(["readme", str(readme), str(results)]) == 0
    text = readme.read_text()
    assert "\nold\n" not in text and "Every paper: scale **quick**." in text  # shared: a line, not a column
    assert "| paper | seeds | reproduced | not reproduced | inconclusive |" in text  # verdicts no paper has: no column
    assert "| afl | 3 | 1 | 0 | 1 |" in text and "| wafl | 3 | 0 | 1 | 0 |" in text
    assert "| **all** |  | **1** | **1** | **1** |" in text
    assert ("No paper has a verdict *smaller than claimed*, *equivalent to zero*, *not judged*, *needs data*, "
            "*not yet judged*, *cannot be reproduced*, *not run*.") in text
    assert "Runs made on" not in text  # a table without the machine column names none
    mixed = pd.read_csv(results / "tables" / "claims.csv")
    mixed["scale"] = ["quick"] + ["decisive"] * (len(mixed) - 1)
    assert "| paper | scale | seeds | reproduced |" in docsgen.verdict_counts_markdown(mixed)  # scales differ: a column


def test_readme_verdict_block_names_seeds_config_and_machine_and_is_chosen_by_name(tmp_path):
    results = tmp_path / "results"
    t = _claims(results, scale="decisive")
    t["n"] = [3, 19, ""]  # the paper's judged rows' seed range; a row without runs adds nothing
    t.loc[len(t)] = {**t.loc[0].to_dict(), "claim": "afl_lm", "verdict": "needs data: cornell_movie_dialogs", "n": 0,
                     "ours": float("nan")}  # counted under "needs data"; its 0 runs are no seed count
    t["config"] = "config/quick.yaml config/decisive.yaml"
    t["machine"] = "Test CPU 9000 (AVX2, portable_cpu off): 12 runs"
    t.to_csv(results / "tables" / "claims.csv", index=False)
    readme = tmp_path / "README.md"
    readme.write_text("<!-- verdict-counts:begin -->\nquick\n<!-- verdict-counts:end -->\n"
                      "<!-- verdict-counts-decisive:begin -->\nold\n<!-- verdict-counts-decisive:end -->\n")
    assert docsgen.main(["readme", str(readme), str(results), "--block", "verdict-counts-decisive"]) == 0
    text = readme.read_text()
    assert "quick\n" in text and "old" not in text  # only the named block is rewritten
    assert "Every paper: scale **decisive**, config `config/quick.yaml config/decisive.yaml`." in text
    assert "| paper | seeds | reproduced | not reproduced | inconclusive | needs data |" in text
    assert "| afl | 3–19 | 1 | 0 | 1 | 1 |" in text
    assert "| wafl | — |" in text
    assert "Runs made on Test CPU 9000 (AVX2, portable_cpu off): 12 runs." in text
    # the real README holds exactly one such block, and one decisive block beside it
    assert docsgen.rewrite_block(README.read_text(), docsgen.README_BLOCK, "x").count("\nx\n") == 1
    assert docsgen.rewrite_block(README.read_text(), "verdict-counts-decisive", "x").count("\nx\n") == 1


def test_a_run_restricted_to_some_papers_counts_only_those(tmp_path):
    results = tmp_path / "results"
    t = _claims(results, scale="decisive")
    t["note"] = ""
    others = [{**t.loc[0].to_dict(), "paper": "fedpals", "claim": f"fp{i}", "verdict": "not run",
               "note": "not among claims_papers", "n": 0} for i in range(2)]
    lm = {**t.loc[0].to_dict(), "paper": "fedpals", "claim": "fp_lm", "verdict": "needs data: iwildcam", "n": 0,
          "note": "not in the data mirror"}
    judged_lm = {**lm, "paper": "wafl", "claim": "wafl_lm"}  # a judged paper keeps its needs-data row
    t = pd.concat([t, pd.DataFrame([*others, lm, judged_lm])], ignore_index=True)
    counts = docsgen.verdict_counts(t)
    assert list(counts["paper"]) == ["afl", "wafl"]
    assert int(counts.set_index("paper").loc["wafl", "needs data"]) == 1
    # without the run's own notes (a table written before them) every paper is counted
    assert list(docsgen.verdict_counts(t.drop(columns="note"))["paper"]) == ["afl", "wafl", "fedpals"]


# --- configuration reference ---------------------------------------------------------------------------------------


def _property_names(node, found=None):
    """Every key named under ``properties`` anywhere in a schema (a plain scan, independent of docsgen's walker)."""
    found = set() if found is None else found
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "properties" and isinstance(v, dict):
                found |= set(v)
            _property_names(v, found)
    elif isinstance(node, list):
        for v in node:
            _property_names(v, found)
    return found


@pytest.mark.parametrize("section,path", docsgen.schema_files(ROOT), ids=lambda x: str(x))
def test_the_configuration_reference_lists_every_key_of_every_schema(section, path):
    schema = yaml.safe_load(path.read_text())
    reference = docsgen.config_reference(ROOT)
    part = reference.split(f"Schema `{path.relative_to(ROOT).as_posix()}`", 1)[1].split("\n### ", 1)[0]
    listed = {html.unescape(m.replace("<wbr>", "").replace("\\*", "*"))
              for m in re.findall(r'^\| \**<code class="fs-key">(.+?)</code>', part, re.M)}
    assert len(listed) > 5
    last = {re.split(r"[.\[]", k.removesuffix("[]"))[-1] for k in listed if not k.endswith(".*")}
    assert sorted(_property_names(schema) - last) == []


def test_config_readme_holds_the_current_generated_reference():
    assert docsgen.main(["config", str(ROOT / "config" / "README.md"), "--check"]) == 0, \
        "run `python -m fedshift.docsgen config config/README.md`"
    assert docsgen.config_reference(ROOT) in (ROOT / "config" / "README.md").read_text()


def test_schema_keys_follow_refs_free_names_items_and_alternatives():
    schema = {"type": "object", "required": ["a"], "properties": {
        "a": {"type": "integer", "minimum": 1, "default": 3, "description": "the a"},
        "b": {"$ref": "#/$defs/train"},
        "c": {"$ref": "#/$defs/train"},
        "runs": {"type": "object", "additionalProperties": {"type": "object", "properties": {
            "lr": {"type": "number", "exclusiveMinimum": 0}}}},
        "files": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
        "init": {"oneOf": [{"enum": ["uniform"]}, {"type": "array", "items": {"type": "number"}}]}},
        "$defs": {"train": {"type": "object", "properties": {"rounds": {"type": "integer"}}}}}
    keys = {k.path: k for k in docsgen.schema_keys(schema, "p")}
    assert keys["p.a"].required and keys["p.a"].default == "3" and keys["p.a"].range == "≥ 1"
    assert keys["p.a"].meaning == "the a" and keys["p.a"].type == "integer"
    assert "p.b.rounds" in keys and keys["p.c.*"].meaning == "the keys of `p.b`"
    assert keys["p.runs.<name>.lr"].range == "> 0" and "p.files[].name" in keys
    assert keys["p.init"].type == "one of `uniform` or array of number"


def test_every_key_of_the_reference_shows_a_default_and_breaks_only_after_a_dot_or_an_underscore():
    rows = [line for line in docsgen.config_reference(ROOT).splitlines()
            if line.startswith("| ") and not line.startswith("| key |")]
    assert len(rows) > 400
    defaults = [re.split(r"(?<!\\)\|", row)[3].strip() for row in rows]
    assert all(defaults), [r[:80] for r, d in zip(rows, defaults, strict=True) if not d]
    assert '| **<code class="fs-key">threads_<wbr>per_<wbr>job</code>** | integer | `1` |' in rows[2]
    # a value the files set once is the default; one set per chosen name is an example
    assert any(d.startswith('e.g. `"') for d in defaults) and "required" in defaults and "not set" in defaults
    assert docsgen.key_html("a.<name>.b_c.*", required=True) == \
        '**<code class="fs-key">a.<wbr>&lt;name&gt;.<wbr>b_<wbr>c.<wbr>\\*</code>**'
    css = (ROOT / "docs" / "stylesheets" / "extra.css").read_text()
    rule = css.split("td code.fs-key {", 1)[1].split("}", 1)[0]
    assert "overflow-wrap: normal" in rule and "word-break: normal" in rule


def test_config_comments_give_meaning_by_key_path_with_their_continuation_lines():
    text = ("a:                       # the a section\n"
            "  b: 3                   # [ours] three, because\n"
            "                         # the paper is silent\n"
            "  # a comment of its own, not b's\n"
            "  c: \"x # not a comment\"\n"
            "  d: {e: 1}              # flow mapping: d's note\n"
            "f: 2\n")
    notes = docsgen.yaml_comments(text)
    assert notes == {"a": "the a section", "a.b": "[ours] three, because the paper is silent",
                     "a.d": "flow mapping: d's note"}


def test_a_key_without_description_takes_its_config_note_and_value_from_where_its_keys_are_used(tmp_path):
    reference = docsgen.config_reference(ROOT)
    row = next(line for line in reference.splitlines()
               if line.startswith(f"| {docsgen.key_html('afl.defaults.train.optimizer')} |"))
    assert '| e.g. `"adagrad"` |' in row  # set per experiment, not in defaults: an example, not a default
    # every shipped key has a description now; the fallback to a config file's note, on a repository of one key
    (tmp_path / "workflow" / "schemas").mkdir(parents=True)
    (tmp_path / "workflow" / "schemas" / "config.schema.yaml").write_text(
        "type: object\nproperties:\n  threads: {type: integer}\n")
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text("threads: 2   # per job (papers_spec §6)\n")
    row = next(line for line in docsgen.config_reference(tmp_path).splitlines()
               if line.startswith(f"| {docsgen.key_html('threads')} |"))
    assert row.endswith("| `2` |  | per job *(note in `config/config.yaml`)* |")  # development references dropped


# --- generated results pages ---------------------------------------------------------------------------------------


def _claims(results: Path, scale: str) -> pd.DataFrame:
    rows = [("afl_lead", "afl", "reproduced", 3.25), ("afl_gap", "afl", "inconclusive", 0.0417),
            ("wafl_80", "wafl", "not reproduced", -7.5)]
    t = pd.DataFrame([{"claim": c, "paper": p, "where": "Table 1", "quote": "q", "quantity": "lead", "paper_value": 1.0,
                       "test": "x ≥ 0", "ours": v, "ci_low": v - 1, "ci_high": v + 1, "n": 3, "interval": "t",
                       "verdict": verdict, "scale": scale} for c, p, verdict, v in rows])
    (results / "tables").mkdir(parents=True, exist_ok=True)
    t.to_csv(results / "tables" / "claims.csv", index=False)
    return t


def _run(results: Path, paper: str, seed: int, *, gpu: str | None = None, rehearsal: bool = False) -> None:
    env = {"cpu": {"model": "Test CPU 9000", "torch_capability": "AVX2"}, "device": "cuda" if gpu else "cpu",
           "reproducibility": {"portable_cpu": False}}
    if gpu:
        env |= {"gpu": gpu, "cuda": "12.4"}
    run = {"paper": paper, "seed": seed, "rounds": 40, "environment": env, "git_commit": "0123456789abcdef"}
    if rehearsal:
        run["scale"] = "rehearsal"
    d = results / "runs" / paper / "exp" / "fedavg" / f"seed~{seed}"
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps(run))


def small_run(results: Path, scale: str = "quick") -> dict[str, Path]:
    """A results tree as a small run leaves it: claims, one table with its md, one csv-only table, one figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    _claims(results, scale)
    (results / "tables" / "afl").mkdir(parents=True)
    (results / "tables" / "wafl").mkdir(parents=True)
    pd.DataFrame({"model": ["afl", "uniform"], "mean": [0.7312, 0.7001]}).to_csv(
        results / "tables" / "afl" / "table1_adult.csv", index=False)
    (results / "tables" / "afl" / "table1_adult.md").write_text("| model | ours | paper |\n|---|---|---|\n"
                                                              "| afl | 73.12 | 71.5 |\n| uniform | 70.01 | 69.3 |\n")
    tidy = pd.DataFrame({"fraction": [0.0, 0.4, 0.8], "accuracy": [0.9817, 0.9211, 0.8533], "algorithm": "wafl"})
    tidy.to_csv(results / "tables" / "wafl" / "fig4.csv", index=False)
    (results / "figures" / "wafl").mkdir(parents=True)
    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot(tidy["fraction"], tidy["accuracy"])
    fig.savefig(results / "figures" / "wafl" / "fig4.png")
    plt.close(fig)
    for s in (0, 1, 2):
        _run(results, "afl", s)
        _run(results, "wafl", s, gpu="NVIDIA H100 80GB HBM3", rehearsal=scale == "rehearsal")
    bench = results / "benchmarks" / "wafl" / "train" / "exp" / "fedavg"
    bench.mkdir(parents=True)
    header = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
    (bench / "seeds.tsv").write_text(header + "12.5\t0:00:12\t640.5\t1\t1\t1\t0\t0\t1\t11.25\n")
    return {"tidy": results / "tables" / "wafl" / "fig4.csv", "figure": results / "figures" / "wafl" / "fig4.png"}


def _numbers(markdown: str) -> set[str]:
    rows = [line for line in markdown.splitlines() if line.startswith("|") and not line.startswith("|---")]
    return {n for line in rows for n in re.findall(r"(?<![\w.])-?\d+(?:\.\d+)?(?:e-?\d+)?(?![\w.])", line)}


def test_a_paper_section_is_rendered_from_the_run_with_its_provenance(tmp_path):
    results = tmp_path / "results"
    files = small_run(results)
    md = docsgen.paper_results_markdown(results, "wafl", "../generated/figures", docsgen.read_claims(results))
    assert "Made at **quick** scale, from 3 runs (seeds 0, 1, 2; rounds 40)" in md
    assert "NVIDIA H100 80GB HBM3 (CUDA 12.4) on Test CPU 9000 (AVX2 kernels), portable-CPU switch off" in md
    assert "at code version `0123456789`" in md
    assert "![fig4](../generated/figures/wafl/fig4.png)" in md
    table = md.split("### Fig4\n", 1)[1]
    tidy = pd.read_csv(files["tidy"])
    from_csv = {docsgen.format_cell(v) for v in tidy.to_numpy().ravel()}
    shown = _numbers(table.split("###", 1)[0])
    assert shown and shown <= from_csv  # every number of the rendered table is a cell of the csv
    verdict_rows = md.split("### Verdicts", 1)[1].split("### Fig4", 1)[0]
    assert "wafl_80" in verdict_rows and "afl_lead" not in verdict_rows and "**not reproduced**" in verdict_rows


def test_a_table_with_its_own_markdown_is_shown_as_the_pipeline_wrote_it(tmp_path):
    results = tmp_path / "results"
    small_run(results)
    md = docsgen.paper_results_markdown(results, "afl", "gen", None)
    assert (results / "tables" / "afl" / "table1_adult.md").read_text() in md
    assert "Tidy data: [`table1_adult.csv`](gen/../tables/afl/table1_adult.csv) (2 rows, " in md
    assert "Made at **unknown** scale" in md


def test_a_rehearsal_run_is_marked_as_not_a_result(tmp_path):
    results = tmp_path / "results"
    small_run(results, scale="rehearsal")
    md = docsgen.paper_results_markdown(results, "wafl", "gen", docsgen.read_claims(results))
    assert md.startswith('!!! danger "Generated from the results tree"') and "REHEARSAL — not a result" in md
    assert "Not results" in docsgen.verdicts_markdown(results)


def test_pages_say_what_to_run_when_the_tree_is_empty(tmp_path):
    assert "snakemake --cores all fedpals docs" in docsgen.paper_results_markdown(tmp_path, "fedpals", "g")
    assert "claims.csv` does not exist" in docsgen.verdicts_markdown(tmp_path)
    assert "holds no benchmark file" in docsgen.benchmarks_markdown(tmp_path)
    with pytest.raises(ValueError, match="unknown docs marker"):
        docsgen.expand_markers("<!-- fedshift:nonsense -->", root=ROOT, results=tmp_path, page_depth=0)


def test_benchmarks_are_summed_per_paper_and_stage(tmp_path):
    results = tmp_path / "results"
    small_run(results)
    s = docsgen.benchmark_summary(results)
    assert s.to_dict("records") == [{"paper": "wafl", "stage": "train", "jobs": 1, "wall_s": 12.5, "cpu_s": 11.25,
                                     "max_rss_mb": 640.5}]


def test_benchmark_scripts_records_are_rendered_from_their_json(tmp_path):
    results = tmp_path / "results"
    (results / "benchmarks").mkdir(parents=True)
    record = {"jobs": 125, "wall_s": 1392.5, "machine": {"cpu": "Test CPU"}, "threads": [1, 2]}
    (results / "benchmarks" / "pipeline_wall_time.json").write_text(json.dumps(record))
    md = docsgen.benchmarks_markdown(results)
    assert "### `benchmarks/pipeline_wall_time.json`" in md and "### Jobs" not in md
    assert "| jobs | 125 |" in md and "| wall_s | 1392.5 |" in md
    assert "| machine.cpu | Test CPU |" in md and "| threads | 1, 2 |" in md


def test_every_paper_page_has_the_five_sections_in_order_and_a_generated_results_marker():
    for paper in ("afl", "wafl", "fedmm", "agnostic_fedavg", "fedpals"):
        text = (ROOT / "docs" / "papers" / f"{paper}.md").read_text()
        positions = [text.find(f"\n{h}\n") for h in PAPER_SECTIONS]
        assert -1 not in positions and positions == sorted(positions), paper
        assert f"<!-- fedshift:results {paper} -->" in text


# --- recipes -------------------------------------------------------------------------------------------------------


def test_the_code_shown_in_the_recipes_is_in_the_files_they_name():
    shown = 0
    for page in sorted((ROOT / "docs").rglob("*.md")):
        for path, code in re.findall(r"<!-- from: (\S+) -->\n```\w*\n(.*?)```", page.read_text(), re.S):
            source = [line.rstrip() for line in (ROOT / path).read_text().splitlines()]
            lines = [line.rstrip() for line in code.rstrip("\n").splitlines()]
            starts = [i for i, line in enumerate(source) if line == lines[0]]
            assert any(source[i:i + len(lines)] == lines for i in starts), f"{page.name}: block from {path} differs"
            shown += 1
    assert shown >= 6


# --- the site ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def built_site(tmp_path_factory) -> tuple[Path, dict[str, Path]]:
    """The site built once, strictly, from a small run: (its folder, the run's files); the tests below read it."""
    tmp_path = tmp_path_factory.mktemp("site")
    results = tmp_path / "results"
    files = small_run(results)
    site = tmp_path / "site"
    env = {**os.environ, "FEDSHIFT_DOCS_RESULTS": str(results), "NO_MKDOCS_2_WARNING": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return site, files


def test_the_site_builds_strictly_from_a_small_run_with_its_numbers_and_figures(built_site):
    site, files = built_site
    wafl = (site / "papers" / "wafl" / "index.html").read_text()
    assert (site / "generated" / "figures" / "wafl" / "fig4.png").read_bytes() == files["figure"].read_bytes()
    assert 'src="../../generated/figures/wafl/fig4.png"' in wafl
    assert "0.9211" in wafl and "NVIDIA H100 80GB HBM3" in wafl
    verdicts = (site / "results" / "verdicts" / "index.html").read_text()
    assert "afl_lead" in verdicts and "wafl_80" in verdicts
    config = (site / "reference" / "configuration" / "index.html").read_text()
    # keys break only where the generator allows it (after "." and "_"), not letter by letter
    assert '<code class="fs-key">threads_<wbr>per_<wbr>job</code>' in config and "fig4_<wbr>gammas" in config
    assert "fedshift.contract" in (site / "reference" / "api" / "index.html").read_text()


#: An issue number where a reason belongs, as a reader sees it in the rendered text: "issue 12", "issues #4", "#12".
ISSUE_REFERENCE = re.compile(r"\bissues? #?\d+|(?<![\w&#/])#\d+\b", re.I)


@pytest.mark.parametrize("text", ["see issue 12", "Issues #4 and 5", "(#31)", "as in #7."])
def test_the_issue_reference_pattern_finds_each_spelling(text):
    assert ISSUE_REFERENCE.search(text)


@pytest.mark.parametrize("text", ["&#39;s", "C#", "page#anchor", "tissue 5", "no. 3"])
def test_the_issue_reference_pattern_leaves_entities_anchors_and_words(text):
    assert not ISSUE_REFERENCE.search(text)


def test_no_page_of_the_built_site_points_at_an_issue_number(built_site):
    """The rendered text of every page (the API reference's docstrings included), not its sources: the sources are
    read by ``tests/unit/test_docs_pages.py::test_no_source_points_at_an_issue_number_instead_of_its_reason``."""
    site, _ = built_site
    found = []
    for page in sorted(site.rglob("*.html")):
        text = re.sub(r"<script\b.*?</script>|<style\b.*?</style>", " ", page.read_text(), flags=re.S | re.I)
        text = html.unescape(re.sub(r"<[^>]+>", " ", text))
        found += [f"{page.relative_to(site)}: …{text[max(m.start() - 40, 0):m.end() + 20]!r}…"
                  for m in ISSUE_REFERENCE.finditer(text)]
    assert found == []


def test_each_verdict_mark_becomes_an_inline_svg_named_by_its_verdict():
    from fedshift.claims import MARKS

    assert set(docsgen.MARK_COLOURS) == set(MARKS)
    html = docsgen.verdict_marks_to_svg(" · ".join(f"{m} {v}" for v, m in MARKS.items()))
    assert not any(m in html for m in MARKS.values())
    assert all(f'aria-label="{v}"' in html for v in MARKS) and html.count("<svg") == len(MARKS)


def test_no_page_of_the_built_site_needs_an_emoji_font_for_its_verdict_marks(built_site):
    from fedshift.claims import MARKS

    site, _ = built_site
    emoji = re.compile("|".join(MARKS.values()))
    found = [p.relative_to(site).as_posix() for p in sorted(site.rglob("*.html")) if emoji.search(p.read_text())]
    assert found == []
    verdicts = (site / "results" / "verdicts" / "index.html").read_text()
    assert 'class="fs-mark"' in verdicts and 'aria-label="reproduced"' in verdicts


#: Paths a page names that are no file of the repository: a run's outputs and Snakemake's own sources.
NOT_REPOSITORY_FILES = ("results/", ".snakemake/", "snakemake/")


def test_every_file_a_docs_page_names_exists():
    """A path in code (``core/aggregate.py``, ``tests/toy_paper/paper.py``) names a file of the repository, from
    its root or from ``src/fedshift``: a recipe that cites a moved module fails here."""
    missing = []
    path = re.compile(r"`([\w.\-]+(?:/[\w.\-]+)+\.(?:py|yaml|yml|smk|md|rst|toml|cfg|json))`")
    for page in sorted((ROOT / "docs").rglob("*.md")):
        if ROOT / docsgen.SNAPSHOT in page.parents:
            continue
        for name in path.findall(page.read_text()):
            if name.startswith(NOT_REPOSITORY_FILES):
                continue
            if not any((base / name).is_file() for base in (ROOT, ROOT / "src" / "fedshift")):
                missing.append(f"{page.relative_to(ROOT)}: {name}")
    assert missing == []


#: Each recipe and the fixture under tests/ that carries it out (the model recipe has none: a model is one entry).
RECIPES = {"algorithm.md": "toy_algorithm", "paper.md": "toy_paper", "shift.md": "toy_shift",
           "dataset.md": "toy_dataset", "model.md": None}


@pytest.mark.parametrize("page", RECIPES)
def test_each_recipe_links_the_test_that_carries_it_out(page):
    text = (ROOT / "docs" / "extending" / page).read_text()
    tests = re.findall(r"`(tests/[\w/]+/test_\w+\.py)`", text)
    assert tests and all((ROOT / t).is_file() for t in tests), page
    if RECIPES[page]:
        assert any(RECIPES[page] in (ROOT / t).read_text() for t in tests), f"{page}: no linked test runs its fixture"
