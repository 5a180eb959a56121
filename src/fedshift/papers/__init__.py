"""The five reproduced papers, one package each: a plug-in of the paper contract (:mod:`fedshift.contract`).

Each package holds its ``paper.py`` (the :class:`~fedshift.contract.Paper` subclass the config's ``papers:`` line
names), its experiment code, its report module, its config schema (``schema.yaml``) and report caption
(``report.rst``).
"""
