"""WAFL (arXiv:2206.01432) as a paper plug-in: :class:`~fedshift.papers.wafl.paper.WaflPaper`.

Submodules: :mod:`.core` (configuration checks, runs, data, the train / evaluate computations), :mod:`.paper`
(the plug-in class of :mod:`fedshift.contract`), :mod:`.report` (figures, Table 2, eq. 9's λ), ``schema.yaml``
(the ``wafl:`` section's JSON schema) and ``report.rst`` (the report caption). The data helpers stay in
:mod:`fedshift.data.digits` (FedMM's digits pre-processing imports them too). The names of :mod:`.core` are
re-exported here (``from fedshift.papers import wafl as W; W.resolve_run(...)``).
"""

from fedshift.papers.wafl.core import *  # noqa: F403
from fedshift.papers.wafl.core import __all__  # noqa: F401
