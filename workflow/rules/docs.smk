# The documentation site (docs/, mkdocs.yml; target `docs`): its results pages (verdicts, each paper's expected
# results, the shift matrix, the job measurements) rendered from the tables and figures this configuration builds,
# then the whole site built with `mkdocs build --strict` into results/site/. Rendering: fedshift.docsgen, called by
# the MkDocs hook docs/hooks.py with FEDSHIFT_DOCS_RESULTS=results.
DOCS_SOURCES = sorted(
    str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*") if p.is_file() and "__pycache__" not in p.parts
)


rule docs:
    input:
        claims=rules.claims.output.csv,
        outputs=all_outputs(default_papers()),
        mkdocs="mkdocs.yml",
        sources=DOCS_SOURCES,
    output:
        site=directory("results/site"),
    log:
        "results/logs/docs.log",
    localrule: True
    conda:
        ENV
    script:
        "../scripts/docs.py"
