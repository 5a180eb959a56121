"""The reference parts of each paper's page: citation, scales and hyper-parameters with their sources.

Three markers of a paper page (``docs/papers/<paper>.md``) expand here: ``<!-- fedshift:citation PAPER -->`` (the
paper's reference, link, authors, a short abstract in our words and its BibTeX), ``<!-- fedshift:scales PAPER -->``
(what each scale builds, with the CPU time a results tree measured) and ``<!-- fedshift:hparams PAPER -->`` (every
annotated setting of ``config/papers/<paper>.yaml`` with its value and where the value comes from).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fedshift.docsgen.text import oneline, clean_note

__all__ = ["Citation", "CITATIONS", "PAPERS_BLOCK", "SCALES", "SOURCES", "bibtex", "citation_markdown", "page_heading",
           "papers_table_markdown", "short_authors", "venue_short", "value_source",
           "hparam_rows", "hparams_markdown", "scale_rows", "scales_markdown"]


@dataclass(frozen=True)
class Citation:
    """A paper as a reference.

    Attributes
    ----------
    key : str
        BibTeX key.
    kind : str
        BibTeX entry type (``inproceedings``, ``misc``).
    title, venue : str
        Title as printed and the venue (conference, or ``arXiv preprint``).
    authors : tuple of str
        Authors in the paper's order, "Given Family".
    year : int
        Year of the version reproduced.
    arxiv : str
        arXiv identifier.
    url : str
        The publisher's page where one exists, else the arXiv abstract page.
    abstract : str
        Two or three lines in our words: the problem, the method, what fedshift reproduces.
    name : str
        The method's short name, as the README, the page heading and the site's navigation write it (``"FedMM"``).
    reproduces : str
        What fedshift reproduces of the paper (its tables and figures), for the README's paper table.
    """

    key: str
    kind: str
    title: str
    venue: str
    authors: tuple[str, ...]
    year: int
    arxiv: str
    url: str
    abstract: str
    name: str
    reproduces: str


#: The five papers: the one source of their titles, authors, venues and links (from the papers' first pages; WAFL's
#: arXiv version names the authors its double-blind ICLR submission omits). The README's paper table
#: (:func:`papers_table_markdown`), each paper page's heading (:func:`page_heading`) and opening
#: (:func:`citation_markdown`), and ``CITATION.cff``'s references are read from or checked against it
#: (``tests/unit/test_docs_citations.py``).
CITATIONS: dict[str, Citation] = {
    "afl": Citation(
        "mohri2019agnostic", "inproceedings", "Agnostic Federated Learning",
        "Proceedings of the 36th International Conference on Machine Learning (ICML), PMLR 97",
        ("Mehryar Mohri", "Gary Sivek", "Ananda Theertha Suresh"), 2019, "1902.00146",
        "https://proceedings.mlr.press/v97/mohri19a.html",
        "A model trained on the pooled clients' data serves the clients' average, not any one mixture of them. AFL "
        "trains for the worst mixture λ of the client domains (a minimax over the simplex), solved by Stochastic-AFL, "
        "and bounds its generalisation with a weighted Rademacher complexity; it is compared with the uniform model "
        "on Adult, Fashion-MNIST and a language model.",
        name="AFL", reproduces="Tables 1 (Adult) and 2 (Fashion-MNIST)"),
    "wafl": Citation(
        "nguyen2022wafl", "misc", "On the Generalization of Wasserstein Robust Federated Learning",
        "arXiv preprint (ICLR 2022 submission)",
        ("Tung-Anh Nguyen", "Tuan Dung Nguyen", "Long Tan Le", "Canh T. Dinh", "Nguyen H. Tran"), 2022,
        "2206.01432", "https://arxiv.org/abs/2206.01432",
        "Clients minimise the worst loss over a Wasserstein ball around their data, through its dual: a local SGD on "
        "a surrogate loss whose inner step perturbs the inputs with penalty γ. The paper proves convergence and a "
        "generalisation bound over the ball, and reports robustness to adversarially shifted clients and to unseen "
        "domains (MNIST, CIFAR-10, digit domain adaptation).",
        name="WAFL", reproduces="Figs. 2–5, Table 2"),
    "fedmm": Citation(
        "shen2023fedmm", "inproceedings",
        "FedMM: A Communication Efficient Solver for Federated Adversarial Domain Adaptation",
        "Proceedings of the 22nd International Conference on Autonomous Agents and Multiagent Systems (AAMAS)",
        ("Yan Shen", "Jian Du", "Han Zhao", "Zhanghexuan Ji", "Chunwei Ma", "Mingchen Gao"), 2023, "2110.08477",
        "https://arxiv.org/abs/2110.08477",
        "In federated adversarial domain adaptation each client holds source or target data only, and local SGDA "
        "steps drift apart. FedMM adds dual variables (an augmented Lagrangian) that close the clients' gradient gap; "
        "it is compared with federated SGDA on MNIST → MNIST-M under label imbalance and on Office-31.",
        name="FedMM", reproduces="Figs. 1, 4–7 (MNIST → MNIST-M), Table 1 (Office-31)"),
    "agnostic_fedavg": Citation(
        "ro2021communication", "inproceedings", "Communication-Efficient Agnostic Federated Averaging",
        "Proceedings of Interspeech 2021",
        ("Jae Ro", "Mingqing Chen", "Rajiv Mathews", "Mehryar Mohri", "Ananda Theertha Suresh"), 2021, "2104.02748",
        "https://arxiv.org/abs/2104.02748",
        "AFL's minimax made cross-device: AgnosticFedAvg updates the domain weights λ on the server from the "
        "sampled clients' losses once per round (exponentiated gradient), with FedAvg's communication. The paper "
        "shows it on a toy regression, EMNIST-62 and Stack Overflow language models with clients or data as domains.",
        name="AgnosticFedAvg", reproduces="Fig. 1, Tables 1, 3, 5, and AFL's language-model Table 3"),
    "fedpals": Citation(
        "listozec2024fedpals", "misc", "Overcoming label shift in targeted federated learning", "arXiv preprint",
        ("Edvin Listo Zec", "Adam Breitholtz", "Fredrik D. Johansson"), 2024, "2411.03799",
        "https://arxiv.org/abs/2411.03799",
        "When the clients' label marginals differ from the target's, FedPALS aggregates with the weights α that "
        "match the target's label marginal best, trading that bias against the variance of few effective samples "
        "with λ (a QP on the simplex). It is compared with FedAvg, FedProx, SCAFFOLD and an oracle on Fashion-MNIST, "
        "CIFAR-10, PACS and iWildCam.",
        name="FedPALS", reproduces="Tables 1–3, Figs. 2–9"),
}


def bibtex(c: Citation) -> str:
    """The BibTeX entry of a :class:`Citation` (authors joined by ``and``, the arXiv id as ``eprint``)."""
    venue = "booktitle" if c.kind == "inproceedings" else "howpublished"
    fields = [("title", "{" + c.title + "}"), ("author", " and ".join(c.authors)), (venue, c.venue),
              ("year", str(c.year)), ("eprint", c.arxiv), ("archivePrefix", "arXiv"), ("url", c.url)]
    width = max(len(k) for k, _ in fields)
    body = ",\n".join(f"  {k:<{width}} = {{{v}}}" for k, v in fields)
    return f"@{c.kind}{{{c.key},\n{body}\n}}\n"


def citation_markdown(paper: str) -> str:
    """A paper page's opening: reference with links, authors, abstract and the BibTeX (folded).

    Raises
    ------
    KeyError
        For a paper without a :data:`CITATIONS` entry.
    """
    c = CITATIONS[paper]
    arxiv = f"https://arxiv.org/abs/{c.arxiv}"
    links = f"[arXiv:{c.arxiv}]({arxiv})" if c.url == arxiv else f"[paper]({c.url}) · [arXiv:{c.arxiv}]({arxiv})"
    bib = "\n".join("    " + line for line in ["```bibtex", *bibtex(c).rstrip("\n").splitlines(), "```"])
    return "\n".join([f"**{c.title}**  ", f"{', '.join(c.authors)}  ", f"*{c.venue}*, {c.year} — {links}", "",
                      c.abstract, "", '??? quote "BibTeX"', "", bib, ""])


#: The README's generated block of the paper table (:func:`papers_table_markdown`).
PAPERS_BLOCK = "papers"


def short_authors(c: Citation) -> str:
    """The authors as a table cell: every family name up to three authors, else the first one's with "et al.".

    A family name is the last word of the name unless :data:`FAMILY_NAMES` gives it (``"Listo Zec"``), the same
    split as ``CITATION.cff``'s ``family-names``.
    """
    families = [FAMILY_NAMES.get(a, a.split()[-1]) for a in c.authors]
    return ", ".join(families) if len(families) <= 3 else f"{families[0]} et al."


#: Authors whose family name is more than the last word of their name (as ``CITATION.cff`` splits them).
FAMILY_NAMES = {"Edvin Listo Zec": "Listo Zec"}


def venue_short(c: Citation) -> str:
    """The venue as the README's table writes it: ``"ICML 2019"``, ``"arXiv:2206.01432, 2022"``."""
    m = re.search(r"\(([A-Z]+)\)|\b(Interspeech)\b", c.venue)
    if c.kind == "inproceedings" and m:
        return f"{m.group(1) or m.group(2)} {c.year}"
    return f"arXiv:{c.arxiv}, {c.year}"


