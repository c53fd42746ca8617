"""Numba kernels as tensorplug functions.

``tensorplug.numba.kernel`` compiles a Python function with Numba and wraps it in an entry
point of tensorplug's packed convention (``TPPackedFunc``), itself a Numba ``@cfunc``: the
entry checks each argument (dtype, dimensions, device, writability), makes Numba arrays of
the caller's tensors without copying (any strides), allocates the declared output through
the caller's allocator (``TPEnvAllocTensor``), calls the kernel and reports errors through
``TPErrorSet``. The result is a :class:`tensorplug.Function` (made by
:func:`tensorplug.function_from_pointer`), called with numpy, torch, jax or paddle tensors
and usable as a :func:`tensorplug.op` inside ``torch.compile`` and ``jax.jit``: no Python
runs in a call.

Importing this module imports Numba; ``import tensorplug`` does not import it.

Over 500 lines: one idea, the generated entry point, whose argument checks, array views and
result allocation are emitted together and must agree with each other.
"""

from __future__ import annotations

import ctypes
import inspect
import re
import threading
from pathlib import Path

import numba
import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir
from numba import types
from numba.core.errors import TypingError
from numba.core.imputils import impl_ret_borrowed
from numba.extending import intrinsic

from . import _core
from ._native import function_from_pointer
from .shapes import Output

__all__ = ["kernel"]

# ------------------------------------------------------------ libtensorplug from Numba ----
# The C functions the entries call, bound by symbol for Numba's JIT linker (the library is
# loaded by the extension already; CDLL finds it by path and returns the same mapping).
_lib = ctypes.CDLL(str(Path(_core.__file__).parent / "lib" / "libtensorplug.so"))
for _symbol in ("TPErrorSet", "TPEnvAllocTensor", "TPAnyRelease"):
    llvm.add_symbol(_symbol, ctypes.cast(getattr(_lib, _symbol), ctypes.c_void_p).value)
_error_set = types.ExternalFunction("TPErrorSet", types.void(types.voidptr, types.voidptr))
_alloc_tensor = types.ExternalFunction("TPEnvAllocTensor", types.int32(types.voidptr, types.voidptr))
_any_release = types.ExternalFunction("TPAnyRelease", types.void(types.voidptr))


@intrinsic
def _pointer(typingctx, address):
    """The int64 ``address`` as a ``void*``."""
    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], ir.IntType(8).as_pointer())
    return types.voidptr(types.int64), codegen


@intrinsic
def _address(typingctx, pointer):
    """A ``void*`` as an int64."""
    def codegen(context, builder, signature, args):
        return builder.ptrtoint(args[0], ir.IntType(64))
    return types.int64(pointer), codegen


@intrinsic
def _read_only(typingctx, array):
    """The same array, typed read-only: Numba refuses, at compile time, a kernel that writes
    it (the entry passes every array not declared in ``writes=`` so)."""
    if not isinstance(array, types.Array):
        return None

    def codegen(context, builder, signature, args):
        return impl_ret_borrowed(context, builder, signature.return_type, args[0])
    return array.copy(readonly=True)(array), codegen


@intrinsic
def _call_entry(typingctx, address, self, args, nargs, result):
    """Call the ``TPPackedFunc`` at the int64 ``address``."""
    def codegen(context, builder, signature, values):
        fnty = ir.FunctionType(ir.IntType(32), [ir.IntType(8).as_pointer(), ir.IntType(8).as_pointer(),
                                                ir.IntType(32), ir.IntType(8).as_pointer()])
        fn = builder.inttoptr(values[0], fnty.as_pointer())
        return builder.call(fn, values[1:])
    return types.int32(types.int64, types.voidptr, types.voidptr, types.int32, types.voidptr), codegen


@intrinsic
def _call_int(typingctx, address, value):
    """``int64 f(int64)`` at the int64 ``address`` (a ctypes callback: it takes the GIL)."""
    def codegen(context, builder, signature, values):
        fnty = ir.FunctionType(ir.IntType(64), [ir.IntType(64)])
        return builder.call(builder.inttoptr(values[0], fnty.as_pointer()), [values[1]])
    return types.int64(types.int64, types.int64), codegen


