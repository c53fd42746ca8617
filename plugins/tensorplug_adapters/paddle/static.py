"""paddle's operator for tensorplug ops: a paddle custom operator compiled against the
installed paddle at run time (``op.cc``), so that an op is one node of a
``paddle.jit.to_static`` program (SOT or ``full_graph=True``), of a program saved by
``paddle.jit.save``, and of paddle's autodiff (its grad operator runs the declared backward).

How a call becomes a node: :func:`call` puts the op's tensors in one list and the rest of
the call (scalars, where each tensor goes, the kernel's library and name) in a JSON
attribute, and calls ``_C_ops._run_custom_op("tensorplug_op<n>_<k>", ...)`` (n: its tensors,
k: the op's results plus its written tensors). paddle asks the operator's infer functions for the
results' shapes and dtypes, which call back here to evaluate the op's output rule (once per
distinct question: op.cc keeps the answers). At run time the kernel runs the op's call plan
(:func:`tensorplug.plans.make`, made here and handed to op.cc on a node's first run,
:func:`_describe`) with no Python: paddle's tensors as DLTensor views, the output rule
evaluated and the results checked by the plan, naming the op, results allocated by paddle.
An op whose rule is a Python shape function (:class:`tensorplug.plans.NotCompilable`), a
program's op this process does not declare, and a GPU call take the callback instead: the
kernel calls back here with the tensors as DLPack, and the kernel function runs on them
(its results checked against the rule, naming the op). An op that writes arguments
runs on copies of the written tensors in the program and the copies are its results (the
adapter writes them back to the caller's tensors, as ``torch.compile`` functionalizes).

Built with the system C++ compiler against paddle's headers and ``libpaddle.so`` on the
first traced call of a process (about 35 s; once per paddle version and source:
:func:`tensorplug.cpp.load_cdll`'s verified cache), loaded by ctypes (verified) and then
registered with paddle (``load_op_meta_info_and_register_op``), which opens the same file.
Without a compiler the traced call raises, saying why: a Python call inside a static
program cannot run, and never runs the kernel on placeholders (docs/decisions.md).

Over 500 lines: one idea, the Python half of paddle's operator -- building it, a call as a
node, and what op.cc asks of Python (a node's plan and call, the callbacks) -- all reading
the node's call attribute as :func:`call` writes it.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import struct
import sys
import sysconfig
import threading

from tensorplug.gradients import no_backward_message
from tensorplug.shapes import TensorSpec

_log = logging.getLogger("tensorplug")

_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "op.cc")
_LIBRARY = "tensorplug_paddle_op"
_INTERFACE = 2
MAX_RESULTS = 4  # tensorplug_op<n>_<k>: k results (op.cc)
MAX_TENSORS = 6  # n tensors
_MAX_RANK = 16

# paddle's phi::DataType values (paddle/phi/common/data_type.h) as tensorplug dtype names.
_DTYPES = ("undefined", "bool", "uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64", "float32",
           "float64", "complex64", "complex128", "pstring", "float16", "bfloat16")
_DTYPE_CODES = {name: code for code, name in enumerate(_DTYPES)}

_lock = threading.Lock()
_library: ctypes.CDLL | None = None
_error: str | None = None
_callbacks = ()  # the ctypes callbacks, kept alive with the library

_RUN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int64, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int64,
                        ctypes.POINTER(ctypes.c_void_p), ctypes.c_int64, ctypes.POINTER(ctypes.c_void_p),
                        ctypes.c_void_p, ctypes.c_int64)
_INFER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int64,
                          ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int64),
                          ctypes.POINTER(ctypes.c_int32), ctypes.c_int64, ctypes.POINTER(ctypes.c_int64),
                          ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int32), ctypes.c_void_p,
                          ctypes.c_int64)
_DESCRIBE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int64),
                             ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64)


def _paddle():
    return sys.modules["paddle"]


def build_options(paddle) -> dict:
    """The :func:`tensorplug.cpp.build` keywords that compile the operator against ``paddle``'s headers."""
    root = os.path.dirname(paddle.__file__)
    include = os.path.join(root, "include")
    # paddle's headers (and the Python and pybind11 headers paddle/extension.h includes) as
    # system headers: the stamp names them by paddle's version and commit instead.
    cflags = ["-isystem", include, "-isystem", os.path.join(include, "third_party"),
              "-isystem", sysconfig.get_path("include"), "-DPADDLE_WITH_CUSTOM_KERNEL",
              "-D_GLIBCXX_USE_CXX11_ABI=1", "-Wno-deprecated-declarations",
              f"-DTENSORPLUG_PADDLE_VERSION={paddle.__version__}+{getattr(paddle.version, 'commit', '')}"]
    base = os.path.join(root, "base")
    ldflags = [f"-L{base}", "-l:libpaddle.so", f"-Wl,-rpath,{base}", f"-Wl,-rpath,{os.path.join(root, 'libs')}"]
    return {"extra_cflags": cflags, "extra_ldflags": ldflags}


