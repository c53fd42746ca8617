"""Gradients in torch from the op's declared backward (tensorplug.backward): autograd formulas
checked by torch's own tools (gradcheck, gradgradcheck, opcheck), through torch.compile's
aot_autograd (aot_eager and inductor), and the errors for gradients that cannot be had.
Kernels: tests/support/grad_kernels.cc."""

import re

import pytest

torch = pytest.importorskip("torch")



def _x(*shape, dtype=torch.float64, requires_grad=True):
    g = torch.Generator().manual_seed(0)
    return torch.randn(*shape, generator=g, dtype=dtype).requires_grad_(requires_grad)


def test_gradcheck_on_float64(grad_ops):
    x = _x(3, 4)
    w = _x(3, 4, requires_grad=False)
    assert torch.autograd.gradcheck(grad_ops.square, (x,))
    assert torch.autograd.gradcheck(grad_ops.sin_cos, (x,))  # two results, a kernel function as backward
    assert torch.autograd.gradcheck(grad_ops.exp, (x,))  # the backward reads the saved result
    assert torch.autograd.gradcheck(lambda x: grad_ops.scale_by(x, w, 1.5), (x,))  # a saved scalar
    # strided inputs: the kernels take any strides, the gradients come back like x
    assert torch.autograd.gradcheck(grad_ops.square, (_x(4, 3).t(),))


def test_gradgradcheck_where_the_backward_declares_a_backward(grad_ops):
    x = _x(2, 5)
    assert torch.autograd.gradgradcheck(grad_ops.square, (x,))
    (g,) = torch.autograd.grad(grad_ops.square(x).sum(), x, create_graph=True)
    (gg,) = torch.autograd.grad(g.sum(), x)
    torch.testing.assert_close(gg, torch.full_like(x, 2.0))


def test_gradient_values_equal_torchs_own_ops(grad_ops):
    x = _x(3, 4)
    w = _x(3, 4, requires_grad=False)
    cases = [(grad_ops.square, lambda x: x * x), (grad_ops.exp, torch.exp),
             (lambda x: grad_ops.sin_cos(x)[0] * 3 + grad_ops.sin_cos(x)[1], lambda x: torch.sin(x) * 3 + torch.cos(x)),
             (lambda x: grad_ops.scale_by(x, w, 0.5), lambda x: 0.5 * x * w)]
    for op, ref in cases:
        (got,) = torch.autograd.grad((op(x) ** 2).sum(), x)
        (want,) = torch.autograd.grad((ref(x) ** 2).sum(), x)
        torch.testing.assert_close(got, want)


def test_opcheck_with_inputs_that_require_grad(grad_ops):
    x = _x(3, 4)
    torch.library.opcheck(torch.ops.tpgrad.square.default, (x,))
    torch.library.opcheck(torch.ops.tpgrad.sin_cos.default, (x,))
    torch.library.opcheck(torch.ops.tpgrad.exp.default, (x,))
    torch.library.opcheck(torch.ops.tpgrad.scale_by.default, (x, _x(3, 4, requires_grad=False), 2.0))


def _loss(grad_ops):
    def loss(x, w):
        y = grad_ops.scale_by(grad_ops.square(grad_ops.exp(x)), w, 0.5)
        s, c = grad_ops.sin_cos(y)
        return (s * c).sum()
    return loss


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_backward_through_torch_compile_gives_eager_gradients(grad_ops, backend):
    loss = _loss(grad_ops)
    x, w = _x(3, 4, dtype=torch.float32), _x(3, 4, dtype=torch.float32, requires_grad=False)
    loss(x, w).backward()
    eager = x.grad.clone()
    x.grad = None
    torch._dynamo.reset()
    compiled = torch.compile(loss, backend=backend, fullgraph=True)
    compiled(x, w).backward()
    torch.testing.assert_close(x.grad, eager)
    assert torch._dynamo.explain(loss)(x, w).graph_break_count == 0


def test_compiled_backward_graph_calls_the_backward_ops(grad_ops):
    from torch._dynamo.backends.common import aot_autograd
    from functorch.compile import make_boxed_func

    graphs = {}

    def keep(name):
        def compiler(gm, example_inputs):
            graphs[name] = gm.code
            return make_boxed_func(gm)
        return compiler

    x, w = _x(3, 4, dtype=torch.float32), _x(3, 4, dtype=torch.float32, requires_grad=False)
    torch._dynamo.reset()
    compiled = torch.compile(_loss(grad_ops), backend=aot_autograd(fw_compiler=keep("forward"),
                                                              bw_compiler=keep("backward")), fullgraph=True)
    compiled(x, w).backward()
    for name in ("square_backward", "exp_backward", "scale_by_backward", "sin_cos_backward"):
        # .nograd: the overload a native Autograd kernel runs below autograd (test_torch_native.py).
        assert re.search(rf"torch\.ops\.tpgrad\.{name}\.(default|nograd)\(", graphs["backward"]), name
        assert name not in graphs["forward"]


