"""Snakemake adapter: generate one dataset of fedshift.data.prepare.GENERATED from its sources' raw files."""

from pathlib import Path

from fedshift.data.prepare import GENERATED, prepare_generated
from fedshift.logs import job_logging

with job_logging(snakemake.log[0]):  # noqa: F821
    sm = snakemake  # noqa: F821
    name = sm.wildcards.generated
    folders = {Path(f).parent.name: Path(f).parent for f in sm.input}  # data/raw/<dataset>/<file>
    prepare_generated(name, [folders[d] for d in GENERATED[name]], sm.output[0])
