"""One torch-free module per algorithm module: its settings dataclasses and its :class:`AlgorithmDeclaration` s.

``fedshift.algorithms.decl.<m>`` declares what ``fedshift.algorithms.<m>`` registers (``DECLARATIONS``, a tuple of
:class:`~fedshift.algorithms.declarations.AlgorithmDeclaration`); the algorithm module imports it and passes each
declaration to :func:`~fedshift.algorithms.registry.register`, so its code hash covers its declaration. The plan
reads them all (:func:`fedshift.algorithms.declarations.declared`) without importing an algorithm module.
"""
