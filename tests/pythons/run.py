"""The suite on each supported Python, each in a fresh virtual environment: run before a release.

    python tests/pythons/run.py                       # 3.10, 3.12 and 3.13, the subset below
    python tests/pythons/run.py 3.13 --full           # one version, the whole suite
    python tests/pythons/run.py 3.12 -- tests/ops/test_op.py -x   # one version, your own pytest arguments

For each version it finds the interpreter (``pyenv``'s ``$PYENV_ROOT/versions/3.X.*``, else
``python3.X`` on PATH), makes a venv in a temporary directory, installs tensorplug from this
checkout (``pip install .``: the extension is compiled for that Python), then each requirement
of the ``test`` extra on its own and from wheels only (``--only-binary=:all:``), so that a
framework with no wheel for that Python is left out and named rather than failing the
install or being compiled from source. torch is never installed: its only wheel on this
machine is for 3.11, and a plain ``pip install torch`` downloads the multi-gigabyte CUDA
build; the torch tests skip, naming the reason. Then it runs pytest from the checkout in
that venv, and prints one summary line per version (the pytest tally, the requirements
without a wheel, the minutes taken). Exit status 1 when a version fails.

The subset (default): the tests of the compiled binding, the adapters that install, the
conformance kit, the CLI, stubs and the example kernels; the slow tests that build further
wheels or venvs, drive a browser or run the mutation list are left out (they exercise the
tools, not the Python version). ``--full`` runs the whole suite (about 20 minutes per
version on two idle cores). docs/testing.md ("The supported Pythons") records the last run.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VERSIONS = ("3.10", "3.12", "3.13")

SUBSET = [
    "tests/core/test_import.py", "tests/core/test_calls.py", "tests/builds/test_c_kernel.py",
    "tests/core/test_args_numbers.py", "tests/core/test_args_ints.py", "tests/core/test_args_lists.py",
    "tests/core/test_args_defaults.py", "tests/core/test_bad_input.py", "tests/core/test_bad_results.py",
    "tests/core/test_error_types.py", "tests/kit/test_conformance.py", "tests/kit/test_conformance_kit.py",
    "tests/core/test_device_rules.py", "tests/kit/test_framework_limits.py", "tests/core/test_env_restore.py",
    "tests/core/test_handles.py", "tests/core/test_mview.py", "tests/core/test_lifetime.py", "tests/ops/test_op.py",
    "tests/jax/test_op_jax.py", "tests/ops/test_op_lists.py", "tests/jax/test_grad_jax.py",
    "tests/docs/test_readme_kernels.py", "tests/docs/test_cli.py", "tests/builds/test_stubs.py",
    "tests/core/test_loader.py", "tests/core/test_vocabulary.py", "tests/examples/test_fused_kernels.py",
    "tests/compilers/test_numba.py", "tests/core/test_properties.py",
]


def interpreter(version: str) -> str | None:
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    found = sorted(glob.glob(os.path.join(root, "versions", f"{version}.*", "bin", "python")))
    if found:
        return found[-1]
    return shutil.which(f"python{version}")


def test_requirements() -> list[str]:
    """The ``test`` extra flattened (its ``tensorplug[...]`` self-reference expanded), torch removed."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    out: list[str] = []

    def add(name: str) -> None:
        for req in extras[name]:
            m = re.fullmatch(r"tensorplug\[(.*)\]", req)
            if m:
                for sub in m.group(1).split(","):
                    add(sub.strip())
            elif not re.match(r"torch\b", req) and req not in out:
                out.append(req)

    add("test")
    return out


def run_version(version: str, pytest_args: list[str], keep: bool) -> tuple[bool, str]:
    python = interpreter(version)
    if python is None:
        return False, f"Python {version}: no interpreter found"
    start = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix=f"tensorplug-py{version}-"))
    venv = tmp / "venv"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    try:
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
        vpy = str(venv / "bin" / "python")
        env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["VIRTUAL_ENV"] = str(venv)
        pip = [vpy, "-m", "pip", "install", "--quiet"]
        print(f"== Python {version} ({python}): pip install . (compiles the extension)", flush=True)
        subprocess.run(pip + [str(ROOT)], check=True, env=env)
        missing = []
        for req in test_requirements():
            r = subprocess.run(pip + ["--only-binary=:all:", req], env=env, capture_output=True, text=True)
            if r.returncode != 0:
                missing.append(req.split(">")[0].split("=")[0].split("<")[0])
                print(f"   {req}: no wheel for Python {version}, left out", flush=True)
        print(f"== Python {version}: pytest {' '.join(pytest_args)}", flush=True)
        log = Path(tempfile.gettempdir()) / f"tensorplug-python{version}.log"
        r = subprocess.run([vpy, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args], cwd=ROOT, env=env,
                           capture_output=True, text=True)
        log.write_text(r.stdout + r.stderr)
        failed = [line for line in r.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
        sys.stdout.write("".join(f"   {line}\n" for line in failed))
        print(f"   pytest's whole output: {log}", flush=True)
        tally = next((line.strip("= ") for line in reversed(r.stdout.splitlines()) if re.search(r"\d+ (passed|failed)", line)),
                     f"pytest exit {r.returncode}")
        minutes = (time.monotonic() - start) / 60
        no_wheel = f"; no wheel: {', '.join(missing)}" if missing else ""
        return r.returncode == 0, f"Python {version}: {tally}{no_wheel} ({minutes:.0f} min)"
    finally:
        if keep:
            print(f"   kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("versions", nargs="*", default=list(VERSIONS), help=f"default: {' '.join(VERSIONS)}")
    parser.add_argument("--full", action="store_true", help="the whole suite instead of the subset")
    parser.add_argument("--keep", action="store_true", help="keep the temporary venvs")
    argv = sys.argv[1:] if argv is None else argv
    own, extra = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    args = parser.parse_args(own)
    pytest_args = extra or ([] if args.full else SUBSET)
    results = [run_version(v, pytest_args, args.keep) for v in args.versions]
    print()
    for _, line in results:
        print(line)
    return 0 if all(ok for ok, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
