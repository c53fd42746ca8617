"""One binary, many framework versions: build the mykernels wheel once, then call the same
libmykernels.so from other versions of jax, paddle (and torch) installed into temporary venvs.

    python examples/kernel_package/check_framework_versions.py \
        --env "jax==0.5.3 jaxlib==0.5.3" --env "paddlepaddle==3.3.0"

Each --env is a fresh venv in a temporary directory, layered over this environment (its
site-packages come first, so the versions installed there win; tensorplug and numpy come from
this environment), with the wheel installed into it. Without --env only this environment's
versions run. Not part of the test suite: it downloads framework wheels from the package
index. Nothing is installed into this environment. Results are in docs/decisions.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Runs inside each venv: per importable framework, the version, whether axpy returned that
# framework's tensor with the right values, and the median time of one call.
CHECK = textwrap.dedent("""
    import hashlib, importlib, json, statistics, sys, time
    import numpy as np
    import mykernels
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.full((2, 3), 0.5, dtype=np.float32)
    expected = 2.0 * x + y

    def make(name):
        if name == "numpy":
            return np, x, y, np.ndarray, lambda t: t
        if name == "torch":
            import torch
            return torch, torch.from_numpy(x), torch.from_numpy(y), torch.Tensor, lambda t: t.numpy()
        if name == "jax":
            import jax, jax.numpy as jnp
            return jax, jnp.asarray(x), jnp.asarray(y), jax.Array, np.asarray
        if name == "paddle":
            import paddle
            return paddle, paddle.to_tensor(x), paddle.to_tensor(y), paddle.Tensor, lambda t: t.numpy()

    rows = []
    for name in sys.argv[1].split(","):
        try:
            module, a, b, kind, to_numpy = make(name)
        except ImportError as exc:
            rows.append({"framework": name, "error": f"not installed ({exc})"})
            continue
        out = mykernels.axpy(2.0, a, b)
        ok = isinstance(out, kind) and np.array_equal(to_numpy(out), expected)
        samples = []
        for _ in range(7):
            start = time.perf_counter()
            for _ in range(2000):
                mykernels.axpy(2.0, a, b)
            samples.append((time.perf_counter() - start) / 2000 * 1e6)
        rows.append({"framework": name, "version": module.__version__, "correct": ok,
                     "us_per_call": round(statistics.median(samples), 2)})
    library = mykernels._library.path
    print(json.dumps({"python": sys.version.split()[0], "library": library,
                      "sha256": hashlib.sha256(open(library, "rb").read()).hexdigest()[:16],
                      "rows": rows}))
""")


def run(cmd, **kwargs) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    if proc.returncode != 0:
        raise SystemExit(f"$ {' '.join(map(str, cmd))}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc.stdout


def build_wheel(tmp: Path) -> Path:
    source = tmp / "source"
    shutil.copytree(HERE, source, ignore=shutil.ignore_patterns("build", "dist", "__pycache__"))
    run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-index",
         "-w", str(tmp / "dist"), str(source)])
    return next((tmp / "dist").glob("*.whl"))


def make_venv(path: Path, wheel: Path, requirements: list[str]) -> Path:
    run([sys.executable, "-m", "venv", "--without-pip", str(path)])
    python = path / "bin" / "python"
    site = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('platlib'))"]).strip())
    (site / "_layered.pth").write_text(f"import site; site.addsitedir({sysconfig.get_path('purelib')!r})\n")
    if requirements:
        run([str(python), "-m", "pip", "install", "-q", *requirements])
    run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)])
    return python


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", action="append", default=[],
                        help="requirements for one extra venv, space separated (repeatable)")
    parser.add_argument("--frameworks", default="numpy,torch,jax,paddle")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="tensorplug-versions-"))
    try:
        wheel = build_wheel(tmp)
        print(f"built once: {wheel.name}")
        results = []
        for i, env in enumerate(["", *args.env]):
            python = make_venv(tmp / f"venv{i}", wheel, env.split())
            report = json.loads(run([str(python), "-c", CHECK, args.frameworks]).strip().splitlines()[-1])
            report["env"] = env or "(this environment's versions)"
            results.append(report)
            for row in report["rows"]:
                detail = row.get("error") or (f"{row['version']:<12} correct={row['correct']}  "
                                              f"{row['us_per_call']:.2f} us/call")
                print(f"[{report['env']}] lib sha256 {report['sha256']}  {row['framework']:<7} {detail}")
        print(json.dumps(results, indent=1))
        same = len({r["sha256"] for r in results}) == 1
        correct = all(row.get("correct", True) for r in results for row in r["rows"])
        print(f"one binary: {same}; every call correct: {correct}")
        return 0 if same and correct else 1
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