def test_backward_through_an_op_without_one_names_it(grad_ops):
    y = grad_ops.plain_square(_x(3))
    assert y.requires_grad  # never a silent None gradient: the error comes at backward
    with pytest.raises(RuntimeError, match=r"^tpgrad::plain_square has no backward: declare one with "
                                           r"tensorplug\.op\('tpgrad::plain_square', \.\.\., "
                                           r"backward=tensorplug\.backward\("):
        y.sum().backward()
    # and the backward op of a first-order backward has none either
    x = _x(3)
    (g,) = torch.autograd.grad(grad_ops.exp(x).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match=r"^tpgrad::exp_backward has no backward"):
        g.sum().backward()


def test_no_grad_calls_need_no_backward(grad_ops):
    x = _x(3)
    with torch.no_grad():
        y = grad_ops.plain_square(x)
    assert not y.requires_grad
    torch.testing.assert_close(y, x.detach() ** 2)


def test_a_gradient_of_the_wrong_shape_names_the_op_and_the_input(grad_ops):
    # The derived backward op's own output rule (each gradient like its input) catches it
    # first, on every path, naming the backward op, the forward op and the input.
    with pytest.raises(ValueError, match=r"^op 'tpgrad::short_backward' returned float64\[11\] as result 0 \(the "
                                         r"gradient of 'x' for tpgrad::short\), but its shape rule declares "
                                         r"float64\[3, 4\]$"):
        grad_ops.short(_x(3, 4)).sum().backward()


def test_a_gradient_of_the_wrong_dtype_names_the_op_and_the_input(grad_ops):
    with pytest.raises(ValueError, match=r"^op 'tpgrad::int32_grad_backward' returned int32\[3\] as result 0 \(the "
                                         r"gradient of 'x' for tpgrad::int32_grad\), but its shape rule declares "
                                         r"float64\[3\]$"):
        grad_ops.int32_grad(_x(3)).sum().backward()


def test_a_backward_op_true_to_its_own_rule_still_owes_each_input_its_dtype(grad_ops):
    # The backward op declares int32 and returns it, so its own check passes; the gradient
    # is then checked against its input, as torch would otherwise cast it silently.
    with pytest.raises(ValueError, match=r"^tpgrad::int32_grad_by_rule: the backward tpgrad::int32_backward_by_rule "
                                         r"returned a gradient for 'x' of shape \(3,\) and dtype int32; expected "
                                         r"shape \(3,\) and dtype float64, those of 'x'$"):
        grad_ops.int32_grad_by_rule(_x(3)).sum().backward()


def test_a_gradient_of_a_parameter_not_declared_differentiable_is_an_error(grad_ops):
    x, w = _x(3), _x(3)
    with pytest.raises(RuntimeError, match=r"^tpgrad::scale_by: parameter 'w' is not differentiable \(the op's "
                                           r"backward declares differentiable=\('x',\)\)"):
        grad_ops.scale_by(x, w, 2.0).sum().backward()
    # w requiring no grad: x's gradient alone
    (gx,) = torch.autograd.grad(grad_ops.scale_by(x, w.detach(), 2.0).sum(), x)
    torch.testing.assert_close(gx, 2 * w.detach())


def test_an_op_that_writes_arguments_refuses_grad_mode_inputs_that_require_grad(grad_ops):
    x, out = _x(3), torch.zeros(3, dtype=torch.float64)
    with pytest.raises(RuntimeError, match=r"^tpgrad::twice_into writes 'out' in place and has no gradient"):
        grad_ops.twice_into(x, out)
    assert out.tolist() == [0.0, 0.0, 0.0]  # refused before the kernel ran
    with torch.no_grad():
        grad_ops.twice_into(x, out)
    torch.testing.assert_close(out, 2 * x.detach())
    grad_ops.twice_into(x.detach(), out)  # no tensor requires grad: runs in grad mode too


# ---- issue 39: a backward bound by name; layouts declared once; the backward's results checked ----