def register() -> bool:
    """Build (or find) ``op.cc``'s library, load it and register its operators with
    paddle, once per process; False, with :func:`error` saying why, where it cannot be had.
    A process that runs a program saved by ``paddle.jit.save`` with tensorplug ops calls it
    before ``paddle.jit.load`` (docs/compilers.md, "Saved programs")."""
    global _library, _error, _callbacks
    with _lock:
        if _library is not None or _error is not None:
            return _library is not None
        from tensorplug import cpp

        from . import import_paddle

        paddle = import_paddle()
        try:
            library = cpp.load_cdll(_LIBRARY, [_SOURCE], **build_options(paddle))
            set_callbacks = library.tp_paddle_set_callbacks
        except (cpp.BuildError, OSError, ValueError, AttributeError) as e:  # ValueError: IntegrityError
            _error = f"the paddle operator of tensorplug ops could not be built or loaded: {e}"
            _log.warning("tensorplug: %s", _error)
            return False
        run, infer, describe = _RUN(_run), _INFER(_infer), _DESCRIBE(_describe)
        set_callbacks.restype = ctypes.c_int
        set_callbacks.argtypes = [_RUN, _INFER, _DESCRIBE]
        if set_callbacks(run, infer, describe) != _INTERFACE:
            _error = "the compiled paddle operator speaks another interface than this tensorplug"
            return False
        # paddle opens the file ctypes opened (the same inode: the loader shares the mapping).
        from paddle.utils.cpp_extension import load_op_meta_info_and_register_op

        load_op_meta_info_and_register_op(library.loaded_from)
        _callbacks = (run, infer, describe)
        _library = library
        return True


def error() -> str | None:
    """Why :func:`register` failed (None when it did not, or was not asked)."""
    return _error


# ---------------------------------------------------------------------- the call ----
def call(op, args, kwargs):
    """``op`` called on paddle values (static ``Value``s under ``to_static``, or eager
    tensors) as its paddle operator: one node ``tensorplug_op<n>_<k>``."""
    if not register():
        raise RuntimeError(f"{op.name}: this call needs paddle's operator for the op (inside paddle.jit.to_static, "
                           f"or where a gradient may flow), but {_error}")
    _plan_of(op)  # an op declared again under its name: op.cc forgets the nodes it described
    paddle = _paddle()
    bound = op.bind(args, kwargs)
    tensors, entries, written = [], [], []
    for p in op.params:
        value = bound.get(p.name)
        if value is None:
            entries.append(None)
        elif p.is_tensor:
            if p.written:
                written.append(len(tensors))
            entries.append(["t", len(tensors)])
            tensors.append(value)
        elif p.is_tensor_list:
            entries.append(["l", list(range(len(tensors), len(tensors) + len(value)))])
            tensors.extend(value)
        else:
            entries.append(["v", _scalar(op, p, value)])
    n_results = op.n_outputs + len(written)
    if n_results == 0:
        raise ValueError(f"{op.name}: returns nothing and writes nothing; inside a paddle static program such an op "
                         "would be pruned as dead code (call it eagerly)")
    if n_results > MAX_RESULTS:
        raise ValueError(f"{op.name}: {n_results} results (returned and written) inside a paddle static program; "
                         f"paddle's tensorplug operator takes at most {MAX_RESULTS}")
    if not tensors:
        raise ValueError(f"{op.name}: called with no tensor; paddle's operator needs one")
    if len(tensors) > MAX_TENSORS:
        raise ValueError(f"{op.name}: {len(tensors)} tensors inside a paddle static program; paddle's tensorplug "
                         f"operator takes at most {MAX_TENSORS}")
    # Tensors that want a gradient: the grad kernel refuses those the declaration does not
    # differentiate, by name, when a gradient reaches them.
    needs = [i for i, t in enumerate(tensors) if not getattr(t, "stop_gradient", True)]
    spec = {"name": op.name, "p": entries, "w": written, "g": needs, "k": _kernel_of(op)}
    # The results as the output rule gives them for this program (-1: a dimension paddle
    # leaves dynamic): what a process running the saved program without the declaration
    # gives paddle as shapes, and checks the kernel's results against.
    inputs = [_value_spec(t) for t in tensors]
    specs = op.output_specs(_specs(op, _arguments(spec, inputs)))
    spec["o"] = [[[_dim(d) for d in r.shape], r.dtype] for r in specs]
    # The inputs as traced: paddle's infer-shape function is told no dtypes, its infer-dtype
    # function no shapes; each takes the other half from here.
    spec["i"] = [[[_dim(d) for d in t.shape], t.dtype] for t in inputs]
    outs = paddle._C_ops._run_custom_op(f"tensorplug_op{len(tensors)}_{n_results}", *tensors, op.name,
                                        json.dumps(spec, separators=(",", ":")))
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    results = outs[:op.n_outputs]
    for i, new in zip(written, outs[op.n_outputs:]):
        # (A view: paddle's to_static refuses the program when it checks it, naming this line.)
        paddle.assign(new, output=tensors[i])  # the caller's tensor gets the written value
    if op.n_outputs == 0:
        return outs[op.n_outputs] if len(written) == 1 else tuple(outs[op.n_outputs:])
    return results[0] if op.result == "tensor" else tuple(results)


