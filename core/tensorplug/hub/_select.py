"""The matching rules: which builds run on a Machine, which of them is best, and the table
that says why for every build.

A build runs here when its ABI is the runtime's, its OS and architecture are this
machine's, its libc is this process's and no newer, its ISA level is one this CPU runs,
a build for apache tvm-ffi finds the tvm-ffi ABI it was built against installed, and,
when it holds GPU code, the driver is at least its toolkit version and every visible
device has code in it. Among those that run, the best is the newest library version, then
the newest ABI, then GPU code over none (and the newer toolkit), then the highest ISA level.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._layout import Build, version_key
from ._machine import Machine, isa_rank


def rejections(build: Build, machine: Machine) -> list[str]:
    """Why ``build`` cannot run on ``machine`` (empty when it can)."""
    why = []
    if build.abi != machine.abi:
        why.append(f"built for tensorplug ABI {build.abi}, this runtime is ABI {machine.abi}")
    if build.os != machine.os:
        why.append(f"built for {build.os}, this is {machine.os}")
    if build.arch != machine.arch:
        why.append(f"built for {build.arch}, this machine is {machine.arch}")
    elif isa_rank(build.arch, build.isa) < 0:
        why.append(f"unknown ISA level {build.isa!r} of {build.arch}")
    elif isa_rank(build.arch, build.isa) > isa_rank(machine.arch, machine.isa):
        why.append(f"needs {build.isa}, this CPU runs up to {machine.isa}")
    if build.libc is not None:
        if build.libc != machine.libc:
            why.append(f"built for {build.libc}, this process uses {machine.libc or 'no known libc'}")
        elif build.libc_version and machine.libc_version and \
                version_key(build.libc_version) > version_key(machine.libc_version):
            why.append(f"needs {build.libc} {build.libc_version}, this process has {machine.libc_version}")
    if build.tvm_ffi is not None:
        from ..tvm_ffi import INSTALL_HINT, installed_abi

        here = installed_abi()
        if here is None:
            why.append(f"built for apache tvm-ffi ABI {build.tvm_ffi}, which is not installed ({INSTALL_HINT})")
        elif here != build.tvm_ffi:
            why.append(f"built for apache tvm-ffi ABI {build.tvm_ffi}, the installed one is ABI {here}")
    if build.cuda:
        why += _gpu_rejections("CUDA", build.cuda, build.gpu_archs, machine.cuda, machine.cuda_devices, _cuda_runs)
    if build.rocm:
        why += _gpu_rejections("ROCm", build.rocm, build.gpu_archs, machine.rocm, machine.rocm_devices,
                               lambda code, device: code.split(":")[0] == device)
    return why


def _gpu_rejections(toolkit, version, codes, machine_version, devices, runs) -> list[str]:
    holds = f"holds {toolkit} {version} code ({', '.join(codes)})"
    if machine_version is None:
        return [f"{holds}; no {toolkit} driver here"]
    if not devices:
        return [f"{holds}; no {toolkit} device here"]
    why = []
    if version_key(version) > version_key(machine_version):
        why.append(f"needs a {toolkit} {version} driver, this one supports {machine_version}")
    missing = [d for d in devices if not any(runs(code, d) for code in codes)]
    if missing:
        why.append(f"{holds}; none for device {', '.join(missing)}")
    return why


def _cuda_runs(code: str, device: str) -> bool:
    """Does ``code`` (sm_XY[a|f] machine code or compute_XY PTX) run on ``device`` (sm_XY)?
    Machine code runs on its major version at the same or a later minor (the arch-specific
    'a' / family 'f' forms only on exactly that device); PTX is compiled for any later device."""
    kind, _, number = code.partition("_")
    specific = number[-1:] in ("a", "f")
    number = number.rstrip("af")
    want, have = (int(number[:-1]), int(number[-1])), (int(device[3:-1]), int(device[-1]))
    if kind == "compute":
        return have >= want
    return have == want if specific else (have[0] == want[0] and have[1] >= want[1])


def rank(build: Build) -> tuple:
    gpu = build.cuda or build.rocm
    return (version_key(build.version), build.abi, gpu is not None, version_key(gpu) if gpu else (),
            isa_rank(build.arch, build.isa))


@dataclass(frozen=True)
class Candidate:
    build: Build
    verdict: str  # "chosen", "runs" (ranked below the chosen one) or "rejected"
    why: str


@dataclass(frozen=True)
class Selection:
    """The outcome of matching a library's builds against a Machine: ``chosen`` (a Build or
    None) and every candidate with its verdict, chosen first, then the others that run
    (best first), then the rejected ones. ``table()`` (also ``str()``) shows them."""

    name: str
    request: str  # "newest version", "version 1.2.0", "locked build"
    machine: Machine
    sources: tuple[str, ...]
    candidates: tuple[Candidate, ...]

    @property
    def chosen(self) -> Build | None:
        return self.candidates[0].build if self.candidates and self.candidates[0].verdict == "chosen" else None

    def table(self) -> str:
        head = (f"{self.name} ({self.request}) from {', '.join(self.sources) or 'no source'}\n"
                f"this machine: {self.machine.describe()}\n")
        if not self.candidates:
            return head + "no builds of this library in these sources"
        rows = []
        for candidate in self.candidates:
            b = candidate.build
            libc = f"{b.libc} {b.libc_version or ''}".strip() if b.libc else "-"
            gpu = (f"cuda {b.cuda}" if b.cuda else f"rocm {b.rocm}" if b.rocm else "-") + \
                (f" {','.join(b.gpu_archs)}" if b.gpu_archs else "")
            rows.append([b.version, str(b.abi), f"{b.os} {b.arch}", libc, b.isa, gpu, b.sha256[:12],
                         f"{candidate.verdict}: {candidate.why}"])
        header = ["version", "abi", "platform", "libc", "isa", "gpu", "sha256", "verdict"]
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

        def line(row):
            return "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()

        return head + "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])

    __str__ = table


def select(name: str, builds, machine: Machine, version: str | None, request: str, sources) -> Selection:
    """Match ``builds`` of ``name`` against ``machine`` (only ``version`` when given)."""
    running: list[tuple[Build, list[str]]] = []
    rejected: list[tuple[Build, list[str]]] = []
    seen = set()
    for build in builds:
        # The same build from a later source is one candidate. Not the same file: one file
        # may be published as two builds (a CPU build and the same bytes as a CUDA one).
        if build in seen:  # Build's equality leaves its source out
            continue
        seen.add(build)
        why = ([f"version {build.version}, asked for {version}"] if version is not None and build.version != version
               else rejections(build, machine))
        (rejected if why else running).append((build, why))
    running.sort(key=lambda item: rank(item[0]), reverse=True)
    candidates = []
    for i, (build, _) in enumerate(running):
        if i == 0:
            candidates.append(Candidate(build, "chosen", _why_chosen(build, running)))
        else:
            candidates.append(Candidate(build, "runs", "ranked below: " + _ranked_below(build, running[0][0])))
    candidates += [Candidate(b, "rejected", "; ".join(why)) for b, why in rejected]
    return Selection(name, request, machine, tuple(sources), tuple(candidates))


def _why_chosen(build: Build, running) -> str:
    if len(running) == 1:
        return "the only build that runs here"
    return "the best build that runs here"


def _ranked_below(build: Build, best: Build) -> str:
    if build.version != best.version:
        return f"version {build.version} < {best.version}"
    if build.abi != best.abi:
        return f"ABI {build.abi} < {best.abi}"
    if (build.cuda or build.rocm) is None and (best.cuda or best.rocm) is not None:
        return "no GPU code, the chosen build has some"
    if (build.cuda, build.rocm) != (best.cuda, best.rocm):
        return f"older GPU toolkit ({build.cuda or build.rocm} < {best.cuda or best.rocm})"
    return f"ISA {build.isa} < {best.isa}"
