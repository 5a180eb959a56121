"""Snakemake adapter: one WAFL figure (2-5) from the runs' tidy metrics: tidy CSV, then PDF and PNG."""

from fedshift.io import atomic_write
from fedshift.logs import job_logging
from fedshift.papers import wafl_report as rep
from fedshift.reporting import mark_rehearsal

with job_logging(snakemake.log[0]) as log:  # noqa: F821
    sm = snakemake  # noqa: F821
    df = rep.collect(sm.input)
    name = sm.params.figure
    table = {"fig2": lambda: rep.fig2_table(df), "fig3": lambda: rep.fig3_table(df, sm.params.fractions),
             "fig4": lambda: rep.fig4_table(df), "fig5": lambda: rep.fig5_table(df, sm.params.fractions)}[name]()
    with atomic_write(sm.output.csv) as fh:
        table.to_csv(fh, index=False)
    rep.plot_figure(name, table, sm.output.pdf, sm.output.png)
    log.info("%s:\n%s", name, table.to_string())
    mark_rehearsal(sm.output, sm.config)  # the rehearsal's tables say so in their files
