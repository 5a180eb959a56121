"""Snakemake adapter: generate one dataset's stand-in raw files for the rehearsal (fedshift.data.standin)."""

from pathlib import Path

from fedshift.data.standin import generate
from fedshift.logs import job_logging

with job_logging(snakemake.log[0]) as log:  # noqa: F821
    sm = snakemake  # noqa: F821
    out = Path(sm.output[0]).parent
    files = generate(sm.params.dataset, out, seed=sm.params.seed, fraction=sm.params.fraction)
    log.info("stand-in %s (seed %d, fraction %g): %s", sm.params.dataset, sm.params.seed, sm.params.fraction,
             ", ".join(f"{f.name} ({f.stat().st_size:,} bytes)" for f in files))
