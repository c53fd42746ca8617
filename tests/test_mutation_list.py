"""The mutation check's list stays current: every mutation still applies to the code as it
is (so a change that moves a snippet fails here, in the suite, not silently in the check),
and the check refuses a stale one. The check itself (tests/mutation/run.py) rebuilds the
core per mutation and runs for many minutes: it is run by hand (docs/testing.md)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


mutation_run = _load("tensorplug_mutation_run", ROOT / "tests" / "mutation" / "run.py")
MUTATIONS, Mutation = mutation_run.MUTATIONS, mutation_run.Mutation

# The five bugs issue 15 found the suite missing: each must stay planted.
ISSUE_15_BUGS = {"primary-first-tensor", "stream-not-restored-on-error", "negative-strides-refused-everywhere",
                 "alloc-with-primary-framework", "outermost-output-framework-wins"}


def test_there_are_enough_distinct_mutations():
    names = [m.name for m in MUTATIONS]
    assert len(names) >= 20 and len(set(names)) == len(names)
    assert ISSUE_15_BUGS <= set(names)
    assert all(m.old != m.new and m.why and m.tests for m in MUTATIONS)


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m.name for m in MUTATIONS])
def test_every_mutation_applies_to_the_current_code(mutation):
    text = (ROOT / mutation.file).read_text()
    assert text.count(mutation.old) == 1, f"{mutation.name}: update its snippet for {mutation.file}"
    for test in mutation.tests:
        if test.startswith("tests/"):
            assert (ROOT / test.partition("::")[0]).is_file(), test


def test_a_stale_mutation_stops_the_check():
    stale = Mutation("gone", "csrc/python/module.cc", "no such code", "x", ("tests/test_calls.py",), "stale")
    missing = Mutation("moved", "csrc/python/nope.cc", "x", "y", ("tests/test_calls.py",), "moved")
    with pytest.raises(mutation_run.StaleMutation) as info:
        mutation_run.check_snippets(ROOT, [MUTATIONS[0], stale, missing])
    assert str(info.value) == ("stale mutations (update tests/mutation/mutations.py):\n"
                               "  gone: the snippet occurs 0 times in csrc/python/module.cc (expected once):\n"
                               "    'no such code'\n"
                               "  moved: csrc/python/nope.cc does not exist")


def test_the_record_is_kept_in_docs():
    text = mutation_run.RECORD_PAGE.read_text()
    assert text.count(mutation_run.RECORD_START) == 1 and text.count(mutation_run.RECORD_END) == 1
