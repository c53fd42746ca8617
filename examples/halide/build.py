"""Halide pipelines, generated ahead of time, shipped as a tensorplug kernel library.

Three steps, each a function:

1. :func:`generate`: Halide's Python package compiles two pipelines to object files and C
   headers (target feature ``no_runtime``: they call Halide's runtime, they do not carry
   it), and the runtime itself to one more object file.
2. :func:`build_runtime`: the runtime library (``halide_runtime.cc`` with Halide's runtime
   linked in), built with ``tensorplug.cpp.build``. It keeps Halide's state and registers
   the module kind ``halide`` (global function ``load_from_bytes.halide``).
3. :func:`build_kernels`: the kernel library: the pipelines' shared object, embedded as a
   module of kind ``halide`` in ``__tensorplug__library_bin``, and a host function.

Loading: ``tensorplug.load_library(runtime, global_symbols=True)`` once, then
``tensorplug.load_module(kernels)``; ``python build.py DIR`` does all and calls them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PIPELINES = ("brighten", "blur3", "offset")


def generate(work: Path) -> dict[str, Path]:
    """Object files of the pipelines and of Halide's runtime, for the host CPU."""
    import halide as hl

    work.mkdir(parents=True, exist_ok=True)
    target = hl.get_host_target()
    x, y = hl.Var("x"), hl.Var("y")

    # brighten(input, alpha, out): out = alpha * input + 1, float32, any length.
    source = hl.ImageParam(hl.Float(32), 1, "input")
    alpha = hl.Param(hl.Float(32), "alpha")
    brighten = hl.Func("brightened")
    brighten[x] = alpha * source[x] + 1
    brighten.vectorize(x, 8, hl.TailStrategy.GuardWithIf)

    # blur3(image, out): 3-tap horizontal box blur of a 2-D float32 image, edges clamped.
    # numpy's row-major (rows, columns) is Halide's (x = column, y = row).
    image = hl.ImageParam(hl.Float(32), 2, "image")
    clamped = hl.BoundaryConditions.repeat_edge(image)
    blur3 = hl.Func("blurred")
    blur3[x, y] = (clamped[x - 1, y] + clamped[x, y] + clamped[x + 1, y]) / 3
    blur3.parallel(y).vectorize(x, 8, hl.TailStrategy.GuardWithIf)

    # offset(values, n, out): out = values + n, int32 values and an int8 n.
    values = hl.ImageParam(hl.Int(32), 1, "values")
    n = hl.Param(hl.Int(8), "n")
    offset = hl.Func("offsets")
    offset[x] = values[x] + hl.cast(hl.Int(32), n)

    # Halide assumes a dense innermost dimension unless told otherwise: any strides here
    # (transposed, reversed, every other element), at the price of gathered loads.
    for buffer in (source, image, values, brighten.output_buffer(), blur3.output_buffer(), offset.output_buffer()):
        buffer.dim(0).set_stride(hl.Expr())

    objects = {}
    for name, func, params in (("brighten", brighten, [source, alpha]), ("blur3", blur3, [image]),
                               ("offset", offset, [values, n])):
        objects[name] = work / f"{name}.o"
        func.compile_to({hl.OutputFileType.object: str(objects[name]),
                         hl.OutputFileType.c_header: str(work / f"{name}.h")},
                        params, name, target.with_feature(hl.TargetFeature.NoRuntime))
    objects["runtime"] = work / "halide_runtime.o"
    hl.compile_standalone_runtime(str(objects["runtime"]), target)
    return objects


def halide_include_dir() -> Path:
    import halide

    return Path(halide.__file__).parent / "include"


def build_runtime(work: Path, runtime_object: Path) -> Path:
    """The runtime library: halide_runtime.cc and Halide's runtime object."""
    from tensorplug import cpp

    return cpp.build("tp_halide_runtime", [HERE / "halide_runtime.cc"],
                     extra_cflags=[f"-I{halide_include_dir()}"], extra_ldflags=[str(runtime_object), "-ldl"],
                     build_directory=work / "runtime")


def build_kernels(work: Path, objects: dict[str, Path]) -> Path:
    """The kernel library embedding the pipelines as a `halide` module."""
    from tensorplug import cpp, library_bin

    pipelines = work / "pipelines.so"
    # A plain shared object: the runtime's symbols stay undefined, resolved when it is loaded.
    subprocess.run(["c++", "-shared", "-o", str(pipelines), *(str(objects[n]) for n in PIPELINES)], check=True)
    payload = ",".join(PIPELINES).encode() + b"\n" + pipelines.read_bytes()
    assembly = library_bin.write_assembly(library_bin.pack([("halide", payload)]), work / "bin")
    host = work / "host.c"
    host.write_text(
        "#include <tensorplug/c_api.h>\n"
        "/* pipelines() -> the names of the embedded Halide pipelines. */\n"
        f'static const char kNames[] = "{",".join(PIPELINES)}";\n'
        "TP_EXPORT const char* __tensorplugsig_pipelines(void) { return \"->str\"; }\n"
        "TP_EXPORT int __tensorplug_pipelines(void* self, const TPAny* args, int32_t nargs, TPAny* result) {\n"
        "  (void)self;\n  (void)args;\n"
        "  if (nargs != 0) {\n    TPErrorSet(\"TypeError\", \"pipelines() takes no arguments\");\n    return -1;\n  }\n"
        "  result->type_index = kTPStr;\n"
        "  result->v_str = TPStringCreate(kNames, sizeof kNames - 1);\n"
        "  return result->v_str != NULL ? 0 : -1;\n}\n")
    return cpp.build("halide_kernels", [host, assembly], build_directory=work / "kernels")


def build(work: Path) -> tuple[Path, Path]:
    """(runtime library, kernel library) built in ``work``."""
    objects = generate(work / "generated")
    return build_runtime(work, objects["runtime"]), build_kernels(work, objects)


if __name__ == "__main__":
    import numpy as np

    import tensorplug

    runtime, kernels = build(Path(sys.argv[1] if len(sys.argv) > 1 else "build-halide"))
    tensorplug.load_library(runtime, global_symbols=True)
    module = tensorplug.load_module(kernels)
    out = np.empty(4, np.float32)
    module.brighten(np.arange(4, dtype=np.float32), 2.0, out)
    print(module, out)
