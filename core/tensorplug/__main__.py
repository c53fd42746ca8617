"""The ``tensorplug`` command line (also ``python -m tensorplug``)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from . import __version__


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


def cmd_adapters(args) -> int:
    import tensorplug

    rows = []
    for r in tensorplug.adapters():
        if r.error:
            rows.append([r.name, f"{r.distribution} {r.distribution_version or ''}".strip(), "-", "-", "-", "-",
                         f"LOAD ERROR: {r.error}"])
            continue
        framework = f"{r.framework} {r.framework_version or ''}".strip() if r.framework_installed else "not installed"
        rows.append([r.name, f"{r.distribution or '(in process)'} {r.distribution_version or ''}".strip(), framework,
                     ", ".join(r.tensor_types), ", ".join(r.capabilities), "C table" if r.fast_path else "Python",
                     ""])
    print(_table(rows, ["adapter", "distribution", "framework", "tensor types", "capabilities", "path", "errors"]))
    print("\npath: how tensors cross: 'C table' through the adapter's compiled DLPack exchange table (no Python in "
          "the call), 'Python' through its Python callables (the same rules, slower); docs/adapters.md")
    return 0


def build_flags() -> dict[str, str]:
    """Compiler and linker flags for a kernel library built without CMake (Makefile,
    setuptools): ``cc $(cflags) -shared -o libk.so k.c $(ldflags) $(libs)``. ``ldflags`` has
    an absolute runpath to this libtensorplug, right for local builds; a shipped library
    needs none (see docs/shipping.md)."""
    from tensorplug import cpp

    # Only TENSORPLUG_EXPORT/TP_EXPORT symbols and the ABI record are exported: hidden
    # visibility, a version script for the std:: instantiations it misses, and
    # --exclude-libs for a C++ runtime linked statically.
    visibility = "-fPIC -fvisibility=hidden"
    return {
        "cflags": f"-I{cpp.include_dir()} {visibility}",
        "cxxflags": f"-I{cpp.include_dir()} -std=c++17 {visibility} -fvisibility-inlines-hidden",
        "ldflags": f"-L{cpp.lib_dir()} -Wl,-rpath,{cpp.lib_dir()} {' '.join(cpp._KERNEL_LDFLAGS)} "
                   f"-Wl,--version-script={cpp._kernel_version_script()}",
        "libs": "-ltensorplug",
    }


def cmd_config(args) -> int:
    from tensorplug import cpp

    if args.includedir:
        print(cpp.include_dir())
    if args.libdir:
        print(cpp.lib_dir())
    if args.cmakedir:
        print(cpp.cmake_dir())
    if args.compat_includedir:
        print(cpp.compat_include_dir("tvm_ffi"))
    flags = [name for name in ("cflags", "cxxflags", "ldflags", "libs") if getattr(args, name)]
    if flags:  # one line, in this order, whatever the order asked: `$(tensorplug config ...)`
        print(" ".join(build_flags()[name] for name in flags))
    if not (args.includedir or args.libdir or args.cmakedir or args.compat_includedir or flags):
        print(f"includedir: {cpp.include_dir()}\nlibdir: {cpp.lib_dir()}\ncmakedir: {cpp.cmake_dir()}")
    return 0


def cmd_demo(args) -> int:
    from ._demo import FOOTNOTE, HEADER, run_demo

    rows, ok = run_demo()
    print(_table(rows, HEADER))
    print("\n" + FOOTNOTE)
    return 0 if ok else 1


def cmd_stubgen(args) -> int:
    from ._module import load_library, load_module
    from .stubs import stub_text, write_stub

    try:
        # Runtime libraries first: one registers the module kind (load_from_bytes.<kind>)
        # that the library embeds, as the library's own package would load it.
        for runtime in args.preload:
            load_library(runtime)
    except (OSError, ValueError, RuntimeError) as e:
        print(f"tensorplug stubgen: --preload: {e}", file=sys.stderr)
        return 2
    try:
        module = load_module(args.library)
    except (OSError, ValueError, RuntimeError, TypeError) as e:  # missing, not a kernel library, another ABI, ...
        hint = ("; pass that runtime library with --preload"
                if "no runtime registered the global function 'load_from_bytes." in str(e) else "")
        print(f"tensorplug stubgen: {e}{hint}", file=sys.stderr)
        return 2
    if args.output is None:
        sys.stdout.write(stub_text(module))
    else:
        write_stub(module, args.output)
    return 0


def cmd_hub(args) -> int:
    from .hub._cli import run

    return run(args)


BENCH_SCRIPT = "bench_overhead.py"


def find_bench_script():
    """The call-overhead benchmark of a source checkout: ``$TENSORPLUG_BENCHMARKS`` when
    set (a ``benchmarks/`` directory), else ``benchmarks/`` of the checkout this package
    was installed from in editable mode, else ``./benchmarks``; None when absent."""
    from pathlib import Path

    env = os.environ.get("TENSORPLUG_BENCHMARKS")
    if env:
        candidates = [Path(env)]
    else:
        candidates = [Path(__file__).resolve().parents[2] / "benchmarks", Path.cwd() / "benchmarks"]
    for directory in candidates:
        if (directory / BENCH_SCRIPT).is_file():
            return directory / BENCH_SCRIPT
    return None


def cmd_bench(args) -> int:
    # The harness is not installed with the package: it lives in benchmarks/ of a checkout.
    script = find_bench_script()
    if script is None:
        where = os.environ.get("TENSORPLUG_BENCHMARKS") or "this installation or ./benchmarks"
        print(f"tensorplug bench: the benchmark harness (benchmarks/{BENCH_SCRIPT}) is not in {where}: it "
              "ships with tensorplug's source, not with the package. Run it from a source checkout:\n"
              f"    python benchmarks/{BENCH_SCRIPT} [options]\n"
              "or point TENSORPLUG_BENCHMARKS at the checkout's benchmarks/ directory.", file=sys.stderr)
        return 2
    bench_args = args.bench_args[1:] if args.bench_args[:1] == ["--"] else args.bench_args
    return subprocess.run([sys.executable, str(script), *bench_args]).returncode


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:  # everything after `bench` is the benchmark's own options
        return cmd_bench(argparse.Namespace(bench_args=argv[1:]))
    parser = argparse.ArgumentParser(prog="tensorplug", description="Ship compiled kernels to every array framework.")
    parser.add_argument("--version", action="version", version=f"tensorplug {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="compile the example kernels and run them on every installed framework")
    sub.add_parser("adapters", help="list discovered adapter plugins")
    config = sub.add_parser("config", help="paths for building kernel libraries")
    config.add_argument("--includedir", action="store_true", help="print the header directory")
    config.add_argument("--libdir", action="store_true", help="print the libtensorplug directory")
    config.add_argument("--cmakedir", action="store_true", help="print the tensorplugConfig.cmake directory")
    config.add_argument("--compat-includedir", action="store_true",
                        help="print the header directory of the apache tvm-ffi compatibility layer (<tvm/ffi/...>)")
    config.add_argument("--cflags", action="store_true", help="print C compiler flags for a kernel library")
    config.add_argument("--cxxflags", action="store_true", help="print C++ compiler flags for a kernel library")
    config.add_argument("--ldflags", action="store_true", help="print linker flags (-L and a runpath to libtensorplug)")
    config.add_argument("--libs", action="store_true", help="print the libraries to link (-ltensorplug)")
    stubgen = sub.add_parser("stubgen", help="write the type stub (.pyi) of a kernel library")
    stubgen.add_argument("library", help="path of the kernel library (.so)")
    stubgen.add_argument("-o", "--output", help="the .pyi file to write (default: standard output)")
    stubgen.add_argument("--preload", action="append", default=[], metavar="RUNTIME",
                         help="load this runtime library first (tensorplug.load_library), e.g. the one that "
                              "registers a module kind the library embeds; repeatable, loaded in order")
    from .hub._cli import add_parser as add_hub_parser

    add_hub_parser(sub)
    bench = sub.add_parser("bench", help="call-overhead benchmark of a source checkout (benchmarks/README.md)",
                           add_help=False)
    bench.add_argument("bench_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    handlers = {"demo": cmd_demo, "adapters": cmd_adapters, "config": cmd_config, "bench": cmd_bench,
                "stubgen": cmd_stubgen, "hub": cmd_hub}
    return handlers[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
