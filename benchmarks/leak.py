"""Leak run: many calls per case, per framework; reports RSS and live-object growth.

    python benchmarks/leak.py                        # 1,000,000 calls per case for numpy and torch,
                                                     # 200,000 for jax and paddle (docs/reliability.md)
    python benchmarks/leak.py --calls 2000 --frameworks numpy   # a quick check

Cases (the example kernels, examples/kernels/kernels.cc): no-arg, one tensor, three
tensors, allocating (the framework's allocator makes the result), throwing (a kernel
error becomes a Python exception), callbacks (a Python callable called from C++); and,
from a small library built here (LIST_AND_HANDLE_SOURCE), a list of tensors with an int
array, a list result, and a typed handle made, passed back and dropped.

Each case runs a warm-up (a tenth of its calls, so framework caches fill), then two equal
windows. What tensorplug would leak grows the same in both windows; a cache does not grow
in the second. A case is reported as growing when its second window adds more than 1 MiB
of RSS, or more live Python objects (gc-tracked, counted by type) or allocated Python
memory blocks (sys.getallocatedblocks) than one per 1,000 calls, with a floor of 64 (the
gc untracks tuples lazily, so their count jitters by a few dozen), and a third window,
run only then, grows by as much again: a leak grows in every window, a heap that grew
once late does not. A leak of one object per call exceeds that in any window of 64 calls
or more. Exit status 1 when any case grows.
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CALLS = {"numpy": 1_000_000, "torch": 1_000_000, "jax": 200_000, "paddle": 200_000}
RSS_LIMIT = 1 << 20
PER_CALL_LIMIT = 1e-3
OBJECT_FLOOR = 64


def under_asan() -> bool:
    """AddressSanitizer's quarantine holds freed memory, so RSS says nothing under it."""
    with open("/proc/self/maps") as f:
        return "libasan" in f.read()


ASAN = under_asan()


def rss_bytes() -> int:
    if ASAN:
        return 0
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def snapshot():
    gc.collect()
    counts = collections.Counter(type(o).__qualname__ for o in gc.get_objects())
    return rss_bytes(), sys.getallocatedblocks(), counts


# The wave-2 kinds that hold references: lists of tensors (items viewed in the call's
# scratch), int arrays, list results, and owning handles (reference counted, a deleter).
LIST_AND_HANDLE_SOURCE = r"""
#include <tensorplug/tensorplug.h>
#include <vector>
namespace tp = tensorplug;
struct LeakPlan { int64_t n; };
TENSORPLUG_HANDLE_TYPE(LeakPlan, "leak.Plan");
namespace {
int64_t ListNumel(tp::TensorViewList xs, tp::IntArrayView weights) {
  int64_t n = 0;
  for (size_t i = 0; i < xs.size(); ++i) n += xs[i].numel() * (i < weights.size() ? weights[i] : 1);
  return n;
}
std::vector<tp::Tensor> ListLike(tp::TensorViewList xs) {
  std::vector<tp::Tensor> out;
  for (tp::TensorView x : xs) out.push_back(tp::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device()));
  return out;
}
tp::Handle<LeakPlan> MakePlan(int64_t n) { return tp::Handle<LeakPlan>(new LeakPlan{n}); }
int64_t PlanSize(tp::Handle<LeakPlan> plan) { return plan->n; }
}  // namespace
TENSORPLUG_EXPORT(list_numel, ListNumel, "xs", "weights");
TENSORPLUG_EXPORT(list_like, ListLike, "xs");
TENSORPLUG_EXPORT(make_plan, MakePlan, "n");
TENSORPLUG_EXPORT(plan_size, PlanSize, "plan");
"""


def make_tensors(name):
    if name == "numpy":
        import numpy as np
        return lambda shape: np.ones(shape, dtype=np.float32)
    if name == "torch":
        import torch
        return lambda shape: torch.ones(shape, dtype=torch.float32)
    if name == "jax":
        import jax
        jax.config.update("jax_platforms", "cpu")
        import jax.numpy as jnp
        return lambda shape: jnp.ones(shape, dtype=jnp.float32)
    if name == "paddle":
        import paddle
        return lambda shape: paddle.ones(shape, dtype="float32")
    raise ValueError(f"unknown framework {name!r}")


