"""The curated mutations of the mutation check (tests/mutation/run.py).

Each is a bug a test must catch: a file, an exact snippet occurring there once, what
replaces it, and the tests that must fail (a pytest selection, kept small so the check
stays fast). When the code moves, update the file and snippet here: a snippet that is not
found stops the check with an error. The first five are the bugs of issue 15 that the suite
once missed.
"""

from __future__ import annotations

from typing import NamedTuple


class Mutation(NamedTuple):
    name: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]
    why: str


ARGUMENTS = "csrc/python/arguments.cc"  # argument conversion: labels, handles, the converter table
TENSOR_ARGUMENTS = "csrc/python/tensor_arguments.cc"  # tensor arguments, the primary tensor, written ones
CALL_ENV = "csrc/python/call_env.h"     # what a call sets and restores (stream, allocator, output)
ERRORS = "csrc/python/errors.cc"        # error kinds to Python exceptions
VALUES = "csrc/python/values.cc"        # results to Python (output conversion)
DEVICE_RULES = "tests/test_device_rules.py"
EDGES = "tests/test_contract_edges.py"  # the tests written for issue 22's survivors


def kit(selection: str) -> tuple[str, ...]:
    """The conformance kit, as the suite runs it, restricted to ``selection`` (-k)."""
    return ("tests/test_conformance.py", "-k", selection)


