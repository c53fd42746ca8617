"""AOTInductor packages that call tensorplug ops, and the process that runs them.

A model exported with ``torch.export`` and packaged with
``torch._inductor.aoti_compile_and_package`` calls each tensorplug op through torch's
dispatcher (AOTInductor's proxy executor, C++), which finds the op's native kernel
(:mod:`tensorplug_adapters.torch.native`). A fresh process must have the ops registered
before it loads the package. :func:`add_ops` records, inside the package, the ops of the
kernel libraries the model uses (each op's name, kernel library, function, output rule and
written parameters); :func:`load_package` in the fresh process loads those libraries,
declares their ops from the record and loads the package: the process itself declares
nothing::

    torch._inductor.aoti_compile_and_package(exported, package_path=path)
    aoti.add_ops(path, kernels, [scale, axpy])        # kernels: the tensorplug.Module

    # another process
    model = aoti.load_package(path)                    # imports torch; loads the libraries
    y = model(x)

A C++ process without Python registers the recorded ops with the registration library
of :mod:`tensorplug_adapters.torch.serving` before it loads the package;
:func:`native_libraries` lists what such a deployment ships. Ops whose output rule is a
Python shape function cannot be recorded (ValueError).

The record (version :data:`RECORD_VERSION`) is JSON: ``{"version": 2, "ops": [entry, ...]}``,
each entry an op's ``name``, kernel ``library`` (absolute path) and ``function``, ``returns``
(its output rule as declared, plus ``program``: the rule compiled into the form the C++
registration library evaluates, see :func:`_rule_program`), ``writes``, ``schema`` (torch's,
without the name), ``overloads`` (the overload names Python registers: ``""``, ``"mutable"``
for an op that writes, ``"nograd"``, ``"grad"``), ``params``
(name, kind, optional, written, contiguous: declared with ``contiguous=``) and ``outputs``
(the number of results). Version 1 records (no ``version`` key) lack the
last four; :func:`load_package` reads both, the C++ library version 2 only.
"""

from __future__ import annotations

import ast
import json
import os
import zipfile

import tensorplug
from tensorplug import Output
from tensorplug.ops import TENSOR_KINDS
from tensorplug.shapes import dtype_name

#: The records' names inside the package (a zip archive whose entries all sit in one root
#: folder): one file per add_ops call, among the archive's extra files.
RECORDS = "extra/tensorplug_ops_"
#: The record format :func:`add_ops` writes (serving.cc reads this version only).
RECORD_VERSION = 2


def _records(archive) -> tuple[str, list[str]]:
    """The record name prefix of ``archive`` and the records in it."""
    names = archive.namelist()
    prefix = names[0].partition("/")[0] + "/" + RECORDS
    return prefix, sorted(name for name in names if name.startswith(prefix))


def add_ops(package_path: str, module, ops) -> None:
    """Record in the package at ``package_path`` the tensorplug ``ops`` whose functions come
    from kernel library ``module`` (a :class:`tensorplug.Module`). ValueError for an op of
    another library, or one whose output rule is a Python shape function."""
    from .registration import FUNCTIONALIZABLE, GRAD, NO_GRAD, schema

    entries = []
    for op in ops:
        fn = op.function.__name__
        if getattr(module, fn, None) is not op.function:
            raise ValueError(f"aoti.add_ops: op {op.name!r} calls {fn}, which is not a function of {module!r}")
        entries.append({"name": op.name, "library": os.path.abspath(module.path), "function": fn,
                        "returns": _rule_record(op), "writes": list(op.written), "schema": schema(op),
                        "overloads": ["", *([FUNCTIONALIZABLE] if op.written else []), NO_GRAD, GRAD],
                        "params": [{"name": p.name, "kind": p.kind, "optional": p.optional, "written": p.written,
                                    "contiguous": p.name in op.contiguous} for p in op.params],
                        "outputs": op.n_outputs})
    write_record(package_path, entries)


def write_record(package_path: str, entries: list) -> None:
    """Append a record of the op ``entries`` (dicts as :func:`add_ops` makes them) to the
    package: :func:`add_ops`'s last step, public so a deployment (or a test) can rewrite
    what :func:`records` read, such as a kernel library's path after moving it."""
    with zipfile.ZipFile(package_path, "a") as archive:
        prefix, records = _records(archive)
        archive.writestr(f"{prefix}{len(records)}.json",
                         json.dumps({"version": RECORD_VERSION, "ops": entries}, indent=1))


def records(package_path: str) -> list:
    """The op entries recorded in the package, in the order they were added."""
    with zipfile.ZipFile(package_path) as archive:
        return [entry for name in _records(archive)[1] for entry in json.loads(archive.read(name))["ops"]]


def native_libraries(package_path: str, *, torch=None) -> list[str]:
    """What a C++ process without Python loads to run the package, in load order:
    ``libtensorplug.so``, the registration library :func:`serving.build` made for this
    torch (built now if it is not cached), then each kernel library the record names (first
    use first, each once). A deployment ships these files (and libtorch); docs/compilers.md
    shows the C++ side. Raises :class:`tensorplug.cpp.BuildError` when the registration
    library cannot be built."""
    from tensorplug import cpp

    from . import serving

    libraries = [os.path.join(cpp.lib_dir(), "libtensorplug.so"), serving.build(torch)]
    for entry in records(package_path):
        if entry["library"] not in libraries:
            libraries.append(entry["library"])
    return libraries


