"""Native code loaded only as it was verified, from directories only its user can write.

A library read from a cache (the hub's, :func:`tensorplug.cpp.build`'s, the torch bridge's)
is checked and loaded through one open file: the check reads the descriptor, and the loader
opens ``/proc/self/fd/N`` of that same descriptor, so a file renamed over the path between
the check and the load is never run. The descriptor stays open for the life of the process
(the library is never unloaded either): the dynamic loader knows a library by the name it
was opened with, and the number of a closed descriptor would name the next file opened.
Loads of the same content share that descriptor, so a cache entry re-created with the same
bytes (another process's first fetch, a prune) loads the library already running.

Writes to the file itself, in place, are left to the directory's permissions: the caches
are created private (0700) and refused when another user owns them or could write them
(:func:`private_directory`).
"""

from __future__ import annotations

import hashlib
import os
import stat
import threading
from pathlib import Path

_lock = threading.Lock()
# sha256 -> (/proc/self/fd/N of the verified file, open for good; its identity when verified)
_kept: dict[str, tuple[str, tuple]] = {}


class IntegrityError(ValueError):
    """A file differs from its description (digest, size, or the facts the file records):
    it was refused and nothing of it was loaded."""


class UnsafeDirectoryError(PermissionError):
    """A cache or build directory that another user could write: nothing is read from it."""


def private_directory(path, what: str) -> Path:
    """``path`` as a directory only this user can write: created with mode 0700 when
    missing; UnsafeDirectoryError, naming it and the fix, when it is owned by another user
    or writable by group or others (they could swap the libraries this process loads)."""
    path = Path(path)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.stat(path)
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid != os.geteuid():
        raise UnsafeDirectoryError(
            f"{what} {path} is owned by uid {st.st_uid}, not by this user (uid {os.geteuid()}): libraries loaded "
            f"from it could be swapped by its owner; use a directory of your own (set TENSORPLUG_CACHE_DIR) or "
            f"take it over (chown {os.geteuid()} {path})")
    if mode & 0o022:
        who = " and ".join(w for w, bit in (("group", 0o020), ("others", 0o002)) if mode & bit)
        raise UnsafeDirectoryError(
            f"{what} {path} has mode {mode:04o}, writable by {who}: another user could swap the libraries this "
            f"process loads; make it private (chmod 700 {path}) or use a directory of your own "
            f"(set TENSORPLUG_CACHE_DIR)")
    return path


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def open_verified(path, sha256: str, where: str, check=None) -> str:
    """Open the regular file ``path`` (not through a symbolic link), check that its bytes
    have the digest ``sha256`` (and pass ``check(data)``, which raises to refuse them), and
    return ``/proc/self/fd/N`` of the open, verified file for the loader (the descriptor
    of the first file verified with these contents, when one is). IntegrityError when the
    bytes differ; OSError when the file cannot be opened."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise IntegrityError(f"{where} is not a regular file: refused, nothing of it was loaded")
        data = _read_all(fd)
        digest = hashlib.sha256(data).hexdigest()
        if digest != sha256:
            raise IntegrityError(f"{where} has sha256 {digest}, expected {sha256}: refused, nothing of it was loaded")
        if check is not None:
            check(data)
    except BaseException:
        os.close(fd)
        raise
    with _lock:
        kept = _kept.get(sha256)
        # The same content, already open (and maybe loaded): one library, one name; unless the
        # kept file was written in place since, when the new one takes its place (the old
        # descriptor stays open: a library may be mapped from it).
        if kept is not None and _identity(os.stat(kept[0])) == kept[1]:
            os.close(fd)
            return kept[0]
        _kept[sha256] = (f"/proc/self/fd/{fd}", _identity(st))
        return _kept[sha256][0]


def _identity(st: os.stat_result) -> tuple:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def load_module_verified(path, sha256: str, where: str, *, check=None, release_gil: bool = True, signatures=None,
                         writes=None):
    """:func:`tensorplug.load_module` of ``path`` as :func:`open_verified` checked it: the
    Module's ``path`` and its error messages name ``path``."""
    from ._module import Module

    return Module(open_verified(path, sha256, where, check), release_gil=release_gil, _display_path=os.fspath(path),
                  signatures=signatures, writes=writes)


def load_cdll_verified(path, sha256: str, where: str):
    """``ctypes.CDLL`` of ``path`` as :func:`open_verified` checked it. Its ``loaded_from``
    is the name the loader opened (``/proc/self/fd/N`` of the verified file): a framework
    that must open the library itself (paddle's operator registry) opens that name, so the
    loader hands it the library already loaded."""
    import ctypes

    loaded_from = open_verified(path, sha256, where)
    library = ctypes.CDLL(loaded_from)
    library.loaded_from = loaded_from
    return library


def file_digest(path) -> str:
    """The sha256 of the file at ``path``."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest() if hasattr(hashlib, "file_digest") \
            else hashlib.sha256(f.read()).hexdigest()
