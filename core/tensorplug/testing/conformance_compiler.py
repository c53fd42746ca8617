"""The conformance kit's "compiler" capability: the kit's kernels, declared as ops
(:func:`tensorplug.op`), run inside the framework's graph compiler and match eager.

Part of :mod:`tensorplug.testing.conformance` (imported there). An adapter that does not
implement the ``tensorplug_op_impl`` hook, or whose Framework has no
:meth:`~tensorplug.testing.Framework.compile`, reports the capability as skipped with
"not provided", never as failed.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

import pytest

import tensorplug
from tensorplug.testing import capability
from tensorplug.testing.checks import needs_host, needs_ops
from tensorplug.testing.report import NOT_PROVIDED



@functools.cache
def kit_ops(kernels) -> SimpleNamespace:
    """The kit's kernels as ops in the namespace ``tensorplug_conformance`` (declared once
    per process: op names are process-wide)."""
    like, declare = tensorplug.like, _declare_once
    return SimpleNamespace(
        add_one=declare("tensorplug_conformance::add_one", kernels.add_one, returns=like("x")),
        add=declare("tensorplug_conformance::add", kernels.add, returns=like("a")),
        pair=declare("tensorplug_conformance::pair", kernels.pair, returns=(like("x"), like("x"))),
        fill=declare("tensorplug_conformance::fill", kernels.fill),
    )


def _declare_once(name, function, **rules):
    return tensorplug.get_op(name) or tensorplug.op(name, function, **rules)


def _compile(framework, program):
    """``program`` compiled by the framework; skips with "not provided" unless the adapter
    has ops in its compiler (the ``tensorplug_op_impl`` hook) and its Framework compiles."""
    needs_ops(framework)
    compiled = framework.compile(program)
    if compiled is None:
        pytest.skip(f"{NOT_PROVIDED}: the adapter's Framework has no compile()")
    return compiled


def _floats(framework, values):
    import numpy as np

    return framework.from_numpy(np.asarray(values, dtype=np.float32), framework.device)


@capability("compiler")
class TestCompiler:
    """Ops made from the kit's kernels run inside the framework's compiler and give what
    they give eagerly: allocating, two results, two inputs, and a written argument."""

    def test_allocating_ops_match_eager(self, tensorplug_adapter, tensorplug_kernels):
        fw = tensorplug_adapter
        needs_ops(fw)  # "not provided" before "lives on a GPU"
        needs_host(fw)
        ops = kit_ops(tensorplug_kernels)

        def program(x):
            first, second = ops.pair(ops.add_one(x))
            return ops.add(first, second)

        x = _floats(fw, [0.5, -1.0, 2.0, 8.0])
        compiled_program = _compile(fw, program)
        eager = program(x)
        compiled = compiled_program(x)
        assert type(compiled) is type(eager)
        assert fw.to_numpy(compiled).tolist() == fw.to_numpy(eager).tolist() == [5.0, 2.0, 8.0, 20.0]

    def test_written_argument_matches_eager(self, tensorplug_adapter, tensorplug_kernels):
        # A framework with mutable tensors writes the argument; one with immutable arrays
        # returns the written value as a new array. Either is read back the same way.
        fw = tensorplug_adapter
        needs_ops(fw)  # "not provided" before "lives on a GPU"
        needs_host(fw)
        ops = kit_ops(tensorplug_kernels)

        def program(x):
            target = ops.add_one(x)
            written = ops.fill(target, 3.5)
            return ops.add(x, target if written is None else written)

        x = _floats(fw, [1.0, 2.0, 3.0])
        compiled_program = _compile(fw, program)
        eager = program(x)
        compiled = compiled_program(x)
        assert fw.to_numpy(compiled).tolist() == fw.to_numpy(eager).tolist() == [4.5, 5.5, 6.5]


__all__ = ["TestCompiler", "kit_ops"]
