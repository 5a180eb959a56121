"""UCI Adult: the 99-dim categorical one-hot encoding with doctorate / non-doctorate domains.

Follows Mohri, Sivek and Suresh, "Agnostic Federated Learning" (ICML 2019, §5): only the eight
categorical attributes are used, one-hot encoded, and the two domains are "doctorate" and
"non-doctorate" by the education attribute. The preprocessing matches fair_flearn's
``data/adult/create_dataset.py`` (see ``/work/shared/research/papers_spec.md`` §1.4): continuous
columns are dropped, ``?`` gives an all-zero block, and education "Doctorate" is one-hot index 21.
Category lists and their order are those of the UCI ``adult.names`` file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["ATTRIBUTES", "COLUMNS", "DOMAIN_NAMES", "FEATURE_NAMES", "load_adult"]

#: The 15 columns of adult.data / adult.test, in file order (adult.names).
COLUMNS: tuple[str, ...] = (
    "age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
    "relationship", "race", "sex", "capital-gain", "capital-loss", "hours-per-week",
    "native-country", "income",
)  # fmt: skip

#: The categorical attributes and their values, in the order adult.names lists them.
ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "workclass": (
        "Private", "Self-emp-not-inc", "Self-emp-inc", "Federal-gov", "Local-gov", "State-gov",
        "Without-pay", "Never-worked",
    ),
    "education": (
        "Bachelors", "Some-college", "11th", "HS-grad", "Prof-school", "Assoc-acdm", "Assoc-voc",
        "9th", "7th-8th", "12th", "Masters", "1st-4th", "10th", "Doctorate", "5th-6th",
        "Preschool",
    ),
    "marital-status": (
        "Married-civ-spouse", "Divorced", "Never-married", "Separated", "Widowed",
        "Married-spouse-absent", "Married-AF-spouse",
    ),
    "occupation": (
        "Tech-support", "Craft-repair", "Other-service", "Sales", "Exec-managerial",
        "Prof-specialty", "Handlers-cleaners", "Machine-op-inspct", "Adm-clerical",
        "Farming-fishing", "Transport-moving", "Priv-house-serv", "Protective-serv",
        "Armed-Forces",
    ),
    "relationship": (
        "Wife", "Own-child", "Husband", "Not-in-family", "Other-relative", "Unmarried",
    ),
    "race": ("White", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other", "Black"),
    "sex": ("Female", "Male"),
    "native-country": (
        "United-States", "Cambodia", "England", "Puerto-Rico", "Canada", "Germany",
        "Outlying-US(Guam-USVI-etc)", "India", "Japan", "Greece", "South", "China", "Cuba", "Iran",
        "Honduras", "Philippines", "Italy", "Poland", "Jamaica", "Vietnam", "Mexico", "Portugal",
        "Ireland", "France", "Dominican-Republic", "Laos", "Ecuador", "Taiwan", "Haiti",
        "Columbia", "Hungary", "Guatemala", "Nicaragua", "Scotland", "Thailand", "Yugoslavia",
        "El-Salvador", "Trinadad&Tobago", "Peru", "Hong", "Holand-Netherlands",
    ),
}  # fmt: skip

#: "attribute=value" for each of the 99 one-hot columns.
FEATURE_NAMES: list[str] = [f"{a}={v}" for a, values in ATTRIBUTES.items() for v in values]
DOMAIN_NAMES: list[str] = ["doctorate", "non-doctorate"]
_MISSING = "?"
_LABELS = {">50K": 1, "<=50K": 0}
_DOMAIN_COLUMN = COLUMNS.index("education")


def _blocks() -> tuple[tuple[str, int, int, dict[str, int]], ...]:
    """(attribute, column in the file, offset of its one-hot block, value -> index in block)."""
    blocks, offset = [], 0
    for attr, values in ATTRIBUTES.items():
        blocks.append((attr, COLUMNS.index(attr), offset, {v: i for i, v in enumerate(values)}))
        offset += len(values)
    return tuple(blocks)


_BLOCKS = _blocks()


def _read_split(path: Path, skip_first: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Parse one Adult file into (x float32 (n, 99), y int64 (n,), domain int64 (n,))."""
    rows: list[int] = []
    cols: list[int] = []
    labels: list[int] = []
    domains: list[int] = []
    with open(path, encoding="ascii") as fh:
        lines = fh.read().splitlines()
    for lineno, line in enumerate(lines[1:] if skip_first else lines, start=2 if skip_first else 1):
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(",")]
        where = f"{path.name} line {lineno}"
        if len(fields) != len(COLUMNS):
            raise ValueError(f"{where}: expected {len(COLUMNS)} fields, found {len(fields)}")
        n = len(labels)
        for attr, column, offset, index in _BLOCKS:
            value = fields[column]
            if value == _MISSING:
                continue
            if value not in index:
                raise ValueError(f"{where}: unknown {attr} value {value!r}")
            rows.append(n)
            cols.append(offset + index[value])
        income = fields[-1].removesuffix(".") if skip_first else fields[-1]
        if income not in _LABELS:
            raise ValueError(f"{where}: unknown income value {fields[-1]!r}")
        labels.append(_LABELS[income])
        domains.append(0 if fields[_DOMAIN_COLUMN] == "Doctorate" else 1)
    x = np.zeros((len(labels), len(FEATURE_NAMES)), dtype=np.float32)
    x[np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)] = 1.0
    return x, np.asarray(labels, dtype=np.int64), np.asarray(domains, dtype=np.int64)


def load_adult(raw_dir: str | os.PathLike) -> dict[str, Any]:
    """Load UCI Adult as 99-dim categorical one-hot features with doctorate domains.

    Parameters
    ----------
    raw_dir : str or os.PathLike
        Folder with the UCI files ``adult.data`` (train) and ``adult.test`` (test). Fields are
        comma-separated and whitespace-stripped; blank lines are skipped; the first line of
        ``adult.test`` ("|1x3 Cross validator") is skipped and the trailing "." of its labels
        dropped (UCI adult.names).

    Returns
    -------
    dict
        ``x_train`` float32 (32561, 99) and ``x_test`` float32 (16281, 99): one-hot blocks for
        workclass (8), education (16), marital-status (7), occupation (14), relationship (6),
        race (5), sex (2), native-country (41), values in adult.names order; a ``?`` gives an
        all-zero block. ``y_train``, ``y_test`` int64 (n,): 1 if income is ">50K", else 0.
        ``domain_train``, ``domain_test`` int64 (n,): 0 if education is "Doctorate", else 1.
        ``feature_names``: the 99 "attribute=value" strings; ``domain_names``:
        ``["doctorate", "non-doctorate"]``.

    Raises
    ------
    FileNotFoundError
        A file is missing.
    ValueError
        A row has the wrong number of fields, an attribute value not in adult.names or an
        unknown income label; the message names the file, line and attribute.

    Notes
    -----
    Mohri et al. 2019, §5 (categorical features only); fair_flearn ``create_dataset.py``.
    """
    raw = Path(raw_dir)
    x_train, y_train, d_train = _read_split(raw / "adult.data", skip_first=False)
    x_test, y_test, d_test = _read_split(raw / "adult.test", skip_first=True)
    return {
        "x_train": x_train,
        "y_train": y_train,
        "domain_train": d_train,
        "x_test": x_test,
        "y_test": y_test,
        "domain_test": d_test,
        "feature_names": list(FEATURE_NAMES),
        "domain_names": list(DOMAIN_NAMES),
    }
