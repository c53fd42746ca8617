# Sphinx configuration: the pages are Markdown (MyST). Build with
#   pip install sphinx myst-parser && sphinx-build docs docs/_build
project = "tensorplug"
extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]