# c_api.h values (TPAny: int32 type_index, uint32 flags, 8-byte payload; 16 bytes).
_KTP_INT, _KTP_FLOAT, _KTP_BOOL, _KTP_DLTENSOR_PTR, _KTP_TENSOR = 1, 2, 3, 8, 9
_KDL_CPU, _KDL_CUDA_HOST = 1, 3
# DLManagedTensorVersioned: version (8 bytes), manager_ctx, deleter, flags, then dl_tensor.
_MANAGED_FLAGS_OFFSET, _MANAGED_TENSOR_OFFSET = 24, 32
_KIND_NAMES = {0: "None", 1: "int", 2: "float", 3: "bool", 4: "device", 5: "dtype", 6: "pointer", 7: "str",
               8: "tensor", 9: "tensor", 10: "str", 11: "tuple", 12: "function", 13: "list", 14: "int list",
               15: "handle"}


def _byte_table(names: dict[int, str]) -> np.ndarray:
    """Row i: the NUL-padded bytes of names[i] ("value of kind i" where missing)."""
    width = max(len(n) for n in names.values()) + 1
    table = np.zeros((max(names) + 1, width), np.uint8)
    for i, name in names.items():
        table[i, :len(name)] = np.frombuffer(name.encode(), np.uint8)
    return table


_KIND_TABLE = _byte_table(_KIND_NAMES)
_DTYPES = _core.VOCABULARY["dtypes"]
_DTYPE_TABLE = _byte_table(dict(enumerate(name for name, _, _ in _DTYPES)))
_DTYPE_CODES = np.array([(code << 8) | bits for _, code, bits in _DTYPES], np.int64)


def _text(s: str) -> np.ndarray:
    return np.frombuffer(s.encode(), np.uint8).copy()


_UNKNOWN_DTYPE = _text("another dtype")
_UNKNOWN_KIND = _text("an unknown value")


# ------------------------------------------------------ helpers the entries call ----
@numba.njit
def _row(table, i):
    n = 0
    while table[i, n] != 0:
        n += 1
    return table[i, :n]


@numba.njit
def _digits(value):
    out = np.zeros(20, np.uint8)
    n = 0
    v = value if value >= 0 else -value
    while True:
        out[19 - n] = 48 + v % 10
        v //= 10
        n += 1
        if v == 0:
            break
    if value < 0:
        out[19 - n] = 45
        n += 1
    return out[20 - n:]


@numba.njit
def _dtype_name(code, bits):
    key = (code << 8) | bits
    for i in range(_DTYPE_CODES.shape[0]):
        if _DTYPE_CODES[i] == key:
            return _row(_DTYPE_TABLE, i)
    return _UNKNOWN_DTYPE.copy()


@numba.njit
def _kind_name(type_index):
    if type_index < _KIND_TABLE.shape[0]:
        return _row(_KIND_TABLE, type_index)
    return _UNKNOWN_KIND.copy()


@numba.njit
def _fail(kind, prefix, got):
    """Record the error "<prefix><got>" of ``kind`` (NUL-terminated byte arrays) and return -1."""
    message = np.zeros(prefix.shape[0] + got.shape[0] + 1, np.uint8)
    message[:prefix.shape[0]] = prefix
    message[prefix.shape[0]:prefix.shape[0] + got.shape[0]] = got
    _error_set(_pointer(kind.ctypes.data), _pointer(message.ctypes.data))
    return -1


@numba.njit
def _words(address, n):
    """The ``n`` int64 words at ``address``."""
    return numba.carray(_pointer(address), (n,), np.int64)


@numba.njit
def _tensor_of(args_address, i):
    """(address of the DLTensor of argument i or 0, read_only, type_index)."""
    word = _words(args_address + 16 * i, 2)
    type_index = word[0] & 0xFFFFFFFF
    if type_index == _KTP_DLTENSOR_PTR and word[1] != 0:
        return word[1], (word[0] >> 32) & 1, type_index
    if type_index == _KTP_TENSOR and word[1] != 0:
        flags = _words(word[1] + _MANAGED_FLAGS_OFFSET, 1)[0]
        return word[1] + _MANAGED_TENSOR_OFFSET, flags & 1, type_index
    return 0, 0, type_index


