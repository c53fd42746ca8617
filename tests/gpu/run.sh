#!/usr/bin/env bash
# The GPU run (docs/gpu.md): on a machine with a CUDA device and torch (CUDA build), cupy and
# jax (CUDA) in its python3, install tensorplug into that Python and run, step by step:
#   install  build and install this checkout (pip, no build isolation: the machine is offline),
#            and any wheels under .whl/ (apache-tvm-ffi for the benchmark's other column)
#   gpu      the test files that hold the CUDA, cupy and GPU-stream tests, one process
#   bench    the call-overhead benchmark's rows (CUDA and CPU, beside apache-tvm-ffi) and the
#            compile benchmark on the GPU
#   suite    the whole suite, in parallel (pytest-xdist, one file per worker)
#   kit      the conformance kit alone, in one process: its capability report per adapter
# Usage: tests/gpu/run.sh [install] [gpu] [suite] [kit] [bench]   (default: install suite kit bench)
# Logs and JUnit reports go to $OUT (default ./gpu-run). Each step is bounded by a timeout so
# that one hang leaves the others their time; the exit status is the first failing step's.
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-$PWD/gpu-run}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
# jax takes 75% of the GPU's memory on first use unless told otherwise; torch and cupy share it.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
py="${PYTHON:-python3}"
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(install suite kit bench)
status=0

# The files holding the GPU tests (grep for "no CUDA device" and "cupy not installed").
GPU_FILES=(tests/gpu/test_cuda.py tests/compilers/test_triton_ptx.py tests/gpu/test_gpu.py
           tests/torch/test_op_torch.py tests/jax/test_op_jax.py tests/kit/test_conformance.py
           tests/kit/test_conformance_kit.py tests/builds/test_library_bin.py tests/core/test_storage.py
           tests/tvm_ffi/test_compat_tvm_ffi.py tests/core/test_context.py tests/core/test_device_rules.py
           tests/core/test_handles.py tests/core/test_bad_results.py tests/core/test_error_types.py
           tests/core/test_env_restore.py tests/hub/test_hub.py tests/core/test_vocabulary.py
           tests/core/test_contract_edges.py tests/docs/test_bench.py)

step() {  # step NAME SECONDS COMMAND...: runs COMMAND with its output in $out/NAME.log
  local name=$1 limit=$2
  shift 2
  echo "== $name (at most ${limit}s): $*"
  local start=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  echo "== $name: exit $rc after $((SECONDS - start))s"
  tail -n 25 "$out/$name.log"
  [ $rc -eq 0 ] || [ $status -ne 0 ] || status=$rc
}

for s in "${steps[@]}"; do
  case "$s" in
    install)
      { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
        "$py" -c "import sys, torch, jax, cupy; print(sys.version.split()[0], 'torch', torch.__version__, torch.version.cuda,
torch.cuda.is_available(), 'jax', jax.__version__, jax.devices(), 'cupy', cupy.__version__)"
        nvcc --version | tail -n 2; c++ --version | head -n 1; } >"$out/machine.txt" 2>&1
      cat "$out/machine.txt"
      if compgen -G ".whl/*.whl" >/dev/null; then
        step wheels 120 "$py" -m pip install --no-index --no-deps .whl/*.whl
      fi
      step install 180 "$py" -m pip install --no-build-isolation --no-deps -v .
      ;;
    gpu)
      step gpu 300 "$py" -m pytest -q -rs -p no:cacheprovider --junitxml="$out/gpu.xml" "${GPU_FILES[@]}"
      ;;
    bench)
      step bench_overhead 90 "$py" benchmarks/bench_overhead.py --frameworks torch-cuda,cupy,torch,numpy \
        --repeat 5 --calls 20000 --no-import --no-memory --json "$out/bench_overhead.json"
      step bench_compile 180 "$py" benchmarks/bench_compile.py --device cuda --ops 1,100 --calls 300 --repeat 5 \
        --json "$out/bench_compile.json"
      ;;
    suite)
      # A worker that crashes is replaced (the run goes on); its test is reported as failed.
      step suite "${SUITE_SECONDS:-300}" "$py" -m pytest -q -rs -p no:cacheprovider -n "${WORKERS:-14}" \
        --dist loadfile --max-worker-restart=30 --junitxml="$out/suite.xml"
      ;;
    kit)
      step kit 90 "$py" -m pytest -q -rs -p no:cacheprovider tests/kit/test_conformance.py
      ;;
    *) echo "unknown step $s"; exit 2 ;;
  esac
done
# The failures of every JUnit report, one line each, for a quick read of the run.
"$py" - "$out" <<'PY'
import pathlib, sys, xml.etree.ElementTree as ET
for report in sorted(pathlib.Path(sys.argv[1]).glob("*.xml")):
    cases = list(ET.parse(report).iter("testcase"))
    bad = [c for c in cases if c.find("failure") is not None or c.find("error") is not None]
    print(f"== {report.name}: {len(cases)} tests, {len(bad)} failed")
    for c in bad:
        e = c.find("failure") if c.find("failure") is not None else c.find("error")
        print(f"  {c.get('classname')}::{c.get('name')}: {(e.get('message') or '').splitlines()[0][:200] if e.get('message') else ''}")
PY
exit $status
