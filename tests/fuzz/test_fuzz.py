"""The short fuzz run: a few thousand adversarial calls must not crash, hang or leave a
SystemError (tests/fuzz/run.py; the long run is documented in docs/reliability.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

RUN = Path(__file__).parent / "run.py"


def test_short_fuzz_run_has_no_crash():
    proc = subprocess.run([sys.executable, str(RUN), "--calls", "2000", "--seed", "20261122", "--jobs", "2"],
                          capture_output=True, text=True, timeout=900)
    summary = proc.stdout[proc.stdout.rfind("\n2000 cases"):]
    assert "0 crashes, 0 hangs, 0 anomalies" in summary, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
