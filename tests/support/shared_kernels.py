"""Kernel libraries that several test files build from tests/support/, each compiled and
loaded once per process. The op declarations of tests/support/op_kernels.cc and
grad_kernels.cc live in op_kernels.py and grad_kernels.py (subprocesses import those by
name); tests/conftest.py turns all of them into session fixtures (``ops``, ``grad_ops``,
``args_kernels``). Hypothesis tests, which cannot take a function-scoped fixture cheaply,
call these functions directly.
"""

from __future__ import annotations

import functools
from pathlib import Path

import tensorplug
from tensorplug import cpp

HERE = Path(__file__).parent


@functools.cache
def args_kernels():
    """args_kernels.cc: one kernel per parameter and result kind (tests/core/test_args_*.py,
    tests/builds/test_stubs.py)."""
    return tensorplug.load_module(cpp.build("args_kernels", [HERE / "args_kernels.cc"]))


@functools.cache
def contract_kernels():
    """contract_kernels.cc: the kernels of the contract tests (tests/ops/test_grad_checks_contract.py,
    tests/ops/test_rule_engines_agree.py), which declare their own ops of them."""
    return tensorplug.load_module(cpp.build("contract_kernels", [HERE / "contract_kernels.cc"]))
