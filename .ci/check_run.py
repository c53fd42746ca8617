"""Fail a hollow test run: ``python .ci/check_run.py JUNIT_XML [FLOOR_FILE]``.

A run passes pytest's own verdict and still proves nothing when its tests were skipped
(a framework missing, a compiler not found, a fixture skipping everything). This reads the
run's JUnit XML report (``pytest --junitxml``) and fails (exit 1, naming why) when

- fewer tests were executed (passed or failed, not skipped) than the floor, or
- a test named always-runnable on a CPU machine was skipped, or a name matches no test
  (the floor file went stale).

The floor file (default ``tests/ci_floor.txt``) holds ``executed >= N`` and ``always
REGEX`` lines; each regex is matched (``re.fullmatch``) against ``classname.name`` of the
report's test cases, e.g. ``tests.core.test_device_rules.test_the_first_non_cpu_tensor_is_primary``.
"""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

DEFAULT_FLOOR = Path(__file__).resolve().parents[1] / "tests" / "ci_floor.txt"


def read_floor(path: Path) -> tuple[int, list[str]]:
    """(the minimum number of executed tests, the always-runnable patterns)."""
    minimum, always = None, []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if m := re.fullmatch(r"executed\s*>=\s*(\d+)", line):
            minimum = int(m[1])
        elif m := re.fullmatch(r"always\s+(\S+)", line):
            always.append(m[1])
        else:
            raise ValueError(f"{path}:{number}: expected 'executed >= N' or 'always REGEX', got {line!r}")
    if minimum is None:
        raise ValueError(f"{path}: no 'executed >= N' line")
    return minimum, always


def read_report(path: Path) -> dict[str, str]:
    """{classname.name: "passed" | "failed" | "skipped"} of a JUnit XML report."""
    outcomes = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname')}.{case.get('name')}"
        if case.find("failure") is not None or case.find("error") is not None:
            outcomes[name] = "failed"
        elif case.find("skipped") is not None:
            outcomes[name] = "skipped"
        else:
            outcomes[name] = "passed"
    return outcomes


def problems(outcomes: dict[str, str], minimum: int, always: list[str]) -> list[str]:
    """Why the run is hollow (empty: it is not)."""
    found = []
    executed = sum(outcome != "skipped" for outcome in outcomes.values())
    if executed < minimum:
        skipped = len(outcomes) - executed
        found.append(f"only {executed} tests executed ({skipped} skipped), below the floor of {minimum}")
    for pattern in always:
        matching = [name for name in outcomes if re.fullmatch(pattern, name)]
        if not matching:
            found.append(f"no test matches the always-runnable pattern {pattern!r}")
        skipped = [name for name in matching if outcomes[name] == "skipped"]
        if skipped:
            more = f" and {len(skipped) - 3} more" if len(skipped) > 3 else ""
            found.append(f"always-runnable tests were skipped: {', '.join(skipped[:3])}{more}")
    return found


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print(__doc__.splitlines()[0], file=sys.stderr)
        return 2
    minimum, always = read_floor(Path(argv[1]) if len(argv) == 2 else DEFAULT_FLOOR)
    outcomes = read_report(Path(argv[0]))
    found = problems(outcomes, minimum, always)
    executed = sum(outcome != "skipped" for outcome in outcomes.values())
    if found:
        print("hollow test run:\n" + "\n".join(f"  - {p}" for p in found), file=sys.stderr)
        return 1
    print(f"test run checked: {executed} tests executed (floor {minimum}), {len(always)} always-runnable groups ran")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
