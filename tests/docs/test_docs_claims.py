"""Claims of the docs that can drift from the code, each checked against the code (issue 45):
what a newcomer reads must be what they get."""

from __future__ import annotations

from pathlib import Path

from tensorplug.testing import CAPABILITIES

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_the_sample_capability_report_has_a_row_per_capability_in_order():
    text = (DOCS / "testing.md").read_text()
    sample = text.split("tensorplug capability report =", 1)[1].split("```", 1)[0]
    rows = [line.split()[0] for line in sample.splitlines()[2:] if line.startswith("  ")]
    assert tuple(rows) == CAPABILITIES



def test_the_decode_step_speedups_quoted_are_the_benchmarks_with_its_load():
    """docs/index.md and docs/fused_kernels.md quote the decode-step speedups and the load
    average of the benchmark's last recorded run (docs/_static/fused/bench_fused.md, written
    by benchmarks/bench_fused.py), not a number of another tool or run."""
    import re

    record = (DOCS / "_static" / "fused" / "bench_fused.md").read_text()
    load = re.search(r"Load average \(1 min\) of the machine: ([0-9.]+) at the start, ([0-9.]+) at the end", record)
    assert load, record[:300]
    speedup = {m[1]: float(m[2]) for m in re.finditer(r"^\| (numpy|torch|torch\.compile|jax\.jit) \| [0-9.]+ ms \| "
                                                       r"[0-9.]+ ms \| ([0-9.]+)x \|$", record, re.M)}
    assert set(speedup) == {"numpy", "torch", "torch.compile", "jax.jit"}
    quoted = {f: f"{speedup[f]:.1f}x" for f in speedup}
    for page in ("index.md", "fused_kernels.md"):
        text = " ".join((DOCS / page).read_text().split())
        assert f"{quoted['torch']} faster than torch's own ops" in text, page
        assert f"{quoted['torch.compile']} than `torch.compile`" in text, page
        assert f"{quoted['jax.jit']} than `jax.jit`" in text, page
        assert f"{quoted['numpy']} than numpy" in text, page
        assert re.search(rf"load average (of )?{re.escape(load[1])}( at the start)? (to|and) {re.escape(load[2])}",
                         text), page
