"""Every ```python block in docs/ and the README runs (blocks of one page share a
namespace, in order)."""

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
PAGES = sorted(p for p in [*DOCS.glob("*.md"), DOCS.parent / "README.md"] if BLOCK.search(p.read_text()))
FRAMEWORKS = ("numpy", "torch", "jax", "paddle", "cupy")


@pytest.mark.parametrize("page", PAGES, ids=[p.stem for p in PAGES])
def test_code_blocks_run(page):
    pytest.importorskip("numpy", reason="numpy not installed")
    namespace = {"__name__": f"docs_{page.stem}"}
    for number, block in enumerate(BLOCK.findall(page.read_text()), 1):
        code = compile(block, f"{page.name} (python block {number})", "exec")
        try:
            exec(code, namespace)  # noqa: S102  (our own documentation)
        except ModuleNotFoundError as exc:
            if exc.name not in FRAMEWORKS:
                raise
            pytest.skip(f"{exc.name} not installed")
