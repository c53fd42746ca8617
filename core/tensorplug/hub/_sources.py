"""Where builds come from (a directory, a static HTTP(S) tree, installed distributions) and
the digest-keyed cache every file is verified into before it is loaded.

A source is named by a string, which is also what a lock file records: a directory path, an
``http://`` / ``https://`` URL, or ``installed`` (distributions declaring kernels under the
entry-point group ``tensorplug.kernels``: the entry point's name is the library's name,
its value the package whose directory is a layout root). Only an URL touches the network,
and ``urllib`` is imported only then.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from ._elf import read_elf
from ._layout import LIBRARY_INDEX, ROOT_INDEX, Build, IntegrityError, parse_index, parse_root_index

ENTRY_POINT_GROUP = "tensorplug.kernels"
INSTALLED = "installed"
HTTP_TIMEOUT_S = 30.0
_INDEX_LIMIT = 16 << 20  # bytes; an index larger than this is refused, not read


class DirectorySource:
    """A layout root on a file system."""

    def __init__(self, root, label: str | None = None):
        self.root = Path(root)
        self.label = label or str(self.root)

    def libraries(self) -> list[str]:
        path = self.root / ROOT_INDEX
        if not path.is_file():
            raise FileNotFoundError(f"hub source {self.label}: no {ROOT_INDEX} (not a published layout)")
        return parse_root_index(path.read_bytes(), str(path))

    def builds(self, name: str) -> list[Build]:
        path = self.root / name / LIBRARY_INDEX
        if not path.is_file():
            return []
        return parse_index(path.read_bytes(), str(path), name, self.label)

    def copy_to(self, build: Build, out) -> None:
        with open(self.root / build.name / build.file, "rb") as f:
            _copy_bounded(f, out, build)

    def where(self, build: Build) -> str:
        return str(self.root / build.name / build.file)


class HttpSource:
    """A layout root served over HTTP(S) by any static file server."""

    def __init__(self, url: str, timeout: float = HTTP_TIMEOUT_S):
        self.url = url.rstrip("/") + "/"
        self.label = url
        self.timeout = timeout

    def _open(self, relative: str):
        import urllib.error
        import urllib.request

        url = self.url + relative
        try:
            return urllib.request.urlopen(url, timeout=self.timeout)  # noqa: S310 (http/https only, checked)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise OSError(f"hub source {self.label}: GET {url} failed: HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise OSError(f"hub source {self.label}: GET {url} failed: {getattr(exc, 'reason', exc)}") from None

    def _read_index(self, relative: str) -> bytes | None:
        response = self._open(relative)
        if response is None:
            return None
        with response:
            data = response.read(_INDEX_LIMIT + 1)
        if len(data) > _INDEX_LIMIT:
            raise IntegrityError(f"hub source {self.label}: {relative} is larger than {_INDEX_LIMIT} bytes")
        return data

    def libraries(self) -> list[str]:
        data = self._read_index(ROOT_INDEX)
        if data is None:
            raise FileNotFoundError(f"hub source {self.label}: no {ROOT_INDEX} (not a published layout)")
        return parse_root_index(data, self.url + ROOT_INDEX)

    def builds(self, name: str) -> list[Build]:
        data = self._read_index(f"{name}/{LIBRARY_INDEX}")
        return [] if data is None else parse_index(data, f"{self.url}{name}/{LIBRARY_INDEX}", name, self.label)

    def copy_to(self, build: Build, out) -> None:
        response = self._open(f"{build.name}/{build.file}")
        if response is None:
            raise FileNotFoundError(f"hub source {self.label}: {self.where(build)} is missing (HTTP 404)")
        with response:
            _copy_bounded(response, out, build)

    def where(self, build: Build) -> str:
        return f"{self.url}{build.name}/{build.file}"


class InstalledSource:
    """Installed distributions that declare a library under the ``tensorplug.kernels``
    entry-point group; their packages are found without being imported."""

    label = INSTALLED

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
            roots[entry.name] = DirectorySource(list(spec.submodule_search_locations)[0], INSTALLED)
        return roots

    def libraries(self) -> list[str]:
        return sorted(self._roots())

    def builds(self, name: str) -> list[Build]:
        root = self._roots().get(name)
        return root.builds(name) if root else []

    def copy_to(self, build: Build, out) -> None:
        self._roots()[build.name].copy_to(build, out)

    def where(self, build: Build) -> str:
        return self._roots()[build.name].where(build)


def open_source(source) -> DirectorySource | HttpSource | InstalledSource:
    """The source a string (or path) names; ValueError for an URL of another scheme."""
    if isinstance(source, (DirectorySource, HttpSource, InstalledSource)):
        return source
    if isinstance(source, os.PathLike):
        return DirectorySource(source)
    if not isinstance(source, str) or not source:
        raise TypeError(f"hub: a source is a directory, an http(s) URL or 'installed', got {source!r}")
    if source == INSTALLED:
        return InstalledSource()
    if source.startswith(("http://", "https://")):
        return HttpSource(source)
    if "://" in source:
        raise ValueError(f"hub: a source URL must be http:// or https://, got {source!r}")
    return DirectorySource(source)


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
    """Verified build files, keyed by digest: ``<root>/sha256/<digest>/<file name>``. A
    file enters only after its digest, size and recorded facts are checked, and is checked
    again each time it is handed out."""

    def __init__(self, root=None):
        if root is None:
            from ..cpp import cache_dir

            root = cache_dir() / "hub"
        self.root = Path(root)

    def path(self, build: Build) -> Path:
        return self.root / "sha256" / build.sha256 / Path(build.file).name

    def get(self, build: Build) -> Path | None:
        """The verified cached file of ``build``, or None (a cached file that no longer
        matches its digest is removed, so it is fetched again)."""
        path = self.path(build)
        if not path.is_file():
            return None
        try:
            verify(path.read_bytes(), build, str(path))
        except IntegrityError:
            path.unlink()
            return None
        return path

    def fetch(self, build: Build, source) -> Path:
        """The cached file of ``build``, copied from ``source`` and verified when absent.
        Raises IntegrityError for a file that differs from ``build`` (nothing is cached)."""
        path = self.get(build)
        if path is not None:
            return path
        path = self.path(build)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".fetch-")
        try:
            with os.fdopen(fd, "wb") as out:
                source.copy_to(build, out)
            verify(Path(tmp).read_bytes(), build, source.where(build))
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
