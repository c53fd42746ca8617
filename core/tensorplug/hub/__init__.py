"""The kernel hub: load a kernel library by name, the right build for this machine
(docs/hub.md).

A published library is a set of builds keyed on what a binary needs of a machine (the
tensorplug ABI, OS and libc, CPU architecture and ISA level, GPU toolkit and devices),
never on a framework version: one build serves numpy, torch, jax and paddle alike::

    from tensorplug import hub
    kernels = hub.load("org/kernels", source="https://example.org/kernels/")
    hub.load("org/kernels", lock="kernels.lock")         # exactly the locked build, or an error

``import tensorplug`` does not import this module; it is imported on first use of
``tensorplug.hub``, and imports ``urllib`` only when an HTTP source is used.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path

from ._layout import (FORMAT, LIBRARY_INDEX, ROOT_INDEX, Build, IntegrityError, check_name, check_version, load_json,
                      publish)
from ._machine import ISA_LEVELS, Machine, detect_machine
from ._select import Candidate, Selection
from ._select import select as _match
from . import _signing
from ._signing import generate_key, trusted_keys
from ._deadline import Deadline
from ._sources import ENTRY_POINT_GROUP, INSTALLED, LOAD_TIMEOUT_S, Cache, load_deadline, open_source, verify

LOCK_FORMAT = "tensorplug-hub-lock/1"
_LOCK_LIMIT = 16 << 20  # bytes


class NoMatchingBuild(LookupError):
    """No build of the library runs here (or the locked one does not); the message holds
    the table of every build and why it was rejected."""


def _sources(source, keys=None) -> list:
    keys = _signing.trusted_keys(keys)
    if source is None:
        return [open_source(INSTALLED, keys)]
    items = [source] if isinstance(source, (str, os.PathLike)) or hasattr(source, "label") else list(source)
    if not items:
        raise ValueError("hub: argument 'source': expected a source or a list of sources, got an empty list")
    return [open_source(s, keys) for s in items]


@contextlib.contextmanager
def _deadline(timeout: float | None):
    """One deadline over every request of a hub call (the outermost call's, when nested)."""
    if load_deadline.get() is not None:
        yield
        return
    token = load_deadline.set(Deadline(LOAD_TIMEOUT_S if timeout is None else timeout, "the hub call"))
    try:
        yield
    finally:
        load_deadline.reset(token)


def _builds(name: str, sources) -> list[Build]:
    return [build for source in sources for build in source.builds(name)]


def select(name: str, version: str | None = None, *, source=None, lock=None,
           machine: Machine | None = None, trusted_keys=None, timeout: float | None = None) -> Selection:
    """Match every build of the library ``name`` ("org/name") in ``source`` against this
    machine (or ``machine``) and return the :class:`Selection`: the chosen build and why
    each other one was not chosen. Nothing is downloaded but the indexes.

    ``source`` is a directory, an ``http(s)://`` URL, ``"installed"`` or a list of them
    (default: installed distributions, so no network unless asked). ``version`` asks for
    one version (default: the newest that runs). With ``lock`` (a lock file path), the one
    candidate is the build it records for ``name``.

    ``trusted_keys`` (public keys ``ed25519:...`` or paths of ``.pub`` files; default
    ``$TENSORPLUG_HUB_TRUSTED_KEYS``): when any are given, every index read must be signed
    by one of them, or IntegrityError. ``timeout`` bounds the whole call, every request
    included (default 300 s; each request also has its source's own 30 s)."""
    with _deadline(timeout):
        return _select(name, version, source, lock, machine, trusted_keys)


def _select(name, version, source, lock, machine, keys) -> Selection:
    check_name(name, "select() argument 'name'")
    if version is not None:
        check_version(version, "select() argument 'version'")
    if lock is not None:
        build = _locked(lock, name, version)
        builds, sources, request = [build], [build.source], f"locked in {lock}"
    else:
        opened = _sources(source, keys)
        builds, sources = _builds(name, opened), [s.label for s in opened]
        request = f"version {version}" if version else "newest version"
    if machine is None:
        machine = detect_machine(gpus=any(b.cuda or b.rocm for b in builds))
    return _match(name, builds, machine, version, request, sources)


def fetch(name: str, version: str | None = None, *, source=None, lock=None, cache=None, trusted_keys=None,
          timeout: float | None = None) -> Path:
    """The verified local file of the build :func:`select` chooses, downloaded into the
    digest-keyed cache (``cache``, default ``<tensorplug cache>/hub``) unless already
    there: nothing is downloaded twice, and a cached locked build needs no source at all.
    Raises NoMatchingBuild when no build runs here, IntegrityError when the file differs
    from its description (it is not cached), OSError when a source cannot be read.
    ``trusted_keys`` and ``timeout`` as for :func:`select`."""
    with _deadline(timeout):
        selection = select(name, version, source=source, lock=lock, trusted_keys=trusted_keys)
        return fetch_selected(selection, source=source, lock=lock, cache=cache)


def fetch_selected(selection: Selection, *, source=None, lock=None, cache=None, timeout: float | None = None) -> Path:
    """:func:`fetch` for a Selection already made (by :func:`select` with the same
    ``source`` and ``lock``)."""
    with _deadline(timeout):
        return _fetch_selected(selection, source, lock, cache)


def _fetch_selected(selection: Selection, source, lock, cache) -> Path:
    build = selection.chosen
    if build is None:
        what = (f"the build of {selection.name} locked in {lock} does not run" if lock is not None
                else f"no build of {selection.name} runs")
        raise NoMatchingBuild(f"hub: {what} here:\n{selection.table()}")
    store = Cache(cache)
    cached = store.get(build)
    if cached is not None:
        return cached
    if lock is not None:  # the source given, else the one the lock records
        return store.fetch(build, _sources(source if source is not None else build.source)[0])
    return store.fetch(build, next(s for s in _sources(source) if s.label == build.source))


def load(name: str, version: str | None = None, *, source=None, lock=None, cache=None, explain: bool = False,
         release_gil: bool = True, trusted_keys=None, timeout: float | None = None, signatures=None, writes=None):
    """Load the best build of the kernel library ``name`` ("org/name") for this machine
    and return its :class:`tensorplug.Module`.

    The build is chosen as :func:`select` says (``explain=True`` prints its table first),
    fetched and verified as :func:`fetch` does, and loaded through the very file that was
    verified (its digest, size, architecture and ABI checked on the bytes the loader then
    maps: a file swapped into the cache meanwhile is refused, never run). With ``lock``,
    the build the lock file records for ``name``, or an error. ``trusted_keys`` and
    ``timeout`` as for :func:`select`. ``signatures`` and ``writes`` are
    :func:`tensorplug.load_module`'s, for a library built for apache tvm-ffi. Raises
    NoMatchingBuild, IntegrityError, OSError as :func:`fetch` does."""
    from .._verified import load_module_verified

    with _deadline(timeout):
        selection = select(name, version, source=source, lock=lock, trusted_keys=trusted_keys)
        if explain:
            print(selection.table())
        path = fetch_selected(selection, source=source, lock=lock, cache=cache)
    build = selection.chosen
    return load_module_verified(path, build.sha256, str(path), check=lambda data: verify(data, build, str(path)),
                                release_gil=release_gil, signatures=signatures, writes=writes)


def parse_requirement(text: str, where: str) -> tuple[str, str | None]:
    """``"org/name"`` or ``"org/name==1.2.0"`` as (name, version or None)."""
    name, sep, version = str(text).partition("==")
    return check_name(name, where), check_version(version, where) if sep else None


def lock(path, requirements, *, source=None, trusted_keys=None, timeout: float | None = None) -> dict[str, Build]:
    """Write the lock file ``path`` recording, for each requirement (``"org/name"`` or
    ``"org/name==1.2.0"``), the build :func:`select` chooses here, with its digest and
    source; returns them by name. Raises NoMatchingBuild when one has no build that runs."""
    chosen = {}
    for requirement in ([requirements] if isinstance(requirements, str) else requirements):
        name, version = parse_requirement(requirement, "lock() argument 'requirements'")
        selection = select(name, version, source=source, trusted_keys=trusted_keys, timeout=timeout)
        if selection.chosen is None:
            raise NoMatchingBuild(f"hub: no build of {name} runs here:\n{selection.table()}")
        chosen[name] = selection.chosen
    entries = {name: {**build.to_json(), "source": build.source} for name, build in sorted(chosen.items())}
    Path(path).write_text(json.dumps({"format": LOCK_FORMAT, "libraries": entries}, indent=1, sort_keys=True) + "\n")
    return chosen


def read_lock(path) -> dict[str, Build]:
    """The builds a lock file records, by library name. IntegrityError for a file that is
    not a lock, or an entry whose build is not the one its key names."""
    with open(path, "rb") as f:
        text = f.read(_LOCK_LIMIT + 1)
    if len(text) > _LOCK_LIMIT:
        raise IntegrityError(f"hub: lock file {path} is larger than {_LOCK_LIMIT} bytes")
    data = load_json(text, f"hub: lock file {path}")
    if not isinstance(data, dict) or data.get("format") != LOCK_FORMAT or not isinstance(data.get("libraries"), dict):
        raise IntegrityError(f"hub: {path} is not a lock file (expected format {LOCK_FORMAT!r})")
    builds = {}
    for name, entry in data["libraries"].items():
        try:
            check_name(name, f"hub: lock file {path}")
        except ValueError as exc:
            raise IntegrityError(str(exc)) from None
        if not isinstance(entry, dict) or not isinstance(entry.get("source"), str):
            raise IntegrityError(f"hub: lock file {path}: the entry of {name!r} has no source")
        fields = {k: v for k, v in entry.items() if k != "source"}
        build = Build.from_json(fields, f"lock file {path}", entry["source"])
        if build.name != name:
            raise IntegrityError(f"hub: lock file {path}: the entry of {name!r} locks a build of {build.name!r}")
        builds[name] = build
    return builds


def _locked(path, name: str, version: str | None) -> Build:
    builds = read_lock(path)
    if name not in builds:
        raise NoMatchingBuild(f"hub: lock file {path} has no entry for {name} (it locks: "
                              f"{', '.join(sorted(builds)) or 'nothing'})")
    build = builds[name]
    if version is not None and build.version != version:
        raise NoMatchingBuild(f"hub: lock file {path} locks {name} {build.version}, asked for version {version}")
    return build


def libraries(source=None, *, trusted_keys=None, timeout: float | None = None) -> dict[str, list[Build]]:
    """Every library of ``source`` (as :func:`select` takes it) and its builds."""
    found: dict[str, list[Build]] = {}
    with _deadline(timeout):
        for opened in _sources(source, trusted_keys):
            for name in opened.libraries():
                found.setdefault(name, []).extend(opened.builds(name))
    return dict(sorted(found.items()))


def vendor(lock, directory, *, source=None, cache=None, timeout: float | None = None) -> dict[str, Build]:
    """Copy every build the lock file ``lock`` records into ``directory``, a directory
    source that then loads them with no network: ``load(name, lock=lock, source=directory)``
    (air-gapped machines). Each build is fetched and verified first; its library's index
    and signature are copied as published, so trusted keys still check them offline (the
    index may list builds not vendored: load with the lock). Returns the builds by name."""
    builds = read_lock(lock)
    root = Path(directory)
    with _deadline(timeout):
        for name, build in sorted(builds.items()):
            selection = select(name, lock=lock)
            path = fetch_selected(selection, source=source, lock=lock, cache=cache)
            target = root / name / build.file
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            index, signature = _sources(source if source is not None else build.source, ())[0].signed_index(name)
            if index is None:  # a source without an index (cannot happen for a published layout)
                index = (json.dumps({"format": FORMAT, "name": name, "builds": [build.to_json()]}, indent=1,
                                    sort_keys=True) + "\n").encode()
            (root / name / LIBRARY_INDEX).write_bytes(index)
            if signature is not None:
                (root / name / (LIBRARY_INDEX + ".sig")).write_bytes(signature)
    (root / ROOT_INDEX).write_text(json.dumps({"format": FORMAT, "libraries": sorted(builds)}, indent=1) + "\n")
    return builds


def verify_source(source=None, *, lock=None, trusted_keys=None, cache=None, timeout: float | None = None) -> list[str]:
    """Check a site (every library's index signed by a trusted key, every build file
    matching its index) or, with ``lock``, every build a lock records (its source's index
    signed and listing it, its file matching). Returns one line per build checked; raises
    IntegrityError (or OSError) at the first that fails. Needs trusted keys."""
    keys = _signing.trusted_keys(trusted_keys)
    if not keys:
        raise ValueError("hub verify: no trusted keys (give --key or set TENSORPLUG_HUB_TRUSTED_KEYS): nothing to "
                         "check signatures against")
    lines = []
    with _deadline(timeout):
        if lock is not None:
            for name, build in sorted(read_lock(lock).items()):
                listed = _sources(source if source is not None else build.source, keys)[0].builds(name)
                if build not in listed:
                    raise IntegrityError(f"hub: the build of {name} locked in {lock} (sha256 {build.sha256}) is not "
                                         f"in the signed index of {build.source}")
                path = fetch_selected(select(name, lock=lock), source=source, lock=lock, cache=cache)
                lines.append(f"ok {name} {build.version} {build.variant} sha256:{build.sha256} {path}")
            return lines
        for name, builds in libraries(source, trusted_keys=keys).items():
            for build in builds:
                path = Cache(cache).fetch(build, _sources(build.source, keys)[0])
                lines.append(f"ok {name} {build.version} {build.variant} sha256:{build.sha256} {path}")
    return lines


__all__ = ["Build", "Cache", "Candidate", "ENTRY_POINT_GROUP", "ISA_LEVELS", "IntegrityError", "Machine",
           "NoMatchingBuild", "Selection", "detect_machine", "fetch", "fetch_selected", "generate_key", "libraries",
           "load", "lock", "parse_requirement", "publish", "read_lock", "select", "trusted_keys", "vendor",
           "verify_source"]