@numba.njit
def _strides(tensor, ndim):
    """Element strides of a DLTensor (its own, or the row-major ones when NULL)."""
    if tensor[4] != 0:
        return _words(tensor[4], ndim)
    shape = _words(tensor[3], ndim)
    out = np.empty(ndim, np.int64)
    step = 1
    for d in range(ndim - 1, -1, -1):
        out[d] = step
        step *= shape[d]
    return out


@numba.njit
def _release_moved(args_address, nargs):
    """Owning tensor arguments (kTPTensor) belong to the callee: release them."""
    for i in range(nargs):
        if (_words(args_address + 16 * i, 1)[0] & 0xFFFFFFFF) == _KTP_TENSOR:
            _any_release(_pointer(args_address + 16 * i))


@numba.njit
def _allocate(code, bits, device_type, device_id, ndim, shape_address):
    """TPEnvAllocTensor for a row-major tensor: the managed tensor's address, 0 on failure
    (the error is recorded)."""
    prototype = np.zeros(6, np.int64)  # DLTensor: data, device, ndim|dtype, shape, strides, byte_offset
    prototype[1] = device_type | (device_id << 32)
    prototype[2] = ndim | (code << 32) | (bits << 40) | (1 << 48)
    prototype[3] = shape_address
    out = np.zeros(1, np.int64)
    if _alloc_tensor(_pointer(prototype.ctypes.data), _pointer(out.ctypes.data)) != 0:
        return 0
    return out[0]


@numba.njit
def _release_tensor(managed):
    value = np.zeros(2, np.int64)
    value[0] = _KTP_TENSOR
    value[1] = managed
    _any_release(_pointer(value.ctypes.data))


@numba.njit
def _float_of(args_address, i):
    return numba.carray(_pointer(args_address + 16 * i + 8), (1,), np.float64)[0]


# ------------------------------------------------------------------ declarations ----
_TYPE = re.compile(r"\s*([a-z0-9_]+)\s*(?:\[\s*(:(?:\s*,\s*:)*|\.\.\.)?\s*\])?\s*")
# The dtypes Numba arrays hold, read from the vocabulary: numpy's integer, float (but not
# float16, which Numba cannot compute with), complex and bool types (DLPack codes int 0,
# uint 1, float 2, complex 5, bool 6), whole bytes only.
_ARRAY_DTYPES = {name: (code, bits) for name, code, bits in _DTYPES
                 if code in (0, 1, 2, 5, 6) and bits >= 8 and name != "float16"}
# int32 is left out: narrowing a Python int could change its value silently.
_SCALARS = {"int64": "int", "float64": "float", "float32": "float", "bool": "bool"}


class _Array:
    def __init__(self, name, dtype, ndim, written):
        # ndim None: any number of dimensions ("float32[...]"), an entry compiled per rank.
        self.name, self.dtype, self.ndim, self.written = name, dtype, ndim, written
        self.code, self.bits = _ARRAY_DTYPES[dtype]

    def ranked(self, ndim):
        return _Array(self.name, self.dtype, ndim, self.written)

    def numba_type(self):
        """The type the entry passes the kernel: read-only unless the kernel writes it."""
        return types.Array(numba.from_dtype(np.dtype(self.dtype)), self.ndim, "A", readonly=not self.written)


class _Scalar:
    def __init__(self, name, dtype):
        self.name, self.dtype, self.kind = name, dtype, _SCALARS[dtype]

    def numba_type(self):
        return types.boolean if self.kind == "bool" else numba.from_dtype(np.dtype(self.dtype))


