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
# _static holds the figures and the benchmark table (included by fused_kernels.md), not pages.
exclude_patterns = ["_build", "_static"]

# Every cross-reference must resolve: an unknown name in a docstring or a page is a
# warning, and warnings fail the build (-W).
nitpicky = True
# The build runs offline (no intersphinx), so standard-library classes in signatures have
# no target; they are listed here one by one.
nitpick_ignore = [("py:class", "pathlib.Path"), ("py:class", "inspect.Signature")]
# The C/C++ references use the C standard's integer types, which have no target.
nitpick_ignore_regex = [
    (r"c:identifier|cpp:identifier", r"u?int(8|16|32|64)_t|size_t"),
    # The DLPack types are declared in the C domain (capi.md); the C++ domain cannot see them.
    (r"cpp:identifier", r"DL[A-Za-z]+"),
    (r"cpp:identifier", r"cudaStream_t"),  # the CUDA runtime's type
]

myst_heading_anchors = 3
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True}
html_theme = "furo"
# The site's CSS over the theme's (code that wraps, pictures readable on a phone); only this
# folder of _static is copied, the figures are copied where a page references them.
html_static_path = ["_static/site"]
html_css_files = ["tensorplug.css"]
html_title = f"tensorplug {release}"


def _skip_namedtuple_fields(app, what, name, obj, skip, options):
    # A NamedTuple's fields are documented in its class docstring; autodoc would list each
    # again as an attribute whose only text is Python's "Alias for field number N".
    if isinstance(getattr(obj, "__doc__", None), str) and obj.__doc__.startswith("Alias for field number "):
        return True
    return None


def setup(app):
    app.connect("autodoc-skip-member", _skip_namedtuple_fields)
