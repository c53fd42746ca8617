"""The docs are true: every code block of docs/ and the README runs, builds, or is
explicitly only shown; the C/C++ references name every public C function and macro; the
paths the pages name exist; and the Sphinx site builds with warnings as errors.

The rule for code blocks, by fence language (``LANGUAGES``):

- ``python``: run; the blocks of one page run in order in one namespace.
- ``cpp`` / ``c``: built into a kernel library (warnings as errors) and loaded.
- ``sh``, ``text``, ``toml``, ``cmake``: shown only (commands that install packages or run
  for minutes, program output, file layouts, configuration excerpts).

A ``python``, ``cpp`` or ``c`` block that must not run says so on the line before its
fence, as the MyST comment ``% not run: <reason>``. Blocks are found with MyST's own
parser, the one Sphinx renders with, so fences nested in lists and ``{code-block}``
directives count like any other. An indented code block, a fence without a language or
with one not in ``LANGUAGES`` fails the test: no block escapes by its format. (Examples
inside docstrings, shown on the API reference page, are the docstrings' own.)
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = sorted([*DOCS.glob("*.md"), ROOT / "README.md"])
HEADERS = ROOT / "csrc" / "include" / "tensorplug"
FRAMEWORKS = ("numpy", "torch", "jax", "paddle", "cupy")
LANGUAGES = {"python": "run", "cpp": "build", "c": "build", "sh": "shown", "text": "shown", "toml": "shown",
             "cmake": "shown"}
CODE_DIRECTIVES = ("{code-block}", "{code}", "{sourcecode}")
NOT_RUN = re.compile(r"^\s*not run: \S")


@dataclass
class Block:
    page: str
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    action: str  # "run", "build", "shown" or "not run"

    @property
    def label(self) -> str:
        return f"{self.page}:{self.line} ({self.language} block)"


def _parser():
    mdit = pytest.importorskip("myst_parser.parsers.mdit", reason="myst-parser not installed (pip install '.[docs]')")
    from markdown_it.renderer import RendererHTML
    from myst_parser.config.main import MdParserConfig

    return mdit.create_md_parser(MdParserConfig(), RendererHTML)


def code_blocks(text: str, page: str = "<page>") -> list[Block]:
    """Every code block of a MyST page, classified by the rule above; ValueError for a
    block the rule does not cover."""
    blocks = []
    previous = None
    for token in _parser().parse(text):
        if token.type == "code_block":
            raise ValueError(f"{page}:{token.map[0] + 1}: an indented code block; write it as a fenced block "
                             f"with a language ({', '.join(LANGUAGES)})")
        if token.type == "fence":
            info = token.info.split()
            if info and info[0].startswith("{"):
                if info[0] == "{eval-rst}" and re.search(r"^\s*\.\. (code-block|code|sourcecode)::", token.content, re.M):
                    raise ValueError(f"{page}:{token.map[0] + 1}: a code block inside eval-rst; use a fence")
                if info[0] not in CODE_DIRECTIVES:
                    previous = token
                    continue  # a directive (toctree, eval-rst, cpp:function, ...), not a code block
                info = info[1:]
            language = info[0] if info else ""
            if language not in LANGUAGES:
                raise ValueError(f"{page}:{token.map[0] + 1}: a code block in {language or 'no language'!r}; "
                                 f"the docs use {', '.join(LANGUAGES)}")
            action = LANGUAGES[language]
            marked = (previous is not None and previous.type == "myst_line_comment"
                      and previous.map[1] == token.map[0] and NOT_RUN.match(previous.content))
            if marked:
                if action == "shown":
                    raise ValueError(f"{page}:{token.map[0] + 1}: '% not run' on a {language} block, which "
                                     f"never runs")
                action = "not run"
            blocks.append(Block(page, token.map[0] + 1, language, token.content, action))
        previous = token
    return blocks


def _page_id(page: Path) -> str:
    return page.stem if page.parent == DOCS else page.name


def _pages_with(actions: tuple[str, ...]) -> list[Path]:
    """The pages holding blocks of these actions (every page when they cannot be parsed
    here: the tests then skip or fail with the reason)."""
    try:
        return [p for p in PAGES if any(b.action in actions for b in code_blocks(p.read_text(), p.name))]
    except (ValueError, pytest.skip.Exception):
        return PAGES


# ------------------------------------------------------------- the rule itself ----
def test_nested_and_directive_blocks_are_found():
    text = ("1. A step:\n\n   ```python\n   x = 1\n   ```\n\n"
            "```{code-block} python\ny = 2\n```\n\n"
            "% not run: needs a GPU\n```python\nz = 3\n```\n\n"
            "```{toctree}\ncalling\n```\n\n```sh\npip install x\n```\n")
    blocks = code_blocks(text)
    assert [(b.language, b.code, b.action) for b in blocks] == [
        ("python", "x = 1\n", "run"), ("python", "y = 2\n", "run"), ("python", "z = 3\n", "not run"),
        ("sh", "pip install x\n", "shown")]


@pytest.mark.parametrize("text, message", [
    ("Text.\n\n    x = 1\n", "<page>:3: an indented code block; write it as a fenced block with a language"),
    ("```\nx = 1\n```\n", "<page>:1: a code block in 'no language'; the docs use python, cpp, c, sh, text, toml, cmake"),
    ("```py\nx = 1\n```\n", "<page>:1: a code block in 'py'; the docs use python, cpp, c, sh, text, toml, cmake"),
    ("% not run: shell\n```sh\nls\n```\n", "<page>:2: '% not run' on a sh block, which never runs"),
])
def test_blocks_outside_the_rule_fail(text, message):
    with pytest.raises(ValueError) as info:
        code_blocks(text)
    assert str(info.value).startswith(message)


def test_a_not_run_mark_must_touch_its_fence():
    blocks = code_blocks("% not run: GPU only\n\n```python\nx = 1\n```\n")
    assert [b.action for b in blocks] == ["run"]


# ----------------------------------------------------------------- the pages ----
@pytest.mark.parametrize("page", PAGES, ids=[_page_id(p) for p in PAGES])
def test_every_block_follows_the_rule(page):
    code_blocks(page.read_text(), page.name)  # raises for a block outside the rule


RUN_PAGES = _pages_with(("run",))
BUILD_PAGES = _pages_with(("build",))


@pytest.mark.parametrize("page", RUN_PAGES, ids=[_page_id(p) for p in RUN_PAGES])
def test_python_blocks_run(page):
    blocks = [b for b in code_blocks(page.read_text(), page.name) if b.action == "run"]
    pytest.importorskip("numpy", reason="numpy not installed")
    namespace = {"__name__": f"docs_{page.stem}"}
    for block in blocks:
        code = compile(block.code, block.label, "exec")
        try:
            exec(code, namespace)  # noqa: S102  (our own documentation)
        except ModuleNotFoundError as exc:
            if exc.name not in FRAMEWORKS:
                raise
            pytest.skip(f"{exc.name} not installed")


@pytest.mark.parametrize("page", BUILD_PAGES, ids=[_page_id(p) for p in BUILD_PAGES])
def test_cpp_and_c_blocks_build_into_kernel_libraries(page, tmp_path):
    blocks = [b for b in code_blocks(page.read_text(), page.name) if b.action == "build"]
    import tensorplug
    from tensorplug import cpp

    for block in blocks:
        compiler = "c++" if block.language == "cpp" else "cc"
        if shutil.which(compiler) is None:
            pytest.skip(f"no {'C++' if block.language == 'cpp' else 'C'} compiler on PATH ({compiler})")
        source = tmp_path / f"block{block.line}{'.cc' if block.language == 'cpp' else '.c'}"
        source.write_text(block.code)
        try:
            path = cpp.build(f"docs_block{block.line}", [source], extra_cflags=("-Wall", "-Wextra", "-Werror"),
                             build_directory=tmp_path / f"build{block.line}")
        except cpp.BuildError as exc:
            pytest.fail(f"{block.label} does not build:\n{exc}")
        assert tensorplug.load_module(path).functions, f"{block.label} exports no function"


# ------------------------------------------------------- the C/C++ reference ----
def _reference_names() -> set[str]:
    text = (DOCS / "capi.md").read_text() + (DOCS / "cpp.md").read_text()
    return set(re.findall(r"\b(TP[A-Z]\w*|TENSORPLUG_[A-Z_]+|kTP\w+|__tensorplug\w*)\b", text))


def test_cpp_reference_names_every_c_function_and_public_macro():
    header_text = "\n".join(p.read_text() for p in sorted(HEADERS.glob("*.h")))
    functions = set(re.findall(r"^TP_API [^;(]*?\b(TP\w+)\(", header_text, re.M))
    macros = {m for m in re.findall(r"^#define (TENSORPLUG_[A-Z_]+)", header_text, re.M)
              if "PRIVATE" not in m and not m.endswith("_H_") and m not in ("TENSORPLUG_RUNTIME_BUILD",)}
    assert functions and macros
    missing = sorted((functions | macros) - _reference_names())
    assert not missing, f"docs/capi.md and docs/cpp.md do not document: {', '.join(missing)}"


def test_cpp_reference_names_exist_in_the_headers():
    header_text = "\n".join(p.read_text() for p in sorted(HEADERS.glob("*.h")))
    unknown = sorted(n for n in _reference_names() if not n.startswith("__tensorplug") and n not in header_text)
    assert not unknown, f"docs/capi.md or docs/cpp.md names what no header declares: {', '.join(unknown)}"


# ------------------------------------------------------------------- Sphinx ----
def test_sphinx_builds_with_warnings_as_errors(tmp_path):
    pytest.importorskip("sphinx", reason="sphinx not installed (pip install '.[docs]')")
    pytest.importorskip("myst_parser", reason="myst-parser not installed (pip install '.[docs]')")
    pytest.importorskip("furo", reason="furo, the site's theme, not installed (pip install '.[docs]')")
    result = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", "-d",
                             str(tmp_path / "doctrees"), str(DOCS), str(tmp_path / "html")],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"sphinx-build -W failed:\n{result.stderr}{result.stdout}"
    assert (tmp_path / "html" / "api.html").is_file()


# ------------------------------------------------ claims of docs/decisions.md ----
_JAX_SHARDED = r'''
import os
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
os.environ["JAX_PLATFORMS"] = "cpu"  # two host devices, also where a GPU is present
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from tensorplug import cpp
mod = cpp.load_inline("docs_jax_sharded", "int64_t f(tensorplug::TensorView x) { return x.numel(); }",
                      functions=["f"])
x = jnp.arange(8.0)
two = Mesh(np.array(jax.devices()[:2]), ("d",))
one = Mesh(np.array(jax.devices()[:1]), ("d",))
for sharding in (NamedSharding(two, P("d")), NamedSharding(two, P()), NamedSharding(one, P())):
    array = jax.device_put(x, sharding)
    try:
        mod.f(array)
        print("accepted")
    except Exception as exc:
        print(type(exc).__name__, "|", exc)
    assert mod.f(jax.device_put(array, jax.devices()[0])) == 8
'''


def test_decisions_jax_arrays_on_several_devices_are_refused_as_documented():
    pytest.importorskip("jax", reason="jax not installed")
    result = subprocess.run([sys.executable, "-c", _JAX_SHARDED], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    # XlaRuntimeError: the same error under its name before jax renamed it (0.6.2, Python 3.10's jax)
    lines = [line.replace("XlaRuntimeError | ", "JaxRuntimeError | ", 1) for line in result.stdout.splitlines()]
    several = ("JaxRuntimeError | f() argument 1 'x': INVALID_ARGUMENT: UnsafeBufferPointer() is supported only "
               "for unsharded arrays.")
    assert lines[:2] == [several, several]
    assert lines[2] == ("BufferError | f() argument 1 'x': a jax array sharded over several devices cannot be passed "
                        "to a kernel; move it to one device with jax.device_put")
    text = (DOCS / "decisions.md").read_text()
    assert "UnsafeBufferPointer() is supported only for unsharded arrays." in text.replace("\n", " ")


# --------------------------------------------------------- paths the pages name ----
_REPO_PATH = re.compile(r"`((?:\.\./|/)?(?:[\w.-]+/)*(?:csrc|core|plugins|docs|examples|benchmarks|tests|cmake|shared)/"
                        r"[^`\s]*)`")


@pytest.mark.parametrize("page", PAGES, ids=[_page_id(p) for p in PAGES])
def test_named_repository_paths_exist_inside_the_repository(page):
    named = [m.group(1) for m in _REPO_PATH.finditer(page.read_text())]
    outside = [p for p in named if p.startswith(("../", "/")) or "/../" in p or p.startswith("shared/")]
    assert not outside, f"{page.name} points outside the repository: {outside}"
    missing = [p for p in named if not (ROOT / p).exists()]
    assert not missing, f"{page.name} names paths that do not exist: {missing}"
