"""Written parameters declared in C++ (issue 11 item 1) and views that name their argument
(issue 12 item 8): TensorView reads (const pointers), MutableView writes (kind "mview"), a
read-only tensor is refused for a written parameter before the call, and the accessors'
errors say which argument they concern."""

import inspect

import pytest

import tensorplug
from tensorplug import cpp

np = pytest.importorskip("numpy")

SOURCE = r"""
#include <optional>
#include <vector>
namespace tp = tensorplug;

// out = alpha * x + y (float32, contiguous, CPU).
void Axpy(tp::TensorView x, tp::TensorView y, tp::MutableView out, double alpha) {
  TENSORPLUG_CHECK(x.numel() == y.numel() && x.numel() == out.numel(), ValueError) << "axpy: sizes differ";
  const float* px = x.data_ptr<float>();
  const float* py = y.data_ptr<float>();
  float* po = out.data_ptr<float>();  // writable: out is a MutableView
  for (int64_t i = 0; i < x.numel(); ++i) po[i] = static_cast<float>(alpha) * px[i] + py[i];
}
// out[...] = value when out is given; returns whether it was.
bool MaybeFill(std::optional<tp::MutableView> out, double value) {
  if (!out) return false;
  float* p = out->mutable_data_ptr<float>();
  for (int64_t i = 0; i < out->numel(); ++i) p[i] = static_cast<float>(value);
  return true;
}
// xs[j][...] = j.
void Stamp(tp::MutableViewList xs) {
  for (tp::MutableView x : xs) {
    float* p = x.mutable_data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) p[i] = static_cast<float>(x.arg().item);
  }
}
double First(tp::TensorView x) { return x.data_ptr<float>()[0]; }
double FirstWritten(tp::MutableView out) { return out.data_ptr<float>()[0]; }
int64_t Extent(tp::TensorView x, int64_t dim) { return x.size(dim); }
double FirstOfItems(tp::TensorViewList xs) {
  double total = 0;
  for (tp::TensorView x : xs) total += x.data_ptr<float>()[0];
  return total;
}
double Total(tp::TensorView x) {
  return TENSORPLUG_DISPATCH_FLOATING_TYPES(x, "total", [&] {
    double sum = 0;
    const scalar_t* p = x.data_ptr<scalar_t>();
    for (int64_t i = 0; i < x.numel(); ++i) sum += p[i];
    return sum;
  });
}
void CheckMatrix(tp::TensorView x) {
  TENSORPLUG_CHECK(x.dim() == 2, ValueError) << x.arg() << "expected a matrix, got " << x.dim() << " dimensions";
}
// An owning parameter stays writable; its read-only flag is checked at run time, unnamed.
void WriteOwned(tp::Tensor t) { t.mutable_data_ptr<float>()[0] = 1; }
// A C++ caller passing a read-only view for a written parameter of another function.
void ForwardReadOnly(tp::TensorView x) {
  tp::Function inner = tp::Function::FromTyped([](tp::MutableView out) { out.mutable_data_ptr<float>()[0] = 1; },
                                               "inner", {"out"});
  inner(x);
}
"""
FUNCTIONS = {"Axpy": ["x", "y", "out", "alpha"], "MaybeFill": ["out", "value"], "Stamp": ["xs"],
             "First": ["x"], "FirstWritten": ["out"], "Extent": ["x", "dim"], "FirstOfItems": ["xs"],
             "Total": ["x"], "CheckMatrix": ["x"], "WriteOwned": ["t"], "ForwardReadOnly": ["x"]}


@pytest.fixture(scope="module")
def k():
    return cpp.load_inline("mview_kernels", SOURCE, functions=list(FUNCTIONS))


def read_only_numpy(values):
    a = np.array(values, dtype=np.float32)
    a.flags.writeable = False
    return a


def refused(fname, index, pname, framework, item=None):
    where = f"argument {index} '{pname}'" + (f" item {item}" if item is not None else "")
    return (f"{fname}() {where}: expected a writable tensor (the kernel writes it), "
            f"got a read-only {framework} array")


# ------------------------------------------------------------------------ the C++ side ----
def compile_error(tmp_path, body):
    with pytest.raises(cpp.BuildError) as info:
        cpp.build("mview_bad", [_write(tmp_path, "bad.cc", "#include <tensorplug/tensorplug.h>\n"
                                       "namespace tp = tensorplug;\n" + body)], build_directory=str(tmp_path / "build"))
    return str(info.value)


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_writing_through_a_tensor_view_does_not_compile(tmp_path):
    message = compile_error(tmp_path, "void Bad(tp::TensorView x) { float* p = x.data_ptr<float>(); p[0] = 1; }\n"
                                      'TENSORPLUG_EXPORT(bad, Bad, "x");\n')
    assert "const float*" in message and "float*" in message


