"""The published layout (docs/hub.md, "The layout"): a static file tree of kernel library
builds and the JSON that describes them, and ``publish``, which writes it.

    <root>/tensorplug-hub.json                 {"format": "tensorplug-hub/1", "libraries": ["org/name", ...]}
    <root>/<org>/<name>/builds.json            {"format": ..., "name": "org/name", "builds": [<build>, ...]}
    <root>/<org>/<name>/<version>/<variant>/<file>

A build's description is read from its file (ABI record, architecture, libc, functions)
except what a file cannot tell: the ISA level it was compiled for and its GPU code.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath

from .._verified import IntegrityError
from ._elf import read_elf
from ._machine import ISA_LEVELS

FORMAT = "tensorplug-hub/1"
ROOT_INDEX = "tensorplug-hub.json"
LIBRARY_INDEX = "builds.json"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
_VERSION = re.compile(r"\d+(\.\d+)*")
_GPU_ARCH = re.compile(r"(sm|compute)_\d+[af]?|gfx[0-9a-f]+")
_CUDA_OR_ROCM_VERSION = re.compile(r"\d+\.\d+")


@dataclass(frozen=True)
class Build:
    """One published build of a kernel library: its file (relative to the library's
    directory in the layout) and what it needs of a machine."""

    name: str  # "org/name"
    version: str  # the library's own version, "1.2.0"
    file: str  # "<version>/<variant>/<file name>", relative to <root>/<org>/<name>/
    sha256: str
    size: int
    abi: int  # tensorplug ABI (the file's record)
    os: str
    arch: str
    libc: str | None
    libc_version: str | None  # the newest GLIBC_x.y symbol version the file needs
    isa: str  # a level of ISA_LEVELS[arch]
    cuda: str | None = None  # the CUDA version it was built with, when it holds CUDA code
    rocm: str | None = None
    gpu_archs: tuple[str, ...] = ()  # sm_XY / compute_XY (CUDA) or gfx targets (ROCm)
    functions: tuple[str, ...] = ()
    # A library built for apache tvm-ffi (docs/migration.md): the tvm-ffi ABI ("major.minor")
    # it was built against; None for tensorplug's own libraries (and absent from their JSON).
    tvm_ffi: str | None = None
    source: str = field(default="", compare=False)  # where it was found (not part of the index)

    @property
    def variant(self) -> str:
        """``<arch>-<isa>`` and the GPU toolkit, e.g. ``x86_64-x86-64-v3-cuda12.4``."""
        gpu = f"-cuda{self.cuda}" if self.cuda else f"-rocm{self.rocm}" if self.rocm else ""
        return f"{self.arch}-{self.isa}{gpu}"

    def to_json(self) -> dict:
        data = asdict(self)
        del data["source"]
        data["gpu_archs"], data["functions"] = list(self.gpu_archs), list(self.functions)
        if self.tvm_ffi is None:
            del data["tvm_ffi"]
        return data

    @classmethod
    def from_json(cls, data: object, where: str, source: str = "") -> Build:
        """A Build from an index entry; IntegrityError naming ``where`` for a malformed one
        (a file path leaving the library's directory included)."""
        expected: dict[str, type | tuple[type, ...]] = {
            "name": str, "version": str, "file": str, "sha256": str, "size": int, "abi": int, "os": str, "arch": str,
            "libc": (str, type(None)), "libc_version": (str, type(None)), "isa": str, "cuda": (str, type(None)),
            "rocm": (str, type(None)), "gpu_archs": list, "functions": list}
        if not isinstance(data, dict):
            raise IntegrityError(f"{where}: a build must be a JSON object, got {type(data).__name__}")
        for key, kind in expected.items():
            if key not in data or not isinstance(data[key], kind) or isinstance(data[key], bool):
                raise IntegrityError(f"{where}: build field '{key}' is missing or not {_kind_name(kind)}")
        if not _NAME.fullmatch(data["name"]):
            raise IntegrityError(f"{where}: build field 'name' is not a library name 'org/name': {data['name']!r}")
        if not _VERSION.fullmatch(data["version"]):
            raise IntegrityError(f"{where}: build field 'version' is not a version: {data['version']!r}")
        path = PurePosixPath(data["file"])
        if path.is_absolute() or ".." in path.parts or "\\" in data["file"] or not path.parts:
            raise IntegrityError(f"{where}: build file {data['file']!r} leaves the library's directory")
        if not re.fullmatch(r"[0-9a-f]{64}", data["sha256"]):
            raise IntegrityError(f"{where}: build field 'sha256' is not a sha256 hex digest: {data['sha256']!r}")
        values = {key: data[key] for key in expected}
        values["gpu_archs"] = tuple(map(str, data["gpu_archs"]))
        values["functions"] = tuple(map(str, data["functions"]))
        if "tvm_ffi" in data:
            if not (isinstance(data["tvm_ffi"], str) and _CUDA_OR_ROCM_VERSION.fullmatch(data["tvm_ffi"])):
                raise IntegrityError(f"{where}: build field 'tvm_ffi' is not a tvm-ffi ABI 'major.minor': "
                                     f"{data['tvm_ffi']!r}")
            values["tvm_ffi"] = data["tvm_ffi"]
        return cls(**values, source=source)


def _kind_name(kind) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join("null" if k is type(None) else {"str": "a string", "int": "an integer",
                                                         "list": "a list"}[k.__name__] for k in kinds)


def check_name(name: object, where: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"{where}: expected a library name 'org/name' (letters, digits, '.', '_', '-'), "
                         f"got {name!r}")
    return name


def check_version(version: object, where: str) -> str:
    if not isinstance(version, str) or not _VERSION.fullmatch(version):
        raise ValueError(f"{where}: expected a version of dot-separated numbers ('1.2.0'), got {version!r}")
    return version


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def load_json(text: str | bytes, where: str):
    """JSON read from ``where`` (an index, a lock: written by someone else), or IntegrityError."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: nesting deeper than the parser goes
        why = "nested too deeply" if isinstance(exc, RecursionError) else exc
        raise IntegrityError(f"{where} is not JSON: {why}") from None


def parse_index(text: str | bytes, where: str, name: str, source: str) -> list[Build]:
    """The builds of ``name`` in a builds.json text read from ``where``."""
    data = load_json(text, where)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        got = data.get("format") if isinstance(data, dict) else data
        raise IntegrityError(f"{where}: expected format {FORMAT!r}, got {got!r}")
    if data.get("name") != name or not isinstance(data.get("builds"), list):
        raise IntegrityError(f"{where}: expected the builds of {name!r}, got name {data.get('name')!r}")
    builds = [Build.from_json(entry, where, source) for entry in data["builds"]]
    for build in builds:
        if build.name != name:
            raise IntegrityError(f"{where}: a build of {build.name!r} in the index of {name!r}")
    return builds


def parse_root_index(text: str | bytes, where: str) -> list[str]:
    data = load_json(text, where)
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("libraries"), list):
        raise IntegrityError(f"{where}: expected format {FORMAT!r} with a list of libraries")
    for name in data["libraries"]:
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise IntegrityError(f"{where}: expected library names 'org/name', got {name!r}")
    return sorted(data["libraries"])


def _publish_locked(root: Path, name: str, version: str, variants: dict, cuda, rocm, gpu_archs, where: str,
                    tvm_ffi: str | None = None) -> list[Build]:
    library_dir = root / name
    index_path = library_dir / LIBRARY_INDEX
    existing = parse_index(index_path.read_bytes(), str(index_path), name, "") if index_path.exists() else []
    published = []
    for isa, path in variants.items():
        data = Path(path).read_bytes()
        facts = read_elf(data, str(path))
        levels = [level for level, _ in ISA_LEVELS.get(facts.arch, ())]
        if isa not in levels:
            raise ValueError(f"{where} argument 'variants': {path} is built for {facts.arch}; expected an ISA level "
                             f"of {facts.arch} ({', '.join(levels) or 'none known'}), got {isa!r}")
        built_for_tvm_ffi = bool(facts.tvm_ffi_functions) and not facts.functions
        if built_for_tvm_ffi and tvm_ffi is None:
            tvm_ffi = _installed_tvm_ffi_abi(where, path)
        build = Build(name=name, version=version, file="", sha256=hashlib.sha256(data).hexdigest(), size=len(data),
                      abi=facts.abi, os="linux", arch=facts.arch, libc=facts.libc, libc_version=facts.libc_version,
                      isa=isa, cuda=cuda, rocm=rocm, gpu_archs=gpu_archs,
                      functions=facts.tvm_ffi_functions if built_for_tvm_ffi else facts.functions,
                      tvm_ffi=tvm_ffi if built_for_tvm_ffi else None)
        build = Build(**{**build.__dict__, "file": f"{version}/{build.variant}/{Path(path).name}"})
        same_place = [b for b in existing if b.version == version and b.variant == build.variant]
        if same_place and same_place[0].sha256 != build.sha256:
            raise ValueError(f"{where}: {name} {version} already has a {build.variant} build "
                             f"(sha256 {same_place[0].sha256[:12]}), and {path} differs: publish a new version")
        if not same_place:
            target = library_dir / build.file
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            existing.append(build)
        published.append(build)
    existing.sort(key=lambda b: (version_key(b.version), b.variant), reverse=True)
    _write_json(index_path, {"format": FORMAT, "name": name, "builds": [b.to_json() for b in existing]})
    root_index = root / ROOT_INDEX
    names = set(parse_root_index(root_index.read_bytes(), str(root_index))) if root_index.exists() else set()
    _write_json(root_index, {"format": FORMAT, "libraries": sorted(names | {name})})
    return published


def _installed_tvm_ffi_abi(where: str, path) -> str:
    """The installed apache-tvm-ffi's ABI, for a library built for tvm-ffi published without ``tvm_ffi=``."""
    from ..tvm_ffi import installed_abi

    abi = installed_abi()
    if abi is None:
        raise ValueError(f"{where}: {path} is built for apache tvm-ffi; say which tvm-ffi ABI it was built against "
                         f"(tvm_ffi='0.1') or install the apache-tvm-ffi it was built with")
    return abi


def _sign(index: Path, key) -> None:
    if key is not None:
        from . import _signing

        signature = index.with_name(index.name + _signing.SIGNATURE_SUFFIX)
        tmp = signature.with_name(f".{signature.name}.{os.getpid()}.tmp")
        tmp.write_bytes(_signing.sign(index.read_bytes(), key))
        os.replace(tmp, signature)


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)  # readers (a web server) never see half a file


