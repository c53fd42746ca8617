"""This machine and process, as the matching rules see them: the tensorplug ABI of the
runtime, OS and libc, CPU architecture and the best ISA level the CPU runs, and (probed only
when a candidate build holds GPU code) the CUDA / ROCm versions and the devices present.
"""

from __future__ import annotations

import ctypes
import glob
import os
import platform
import sys
from dataclasses import dataclass

# ISA levels per architecture, lowest first; each level needs its own flags (as
# /proc/cpuinfo names them) and those of every level before it. x86-64: the psABI levels.
ISA_LEVELS: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "x86_64": (
        ("x86-64", ()),
        ("x86-64-v2", ("cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3")),
        ("x86-64-v3", ("avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave")),
        ("x86-64-v4", ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl")),
    ),
    "aarch64": (
        ("armv8-a", ()),
        ("armv8.2-a", ("atomics", "asimdrdm", "fphp", "asimdhp", "dcpop")),
        ("armv9-a", ("sve", "sve2")),
    ),
}


def isa_rank(arch: str, isa: str) -> int:
    """Position of ``isa`` among ``arch``'s levels (0: the baseline); -1 when unknown."""
    names = [name for name, _ in ISA_LEVELS.get(arch, ())]
    return names.index(isa) if isa in names else -1


@dataclass(frozen=True)
class Machine:
    """What a build must fit. ``cuda`` is the CUDA version the driver supports ("12.4"),
    ``cuda_devices`` the visible devices' architectures ("sm_90"); ``rocm`` and
    ``rocm_devices`` ("gfx90a") likewise; all None / empty when ``gpus_probed`` is False."""

    abi: int
    os: str
    arch: str
    libc: str | None
    libc_version: str | None
    isa: str  # the best level of ISA_LEVELS[arch] this CPU runs ("generic" when unknown)
    gpus_probed: bool = False
    cuda: str | None = None
    cuda_devices: tuple[str, ...] = ()
    rocm: str | None = None
    rocm_devices: tuple[str, ...] = ()

    def describe(self) -> str:
        libc = f"{self.libc} {self.libc_version or ''}".strip() if self.libc else "no libc"
        if not self.gpus_probed:
            gpus = "GPUs not probed (no build holds GPU code)"
        else:
            parts = [f"CUDA {self.cuda} ({', '.join(self.cuda_devices) or 'no device'})" if self.cuda else "no CUDA",
                     f"ROCm {self.rocm} ({', '.join(self.rocm_devices) or 'no device'})" if self.rocm else "no ROCm"]
            gpus = ", ".join(parts)
        return f"tensorplug ABI {self.abi}, {self.os} {libc}, {self.arch} {self.isa}, {gpus}"


_cpu_part: Machine | None = None


def detect_machine(gpus: bool = False) -> Machine:
    """This process's Machine. The CPU part is read once; ``gpus`` also probes the CUDA
    driver (libcuda, which initializes it) and the ROCm devices (sysfs), each time asked."""
    global _cpu_part
    if _cpu_part is None:
        from .. import _core

        arch = _arch_name(platform.machine())
        libc, libc_version = _libc()
        _cpu_part = Machine(abi=_core.abi_version(), os="linux" if sys.platform.startswith("linux") else sys.platform,
                            arch=arch, libc=libc, libc_version=libc_version, isa=_best_isa(arch, _cpu_flags()))
    if not gpus:
        return _cpu_part
    cuda, cuda_devices = _probe_cuda()
    rocm, rocm_devices = _probe_rocm()
    fields = dict(_cpu_part.__dict__, gpus_probed=True, cuda=cuda, cuda_devices=cuda_devices, rocm=rocm,
                  rocm_devices=rocm_devices)
    return Machine(**fields)


def _arch_name(machine: str) -> str:
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine.lower(), machine.lower())


def _libc() -> tuple[str | None, str | None]:
    try:
        name, version = (os.confstr("CS_GNU_LIBC_VERSION") or "").split()  # "glibc 2.36"
        return name, version
    except (AttributeError, ValueError, OSError):
        pass
    if glob.glob("/lib/ld-musl-*.so.1"):
        return "musl", None
    return None, None


def _cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as Linux reports them ("flags" on x86, "Features" on Arm)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return frozenset(value.split())
    except OSError:
        pass
    return frozenset()


def _best_isa(arch: str, flags: frozenset[str]) -> str:
    best = "generic"
    for name, needs in ISA_LEVELS.get(arch, ()):
        if not set(needs) <= flags:
            break
        best = name
    return best


def _probe_cuda() -> tuple[str | None, tuple[str, ...]]:
    """The driver's CUDA version and the visible devices' sm_XY, from libcuda itself."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None, ()
    version = ctypes.c_int(0)
    if cuda.cuInit(0) != 0 or cuda.cuDriverGetVersion(ctypes.byref(version)) != 0:
        return None, ()
    count = ctypes.c_int(0)
    if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        count.value = 0
    devices = []
    for ordinal in range(count.value):
        device, major, minor = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0)
        if (cuda.cuDeviceGet(ctypes.byref(device), ordinal) == 0
                and cuda.cuDeviceGetAttribute(ctypes.byref(major), 75, device) == 0  # COMPUTE_CAPABILITY_MAJOR
                and cuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, device) == 0):  # ..._MINOR
            devices.append(f"sm_{major.value}{minor.value}")
    return f"{version.value // 1000}.{version.value % 1000 // 10}", tuple(devices)


def _probe_rocm() -> tuple[str | None, tuple[str, ...]]:
    """The installed ROCm version and the GPU agents' gfx targets, from the amdkfd sysfs."""
    devices = []
    for properties in sorted(glob.glob("/sys/class/kfd/kfd/topology/nodes/*/properties")):
        try:
            with open(properties) as f:
                fields = dict(line.split() for line in f if len(line.split()) == 2)
        except OSError:
            continue
        target = int(fields.get("gfx_target_version", "0"))
        if target:  # 90010 -> gfx90a: major, then minor and stepping as hex digits
            devices.append(f"gfx{target // 10000}{target // 100 % 100:x}{target % 100:x}")
    try:
        with open("/opt/rocm/.info/version") as f:
            version = ".".join(f.read().strip().split("-")[0].split(".")[:2])
    except OSError:
        version = None
    return version, tuple(devices) if version else ()
