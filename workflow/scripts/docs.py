"""Snakemake adapter: build the documentation site, its results pages rendered from this run's results tree."""

import os
import subprocess
import sys

sm = snakemake  # noqa: F821
env = {**os.environ, "FEDSHIFT_DOCS_RESULTS": sm.params.results, "NO_MKDOCS_2_WARNING": "1"}
with open(sm.log[0], "w") as log:
    subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", sm.input.mkdocs,
                    "--site-dir", sm.output.site], check=True, stdout=log, stderr=subprocess.STDOUT, env=env)