def _parse_param(where, name, text, written):
    match = _TYPE.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"{where} parameter {name!r}: expected a Numba type such as 'float32[:]', 'float64[:, :]' "
                         f"or 'int64', got {text!r}")
    dtype, dims = match.groups()
    if match.group(0).rstrip().endswith("]"):
        if dtype not in _ARRAY_DTYPES:
            raise ValueError(f"{where} parameter {name!r}: arrays of {dtype} are not supported; dtypes: "
                             f"{', '.join(_ARRAY_DTYPES)}")
        if dims is None:
            raise ValueError(f"{where} parameter {name!r}: an array needs its dimensions ('{dtype}[:]', "
                             f"'{dtype}[:, :]', or '{dtype}[...]' for any number), got {text!r}")
        ndim = None if dims == "..." else dims.count(":")
        return _Array(name, dtype, ndim, written)
    if dtype not in _SCALARS:
        raise ValueError(f"{where} parameter {name!r}: expected an array type ('{dtype}[:]') or a scalar of "
                         f"{', '.join(_SCALARS)}, got {text!r}")
    if written:
        raise ValueError(f"{where} argument 'writes': {name!r} is a scalar; only arrays are written")
    return _Scalar(name, dtype)


# ----------------------------------------------------------------- the generator ----
def _generate(name, params, output):
    """Python source of the entry's body for Numba, and its constants (messages)."""
    consts = {}

    def text(label, value):
        consts[label] = _text(value)
        return label

    arity = len(params)
    lines = [
        "def body(args_address, nargs, result_address):",
        "    result = _words(result_address, 2)",
        "    result[0] = 0",
        "    result[1] = 0",
        f"    if nargs != {arity}:",
        f"        return _fail(TYPE_ERROR, {text('m_arity', f'{name}() takes {arity} arguments, got ')}, "
        "_digits(nargs))",
    ]
    call_args = []
    for i, p in enumerate(params):
        prefix = f"{name}() argument {i + 1} '{p.name}': "
        if isinstance(p, _Array):
            t = f"t{i}"
            lines += [
                f"    {t}_address, {t}_read_only, {t}_kind = _tensor_of(args_address, {i})",
                f"    if {t}_address == 0:",
                f"        return _fail(TYPE_ERROR, {text(f'm{i}_kind', prefix + 'expected a tensor, got ')}, "
                f"_kind_name({t}_kind))",
                f"    {t} = _words({t}_address, 6)",
                f"    {t}_code = ({t}[2] >> 32) & 0xFF",
                f"    {t}_bits = ({t}[2] >> 40) & 0xFF",
                f"    if {t}_code != {p.code} or {t}_bits != {p.bits} or ({t}[2] >> 48) & 0xFFFF != 1:",
                f"        return _fail(TYPE_ERROR, {text(f'm{i}_dtype', prefix + f'expected a {p.dtype} tensor, got ')}, "
                f"_dtype_name({t}_code, {t}_bits))",
                f"    if {t}[2] & 0xFFFFFFFF != {p.ndim}:",
                f"        return _fail(VALUE_ERROR, {text(f'm{i}_ndim', prefix + f'expected a tensor of {p.ndim} dimension' + ('' if p.ndim == 1 else 's') + ', got ')}, "
                f"_digits({t}[2] & 0xFFFFFFFF))",
                f"    if {t}[1] & 0xFFFFFFFF != {_KDL_CPU} and {t}[1] & 0xFFFFFFFF != {_KDL_CUDA_HOST}:",
                f"        return _fail(VALUE_ERROR, {text(f'm{i}_device', prefix + 'expected a CPU tensor, got one on device type ')}, "
                f"_digits({t}[1] & 0xFFFFFFFF))",
            ]
            if p.written:
                lines += [
                    f"    if {t}_read_only:",
                    f"        return _fail(VALUE_ERROR, {text(f'm{i}_read_only', prefix + 'expected a writable tensor (the kernel writes it), got a read-only one')}, "
                    "EMPTY)",
                ]
            dims = ", ".join(f"{t}_shape[{d}]" for d in range(p.ndim)) + ("," if p.ndim == 1 else "")
            byte_strides = ", ".join(f"{t}_strides[{d}] * {p.bits // 8}" for d in range(p.ndim)) + (
                "," if p.ndim == 1 else "")
            lines += [
                f"    {t}_shape = _words({t}[3], {p.ndim})",
                f"    {t}_strides = _strides({t}, {p.ndim})",
                f"    {t}_base = numba.carray(_pointer({t}[0] + {t}[5]), (1,), np.{p.dtype})",
                f"    v{i} = as_strided({t}_base, shape=({dims}), strides=({byte_strides}))",
            ]
            if not p.written:
                lines.append(f"    v{i} = _read_only(v{i})")
        else:
            # What the C++ casters take (caster.h): an int from kTPInt or kTPBool, a float from
            # kTPFloat or kTPInt, a bool from kTPBool or kTPInt (Python callers convert first).
            kinds = {"int": (_KTP_INT, _KTP_BOOL), "float": (_KTP_FLOAT, _KTP_INT),
                     "bool": (_KTP_BOOL, _KTP_INT)}[p.kind]
            condition = " and ".join(f"_k{i} != {k}" for k in kinds)
            article = "an" if p.kind == "int" else "a"
            lines += [
                f"    _k{i} = _words(args_address + {16 * i}, 1)[0] & 0xFFFFFFFF",
                f"    if {condition}:",
                f"        return _fail(TYPE_ERROR, {text(f'm{i}_scalar', prefix + f'expected {article} {p.kind}, got ')}, "
                f"_kind_name(_k{i}))",
            ]
            if p.kind == "float":
                lines.append(f"    v{i} = np.{p.dtype}(_float_of(args_address, {i}) if _k{i} == {_KTP_FLOAT} "
                             f"else _words(args_address + {16 * i + 8}, 1)[0])")
            elif p.kind == "int":
                lines.append(f"    v{i} = np.{p.dtype}(_words(args_address + {16 * i + 8}, 1)[0])")
            else:
                lines.append(f"    v{i} = _words(args_address + {16 * i + 8}, 1)[0] != 0")
        call_args.append(f"v{i}")  # v<i>, not the parameter's name: no clash with the entry's locals
    if output is not None:
        like_name, dtype = output
        like = next(p for p in params if p.name == like_name)
        src = f"t{params.index(like)}"
        code, bits = _ARRAY_DTYPES[dtype]
        lines += [
            f"    managed = _allocate({code}, {bits}, {src}[1] & 0xFFFFFFFF, {src}[1] >> 32, {like.ndim}, {src}[3])",
            "    if managed == 0:",
            "        return -1",
            "    o = _words(managed + 32, 6)",
            f"    out = numba.carray(_pointer(o[0] + o[5]), ({', '.join(f'{src}_shape[{d}]' for d in range(like.ndim))}"
            f"{',' if like.ndim == 1 else ''}), np.{dtype})",
        ]
        call_args.append("out")
    lines += [
        "    try:",
        f"        kernel({', '.join(call_args)})",
        "    except Exception:",
    ]
    if output is not None:
        lines.append("        _release_tensor(managed)")
    lines += [
        f"        return _fail(RUNTIME_ERROR, {text('m_raised', f'{name}(): the Numba kernel raised an exception (compiled code keeps neither its type nor its message; run the function uncompiled to see it)')}, EMPTY)",
    ]
    if output is not None:
        lines += ["    result[0] = 9", "    result[1] = managed"]
    lines.append("    return 0")
    return "\n".join(lines), consts