def page_heading(paper: str) -> str:
    """A paper page's first line: ``"# NAME — TITLE"``, or ``"# TITLE"`` where the title starts with the name.

    Raises
    ------
    KeyError
        For a paper without a :data:`CITATIONS` entry.
    """
    c = CITATIONS[paper]
    return f"# {c.title}" if c.title.startswith(c.name) else f"# {c.name} — {c.title}"


def papers_table_markdown(coverage: Mapping[str, Any] | None = None, pages: str = "docs/papers/") -> str:
    """The README's paper table: name, authors, title, venue, what is reproduced, its data and the docs page.

    Every cell but the data is read from :data:`CITATIONS`; ``python -m fedshift.docsgen papers README.md`` writes it
    into the README's ``papers`` block (``--check`` only compares), with the committed snapshot's data.

    Parameters
    ----------
    coverage : mapping, optional
        Paper → :class:`~fedshift.docsgen.coverage.DataCoverage` (:func:`~fedshift.docsgen.coverage.data_coverage`):
        a column says which datasets the results ran on for real and which only on stand-ins. None: no such column.
    pages : str
        The folder of the paper pages, relative to the page the table is on (the site's home page: ``papers/``).
    """
    from fedshift.docsgen.coverage import coverage_text

    data = coverage is not None
    lines = ["| paper | reproduced here | " + ("data the results ran on | " if data else "") + "docs page |",
             "|---|---|---|" + ("---|" if data else "")]
    for paper, c in CITATIONS.items():
        page = f"{pages}{paper}.md"
        cell = f" {coverage_text(coverage.get(paper))} |" if coverage is not None else ""
        link = page if pages == "docs/papers/" else c.name  # the README names the file, the site the paper
        lines.append(f"| **{c.name}** — {short_authors(c)}, *{c.title}*, {venue_short(c)} | {c.reproduces} |{cell} "
                     f"[{link}]({page}) |")
    if data:
        lines += ["", "*real*: the results read the dataset itself; *stand-ins only*: the data mirror the results "
                      "were made from lacks it, so its tables and figures were built and tested on stand-in files alone "
                      "(the CI rehearsal's), never on the data."]
    return "\n".join(lines) + "\n"


