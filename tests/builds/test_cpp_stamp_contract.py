"""``cpp.build``'s stamp as a contract (docs/cpp.md; ``cpp.build``'s docstring): the
library is rebuilt when any one input changed since it was built (each source, each flag
list, a header a source includes, the compilers) and used as it is when nothing changed.

Observed through ``cpp.build`` alone: a rebuild replaces the file (a new inode and
modification time; the build renames a new file into place), a library left as it is keeps
both. Tiny C sources keep the compiles cheap (a dozen in all).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tensorplug import cpp

if shutil.which("cc") is None or shutil.which("c++") is None:
    pytest.skip("no C and C++ compilers on PATH (cc, c++)", allow_module_level=True)


def _identity(path: str) -> tuple[int, int, bytes]:
    st = os.stat(path)
    return st.st_ino, st.st_mtime_ns, Path(path).read_bytes()


class Inputs:
    """Every input of one build, each changed by ``change(name)``."""

    def __init__(self, root: Path, monkeypatch):
        self.root = root
        (root / "inc").mkdir()
        (root / "bin").mkdir()
        self.a, self.b, self.header = root / "a.c", root / "b.c", root / "inc" / "value.h"
        self.a.write_text('#include "value.h"\nint a_value(void) { return VALUE; }\n')
        self.b.write_text("int b_value(void) { return 1; }\n")
        self.header.write_text("#define VALUE 1\n")
        self.cflags, self.ldflags = ["-DFLAG=1"], ["-Wl,-soname,libstampone.so"]
        self.cc, self.cxx = root / "bin" / "cc-wrapper", root / "bin" / "cxx-wrapper"
        self.cc_real, self.cxx_real = shutil.which("cc"), shutil.which("c++")
        self.cc.write_text(f'#!/bin/sh\nexec {self.cc_real} "$@"\n')
        self.cxx.write_text(f'#!/bin/sh\nexec {self.cxx_real} "$@"\n')
        for w in (self.cc, self.cxx):
            w.chmod(0o755)
        monkeypatch.setenv("CC", str(self.cc))
        monkeypatch.setenv("CXX", str(self.cxx))
        self.serial = 1

    def change(self, name: str) -> None:
        self.serial += 1
        n = self.serial
        if name == "first source":
            self.a.write_text(self.a.read_text() + f"int a_extra{n}(void) {{ return {n}; }}\n")
        elif name == "second source":
            self.b.write_text(self.b.read_text() + f"int b_extra{n}(void) {{ return {n}; }}\n")
        elif name == "included header":
            self.header.write_text(f"#define VALUE {n}\n")
        elif name == "extra_cflags":
            self.cflags = [f"-DFLAG={n}"]
        elif name == "extra_ldflags":
            self.ldflags = [f"-Wl,-soname,libstamp{n}.so"]
        elif name == "C compiler":
            self.cc.write_text(self.cc.read_text() + f"# {n}\n")
        elif name == "C++ compiler (the linker)":
            self.cxx.write_text(self.cxx.read_text() + f"# {n}\n")
        else:
            raise AssertionError(name)

    def build(self, build_directory=None) -> str:
        return cpp.build("stamped", [self.a, self.b], extra_cflags=self.cflags, extra_ldflags=self.ldflags,
                         include_dirs=[self.root / "inc"], build_directory=build_directory)


CHANGES = ["first source", "second source", "included header", "extra_cflags", "extra_ldflags", "C compiler"]


@pytest.fixture
def inputs(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORPLUG_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "work").mkdir()
    return Inputs(tmp_path / "work", monkeypatch)


def test_other_extra_ldflags_link_the_library_again(inputs, tmp_path):
    # the row of issue 40: the flags are an input of the stamp, in a build_directory and in the cache
    for where in (tmp_path / "out", None):
        first = inputs.build(where)
        assert b"libstampone.so" in Path(first).read_bytes()
        inputs.ldflags = ["-Wl,-soname,libstamptwo.so"]
        second = inputs.build(where)
        data = Path(second).read_bytes()
        assert b"libstamptwo.so" in data and b"libstampone.so" not in data, where
        inputs.ldflags = ["-Wl,-soname,libstampone.so"]


def test_any_one_input_changed_rebuilds_and_nothing_changed_does_not(inputs, tmp_path):
    out = tmp_path / "out"
    path = inputs.build(out)
    for name in CHANGES + ["extra_ldflags"]:  # the last: back to an earlier state, still a change
        before = _identity(path)
        assert inputs.build(out) == path and _identity(path) == before, f"rebuilt with nothing changed (before {name})"
        inputs.change(name)
        assert inputs.build(out) == path
        assert _identity(path)[:2] != before[:2], f"not rebuilt after changing the {name}"
    before = _identity(path)
    assert inputs.build(out) == path and _identity(path) == before


def test_the_linker_is_an_input_too(inputs, tmp_path):
    path = inputs.build(tmp_path / "out")
    before = _identity(path)
    inputs.change("C++ compiler (the linker)")
    inputs.build(tmp_path / "out")
    assert _identity(path)[:2] != before[:2]