def kernel(params: dict[str, str], *, writes=(), returns=None, name: str | None = None):
    """Decorator: compile a Python function with Numba into a :class:`tensorplug.Function`.

    ``params`` gives each parameter of the function, in order, a Numba type: an array
    (``"float32[:]"``, ``"float64[:, :]"``: dtype and number of dimensions, or
    ``"float32[...]"``: any number, 0 included) or a scalar (``"int64"``, ``"float64"``,
    ``"bool"``). Arrays are CPU tensors of any strides, passed to the kernel as Numba arrays
    sharing the caller's memory; ``writes`` names the arrays the kernel writes (kind
    ``mview``: a read-only tensor is refused before the call). Every other array reaches the
    kernel read-only: a kernel that writes one is refused with a ValueError naming the
    kernel and the parameter (Numba finds the write when it compiles), so read-only numpy
    arrays and jax arrays are never modified. ``returns=tensorplug.like("x")`` (optionally
    with ``dtype=``) makes the kernel allocating: the function takes one more, last,
    parameter, the output array, allocated through the caller's allocator (so numpy callers
    get numpy arrays, torch callers torch tensors, and inside ``jax.jit`` XLA's buffer), and
    the tensorplug function returns it. Pass the same rule to :func:`tensorplug.op`.

    ``name`` (default: the function's) names the function in messages. The entry is
    compiled when the decorator runs (Numba's compile time, a second or so); with arrays of
    any number of dimensions, an entry per combination of their ranks is compiled on the
    first call that has it (the refusal of a write then comes from that call) and kept.
    Raises ValueError for a declaration that does not fit the function.
    """
    def decorate(fn):
        fname = name or fn.__name__
        where = f"tensorplug.numba.kernel({fname!r})"
        if not isinstance(params, dict):
            raise TypeError(f"{where} argument 'params': expected a dict of parameter name -> Numba type, "
                            f"got {type(params).__name__}")
        written = (writes,) if isinstance(writes, str) else tuple(writes)
        for w in written:
            if w not in params:
                raise ValueError(f"{where} argument 'writes': {w!r} is not a parameter ({', '.join(params)})")
        declared = [_parse_param(where, n, t, n in written) for n, t in params.items()]
        output = _output_rule(where, returns, declared)
        expected = [*params, *(["<output>"] if output is not None else [])]
        actual = list(inspect.signature(fn).parameters)
        if len(actual) != len(expected) or actual[:len(params)] != list(params):
            raise ValueError(f"{where}: the function's parameters ({', '.join(actual)}) do not match 'params' "
                             f"({', '.join(expected)}); an allocating kernel takes its output last")
        kinds = [("mview" if p.written else "view") if isinstance(p, _Array) else p.kind for p in declared]
        signature = ";".join(f"{p.name}:{k}" for p, k in zip(declared, kinds))
        signature += "->tensor" if output is not None else "->void"
        compiled = numba.njit(fn)
        if any(isinstance(p, _Array) and p.ndim is None for p in declared):
            owner = _Ranked(fname, where, fn, compiled, declared, output)
            return function_from_pointer(owner.entry.address, signature, name=fname, owner=owner)
        entry = _entry(fname, where, fn, compiled, declared, output)
        return function_from_pointer(entry.address, signature, name=fname, owner=entry)
    return decorate


