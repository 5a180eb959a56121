"""The seeds an experiment trains: a count (``seeds: n`` → seeds 0 … n − 1) or an explicit list of seeds.

Every paper section's ``seeds`` key (an experiment's, a task's, ``defaults``') takes either form. A count is what
every scale overlay in ``config/`` gives; an explicit list (``seeds: [1000, 1001, 1002]``) is what a confirmatory
run gives (``fedshift.claims.design.confirmatory_overlay``): seeds no earlier run of the experiment used. Both
name, seed by seed, the ``seed`` of each run (its RNG seed and its path ``seed~<seed>``), so ``seeds: 3`` and
``seeds: [0, 1, 2]`` plan the same runs, with the same paths and results.

The JSON schema of the key is :data:`SEEDS_SCHEMA` (each paper's ``schema.yaml`` repeats it, so a bad value is
refused naming its key path); :func:`seed_list` turns either form into the list the plan iterates.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SEEDS_SCHEMA", "MAX_SEED", "seed_list"]

#: Largest seed a list may hold: NumPy's legacy ``RandomState`` and several libraries take 32-bit seeds.
MAX_SEED = 2**32 - 1

#: JSON schema of a ``seeds`` value: a positive count, or a non-empty list of distinct non-negative integer seeds.
#: Each keyword applies to one type only (``minimum`` to the count, the others to the list), so an error names the
#: problem itself (``[1000, 1000] has non-unique elements``), not a branch of a ``oneOf``.
SEEDS_SCHEMA: dict[str, Any] = {
    "type": ["integer", "array"], "minimum": 1, "minItems": 1, "uniqueItems": True,
    "items": {"type": "integer", "minimum": 0, "maximum": MAX_SEED},
}


def seed_list(value: Any, where: str = "seeds") -> list[int]:
    """The seeds a ``seeds`` value trains, in its order.

    Parameters
    ----------
    value : int or sequence of int
        ``n`` (seeds 0 … n − 1, as every count has always meant) or an explicit list of distinct seeds ≥ 0.
    where : str
        The key path named in an error (``wafl.experiments.mnist.seeds``).

    Returns
    -------
    list of int
        ``list(range(n))`` for a count; the list itself otherwise.

    Raises
    ------
    ValueError
        If ``value`` is a bool, a count below 1, or a list that is empty, holds a non-integer, a negative seed, a
        seed above :data:`MAX_SEED` or a seed twice (the workflow's schema refuses these first, by key path).
    """
    if isinstance(value, bool):
        raise ValueError(f"{where}: {value!r} is neither a count nor a list of seeds")
    if isinstance(value, int):
        if value < 1:
            raise ValueError(f"{where}: {value} seeds: a count is at least 1")
        return list(range(value))
    if not isinstance(value, list | tuple) or not value:
        raise ValueError(f"{where}: {value!r} is neither a count nor a non-empty list of seeds")
    seen: set[int] = set()
    for i, s in enumerate(value):
        if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s <= MAX_SEED:
            raise ValueError(f"{where}[{i}]: {s!r} is not a seed (an integer from 0 to {MAX_SEED})")
        if s in seen:
            raise ValueError(f"{where}[{i}]: seed {s} appears twice")
        seen.add(s)
    return list(value)