# --- hyper-parameters and their sources ------------------------------------------------------------------------------

#: The sources a value's note can name, with the words that mark each in the config files' comments. An explicit tag
#: (``[paper]``, ``[code]``, ``[ours]``) wins; else the code's marks, then our own choice's, then the paper's.
SOURCES = {
    "code": re.compile(r"\bofficial\b|\bfair_flearn\b|\bFedJAX\b|\bfedjax\b|dual-grp|FedDG_Benchmark|\bBai et al|"
                       r"\bthe (?:official |preliminary |benchmark's )?code\b|\bREADME\b|--[a-z_]+", re.I),
    "ours": re.compile(r"\bsilent\b|\bnot given\b|\bdoes not say\b|\bgives no\b|\bour\b|\bchosen on\b|"
                       r"\bchoice\b|\bCPU budget\b|\bnot the paper", re.I),
    "paper": re.compile(r"\"[^\"]+\"|§\s?\d|\b(?:Table|Fig\.?|Figure|eq\.|Eq\.|App\.|Algorithm|Prop\.)\s?\(?\w|"
                        r"\bthe paper\b|\bpaper's\b", re.I),
}
_UNLESS_MARKED = re.compile(r"paper settings\b[^#]*?(?:\n#[^\n]*)*?unless marked", re.I)
_TAG = re.compile(r"\[(paper|code|ours)\b[^\]]*\]")


