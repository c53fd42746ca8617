"""Compare the coverage totals of tests/coverage/run.sh with the floors.

    python tests/coverage/check.py python.json cxx.json floor.txt

python.json is coverage.py's JSON report, cxx.json gcovr's JSON summary; floor.txt has one
``name percent`` line per floor (python-lines, python-branches, cxx-lines, cxx-branches).
Exit status 1 when a total is below its floor, naming it; TENSORPLUG_COVERAGE_FLOOR=0 only
prints the totals.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def totals(python_json: Path, cxx_json: Path) -> dict[str, float]:
    py = json.loads(python_json.read_text())["totals"]
    cxx = json.loads(cxx_json.read_text())
    return {
        "python-lines": 100.0 * py["covered_lines"] / max(py["num_statements"], 1),
        "python-branches": 100.0 * py["covered_branches"] / max(py["num_branches"], 1),
        "cxx-lines": float(cxx["line_percent"]),
        "cxx-branches": float(cxx["branch_percent"]),
    }


def floors(path: Path) -> dict[str, float]:
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, value = line.split()
            out[name] = float(value)
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    got = totals(Path(argv[0]), Path(argv[1]))
    wanted = floors(Path(argv[2]))
    unknown = set(wanted) - set(got)
    if unknown:
        print(f"coverage: unknown floor(s) in {argv[2]}: {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    below = [name for name, floor in wanted.items() if got[name] < floor]
    for name, value in got.items():
        print(f"coverage: {name:<16} {value:5.1f}%  (floor {wanted.get(name, 0):.1f}%)")
    if below and os.environ.get("TENSORPLUG_COVERAGE_FLOOR", "1") != "0":
        print(f"coverage: below the floor: {', '.join(below)} (tests/coverage/floor.txt)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
