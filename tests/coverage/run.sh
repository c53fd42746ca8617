#!/usr/bin/env bash
# Line and branch coverage of the test suite: coverage.py for the Python packages
# (tensorplug, tensorplug_adapters) and gcov, through gcovr, for the C++ core (libtensorplug
# and the extension, built with TENSORPLUG_COVERAGE=ON: --coverage -O0). Prints both reports
# and fails when a total is below its floor in tests/coverage/floor.txt.
#
#   tests/coverage/run.sh                       # the CI selection (tests/coverage/selection.txt)
#   tests/coverage/run.sh tests                 # the whole suite (about 1.5x its plain time)
#   tests/coverage/run.sh tests/core/test_calls.py   # any pytest arguments
#
# The floors are measured on the CI selection: with other arguments the totals are printed
# and compared, but a smaller selection fails the floors by design (TENSORPLUG_COVERAGE_FLOOR=0
# turns the comparison off). As tests/sanitize/run.sh does, the instrumented build goes into a
# separate virtual environment under $TENSORPLUG_COVERAGE_DIR (default: a new temporary
# directory) layered over the current environment's packages, which must have coverage and
# gcovr (the `test` extra). Reports: $TENSORPLUG_COVERAGE_DIR/{python,cxx}.txt and .json.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"

PYTHON="${PYTHON:-python3}"
WORK="${TENSORPLUG_COVERAGE_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/tensorplug-coverage-XXXXXX")}"
mkdir -p "$WORK"
VENV="$WORK/venv" BUILD="$WORK/build" DATA="$WORK/data"
rm -rf "$DATA"
mkdir -p "$DATA"
start=$(date +%s)

# ---- 1. a venv layered over the current environment's packages ---------------------------
# Every site-packages directory of the current interpreter (a venv may itself be layered).
base_sites=$("$PYTHON" -c 'import sys; print("\n".join(p for p in sys.path if p.endswith("-packages")))')
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv --without-pip "$VENV"
fi
site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$base_sites" > "$site/_tensorplug_coverage_layer.pth"
# Python processes the tests start (the CLI, subprocess tests) are measured too: coverage's
# own startup hook is not run from a layered directory, so this venv gets one of its own
# (active only while COVERAGE_PROCESS_START is set).
echo "import coverage; coverage.process_startup()" > "$site/_tensorplug_coverage_subprocess.pth"
for module in coverage gcovr; do
  "$VENV/bin/python" -c "import $module" 2>/dev/null || {
    echo "coverage: $module is not installed (pip install \".[test]\")" >&2; exit 2; }
done

# ---- 2. the instrumented build (its .gcda files land next to the objects in $BUILD) --------
echo "+ building tensorplug with TENSORPLUG_COVERAGE=ON into $VENV"
"$VENV/bin/python" -m pip install --quiet "scikit-build-core>=0.10" ninja
"$VENV/bin/python" -m pip install --quiet --no-deps --no-build-isolation --force-reinstall \
  -C cmake.define.TENSORPLUG_COVERAGE=ON -C install.strip=false -C build-dir="$BUILD" "$ROOT"
find "$BUILD" -name '*.gcda' -delete  # counts from this run only
built=$("$VENV/bin/python" -c 'import tensorplug._core as c; print(c.__file__)')
case "$built" in
  "$site"/*) ;;
  *) echo "coverage: tensorplug resolves to $built, not the instrumented build in $site" >&2; exit 2 ;;
esac
build_done=$(date +%s)

# ---- 3. the run ---------------------------------------------------------------------------------
selection=()
if [ $# -eq 0 ]; then
  mapfile -t selection < <(grep -v -E '^\s*(#|$)' tests/coverage/selection.txt)
fi
export COVERAGE_RCFILE="$ROOT/tests/coverage/coveragerc" COVERAGE_FILE="$DATA/.coverage"
export COVERAGE_PROCESS_START="$COVERAGE_RCFILE"
export TENSORPLUG_CACHE_DIR="$WORK/kernel-cache"  # kernels compiled for this build only
export PATH="$VENV/bin:$PATH"
unset VIRTUAL_ENV PYTHONPATH
set +e
"$VENV/bin/python" -m coverage run -m pytest -q -p no:cacheprovider "${selection[@]}" "$@" 2>&1 | tee "$WORK/pytest.out"
status=${PIPESTATUS[0]}
set -e
run_done=$(date +%s)

# ---- 4. the reports -------------------------------------------------------------------------------
"$VENV/bin/python" -m coverage combine --quiet
"$VENV/bin/python" -m coverage report --skip-covered --sort=cover > "$WORK/python.txt" || true
"$VENV/bin/python" -m coverage json --quiet -o "$WORK/python.json"
# Throw branches (every call that may throw) and unreachable ones are noise in C++ branch
# counts; --merge-lines counts a line of a template once, not once per instantiation.
"$VENV/bin/python" -m gcovr --root "$ROOT" --object-directory "$BUILD" --filter "$ROOT/csrc/" \
  --exclude "$ROOT/csrc/include/compat/" --exclude-throw-branches --exclude-unreachable-branches \
  --gcov-ignore-parse-errors=negative_hits.warn_once_per_file --merge-lines \
  --txt "$WORK/cxx.txt" --json-summary "$WORK/cxx.json" --json-summary-pretty
cat "$WORK/python.txt" "$WORK/cxx.txt"
echo "coverage: build $((build_done - start)) s, tests $((run_done - build_done)) s, pytest exit status $status"
"$VENV/bin/python" tests/coverage/check.py "$WORK/python.json" "$WORK/cxx.json" tests/coverage/floor.txt
exit "$status"
