"""The example third-party distribution (examples/third_party_adapter): installed into a
temporary directory (never into this environment), found through its entry point alone in
subprocesses that have that directory on their path, and certified by the conformance kit."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("numpy", reason="numpy not installed")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "third_party_adapter"

# What this environment has installed, as a fresh interpreter sees it: every distribution
# and every tensorplug adapter entry point.
SNAPSHOT = textwrap.dedent("""
    import importlib.metadata as md, json
    dists = sorted({(d.metadata["Name"], d.version, str(d.locate_file(""))) for d in md.distributions()})
    eps = sorted((ep.name, ep.value) for ep in md.entry_points(group="tensorplug.adapters"))
    print(json.dumps({"distributions": dists, "adapters": eps}))
""")


def snapshot() -> dict:
    out = subprocess.run([sys.executable, "-c", SNAPSHOT], capture_output=True, text=True, timeout=120,
                         env=without_pythonpath())
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def without_pythonpath() -> dict:
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


@pytest.fixture(scope="module")
def environment_before():
    return snapshot()


@pytest.fixture(scope="module")
def mytensor_path(tmp_path_factory, environment_before):
    """A directory holding tensorplug-mytensor, installed with ``pip install --target`` from
    a copy of the example (so that the build leaves nothing in the source tree)."""
    source = tmp_path_factory.mktemp("example") / "third_party_adapter"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    target = tmp_path_factory.mktemp("site")
    # Without network access pip cannot fetch setuptools into an isolated build environment;
    # no cache: nothing is written outside temporary directories.
    out = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
                          "--no-cache-dir", "--target", str(target), str(source)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert (target / "mytensor_tensorplug.py").is_file()
    return target


def run(args, path, **kwargs):
    """``args`` in a subprocess whose Python also imports from ``path``."""
    env = without_pythonpath()
    env["PYTHONPATH"] = str(path)
    return subprocess.run(args, capture_output=True, text=True, timeout=600, env=env, **kwargs)


def test_entry_point_alone_brings_mytensor_in(mytensor_path):
    # A fresh interpreter: nothing registers the adapter but its entry point.
    code = textwrap.dedent("""
        import tensorplug, mytensor
        from tensorplug import cpp, testing
        row = next(r for r in tensorplug.adapters() if r.name == "mytensor")
        print(row.distribution, row.tensor_types, row.fast_path)
        kernels = tensorplug.load_module(cpp.build("tensorplug_conformance_kernels", [testing.KERNELS_SOURCE]))
        result = kernels.add_one(mytensor.tensor([1.0, 2.0, 3.0]))
        print(type(result).__module__, type(result).__qualname__, result.tolist())
    """)
    out = run([sys.executable, "-c", code], mytensor_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["tensorplug-mytensor ('mytensor.MyTensor',) False",
                                       "mytensor MyTensor [2.0, 3.0, 4.0]"]


def test_tensorplug_adapters_lists_mytensor(mytensor_path):
    out = run([sys.executable, "-m", "tensorplug", "adapters"], mytensor_path)
    assert out.returncode == 0, out.stderr
    row = next(line for line in out.stdout.splitlines() if line.startswith("mytensor "))
    assert "tensorplug-mytensor 0.1.0" in row and "mytensor.MyTensor" in row  # the example's version


def test_conformance_kit_passes_from_the_example_directory(mytensor_path):
    # The one-line command of docs/testing.md, from the distribution's own directory (which
    # has no conftest: the kit's generic Framework reads what the adapter declares).
    out = run([sys.executable, "-m", "pytest", "--pyargs", "tensorplug.testing.conformance",
               "--tensorplug-adapter=mytensor", "-p", "no:cacheprovider"], mytensor_path, cwd=EXAMPLE)
    assert out.returncode == 0, out.stdout[-5000:] + out.stderr[-2000:]
    report = out.stdout.split("tensorplug capability report")[1].splitlines()
    assert report[1] == "mytensor"
    rows = dict(line.split(None, 2)[:2] for line in report[2:13])
    # mytensor imports through numpy's DLPack, which has no bfloat16, and counts no memory:
    # those checks skip with the reason, and the capabilities read "partial", not "passed".
    assert rows == {**dict.fromkeys(["exchange", "dtypes", "layouts", "read-only", "stream", "allocator", "output",
                                     "errors", "mixed", "lists", "ints"], "passed"), "dtypes": "partial",
                    "allocator": "partial"}
    lines = {line.split()[0]: line for line in report[2:13]}
    # numpy 2.4.6 refuses the dtype with RuntimeError, 2.5.5 (tests/pythons/run.py 3.13 got it) with BufferError.
    assert any(lines["dtypes"].endswith(f"22 passed, 2 skipped: mytensor cannot make bfloat16 tensors ({kind}: "
                                        "Unsupported dtype in DLTensor.) (2)") for kind in ("RuntimeError", "BufferError")), \
        lines["dtypes"]
    assert lines["allocator"].endswith("skipped: mytensor does not count the memory it allocates on cpu")


def test_demo_runs_on_mytensor(mytensor_path):
    out = run([sys.executable, "-m", "tensorplug", "demo"], mytensor_path)
    assert out.returncode == 0, out.stdout + out.stderr
    row = next(line for line in out.stdout.splitlines() if line.startswith("mytensor "))
    assert row.split()[1:4] == ["mytensor.MyTensor", "mytensor.MyTensor", "yes"], row


def test_the_environment_is_left_as_it_was(mytensor_path, environment_before):
    # After installing and using the example: this environment has no new distribution and
    # no new adapter, and a plain `tensorplug adapters` does not list mytensor.
    after = snapshot()
    assert after == environment_before
    polluted = "tensorplug-mytensor is installed in this environment (by an older test suite?): " \
               "pip uninstall tensorplug-mytensor"
    assert ["mytensor", "mytensor_tensorplug"] not in after["adapters"], polluted
    assert not any(name == "tensorplug-mytensor" for name, *_ in after["distributions"]), polluted
    out = subprocess.run([sys.executable, "-m", "tensorplug", "adapters"], capture_output=True, text=True,
                         timeout=120, env=without_pythonpath())
    assert out.returncode == 0 and "mytensor" not in out.stdout, out.stdout + out.stderr
