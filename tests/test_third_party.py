"""The example third-party distribution (examples/third_party_adapter): installed into this
environment, found through its entry point alone, and certified by the conformance kit."""

import importlib.metadata
import importlib.util
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("numpy", reason="numpy not installed")

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "third_party_adapter"


@pytest.fixture(scope="module")
def mytensor_installed(tmp_path_factory):
    """Installs tensorplug-mytensor (a copy of the example, so that the build leaves nothing
    in the source tree) unless it is installed already."""
    try:
        return importlib.metadata.distribution("tensorplug-mytensor")
    except importlib.metadata.PackageNotFoundError:
        pass
    source = tmp_path_factory.mktemp("example") / "third_party_adapter"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    # Without network access pip cannot fetch setuptools into an isolated build environment.
    isolation = [] if importlib.util.find_spec("setuptools") is None else ["--no-build-isolation"]
    out = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", *isolation, str(source)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    importlib.invalidate_caches()
    return importlib.metadata.distribution("tensorplug-mytensor")


def run(args, **kwargs):
    return subprocess.run(args, capture_output=True, text=True, timeout=600, **kwargs)


def test_entry_point_alone_brings_mytensor_in(mytensor_installed):
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
    out = run([sys.executable, "-c", code])
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["tensorplug-mytensor ('mytensor.MyTensor',) False",
                                       "mytensor MyTensor [2.0, 3.0, 4.0]"]


def test_tensorplug_adapters_lists_mytensor(mytensor_installed):
    out = run([sys.executable, "-m", "tensorplug", "adapters"])
    assert out.returncode == 0, out.stderr
    row = next(line for line in out.stdout.splitlines() if line.startswith("mytensor "))
    assert f"tensorplug-mytensor {mytensor_installed.version}" in row and "mytensor.MyTensor" in row


def test_conformance_kit_passes_from_the_example_directory(mytensor_installed):
    # The one-line command of docs/testing.md, from the distribution's own directory.
    out = run([sys.executable, "-m", "pytest", "--pyargs", "tensorplug.testing.conformance",
               "--tensorplug-adapter=mytensor", "-p", "no:cacheprovider"], cwd=EXAMPLE)
    assert out.returncode == 0, out.stdout[-5000:] + out.stderr[-2000:]
    report = out.stdout.split("tensorplug capability report")[1].splitlines()
    assert report[1] == "mytensor"
    rows = dict(line.split(None, 2)[:2] for line in report[2:11])
    assert rows == dict.fromkeys(["exchange", "dtypes", "layouts", "read-only", "stream", "allocator", "output",
                                  "errors", "mixed"], "passed")
