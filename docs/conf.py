"""Sphinx configuration. The pages are Markdown (MyST); the Python reference is generated
from the docstrings of the installed package (autodoc). Build as CI does, warnings as
errors:

    pip install -e ".[docs]" && sphinx-build -W -E -b html docs docs/_build
"""

import tensorplug

project = "tensorplug"
release = tensorplug.__version__
extensions = ["myst_parser", "sphinx.ext.autodoc"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# Every cross-reference must resolve: an unknown name in a docstring or a page is a
# warning, and warnings fail the build (-W).
nitpicky = True
# The build runs offline (no intersphinx), so standard-library classes in signatures have
# no target; they are listed here one by one.
nitpick_ignore = [("py:class", "pathlib.Path")]
# The C/C++ reference names standard and DLPack types it does not itself document.
nitpick_ignore_regex = [
    (r"c:identifier|cpp:identifier|c:type|cpp:type|cpp:class",
     r"(std::.*|u?int(8|16|32|64)_t|size_t|DL[A-Za-z]+|cudaStream_t|cudaError_t|T|F|Fn|Alloc|Ts|ExtraArgs)"),
]

myst_heading_anchors = 3
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True}
html_theme = "alabaster"