def _entry(fname, where, fn, compiled, declared, output):
    """The ``TPPackedFunc`` cfunc of ``fn`` for parameters of fixed ranks (``compiled``, its
    Numba dispatcher, shared by every rank); ValueError when the kernel writes an array not
    declared written."""
    _compile_kernel(where, fn, compiled, declared, output)
    source, consts = _generate(fname, declared, output)
    namespace = {
        "numba": numba, "np": np, "as_strided": np.lib.stride_tricks.as_strided, "kernel": compiled,
        "_words": _words, "_tensor_of": _tensor_of, "_strides": _strides, "_fail": _fail, "_digits": _digits,
        "_dtype_name": _dtype_name, "_kind_name": _kind_name, "_pointer": _pointer, "_float_of": _float_of,
        "_allocate": _allocate, "_release_tensor": _release_tensor, "_read_only": _read_only,
        "TYPE_ERROR": _text("TypeError\0"), "VALUE_ERROR": _text("ValueError\0"),
        "RUNTIME_ERROR": _text("RuntimeError\0"), "EMPTY": np.zeros(0, np.uint8), **consts,
    }
    exec(compile(source, f"<tensorplug.numba entry of {fname}>", "exec"), namespace)
    body = numba.njit(namespace["body"])

    @numba.cfunc(types.int32(types.voidptr, types.voidptr, types.int32, types.voidptr))
    def entry(self, args, nargs, result):
        address = _address(args)
        status = body(address, nargs, _address(result))
        _release_moved(address, nargs)
        return status
    return entry


def _kernel_types(declared, output, writable=()):
    """The Numba types the entry passes the kernel (arrays named in ``writable`` writable)."""
    arguments = []
    for p in declared:
        if isinstance(p, _Array) and p.name in writable:
            p = _Array(p.name, p.dtype, p.ndim, True)
        arguments.append(p.numba_type())
    if output is not None:
        like_name, dtype = output
        like = next(p for p in declared if p.name == like_name)
        arguments.append(types.Array(numba.from_dtype(np.dtype(dtype)), like.ndim, "C"))
    return tuple(arguments)


