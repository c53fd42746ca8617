"""The mutation check: plant known bugs in the core one at a time and see that a test fails.

    python tests/mutation/run.py            # every mutation
    python tests/mutation/run.py --list     # the mutations
    python tests/mutation/run.py NAME ...   # some of them
    python tests/mutation/run.py --record   # and write the result into docs/testing.md

Each mutation (``MUTATIONS`` in ``mutations.py``) names a file, an exact snippet that must
occur in it exactly once, its replacement and the tests that must catch it. The check
copies the tree (tracked and untracked, not ignored, files) into a temporary directory,
never touching the working tree; checks every snippet first (a stale one stops the run
with an error: it cannot "survive" by no longer applying); builds the copy once with CMake
into one build directory and installs the extension into the copy's package; then, per
mutation: applies it, rebuilds incrementally (only what the edit touches; nothing for
Python files), runs its tests against the copy (``PYTHONPATH`` points at the copy's
package; a ``sitecustomize`` hides the working tree's editable install), restores the
file and, after a native mutation, rebuilds the unmutated tree (so that the next mutation,
a Python one included, is judged on the unmutated binary, not on this mutant's). A mutation whose tests all pass "survived": a missing test. Exit status 1 when any
survived or failed to apply or build.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from mutations import MUTATIONS, Mutation  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RECORD_PAGE = ROOT / "docs" / "testing.md"
RECORD_START = "% mutation-result: start (written by tests/mutation/run.py --record)"
RECORD_END = "% mutation-result: end"
# Sources CMake builds: the core, and the plugins' compiled modules (plugins/CMakeLists.txt).
NEEDS_BUILD = ("csrc/", "CMakeLists.txt", "plugins/CMakeLists.txt", "plugins/tensorplug_adapters/numpy/exchange.cc",
               "plugins/tensorplug_adapters/jax/", "plugins/tensorplug_adapters/torch/kernel.cc",
               "plugins/tensorplug_adapters/torch/shim.", "plugins/tensorplug_adapters/torch/lazy_views.cc",
               "plugins/tensorplug_adapters/torch/versions.cc", "plugins/tensorplug_adapters/torch/module.cc",
               "plugins/tensorplug_adapters/torch/native.h")

# Python startup in the test runs: hide the working tree's editable install (its import
# finder would otherwise win over PYTHONPATH and test the unmutated tree).
SITECUSTOMIZE = '''import sys
sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "ScikitBuildRedirectingFinder"]
'''


class StaleMutation(Exception):
    """A mutation's snippet is not in its file exactly once."""


def check_snippets(tree: Path, mutations: list[Mutation]) -> None:
    stale = []
    for m in mutations:
        path = tree / m.file
        if not path.is_file():
            stale.append(f"{m.name}: {m.file} does not exist")
            continue
        count = path.read_text().count(m.old)
        if count != 1:
            stale.append(f"{m.name}: the snippet occurs {count} times in {m.file} (expected once):\n    {m.old!r}")
    if stale:
        raise StaleMutation("stale mutations (update tests/mutation/mutations.py):\n  " + "\n  ".join(stale))


def copy_tree(dest: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        source = ROOT / name
        if source.is_file():
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def run(command, log, **kwargs) -> int:
    with open(log, "a") as out:
        out.write(f"\n$ {' '.join(map(str, command))}\n")
        out.flush()
        return subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, **kwargs).returncode


class Workspace:
    """The copy of the tree, its build directory and the environment tests run in."""

    def __init__(self, base: Path):
        self.base = base
        self.tree = base / "tree"
        self.build = base / "build"
        self.log = base / "log.txt"
        shim = base / "shim"
        shim.mkdir()
        (shim / "sitecustomize.py").write_text(SITECUSTOMIZE)
        self.env = dict(os.environ)
        self.env.pop("PYTEST_ADDOPTS", None)
        self.env["PYTHONPATH"] = os.pathsep.join([str(shim), str(self.tree / "core"), str(self.tree / "plugins")])
        self.env["TENSORPLUG_CACHE_DIR"] = str(base / "kernel-cache")  # keys include the headers' hash

    def configure(self) -> None:
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        rc = run(["cmake", "-S", self.tree, "-B", self.build, *generator, "-DCMAKE_BUILD_TYPE=Release",
                  "-DTENSORPLUG_BUILD_PYTHON=ON", f"-DPython_EXECUTABLE={sys.executable}",
                  f"-DCMAKE_INSTALL_PREFIX={self.tree / 'core'}"], self.log)
        if rc != 0:
            raise RuntimeError(f"cmake configure failed (log: {self.log})")

    def build_and_install(self) -> bool:
        jobs = str(os.cpu_count() or 2)
        if run(["cmake", "--build", self.build, "-j", jobs], self.log) != 0:
            return False
        # cmake --install skips a file it thinks "Up-to-date" (same size, a timestamp it
        # sees as equal): a mutant rebuilt within a second of the last install would stay
        # installed. Remove what the last install wrote, so every file is copied again.
        manifest = self.build / "install_manifest.txt"
        if manifest.is_file():
            for installed in manifest.read_text().splitlines():
                Path(installed).unlink(missing_ok=True)
        if run(["cmake", "--install", self.build], self.log) != 0:
            return False
        # The plugins' modules are installed under the prefix (core/tensorplug_adapters/...);
        # the copy imports its plugins from plugins/: each module goes next to its package.
        for module in (self.tree / "core" / "tensorplug_adapters").rglob("*.so"):
            target = self.tree / "plugins" / module.relative_to(self.tree / "core")
            target.unlink(missing_ok=True)
            shutil.copy2(module, target)
        return True

    def pytest(self, tests) -> int:
        return run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests], self.log,
                   cwd=self.tree, env=self.env, timeout=1200)