def value_source(note: str) -> str:
    """Where a configured value comes from, read from the comment beside it.

    Parameters
    ----------
    note : str
        The comment next to the key (:func:`fedshift.docsgen.yaml_comments`).

    Returns
    -------
    str
        ``"paper"`` (the paper's text: a quote, a section, table, figure or equation), ``"code"`` (the paper's
        official code or the benchmark it builds on), ``"ours"`` (the paper is silent: our choice, its reason beside
        it) or ``""`` when the note names none. An explicit tag (``[paper]``, ``[code]``, ``[ours]``, as the config
        files write them) wins over the words.
    """
    tag = _TAG.search(note)
    if tag:
        return tag.group(1)
    for source in ("code", "ours", "paper"):
        if SOURCES[source].search(note):
            return source
    return ""


def _short(value: Any, width: int = 40) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[:width - 1] + "…"


def hparam_rows(root: Path, paper: str) -> list[dict[str, str]]:
    """Every commented key of a paper's configuration, with its value and its value's source.

    Parameters
    ----------
    root : Path
        The repository root (reads ``config/papers/<paper>.yaml``).
    paper : str
        The paper's section name.

    Returns
    -------
    list of dict
        In file order: ``key`` (dotted, without the section), ``value`` (JSON, shortened to 40 characters; a mapping's
        too), ``source`` (:func:`value_source`; a file whose header reads "Paper settings … unless marked"
        gives ``"paper"`` to every unmarked note) and ``note`` (the comment, development references removed).
    """
    from fedshift.docsgen.configref import yaml_comments

    path = root / "config" / "papers" / f"{paper}.yaml"
    text = path.read_text()
    data = yaml.safe_load(text) or {}
    header = "\n".join(line for line in text.splitlines()[:12] if line.startswith("#"))
    default = "paper" if _UNLESS_MARKED.search(header) else ""  # "Paper settings … unless marked [code] or [ours]"
    rows = []
    for key, note in yaml_comments(text).items():
        if not key.startswith(paper + "."):
            continue
        node: Any = data
        for part in key.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        value = _short(node)  # a mapping too: its keys and values, shortened (a blank cell read as "no value")
        rows.append({"key": key[len(paper) + 1:], "value": value, "source": value_source(note) or default,
                     "note": clean_note(note)})
    return rows


def hparams_markdown(root: Path, paper: str) -> str:
    """The hyper-parameter table of a paper page (:func:`hparam_rows`), folded, with the count per source."""
    rows = hparam_rows(root, paper)
    counts = {s: sum(r["source"] == s for r in rows) for s in ("paper", "code", "ours", "")}
    lines = [f"Every annotated setting of `config/papers/{paper}.yaml` (generated from the file; an experiment's "
             "own value overrides the defaults). Source: **[paper]** the paper's text, **[code]** the official code "
             "or the benchmark the paper builds on, **[ours]** the paper is silent and the note gives our reason, "
             "**–** the note names no source. "
             f"{len(rows)} settings: {counts['paper']} [paper], {counts['code']} [code], {counts['ours']} [ours], "
             f"{counts['']} –.", "", '??? info "Hyper-parameters and their sources"', "",
             "    | key | value | source | note |", "    |---|---|---|---|"]
    for r in rows:
        source = f"[{r['source']}]" if r["source"] else "–"
        value = f"`{r['value']}`" if r["value"] else ""
        note = r["note"].replace("[", "\\[")
        lines.append(f"    | `{r['key']}` | {oneline(value)} | {source} | {note} |")  # notes come escaped
    return "\n".join(lines) + "\n"


