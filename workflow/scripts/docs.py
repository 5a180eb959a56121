"""Snakemake adapter: build the documentation site, its results pages rendered from this run's results tree."""

import os
import subprocess
import sys
from pathlib import Path

sm = snakemake  # noqa: F821
results = Path(sm.input.claims).parents[1]  # the results tree: results/tables/claims.csv -> results
env = {**os.environ, "FEDSHIFT_DOCS_RESULTS": str(results), "NO_MKDOCS_2_WARNING": "1"}
with open(sm.log[0], "w") as log:
    subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", sm.input.mkdocs,
                    "--site-dir", sm.output.site], check=True, stdout=log, stderr=subprocess.STDOUT, env=env)
