"""MkDocs hook: the generated parts of the site (fedshift.docsgen), rendered at every build.

The results tree is the folder named by ``FEDSHIFT_DOCS_RESULTS`` (the target ``docs`` and the tests set it), else
``results/`` of the repository when a run left tables there, else the committed snapshot ``docs/results/snapshot``
(:mod:`fedshift.docsgen.snapshot`), whose pages say so. Pages hold markers such as
``<!-- fedshift:results afl -->``; the figures of the
tree are served under ``generated/figures/``.
"""

from __future__ import annotations

import os
from pathlib import Path

from mkdocs.structure.files import File

from fedshift import docsgen

ROOT = Path(__file__).resolve().parents[1]


def _results() -> Path:
    """``FEDSHIFT_DOCS_RESULTS``, else ``results/`` when it holds tables, else the committed snapshot."""
    return docsgen.docs_results(ROOT, os.environ.get("FEDSHIFT_DOCS_RESULTS"))


def on_files(files, config):
    """Publish the results tree's figures and tidy tables under ``generated/`` (``docsgen.site_figures``)."""
    for rel, src in docsgen.site_figures(_results()).items():
        files.append(File.generated(config, rel, abs_src_path=str(src)))
    return files


def on_page_markdown(markdown, page, config, files):
    """Expand the page's generated-content markers (:func:`fedshift.docsgen.expand_markers`)."""
    depth = len(Path(page.file.src_uri).parts) - 1
    return docsgen.expand_markers(markdown, root=ROOT, results=_results(), page_depth=depth)


def on_page_content(html, page, config, files):
    """Sphinx roles of the docstrings as links (:func:`fedshift.docsgen.sphinx_roles_to_links`), and the verdicts'
    marks drawn as inline SVG instead of colour emoji (:func:`fedshift.docsgen.verdict_marks_to_svg`)."""
    return docsgen.verdict_marks_to_svg(docsgen.sphinx_roles_to_links(html))