def _scalar(op, p, value):
    if isinstance(value, (bool, int, float, str)) or (isinstance(value, (list, tuple))
                                                      and all(isinstance(v, int) for v in value)):
        return list(value) if isinstance(value, (list, tuple)) else value
    if p.kind in ("device", "dtype"):
        return str(value)
    raise TypeError(f"{op.name}() argument {p.name!r}: a {p.kind} inside a paddle static program must be a Python "
                    f"value, got {type(value).__name__}")


_kernels: dict = {}


def _kernel_of(op):
    """Where the kernel lives (its library's path and its name), for a process that runs a
    saved program without declaring the op; None when no loaded library holds it. A kernel
    function does not name its library, so the library is found once per op among the
    objects that refer to the function (a Module's namespace)."""
    if op.name not in _kernels:
        import gc

        import tensorplug

        found = None
        for holder in gc.get_referrers(op.function):
            if isinstance(holder, dict):
                found = next((m.path for m in gc.get_referrers(holder)
                              if isinstance(m, tensorplug.Module) and m.__dict__ is holder), None)
                if found is not None:
                    break
        _kernels[op.name] = None if found is None else [found, op.function.__name__]
    return _kernels[op.name]


# ------------------------------------------------------------ the native kernel ----
# A node whose op has a call plan runs it in op.cc with no Python (its "native kernel"): the
# first run of each node asks _describe for the plan and for the call attribute in op.cc's
# encoding, and op.cc keeps both for the node's later runs.
_plans: dict = {}  # op name -> (the op, its plan capsule or None)
# op.cc's kDescribe* codes.
_NONE, _VIEW, _VIEWS, _INT, _FLOAT, _BOOL, _STR, _DEVICE, _DTYPE, _INTS, _TENSOR = range(11)


def _plan_of(op):
    """``op``'s call plan (a capsule kept for the process: op.cc retains its pointer), or None
    where the op runs the Python callback: an output rule that is a Python shape function
    (:class:`tensorplug.plans.NotCompilable`), a parameter a plan cannot pass."""
    held = _plans.get(op.name)
    if held is not None and held[0] is op:
        return held[1]
    from tensorplug import plans

    try:
        plan = plans.make(op)
    except ValueError:  # NotCompilable among them
        plan = None
    if held is not None and _library is not None:  # declared again: the nodes op.cc described name the old op
        _library.tp_paddle_forget_nodes()
    _plans[op.name] = (op, plan)
    return plan