def load_package(package_path: str, **kwargs):
    """Load the kernel libraries recorded in the package, declare their ops (unless this
    process declared them already) and return ``torch._inductor.aoti_load_package(package_path,
    **kwargs)``."""
    from torch._inductor import aoti_load_package  # imports torch: the ops register as they are declared

    entries = records(package_path)
    modules: dict[str, object] = {}
    for entry in entries:
        if tensorplug.get_op(entry["name"]) is not None:
            continue
        module = modules.get(entry["library"])
        if module is None:
            module = modules[entry["library"]] = tensorplug.load_module(entry["library"])
        tensorplug.op(entry["name"], getattr(module, entry["function"]), returns=_rule_from(entry["returns"]),
                      writes=tuple(entry["writes"]))
    return aoti_load_package(package_path, **kwargs)


def _rule_record(op):
    if op.returns is None:
        return None
    rules = op.returns if isinstance(op.returns, tuple) else (op.returns,)
    out = []
    for rule in rules:
        if not isinstance(rule, Output):
            raise ValueError(f"aoti.add_ops: op {op.name!r} has a Python shape function as its output rule, "
                             "which a package cannot carry; declare it as tensorplug.Output or tensorplug.like")
        record = {"shape": list(rule.shape) if isinstance(rule.shape, (list, tuple)) else rule.shape,
                  "dtype": rule.dtype if isinstance(rule.dtype, str) else dtype_name(rule.dtype),
                  "device": None if rule.device is None else str(rule.device)}
        record["program"] = _rule_program(record, op.params)
        out.append(record)
    return {"tuple": isinstance(op.returns, tuple), "rules": out}


# The binary operators of a dimension program: Python's meaning (// and % floor).
_PROGRAM_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Mod: "%"}


def _rule_program(rule: dict, params) -> dict:
    """One output rule in the form serving.cc evaluates without Python, so the C++
    process checks results as the Python one does, as far as this form reaches:

    - ``shape``: ``["like", i]`` (the shape of tensor parameter i), or a list with one item
      per dimension, each a postfix program (``[["shape", i, k], ["int", 2], ["*"]]``: items
      ``["const", c]``, ``["int", i]`` (int parameter i), ``["shape", i, k]`` (dimension k of
      tensor parameter i, negative from the end), ``["+"]``, ``["-"]``, ``["*"]``, ``["//"]``,
      ``["%"]``, ``["neg"]``) or None where the dimension uses what the C++ library does not
      take (int lists, tensor lists): that dimension, or the whole shape (None), is not checked;
    - ``dtype``: ``["param", i]`` (tensor parameter i's dtype) or ``["fixed", name]``, None
      where unchecked (a dtype parameter);
    - ``device``: ``["param", i]``, ``["fixed", "cpu"]`` or ``["primary"]`` (the first tensor
      argument's device, CPU when none), None where unchecked (a device parameter)."""
    index = {p.name: i for i, p in enumerate(params)}
    kinds = {p.name: p.kind for p in params}
    tensors = TENSOR_KINDS

    def dim(expr):
        if isinstance(expr, int):
            return [["const", expr]]
        try:
            tree = ast.parse(expr.strip(), mode="eval").body
        except SyntaxError:
            return None
        out = []

        def walk(node):
            if isinstance(node, ast.Constant) and type(node.value) is int:
                out.append(["const", node.value])
            elif isinstance(node, ast.Name) and kinds.get(node.id) == "int":
                out.append(["int", index[node.id]])
            elif isinstance(node, ast.BinOp) and type(node.op) in _PROGRAM_OPS:
                walk(node.left)
                walk(node.right)
                out.append([_PROGRAM_OPS[type(node.op)]])
            elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
                walk(node.operand)
                out.append(["neg"])
            elif (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute)
                  and node.value.attr == "shape" and isinstance(node.value.value, ast.Name)
                  and kinds.get(node.value.value.id) in tensors):
                k = ast.literal_eval(node.slice)
                out.append(["shape", index[node.value.value.id], int(k)])
            else:
                raise LookupError
        try:
            walk(tree)
        except (LookupError, ValueError):
            return None
        return out

    shape = rule["shape"]
    if isinstance(shape, str):
        program_shape = ["like", index[shape]] if kinds.get(shape) in tensors else None
    else:
        program_shape = [dim(d) for d in shape]
    dtype = rule["dtype"]
    program_dtype = (["param", index[dtype]] if kinds.get(dtype) in tensors else
                     None if dtype in kinds else ["fixed", dtype])
    device = rule["device"]
    program_device = (["primary"] if device is None else ["param", index[device]] if kinds.get(device) in tensors
                      else None if device in kinds else ["fixed", device])
    return {"shape": program_shape, "dtype": program_dtype, "device": program_device}


def _rule_from(record):
    if record is None:
        return None
    rules = tuple(Output(tuple(r["shape"]) if isinstance(r["shape"], list) else r["shape"], r["dtype"], r["device"])
                  for r in record["rules"])
    return rules if record["tuple"] else rules[0]
