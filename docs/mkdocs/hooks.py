# SPDX-License-Identifier: MIT
"""MkDocs hooks of the user guide.

* The guide is docs/*.md (and this folder's extra.css); other files under docs/ (this
  folder's scripts, man-page sources) are not pages and are left out of the site.
* knobs.md's marker line is replaced by the knob tables generated from the knob table
  of transports/base/knobs.h (knobtable.py), so the reference is never a second copy.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import knobtable  # noqa: E402

KNOB_MARKER = "<!-- knob-table: generated from transports/base/knobs.h -->"
ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _uri(f):
    """The file's path under docs/, with / separators (MkDocs 1.4 has no src_uri)."""
    return getattr(f, "src_uri", None) or f.src_path.replace(os.sep, "/")


def on_files(files, config):
    docs = os.path.realpath(config["docs_dir"]) + os.sep
    for f in list(files):
        if not os.path.realpath(f.abs_src_path).startswith(docs):
            continue  # the theme's own files
        uri = _uri(f)
        if uri == "mkdocs/extra.css":
            continue  # the guide's own style sheet
        if "/" in uri or not uri.endswith(".md"):
            files.remove(f)
    return files


def on_page_markdown(markdown, page, config, files):
    if _uri(page.file) != "knobs.md":
        return markdown
    if KNOB_MARKER not in markdown:
        raise ValueError("knobs.md lost its marker line " + KNOB_MARKER)
    table = knobtable.knob_markdown(os.path.join(ROOT, "transports", "base", "knobs.h"))
    return markdown.replace(KNOB_MARKER, table)
