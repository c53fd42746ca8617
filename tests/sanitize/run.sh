#!/usr/bin/env bash
# AddressSanitizer + UndefinedBehaviorSanitizer run of the test suite (which includes the
# short fuzz run, tests/fuzz/test_fuzz.py). Zero sanitizer reports is the bar: any report
# fails the script, and every report is printed.
#
#   tests/sanitize/run.sh [pytest args...]      # default: the whole suite
#
# The developer's environment is left alone: the instrumented build goes into a separate
# virtual environment under $TENSORPLUG_SANITIZE_DIR (default: a new temporary directory)
# whose site-packages is layered over the current environment's (a path line in a .pth
# file: the current environment's packages are importable, but its own .pth files -- the
# editable install's finder -- are not run, so `import tensorplug`, the `tensorplug.adapters`
# entry points and the `tensorplug` script all come from the instrumented build).
#
# The interpreter is not instrumented, so libasan is preloaded (with libstdc++, which the
# ASan runtime must find already loaded to intercept C++ exceptions). Tools the suite spawns
# that do not tolerate the preload (compilers, nvcc, assembler, linkers, cmake, ninja, ldd, chromium) run through
# wrappers on PATH that drop LD_PRELOAD. Leak detection is off: the interpreter and the
# frameworks keep memory until exit by design (benchmarks/leak.py measures leaks instead).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"

PYTHON="${PYTHON:-python3}"
WORK="${TENSORPLUG_SANITIZE_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/tensorplug-sanitize-XXXXXX")}"
mkdir -p "$WORK"
VENV="$WORK/venv" LOGS="$WORK/logs" BIN="$WORK/nopreload"
rm -rf "$LOGS" "$BIN"
mkdir -p "$LOGS" "$BIN"
start=$(date +%s)

# ---- 1. a venv layered over the current environment's packages ------------------------
base_site=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv --without-pip "$VENV"
fi
site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$base_site" > "$site/_tensorplug_sanitize_layer.pth"

# ---- 2. the instrumented build (pip comes from the layered packages; unstripped, so that
#         reports name the functions and lines) ----------------------------------------------
echo "+ building tensorplug with TENSORPLUG_SANITIZE=ON into $VENV"
# The build backend goes into this venv: a regular install of tensorplug (CI's) built it in
# an isolated environment, so the layered packages need not have it.
"$VENV/bin/python" -m pip install --quiet "scikit-build-core>=0.10" ninja
"$VENV/bin/python" -m pip install --quiet --no-deps --no-build-isolation --force-reinstall \
  -C cmake.define.TENSORPLUG_SANITIZE=ON -C install.strip=false -C build-dir="$WORK/build" "$ROOT"

# ---- 3. tools that must not run with the preload -----------------------------------------
# chromium: the landing-page test's headless browser spins under the preload.
for tool in cc c++ gcc g++ cpp as ld ar nvcc clang clang++ cmake ninja ldd chromium chromium-browser google-chrome; do
  real=$(command -v "$tool" || true)
  [ -n "$real" ] || continue
  printf '#!/bin/sh\nunset LD_PRELOAD\nexec "%s" "$@"\n' "$real" > "$BIN/$tool"
  chmod +x "$BIN/$tool"
done

# ---- 4. the run -------------------------------------------------------------------------------
libasan=$(gcc -print-file-name=libasan.so)
libstdcxx=$(gcc -print-file-name=libstdc++.so)
built=$(LD_PRELOAD="$libasan $libstdcxx" ASAN_OPTIONS=detect_leaks=0 "$VENV/bin/python" -c 'import tensorplug._core as c; print(c.__file__)')
case "$built" in
  "$site"/*) ;;
  *) echo "sanitize: tensorplug resolves to $built, not the instrumented build in $site" >&2; exit 2 ;;
esac
# grep -c, not -q: -q exits at the first match and nm's SIGPIPE fails the pipe under pipefail.
if [ "$(nm -D "$(dirname "$built")/lib/libtensorplug.so" | grep -c __asan)" -eq 0 ]; then
  echo "sanitize: $(dirname "$built")/lib/libtensorplug.so is not instrumented" >&2; exit 2
fi

export LD_PRELOAD="$libasan $libstdcxx"
# allocator_may_return_null: a huge request must reach tensorplug's MemoryError path, not
# an ASan abort; halt_on_error with log_path: the first report ends the process and is kept.
# alloc_dealloc_mismatch=0: paddle 3.3's libpaddle frees a new[] block with delete at exit
# (pir::IrContext::~IrContext), which ASan cannot suppress by library; the check is lost for
# tensorplug too (its one new[], the call scratch blocks, is owned by a unique_ptr<int64_t[]>).
# detect_odr_violation=0: the frameworks' own libraries define some globals twice.
# verify_asan_link_order=0: a Python that a build tool starts without the preload (cmake and
# ninja run without it, as the compilers must) still imports the instrumented core: the fused
# kernel wheel's `python -m tensorplug.library_bin` step (tests/examples/test_fused_kernels_wheel.py).
export ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:allocator_may_return_null=1:alloc_dealloc_mismatch=0:detect_odr_violation=0:handle_segv=1:verify_asan_link_order=0:log_path=$LOGS/asan"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$LOGS/ubsan"
export PATH="$BIN:$VENV/bin:$PATH"
export CC="$BIN/cc" CXX="$BIN/c++"
export TENSORPLUG_CACHE_DIR="$WORK/kernel-cache"  # kernels compiled for this build only
unset VIRTUAL_ENV PYTHONPATH
# ASan intercepts dlopen, so a library's own runpath ($ORIGIN/...) no longer finds what it
# opens at run time: paddle's matmul then fails to load paddle/libs/libmklml_intel.so.
if [ -d "$base_site/paddle/libs" ]; then
  export LD_LIBRARY_PATH="$base_site/paddle/libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

set +e
"$VENV/bin/python" -m pytest -q -p no:cacheprovider "${@:-tests}" 2>&1 | tee "$WORK/pytest.out"
status=${PIPESTATUS[0]}
set -e
unset LD_PRELOAD

# ---- 5. the verdict: any sanitizer report fails -----------------------------------------
# ASan writes each report to $LOGS; UBSan (in the ASan runtime) prints to stderr whatever
# log_path says, so its reports are found in pytest's output (a UB report halts its process,
# and a test whose subprocess died prints the subprocess's stderr).
# A report is a file with an ERROR; "failed to allocate" WARNINGs are the MemoryError tests
# working as intended (allocator_may_return_null).
reports=$(grep -l -E "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:" -r "$LOGS" | sort || true)
ub_reports=$(grep -c -E "runtime error:" "$WORK/pytest.out" || true)
elapsed=$(( $(date +%s) - start ))
if [ "$ub_reports" != 0 ]; then
  echo "sanitize: $ub_reports UndefinedBehaviorSanitizer line(s) in the test output:"
  grep -E "runtime error:" "$WORK/pytest.out" | sort | uniq -c | head -20
fi
if [ -n "$reports" ] || [ "$ub_reports" != 0 ]; then
  echo "sanitize: $(echo "$reports" | grep -c . || true) AddressSanitizer report(s) (logs in $LOGS):"
  for f in $reports; do
    echo "==== $f"
    grep -E "ERROR: AddressSanitizer|runtime error:|SUMMARY:|^    #[0-9] " "$f" | head -20
  done
  echo "sanitize: FAILED in ${elapsed}s"
  exit 1
fi
echo "sanitize: no sanitizer reports; pytest exit status $status; ${elapsed}s"
exit "$status"
