#!/usr/bin/env bash
# Mutation testing of a Python module of the package with a real tool (cosmic-ray: every
# operator it has, at every place it applies), alongside the curated list (run.py).
#
#   tests/mutation/cosmic_ray.sh MODULE "PYTEST ARGS"
#   tests/mutation/cosmic_ray.sh core/tensorplug/shapes.py "tests/ops/test_op.py tests/core/test_properties.py -k rule"
#
# Works in a copy of the tree (tracked and untracked, not ignored, files) under
# $TENSORPLUG_COSMIC_RAY_DIR (default: a new temporary directory), never in the working tree:
# the built extension of the current environment is copied into the copy's package, a
# sitecustomize hides the editable install (as run.py does), and cosmic-ray mutates the
# copy's MODULE, running pytest on the copy for each mutant. Needs cosmic-ray installed
# (pip install cosmic-ray). Prints cosmic-ray's report: the survivors with their diffs.
#
# The mutants inside type annotations are marked skipped before the run
# (cr_filter_annotations.py says why). With TENSORPLUG_COSMIC_RAY_RESUME=1 and a
# $TENSORPLUG_COSMIC_RAY_DIR holding a session.sqlite of the same module (an earlier run that
# was stopped), the copy is made afresh but the session is kept: no init, no baseline, and
# only the mutants without a result run (stop a run with Ctrl-C or a kill of its process
# group: the results so far stay in the session).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
module="$1" tests="$2"
WORK="${TENSORPLUG_COSMIC_RAY_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/tensorplug-cosmic-ray-XXXXXX")}"
TREE="$WORK/tree"
rm -rf "$TREE" "$WORK/shim"
resume=""
if [ -n "${TENSORPLUG_COSMIC_RAY_RESUME:-}" ]; then
  [ -f "$WORK/session.sqlite" ] || { echo "cosmic_ray.sh: no session to resume in $WORK" >&2; exit 2; }
  resume=1
fi
mkdir -p "$TREE" "$WORK/shim"
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$TREE")
# The installed extension, runtime library and headers next to the copy's Python files.
installed=$(python -c 'import tensorplug._core as c, os; print(os.path.dirname(c.__file__))')
cp -r "$installed"/. "$TREE/core/tensorplug/"
# The plugins' compiled modules (tensorplug_adapters.<framework>._native, ...) next to their packages.
plugins=$(python -c 'import tensorplug_adapters.numpy._exchange as m, os; print(os.path.dirname(os.path.dirname(m.__file__)))')
(cd "$plugins" && find . -name '*.so' -exec cp --parents -t "$TREE/plugins/tensorplug_adapters/" {} +)
printf '%s\n' 'import sys' \
  'sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "ScikitBuildRedirectingFinder"]' \
  > "$WORK/shim/sitecustomize.py"
export PYTHONPATH="$WORK/shim:$TREE/core:$TREE/plugins"
export TENSORPLUG_CACHE_DIR="$WORK/kernel-cache"
imported=$(cd "$TREE" && python -c 'import tensorplug; print(tensorplug.__file__)')
case "$imported" in
  "$TREE"/*) ;;
  *) echo "cosmic_ray.sh: tensorplug resolves to $imported, not to the copy" >&2; exit 2 ;;
esac
cat > "$WORK/config.toml" <<EOF
[cosmic-ray]
module-path = "$module"
timeout = 120.0
excluded-modules = []
test-command = "$(command -v python) -m pytest -x -q -p no:cacheprovider $tests"

[cosmic-ray.distributor]
name = "local"
EOF
cd "$TREE"
start=$(date +%s)
if [ -z "$resume" ]; then
  cosmic-ray init "$WORK/config.toml" "$WORK/session.sqlite"
  cosmic-ray baseline "$WORK/config.toml"
fi
python "$ROOT/tests/mutation/cr_filter_annotations.py" "$WORK/session.sqlite"
cosmic-ray exec "$WORK/config.toml" "$WORK/session.sqlite"
cr-report "$WORK/session.sqlite" --show-diff --surviving-only > "$WORK/survivors.txt" || true
cr-report "$WORK/session.sqlite" | tail -4
echo "cosmic_ray.sh: $(( $(date +%s) - start )) s; survivors with their diffs: $WORK/survivors.txt"
