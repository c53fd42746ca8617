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

import sys
from pathlib import Path

SUPPORT = Path(__file__).parent / "support"
if str(SUPPORT) not in sys.path:
    sys.path.insert(0, str(SUPPORT))