def _compile_kernel(where, fn, compiled, declared, output):
    """Compile the kernel for the types the entry passes it. A write to an array not
    declared written is refused here: a ValueError naming each such parameter (found by
    compiling again with one array at a time writable, on this error path only)."""
    try:
        compiled.compile(_kernel_types(declared, output))
    except TypingError as error:
        if "readonly array" not in str(error):
            raise
        read_only = [p.name for p in declared if isinstance(p, _Array) and not p.written]
        culprits = []
        for candidate in read_only:
            try:
                numba.njit(fn).compile(_kernel_types(declared, output, writable=set(read_only) - {candidate}))
            except TypingError as again:
                if "readonly array" in str(again):
                    culprits.append(candidate)
        named = ", ".join(repr(n) for n in culprits or read_only)
        raise ValueError(f"{where}: the kernel writes {'parameter' if len(culprits) == 1 else 'parameters'} "
                         f"{named}, not declared in 'writes' (every other array reaches the kernel read-only); "
                         f"add {'it' if len(culprits) == 1 else 'them'} to writes=") from None


# ------------------------------------------------------------- arrays of any rank ----
# A kernel with "dtype[...]" parameters gets one cfunc entry of its own, the dispatcher: it
# reads the rank of each such argument, looks the combination up in a table of compiled
# entries (a numpy array the owner keeps; read without the GIL), and calls that entry. A
# combination not in the table calls back into Python (a ctypes callback, which takes the
# GIL), where the entry for those ranks is compiled (as a fixed-rank kernel's), kept and
# added to the table. Keys: 1, then 7 bits per such argument (ranks up to 127, at most 8
# such parameters).
_RANK_BITS, _MAX_RANKED = 7, 8
_TABLE_SLOTS = 64  # combinations the table holds; more are found through the callback
_SPECIALIZE = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)
_lib.TPErrorSet.argtypes = (ctypes.c_char_p, ctypes.c_char_p)
_lib.TPErrorSet.restype = None


