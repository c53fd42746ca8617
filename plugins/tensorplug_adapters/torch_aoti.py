"""AOTInductor packages that call tensorplug ops, and the process that runs them.

A model exported with ``torch.export`` and packaged with
``torch._inductor.aoti_compile_and_package`` calls each tensorplug op through torch's
dispatcher (AOTInductor's proxy executor, C++), which finds the op's native kernel
(:mod:`tensorplug_adapters.torch_native`). A fresh process must have the ops registered
before it loads the package. :func:`add_ops` records, inside the package, the ops of the
kernel libraries the model uses (each op's name, kernel library, function, output rule and
written parameters); :func:`load_package` in the fresh process loads those libraries,
declares their ops from the record and loads the package: the process itself declares
nothing::

    torch._inductor.aoti_compile_and_package(exported, package_path=path)
    torch_aoti.add_ops(path, kernels, [scale, axpy])   # kernels: the tensorplug.Module

    # another process
    model = torch_aoti.load_package(path)              # imports torch; loads the libraries
    y = model(x)

The process needs Python: the native kernels are registered by tensorplug's extension
module. Ops whose output rule is a Python shape function cannot be recorded (ValueError).
"""

from __future__ import annotations

import json
import zipfile

import tensorplug
from tensorplug import Output
from tensorplug.shapes import dtype_name

#: The records' names inside the package (a zip archive whose entries all sit in one root
#: folder): one file per add_ops call, among the archive's extra files.
RECORDS = "extra/tensorplug_ops_"


def _records(archive) -> tuple[str, list[str]]:
    """The record name prefix of ``archive`` and the records in it."""
    names = archive.namelist()
    prefix = names[0].partition("/")[0] + "/" + RECORDS
    return prefix, sorted(name for name in names if name.startswith(prefix))


def add_ops(package_path: str, module, ops) -> None:
    """Record in the package at ``package_path`` the tensorplug ``ops`` whose functions come
    from kernel library ``module`` (a :class:`tensorplug.Module`). ValueError for an op of
    another library, or one whose output rule is a Python shape function."""
    entries = []
    for op in ops:
        fn = op.function.__name__
        if getattr(module, fn, None) is not op.function:
            raise ValueError(f"torch_aoti.add_ops: op {op.name!r} calls {fn}, which is not a function of {module!r}")
        entries.append({"name": op.name, "library": module.path, "function": fn, "returns": _rule_record(op),
                        "writes": list(op.written)})
    with zipfile.ZipFile(package_path, "a") as archive:
        prefix, records = _records(archive)
        archive.writestr(f"{prefix}{len(records)}.json", json.dumps({"ops": entries}, indent=1))


def load_package(package_path: str, **kwargs):
    """Load the kernel libraries recorded in the package, declare their ops (unless this
    process declared them already) and return ``torch._inductor.aoti_load_package(package_path,
    **kwargs)``."""
    from torch._inductor import aoti_load_package  # imports torch: the ops register as they are declared

    with zipfile.ZipFile(package_path) as archive:
        entries = [entry for name in _records(archive)[1] for entry in json.loads(archive.read(name))["ops"]]
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
            raise ValueError(f"torch_aoti.add_ops: op {op.name!r} has a Python shape function as its output rule, "
                             "which a package cannot carry; declare it as tensorplug.Output or tensorplug.like")
        out.append({"shape": list(rule.shape) if isinstance(rule.shape, (list, tuple)) else rule.shape,
                    "dtype": rule.dtype if isinstance(rule.dtype, str) else dtype_name(rule.dtype),
                    "device": None if rule.device is None else str(rule.device)})
    return {"tuple": isinstance(op.returns, tuple), "rules": out}


def _rule_from(record):
    if record is None:
        return None
    rules = tuple(Output(tuple(r["shape"]) if isinstance(r["shape"], list) else r["shape"], r["dtype"], r["device"])
                  for r in record["rules"])
    return rules if record["tuple"] else rules[0]