def cases(mod, extra, ones):
    x, y, z, short = ones((8,)), ones((8,)), ones((8,)), ones((3,))
    out = ones((8,))
    writable = not type(out).__module__.startswith("jax")

    def no_arg():
        mod.noop()

    def one_tensor():
        mod.sum(x)

    def three_tensors():
        mod.scale(x, y, 2.0) if writable else (mod.sum(x), mod.sum(y), mod.sum(z))

    def allocating():
        mod.add(x, y)

    def throwing():
        try:
            mod.add(x, short)
        except ValueError:
            pass

    def callback():
        mod.apply(lambda v: v + 1, 3)

    def tensor_list():
        extra.list_numel([x, y, z], [1, 2, 3])

    def list_result():
        extra.list_like([x, y])

    def handle():
        extra.plan_size(extra.make_plan(8))

    return {"no-arg": no_arg, "one tensor": one_tensor, "three tensors" if not writable else "two tensors + float":
            three_tensors, "allocating": allocating, "throwing": throwing, "callback": callback,
            "list + int array": tensor_list, "list result": list_result, "handle": handle}


def run_case(fn, calls):
    warm, window = max(1, calls // 10), max(1, (calls - calls // 10) // 2)
    for _ in range(warm):
        fn()
    # Two snapshots with no call between them: what measuring itself adds (the previous
    # snapshot's Counter and tuple), subtracted from both windows.
    points = [snapshot(), snapshot()]
    base = points.pop(0)
    for _ in range(2):
        t0 = time.perf_counter()
        for _ in range(window):
            fn()
        elapsed = time.perf_counter() - t0
        points.append(snapshot())
    (r0, b0, c0), (r1, b1, c1), (r2, b2, c2) = points
    own_blocks = b0 - base[1]
    own = c0.copy()
    own.subtract(base[2])

    def objects(a, b):
        diff = b.copy()
        diff.subtract(a)
        diff.subtract(own)
        return sum(diff.values()), {k: v for k, v in diff.most_common(3) if v > 0}

    obj_a, _ = objects(c0, c1)
    obj_b, top_b = objects(c1, c2)
    b1, b2 = b1 - own_blocks, b2 - 2 * own_blocks
    limit = max(OBJECT_FLOOR, int(window * PER_CALL_LIMIT))
    grows = (r2 - r1) > RSS_LIMIT or obj_b > limit or (b2 - b1) > limit
    confirmed = grows
    if grows:
        # A leak grows in every window; a heap that settled late (an allocator arena of the
        # framework's threads growing once) does not grow in a third.
        for _ in range(window):
            fn()
        r3, b3, c3 = snapshot()
        b3 -= 3 * own_blocks
        obj_c, top_b = objects(c2, c3)
        confirmed = (r3 - r2) > RSS_LIMIT or obj_c > limit or (b3 - b2) > limit
    return {"calls": warm + (3 if grows else 2) * window, "window": window, "us_per_call": elapsed / window * 1e6,
            "rss_a": r1 - r0, "rss_b": r2 - r1, "blocks_a": b1 - b0, "blocks_b": b2 - b1,
            "objects_a": obj_a, "objects_b": obj_b, "top_b": top_b, "grows": confirmed, "settled": grows and not confirmed}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--frameworks", default="numpy,torch,jax,paddle")
    p.add_argument("--calls", type=int, help="calls per case for every framework (default: 1M numpy/torch, 200k jax/paddle)")
    p.add_argument("--json", help="also write the results here")
    a = p.parse_args(argv)

    import tensorplug
    from tensorplug import cpp

    if ASAN:
        print("RSS not measured: AddressSanitizer is loaded (its quarantine keeps freed memory)")
    mod = tensorplug.load_module(cpp.build("example_kernels", [ROOT / "examples" / "kernels" / "kernels.cc"]))
    extra = cpp.load_inline("leak_lists_handles", LIST_AND_HANDLE_SOURCE)
    results, failed = [], False
    print(f"{'framework':<8} {'case':<20} {'calls':>9} {'us/call':>8} {'RSS A':>9} {'RSS B':>9} "
          f"{'blocks B':>8} {'objs B':>7}  verdict")
    for name in [n for n in a.frameworks.split(",") if n]:
        try:
            ones = make_tensors(name)
        except ImportError:
            print(f"{name:<8} (not installed)")
            continue
        calls = a.calls or DEFAULT_CALLS.get(name, 200_000)
        for case, fn in cases(mod, extra, ones).items():
            r = run_case(fn, calls)
            r.update(framework=name, case=case)
            results.append(r)
            failed |= r["grows"]
            verdict = (f"GROWS {r['top_b']}" if r["grows"] else
                       "no growth (settled: a third window did not grow)" if r["settled"] else "no growth")
            print(f"{name:<8} {case:<20} {r['calls']:>9} {r['us_per_call']:>8.2f} {r['rss_a'] / 1024:>7.0f}kB "
                  f"{r['rss_b'] / 1024:>7.0f}kB {r['blocks_b']:>8} {r['objects_b']:>7}  {verdict}", flush=True)
    print("verdict:", "GROWTH in " + ", ".join(f"{r['framework']}/{r['case']}" for r in results if r["grows"])
          if failed else f"no growth in {len(results)} cases")
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