def _encode(op, spec, words: list, strings: bytearray) -> bool:
    """The node's call (``spec``, its parsed attribute) in op.cc's words; False where the
    Python callback must run it (a value op.cc's encoding does not carry)."""
    from tensorplug import Device

    contiguous = set(op.contiguous_index)
    for i, (p, entry) in enumerate(zip(op.params, spec["p"])):
        if entry is None:
            words.append(_NONE)
        elif entry[0] == "t":
            words += [_TENSOR if p.kind == "tensor" else _VIEW, entry[1], int(i in contiguous)]
        elif entry[0] == "l":
            words += [_VIEWS, len(entry[1]), int(i in contiguous), *entry[1]]
        else:
            value = entry[1]
            if p.kind == "bool" and isinstance(value, bool):
                words += [_BOOL, int(value)]
            elif p.kind == "int" and isinstance(value, int) and not isinstance(value, bool):
                words += [_INT, value]
            elif p.kind == "float" and isinstance(value, (int, float)) and not isinstance(value, bool):
                words += [_FLOAT, int.from_bytes(struct.pack("<d", float(value)), "little", signed=True)]
            elif p.kind == "str" and isinstance(value, str):
                words += [_STR, len(strings)]
                strings += value.encode() + b"\0"
            elif p.kind == "ints" and isinstance(value, list):
                words += [_INTS, len(value), *value]
            elif p.kind == "device" and isinstance(value, str):
                kind, _, index = value.replace("gpu", "cuda").partition(":")
                if kind not in ("cpu", "cuda") or not (index or "0").isdigit():
                    return False
                words += [_DEVICE, *Device(kind, int(index or 0)).dlpack]
            else:  # dtypes and anything else: the Python callback
                return False
    return True


def _describe(name, spec_text, words, n_words, strings, n_strings, error, error_size):
    try:
        from tensorplug import get_op

        op = get_op(name.decode())
        plan = None if op is None else _plan_of(op)
        words[0] = 0
        if plan is None:  # a saved program's op this process does not declare, or no plan: the callback
            return 0
        spec = _parse(spec_text)
        encoded = [op.n_outputs, len(op.params), len(spec["w"]), *spec["w"]]
        text = bytearray()
        if not _encode(op, spec, encoded, text) or len(encoded) + 1 > n_words or len(text) > n_strings:
            return 0
        for k, word in enumerate(encoded, 1):
            words[k] = word
        ctypes.memmove(strings, bytes(text), len(text))
        words[0] = _capsule_pointer(plan, b"tensorplug.TPPlanHandle")  # op.cc retains it; _plans keeps the capsule
        return 0
    except BaseException as e:  # noqa: BLE001 - reported to paddle, which raises it
        _write_error(error, error_size, e)
        return 1


# ----------------------------------------------------------------- callbacks ----
def _write_error(buffer, size, error: BaseException) -> None:
    kind = "V" if isinstance(error, ValueError) else "T" if isinstance(error, TypeError) else "R"
    text = (kind + (str(error) or type(error).__name__)).encode(errors="replace")[: size - 1]
    ctypes.memmove(buffer, text + b"\0", len(text) + 1)


def _op_of(name: str, spec):
    from tensorplug import get_op

    op = get_op(name)
    if op is not None:
        return op, op.function
    kernel = spec.get("k")
    if kernel is None:
        raise RuntimeError(f"a paddle program calls the tensorplug op {name!r}, which this process does not declare, "
                           "and the program does not say where its kernel lives: declare the op (tensorplug.op) "
                           "before running the program")
    path, function = kernel
    if not _loaded(path):
        raise RuntimeError(f"a paddle program calls the tensorplug op {name!r}, whose kernel {function!r} lives in "
                           f"{path!r}, which this process has not loaded: load it first "
                           f"(tensorplug.load_module({path!r})), or declare the op; a program file does not load "
                           "libraries by itself")
    import tensorplug

    return None, tensorplug.load_module(path)[function]  # loaded already: the same mapping again


def _loaded(path: str) -> bool:
    """Whether the library at ``path`` is mapped into this process (its kernel library was loaded)."""
    try:
        real = os.path.realpath(path)
        with open("/proc/self/maps") as maps:
            return any(line.rstrip("\n").endswith(" " + real) for line in maps)
    except OSError:
        return False


def _arguments(spec, tensors):
    args = []
    for entry in spec["p"]:
        if entry is None:
            args.append(None)
        elif entry[0] == "t":
            args.append(tensors[entry[1]])
        elif entry[0] == "l":
            args.append([tensors[i] for i in entry[1]])
        else:
            args.append(entry[1])
    return args


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype, _capsule_new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype, _capsule_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
_capsule_rename = ctypes.pythonapi.PyCapsule_SetName
_capsule_rename.restype, _capsule_rename.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]


def _to_paddle(paddle, pointer):
    if not pointer:
        return None
    return paddle.utils.dlpack.from_dlpack(_capsule_new(pointer, b"dltensor", None))


def _from_paddle(tensor) -> int:
    """A DLManagedTensor for ``tensor`` whose ownership passes to the caller."""
    capsule = tensor.__dlpack__()
    pointer = _capsule_pointer(capsule, b"dltensor")
    _capsule_rename(capsule, b"used_dltensor")  # consumed: the capsule no longer frees it
    return pointer


