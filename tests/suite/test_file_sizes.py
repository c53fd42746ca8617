"""Files stay readable (issue 41 item 5): no tracked source file over 1,200 lines, and every
one over 500 says near its top why it is one idea ("Over 500 lines: ..." or "One idea past
500 lines: ..."), so that a long file is a decision, not an accident."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = re.compile(r"\.(py|cc|h|c|sh)$")
SAYS_WHY = re.compile(r"(over|past) 500 lines", re.IGNORECASE)


def _sources():
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for name in listed.splitlines():
        path = ROOT / name
        if SOURCES.search(name) and path.is_file():
            yield name, path.read_text(errors="replace").splitlines()


def test_no_source_file_is_over_1200_lines():
    assert {name: len(lines) for name, lines in _sources() if len(lines) > 1200} == {}


def test_every_source_file_over_500_lines_says_why_it_is_one_idea():
    assert [name for name, lines in _sources()
            if len(lines) > 500 and not SAYS_WHY.search("\n".join(lines[:40]))] == []
