"""tensorplug.testing: a pytest plugin that certifies tensorplug adapters.

pytest loads this module through tensorplug's ``pytest11`` entry point. It adds

- the option ``--tensorplug-adapter=NAME`` (repeatable, or comma separated): test only
  these adapters (default: every discovered adapter, plus ``tensorplug`` for
  ``tensorplug.Tensor`` itself);
- the option ``--tensorplug-kernels=tvm-ffi``: the checks call the kit's kernels as a binary
  built by apache tvm-ffi (``tensorplug.testing.tvm_ffi_kernels``), not of tensorplug's ABI;
- the fixtures ``tensorplug_adapter`` (a :class:`Framework` per selected adapter; test ids
  are adapter names), ``tensorplug_pair`` (every ordered pair of adapters, at least one
  of them selected), ``tensorplug_partner`` (a second CPU framework to mix with the
  adapter under test: numpy, or another for numpy) and ``tensorplug_kernels`` (the kit's
  kernel library, compiled once per session);
- the hook ``pytest_tensorplug_framework(name)`` (:mod:`tensorplug.testing.hooks`), through
  which a pytest plugin or conftest plugs in the :class:`Framework` of an adapter (the
  first-party ones do, from ``tensorplug_adapters.testing``); an adapter with none is
  tested through the generic :class:`AdapterFramework`;
- the capability report at the end of the run.

The checks are in :mod:`tensorplug.testing.conformance`; run them with
``pytest --pyargs tensorplug.testing.conformance --tensorplug-adapter=NAME``.
Importing this module imports no array framework.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import sys
import warnings
from pathlib import Path

import pytest

from .framework import (DTYPES, NEGATIVE_STRIDES, NEVER_REFUSED, REFUSABLE_LAYOUTS, AdapterFramework, Framework,
                        NumpyBackedFramework, Refusal, TensorplugFramework, Unsupported, as_dlpack, contiguous_strides,
                        host_numpy, make_tensor, numpy_view, refusable, sample)
from .report import CAPABILITIES, CapabilityReport

__all__ = ["CAPABILITIES", "DTYPES", "KERNELS_SOURCE", "NEGATIVE_STRIDES", "NEVER_REFUSED", "REFUSABLE_LAYOUTS",
           "AdapterFramework", "Framework", "NumpyBackedFramework", "Refusal", "TensorplugFramework", "Unsupported",
           "all_adapters", "as_dlpack", "capability", "contiguous_strides", "host_numpy", "make_tensor", "numpy_view",
           "refusable", "run_isolated", "sample"]

KERNELS_SOURCE = Path(__file__).with_name("kernels.cc")
# The kit's kernel libraries (option --tensorplug-kernels): tensorplug's ABI, or apache tvm-ffi's.
KERNEL_FORMS = ("tensorplug", "tvm-ffi")

pytest.register_assert_rewrite("tensorplug.testing.conformance", "tensorplug.testing.conformance_lists",
                               "tensorplug.testing.conformance_gradients",
                               "tensorplug.testing.checks")

_frameworks_key = pytest.StashKey[dict]()
_selected_key = pytest.StashKey[list]()


def capability(name: str):
    """Mark a test (or class) as a check of adapter capability ``name``; its outcome is
    counted under that name in the capability report."""
    return pytest.mark.tensorplug_capability(name)


def all_adapters() -> list[str]:
    """Every adapter tensorplug discovered (including those that failed to load), then
    the ``tensorplug`` pseudo-adapter."""
    import tensorplug

    return list(dict.fromkeys([r.name for r in tensorplug.adapters()] + ["tensorplug"]))


# ------------------------------------------------------------------- hooks ----
def pytest_addhooks(pluginmanager):
    from . import hooks

    pluginmanager.add_hookspecs(hooks)


def pytest_addoption(parser):
    group = parser.getgroup("tensorplug", "tensorplug adapter conformance")
    group.addoption("--tensorplug-adapter", action="append", default=[], metavar="NAME",
                    help="run the tensorplug conformance checks for adapter NAME only (repeatable, or comma "
                         "separated; default: every discovered adapter and 'tensorplug')")
    group.addoption("--tensorplug-kernels", choices=KERNEL_FORMS, default="tensorplug", metavar="FORM",
                    help="the kit's kernel library the checks call: 'tensorplug' (kernels.cc, tensorplug's ABI; "
                         "the default) or 'tvm-ffi' (kernels_tvm_ffi.cc built by apache tvm-ffi's build_inline "
                         "and loaded unchanged; checks of kernels it lacks skip, saying why)")


@pytest.hookimpl(trylast=True)  # after conftests' pytest_configure, which may register adapters
def pytest_configure(config):
    config.addinivalue_line("markers", "tensorplug_capability(name): the adapter capability a test checks")
    config.addinivalue_line("markers", "tensorplug_kernels(form): the kit's kernel library a module's checks call, "
                                       "where a fixture of its own gives them (as --tensorplug-kernels does)")
    config.stash[_frameworks_key] = {}
    config.pluginmanager.register(CapabilityReport(), "tensorplug-capability-report")
    if config.getoption("tensorplug_adapter"):
        _selected(config)  # a misspelled name is one usage error, before any collection


@pytest.hookimpl(trylast=True)
def pytest_tensorplug_framework(name):
    """The kit's own answer, asked last: ``tensorplug.Tensor`` for ``"tensorplug"``, else
    the generic :class:`AdapterFramework` of any loaded adapter of that name."""
    if name == "tensorplug":
        return TensorplugFramework()
    import tensorplug

    for record in tensorplug.adapters():
        if record.name == name and record.error is None:
            return AdapterFramework(record)
    return None


def _selected(config) -> list[str]:
    if _selected_key not in config.stash:
        names = [n.strip() for option in config.getoption("tensorplug_adapter") for n in option.split(",")]
        names = list(dict.fromkeys(n for n in names if n))
        known = all_adapters()
        unknown = [n for n in names if n not in known]
        if unknown:
            raise pytest.UsageError(f"--tensorplug-adapter: no adapter named {', '.join(map(repr, unknown))} "
                                    f"(adapters: {', '.join(known)})")
        config.stash[_selected_key] = names or known
    return config.stash[_selected_key]


@pytest.hookimpl(tryfirst=True)  # before the parametrize marks: ids read "numpy-float32"
def pytest_generate_tests(metafunc):
    if "tensorplug_adapter" in metafunc.fixturenames:
        names = _selected(metafunc.config)
        metafunc.parametrize("tensorplug_adapter", names, ids=names, indirect=True)
    if "tensorplug_pair" in metafunc.fixturenames:
        selected = _selected(metafunc.config)
        everyone = list(dict.fromkeys(all_adapters() + selected))
        pairs = [(a, b) for a in everyone for b in everyone if a != b and (a in selected or b in selected)]
        metafunc.parametrize("tensorplug_pair", pairs, ids=[f"{a}-{b}" for a, b in pairs], indirect=True)


def pytest_itemcollected(item):
    marker = item.get_closest_marker("tensorplug_capability")
    params = getattr(getattr(item, "callspec", None), "params", {})
    if marker is None:
        return
    if "tensorplug_adapter" in params:
        adapters = [params["tensorplug_adapter"]]
    elif "tensorplug_pair" in params:
        selected = _selected(item.config)
        adapters = [name for name in params["tensorplug_pair"] if name in selected]
    else:
        return
    # The report keeps the checks of another kernel library apart: what a tvm-ffi binary
    # cannot express (a read-only flag, a CPU stream) is not the adapter's to answer for.
    kernels = item.get_closest_marker("tensorplug_kernels")
    form = kernels.args[0] if kernels else item.config.getoption("tensorplug_kernels", "tensorplug")
    item.user_properties += [("tensorplug_capability", marker.args[0]), ("tensorplug_adapters", adapters),
                             ("tensorplug_kernels", form)]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    props = dict(item.user_properties)
    if report.failed and "tensorplug_capability" in props:
        who = " and ".join(f"'{name}'" for name in props["tensorplug_adapters"])
        report.sections.append(("tensorplug", f"adapter {who} fails the '{props['tensorplug_capability']}' "
                                              f"capability"))
    return report


# ---------------------------------------------------------------- fixtures ----
def _lookup(config, name: str) -> Framework | None:
    """The Framework of adapter ``name`` (asked of the hook once per session), or None."""
    cache = config.stash[_frameworks_key]
    if name not in cache:
        cache[name] = config.hook.pytest_tensorplug_framework(name=name)
    return cache[name]


def _framework(config, name: str) -> Framework:
    framework = _lookup(config, name)
    if framework is None:
        import tensorplug

        errors = {r.name: r.error for r in tensorplug.adapters() if r.error}
        if name in errors:
            pytest.fail(f"adapter '{name}' failed to load: {errors[name]}", pytrace=False)
        pytest.fail(f"no adapter named '{name}' (adapters: {', '.join(all_adapters())})", pytrace=False)
    reason = framework.missing()
    if reason:
        pytest.skip(reason)
    framework.import_framework()  # here, not in a forked child of a check
    return framework


@pytest.fixture
def tensorplug_adapter(request) -> Framework:
    """The :class:`Framework` of one adapter under test (parametrized over the selected
    adapters; skips when its framework is not installed)."""
    return _framework(request.config, request.param)


@pytest.fixture
def tensorplug_pair(request) -> tuple[Framework, Framework]:
    """``(first, second)``: the Frameworks of an ordered pair of adapters."""
    return tuple(_framework(request.config, name) for name in request.param)


@pytest.fixture
def tensorplug_partner(request, tensorplug_adapter) -> Framework:
    """Another adapter's Framework, on the CPU, to mix with ``tensorplug_adapter`` in one
    call: numpy's; for numpy itself the first other installed adapter (torch, jax, paddle,
    ... in discovery order). Skips naming why when there is none."""
    if tensorplug_adapter.name != "numpy":
        return _framework(request.config, "numpy")
    for name in all_adapters():
        framework = _lookup(request.config, name) if name != "numpy" else None
        if framework is not None and framework.missing() is None and framework.device.startswith("cpu"):
            framework.import_framework()
            return framework
    pytest.skip("no framework besides numpy to mix with it in one call: torch, jax, paddle not installed")


@pytest.fixture(scope="session")
def tensorplug_kernels(request):
    """The kit's kernel library, compiled once: ``kernels.cc`` next to this module, or with
    ``--tensorplug-kernels=tvm-ffi`` the same kernels in apache tvm-ffi's source form, built
    by tvm-ffi and loaded as a binary of its ABI (``tensorplug.testing.tvm_ffi_kernels``)."""
    from tensorplug import cpp, load_module

    if request.config.getoption("tensorplug_kernels") == "tvm-ffi":
        from . import tvm_ffi_kernels

        return tvm_ffi_kernels.load()
    return load_module(cpp.build("tensorplug_conformance_kernels", [KERNELS_SOURCE]))


# ----------------------------------------------------------------- helpers ----
def run_isolated(fn, timeout: float = 60.0, fork: bool = True):
    """Run ``fn()`` in a forked child process, so that a crash (an abort, a segfault)
    fails a test instead of ending the test run. Returns

    - ``("ok", value)`` (``value`` must pickle),
    - ``("raised", mro, message)`` with ``mro`` the exception's class names, most derived first,
    - ``("crashed", signal name)``, or ``("timeout", seconds)``.

    With ``fork=False``, and where ``os.fork`` is not safe (outside Linux), ``fn`` runs in
    this process.
    """
    if not fork or not sys.platform.startswith("linux"):
        return _outcome(fn)
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # jax warns about fork in a multithreaded process
        pid = os.fork()
    if pid == 0:  # the child: report and leave without running any of the parent's cleanup
        try:
            os.close(read_end)
            with os.fdopen(write_end, "wb") as pipe:
                pipe.write(pickle.dumps(_outcome(fn)))
        finally:
            os._exit(0)
    os.close(write_end)
    data, finished = b"", True
    with os.fdopen(read_end, "rb") as pipe:
        while True:
            ready, _, _ = select.select([pipe], [], [], timeout)
            if not ready:
                finished = False
                os.kill(pid, signal.SIGKILL)
                break
            chunk = os.read(pipe.fileno(), 1 << 16)
            if not chunk:
                break
            data += chunk
    _, status = os.waitpid(pid, 0)
    if not finished:
        return ("timeout", timeout)
    if os.WIFSIGNALED(status):
        return ("crashed", signal.Signals(os.WTERMSIG(status)).name)
    return pickle.loads(data)


def _outcome(fn):
    try:
        value = fn()
        pickle.dumps(value)
        return ("ok", value)
    except BaseException as exc:  # noqa: BLE001  (reported to the parent, whatever it is)
        return ("raised", [c.__name__ for c in type(exc).__mro__], str(exc))