# The call attribute of each node, parsed once: a program's node passes the same text on
# every run.
_parsed: dict[bytes, dict] = {}


def _parse(text: bytes) -> dict:
    spec = _parsed.get(text)
    if spec is None:
        if len(_parsed) > 4096:
            _parsed.clear()
        spec = _parsed[text] = json.loads(text)
    return spec


def _run(grad, name, spec_text, n_in, ins, n_out, outs, error, error_size):
    try:
        paddle = _paddle()
        name, spec = name.decode(), _parse(spec_text)
        tensors = [_to_paddle(paddle, ins[i]) for i in range(n_in)]
        op, function = _op_of(name, spec)
        # Tensors from DLPack need no gradient: the calls below are the kernels' own.
        results = _backward(paddle, op, spec, tensors) if grad else _forward(paddle, op, function, spec, tensors)
        if len(results) != n_out:
            raise ValueError(f"op '{name}' returned {len(results)} tensor(s) to paddle's operator, which has "
                             f"{n_out} result(s)")
        for k, result in enumerate(results):
            if not result.is_contiguous():
                result = result.contiguous()
            outs[k] = _from_paddle(result)
        return 0
    except BaseException as e:  # noqa: BLE001 - reported to paddle, which raises it
        _write_error(error, error_size, e)
        return 1


def _forward(paddle, op, function, spec, tensors):
    written = spec["w"]
    for i in written:  # the program's value stays; the kernel writes a copy, the op's result
        tensors[i] = tensors[i].clone()
    args = _arguments(spec, tensors)
    if op is not None:
        for i in op.contiguous_index:  # the layout contract: compact copies, as torch's adapter makes
            if args[i] is not None and not args[i].is_contiguous():
                args[i] = args[i].contiguous()
    returned = function(*args)
    returned = () if returned is None else returned if isinstance(returned, tuple) else (returned,)
    if op is not None and op.n_outputs:
        declared = op.output_specs(_specs(op, args))
        op.check_results(tuple(_spec_of(r) for r in returned), declared)
    elif op is None:  # the rule's results recorded in the saved program: dtypes, and the static extents
        recorded = spec["o"]
        got = [_spec_of(r) for r in returned]
        if len(got) != len(recorded) or any(
                g is None or g.dtype != dtype or len(g.shape) != len(shape)
                or any(want >= 0 and want != have for want, have in zip(shape, g.shape))
                for g, (shape, dtype) in zip(got, recorded)):
            raise ValueError(f"op '{spec['name']}' returned {', '.join(map(str, got))}, but the program "
                             f"records its output rule's results as {recorded}")
    return [*returned, *(tensors[i] for i in written)]


def _backward(paddle, op, spec, tensors):
    if op is None:
        raise RuntimeError("a gradient through a tensorplug op of a loaded program needs the op declared with its "
                           "backward (tensorplug.op(..., backward=...)) in this process")
    k = op.n_outputs + len(spec["w"])
    n_x = len(tensors) - 2 * k
    x, outs, grads = tensors[:n_x], tensors[n_x:n_x + k], tensors[n_x + k:]
    declared = op.backward
    if declared is None:
        raise RuntimeError(no_backward_message(op))
    args = _arguments(spec, x)
    by_param = {p.name: (i, entry) for i, (p, entry) in enumerate(zip(op.params, spec["p"]))}
    for i in spec["g"]:
        name = next(p.name for p, entry in zip(op.params, spec["p"])
                    if entry is not None and (entry[0] == "t" and entry[1] == i or entry[0] == "l" and i in entry[1]))
        if name not in declared.differentiable:
            raise RuntimeError(declared.not_differentiable(name))
    grads = [paddle.zeros_like(outs[j]) if g is None else g for j, g in enumerate(grads[:op.n_outputs])]
    saved = declared.saved_values(tuple(args), tuple(outs[:op.n_outputs]))
    arguments = declared.arguments(grads, saved)
    for i in declared.function.contiguous_index:  # the backward's layout contract
        if i < len(arguments) and arguments[i] is not None and not arguments[i].is_contiguous():
            arguments[i] = arguments[i].contiguous()
    result = declared.function(*arguments)
    result = (result,) if len(declared.differentiable) == 1 else tuple(result)
    per_x = [None] * n_x
    for position, (name, grad) in enumerate(zip(declared.differentiable, result)):
        i, entry = by_param[name]
        if entry is None:
            continue
        expected = x[entry[1]]
        declared.check_gradient(position, tuple(grad.shape), _dtype(grad.dtype), tuple(expected.shape),
                                _dtype(expected.dtype))
        per_x[entry[1]] = grad
    return [paddle.zeros_like(t) if g is None else g for t, g in zip(x, per_x)]


