"""The Algorithms page: every registered algorithm, from its declaration and the configuration.

Read without importing the algorithms (no torch at build time): the declarations, hyper-parameters (the settings'
fields) included, come from :func:`fedshift.algorithms.registry.declarations`, the papers that run an algorithm from
``config/papers/*.yaml``, the matrix columns from the matrix's own cells (:func:`matrix_columns`) and the tests from
``tests/unit``. A test holds the hyper-parameters read here equal to the imported
:attr:`~fedshift.algorithms.declaration_checks.Declaration.hparams`.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fedshift.docsgen.papers import CITATIONS

__all__ = ["ALGORITHM_PAPERS", "HParam", "AlgorithmDoc", "factory_hparams", "matrix_columns",
           "algorithm_docs", "algorithms_markdown"]

#: The paper each algorithm comes from: name -> (short reference, link). The five reproduced papers link to their
#: page; the rest of the shift matrix's rows to their paper.
ALGORITHM_PAPERS: dict[str, tuple[str, str]] = {
    "fedavg": ("McMahan et al., AISTATS 2017", "https://arxiv.org/abs/1602.05629"),
    "fedprox": ("Li et al., MLSys 2020", "https://arxiv.org/abs/1812.06127"),
    "scaffold": ("Karimireddy et al., ICML 2020", "https://arxiv.org/abs/1910.06378"),
    "fedadam": ("Reddi et al., ICLR 2021", "https://arxiv.org/abs/2003.00295"),
    "fedyogi": ("Reddi et al., ICLR 2021", "https://arxiv.org/abs/2003.00295"),
    "fedadagrad": ("Reddi et al., ICLR 2021", "https://arxiv.org/abs/2003.00295"),
    "fednova": ("Wang et al., NeurIPS 2020", "https://arxiv.org/abs/2007.07481"),
    "feddyn": ("Acar et al., ICLR 2021", "https://arxiv.org/abs/2111.04263"),
    "qffl": ("Li et al., ICLR 2020", "https://arxiv.org/abs/1905.10497"),
    "drfa": ("Deng et al., NeurIPS 2020", "https://arxiv.org/abs/2102.12660"),
    "fedlc": ("Zhang et al., ICML 2022", "https://arxiv.org/abs/2209.00189"),
    "fedsr": ("Nguyen et al., NeurIPS 2022", "https://arxiv.org/abs/2211.15166"),
    "fedbn": ("Li et al., ICLR 2021", "https://arxiv.org/abs/2102.07623"),
    "fedpgm": ("WAFL's baseline (PGD adversarial training)", "https://arxiv.org/abs/2206.01432"),
    "fedfgsm": ("WAFL's baseline (FGSM adversarial training)", "https://arxiv.org/abs/2206.01432"),
    "dann": ("Ganin et al., JMLR 2016", "https://arxiv.org/abs/1505.07818"),
}
#: Algorithms of the five reproduced papers (their baselines included): name -> the paper's page.
_OWN = {"afl": "afl", "wafl": "wafl", "robust_fedavg": "wafl", "agnostic_fedavg": "agnostic_fedavg",
        "domain_fedavg": "agnostic_fedavg", "fedpals": "fedpals", "fedmm": "fedmm", "fedavg_sgda": "fedmm",
        "fedprox_sgda": "fedmm", "fedsgda": "fedmm"}


_EXACT = re.compile(r"equal|match|by_hand|exactly|bit_for_bit|algorithm_\d|reaches|value", re.I)


@dataclass(frozen=True)
class HParam:
    """One keyword-only parameter of a factory: ``name``, annotated ``type`` (source text) and ``default``."""

    name: str
    type: str
    default: str


@dataclass(frozen=True)
class AlgorithmDoc:
    """What the Algorithms page says of one algorithm (see :func:`algorithm_docs`)."""

    name: str
    module: str
    factory: str
    source: str
    paper: str
    link: str
    needs: tuple[str, ...]
    loop: str
    model_parts: tuple[str, ...]
    fixed: Mapping[str, Any]
    hparams: tuple[HParam, ...]
    bounds: Mapping[str, str]
    papers: tuple[str, ...]
    columns: tuple[str, ...]
    tests: tuple[str, ...]


def factory_hparams(decl: Any) -> tuple[HParam, ...]:
    """An algorithm's hyper-parameters as the page shows them: its declared settings' fields (less the fixed ones).

    Parameters
    ----------
    decl : fedshift.algorithms.registry.Declaration
        The algorithm's declaration.

    Returns
    -------
    tuple of HParam
        In field order; ``type`` is the annotation as text, ``default`` the default's repr (``""`` for a required
        field).
    """
    from fedshift.algorithms.declarations import type_text

    return tuple(HParam(k, type_text(t), repr(decl.defaults[k]) if k in decl.defaults else "")
                 for k, t in decl.hparams.items())


def matrix_columns(config: Mapping[str, Any], names: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """Per algorithm, the shift matrix's columns where one of its cells runs, as the matrix itself decides.

    Loads the matrix's plug-in as the plan does (:func:`fedshift.contract.load_paper`, from the file's ``papers:``
    line) and asks it for every (column, algorithm) cell (its ``status``, with each of its models), so a column
    whose every cell is "n/a" (side information the shift does not give, an own loop without a cell hook, model
    parts the models lack) is not listed. Imports no algorithm.

    Parameters
    ----------
    config : mapping
        ``config/papers/shift_matrix.yaml`` as read: its ``papers:`` line and its section.
    names : iterable of str
        The algorithms.
    """
    from fedshift.contract import load_paper

    (name, target), = config["papers"].items()
    paper: Any = load_paper(name, target, {name: dict(config[name])})
    return {alg: tuple(column for column, shift in paper.shifts.items()
                       if any(paper.status(alg, shift, model) is None for model in paper.models))
            for alg in names}


def _names_in(node: Any) -> Iterator[str]:
    """Every mapping key and string value of a config section: the names an algorithm may be referred to by."""
    if isinstance(node, Mapping):
        for k, v in node.items():
            yield str(k)
            yield from _names_in(v)
    elif isinstance(node, list):
        for v in node:
            yield from _names_in(v)
    elif isinstance(node, str):
        yield node


def _tests(root: Path) -> dict[str, list[str]]:
    """Test function name -> the string literals in its body, for every ``tests/unit`` file."""
    out = {}
    files = (root / "tests" / "unit").glob("test_*.py")
    for path in sorted(p for p in files if not p.name.startswith("test_docs")):  # the docs' tests name every one
        for node in ast.parse(path.read_bytes()).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                out[f"{path.name}::{node.name}"] = [n.value for n in ast.walk(node)
                                                    if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    return out


def algorithm_docs(root: Path) -> list[AlgorithmDoc]:
    """Every algorithm of the package, as the Algorithms page shows it.

    Parameters
    ----------
    root : Path
        The repository root.

    Returns
    -------
    list of AlgorithmDoc
        Sorted by name. ``papers``: the paper sections whose config names it (as a key or a value; ``shift_matrix``
        excluded); ``columns``: the shift matrix's columns where a cell of it runs (:func:`matrix_columns`: the
        matrix runs every algorithm, ``algorithms: all``, and says "n/a" in the others); ``tests``: the unit tests
        whose name holds the algorithm's name (those that check exact values, by hand or against a reference, first),
        else those that pass it as a string, the first three.
    """
    from fedshift.algorithms.registry import declarations

    decls = declarations()
    used: dict[str, set[str]] = {}
    matrix: dict[str, Any] = {}
    for path in sorted((root / "config" / "papers").glob("*.yaml")):
        data = yaml.safe_load(path.read_text()) or {}
        section = data.get(path.stem) or {}
        if path.stem == "shift_matrix":
            matrix = data
            continue
        for name in set(_names_in(section)) & set(decls):
            used.setdefault(name, set()).add(path.stem)
    columns = matrix_columns(matrix, decls) if matrix else {}
    tests = _tests(root)
    out = []
    for name, d in sorted(decls.items()):
        own = _OWN.get(name)
        paper, link = (CITATIONS[own].title, f"../papers/{own}.md") if own else ALGORITHM_PAPERS.get(name, ("", ""))
        named = sorted((t for t in tests if f"_{name}_" in t.split("::")[1] + "_"),
                       key=lambda t: _EXACT.search(t) is None)  # exact-value tests first
        passed = [t for t, lits in tests.items() if name in lits and t not in named]
        out.append(AlgorithmDoc(
            name, d.module, d.factory, f"src/{d.module.replace('.', '/')}.py", paper, link,
            tuple(sorted(d.needs)), d.loop, tuple(sorted(d.model_parts)), dict(d.fixed),
            factory_hparams(d), {k: str(v) for k, v in d.bounds.items()},
            tuple(sorted(used.get(name, ()))),
            columns.get(name, ()),
            tuple((named + passed)[:3])))
    return out


def algorithms_markdown(root: Path) -> str:
    """The Algorithms page body: a summary table, then one section per algorithm (:func:`algorithm_docs`)."""
    docs = algorithm_docs(root)
    lines = [f"{len(docs)} algorithms are registered. Side information is what an algorithm needs besides its "
             "clients' labelled data; a matrix column whose shift does not give it shows *n/a*.", "",
             "| algorithm | from | needs | loop | papers | matrix columns |", "|---|---|---|---|---|---|"]
    for d in docs:
        paper = f"[{d.paper}]({d.link})" if d.link else d.paper
        lines.append(f"| [`{d.name}`](#{d.name}) | {paper} | {', '.join(d.needs) or '–'} | {d.loop} | "
                     f"{', '.join(d.papers) or '–'} | {len(d.columns)} of the matrix's |")
    for d in docs:
        lines += ["", f"## `{d.name}` {{ #{d.name} }}", "",
                  f"`{d.module}.{d.factory}` (`{d.source}`); "
                  + (f"fixes {', '.join(f'`{k}={v!r}`' for k, v in d.fixed.items())}. " if d.fixed else "")
                  + f"From {'[' + d.paper + '](' + d.link + ')' if d.link else d.paper or 'this project'}.", ""]
        facts = [f"**Needs**: {', '.join(f'`{n}`' for n in d.needs) or 'nothing beyond labelled client data'}",
                 f"**Training loop**: {'the common FedAvg round' if d.loop == 'round' else 'its own'}",
                 f"**Model parts**: {', '.join(d.model_parts) or 'any model'}",
                 f"**Papers**: {', '.join(f'[{p}](../papers/{p}.md)' for p in d.papers) or '–'}",
                 f"**Matrix columns**: {', '.join(f'`{c}`' for c in d.columns) or '–'}",
                 f"**Tests**: {', '.join(f'`{t}`' for t in d.tests) or '–'}"]
        lines += [f"- {f}" for f in facts]
        if d.hparams:
            lines += ["", "| hyper-parameter | type | default | range |", "|---|---|---|---|"]
            for h in d.hparams:
                rng = d.bounds.get(h.name, "")
                lines.append(f"| `{h.name}` | {f'`{h.type}`' if h.type else ''} | "
                             f"{f'`{h.default}`' if h.default else '*required*'} | {f'`{rng}`' if rng else ''} |")
        else:
            lines += ["", "No hyper-parameters of its own."]
    return "\n".join(lines) + "\n"
