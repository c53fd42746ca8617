"""examples/fused_kernels ships as one wheel: built and installed by the command of
docs/fused_kernels.md (pip + scikit-build-core; CMake builds the AVX-512, AVX2 and generic
variants and embeds them in libfused_kernels.so) into a fresh venv that sees only tensorplug,
numpy, torch and the build tools (and their requirements), with no package index, and called
there. Everything lives in tmp dirs."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "fused_kernels"


def _run(cmd, **kwargs):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, **kwargs)
    assert proc.returncode == 0, f"$ {' '.join(map(str, cmd))}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def _requirements(name: str, seen: set[str]) -> None:
    """``name`` and its unconditional requirements, recursively (normalized names)."""
    key = re.sub(r"[-_.]+", "-", name).lower()
    if key in seen:
        return
    seen.add(key)
    try:
        requires = importlib.metadata.requires(name) or ()
    except importlib.metadata.PackageNotFoundError:  # a requirement for another Python (a marker)
        return
    for req in requires:
        if ";" in req and "extra" in req.split(";", 1)[1]:
            continue
        _requirements(re.match(r"[A-Za-z0-9_.\-]+", req).group(0), seen)


def _link_distributions(names: set[str], site: Path) -> None:
    """Symlink the top-level files of each installed distribution into ``site``."""
    for dist in importlib.metadata.distributions():
        key = re.sub(r"[-_.]+", "-", dist.metadata["Name"]).lower()
        if key not in names:
            continue
        base = Path(dist.locate_file(""))
        for top in {Path(f).parts[0] for f in dist.files or ()}:
            src = base / top
            if top in ("..", "__pycache__") or not src.exists() or (site / top).exists():
                continue
            (site / top).symlink_to(src)


def test_wheel_builds_installs_and_runs_with_numpy_and_torch_only(tmp_path):
    pytest.importorskip("scikit_build_core", reason="scikit-build-core not installed")
    pytest.importorskip("torch", reason="torch not installed")
    # The install command of docs/fused_kernels.md as written, run where a copy of the example
    # sits at its path in the checkout, by the pip of a fresh venv that sees tensorplug, numpy,
    # torch and the build tools only, with no package index (tests/docs/test_docs_commands.py).
    spec = importlib.util.spec_from_file_location("test_docs_commands", ROOT / "tests" / "docs" / "test_docs_commands.py")
    docs_commands = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(docs_commands)
    doc_commands = docs_commands.doc_commands

    command = next(c for c, page in doc_commands().items() if page == "fused_kernels.md" and c.startswith("pip"))
    shutil.copytree(EXAMPLE, tmp_path / "examples" / "fused_kernels",
                    ignore=shutil.ignore_patterns("build", "dist", "*.so", "__pycache__"))
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('platlib'))"]).stdout.strip())
    wanted: set[str] = set()
    for name in ("tensorplug", "numpy", "torch", "pip", "scikit-build-core", "cmake", "ninja"):
        _requirements(name, wanted)
    _link_distributions(wanted, site)
    # (an editable tensorplug's .pth and finder are among its distribution's files: linked above)
    words = command.split()
    assert words[:2] == ["pip", "install"], command
    _run([str(python), "-m", "pip", *words[1:]], cwd=tmp_path, env={**os.environ, "PIP_NO_INDEX": "1"})
    installed = site / "fused_kernels"
    names = {p.name for p in installed.iterdir()}
    assert "libfused_kernels.so" in names and "torch_block.py" in names
    assert not any("avx2" in n or "libtensorplug" in n for n in names), names  # variants are embedded
    [dist_info] = site.glob("fused_kernels-0.1.0.dist-info")
    assert "Tag: py3-none-linux_x86_64" in (dist_info / "WHEEL").read_text()

    script = textwrap.dedent("""
        import importlib.util, json
        import numpy as np, torch
        import fused_kernels as fk
        from fused_kernels import model, torch_block as tb
        assert importlib.util.find_spec("jax") is None and importlib.util.find_spec("paddle") is None
        x = np.random.default_rng(0).standard_normal((3, 64)).astype(np.float32)
        w = np.ones(64, np.float32)
        ref = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5)
        out_np = fk.rms_norm(x, w, 1e-5)
        out_t = fk.rms_norm(torch.from_numpy(x).to(torch.bfloat16), torch.from_numpy(w), 1e-5)
        config = model.Config()
        dec = tb.Decoder(tb.FusedOps(), config, model.random_weights(config))
        tokens = tb.generate(dec, dec, model.prompt(config, 1, 3), 3)
        print(json.dumps({"file": fk.__file__, "isa": fk.isa, "np_err": float(abs(out_np - ref).max()),
                          "torch_dtype": str(out_t.dtype), "torch_err": float((out_t.float().numpy() - ref).max()),
                          "tokens": tokens.shape[1]}))
    """)
    import json
    result = json.loads(_run([str(python), "-I", "-c", script], cwd=tmp_path).stdout.strip().splitlines()[-1])
    assert result["file"].startswith(str(site))
    assert result["isa"] in ("avx512f+avx512bw+avx512vl+avx512dq", "avx2+fma", "generic")
    assert result["np_err"] < 1e-5 and result["torch_dtype"] == "torch.bfloat16" and result["torch_err"] < 0.05
    assert result["tokens"] == 3