def test_an_untyped_write_through_a_tensor_view_does_not_compile(tmp_path):
    message = compile_error(tmp_path, "void Bad(tp::TensorView x) { *static_cast<float*>(x.data_ptr()) = 1; }\n")
    assert "const void*" in message


def test_mutable_data_ptr_of_a_tensor_view_says_what_to_declare(tmp_path):
    message = compile_error(tmp_path, "void Bad(tp::TensorView x) { x.mutable_data_ptr<float>()[0] = 1; }\n")
    assert "a TensorView is read-only: declare the parameter tensorplug::MutableView to write it" in message


def test_signature_string_and_inspect_signature(k):
    assert k.Axpy.signature_text == "x:view;y:view;out:mview;alpha:float->void"
    assert k.MaybeFill.signature_text == "out:?mview;value:float->bool"
    assert k.Stamp.signature_text == "xs:mviews->void"
    assert str(inspect.signature(k.Axpy)) == "(x: 'Tensor', y: 'Tensor', out: 'Tensor', alpha: 'float') -> 'None'"
    assert str(inspect.signature(k.MaybeFill)) == "(out: 'Optional[Tensor]', value: 'float') -> 'bool'"
    assert str(inspect.signature(k.Stamp)) == "(xs: 'Sequence[Tensor]') -> 'None'"


# ------------------------------------------------------------------ writable tensors ----
def test_writable_numpy(k):
    out = np.zeros(3, np.float32)
    assert k.Axpy(np.arange(3, dtype=np.float32), np.ones(3, np.float32), out, 2.0) is None
    assert out.tolist() == [1.0, 3.0, 5.0]


def test_writable_torch(k):
    torch = pytest.importorskip("torch")
    out = torch.zeros(3)
    k.Axpy(torch.arange(3.0), torch.ones(3), out, 2.0)
    assert out.tolist() == [1.0, 3.0, 5.0]
    assert k.MaybeFill(out, 4.0) is True and out.tolist() == [4.0, 4.0, 4.0]


def test_writable_paddle(k):
    paddle = pytest.importorskip("paddle")
    out = paddle.zeros([3], dtype="float32")
    k.Axpy(paddle.arange(3, dtype="float32"), paddle.ones([3], dtype="float32"), out, 2.0)
    assert out.numpy().tolist() == [1.0, 3.0, 5.0]


def test_jax_arrays_are_read_as_views(k):
    jnp = pytest.importorskip("jax.numpy")
    out = np.zeros(3, np.float32)
    k.Axpy(jnp.arange(3, dtype=jnp.float32), jnp.ones(3, dtype=jnp.float32), out, 2.0)  # read: allowed
    assert out.tolist() == [1.0, 3.0, 5.0]


def test_optional_written_parameter_accepts_none(k):
    assert k.MaybeFill(None, 1.0) is False
    out = np.zeros(2, np.float32)
    assert k.MaybeFill(out, 3.0) is True and out.tolist() == [3.0, 3.0]


# --------------------------------------------------------------- read-only refusals ----
def test_read_only_numpy_is_refused_before_the_call(k):
    out = read_only_numpy([7, 7, 7])
    with pytest.raises(ValueError) as info:
        k.Axpy(np.zeros(3, np.float32), np.zeros(3, np.float32), out, 1.0)
    assert str(info.value) == refused("Axpy", 3, "out", "numpy")
    assert out.tolist() == [7.0, 7.0, 7.0]
    with pytest.raises(ValueError) as info:
        k.MaybeFill(out, 1.0)
    assert str(info.value) == refused("MaybeFill", 1, "out", "numpy")
    assert out.tolist() == [7.0, 7.0, 7.0]


def test_jax_array_is_refused_before_the_call(k):
    jnp = pytest.importorskip("jax.numpy")
    out = jnp.zeros(3, dtype=jnp.float32)
    with pytest.raises(ValueError) as info:
        k.Axpy(np.zeros(3, np.float32), np.zeros(3, np.float32), out, 1.0)
    assert str(info.value) == refused("Axpy", 3, "out", "jax")
    assert out.tolist() == [0.0, 0.0, 0.0]


