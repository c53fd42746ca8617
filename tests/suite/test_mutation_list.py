"""The mutation check's list stays current: every mutation still applies to the code as it
is (so a change that moves a snippet fails here, in the suite, not silently in the check),
and the check refuses a stale one. The check itself (tests/mutation/run.py) rebuilds the
core per mutation and runs for many minutes: it is run by hand (docs/testing.md)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


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
    stale = Mutation("gone", "csrc/python/module.cc", "no such code", "x", ("tests/core/test_calls.py",), "stale")
    missing = Mutation("moved", "csrc/python/nope.cc", "x", "y", ("tests/core/test_calls.py",), "moved")
    with pytest.raises(mutation_run.StaleMutation) as info:
        mutation_run.check_snippets(ROOT, [MUTATIONS[0], stale, missing])
    assert str(info.value) == ("stale mutations (update tests/mutation/mutations.py):\n"
                               "  gone: the snippet occurs 0 times in csrc/python/module.cc (expected once):\n"
                               "    'no such code'\n"
                               "  moved: csrc/python/nope.cc does not exist")


def test_the_record_is_kept_in_docs():
    text = mutation_run.RECORD_PAGE.read_text()
    assert text.count(mutation_run.RECORD_START) == 1 and text.count(mutation_run.RECORD_END) == 1


# A tree small enough to build in seconds, shaped like the project's: a native file under
# csrc/ (built with CMake, installed into core/) and a Python file under core/, and a test
# that checks both.
RUNNER_TREE = {
    "CMakeLists.txt": "cmake_minimum_required(VERSION 3.18)\nproject(runner_check CXX)\n"
                      "add_executable(answer csrc/answer.cc)\ninstall(TARGETS answer DESTINATION .)\n",
    "csrc/answer.cc": "#include <cstdio>\nint main() { std::printf(\"%d\\n\", 42); return 0; }\n",
    "core/settings.py": "GREETING = 'hello'  # a comment\n",
    "tests/test_answer.py": "import pathlib, subprocess\nimport settings\n\n\n"
                            "def test_answer():\n"
                            "    binary = pathlib.Path(settings.__file__).parent / 'answer'\n"
                            "    assert subprocess.run([str(binary)], capture_output=True, text=True).stdout == '42\\n'\n"
                            "    assert settings.GREETING == 'hello'\n",
}


def test_a_python_mutation_after_a_native_one_is_judged_on_the_unmutated_binary(tmp_path):
    ws = mutation_run.Workspace(tmp_path)
    # The tiny tree has no tensorplug, whose pytest plugins would fail to load there.
    ws.env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    for name, text in RUNNER_TREE.items():
        (ws.tree / name).parent.mkdir(parents=True, exist_ok=True)
        (ws.tree / name).write_text(text)
    ws.configure()
    assert ws.build_and_install(), ws.log.read_text()
    test = ("tests/test_answer.py",)
    native = Mutation("wrong-answer", "csrc/answer.cc", "42", "41", test, "the binary prints 41")
    # Changes only a comment: no test can catch it, so it must survive. Judged on the
    # previous mutant's binary (printing 41), it would read "caught".
    harmless = Mutation("comment-edited", "core/settings.py", "# a comment", "# another comment", test, "no effect")
    wrong_python = Mutation("wrong-greeting", "core/settings.py", "'hello'", "'hi'", test, "another greeting")
    results = mutation_run.run_mutations(ws, [native, harmless, wrong_python])
    assert results == {"wrong-answer": "caught", "comment-edited": "SURVIVED", "wrong-greeting": "caught"}
    assert (ws.tree / "csrc/answer.cc").read_text() == RUNNER_TREE["csrc/answer.cc"]
    assert (ws.tree / "core/settings.py").read_text() == RUNNER_TREE["core/settings.py"]
