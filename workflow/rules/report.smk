# Tables and figures: every table is a named target (e.g. `afl_table1`), its figure too
# (`afl_table1_figure`), and every paper (`afl`). They read tidy metrics and never retrain.
# Every output is in `snakemake --report`, filed under its paper and table number (paper_report).


for _name, _t in TABLES.items():

    rule:
        name:
            _name
        input:
            experiment_metrics(_t["experiment"]),
        output:
            **{
                ext: paper_report(
                    f"results/tables/{_t['paper']}/{_t['file']}.{ext}",
                    paper=_t["paper"],
                    label=table_label(_name),
                    caption="../report/afl.rst",
                )
                for ext in ("csv", "md", "tex")
            },
            runs=paper_report(
                f"results/tables/{_t['paper']}/{_t['file']}_runs.csv",
                paper=_t["paper"],
                label=table_label(_name),
                caption="../report/afl.rst",
            ),
        params:
            code=code_of("make_table.py"),
            spec=_t,
        log:
            f"results/logs/tables/{_name}.log",
        localrule: True
        conda:
            ENV
        script:
            "../scripts/make_table.py"

    rule:
        name:
            f"{_name}_figure"
        input:
            f"results/tables/{_t['paper']}/{_t['file']}.csv",
        output:
            **{
                ext: paper_report(
                    f"results/figures/{_t['paper']}/{_t['file']}.{ext}",
                    paper=_t["paper"],
                    label=table_label(_name),
                    caption="../report/afl.rst",
                )
                for ext in ("pdf", "png")
            },
        params:
            code=code_of("plot_table.py"),
            spec=_t,
        log:
            f"results/logs/figures/{_name}.log",
        localrule: True
        conda:
            ENV
        script:
            "../scripts/plot_table.py"


for _paper in PAPERS:

    rule:
        name:
            _paper
        input:
            paper_outputs(_paper),
        localrule: True
