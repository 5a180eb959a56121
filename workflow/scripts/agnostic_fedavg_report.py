"""Snakemake adapter: one named AgnosticFedAvg / AFL-LM table or figure from the runs' outputs."""

from fedshift.logs import job_logging
from fedshift.papers.agnostic_fedavg_report import write_output
from fedshift.reporting import mark_rehearsal

with job_logging(snakemake.log[0]) as log:  # noqa: F821
    sm = snakemake  # noqa: F821
    out = {k.rsplit("_", 1)[1]: v for k, v in sm.output.items()}
    t = write_output(sm.params.name, sm.params.spec, sm.params.experiments, sm.input.get("runs", []),
                     sm.input.summaries, out)
    log.info("%s: %d rows -> %s", sm.params.name, len(t), list(sm.output))
    mark_rehearsal(sm.output, sm.config)  # the rehearsal's tables say so in their files
