"""Sphinx configuration of streamk's API documentation, built from the docstrings of the
names ``streamk`` exports (autodoc + napoleon). Build it with warnings as errors::

    sphinx-build -W --keep-going -b html docs/api docs/api/_build

(tests/test_packaging.py does, into a temporary folder)."""

import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

import streamk  # noqa: E402

project = "streamk"
release = version = streamk.__version__
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon"]
# the docstrings speak of shapes and formats in ``literals``; single backticks are code too
default_role = "code"
autodoc_default_options = {"members": True, "member-order": "bysource", "show-inheritance": True}
autodoc_typehints = "description"
autodoc_class_signature = "separated"
napoleon_google_docstring = True
napoleon_numpy_docstring = True
html_theme = "alabaster"
html_static_path: list[str] = []
exclude_patterns = ["_build"]
