"""The kernels of tests/support/grad_kernels.cc declared once per process as ops with their
backwards, in the namespace ``tpgrad`` (op names are process-wide), for tests/*/test_grad*.py:

- ``square(x)``: backward ``tpgrad::square_backward`` (an op declared with a backward of its
  own: second derivatives);
- ``sin_cos(x)``: two results, a kernel function as the backward (``tpgrad::sin_cos_backward``);
- ``exp(x)``: the backward reads the saved result (``saves=("result",)``);
- ``scale_by(x, w, alpha)``: differentiable in ``x`` only, a scalar saved;
- ``plain_square(x)``: no backward;
- ``short(x)``, ``int32_grad(x)``: backwards returning a gradient of the wrong shape, dtype;
- ``int32_grad_by_rule(x)``: the int32 gradient from a backward op whose own rule says int32;
- ``twice_into(x, out)``: writes ``out`` (no backward can be declared);
- ``cube(x)``: its backward takes ``(x, grad)``, saved value first (bound by name, issue 39);
- ``strict_cube(x)``: forward and backward need compact tensors and declare it
  (``contiguous=``); ``loose_cube(x)``, the same backward without the declaration;
- ``three_gradients(x, w, alpha)``, ``float64_gradient(x)``: backward ops whose kernels return
  three gradients for two, float64 for float32 (their own rules say otherwise).
"""

from __future__ import annotations

import functools
from pathlib import Path
from types import SimpleNamespace

import tensorplug
from tensorplug import backward, cpp, like

SOURCE = Path(__file__).with_name("grad_kernels.cc")


@functools.cache
def ops() -> SimpleNamespace:
    mod = tensorplug.load_module(cpp.build("grad_kernels", [SOURCE]))
    op = tensorplug.op
    square_backward = op("tpgrad::square_backward", mod.square_backward, returns=like("x"),
                         backward=backward(mod.square_backward_backward, saves=("grad", "x"),
                                           differentiable=("grad", "x")))
    return SimpleNamespace(
        module=mod,
        square=op("tpgrad::square", mod.square, returns=like("x"),
                  backward=backward(square_backward, saves=("x",), differentiable=("x",))),
        square_backward=square_backward,
        sin_cos=op("tpgrad::sin_cos", mod.sin_cos, returns=(like("x"), like("x")),
                   backward=backward(mod.sin_cos_backward, saves=("x",), differentiable=("x",),
                                     grads=("grad_sin", "grad_cos"))),
        exp=op("tpgrad::exp", mod.exp, returns=like("x"),
               backward=backward(op("tpgrad::exp_backward", mod.exp_backward, returns=like("y")),
                                 saves=("result",), differentiable=("x",))),
        scale_by=op("tpgrad::scale_by", mod.scale_by, returns=like("x"),
                    backward=backward(mod.scale_by_backward, saves=("x", "w", "alpha"), differentiable=("x",))),
        plain_square=op("tpgrad::plain_square", mod.square, returns=like("x")),
        short=op("tpgrad::short", mod.square, returns=like("x"),
                 backward=backward(mod.short_backward, saves=("x",), differentiable=("x",))),
        int32_grad=op("tpgrad::int32_grad", mod.square, returns=like("x"),
                      backward=backward(mod.int32_backward, saves=("x",), differentiable=("x",))),
        int32_grad_by_rule=op("tpgrad::int32_grad_by_rule", mod.square, returns=like("x"),
                              backward=backward(op("tpgrad::int32_backward_by_rule", mod.int32_backward,
                                                   returns=like("x", dtype="int32")),
                                                saves=("x",), differentiable=("x",))),
        twice_into=op("tpgrad::twice_into", mod.twice_into),
        # issue 39: cube_backward(x, grad), the saved value first: bound by name.
        cube=op("tpgrad::cube", mod.cube, returns=like("x"),
                backward=backward(mod.cube_backward, saves=("x",), differentiable=("x",))),
        # A forward and a backward that need compact tensors, declaring it once.
        strict_cube=op("tpgrad::strict_cube", mod.strict_cube, returns=like("x"), contiguous=("x",),
                       backward=backward(mod.strict_cube_backward, saves=("x",), differentiable=("x",),
                                         contiguous=("x", "grad"))),
        # The same kernels without the declaration: the backward gets what the framework gives.
        loose_cube=op("tpgrad::loose_cube", mod.cube, returns=like("x"),
                      backward=backward(mod.strict_cube_backward, saves=("x",), differentiable=("x",))),
        # Backward ops whose kernels return what their own rule does not declare.
        three_gradients=op("tpgrad::three_gradients", mod.scale_by, returns=like("x"),
                           backward=backward(op("tpgrad::three_gradients_backward", mod.three_gradients,
                                                returns=(like("x"), like("w"))),
                                             saves=("x", "w"), differentiable=("x", "w"))),
        float64_gradient=op("tpgrad::float64_gradient", mod.square, returns=like("x"),
                            backward=backward(op("tpgrad::float64_gradient_backward", mod.float64_gradient,
                                                 returns=like("x")),
                                              saves=("x",), differentiable=("x",))),
    )