# --- scales --------------------------------------------------------------------------------------------------------

#: The scales a paper page lists: name -> the overlays stacked on the paper-scale configuration, in order.
SCALES: dict[str, tuple[str, ...]] = {
    "paper": (),
    "quick": ("config/quick.yaml",),
    "decisive": ("config/quick.yaml", "config/decisive.yaml"),
    "rehearsal": ("config/rehearsal.yaml",),
}


def _merge(base: Any, over: Any) -> Any:
    """Snakemake's ``--configfile`` stacking: mappings merge key by key, anything else is replaced."""
    if isinstance(base, Mapping) and isinstance(over, Mapping):
        out = dict(base)
        for k, v in over.items():
            out[k] = _merge(base.get(k), v) if k in base else v
        return out
    return over


def _seeds(section: Mapping[str, Any]) -> list[int]:
    default = (section.get("defaults") or {}).get("seeds")
    out = []
    for exp in (section.get("experiments") or {}).values():
        seeds = exp.get("seeds", default) if isinstance(exp, Mapping) else None
        if isinstance(seeds, int):
            out.append(seeds)
        elif isinstance(seeds, Sequence) and not isinstance(seeds, str):
            out.append(len(seeds))
    return out


def scale_rows(root: Path, paper: str, cpu_s: Mapping[str, float] | None = None) -> list[dict[str, str]]:
    """What each scale of :data:`SCALES` builds for one paper.

    Parameters
    ----------
    root : Path
        The repository root.
    paper : str
        The paper's section name.
    cpu_s : mapping, optional
        Measured training and evaluation CPU seconds by scale (from a results tree's benchmark files).

    Returns
    -------
    list of dict
        ``scale``, ``command`` (the overlays), ``outputs`` (the section's ``outputs`` list at that scale, "every
        table and figure" when the section sets none), ``experiments`` (how many), ``seeds`` (their range) and
        ``cpu`` (the measured CPU time in CPU-hours, or CPU-minutes under one hour; "–" when not measured).
    """
    base = yaml.safe_load((root / "config" / "papers" / f"{paper}.yaml").read_text()) or {}
    rows = []
    for scale, overlays in SCALES.items():
        config = base
        for overlay in overlays:
            config = _merge(config, yaml.safe_load((root / overlay).read_text()) or {})
        section = config.get(paper) or {}
        outputs = section.get("outputs")
        seeds = _seeds(section)
        span = "–" if not seeds else (str(min(seeds)) if min(seeds) == max(seeds) else f"{min(seeds)}–{max(seeds)}")
        measured = (cpu_s or {}).get(scale)
        rows.append({"scale": scale, "command": " ".join(f"`{o}`" for o in overlays) or "(none)",
                     "outputs": ", ".join(map(str, outputs)) if outputs else "every table and figure",
                     "experiments": str(len(section.get("experiments") or {})), "seeds": span,
                     "cpu": "–" if measured is None else (f"{measured / 3600:.2f} CPU-h" if measured >= 3600
                                                          else f"{measured / 60:.1f} CPU-min")})
    return rows


def scales_markdown(root: Path, paper: str, cpu_s: Mapping[str, float] | None = None) -> str:
    """The table of :func:`scale_rows` in Markdown."""
    lines = ["| scale | `--configfile` overlays | builds | experiments | seeds per experiment | measured CPU |",
             "|---|---|---|---:|---|---:|"]
    for r in scale_rows(root, paper, cpu_s):
        lines.append(f"| {r['scale']} | {r['command']} | {r['outputs']} | {r['experiments']} | {r['seeds']} | "
                     f"{r['cpu']} |")
    return "\n".join(lines) + "\n"
