"""Build fused_kernels for this CPU without CMake or a wheel, for the tests, the benchmark
and the docs of a source checkout: ``python examples/fused_kernels/develop.py`` prints a
directory to put on ``sys.path`` (it holds the ``fused_kernels`` package).

The wheel (CMakeLists.txt) embeds three ISA variants in one host library; this builds the
one variant this CPU runs, with the same flags, through :func:`tensorplug.cpp.build` (cached
under ``tensorplug.cpp.cache_dir()`` by a hash of the sources and flags: rebuilt only when
they change). The package's Python files are copied beside it.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCES = ["norm.cc", "activation.cc", "rotary.cc", "int8_linear.cc", "sampling.cc", "isa.cc", "host.cc"]
COMMON = ["-O3", "-fopenmp-simd", "-fno-math-errno", "-fno-trapping-math", "-pthread"]
# The variants of CMakeLists.txt: (ISA name, the CPU flags /proc/cpuinfo must show, compiler flags).
VARIANTS = [
    ("avx512f+avx512bw+avx512vl+avx512dq", {"avx512f", "avx512bw", "avx512vl", "avx512dq", "fma"},
     ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx2", "-mfma", "-mf16c",
      "-mprefer-vector-width=512"]),
    ("avx2+fma", {"avx2", "fma", "f16c"}, ["-mavx2", "-mfma", "-mf16c"]),
    ("generic", set(), []),
]


def cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def build() -> Path:
    """Build (or find in the cache) the library of the best variant for this CPU and return
    the directory holding the ``fused_kernels`` package."""
    from tensorplug import cpp

    flags = cpu_flags()
    isa, _, cflags = next(v for v in VARIANTS if v[1] <= flags)
    library = Path(cpp.build("libfused_kernels", [HERE / "src" / s for s in SOURCES],
                             extra_cflags=[*COMMON, *cflags, f'-DFUSED_KERNELS_ISA="{isa}"'],
                             include_dirs=[HERE / "src"]))
    root = library.parent / "package"
    package = root / "fused_kernels"
    package.mkdir(parents=True, exist_ok=True)
    for source in (HERE / "src" / "fused_kernels").iterdir():
        if source.suffix in (".py", ".pyi", ".typed"):
            shutil.copyfile(source, package / source.name)
    target = package / "libfused_kernels.so"
    if not target.exists() or target.stat().st_mtime < library.stat().st_mtime:
        shutil.copyfile(library, target)
    return root


def import_fused_kernels():
    """``import fused_kernels``: the installed package when there is one, else the build above."""
    try:
        import fused_kernels
    except ImportError:
        sys.path.insert(0, str(build()))
        import fused_kernels
    return fused_kernels


if __name__ == "__main__":
    print(build())