def test_a_backward_taking_the_saved_value_first_gets_the_right_gradient(grad_ops):
    # cube_backward(x, grad) with saves=("x",): bound by name. By position (the rule before
    # issue 39) it received (grad, x) and gave 3 grad^2 x = [3, 6, 9].
    for loss in (lambda x: grad_ops.cube(x).sum(),
                 torch.compile(lambda x: grad_ops.cube(x).sum(), backend="aot_eager", fullgraph=True)):
        x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
        loss(x).backward()
        assert x.grad.tolist() == [3.0, 12.0, 27.0]
    x = _x(3, 4)
    (got,) = torch.autograd.grad((grad_ops.cube(x) * x).sum(), x)
    (want,) = torch.autograd.grad((x ** 3 * x).sum(), x)
    torch.testing.assert_close(got, want)


def test_torch_hands_a_backward_an_expanded_gradient_unless_it_declares_contiguous(grad_ops):
    # The same kernels; only loose_cube leaves out contiguous=: .sum().backward() gives its
    # backward torch's expanded gradient (stride 0), which the kernel refuses.
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    with pytest.raises(ValueError, match=r"strict_cube_backward: grad must be contiguous, got strides \[0\]"):
        grad_ops.loose_cube(x).sum().backward()
    grad_ops.strict_cube(x).sum().backward()
    assert x.grad.tolist() == [3.0, 12.0, 27.0]


def _layout(base, how):
    """A view of the float64 tensor ``base`` (2-d) with the layout ``how``."""
    if how == "compact":
        return base
    if how == "transposed":
        return base.t().contiguous().t()
    if how == "strided":
        wide = torch.zeros(base.shape[0], base.shape[1] * 2, dtype=base.dtype)
        wide[:, ::2] = base
        return wide[:, ::2]
    assert how == "expanded"
    return base[:1].expand(base.shape)


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
@pytest.mark.parametrize("how", ["transposed", "strided", "expanded"])
def test_a_declared_layout_contract_holds_on_every_torch_path(grad_ops, backend, how):
    base = _x(3, 4, requires_grad=False)
    x = _layout(base, how).detach().requires_grad_(how != "expanded")
    assert not x.is_contiguous()

    def loss(x):
        return grad_ops.strict_cube(x).sum()  # the backward gets an expanded gradient

    fn = loss if backend == "eager" else torch.compile(loss, backend=backend, fullgraph=True)
    if how == "expanded":  # a leaf cannot be expanded and require grad: no gradient, the forward only
        torch.testing.assert_close(fn(x), (x ** 3).sum())
        return
    fn(x).backward()
    torch.testing.assert_close(x.grad, 3 * x.detach() ** 2)


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_a_backward_whose_results_break_its_rule_is_refused(grad_ops, backend):
    # The backward ops' kernels return three gradients for two, float64 for float32; their
    # rules say two, float32: torch checks every kernel's results against its rule (the native
    # kernel's RuntimeError, the Python kernel's ValueError: the same words), eagerly and in
    # the backward graph torch.compile traces.
    def run(loss, *args):
        fn = loss if backend == "eager" else torch.compile(loss, backend=backend, fullgraph=True)
        fn(*args).backward()

    x, w = torch.ones(3, requires_grad=True), torch.ones(3, requires_grad=True)
    with pytest.raises((ValueError, RuntimeError), match=r"op 'tpgrad::three_gradients_backward' returned 3 "
                                                         r"tensor\(s\), but its (shape|output) rule declares 2"):
        run(lambda x, w: grad_ops.three_gradients(x, w, 2.0).sum(), x, w)
    with pytest.raises((ValueError, RuntimeError), match=r"op 'tpgrad::float64_gradient_backward' returned "
                                                         r"float64\[3\]( on cpu:0)? as result 0, but its (shape|output) rule "
                                                         r"declares float32\[3\]"):
        run(lambda x: grad_ops.float64_gradient(x).sum(), x)


def test_an_op_declaring_contiguous_keeps_the_python_kernel(grad_ops):
    # The native kernel passes torch's tensors on as they are: an op that needs compact ones
    # keeps the Python kernel, which copies (docs/decisions.md has the cost).
    from tensorplug_adapters.torch import native as torch_native

    for op in (grad_ops.strict_cube, grad_ops.strict_cube.backward.function):
        assert torch_native.reason(op) in (
            f"it declares contiguous={op.contiguous!r}, and the native kernel cannot make compact copies",
            "it is a derived backward, whose gradients the Python kernel checks naming their inputs")
    assert torch_native.reason(grad_ops.strict_cube) == ("it declares contiguous=('x',), and the native kernel cannot make "
                                                    "compact copies")
    assert torch_native.reason(grad_ops.loose_cube) is None  # the same kernel, no declaration: native