class _Ranked:
    """The owner of a kernel with arrays of any rank: the dispatcher entry, the callback,
    the table and the entry compiled for each combination of ranks."""

    def __init__(self, fname, where, fn, compiled, declared, output):
        self.fname, self.where, self.fn, self.compiled = fname, where, fn, compiled
        self.declared, self.output = declared, output
        self.ranked = [i for i, p in enumerate(declared) if isinstance(p, _Array) and p.ndim is None]
        if len(self.ranked) > _MAX_RANKED:
            raise ValueError(f"{where} argument 'params': at most {_MAX_RANKED} arrays of any rank ('...'), "
                             f"got {len(self.ranked)}")
        self.table = np.zeros(1 + 2 * _TABLE_SLOTS, np.int64)  # count, then (key, entry address) pairs
        self.entries = {}  # key -> cfunc
        self.lock = threading.Lock()
        self.callback = _SPECIALIZE(self._specialize)
        self.entry = self._dispatcher()

    def _specialize(self, key):
        """The address of the entry for the ranks in ``key`` (compiled now if new), or 0 with
        the thread's error set. Runs as a ctypes callback: raises nothing."""
        try:
            with self.lock:
                entry = self.entries.get(key)
                if entry is None:
                    ranks, k = [], key
                    for _ in self.ranked:
                        ranks.append(k & ((1 << _RANK_BITS) - 1))
                        k >>= _RANK_BITS
                    ndims = dict(zip(self.ranked, reversed(ranks)))
                    declared = [p.ranked(ndims[i]) if i in ndims else p for i, p in enumerate(self.declared)]
                    entry = _entry(self.fname, self.where, self.fn, self.compiled, declared, self.output)
                    self.entries[key] = entry
                    n = int(self.table[0])
                    if n < _TABLE_SLOTS:
                        self.table[1 + 2 * n], self.table[2 + 2 * n] = key, entry.address
                        self.table[0] = n + 1
                return entry.address
        except Exception as error:  # noqa: BLE001 - reported through the call's error
            kind = type(error).__name__ if isinstance(error, (ValueError, TypeError)) else "RuntimeError"
            _lib.TPErrorSet(kind.encode(), f"{error}".encode(errors="replace"))
            return 0

    def _dispatcher(self):
        arity = len(self.declared)
        consts = {"m_arity": _text(f"{self.fname}() takes {arity} arguments, got ")}
        lines = [
            "def dispatch(self, args, nargs, result):",
            "    address = _address(args)",
            "    out = _words(_address(result), 2)",
            "    out[0] = 0",
            "    out[1] = 0",
            f"    if nargs != {arity}:",
            "        _release_moved(address, nargs)",
            "        return _fail(TYPE_ERROR, m_arity, _digits(nargs))",
            "    key = 1",
        ]
        for i in self.ranked:
            p = self.declared[i]
            prefix = f"{self.fname}() argument {i + 1} '{p.name}': "
            consts[f"m{i}_kind"] = _text(prefix + "expected a tensor, got ")
            consts[f"m{i}_rank"] = _text(prefix + f"expected a tensor of at most {(1 << _RANK_BITS) - 1} "
                                                  "dimensions, got ")
            lines += [
                f"    t{i}_address, t{i}_read_only, t{i}_kind = _tensor_of(address, {i})",
                f"    if t{i}_address == 0:",
                "        _release_moved(address, nargs)",
                f"        return _fail(TYPE_ERROR, m{i}_kind, _kind_name(t{i}_kind))",
                f"    t{i}_ndim = _words(t{i}_address, 3)[2] & 0xFFFFFFFF",
                f"    if t{i}_ndim >= {1 << _RANK_BITS}:",
                "        _release_moved(address, nargs)",
                f"        return _fail(VALUE_ERROR, m{i}_rank, _digits(t{i}_ndim))",
                f"    key = (key << {_RANK_BITS}) | t{i}_ndim",
            ]
        lines += [
            f"    table = _words({self.table.ctypes.data}, {1 + 2 * _TABLE_SLOTS})",
            "    target = 0",
            "    for s in range(table[0]):",
            "        if table[1 + 2 * s] == key:",
            "            target = table[2 + 2 * s]",
            "            break",
            "    if target == 0:",
            f"        target = _call_int({ctypes.cast(self.callback, ctypes.c_void_p).value}, key)",
            "        if target == 0:",
            "            _release_moved(address, nargs)",
            "            return -1",
            "    return _call_entry(target, self, args, nargs, result)",
        ]
        namespace = {"_address": _address, "_words": _words, "_release_moved": _release_moved, "_fail": _fail,
                     "_digits": _digits, "_tensor_of": _tensor_of, "_kind_name": _kind_name, "_call_int": _call_int,
                     "_call_entry": _call_entry, "TYPE_ERROR": _text("TypeError\0"),
                     "VALUE_ERROR": _text("ValueError\0"), **consts}
        exec(compile("\n".join(lines), f"<tensorplug.numba dispatcher of {self.fname}>", "exec"), namespace)
        return numba.cfunc(types.int32(types.voidptr, types.voidptr, types.int32, types.voidptr))(
            namespace["dispatch"])


def _output_rule(where, returns, declared):
    """(the name of the array parameter the output is like, its dtype) or None."""
    if returns is None:
        return None
    arrays = {p.name: p for p in declared if isinstance(p, _Array)}
    if not isinstance(returns, Output) or not isinstance(returns.shape, str) or returns.shape not in arrays or \
            returns.device not in (None, returns.shape):
        raise ValueError(f"{where} argument 'returns': expected tensorplug.like(<array parameter>) (optionally "
                         f"with dtype=), got {returns!r}")
    like = arrays[returns.shape]
    dtype = like.dtype if returns.dtype == returns.shape else returns.dtype
    if dtype not in _ARRAY_DTYPES:
        raise ValueError(f"{where} argument 'returns': dtype {dtype!r} is not one of {', '.join(_ARRAY_DTYPES)}")
    return like.name, dtype