class _Dynamic:
    """A dimension paddle leaves dynamic (-1) as an output rule sees it: arithmetic on it
    stays dynamic, and a rule's check for negative extents does not mistake it for one."""

    def _same(self, *_):
        return self

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __floordiv__ = __rfloordiv__ = _same
    __mod__ = __rmod__ = __neg__ = __truediv__ = __rtruediv__ = _same

    def __repr__(self) -> str:
        return "?"


DYNAMIC = _Dynamic()


def _dim(extent) -> int:
    return -1 if not isinstance(extent, int) or extent < 0 else int(extent)


def _value_spec(value) -> TensorSpec:
    return TensorSpec(tuple(DYNAMIC if d < 0 else d for d in value.shape), _dtype(value.dtype), _device(value))


def _device(value):
    """The tensorplug Device of a paddle tensor; for a static value (whose place the program
    does not say) and for the infer functions, paddle's current device."""
    from tensorplug import Device

    paddle = _paddle()
    static = value is None or isinstance(value, (TensorSpec, paddle.pir.Value))  # a Value has no place
    place = None if static else getattr(value, "place", None)
    if place is not None and hasattr(place, "is_gpu_place"):
        return Device("cuda", place.gpu_device_id()) if place.is_gpu_place() else Device("cpu", 0)
    kind, _, index = paddle.get_device().partition(":")
    return Device("cuda", int(index or 0)) if kind == "gpu" else Device("cpu", 0)


def _dtype(dtype) -> str:
    return str(dtype).rpartition(".")[2]


def _spec_of(value):
    if not hasattr(value, "shape") or not hasattr(value, "dtype"):
        return None
    if isinstance(value, TensorSpec):
        return value
    return TensorSpec(tuple(value.shape), _dtype(value.dtype), _device(value))


def _specs(op, args):
    bound = {}
    for p, value in zip(op.params, args):
        if p.is_tensor and value is not None:
            bound[p.name] = _spec_of(value)
        elif p.is_tensor_list and value is not None:
            bound[p.name] = [_spec_of(v) for v in value]
        else:
            bound[p.name] = value
    return bound


def _infer(name, spec_text, n_in, ranks, dims, dtypes, n_out, out_ranks, out_dims, out_dtypes, error, error_size):
    try:
        from tensorplug import get_op

        name, spec = name.decode(), _parse(spec_text)
        op = get_op(name)
        inputs, at, device = [], 0, _device(None)
        for i in range(n_in):
            rank = ranks[i]
            traced_shape, traced_dtype = spec["i"][i]
            if rank >= 0:
                shape = tuple(dims[at + d] for d in range(rank))
                at += rank
            else:  # infer-dtype: the shape as traced
                shape = tuple(traced_shape)
            shape = tuple(DYNAMIC if d < 0 else d for d in shape)
            dtype = _DTYPES[dtypes[i]] if dtypes[i] else traced_dtype  # 0: infer-shape, no dtype given
            inputs.append(TensorSpec(shape, dtype, device))
        if op is not None:
            specs = list(op.output_specs(_specs(op, _arguments(spec, inputs))))
        else:  # a saved program run without the declaration: the rule's results recorded in it
            specs = [TensorSpec(tuple(shape), dtype) for shape, dtype in spec["o"]]
        specs += [inputs[i] for i in spec["w"]]
        if len(specs) != n_out:
            raise ValueError(f"op '{name}': {len(specs)} result(s), paddle's operator has {n_out}")
        for k, result in enumerate(specs):
            shape = tuple(_dim(d) for d in result.shape)
            if len(shape) > _MAX_RANK:
                raise ValueError(f"op '{name}': result {k} has rank {len(shape)}; paddle's operator takes at most "
                                 f"{_MAX_RANK}")
            out_ranks[k] = len(shape)
            for d, extent in enumerate(shape):
                out_dims[k * _MAX_RANK + d] = extent
            out_dtypes[k] = _DTYPE_CODES[result.dtype]
        return 0
    except BaseException as e:  # noqa: BLE001 - reported to paddle, which raises it
        _write_error(error, error_size, e)
        return 1
