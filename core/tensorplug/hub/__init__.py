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

import json
import os
from pathlib import Path

from ._layout import Build, IntegrityError, check_name, check_version, publish
from ._machine import ISA_LEVELS, Machine, detect_machine
from ._select import Candidate, Selection
from ._select import select as _match
from ._sources import ENTRY_POINT_GROUP, INSTALLED, Cache, open_source

LOCK_FORMAT = "tensorplug-hub-lock/1"


class NoMatchingBuild(LookupError):
    """No build of the library runs here (or the locked one does not); the message holds
    the table of every build and why it was rejected."""


def _sources(source) -> list:
    if source is None:
        return [open_source(INSTALLED)]
    items = [source] if isinstance(source, (str, os.PathLike)) or hasattr(source, "label") else list(source)
    if not items:
        raise ValueError("hub: argument 'source': expected a source or a list of sources, got an empty list")
    return [open_source(s) for s in items]


def _builds(name: str, sources) -> list[Build]:
    return [build for source in sources for build in source.builds(name)]


def select(name: str, version: str | None = None, *, source=None, lock=None,
           machine: Machine | None = None) -> Selection:
    """Match every build of the library ``name`` ("org/name") in ``source`` against this
    machine (or ``machine``) and return the :class:`Selection`: the chosen build and why
    each other one was not chosen. Nothing is downloaded but the indexes.

    ``source`` is a directory, an ``http(s)://`` URL, ``"installed"`` or a list of them
    (default: installed distributions, so no network unless asked). ``version`` asks for
    one version (default: the newest that runs). With ``lock`` (a lock file path), the one
    candidate is the build it records for ``name``."""
    check_name(name, "select() argument 'name'")
    if version is not None:
        check_version(version, "select() argument 'version'")
    if lock is not None:
        build = _locked(lock, name, version)
        builds, sources, request = [build], [build.source], f"locked in {lock}"
    else:
        opened = _sources(source)
        builds, sources = _builds(name, opened), [s.label for s in opened]
        request = f"version {version}" if version else "newest version"
    if machine is None:
        machine = detect_machine(gpus=any(b.cuda or b.rocm for b in builds))
    return _match(name, builds, machine, version, request, sources)


def fetch(name: str, version: str | None = None, *, source=None, lock=None, cache=None) -> Path:
    """The verified local file of the build :func:`select` chooses, downloaded into the
    digest-keyed cache (``cache``, default ``<tensorplug cache>/hub``) unless already
    there: nothing is downloaded twice, and a cached locked build needs no source at all.
    Raises NoMatchingBuild when no build runs here, IntegrityError when the file differs
    from its description (it is not cached), OSError when a source cannot be read."""
    return fetch_selected(select(name, version, source=source, lock=lock), source=source, lock=lock, cache=cache)


def fetch_selected(selection: Selection, *, source=None, lock=None, cache=None) -> Path:
    """:func:`fetch` for a Selection already made (by :func:`select` with the same
    ``source`` and ``lock``)."""
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
         release_gil: bool = True):
    """Load the best build of the kernel library ``name`` ("org/name") for this machine
    and return its :class:`tensorplug.Module`.

    The build is chosen as :func:`select` says (``explain=True`` prints its table first),
    fetched and verified as :func:`fetch` does (every file is checked against its digest
    before it is loaded), and loaded with :func:`tensorplug.load_module`. With ``lock``,
    the build the lock file records for ``name``, or an error. Raises NoMatchingBuild,
    IntegrityError, OSError as :func:`fetch` does."""
    from .._module import load_module

    selection = select(name, version, source=source, lock=lock)
    if explain:
        print(selection.table())
    return load_module(fetch_selected(selection, source=source, lock=lock, cache=cache), release_gil=release_gil)


def parse_requirement(text: str, where: str) -> tuple[str, str | None]:
    """``"org/name"`` or ``"org/name==1.2.0"`` as (name, version or None)."""
    name, sep, version = str(text).partition("==")
    return check_name(name, where), check_version(version, where) if sep else None


def lock(path, requirements, *, source=None) -> dict[str, Build]:
    """Write the lock file ``path`` recording, for each requirement (``"org/name"`` or
    ``"org/name==1.2.0"``), the build :func:`select` chooses here, with its digest and
    source; returns them by name. Raises NoMatchingBuild when one has no build that runs."""
    chosen = {}
    for requirement in ([requirements] if isinstance(requirements, str) else requirements):
        name, version = parse_requirement(requirement, "lock() argument 'requirements'")
        selection = select(name, version, source=source)
        if selection.chosen is None:
            raise NoMatchingBuild(f"hub: no build of {name} runs here:\n{selection.table()}")
        chosen[name] = selection.chosen
    entries = {name: {**build.to_json(), "source": build.source} for name, build in sorted(chosen.items())}
    Path(path).write_text(json.dumps({"format": LOCK_FORMAT, "libraries": entries}, indent=1, sort_keys=True) + "\n")
    return chosen


def read_lock(path) -> dict[str, Build]:
    """The builds a lock file records, by library name."""
    text = Path(path).read_text()
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise IntegrityError(f"hub: lock file {path} is not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != LOCK_FORMAT or not isinstance(data.get("libraries"), dict):
        raise IntegrityError(f"hub: {path} is not a lock file (expected format {LOCK_FORMAT!r})")
    builds = {}
    for name, entry in data["libraries"].items():
        if not isinstance(entry, dict) or not isinstance(entry.get("source"), str):
            raise IntegrityError(f"hub: lock file {path}: the entry of {name!r} has no source")
        fields = {k: v for k, v in entry.items() if k != "source"}
        builds[name] = Build.from_json(fields, f"lock file {path}", entry["source"])
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


def libraries(source=None) -> dict[str, list[Build]]:
    """Every library of ``source`` (as :func:`select` takes it) and its builds."""
    found: dict[str, list[Build]] = {}
    for opened in _sources(source):
        for name in opened.libraries():
            found.setdefault(name, []).extend(opened.builds(name))
    return dict(sorted(found.items()))


__all__ = ["Build", "Cache", "Candidate", "ENTRY_POINT_GROUP", "ISA_LEVELS", "IntegrityError", "Machine",
           "NoMatchingBuild", "Selection", "detect_machine", "fetch", "fetch_selected", "libraries", "load", "lock",
           "parse_requirement",
           "publish", "read_lock", "select"]
