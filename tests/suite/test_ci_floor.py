"""CI fails on a hollow run: .ci/check_run.py, which .ci/run calls on the suite's JUnit
report, against reports of every kind (an all-skipped one above all)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / ".ci" / "check_run.py"
FLOOR = ROOT / "tests" / "ci_floor.txt"

FLOOR_TEXT = """\
# a test floor
executed >= 3
always tests\\.test_device_rules\\..*
"""


def junit(tmp_path: Path, outcomes: dict[str, str]) -> Path:
    """A JUnit XML report as pytest writes it: {classname.name: passed|failed|skipped}."""
    cases = []
    for test, outcome in outcomes.items():
        classname, _, name = test.rpartition(".")
        body = {"passed": "", "failed": '<failure message="boom">boom</failure>',
                "skipped": '<skipped type="pytest.skip" message="torch not installed">skip</skipped>'}[outcome]
        cases.append(f'<testcase classname="{classname}" name="{name}" time="0.1">{body}</testcase>')
    path = tmp_path / "junit.xml"
    path.write_text('<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" '
                    f'tests="{len(cases)}">{"".join(cases)}</testsuite></testsuites>')
    return path


def check(tmp_path, outcomes, floor=FLOOR_TEXT):
    floor_file = tmp_path / "floor.txt"
    floor_file.write_text(floor)
    return subprocess.run([sys.executable, str(CHECK), str(junit(tmp_path, outcomes)), str(floor_file)],
                          capture_output=True, text=True, timeout=60)


RUN = {"tests.test_device_rules.test_a": "passed", "tests.test_device_rules.test_b": "passed",
       "tests.test_calls.test_c": "passed", "tests.test_cuda.test_d": "skipped"}


def test_a_full_run_passes(tmp_path):
    out = check(tmp_path, RUN)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "test run checked: 3 tests executed (floor 3), 1 always-runnable groups ran\n"


def test_an_all_skipped_run_fails(tmp_path):
    out = check(tmp_path, dict.fromkeys(RUN, "skipped"))
    assert out.returncode == 1
    assert out.stderr == ("hollow test run:\n"
                          "  - only 0 tests executed (4 skipped), below the floor of 3\n"
                          "  - always-runnable tests were skipped: tests.test_device_rules.test_a, "
                          "tests.test_device_rules.test_b\n")


def test_a_run_below_the_floor_fails_even_if_nothing_failed(tmp_path):
    out = check(tmp_path, {**RUN, "tests.test_calls.test_c": "skipped"})
    assert out.returncode == 1
    assert out.stderr == "hollow test run:\n  - only 2 tests executed (2 skipped), below the floor of 3\n"


def test_a_skipped_always_runnable_test_fails(tmp_path):
    out = check(tmp_path, {**RUN, "tests.test_device_rules.test_b": "skipped", "tests.test_x.test_e": "passed"})
    assert out.returncode == 1
    assert out.stderr == ("hollow test run:\n  - always-runnable tests were skipped: "
                          "tests.test_device_rules.test_b\n")


def test_failed_tests_count_as_executed(tmp_path):
    # Failures are pytest's verdict, not the floor's: the floor counts them as run.
    out = check(tmp_path, {**RUN, "tests.test_calls.test_c": "failed"})
    assert out.returncode == 0, out.stderr


def test_a_stale_always_pattern_fails(tmp_path):
    out = check(tmp_path, RUN, FLOOR_TEXT + "always tests\\.test_gone\\..*\n")
    assert out.returncode == 1
    assert out.stderr == "hollow test run:\n  - no test matches the always-runnable pattern 'tests\\\\.test_gone\\\\..*'\n"


def test_a_malformed_floor_file_is_an_error(tmp_path):
    out = check(tmp_path, RUN, "at least 3\n")
    assert out.returncode == 1
    assert re.search(r"floor\.txt:1: expected 'executed >= N' or 'always REGEX', got 'at least 3'", out.stderr)


def test_the_repository_floor_is_well_formed():
    sys.path.insert(0, str(CHECK.parent))
    try:
        import check_run
    finally:
        sys.path.remove(str(CHECK.parent))
    minimum, always = check_run.read_floor(FLOOR)
    assert minimum >= 600
    assert "tests\\.core\\.test_device_rules\\..*" in always
    for pattern in always:
        re.compile(pattern)


def test_ci_run_checks_the_suite_report():
    script = (ROOT / ".ci" / "run").read_text()
    # The report option is given to the suite's command only, not to later steps.
    assert re.search(r'^PYTEST_ADDOPTS=.*--junitxml=\\"\$report\\"" bash -c "\$test_command"$', script, re.M), script
    assert script.index('rm -f "$report"') < script.index('bash -c "$test_command"')
    assert re.search(r'^python \.ci/check_run\.py "\$report" tests/ci_floor\.txt$', script, re.M), script
    # The check runs after the README's test command, in the same strict shell.
    assert script.index('bash -c "$test_command"') < script.index("python .ci/check_run.py")
    assert "<<<<<<<" not in script and ">>>>>>>" not in script
    assert script.startswith("#!/usr/bin/env bash") and "set -euo pipefail" in script


def test_the_checker_reads_a_real_report(pytester_like_run):
    out = subprocess.run([sys.executable, str(CHECK), str(pytester_like_run), str(FLOOR)], capture_output=True,
                         text=True, timeout=60)
    # A run of one module is far below the repository's floor: a real report is read and judged.
    assert out.returncode == 1
    assert re.search(r"only \d+ tests executed \(0 skipped\), below the floor of \d+", out.stderr), out.stderr


@pytest.fixture
def pytester_like_run(tmp_path):
    """The JUnit report of a real pytest run of a small test module."""
    (tmp_path / "test_small.py").write_text("def test_one():\n    pass\n\ndef test_two():\n    pass\n")
    report = tmp_path / "small.xml"
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}",
                          "test_small.py"], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return report
