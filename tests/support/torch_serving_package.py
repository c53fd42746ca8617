"""The AOTInductor package of tests/torch/test_torch_serving.py: a model calling an allocating,
a destination-passing and a contiguous= tensorplug op (namespace ``tpserve``), exported,
compiled by AOTInductor and given the tensorplug record (torch_aoti.add_ops).

:func:`make` builds it in the calling process (the test module's fixture, ops on the compiled
torch bridge, the default). Run as a script, ``python torch_serving_package.py DIR``, it builds
it in a fresh process, where ``TENSORPLUG_TORCH_BRIDGE=0`` makes the ops take the stable
kernels (the bridge is chosen once per process), and prints the package's facts as one JSON
line.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

import grad_kernels  # noqa: F401  (grad_kernels.SOURCE: strict_cube)
import op_kernels

import tensorplug
from tensorplug import cpp
from tensorplug_adapters.torch import aoti as torch_aoti


class Model(torch.nn.Module):
    def __init__(self, ops):
        super().__init__()
        self.ops = ops

    def forward(self, x):
        y = self.ops.scale(x, 2.0, None)          # allocating: like("x")
        out = torch.empty_like(y)
        self.ops.axpy(y, x, out, 0.5)             # destination passing: writes out
        # allocating: Output(shape=("x.shape[0]",), dtype="x"); then a kernel of another
        # library that raises on a non-compact tensor, declared contiguous=("x",), given x.t()
        return self.ops.row_sum(out) + 1, self.ops.strict_cube(x.t())


def declare() -> SimpleNamespace:
    """The four ops, declared in this process, and their two kernel libraries."""
    module = op_kernels.ops().module
    strict = tensorplug.load_module(cpp.build("grad_kernels", [grad_kernels.SOURCE]))
    return SimpleNamespace(
        module=module, strict=strict,
        strict_cube=tensorplug.op("tpserve::strict_cube", strict.strict_cube, returns=tensorplug.like("x"),
                                  contiguous=("x",)),
        scale=tensorplug.op("tpserve::scale", module.scale, returns=tensorplug.like("x")),
        axpy=tensorplug.op("tpserve::axpy", module.axpy),
        row_sum=tensorplug.op("tpserve::row_sum", module.row_sum,
                              returns=tensorplug.Output(shape=("x.shape[0]",), dtype="x")),
    )


def make(root: Path) -> SimpleNamespace:
    """The package with the record (``path``) and without (``bare``) under ``root``, the
    kernel libraries (``module``, ``strict``) and the eager model's values (``expected``, the
    first result; ``cube``, the second, flattened)."""
    ops = declare()
    model, x = Model(ops), torch.arange(6, dtype=torch.float32).reshape(2, 3)
    bare = str(root / "bare.pt2")
    torch._inductor.aoti_compile_and_package(torch.export.export(model, (x,)), package_path=bare)
    path = str(root / "model.pt2")
    shutil.copy(bare, path)
    torch_aoti.add_ops(path, ops.module, [ops.scale, ops.axpy, ops.row_sum])
    torch_aoti.add_ops(path, ops.strict, [ops.strict_cube])
    first, cube = model(x)
    return SimpleNamespace(path=path, bare=bare, root=root, module=ops.module, strict=ops.strict, ops=ops,
                           expected=first.tolist(), cube=cube.flatten().tolist())


if __name__ == "__main__":
    from tensorplug_adapters.torch import bridge as torch_bridge, native as torch_native

    made = make(Path(sys.argv[1]))
    ops = made.ops
    print(json.dumps({
        "path": made.path, "expected": made.expected, "cube": made.cube,
        "bridge_attached": torch_bridge.attached(),
        # the kernel each op ran in this process: "bridge", "stable" (the stable shim's
        # native kernel) or "python" (with the reason)
        "kernels": {op.name: "bridge" if torch_native.bridged(op) else
                    "stable" if torch_native.reason(op) is None else "python: " + torch_native.reason(op)
                    for op in (ops.scale, ops.axpy, ops.row_sum, ops.strict_cube)},
    }))
