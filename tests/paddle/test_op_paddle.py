"""tensorplug ops inside paddle's compiler (issue 43): each op is one node of the static
(PIR) program ``paddle.jit.to_static`` builds, in SOT mode from the first call of a fresh
process and with ``full_graph=True``; written tensors are written; the output rule gives
paddle its shapes and dtypes and is checked on the kernel's results; programs saved by
``paddle.jit.save`` run in a fresh process that loads the kernel library and declares
nothing. Gradients: tests/paddle/test_grad_paddle.py."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

paddle = pytest.importorskip("paddle")

import tensorplug  # noqa: E402
from tensorplug_adapters.paddle import static as paddle_static  # noqa: E402
from tensorplug_adapters.testing.paddle import paddle_error_text  # noqa: E402

SUPPORT = Path(__file__).parents[1] / "support"


@pytest.fixture(scope="module")
def ops(ops):
    """The shared ops (tests/conftest.py), once paddle's operator for them is built."""
    if not paddle_static.register():
        pytest.skip(f"paddle's operator could not be built: {paddle_static.error()}")
    return ops


def _program_ops(static_function, *args):
    """The operator names of the program ``static_function`` builds (full_graph)."""
    program = static_function.get_concrete_program(*args)[0]
    return [op.name() for op in program.main_program.global_block().ops]


def _run(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SUPPORT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          timeout=600)


@pytest.mark.parametrize("first", ["paddle imported first", "op declared first"])
def test_sot_from_the_first_call_of_a_fresh_process(ops, first):
    # Before issue 43 this failed: SOT simulated the core's first adapter lookup. An op
    # declared before `import paddle` is made ready right after it (after_import).
    start = ("import paddle, op_kernels; ops = op_kernels.ops()" if first.startswith("paddle") else
             "import sys, op_kernels; ops = op_kernels.ops(); assert 'paddle' not in sys.modules; import paddle")
    done = _run(f"""
        {start}
        def f(x):
            return ops.scale(x, 3.0, None) + 1
        print(paddle.jit.to_static(f)(paddle.to_tensor([1.0, 2.0])).numpy().tolist())
    """)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[4.0, 7.0]"


def test_full_graph_makes_the_op_a_node_of_the_program(ops):
    def f(x):
        return ops.scale(x, 2.0, None) * 3

    static = paddle.jit.to_static(f, full_graph=True)
    x = paddle.to_tensor([[1.0, 2.0], [3.0, 4.0]])
    assert static(x).numpy().tolist() == [[6.0, 12.0], [18.0, 24.0]]
    names = _program_ops(static, x)
    assert "custom_op.tensorplug_op1_1" in names, names


def test_shapes_and_dtypes_come_from_the_output_rule(ops):
    seen = {}

    def f(x):
        y = ops.row_sum(x)  # Output(shape=("x.shape[0]",), dtype="x")
        seen["shape"], seen["dtype"] = list(y.shape), y.dtype
        return y

    static = paddle.jit.to_static(f, full_graph=True)
    x = paddle.to_tensor(np.arange(12, dtype=np.float64).reshape(3, 4))
    assert static(x).numpy().tolist() == [6.0, 22.0, 38.0]
    assert seen == {"shape": [3], "dtype": paddle.float64}


def test_a_dynamic_dimension_stays_dynamic(ops):
    def f(x):
        return ops.scale(x, 2.0, None)

    static = paddle.jit.to_static(f, input_spec=[paddle.static.InputSpec([None, 2], "float32")], full_graph=True)
    for rows in (1, 3):
        x = paddle.ones([rows, 2])
        assert static(x).numpy().tolist() == [[2.0, 2.0]] * rows


@pytest.mark.parametrize("full_graph", [False, True], ids=["sot", "full_graph"])
def test_any_input_layout(ops, full_graph):
    base = paddle.to_tensor(np.arange(6, dtype=np.float32).reshape(2, 3))

    def f(x):
        return ops.scale(x.T, 1.0, None) + ops.scale(x[:, ::2], 10.0, None).sum()

    got = paddle.jit.to_static(f, full_graph=full_graph)(base)
    want = base.numpy().T + 10 * base.numpy()[:, ::2].sum()
    np.testing.assert_allclose(got.numpy(), want)


@pytest.mark.parametrize("full_graph", [False, True], ids=["sot", "full_graph"])
def test_two_results_optional_tensor_and_scalars(ops, full_graph):
    def f(x, bias):
        plus, twice = ops.plus_and_twice(x)
        return ops.scale(plus, 2.0, bias), twice

    x, bias = paddle.to_tensor([1.0, 2.0]), paddle.to_tensor([0.5, 0.5])
    first, second = paddle.jit.to_static(f, full_graph=full_graph)(x, bias)
    want_first, want_second = f(x, bias)  # eager: the kernel functions
    assert first.numpy().tolist() == want_first.numpy().tolist()
    assert second.numpy().tolist() == want_second.numpy().tolist() == [2.0, 4.0]


