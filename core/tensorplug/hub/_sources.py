"""Where builds come from (a directory, a static HTTP(S) tree, installed distributions) and
the digest-keyed cache every file is verified into before it is loaded.

A source is named by a string, which is also what a lock file records: a directory path, an
``http://`` / ``https://`` URL, or ``installed`` (distributions declaring kernels under the
entry-point group ``tensorplug.kernels``: the entry point's name is the library's name,
its value the package whose directory is a layout root). Only an URL touches the network,
and ``urllib`` is imported only then.
"""

from __future__ import annotations

import contextvars
import hashlib
import os
import tempfile
from pathlib import Path

from .._verified import open_verified, private_directory
from . import _signing
from ._deadline import Deadline
from ._elf import read_elf
from ._layout import LIBRARY_INDEX, ROOT_INDEX, Build, IntegrityError, check_name, parse_index, parse_root_index

ENTRY_POINT_GROUP = "tensorplug.kernels"
INSTALLED = "installed"
HTTP_TIMEOUT_S = 30.0  # the whole of one request: connecting, headers and body
LOAD_TIMEOUT_S = 300.0  # the whole of one hub.load / fetch / select: every request it makes
_INDEX_LIMIT = 16 << 20  # bytes; an index larger than this is refused, not read
_SIGNATURE_LIMIT = 4096

# The deadline of the hub call in progress (hub.load and friends set it), which every
# request of an HTTP source is held to as well as its own.
load_deadline: contextvars.ContextVar = contextvars.ContextVar("tensorplug_hub_load_deadline", default=None)


class _Source:
    """What every source does with its files: read the indexes (checking signatures when
    trusted keys are configured) and copy a build's file, bounded by its recorded size."""

    label: str
    trusted_keys: tuple[str, ...] = ()

    def _read(self, relative: str, limit: int) -> bytes | None:
        """The bytes of ``relative`` (None when there is no such file), refused when longer than ``limit``."""
        raise NotImplementedError

    def where(self, build: Build) -> str:
        raise NotImplementedError

    def _index(self, relative: str, where: str) -> bytes | None:
        data = self._read(relative, _INDEX_LIMIT)
        if data is not None and self.trusted_keys:
            signature = self._read(relative + _signing.SIGNATURE_SUFFIX, _SIGNATURE_LIMIT)
            _signing.check(data, signature, self.trusted_keys, where)
        return data

    def libraries(self) -> list[str]:
        # The root index only lists names (each library's index is checked when read): unsigned.
        where = self._where(ROOT_INDEX)
        data = self._read(ROOT_INDEX, _INDEX_LIMIT)
        if data is None:
            raise FileNotFoundError(f"hub source {self.label}: no {ROOT_INDEX} (not a published layout)")
        return parse_root_index(data, where)

    def builds(self, name: str) -> list[Build]:
        check_name(name, f"hub source {self.label}: library name")  # never a path outside the root
        relative = f"{name}/{LIBRARY_INDEX}"
        data = self._index(relative, self._where(relative))
        return [] if data is None else parse_index(data, self._where(relative), name, self.label)

    def signed_index(self, name: str) -> tuple[bytes | None, bytes | None]:
        """The library index of ``name`` and its signature, as published (None where absent)."""
        relative = f"{check_name(name, 'hub: library name')}/{LIBRARY_INDEX}"
        return (self._read(relative, _INDEX_LIMIT),
                self._read(relative + _signing.SIGNATURE_SUFFIX, _SIGNATURE_LIMIT))

    def _where(self, relative: str) -> str:
        raise NotImplementedError


class DirectorySource(_Source):
    """A layout root on a file system."""

    def __init__(self, root, label: str | None = None, trusted_keys: tuple[str, ...] = ()):
        self.root = Path(root)
        self.label = label or str(self.root)
        self.trusted_keys = trusted_keys

    def _read(self, relative: str, limit: int) -> bytes | None:
        try:
            with open(self.root / relative, "rb") as f:
                data = f.read(limit + 1)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
        if len(data) > limit:
            raise IntegrityError(f"hub source {self.label}: {relative} is larger than {limit} bytes")
        return data

    def _where(self, relative: str) -> str:
        return str(self.root / relative)

    def copy_to(self, build: Build, out) -> None:
        with open(self.root / build.name / build.file, "rb") as f:
            _copy_bounded(f, out, build)

    def where(self, build: Build) -> str:
        return str(self.root / build.name / build.file)


class HttpSource(_Source):
    """A layout root served over HTTP(S) by any static file server. Each request must
    finish within ``timeout`` seconds (connecting, headers and body), and within the
    deadline of the hub call that made it; an https source is never redirected to http."""

    def __init__(self, url: str, timeout: float = HTTP_TIMEOUT_S, trusted_keys: tuple[str, ...] = ()):
        self.url = url.rstrip("/") + "/"
        self.label = url
        self.timeout = timeout
        self.trusted_keys = trusted_keys

    def _get(self, relative: str, limit: int, sink=None) -> bytes | None:
        from . import _http

        deadlines = [Deadline(self.timeout, f"one request to hub source {self.label}")]
        if load_deadline.get() is not None:
            deadlines.append(load_deadline.get())
        try:
            return _http.get(self.url + relative, deadlines, limit, sink)
        except OSError as exc:
            raise type(exc)(f"hub source {self.label}: {exc}") from None

    def _read(self, relative: str, limit: int) -> bytes | None:
        data = self._get(relative, limit)
        if data is not None and len(data) > limit:
            raise IntegrityError(f"hub source {self.label}: {relative} is larger than {limit} bytes")
        return data

    def _where(self, relative: str) -> str:
        return self.url + relative

    def copy_to(self, build: Build, out) -> None:
        if self._get(f"{build.name}/{build.file}", build.size, sink=out) is None:
            raise FileNotFoundError(f"hub source {self.label}: {self.where(build)} is missing (HTTP 404)")

    def where(self, build: Build) -> str:
        return f"{self.url}{build.name}/{build.file}"


