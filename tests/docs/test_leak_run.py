"""benchmarks/leak.py works and reports no growth on a short run (the full run is in
docs/reliability.md)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

LEAK = Path(__file__).parents[2] / "benchmarks" / "leak.py"


def test_short_leak_run_reports_no_growth():
    # torch's rows where torch is installed (the README's test command installs no torch).
    frameworks = [name for name in ("numpy", "torch") if importlib.util.find_spec(name) is not None]
    proc = subprocess.run([sys.executable, "-W", "ignore", str(LEAK), "--calls", "2000", "--frameworks", "numpy,torch"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    rows = [ln for ln in lines if ln.startswith(tuple(frameworks))]
    cases = 9 * len(frameworks)
    assert len(rows) == cases, proc.stdout  # 9 cases per installed framework, none skipped
    assert all(ln.endswith("no growth") for ln in rows), proc.stdout
    assert lines[-1] == f"verdict: no growth in {cases} cases"
