"""benchmarks/leak.py works and reports no growth on a short run (the full run is in
docs/reliability.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

LEAK = Path(__file__).parent.parent / "benchmarks" / "leak.py"


def test_short_leak_run_reports_no_growth():
    proc = subprocess.run([sys.executable, "-W", "ignore", str(LEAK), "--calls", "2000", "--frameworks", "numpy,torch"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    rows = [ln for ln in lines if ln.startswith(("numpy", "torch"))]
    assert len(rows) == 18, proc.stdout  # 9 cases x 2 frameworks, none skipped
    assert all(ln.endswith("no growth") for ln in rows), proc.stdout
    assert lines[-1] == "verdict: no growth in 18 cases"
