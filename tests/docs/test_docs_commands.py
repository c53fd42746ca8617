"""Every install and build command the docs give runs, as written (issue 45): each is listed
here with the test that runs it, a command the docs add without a test fails the first test,
and the ones no other test runs are run here, in a copy of the example at its path in the
checkout (pip and the build scripts write into the source tree) and, for installs, in a
fresh venv with no package index (a newcomer's machine has no index holding tensorplug).
README's two set-up commands are CI's own (.ci/run runs them)."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
# An install or build command: pip, or a build script of an example.
COMMAND = re.compile(r"^(pip (install|wheel) |python examples/\S+\.py)")

# Each command as the docs write it (comments stripped) -> the test that runs it as written.
CHECKED = {
    'pip install ".[numpy]" && tensorplug demo': ".ci/run (README's first command, in a fresh venv)",
    'pip install ".[test]" && python -m pytest': ".ci/run (README's second command)",
    "pip wheel --no-build-isolation --no-deps -v -w dist examples/kernel_package":
        "tests/examples/test_kernel_package.py (the `built` fixture reads it from docs/shipping.md)",
    "pip install --no-build-isolation ./examples/fused_kernels":
        "tests/examples/test_fused_kernels_wheel.py (a fresh venv, no package index)",
    "python examples/fused_kernels/develop.py": "test_the_fused_kernels_develop_command_runs_as_written",
    "python examples/halide/build.py build-halide": "test_the_halide_build_command_runs_as_written",
}


def doc_commands() -> dict[str, str]:
    """Every install or build command of the docs' shell blocks, and the page it is on."""
    found = {}
    for page in DOCS:
        for block in re.findall(r"```(?:sh|bash|console)\n(.*?)```", page.read_text(), re.S):
            for line in block.splitlines():
                command = line.split("  #", 1)[0].strip()
                if COMMAND.match(command):
                    found[command] = page.name
    return found


def test_every_install_and_build_command_of_the_docs_is_run_by_the_suite():
    found = doc_commands()
    assert set(found) == set(CHECKED), (
        f"commands in the docs with no test: {sorted(set(found) - set(CHECKED))}; "
        f"commands tested but gone from the docs: {sorted(set(CHECKED) - set(found))}")


def _run(cmd, **kwargs):
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, **kwargs)
    assert done.returncode == 0, f"$ {' '.join(map(str, cmd))}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def _checkout_copy(tmp_path: Path, example: str) -> Path:
    """A directory holding a copy of ``examples/<example>`` at its path in the checkout."""
    shutil.copytree(ROOT / "examples" / example, tmp_path / "examples" / example,
                    ignore=shutil.ignore_patterns("build", "build-*", "dist", "*.egg-info", "__pycache__", "*.so"))
    return tmp_path


def _as_written(command: str, python: Path | str) -> list[str]:
    """``command`` with its program run by ``python`` (``pip`` as ``python -m pip``)."""
    words = shlex.split(command)
    return [str(python), "-m", "pip", *words[1:]] if words[0] == "pip" else [str(python), *words[1:]]


def test_the_fused_kernels_develop_command_runs_as_written(tmp_path):
    command = "python examples/fused_kernels/develop.py"
    where = _checkout_copy(tmp_path, "fused_kernels")
    directory = Path(_run(_as_written(command, sys.executable), cwd=where).stdout.strip().splitlines()[-1])
    assert (directory / "fused_kernels" / "__init__.py").is_file()


def test_the_halide_build_command_runs_as_written(tmp_path):
    pytest.importorskip("halide", reason="halide not installed (it is in the test extra)")
    command = "python examples/halide/build.py build-halide"
    where = _checkout_copy(tmp_path, "halide")
    done = _run(_as_written(command, sys.executable), cwd=where)
    assert (where / "build-halide").is_dir()
    assert done.stdout.strip(), "the build script prints what it called"
