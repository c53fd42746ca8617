"""tvm-ffi's calling convention for tensorplug kernel libraries: ``tensorplug.cpp.build(...,
export_tvm_ffi=True)`` (and ``load``, ``load_inline``).

Such a library also exports ``__tvm_ffi_<name>`` (tvm-ffi's packed signature) beside each
``__tensorplug_<name>``, so ``tvm_ffi.load_module(path)`` (and a framework calling tvm-ffi
functions) calls it. The entries come from a translation unit generated here: ``export.cc``
(the conversion, written against tvm-ffi's C ABI without its headers or its runtime library)
and one ``TENSORPLUG_TVM_FFI_EXPORT(name)`` line per function. The names are read from the
sources' ``TENSORPLUG_EXPORT(name, ...)`` lines; the built library's symbol table is then
checked, and a library whose exports differ (functions exported another way) is built again
with the names it has. docs/migration.md, "The other direction", is the user's page.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["build_with_exports", "exported_names", "shim_source"]

_SOURCE = Path(__file__).with_name("export.cc")
_EXPORT = re.compile(r"\bTENSORPLUG_EXPORT\s*\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*,")


def exported_names(sources) -> list[str]:
    """The function names of the ``TENSORPLUG_EXPORT`` lines of the source files ``sources``
    (in order, once each; the macro's own definition is not a line of a source)."""
    names: list[str] = []
    for src in sources:
        try:
            text = Path(src).read_text(errors="replace")
        except OSError:
            continue  # build() names the missing source
        names += _EXPORT.findall(text)
    return list(dict.fromkeys(names))


def shim_source(functions) -> str:
    """The generated translation unit: export.cc and one export line per function."""
    return (_SOURCE.read_text() + "\n// The library's functions.\n"
            + "".join(f"TENSORPLUG_TVM_FFI_EXPORT({f})\n" for f in functions))


def build_with_exports(sources, build, write_shim):
    """``build(sources)`` (cpp's build step, returning (path, digest)) of ``sources`` and the
    generated exports, which ``write_shim(text)`` writes into the build cache (returning its
    path; cpp's, so that this module imports nothing of cpp); built again when the library's
    tensorplug functions are not the names the sources' export lines gave."""
    from ..hub._elf import read_elf

    sources = [sources] if isinstance(sources, (str, Path)) else list(sources)
    names = exported_names(sources)
    for _ in range(2):
        path, digest = build([*sources, write_shim(shim_source(names))])
        facts = read_elf(Path(path).read_bytes(), path)
        if list(facts.functions) and sorted(facts.functions) == sorted(facts.tvm_ffi_functions) == sorted(names):
            return path, digest
        names = sorted(facts.functions)
    raise RuntimeError(f"build() with export_tvm_ffi=True: library '{path}' exports the tensorplug functions "
                       f"{', '.join(facts.functions) or '(none)'} but the tvm-ffi functions "
                       f"{', '.join(facts.tvm_ffi_functions) or '(none)'}")
