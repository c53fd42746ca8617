"""The quick-start kernels are right for every layout a framework can hand them.

The README's `affine` walks its input with ForEachOffset and must return correct values for
transposed, reversed and broadcast views; docs/index.md's `add` indexes memory as row-major
and must refuse every strided view with its message. Both kernels are taken from the pages
themselves (their first python block), so the tests check what a reader copies.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from test_docs import code_blocks

ROOT = Path(__file__).resolve().parents[2]
np = pytest.importorskip("numpy", reason="numpy not installed")

REFUSED = "add: a and b must be contiguous (row-major); copy strided views first"


def _first_block_module(page: Path, name: str):
    first = next(b for b in code_blocks(page.read_text(), page.name) if b.language == "python")
    namespace = {"__name__": f"docs_{page.stem}"}
    exec(compile(first.code, first.label, "exec"), namespace)  # noqa: S102  (our own documentation)
    return namespace["mod"][name]


@pytest.fixture(scope="module")
def affine():
    return _first_block_module(ROOT / "README.md", "affine")


@pytest.fixture(scope="module")
def add():
    return _first_block_module(ROOT / "docs" / "index.md", "add")


def _numpy_views():
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    return {
        "contiguous": base,
        "transposed": base.T,
        "reversed": base[::-1, ::-1],
        "broadcast": np.broadcast_to(np.arange(4, dtype=np.float32), (3, 4)),
        "sliced": base[::2, 1::2],
    }


@pytest.mark.parametrize("layout", list(_numpy_views()))
def test_readme_kernel_numpy_layouts(affine, layout):
    x = _numpy_views()[layout]
    out = affine(x, 2.0, 1.0)
    assert type(out) is np.ndarray
    assert out.shape == x.shape and out.dtype == np.float32
    np.testing.assert_array_equal(out, 2 * x + 1)


def test_readme_kernel_float64_and_zero_size(affine):
    x = np.linspace(0, 1, 5)[::-2]
    np.testing.assert_array_equal(affine(x, 3.0, -1.0), 3 * x - 1)
    assert affine(np.zeros((0, 3), np.float32), 2.0, 1.0).shape == (0, 3)


def test_readme_kernel_refuses_other_dtypes(affine):
    with pytest.raises(TypeError) as info:
        affine(np.arange(3), 2.0, 1.0)
    assert str(info.value) == "argument 'x': unsupported dtype int64 for affine"


def test_readme_kernel_torch_layouts(affine):
    torch = pytest.importorskip("torch", reason="torch not installed")
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    views = {"transposed": base.T, "broadcast": torch.arange(4.0).expand(3, 4), "sliced": base[::2, 1::2]}
    for layout, x in views.items():  # torch has no negative strides: no reversed view
        assert not x.is_contiguous(), layout
        out = affine(x, 2.0, 1.0)
        assert type(out) is torch.Tensor, layout
        assert torch.equal(out, 2 * x + 1), layout


def test_readme_kernel_jax(affine):
    jnp = pytest.importorskip("jax.numpy", reason="jax not installed")
    x = jnp.arange(12, dtype=jnp.float32).reshape(3, 4)
    for layout, view in {"transposed": x.T, "reversed": x[::-1], "broadcast": jnp.broadcast_to(x[0], (3, 4))}.items():
        out = affine(view, 2.0, 1.0)  # jax materializes its views row-major: the values must still be right
        np.testing.assert_array_equal(np.asarray(out), 2 * np.asarray(view) + 1, err_msg=layout)


def test_index_kernel_adds_contiguous_tensors(add):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(add(x, x), 2 * x)


@pytest.mark.parametrize("layout", ["transposed", "reversed", "broadcast", "sliced"])
def test_index_kernel_refuses_numpy_views(add, layout):
    x = _numpy_views()[layout]
    y = np.ones(x.shape, np.float32)
    for a, b in ((x, y), (y, x)):
        with pytest.raises(ValueError) as info:
            add(a, b)
        assert str(info.value).startswith(REFUSED)


def test_index_kernel_refuses_torch_views(add):
    torch = pytest.importorskip("torch", reason="torch not installed")
    for x in (torch.ones(3, 4).T, torch.ones(4).expand(3, 4)):
        with pytest.raises(ValueError) as info:
            add(x, torch.ones(x.shape))
        assert str(info.value).startswith(REFUSED)


def test_index_kernel_refuses_mismatched_shapes(add):
    with pytest.raises(ValueError) as info:
        add(np.ones(3, np.float32), np.ones(4, np.float32))
    assert str(info.value).startswith("add: a has shape [3], b has shape [4]")


# "mod.affine(x, 2.0, 1.0)      # numpy.ndarray [[1, 3, 5], [7, 9, 11]]": an expression whose
# trailing comment claims the result's type (module.Type) and values (a Python literal).
CLAIM = re.compile(r"^(?P<expr>[^#\s][^#]*?)\s+#\s+(?P<type>[\w.]+\.\w+)\s+(?P<values>\[.*\])\s*$")


def test_readme_claims_its_results_types_and_values():
    """Every result the README's comments describe has that type and those values."""
    page = ROOT / "README.md"
    namespace = {"__name__": "docs_readme_claims"}
    claims = 0
    for block in (b for b in code_blocks(page.read_text(), page.name) if b.language == "python"):
        for module in re.findall(r"^import (\w+)", block.code, re.M):
            pytest.importorskip(module, reason=f"{module} not installed")
        exec(compile(block.code, block.label, "exec"), namespace)  # noqa: S102  (our own documentation)
        for line in block.code.splitlines():
            match = CLAIM.match(line)
            if not match:
                continue
            claims += 1
            result = eval(match["expr"], namespace)  # noqa: S307
            kind = type(result)
            assert f"{kind.__module__.split('.')[0]}.{kind.__qualname__}" == match["type"], line
            assert np.asarray(result).tolist() == ast.literal_eval(match["values"]), line
    assert claims >= 3  # the numpy, transposed numpy and torch results
