"""One fuzz worker process: runs cases ``start..stop`` of a seed against the fuzz kernels.

Before running a case it appends ``<seed> <index> <description>`` to its log file and
flushes, so when the process dies the log's last line names the case that killed it.
A case is generated from ``(seed, index)`` alone: ``run.py --seed S --case I`` replays it.
Any Python exception is a pass (bad input must raise); a ``SystemError`` is an anomaly
(the binding returned NULL without an error, or an error with a result) and is reported.
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import tensorplug  # noqa: E402

import inputs  # noqa: E402

# Parameter kinds of each fuzz kernel (tests/fuzz/kernels.cc), "?x" optional.
SIGNATURES = {
    "view_meta": ["view"], "view_touch": ["view"], "mview_touch": ["mview"], "tensor_echo": ["tensor"],
    "tensor_meta": ["tensor"],
    "int_i64": ["int"], "int_i8": ["int"], "int_u32": ["int"], "int_u64": ["int"], "float_f64": ["float"],
    "float_f32": ["float"], "bool_b": ["bool"], "str_s": ["str"], "str_sv": ["str"], "str_c": ["str"],
    "device_d": ["device"], "dtype_t": ["dtype"], "any_a": ["any"], "func_call": ["func", "int"],
    "func_view": ["func", "view"], "func_tensor": ["func", "tensor"],
    "opt_all": ["?view", "?tensor", "?int", "?float", "?bool", "?str", "?device", "?dtype", "?func"],
    "mixed": ["view", "tensor", "int", "float", "bool", "str", "device", "dtype", "any"],
    "alloc": ["ndim", "extent", "dtype", "device"], "raw": ["layout", "ndim", "dtype", "device"],
    "result": ["int", "view"], "fail": ["int", "str"], "keep": ["any"], "nosig": ["any", "any", "any"],
    "silent_failure": [], "handle_make": ["int"], "handle_typed": ["handle"], "handle_void": ["handle"],
    "handle_opt": ["?handle"],
}
# output_framework() names besides the run's frameworks (a framework not in the run is not
# named: output_framework would import it).
OUTPUTS = ["dlpack", "tensorplug", "nosuchframework", ""]
DTYPES = ["float32", "float64", "float16", "bfloat16", "int8", "int64", "uint8", "bool", "complex64",
          "float8_e4m3fn", "int4", "float32x4"]


class Case:
    """Builds the arguments of one call from its random stream, recording what it made."""

    def __init__(self, rng, fw, kernels):
        self.rng, self.fw, self.kernels = rng, fw, kernels

    def pick(self, pool):
        value = self.rng.choice(pool)
        return value, _short(value)

    def anything(self):
        r = self.rng.randrange(8)
        if r == 0:
            return self.pick(inputs.SCALARS)
        if r == 1:
            return self.pick(inputs.STRINGS)
        if r == 2:
            return self.pick(inputs.OTHER)
        if r == 3:
            return self.pick(inputs.CALLBACKS)
        if r == 4:
            return inputs.producer(self.fw, self.rng, self.kernels)
        if r == 5 and inputs.KEPT:
            return self.pick(inputs.KEPT)
        if r == 6:
            if self.rng.random() < 0.3:
                return self.handle()
            return getattr(self.kernels, self.rng.choice(sorted(SIGNATURES))), "a fuzz kernel Function"
        return self.fw.tensor(self.rng)

    def handle(self):
        """A handle the fuzz kernels made (any of its forms), maybe closed first."""
        which = self.rng.randrange(5)
        made = self.kernels.handle_make(which)
        if made is not None and self.rng.random() < 0.2:
            made.close()
            return made, f"closed handle_make({which})"
        return made, f"handle_make({which})"

    def value(self, kind):
        rng = self.rng
        if kind.startswith("?"):
            if rng.random() < 0.3:
                return None, "None"
            kind = kind[1:]
        if rng.random() < 0.15:
            return self.anything()
        if kind in ("view", "mview", "tensor"):
            r = rng.random()
            if r < 0.7:
                return self.fw.tensor(rng)
            if r < 0.85:
                return inputs.producer(self.fw, rng, self.kernels)
            layout, ndim = rng.randrange(9), rng.choice([0, 1, 3, 65, 2049])
            dev = rng.choice(["cpu", "cpu", (2, 0), (1, 5)])
            t = self.kernels.raw(layout, ndim, rng.choice(DTYPES[:8]), dev)
            return t, f"raw Tensor layout={layout} ndim={ndim} device={dev}"
        if kind == "int":
            return self.pick([v for v in inputs.SCALARS if isinstance(v, (int, float)) or v is None])
        if kind == "float":
            return self.pick(inputs.SCALARS)
        if kind == "bool":
            return self.pick([True, False, 0, 1, None, 1.0, "True"])
        if kind == "str":
            return self.pick(inputs.STRINGS)
        if kind == "device":
            pool = inputs.STRINGS[:24] + inputs.OTHER[3:16] + inputs._devices()
            if "torch" in self.fw.modules:
                torch = self.fw.modules["torch"]
                pool += [torch.device("cpu"), torch.device("meta"), torch.device("cuda", 7)]
            return self.pick(pool)
        if kind == "dtype":
            pool = DTYPES + inputs.STRINGS[29:]
            if "numpy" in self.fw.modules:
                np = self.fw.modules["numpy"]
                pool += [np.dtype("float32"), np.dtype("<U3"), np.dtype("O"), np.float64]
            if "torch" in self.fw.modules:
                torch = self.fw.modules["torch"]
                pool += [torch.float32, torch.bfloat16, torch.float8_e5m2, torch.complex32, torch.quint8]
            return self.pick(pool)
        if kind == "func":
            if rng.random() < 0.7:
                return self.pick(inputs.CALLBACKS)
            return getattr(self.kernels, rng.choice(["int_i64", "view_meta", "fail", "func_call"])), "kernel"
        if kind == "handle":
            return self.handle()
        if kind == "ndim":
            return self.pick([0, 1, 2, 64, 65, 100, 2049, -1, 2**31])
        if kind == "extent":
            return self.pick([0, 1, 3, 1000, 2**31, 2**40, 2**59, 2**61, 2**62, 2**63 - 1, -1, -2**63])
        if kind == "layout":
            layout = rng.randrange(10)
            return layout, f"layout={layout}"
        return self.anything()


def _short(value) -> str:
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__} with a failing repr>"
    return text if len(text) <= 60 else text[:57] + "..."


def make_case(seed: int, index: int, fw, kernels):
    """The call of case ``index``: (callable, args, output framework or None, description)."""
    rng = random.Random(f"{seed}/{index}")
    case = Case(rng, fw, kernels)
    name = rng.choice(sorted(SIGNATURES))
    kinds = list(SIGNATURES[name])
    if rng.random() < 0.04:  # wrong arity
        kinds = kinds[:-1] if kinds and rng.random() < 0.5 else kinds + ["any"]
    args, descs = [], []
    for kind in kinds:
        value, desc = case.value(kind)
        args.append(value)
        descs.append(desc)
    output = rng.choice(OUTPUTS + sorted(fw.modules)) if rng.random() < 0.3 else None
    description = f"{name}({', '.join(descs)})" + (f" in output_framework({output!r})" if output is not None else "")
    return getattr(kernels, name), args, output, description


def inspect_result(value, depth=0):
    """Reads what a result offers (as a user would), recursively through tuples."""
    if depth > 3:
        return
    if isinstance(value, tuple):
        for item in value:
            inspect_result(item, depth + 1)
        return
    if isinstance(value, tensorplug.Tensor):
        _ = (value.shape, value.strides, value.dtype, value.device, repr(value))
        tensorplug.from_dlpack(value)
    elif isinstance(value, tensorplug.Function):
        value(1)
    elif isinstance(value, tensorplug.Handle):
        _ = (repr(value), value.address, value.type_name, value.owning, hash(value))
    elif hasattr(value, "__dlpack__") and hasattr(value, "shape"):
        _ = (value.shape, repr(value)[:10])


def run_case(fn, args, output):
    if output is None:
        result = fn(*args)
    else:
        with tensorplug.output_framework(output):
            result = fn(*args)
    inspect_result(result)


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--lib", required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--start", type=int, required=True)
    p.add_argument("--stop", type=int, required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--frameworks", default="numpy,torch,jax,paddle")
    a = p.parse_args(argv)

    faulthandler.enable()  # a native crash prints the Python stack to stderr
    fw = inputs.Frameworks([n for n in a.frameworks.split(",") if n])
    kernels = tensorplug.load_module(a.lib)
    anomalies = 0
    with open(a.log, "a", encoding="utf-8", errors="backslashreplace") as log:
        for index in range(a.start, a.stop):
            try:
                fn, args, output, description = make_case(a.seed, index, fw, kernels)
            except Exception as e:  # the generator itself raised (a broken framework call)
                fn, args, output, description = None, (), None, f"<generator raised {type(e).__name__}: {e}>"
            log.write(f"{a.seed} {index} {description}\n")
            log.flush()
            if fn is None:
                continue
            try:
                run_case(fn, args, output)
            except SystemError as e:
                anomalies += 1
                print(f"ANOMALY {a.seed} {index} {description} :: SystemError: {e}", flush=True)
            except Exception:
                pass
            del fn, args
            if index % 200 == 0:
                gc.collect()
        log.write(f"{a.seed} END {a.stop}\n")
        log.flush()
    print(f"DONE {a.stop - a.start} {anomalies}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