@pytest.mark.parametrize("full_graph", [False, True], ids=["sot", "full_graph"])
def test_an_op_that_writes_writes_the_callers_tensor(ops, full_graph):
    def f(x, out):
        ops.axpy(x, x, out, 2.0)  # out = 2 x + x
        return out * 1

    out = paddle.zeros([3])
    got = paddle.jit.to_static(f, full_graph=full_graph)(paddle.to_tensor([1.0, 2.0, 3.0]), out)
    assert got.numpy().tolist() == [3.0, 6.0, 9.0]
    assert out.numpy().tolist() == [3.0, 6.0, 9.0]


def test_a_result_that_breaks_the_output_rule_is_refused_naming_the_op(ops):
    wrong = tensorplug.get_op("tppaddle::wrong_rows") or tensorplug.op(
        "tppaddle::wrong_rows", ops.module.row_sum, returns=tensorplug.Output(shape=(5,), dtype="x"))

    def f(x):
        return wrong(x)

    x = paddle.ones([3, 2])
    with pytest.raises(ValueError) as refused:
        paddle.jit.to_static(f, full_graph=True)(x)
    assert paddle_error_text(str(refused.value)) == (
        "op 'tppaddle::wrong_rows' returned float32[3] on cpu:0 as result 0, but its output rule declares "
        "float32[5] on cpu:0")  # the call plan's check, run by the operator's native kernel


def test_a_node_runs_the_call_plan_and_a_shape_function_runs_the_callback(ops, monkeypatch):
    # Issue 43's speed item: an op with a compiled output rule runs its call plan in the
    # operator's kernel (op.cc), with no Python; a rule that is a Python function keeps the
    # callback into Python, which runs _forward.
    calls = []
    forward = paddle_static._forward
    monkeypatch.setattr(paddle_static, "_forward", lambda *args: calls.append(1) or forward(*args))

    def planned(x):
        return ops.scale(ops.scale(x, 2.0, None), 0.5, x)

    static = paddle.jit.to_static(planned, full_graph=True)
    for _ in range(2):
        assert static(paddle.to_tensor([1.0, 2.0])).numpy().tolist() == [2.0, 4.0]
    assert calls == []

    def shaped(x):
        return ops.pad(x, 1, 2, 9.0)  # returns=_pad_shape, a Python function

    got = paddle.jit.to_static(shaped, full_graph=True)(paddle.to_tensor([1.0, 2.0]))
    assert got.numpy().tolist() == [9.0, 1.0, 2.0, 9.0, 9.0]
    assert calls


def test_eager_calls_without_a_gradient_run_the_kernel_function(ops):
    x = paddle.to_tensor([1.0, 2.0])
    assert ops.scale(x, 2.0, None).numpy().tolist() == [2.0, 4.0]
    assert ops.scale._impls[paddle.Tensor] is not None  # paddle's adapter answers for its tensors


def test_saved_program_runs_in_a_fresh_process_that_declares_nothing(ops, tmp_path):
    def f(x):
        return ops.scale(x, 3.0, None) + 1

    static = paddle.jit.to_static(f, input_spec=[paddle.static.InputSpec([None, 2], "float32")], full_graph=True)
    paddle.jit.save(static, str(tmp_path / "model"))
    code = f"""
        import paddle, tensorplug
        from tensorplug_adapters.paddle import static as paddle_static
        from tensorplug_adapters.testing.paddle import paddle_error_text
        assert paddle_static.register(), paddle_static.error()
        program = paddle.jit.load({str(tmp_path / "model")!r})
        x = paddle.to_tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
        try:
            program(x)
        except Exception as e:
            print("REFUSED", type(e).__name__, paddle_error_text(str(e)).replace(chr(10), " "))
        tensorplug.load_module({ops.module.path!r})
        print(program(x).numpy().tolist())
        print(tensorplug.get_op("tptest::scale"))
    """
    done = _run(code)
    assert done.returncode == 0, done.stderr[-3000:]
    refused, result, declared = done.stdout.strip().splitlines()[-3:]
    assert refused == (f"REFUSED RuntimeError a paddle program calls the tensorplug op 'tptest::scale', whose kernel "
                       f"'scale' lives in {ops.module.path!r}, which this process has not loaded: load it first "
                       f"(tensorplug.load_module({ops.module.path!r})), or declare the op; a program file does not "
                       "load libraries by itself"), refused
    assert result == "[[4.0, 7.0], [10.0, 13.0], [16.0, 19.0]]"
    assert declared == "None"


def test_writing_a_view_inside_full_graph_is_refused(ops):
    # paddle's to_static cannot write the result back into a view: it refuses the program,
    # naming the op's line; never a silently unwritten tensor.
    def f(x, base):
        out = base[:, 1]  # a view
        ops.axpy(x, x, out, 1.0)
        return out * 1

    with pytest.raises(ValueError) as refused:
        paddle.jit.to_static(f, full_graph=True)(paddle.ones([2]), paddle.zeros([2, 2]))
    assert "ops.axpy(x, x, out, 1.0)" in str(refused.value)
    assert "output variable is a viewed Tensor" in str(refused.value)
