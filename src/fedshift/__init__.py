"""fedshift: federated learning under distribution shift, reproduced end to end.

The library behind the Snakemake workflow: datasets and partitions, federated
algorithms (one module per algorithm, each citing its paper), the training loop
with checkpoint/resume, evaluation, tables and figures. It never imports
snakemake; the workflow's scripts are thin adapters around it.
"""

__version__ = "0.1.0"