def run_mutations(ws: Workspace, selected: list[Mutation]) -> dict[str, str]:
    """Each mutation's verdict, from the built, unmutated copy in ``ws``: "caught", "SURVIVED",
    "did not build" or "no tests ran (...)". After a native mutation the file is restored and
    the unmutated tree rebuilt before the next one, so that every mutation is judged on its
    own binary, never on the previous mutant's."""
    results: dict[str, str] = {}
    for m in selected:
        path = ws.tree / m.file
        original = path.read_text()
        path.write_text(original.replace(m.old, m.new, 1))
        rebuild = m.file.startswith(NEEDS_BUILD)
        try:
            if rebuild and not ws.build_and_install():
                results[m.name] = "did not build"
            else:
                rc = ws.pytest(m.tests)
                results[m.name] = ("caught" if rc not in (0, 4, 5) else
                                   "SURVIVED" if rc == 0 else f"no tests ran (pytest exit {rc})")
        finally:
            path.write_text(original)
            os.utime(path)  # newer than the mutated build: the rebuild below restores it
        if rebuild and not ws.build_and_install():
            raise RuntimeError(f"the unmutated copy no longer builds after restoring {m.file} (log: {ws.log})")
        print(f"  {results[m.name]:<10} {m.name}", flush=True)
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="mutations to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--record", action="store_true", help="write the result into docs/testing.md")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (its log.txt)")
    args = parser.parse_args(argv)
    if args.list:
        for m in MUTATIONS:
            print(f"{m.name:<34} {m.file}: {m.why}")
        return 0
    by_name = {m.name: m for m in MUTATIONS}
    unknown = [n for n in args.names if n not in by_name]
    if unknown:
        parser.error(f"no mutation named {', '.join(unknown)} (see --list)")
    selected = [by_name[n] for n in args.names] or list(MUTATIONS)

    base = Path(tempfile.mkdtemp(prefix="tensorplug-mutation-"))
    started = time.monotonic()
    results: dict[str, str] = {}
    try:
        ws = Workspace(base)
        copy_tree(ws.tree)
        check_snippets(ws.tree, selected)
        print(f"building a copy of the tree in {base} ...", flush=True)
        ws.configure()
        if not ws.build_and_install():
            print(f"the unmutated copy does not build (log: {ws.log})", file=sys.stderr)
            return 1
        imported = subprocess.run([sys.executable, "-c", "import tensorplug; print(tensorplug.__file__)"],
                                  env=ws.env, cwd=ws.tree, capture_output=True, text=True).stdout.strip()
        if not imported.startswith(str(ws.tree)):
            print(f"the tests would import tensorplug from {imported}, not from the copy", file=sys.stderr)
            return 1
        selections = list(dict.fromkeys(m.tests for m in selected))
        print(f"baseline: {len(selections)} test selections on the unmutated copy ...", flush=True)
        failing = [" ".join(s) for s in selections if ws.pytest(s) != 0]
        if failing:
            print(f"these tests fail without any mutation, nothing can be concluded: {'; '.join(failing)} "
                  f"(log: {ws.log})", file=sys.stderr)
            return 1
        results = run_mutations(ws, selected)
    except (StaleMutation, RuntimeError) as exc:
        print(exc, file=sys.stderr)
        return 1
    finally:
        if args.keep:
            print(f"kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)

    minutes = (time.monotonic() - started) / 60
    survivors = [n for n, r in results.items() if r != "caught"]
    print(f"{len(results)} mutations, {len(results) - len(survivors)} caught, {len(survivors)} not caught "
          f"({minutes:.0f} min)" + (f": {', '.join(survivors)}" if survivors else ""))
    if args.record:
        record(results, minutes, complete=len(selected) == len(MUTATIONS))
    return 1 if survivors else 0


def record(results: dict[str, str], minutes: float, complete: bool) -> None:
    """Write the result between the markers of docs/testing.md."""
    caught = sum(r == "caught" for r in results.values())
    lines = [RECORD_START, "",
             f"Last run: {datetime.date.today().isoformat()}, {'all' if complete else 'some'} {len(results)} "
             f"mutations, {caught} caught, {len(results) - caught} survived ({minutes:.0f} minutes).", "",
             "| mutation | result |", "|---|---|"]
    lines += [f"| `{name}` | {result} |" for name, result in results.items()]
    lines += ["", RECORD_END]
    text = RECORD_PAGE.read_text()
    pattern = re.compile(re.escape(RECORD_START) + ".*?" + re.escape(RECORD_END), re.S)
    if not pattern.search(text):
        raise SystemExit(f"{RECORD_PAGE}: no {RECORD_START} ... {RECORD_END} markers")
    RECORD_PAGE.write_text(pattern.sub(lambda _: "\n".join(lines), text))


if __name__ == "__main__":
    sys.exit(main())
