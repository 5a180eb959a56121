"""MkDocs hook: the generated parts of the site (fedshift.docsgen), rendered at every build.

The results tree is ``results/`` of the repository, or the folder named by ``FEDSHIFT_DOCS_RESULTS`` (the target
``docs`` and the tests set it). Pages hold markers such as ``<!-- fedshift:results afl -->``; the figures of the
tree are served under ``generated/figures/``.
"""

from __future__ import annotations

import os
from pathlib import Path

from mkdocs.structure.files import File

from fedshift import docsgen

ROOT = Path(__file__).resolve().parents[1]


def _results() -> Path:
    return Path(os.environ.get("FEDSHIFT_DOCS_RESULTS", ROOT / "results")).resolve()


def on_files(files, config):
    """Publish every figure of the results tree under ``generated/figures/``."""
    for rel, src in docsgen.site_figures(_results()).items():
        files.append(File.generated(config, rel, abs_src_path=str(src)))
    return files


def on_page_markdown(markdown, page, config, files):
    """Expand the page's generated-content markers (:func:`fedshift.docsgen.expand_markers`)."""
    depth = len(Path(page.file.src_uri).parts) - 1
    return docsgen.expand_markers(markdown, root=ROOT, results=_results(), page_depth=depth)


def on_page_content(html, page, config, files):
    """Sphinx roles of the docstrings as links (:func:`fedshift.docsgen.sphinx_roles_to_links`)."""
    return docsgen.sphinx_roles_to_links(html)
