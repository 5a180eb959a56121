"""fedshift: federated learning under distribution shift, reproduced end to end.

The library behind the Snakemake workflow: datasets and partitions, federated
algorithms (one module per algorithm, each citing its paper), the training loop
with checkpoint/resume, evaluation, tables and figures. It never imports
snakemake; the workflow's scripts are thin adapters around it.
"""

import os as _os

__version__ = "0.1.0"

# Run-to-run reproducibility of torch's CPU BLAS (Intel MKL): with more than one thread MKL may split a GEMM's
# reduction differently from one call to the next (seen: ResNet-50 gradients at batch size 1 on 2 threads, the
# streamed PACS/iWildCam path, differing in the last bits between two identical runs). Conditional Numerical
# Reproducibility, MKL_CBWR=AUTO, fixes the split for a given CPU and thread count at no measurable cost
# (benchmarks/mkl_reproducibility.py). It must be set before the process's first MKL call, so
# it is set when fedshift is imported; a value already in the environment (e.g. the portable-CPU switch's
# COMPATIBLE) is kept. Intel oneMKL Developer Guide, "Obtaining Numerically Reproducible Results".
_os.environ.setdefault("MKL_CBWR", "AUTO")