def test_keyword_argument_refusal_names_the_parameter(k):
    with pytest.raises(ValueError) as info:
        k.Axpy(np.zeros(3, np.float32), np.zeros(3, np.float32), alpha=1.0, out=read_only_numpy([0, 0, 0]))
    assert str(info.value) == refused("Axpy", 3, "out", "numpy")


def test_a_str_for_a_written_parameter_is_a_type_error(k):
    with pytest.raises(TypeError, match=r"^Axpy\(\) argument 3 'out': expected a tensor, got str$"):
        k.Axpy(np.zeros(3, np.float32), np.zeros(3, np.float32), "out", 1.0)


def test_read_only_items_of_a_written_list_are_refused(k):
    jnp = pytest.importorskip("jax.numpy")
    a, b = np.zeros(2, np.float32), np.zeros(1, np.float32)
    with pytest.raises(ValueError) as info:
        k.Stamp([a, jnp.zeros(2, dtype=jnp.float32)])
    assert str(info.value) == refused("Stamp", 1, "xs", "jax", item=1)
    with pytest.raises(ValueError) as info:
        k.Stamp((a, read_only_numpy([5])))
    assert str(info.value) == refused("Stamp", 1, "xs", "numpy", item=1)
    assert a.tolist() == [0.0, 0.0]  # refused before the call: nothing written
    k.Stamp([a, b])
    assert a.tolist() == [0.0, 0.0] and b.tolist() == [1.0]


def test_tensorplug_tensor_of_read_only_data_is_refused(k):
    t = tensorplug.from_dlpack(read_only_numpy([1, 2]))
    with pytest.raises(ValueError) as info:
        k.FirstWritten(t)
    assert str(info.value) == refused("FirstWritten", 1, "out", "tensorplug")


def test_a_cpp_caller_passing_a_read_only_view_is_refused_by_the_callee(k):
    with pytest.raises(ValueError) as info:
        k.ForwardReadOnly(read_only_numpy([0]))
    assert str(info.value) == ("inner() argument 1 'out': expected a writable tensor (the kernel writes it), "
                               "got a read-only tensor")
    k.ForwardReadOnly(np.zeros(1, np.float32))  # writable: passes through


def test_owning_parameter_checks_read_only_at_run_time(k):
    frozen = read_only_numpy([0, 0])
    with pytest.raises(ValueError, match=r"^tensor is read-only$"):
        k.WriteOwned(frozen)
    assert frozen.tolist() == [0, 0]
    jnp = pytest.importorskip("jax.numpy")
    with pytest.raises(ValueError, match=r"^tensor is read-only$"):
        k.WriteOwned(jnp.zeros(2, dtype=jnp.float32))
    t = np.zeros(2, np.float32)
    k.WriteOwned(t)
    assert t.tolist() == [1.0, 0.0]


# ------------------------------------------------------------ errors name the argument ----
def test_data_ptr_dtype_mismatch_names_the_argument(k):
    with pytest.raises(TypeError) as info:
        k.First(np.zeros(2, np.float64))
    assert str(info.value) == "argument 'x': data_ptr<float32>() called on a tensor of dtype float64"
    with pytest.raises(TypeError) as info:
        k.FirstWritten(np.zeros(2, np.int32))
    assert str(info.value) == "argument 'out': data_ptr<float32>() called on a tensor of dtype int32"
    with pytest.raises(TypeError) as info:
        k.MaybeFill(np.zeros(2, np.float64), 1.0)
    assert str(info.value) == "argument 'out': mutable_data_ptr<float32>() called on a tensor of dtype float64"


def test_list_items_are_named_with_their_index(k):
    assert k.FirstOfItems([np.ones(1, np.float32), np.full(1, 2, np.float32)]) == 3.0
    with pytest.raises(TypeError) as info:
        k.FirstOfItems([np.ones(1, np.float32), np.ones(1, np.float32), np.ones(1, np.int64)])
    assert str(info.value) == "argument 'xs' item 2: data_ptr<float32>() called on a tensor of dtype int64"
    with pytest.raises(TypeError) as info:
        k.Stamp([np.zeros(1, np.float32), np.zeros(1, np.float16)])
    assert str(info.value) == "argument 'xs' item 1: mutable_data_ptr<float32>() called on a tensor of dtype float16"


