"""The shift matrix: every registered algorithm under every kind of shift of the five papers.

A paper plug-in (:mod:`fedshift.contract`, ``config/papers/shift_matrix.yaml``): one experiment per shift
(:mod:`fedshift.shifts`), one run id per registered algorithm (:mod:`.cells`), seeds and
hyper-parameter grid of one cell trained in one job; outputs ``shift_matrix``, ``shift_matrix_figure`` and
``shift_ranks`` (:mod:`.report`).
"""