MUTATIONS = [
    # ---- the five bugs issue 15 found unguarded ----------------------------------------
    Mutation("primary-first-tensor", TENSOR_ARGUMENTS,
             "if (frame.primary < 0 || (frame.primary_device.device_type == kDLCPU && view->device.device_type != kDLCPU)) {",
             "if (frame.primary < 0) {",
             (DEVICE_RULES,), "the first tensor is primary even when a later one is on a GPU"),
    Mutation("stream-not-restored-on-error", CALL_ENV,
             "if (stream_set_) TPEnvSetStream(",
             "if (stream_set_ && !TPErrorGet(nullptr, nullptr)) TPEnvSetStream(",
             (DEVICE_RULES, "-k", "restores"), "a failing call leaves its stream current"),
    Mutation("negative-strides-refused-everywhere", VALUES,
             "if (!output->negative_strides) {", "if (true) {",
             kit("TestLayouts and numpy"), "every framework refuses negative-stride results"),
    Mutation("alloc-with-primary-framework", CALL_ENV,
             "binding_.Bind(ts, output_);",
             "binding_.Bind(ts, primary);",
             (DEVICE_RULES, "-k", "output_framework"), "FromEnvAlloc ignores output_framework"),
    Mutation("outermost-output-framework-wins", "core/tensorplug/_context.py",
             "return (streams, self._table._c_table)", "return (streams, output or self._table._c_table)",
             (DEVICE_RULES, "-k", "innermost"), "nested output_framework: the outermost wins"),
    # ---- streams --------------------------------------------------------------------------
    Mutation("framework-stream-never-asked", CALL_ENV,
             "if (primary && device.device_type != kDLCPU && !overrides_.Overrides(",
             "if (false && primary && device.device_type != kDLCPU && !overrides_.Overrides(",
             (DEVICE_RULES, "-k", "current_stream"), "kernels run on the default stream, not the framework's"),
    Mutation("stream-override-ignored", CALL_ENV,
             "device.device_type != kDLCPU && !overrides_.Overrides(device.device_type, device.device_id)) {",
             "device.device_type != kDLCPU) {",
             (DEVICE_RULES, "-k", "override"), "the framework's stream beats use_raw_stream/use_stream"),
    # ---- allocator ------------------------------------------------------------------------
    Mutation("allocator-not-restored", CALL_ENV,
             "    *ts.allocator_slot = previous_alloc_;\n", "    (void)previous_alloc_;\n",
             (DEVICE_RULES, "-k", "restores"), "the call's allocator stays bound after it"),
    Mutation("python-allocation-read-only", "csrc/python/adapters.cc",
             "wrapped->flags &= ~uint64_t(DLPACK_FLAG_BITMASK_READ_ONLY);", "",
             (DEVICE_RULES, "-k", "fresh_allocations"), "tensors a Python allocator makes keep a read-only flag"),
    # ---- the no-argument call's own path (issue 23) ------------------------------------------
    Mutation("no-argument-call-ignores-contexts", "csrc/python/function.cc",
             "  if (nargs != 0 || g_live_overrides.load(std::memory_order_relaxed) != 0) return Call(f, args, nargs);",
             "  if (nargs != 0) return Call(f, args, nargs);",
             ("tests/test_no_argument_calls.py", "-k", "contexts"),
             "use_raw_stream / output_framework do not reach a call without arguments"),
    Mutation("no-argument-call-keeps-the-outer-allocator", "csrc/python/function.cc",
             "  binding.Bind(ts, nullptr);\n  int rc = Invoke(f, no_args, 0, &result);\n  binding.Unbind(ts);\n",
             "  int rc = Invoke(f, no_args, 0, &result);\n",
             ("tests/test_no_argument_calls.py", "-k", "nested"),
             "a call without arguments inside another call allocates with the outer call's framework"),
    # ---- read-only ------------------------------------------------------------------------
    Mutation("read-only-probe-ignored", TENSOR_ARGUMENTS,
             "(table->read_only == ReadOnlyPolicy::kProbe && table->is_read_only(obj))", "false",
             kit("TestReadOnly and numpy"), "read-only numpy arrays enter kernels writable"),
    Mutation("mutable-data-ptr-unchecked", "csrc/include/tensorplug/tensor.h",
             "if (TENSORPLUG_PRIVATE_UNLIKELY(static_cast<const Derived*>(this)->is_read_only())) ThrowReadOnly();",
             "if (false) ThrowReadOnly();",
             ("tests/test_mview.py", "-k", "owning_parameter_checks_read_only"),
             "a kernel may write a read-only tensor it was handed as an owning Tensor"),
    # ---- strides and byte offsets ---------------------------------------------------------
    Mutation("byte-offset-ignored", "csrc/include/tensorplug/tensor.h",
             "return static_cast<char*>(t.data) + t.byte_offset;", "return static_cast<char*>(t.data);",
             ("tests/test_exchange_details.py",), "data_ptr() forgets the DLPack byte_offset"),
    Mutation("for-each-offset-abs-stride", "csrc/include/tensorplug/tensor.h",
             "        offset += x.stride(d);\n", "        offset += x.stride(d) < 0 ? -x.stride(d) : x.stride(d);\n",
             kit("TestLayouts and numpy and (negative or reversed)"), "ForEachOffset walks negative strides forward"),
    Mutation("numpy-strides-in-bytes", "csrc/python/numpy_table.cc",
             "strides[i] = byte_strides[i] >> shift;", "strides[i] = byte_strides[i];",
             kit("TestLayouts and numpy and transposed"), "numpy strides reach kernels in bytes, not elements"),
    # ---- dtypes ---------------------------------------------------------------------------
    Mutation("numpy-int64-as-int32", "csrc/python/numpy_table.cc",
             "case NPY_LONG: case NPY_LONGLONG: *out = {kDLInt, 64, 1}; return true;",
             "case NPY_LONG: case NPY_LONGLONG: *out = {kDLInt, 32, 1}; return true;",
             kit("TestDtypes and numpy and int64"), "numpy int64 arrays enter kernels as int32"),
    Mutation("bfloat16-named-float16", "csrc/include/tensorplug/vocabulary.h",
             'X(kDLBfloat, "bfloat", 1)', 'X(kDLBfloat, "float", 1)',
             kit("TestDtypes and bfloat16 and dlpack"), "bfloat16 reads as float16"),
    # ---- error kinds ----------------------------------------------------------------------
    Mutation("index-error-as-runtime-error", ERRORS,
             "if (kind == e.name) return *e.type;",
             'if (kind == e.name) return std::string(e.name) == "IndexError" ? PyExc_RuntimeError : *e.type;',
             kit("TestErrors and numpy"), "a kernel's IndexError reaches Python as RuntimeError"),
    Mutation("unknown-kind-loses-its-name", ERRORS,
             'PyErr_Format(PyExc_RuntimeError, "%s: %s", k.c_str(), m.c_str());',
             "PyErr_SetString(PyExc_RuntimeError, m.c_str());",
             kit("TestErrors and numpy"), "an unknown error kind is dropped from the message"),
    # ---- output conversion ----------------------------------------------------------------
    Mutation("results-never-converted", VALUES,
             "if (!output) return TensorFromManaged(managed);", "return TensorFromManaged(managed);",
             kit("TestOutput and numpy"), "results come back as tensorplug.Tensor, not the caller's type"),
    Mutation("lazy-view-check-skipped", TENSOR_ARGUMENTS,
             "if (!HoldsItsValues(table, obj)) return AnnotateError(f, i, param), false;", "",
             ("tests/test_torch_lazy_bits.py", "-k", "read_inputs"), "torch conjugate and negative views pass silently"),
    # ---- lifetime -------------------------------------------------------------------------
    Mutation("library-unloaded-under-its-tensors", "csrc/runtime/module.cc",
             "dlopen(absolute.c_str(), RTLD_NOW | visibility | RTLD_NODELETE)",
             "dlopen(absolute.c_str(), RTLD_NOW | visibility)",
             ("tests/test_lifetime.py",), "a library's code is unmapped while its tensors live"),
    Mutation("rebuilt-library-runs-the-first-build", "csrc/runtime/module.cc",
             "  if (changed) {\n", "  if (false) {\n",
             ("tests/test_loader.py", "-k", "rebuilt"), "a library rebuilt at a loaded path silently runs the old code"),
    Mutation("bare-name-searched-on-library-path", "csrc/runtime/module.cc",
             "dlopen(absolute.c_str(), RTLD_NOW", "dlopen(path, RTLD_NOW",
             ("tests/test_loader.py", "-k", "relative"), "load_module('libk.so') finds a library on LD_LIBRARY_PATH"),
    # ---- handles --------------------------------------------------------------------------
    Mutation("handle-type-unchecked", ARGUMENTS,
             "  if (!type || want != type) {\n", "  if (false) {\n",
             ("tests/test_handles.py", "-k", "another_type"),
             "a handle of another type reaches a kernel that checks it with a message of its own (or not at all)"),
    Mutation("handle-not-retained-for-call", ARGUMENTS,
             "  TPHandleRetain(ref);\n  frame.handles[frame.num_handles++] = ref;\n", "",
             ("tests/test_handles.py", "-k", "during_a_call"),
             "a handle closed by a callback during the call is freed while the kernel still reads it"),
    # ---- registries -----------------------------------------------------------------------
    Mutation("global-func-override-unchecked", "csrc/runtime/function.cc",
             "    if (!allow_override) {\n", "    if (false) {\n",
             ("tests/test_global_funcs.py",), "a global function is replaced without override=True"),
    Mutation("adapter-cache-kept-on-register", "core/tensorplug/_registry.py",
             "            self.sources.setdefault(id(plugin), (None, None))\n            _core.clear_adapter_cache()\n",
             "            self.sources.setdefault(id(plugin), (None, None))\n",
             ("tests/test_adapter_registry.py",), "a newly registered adapter is not asked for cached types"),
    # ---- written parameters ---------------------------------------------------------------
    Mutation("read-only-lent-for-writing", TENSOR_ARGUMENTS,
             "if (frame.packed[i].flags & TP_ANY_FLAG_READ_ONLY) return RefuseReadOnly(",
             "if (false) return RefuseReadOnly(",
             ("tests/test_mview.py", "-k", "refused_before_the_call"),
             "a read-only tensor reaches a MutableView parameter (only the kernel-side check, unnamed, stops it)"),
    Mutation("view-hands-out-writable-pointers", "csrc/include/tensorplug/tensor.h",
             "      return static_cast<const void*>(address);", "      return address;",
             ("tests/test_mview.py", "-k", "untyped_write"), "a TensorView's data_ptr() is writable again"),
    # ---- allocation: what allocators return, what XLA lends -------------------------------
    Mutation("allocator-result-unchecked", "csrc/runtime/env.cc",
             "if (__builtin_expect(!MatchesRequest((*out)->dl_tensor, *prototype), 0))", "if (false)",
             ("tests/test_cpp_build.py", "-k", "standalone"),
             "an allocator's tensor of another shape, dtype or device reaches the kernel"),
    Mutation("lent-match-ignores-shape", "csrc/runtime/env.cc",
             "for (int32_t i = 0; i < ndim; ++i) same &= request->shape[i] == t.shape[i];",
             "for (int32_t i = 0; i < ndim; ++i) same &= true;",
             ("tests/test_op_jax.py", "-k", "disagrees_with_the_shape_rule"),
             "inside jax.jit FromEnvAlloc gets XLA's buffer whatever shape it asked for"),
    Mutation("torch-results-unchecked", "plugins/tensorplug_adapters/torch_compile.py",
             "        if returned != declared:\n", "        if False:\n",
             ("tests/test_op_torch.py", "-k", "differs_from_its_shape_function"),
             "a torch op's result of another dtype or shape than its rule declares reaches a compiled graph"),
    # ---- gradients (issue 24) -------------------------------------------------------------
    Mutation("gradient-dtype-unchecked", "core/tensorplug/gradients.py",
             "if tuple(shape) != tuple(expected_shape) or dtype != expected_dtype:",
             "if tuple(shape) != tuple(expected_shape):",
             ("tests/test_grad_torch.py", "tests/test_grad_jax.py", "-k", "wrong_dtype or true_to_its_own_rule"),
             "a backward's gradient of another dtype than its input reaches autograd"),
    Mutation("non-differentiable-input-gets-no-error", "plugins/tensorplug_adapters/jax_grad.py",
             "if name not in declared.differentiable and _perturbed(v):", "if False:",
             ("tests/test_grad_jax.py", "-k", "not_declared_differentiable"),
             "jax silently gives a zero gradient for a tensor the backward does not differentiate"),
    Mutation("op-without-backward-silent", "plugins/tensorplug_adapters/torch_autograd.py",
             "        setup_context, backward = _no_context, _no_backward(op)",
             "        return",
             ("tests/test_grad_torch.py", "-k", "without_one"),
             "torch backpropagates through an op without a backward with a None gradient"),
    # ---- the kit --------------------------------------------------------------------------
    Mutation("kit-skips-undeclared-refusals", "core/tensorplug/testing/conformance.py",
             "    if refusal is None:\n        pytest.fail(",
             "    if refusal is None:\n        pytest.skip(message)\n        pytest.fail(",
             ("tests/test_conformance_kit.py", "-k", "refusals"), "the kit skips an undeclared refusal"),
    Mutation("report-without-partial", "core/tensorplug/testing/report.py",
             "if any(not is_missing(reason) for reason in self.skipped):", "if False:",
             ("tests/test_conformance_kit.py", "-k", "skip_reasons"), "the report says passed whatever was skipped"),
    # ---- the kernel hub (issue 27) ----------------------------------------------------------
    Mutation("hub-fetch-unverified", "core/tensorplug/hub/_sources.py",
             "            verify(Path(tmp).read_bytes(), build, source.where(build))\n", "",
             ("tests/test_hub.py", "-k", "tampered"), "a tampered file is cached and loaded"),
    Mutation("hub-abi-not-matched", "core/tensorplug/hub/_select.py",
             "    if build.abi != machine.abi:", "    if False:",
             ("tests/test_hub.py", "-k", "another_abi"), "a build for another ABI is chosen and reaches the loader"),
    Mutation("hub-isa-not-matched", "core/tensorplug/hub/_select.py",
             "    elif isa_rank(build.arch, build.isa) > isa_rank(machine.arch, machine.isa):", "    elif False:",
             ("tests/test_hub.py", "-k", "without_v3"), "a build needing a newer ISA than the CPU runs is chosen"),
    # ---- sharding rules (issue 25) ----------------------------------------------------------
    Mutation("sharding-input-only-factor-split", "core/tensorplug/sharding.py",
             "        for term in results:\n            splittable.intersection_update(term)\n", "",
             ("tests/test_sharding.py", "-k", "splittable"),
             "a matmul's inner dimension may be split: each device computes a partial sum, never added"),
    Mutation("sharding-whole-factor-split", "core/tensorplug/sharding.py",
             "        splittable -= self.whole\n", "",
             ("tests/test_sharding_jax.py", "-k", "whole_factor"), "a factor marked [n] is split like any other"),
    Mutation("sharding-split-unchecked", "core/tensorplug/sharding.py",
             "        parts = {f: n for f, n in parts.items() if n > 1}\n        if not parts:",
             "        parts = {}\n        if not parts:",
             ("tests/test_sharding_torch.py", "-k", "checked_on_torch_path"),
             "an output rule that disagrees with the sharding rule on a shard runs, giving wrong shapes"),
    # ---- issue 22: the 17 bugs a second, independent set planted that the suite missed -------
    Mutation("abi-0-library-loaded", "csrc/runtime/module.cc",
             "if (exports.abi_version != TENSORPLUG_ABI_VERSION) {", "if (exports.abi_version > TENSORPLUG_ABI_VERSION) {",
             ("tests/test_abi_guard.py", "-k", "another_abi"), "a library recording an older ABI version (0) is loaded"),
    Mutation("kit-state-without-streams", "core/tensorplug/testing/checks.py",
             "return (_core.bound_allocator(), *(tensorplug.get_raw_stream(d) for d in devices))",
             "return (_core.bound_allocator(),)",
             (EDGES, "-k", "call_state"), "the kit's no-call-changes-the-streams check reads only the allocator"),
    Mutation("kit-values-of-another-dtype", "core/tensorplug/testing/checks.py",
             'assert got.dtype == expected.dtype, f"{what}: dtype {got.dtype}, expected {expected.dtype}"', "",
             (EDGES, "-k", "another_dtype"), "the kit accepts values of another dtype"),
    Mutation("xla-copy-ignores-byte-offset", "csrc/python/xla_ffi.cc",
             "std::memcpy(buffer->data, static_cast<const char*>(t.data) + t.byte_offset,",
             "std::memcpy(buffer->data, static_cast<const char*>(t.data),",
             (EDGES, "-k", "byte_offset"), "a kernel-owned result is copied into XLA's buffer from byte 0"),
    Mutation("xla-copies-non-compact-as-compact", "csrc/python/xla_ffi.cc",
             "if (device.device_type != kDLCPU || t.device.device_type != kDLCPU || !IsCompact(t)) {",
             "if (device.device_type != kDLCPU || t.device.device_type != kDLCPU) {",
             (EDGES, "-k", "non_compact"), "a non-compact kernel-owned result is copied into XLA's buffer as compact"),
    Mutation("python-table-kept-after-nested-call", CALL_ENV,
             "    ts.python_table = previous_python_;\n", "",
             (EDGES, "-k", "nested_call"), "a nested call's Python table stays active in the outer call"),
    Mutation("compat-data-size-without-lanes", "csrc/include/compat/tvm_ffi/tvm/ffi/container/tensor.h",
             "return (numel * dtype.bits * dtype.lanes + 7) / 8;", "return (numel * dtype.bits + 7) / 8;",
             (EDGES, "-k", "get_data_size"), "tvm::ffi::GetDataSize forgets the lanes of a vector dtype"),
    Mutation("strided-int64-pair-in-place", "csrc/python/number_arguments.cc",
             "(stride == 1 || n <= 1)", "(stride == 1 || n <= 2)",
             (EDGES, "-k", "two_items"), "a strided int64 array of 2 items is passed in place"),
    Mutation("mutable-view-of-read-only", "csrc/include/tensorplug/tensor.h",
             'if (is_read_only()) TENSORPLUG_THROW(ValueError) << "tensor is read-only";', "",
             (EDGES, "-k", "mutable_view"), "Tensor::mutable_view() hands out read-only data for writing"),
    Mutation("sub-byte-size-rounded-down", "csrc/runtime/env.cc",
             "const unsigned __int128 bytes = (bits + 7) / 8;", "const unsigned __int128 bytes = bits / 8;",
             (EDGES, "-k", "sub_byte"), "a sub-byte tensor (int4) is sized without its last partial byte"),
    Mutation("null-pointer-result-is-a-handle", VALUES,
             "if (!value->v_ptr) Py_RETURN_NONE;", "",
             (EDGES, "-k", "null_pointer"), "a kernel's NULL void* comes back as a Handle at address 0, not None"),
    Mutation("null-void-star-packed-as-pointer", "csrc/include/tensorplug/caster.h",
             "    if (value == nullptr) {\n      *out = detail::MakeNone();\n    } else {\n      out->v_ptr = value;\n"
             "      out->type_index = kTPOpaquePtr;\n    }\n",
             "    out->v_ptr = value;\n    out->type_index = kTPOpaquePtr;\n",
             (EDGES, "-k", "null_pointer"), "a C++ kernel's nullptr void* result is packed as a pointer, not None"),
    Mutation("numpy-subclass-to-dlpack", "plugins/tensorplug_adapters/numpy.py",
             "issubclass(tensor_type, np.ndarray)", "tensor_type is np.ndarray",
             (EDGES, "-k", "subclasses"), "numpy.ndarray subclasses fall through to the DLPack fallback"),
    Mutation("negative-shape-index-unsigned", "core/tensorplug/shapes.py",
             "return -node.operand.value", "return node.operand.value",
             ("tests/test_op.py", "-k", "negative_shape_indices"), "x.shape[-1] in an output rule reads x.shape[1]"),
    Mutation("like-ignores-dtype", "core/tensorplug/shapes.py",
             "return Output(shape=x, dtype=x if dtype is None else dtype, device=x)",
             "return Output(shape=x, dtype=x, device=x)",
             ("tests/test_op.py", "-k", "like_with_a_dtype"), "tensorplug.like(x, dtype=...) ignores the dtype"),
    Mutation("same-pointer-stored-again-deleted", "csrc/runtime/storage.cc",
             "  if (!same_pointer) Destroy(&old);", "  Destroy(&old);",
             (EDGES, "-k", "same_pointer"), "storing the same opaque pointer again runs its deleter on it"),
    Mutation("cpu-data-malloc-aligned", "csrc/runtime/env.cc",
             "constexpr size_t kDataAlignment = 64;", "constexpr size_t kDataAlignment = alignof(std::max_align_t);",
             (EDGES, "-k", "aligns_data"), "the default CPU allocator's data is only malloc-aligned"),
    Mutation("size-1-stride-decides-contiguity", "csrc/include/tensorplug/tensor.h",
             "    if (t.shape[i] == 1) continue;\n", "",
             (EDGES, "-k", "size_1"), "is_contiguous() is false for a compact tensor with an odd stride on a size-1 dim"),
    # ---- the two bugs the property-based tests found (fixed) -------------------------------
    Mutation("compat-empty-contiguous-by-position", "csrc/include/compat/tvm_ffi/tvm/ffi/container/tensor.h",
             "    if (tensor.shape[i] == 0) return true;\n  }\n", "  }\n",
             (EDGES, "-k", "empty_tensor"), "compat IsContiguous judges an empty tensor by its strides"),
    Mutation("negative-rule-dimension-unchecked", "core/tensorplug/ops.py",
             "if any(isinstance(extent, int) and extent < 0 for extent in spec.shape):", "if False:",
             ("tests/test_op.py", "-k", "negative_dimension"), "a rule's negative dimension reaches jax and torch"),
    # ---- the Op's C call and torch's hop before 2.13 -----------------------------------------
    Mutation("op-call-lists-not-unwrapped", "csrc/python/op_call.cc",
             "if (PyList_CheckExact(arg) || PyTuple_CheckExact(arg)) {", "if (false) {",
             ("tests/test_op.py", "-k", "chooses"), "a plain Op call judges a list by its own type, not its first item"),
    Mutation("hop-text-not-noted", "csrc/python/torch_native.cc",
             "    t_raised = e.what();", "    (void)e;",
             ("tests/test_torch_native.py", "-k", "noted"), "before torch 2.13 a kernel error below the hop loses its text"),
    Mutation("bridge-float-lost", "plugins/tensorplug_adapters/torch_bridge.cc",
             "        std::memcpy(&values[i], &d, sizeof d);", "        values[i] = 0;",
             ("tests/test_torch_bridge.py", "-k", "plain_tensors"), "the compiled bridge passes a float argument as 0.0"),
    Mutation("bridge-hop-to-nograd", "plugins/tensorplug_adapters/torch_bridge.cc",
             "      HopTo(handle, hop).callBoxed(stack);", '      HopTo(handle, "nograd").callBoxed(stack);',
             ("tests/test_torch_bridge.py", "-k", "suite"),
             "the bridge's Autograd kernel passes every call on below autograd, a gradient's too"),
]
