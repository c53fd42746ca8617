"""Claims of the docs that can drift from the code, each checked against the code (issue 45):
what a newcomer reads must be what they get."""

from __future__ import annotations

from pathlib import Path

from tensorplug.testing import CAPABILITIES

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_the_sample_capability_report_has_a_row_per_capability_in_order():
    text = (DOCS / "testing.md").read_text()
    sample = text.split("tensorplug capability report =", 1)[1].split("```", 1)[0]
    rows = [line.split()[0] for line in sample.splitlines()[2:] if line.startswith("  ")]
    assert tuple(rows) == CAPABILITIES

