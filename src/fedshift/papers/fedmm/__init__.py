"""FedMM (Shen et al., AAMAS 2023; arXiv:2110.08477) as a package.

The paper plug-in (:mod:`.paper`), its configuration, data and training pieces (:mod:`.core`) and its figures
and table (:mod:`.report`).

The names of :mod:`.core` stay importable from ``fedshift.papers.fedmm`` (tests and benchmarks use them).
"""

from fedshift.papers.fedmm.core import *  # noqa: F403
from fedshift.papers.fedmm.core import (  # noqa: F401  (used by tests and benchmarks)
    DIGIT_TARGETS,
    _images,
    _standardised,
    _target_splits,
    _test_images,
)
from fedshift.papers.fedmm.core import __all__ as _core_all
from fedshift.papers.fedmm.paper import FedmmPaper, train_job  # noqa: E402, F401

__all__ = [*_core_all, "FedmmPaper", "train_job"]