def test_unsupported_dtype_of_a_dispatch_names_the_argument(k):
    assert k.Total(np.arange(4, dtype=np.float64)) == 6.0
    with pytest.raises(TypeError) as info:
        k.Total(np.arange(4, dtype=np.int32))
    assert str(info.value) == "argument 'x': unsupported dtype int32 for total"


def test_out_of_range_dimension_names_the_argument(k):
    assert k.Extent(np.zeros((2, 5)), -1) == 5
    with pytest.raises(IndexError) as info:
        k.Extent(np.zeros(3), 4)
    assert str(info.value) == "argument 'x': dimension 4 is out of range for a tensor with 1 dimension"


def test_kernels_name_the_argument_in_their_own_checks(k):
    k.CheckMatrix(np.zeros((2, 2)))
    with pytest.raises(ValueError) as info:
        k.CheckMatrix(np.zeros(3))
    assert str(info.value) == "argument 'x': expected a matrix, got 1 dimensions (check failed: x.dim() == 2)"


# ----------------------------------------------------------------------------- ops ----
def test_op_reads_written_parameters_from_the_signature(k):
    op = tensorplug.op("tptest_mview::axpy", k.Axpy)
    assert op.written == ("out",)
    assert [p.written for p in op.params] == [False, False, True, False]
    assert op.__doc__.endswith("; it writes out in place.")
    out = np.zeros(2, np.float32)
    op(np.ones(2, np.float32), np.ones(2, np.float32), out, 3.0)
    assert out.tolist() == [4.0, 4.0]
    same = tensorplug.op("tptest_mview::axpy_same", k.Axpy, writes=("out",))  # redundant but consistent
    assert same.written == ("out",)


def test_op_writes_that_disagree_with_the_signature_are_refused(k):
    for writes in (("x",), ("out", "x"), "y"):
        with pytest.raises(ValueError) as info:
            tensorplug.op("tptest_mview::bad", k.Axpy, writes=writes)
        shown = (writes,) if isinstance(writes, str) else writes
        assert str(info.value) == (f"tensorplug.op('tptest_mview::bad') argument 'writes': {shown!r} does not match "
                                   "the parameters Axpy declares written (kind mview): ('out',); leave writes= out, "
                                   "the signature says it")
    assert tensorplug.get_op("tptest_mview::bad") is None


def test_op_writes_names_views_of_kernels_that_cannot_declare_them():
    # A tvm-ffi compatibility kernel: its TensorView is a "view" with writable data.
    source = r"""
    #include <tvm/ffi/function.h>
    #include <tvm/ffi/container/tensor.h>
    void AddOne(tvm::ffi::TensorView x, tvm::ffi::TensorView y) {
      for (int64_t i = 0; i < x.numel(); ++i)
        static_cast<float*>(y.data_ptr())[i] = static_cast<const float*>(x.data_ptr())[i] + 1;
    }
    TVM_FFI_DLL_EXPORT_TYPED_FUNC(add_one, AddOne);
    """
    mod = cpp.load_inline("mview_compat_view", source, compat="tvm_ffi")
    assert mod.add_one.signature_text == "arg0:view;arg1:view->void"
    op = tensorplug.op("tptest_mview::compat_add_one", mod.add_one, writes="arg1")
    assert op.written == ("arg1",)
    y = np.zeros(2, np.float32)
    op(np.ones(2, np.float32), y)
    assert y.tolist() == [2.0, 2.0]


def test_compat_kernel_opts_in_with_mutable_view_outputs():
    source = r"""
    #include <tvm/ffi/function.h>
    #include <tvm/ffi/container/tensor.h>
    void AddOne(tvm::ffi::TensorView x, tensorplug::MutableView y) {
      float* out = y.mutable_data_ptr<float>();
      for (int64_t i = 0; i < x.numel(); ++i) out[i] = static_cast<const float*>(x.data_ptr())[i] + 1;
    }
    TVM_FFI_DLL_EXPORT_TYPED_FUNC(add_one, AddOne);
    """
    mod = cpp.load_inline("mview_compat_opt_in", source, compat="tvm_ffi")
    assert mod.add_one.signature_text == "arg0:view;arg1:mview->void"
    y = np.zeros(2, np.float32)
    mod.add_one(np.ones(2, np.float32), y)
    assert y.tolist() == [2.0, 2.0]
    with pytest.raises(ValueError) as info:
        mod.add_one(np.ones(2, np.float32), read_only_numpy([0, 0]))
    assert str(info.value) == refused("add_one", 2, "arg1", "numpy")