def publish(root, name: str, version: str, variants, *, cuda: str | None = None, rocm: str | None = None,
            gpu_archs=(), signing_key=None, tvm_ffi: str | None = None) -> list[Build]:
    """Add builds of the library ``name`` ("org/name") at ``version`` to the layout under
    the directory ``root`` (created if needed) and return them.

    ``variants`` maps an ISA level to the path of a library built for it, e.g.
    ``{"x86-64-v3": "libk_v3.so", "x86-64": "libk.so"}`` (levels: x86-64, x86-64-v2,
    x86-64-v3, x86-64-v4; armv8-a, armv8.2-a, armv9-a). The architecture, tensorplug ABI,
    libc and functions are read from each file. Builds holding GPU code say so with
    ``cuda`` (the CUDA version they were built with, "12.4") or ``rocm``, and the
    ``gpu_archs`` they hold code for (``sm_90``, ``compute_90``, ``gfx90a``).

    Publishing the same file again changes nothing; publishing other bytes for a version
    and variant already published raises ValueError (publish a new version: a version's
    builds never change under its users). Publishers of one root may run at once: the
    indexes are read and rewritten under a lock (``<root>/.tensorplug-hub.lock``), each
    replaced whole. With ``signing_key`` (the path of an ed25519 private key, made by
    ``tensorplug hub keygen``) the library's index is signed (``builds.json.sig``), and
    users who trust the key refuse an index not signed by it (docs/hub.md; the root index
    only lists names and is not signed). Raises ValueError for a bad name, version, ISA
    level or GPU description, or a file that is not a 64-bit ELF library.

    A library built for apache tvm-ffi (exporting ``__tvm_ffi_<name>`` functions and no
    tensorplug one, docs/migration.md) is published with the tvm-ffi ABI it was built
    against (``tvm_ffi``, "major.minor"; default: the installed apache-tvm-ffi's) recorded
    in its build description, and is selected only where that ABI is installed."""
    where = "publish()"
    if tvm_ffi is not None and not (isinstance(tvm_ffi, str) and _CUDA_OR_ROCM_VERSION.fullmatch(tvm_ffi)):
        raise ValueError(f"{where} argument 'tvm_ffi': expected a tvm-ffi ABI 'major.minor', got {tvm_ffi!r}")
    check_name(name, f"{where} argument 'name'")
    check_version(version, f"{where} argument 'version'")
    if cuda is not None and rocm is not None:
        raise ValueError(f"{where}: a build holds CUDA or ROCm code, not both (got cuda={cuda!r}, rocm={rocm!r})")
    toolkit = cuda if cuda is not None else rocm
    if toolkit is not None and not (isinstance(toolkit, str) and _CUDA_OR_ROCM_VERSION.fullmatch(toolkit)):
        raise ValueError(f"{where} argument '{'cuda' if cuda is not None else 'rocm'}': expected 'major.minor', "
                         f"got {toolkit!r}")
    gpu_archs = tuple(gpu_archs)
    for arch in gpu_archs:
        if not isinstance(arch, str) or not _GPU_ARCH.fullmatch(arch) or \
                (cuda is not None) != arch.startswith(("sm_", "compute_")):
            raise ValueError(f"{where} argument 'gpu_archs': expected {'sm_XY or compute_XY' if cuda else 'gfxNNN'} "
                             f"names for {'CUDA' if cuda else 'ROCm'} code, got {arch!r}")
    if (toolkit is None) != (not gpu_archs):
        raise ValueError(f"{where}: GPU code needs both a toolkit version (cuda= or rocm=) and gpu_archs")
    variants = dict(variants)
    if not variants:
        raise ValueError(f"{where} argument 'variants': expected at least one ISA level and library path")

    key = None
    if signing_key is not None:  # read before anything is published: a bad key publishes nothing
        from ._signing import private_key

        key = private_key(signing_key)
    Path(root).mkdir(parents=True, exist_ok=True)
    with open(Path(root) / ".tensorplug-hub.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # read-modify-write of the indexes: one publisher at a time
        published = _publish_locked(Path(root), name, version, variants, cuda, rocm, gpu_archs, where, tvm_ffi)
        _sign(Path(root) / name / LIBRARY_INDEX, key)
    return published
