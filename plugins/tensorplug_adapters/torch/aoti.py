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

The record (version :data:`RECORD_VERSION`) is JSON: ``{"version": 3, "ops": [entry, ...]}``,
each entry an op's ``name``, kernel ``library`` (absolute path) and ``function``, ``returns``
(its output rule as declared, which :func:`load_package` declares the op with),
``writes``, ``schema`` (torch's, without the name), ``overloads`` (the overload names Python
registers: ``""``, ``"mutable"`` for an op that writes, ``"nograd"``, ``"grad"``), and the
parts of the op's call plan as :func:`tensorplug.plans.create` takes them: ``params`` (name,
kind, optional, written, and besides: ``code``, the kind's ``TPParamKind``
(:data:`tensorplug.plans.PARAM_KINDS`, None for a kind the plan cannot pass) and
``contiguous``, declared with ``contiguous=``), ``n_outputs`` (the
number of results) and ``outputs`` (the output rule's one compiled form,
:func:`tensorplug.plans.compile_outputs`: the encoding of ``plan.h``'s ``TPOutputRule``, which
the C++ registration library hands to ``TPPlanCreate``). Version 1 records (no ``version``
key) hold the first five; version 2 records hold ``params`` and ``outputs`` (then the number
of results) and a rule form of their own. :func:`load_package` reads every version, the C++
library version 3 only.
"""

from __future__ import annotations

import json
import os
import zipfile

import tensorplug
from tensorplug import Output, plans
from tensorplug.shapes import dtype_name

#: The records' names inside the package (a zip archive whose entries all sit in one root
#: folder): one file per add_ops call, among the archive's extra files.
RECORDS = "extra/tensorplug_ops_"
#: The record format :func:`add_ops` writes (serving.cc reads this version only).
RECORD_VERSION = 3


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
                        "params": [{"name": p.name, "kind": p.kind, "code": plans.PARAM_KINDS.get(p.kind),
                                    "optional": p.optional, "written": p.written,
                                    "contiguous": p.name in op.contiguous} for p in op.params],
                        "n_outputs": op.n_outputs, "outputs": _compiled_outputs(op)})
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
        out.append(record)
    return {"tuple": isinstance(op.returns, tuple), "rules": out}


def _compiled_outputs(op) -> list:
    """``op``'s output rule in the call plan's encoding (what serving.cc hands TPPlanCreate)."""
    try:
        return [list(rule) for rule in plans.compile_outputs(op)]
    except plans.NotCompilable as e:
        raise ValueError(f"aoti.add_ops: op {op.name!r} cannot be recorded: {e}") from None


def _rule_from(record):
    if record is None:
        return None
    rules = tuple(Output(tuple(r["shape"]) if isinstance(r["shape"], list) else r["shape"], r["dtype"], r["device"])
                  for r in record["rules"])
    return rules if record["tuple"] else rules[0]
