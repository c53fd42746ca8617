"""The suite's shared pieces (docs/testing.md, "Layout of the suite").

tests/support/ holds everything a test uses that is not a test: the kernel sources
(op_kernels.cc, grad_kernels.cc, ...), the modules that build and declare them
(op_kernels.py, grad_kernels.py, sharding_kernels.py, ...), the fake-device adapter and the
worker scripts of the multi-process tests. It is put on sys.path here, so a test imports them
by name (``import op_kernels``) from whichever folder it sits in. tests/ itself is never on
sys.path: its folders are named for the frameworks they test (tests/torch/, tests/jax/), and a
folder on the path would stand in for a framework that is not installed.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

SUPPORT = Path(__file__).parent / "support"
if str(SUPPORT) not in sys.path:
    sys.path.insert(0, str(SUPPORT))
# pytest (import mode "prepend") put tests/ on sys.path to import this file: taken off again,
# or where torch is not installed, paddle's `import torch` (paddle 3.3 tries it) finds
# tests/torch/ as a namespace package, and the torch adapter then fails every paddle test
# ("module 'torch' has no attribute 'Tensor'": tests/pythons/run.py's venvs have no torch).
while str(Path(__file__).parent) in sys.path:
    sys.path.remove(str(Path(__file__).parent))


@pytest.fixture(scope="session", autouse=True)
def frameworks_temporary_files(tmp_path_factory):
    """$TMPDIR, for this process and the ones it starts, is a folder of pytest's own: the
    frameworks write temporary files they never remove (torch's AOTInductor package loader
    extracts every package it loads into a folder of its own under $TMPDIR), and pytest
    keeps only its last few runs' folders."""
    folder = tmp_path_factory.mktemp("TMPDIR")
    saved = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(folder)
    tempfile.tempdir = None  # computed again from $TMPDIR
    yield folder
    if saved is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = saved
    tempfile.tempdir = None


@pytest.fixture(scope="session")
def ops():
    """The kernels of tests/support/op_kernels.cc declared as ops (namespace ``tptest``;
    op_kernels.py lists them), built and declared once per session."""
    import op_kernels

    return op_kernels.ops()


@pytest.fixture(scope="session")
def grad_ops():
    """The kernels of tests/support/grad_kernels.cc declared as ops with their backwards
    (namespace ``tpgrad``; grad_kernels.py lists them), built and declared once per session."""
    import grad_kernels

    return grad_kernels.ops()


@pytest.fixture(scope="session")
def args_kernels():
    """The argument-kinds library (tests/support/args_kernels.cc), built once per session."""
    import shared_kernels

    return shared_kernels.args_kernels()