class InstalledSource(_Source):
    """Installed distributions that declare a library under the ``tensorplug.kernels``
    entry-point group; their packages are found without being imported."""

    label = INSTALLED

    def __init__(self, trusted_keys: tuple[str, ...] = ()):
        self.trusted_keys = trusted_keys

    def _roots(self) -> dict[str, DirectorySource]:
        import importlib.metadata
        import importlib.util

        roots = {}
        for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            if entry.name in roots:
                continue  # the first distribution on sys.path wins, as for imports
            spec = importlib.util.find_spec(entry.value)
            if spec is None or not spec.submodule_search_locations:
                raise FileNotFoundError(f"hub source installed: entry point {entry.name!r} = {entry.value!r} "
                                        f"({ENTRY_POINT_GROUP}) names no installed package")
            roots[entry.name] = DirectorySource(list(spec.submodule_search_locations)[0], INSTALLED,
                                                self.trusted_keys)
        return roots

    def libraries(self) -> list[str]:
        return sorted(self._roots())

    def builds(self, name: str) -> list[Build]:
        root = self._roots().get(name)
        return root.builds(name) if root else []

    def signed_index(self, name: str) -> tuple[bytes | None, bytes | None]:
        root = self._roots().get(name)
        return root.signed_index(name) if root else (None, None)

    def copy_to(self, build: Build, out) -> None:
        self._roots()[build.name].copy_to(build, out)

    def where(self, build: Build) -> str:
        return self._roots()[build.name].where(build)


def open_source(source, trusted_keys: tuple[str, ...] = ()) -> DirectorySource | HttpSource | InstalledSource:
    """The source a string (or path) names, checking index signatures against
    ``trusted_keys`` when given; ValueError for an URL of another scheme."""
    if isinstance(source, _Source):
        return source
    if isinstance(source, os.PathLike):
        return DirectorySource(source, trusted_keys=trusted_keys)
    if not isinstance(source, str) or not source:
        raise TypeError(f"hub: a source is a directory, an http(s) URL or 'installed', got {source!r}")
    if source == INSTALLED:
        return InstalledSource(trusted_keys)
    if source.startswith(("http://", "https://")):
        return HttpSource(source, trusted_keys=trusted_keys)
    if "://" in source:
        raise ValueError(f"hub: a source URL must be http:// or https://, got {source!r}")
    return DirectorySource(source, trusted_keys=trusted_keys)


def _copy_bounded(reader, out, build: Build) -> None:
    """Copy at most ``build.size + 1`` bytes: a larger file is refused without reading it all."""
    left = build.size + 1
    while left > 0:
        chunk = reader.read(min(left, 1 << 20))
        if not chunk:
            break
        out.write(chunk)
        left -= len(chunk)


class Cache:
    """Verified build files, keyed by digest: ``<root>/sha256/<digest>/<file name>``, in a
    directory only this user can write (created 0700; PermissionError for one another user
    owns or may write). A file enters only after its digest, size and recorded facts are
    checked, and is checked again each time it is handed out and when it is loaded."""

    def __init__(self, root=None):
        if root is None:
            from ..cpp import cache_dir

            root = cache_dir() / "hub"
        self.root = private_directory(root, "hub cache directory")

    def path(self, build: Build) -> Path:
        return self.root / "sha256" / build.sha256 / Path(build.file).name

    def get(self, build: Build) -> Path | None:
        """The verified cached file of ``build``, or None (a cached file that no longer
        matches its digest is removed, so it is fetched again)."""
        path = self.path(build)
        if not path.is_file():
            return None
        try:
            open_verified(path, build.sha256, str(path), lambda data: verify(data, build, str(path)))
        except FileNotFoundError:
            return None
        except IntegrityError:
            path.unlink(missing_ok=True)
            return None
        return path

    def fetch(self, build: Build, source) -> Path:
        """The cached file of ``build``, copied from ``source`` and verified when absent.
        Raises IntegrityError for a file that differs from ``build`` (nothing is cached)."""
        path = self.get(build)
        if path is not None:
            return path
        path = self.path(build)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".fetch-")
        try:
            with os.fdopen(fd, "wb") as out:
                source.copy_to(build, out)
            verify(Path(tmp).read_bytes(), build, source.where(build))
            os.chmod(tmp, 0o444)  # a cached build is never written again, only replaced whole
            os.replace(tmp, path)  # atomic: concurrent loaders see a whole, verified file
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return path


def verify(data: bytes, build: Build, where: str) -> None:
    """IntegrityError unless ``data`` is the file ``build`` describes: its size, its
    sha256, and the architecture and tensorplug ABI it records."""
    refused = "refused, nothing of it was loaded"
    if len(data) != build.size:
        # A longer file is read only one byte past its expected size.
        size = f"more than {build.size}" if len(data) > build.size else len(data)
        raise IntegrityError(f"hub: {where} has {size} bytes, the index of {build.name} {build.version} says "
                             f"{build.size}: {refused}")
    digest = hashlib.sha256(data).hexdigest()
    if digest != build.sha256:
        raise IntegrityError(f"hub: {where} has sha256 {digest}, the index of {build.name} {build.version} says "
                             f"{build.sha256}: {refused}")
    facts = read_elf(data, where)
    if facts.abi != build.abi or facts.arch != build.arch:
        raise IntegrityError(f"hub: {where} records tensorplug ABI {facts.abi} for {facts.arch}, the index of "
                             f"{build.name} {build.version} says ABI {build.abi} for {build.arch}: {refused}")
