"""fused_kernels against the frameworks' own ops, side by side in one run.

    python benchmarks/bench_fused.py [--quick] [--threads N] [--plots docs/_static] [--markdown out.md]

Each fused kernel against the op sequence it replaces, in torch (eager) and jax (each
sequence under jax.jit, the fused op called as a jax op), at small-LLM sizes: hidden 1024,
2048, 4096 and batch 1, 8, 32. Then the decode step of the benchmark model
(fused_kernels.model.SMALL: hidden 1024, 4 layers, int8 weights) in numpy, torch eager and
jax.jit, with the framework's ops and with the fused ops. Timings are interleaved: every
round times each contender once (a burst of calls), and the median of the rounds is
reported, so that a slow moment of the shared machine hits all contenders alike.
With --plots it writes fused_kernels.png (time per kernel against size) and
fused_decode.png (where a decode step's time goes).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "fused_kernels"))
import develop  # noqa: E402

# numpy, fused_kernels and fused_kernels.timing (the decode step's measurement, shared with
# python -m fused_kernels.demo), imported by main() once the thread counts are set: numpy's
# BLAS, like the kernels' pool, reads its thread count when it loads.
np = fk = timing = None


def set_threads(n: int) -> None:
    """Every contender on ``n`` threads: the fused kernels' pool, numpy's BLAS, torch's
    intra-op threads (set_num_threads below) and XLA's CPU runtime. Set before numpy,
    fused_kernels and jax load (an earlier version imported numpy first, so its BLAS kept a
    thread per core: numpy's own-ops decode step measured 5x slower than the demo's)."""
    os.environ["FUSED_KERNELS_NUM_THREADS"] = str(n)
    os.environ["OMP_NUM_THREADS"] = str(n)
    os.environ["OPENBLAS_NUM_THREADS"] = str(n)
    if n == 1:
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false").strip()


def kernel_cases(hidden: int, batch: int, rng):
    """(kernel name, numpy inputs, the fused call, the torch sequence, the jax sequence)."""
    import jax
    import jax.numpy as jnp
    import torch
    import torch.nn.functional as F

    from fused_kernels import model

    x = rng.standard_normal((batch, hidden)).astype(np.float32)
    r = rng.standard_normal((batch, hidden)).astype(np.float32)
    w = (1 + 0.1 * rng.standard_normal(hidden)).astype(np.float32)
    gu = rng.standard_normal((batch, 2 * 2816 * hidden // 1024)).astype(np.float32)
    heads, kv, d = hidden // 64, max(1, hidden // 256), 64
    q = rng.standard_normal((batch, heads, d)).astype(np.float32)
    k = rng.standard_normal((batch, kv, d)).astype(np.float32)
    cos_sin = model.cos_sin_cache(model.Config(head_dim=d, max_positions=256))
    positions = np.full(batch, 100, np.int64)
    scores = rng.standard_normal((batch, heads, 256)).astype(np.float32)
    qw, sw = fk.quantize_int8(rng.standard_normal((hidden, hidden)).astype(np.float32))
    logits = rng.standard_normal((batch, 32000)).astype(np.float32)
    t = {n: torch.from_numpy(a) for n, a in dict(x=x, r=r, w=w, gu=gu, q=q, k=k, cs=cos_sin, pos=positions,
                                                   s=scores, qw=qw, sw=sw, logits=logits).items()}
    j = {n: jnp.asarray(v.numpy()) for n, v in t.items() if n != "pos"}
    j["pos"] = jnp.asarray(positions.astype(np.int32))
    half = d // 2

    def torch_rotary(q, k):
        cs = t["cs"][t["pos"]][:, None]
        cos, sin = cs[..., :half], cs[..., half:]
        for v in (q, k):
            x1, x2 = v[..., :half], v[..., half:]
            v.copy_(torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1))

    @jax.jit
    def jax_rotary(pos, q, k, cs):
        c = cs[pos][:, None]
        cos, sin = c[..., :half], c[..., half:]
        rot = lambda v: jnp.concatenate([v[..., :half] * cos - v[..., half:] * sin,  # noqa: E731
                                         v[..., half:] * cos + v[..., :half] * sin], -1)
        return rot(q), rot(k)

    jit_rms = jax.jit(lambda x, w: x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-5) * w)
    jit_add_rms = jax.jit(lambda x, r, w: (lambda h: (jit_rms(h, w), h))(x + r))
    jit_silu = jax.jit(lambda v: (lambda a, b: jax.nn.silu(a) * b)(*jnp.split(v, 2, -1)))
    jit_softmax = jax.jit(lambda v: jax.nn.softmax(v, -1))
    jit_linear = jax.jit(lambda x, q, s: (x @ q.astype(jnp.float32).T) * s)
    jit_argmax = jax.jit(lambda v: jnp.argmax(v, -1))
    block = lambda f: (lambda: jax.block_until_ready(f()))  # noqa: E731

    return [
        ("rms_norm", lambda: fk.rms_norm(t["x"], t["w"], 1e-5),
         lambda: F.rms_norm(t["x"], (hidden,), t["w"], 1e-5),
         block(lambda: fk.rms_norm(j["x"], j["w"], 1e-5)), block(lambda: jit_rms(j["x"], j["w"]))),
        ("add_rms_norm", lambda: fk.add_rms_norm(t["x"], t["r"], t["w"], 1e-5),
         lambda: (F.rms_norm(t["x"] + t["r"], (hidden,), t["w"], 1e-5)),
         block(lambda: fk.add_rms_norm(j["x"], j["r"], j["w"], 1e-5)), block(lambda: jit_add_rms(j["x"], j["r"], j["w"]))),
        ("rotary_embedding", lambda: fk.rotary_embedding(t["pos"], t["q"], t["k"], t["cs"]),
         lambda: torch_rotary(t["q"], t["k"]),
         block(lambda: fk.rotary_embedding(j["pos"], j["q"], j["k"], j["cs"])),
         block(lambda: jax_rotary(j["pos"], j["q"], j["k"], j["cs"]))),
        ("silu_and_mul", lambda: fk.silu_and_mul(t["gu"]),
         lambda: (lambda a, b: F.silu(a) * b)(*t["gu"].chunk(2, -1)),
         block(lambda: fk.silu_and_mul(j["gu"])), block(lambda: jit_silu(j["gu"]))),
        ("softmax", lambda: fk.softmax(t["s"]), lambda: torch.softmax(t["s"], -1),
         block(lambda: fk.softmax(j["s"])), block(lambda: jit_softmax(j["s"]))),
        ("int8_matmul", lambda: fk.int8_matmul(t["x"], t["qw"], t["sw"]),
         lambda: (t["x"] @ t["qw"].float().T) * t["sw"],
         block(lambda: fk.int8_matmul(j["x"], j["qw"], j["sw"])), block(lambda: jit_linear(j["x"], j["qw"], j["sw"]))),
        ("sample_greedy", lambda: fk.sample_greedy(t["logits"]), lambda: t["logits"].argmax(-1),
         block(lambda: fk.sample_greedy(j["logits"])), block(lambda: jit_argmax(j["logits"]))),
    ]


def bench_kernels(hiddens, batches, rounds):
    rng = np.random.default_rng(0)
    rows = []
    for hidden in hiddens:
        for batch in batches:
            for name, fused_t, torch_t, fused_j, jax_j in kernel_cases(hidden, batch, rng):
                times = timing.interleaved({"fused/torch": fused_t, "torch": torch_t, "fused/jax": fused_j,
                                     "jax.jit": jax_j}, rounds)
                rows.append((name, hidden, batch, times))
                print(f"{name:17s} hidden {hidden:5d} batch {batch:3d}  " + "  ".join(
                    f"{k} {v * 1e6:8.1f} us" for k, v in times.items()), flush=True)
    return rows


def bench_decode(batch, rounds):
    """The decode step of every framework, own ops and fused, measured by fused_kernels.timing
    (python -m fused_kernels.demo measures it the same way)."""
    import torch

    from fused_kernels import model

    config = model.SMALL
    weights = model.random_weights(config)
    runs = [(f, fused) for f in timing.FRAMEWORKS for fused in (False, True)]
    by_run = timing.decode_step_times(runs, config, weights, batch, rounds)
    times = {(f"fused/{f}" if fused else f): t for (f, fused), t in by_run.items()}
    for k, v in times.items():
        print(f"decode step (batch {batch}) {k:20s} {v * 1e3:8.2f} ms", flush=True)
    # The tensorplug call's share: a fused op on a tiny tensor is all call (no work), times
    # the number of op calls in one step.
    tiny = np.ones((1, 8), np.float32)
    w8 = np.ones(8, np.float32)
    per_call = {
        "numpy": timing.interleaved({"c": lambda: fk.rms_norm(tiny, w8, 1e-5)}, rounds)["c"],
        "torch": timing.interleaved({"c": lambda: fk.rms_norm(torch.from_numpy(tiny), torch.from_numpy(w8), 1e-5)},
                             rounds)["c"],
    }
    # Fused op calls per step: per layer 2 norms, rotary, softmax, silu_and_mul and 4 linears;
    # then the final norm and the LM head.
    calls = config.layers * (2 + 1 + 1 + 1 + 4) + 2
    return times, per_call, calls


def markdown(rows, decode, batch, load, threads: str) -> str:
    """The tables. Speedup: the framework's time over the fused op's, from the same
    interleaved rounds (above 1: the fused op is faster); it holds up better than the
    absolute times on a shared machine."""
    times, per_call, calls = decode
    out = [f"Load average (1 min) of the machine: {load[0]:.1f} at the start, {load[1]:.1f} at the end "
           f"({os.cpu_count()} cores, shared with other work); {threads} ({timing.threads()}); "
           f"fused_kernels for {fk.isa}.", "",
           "Kernels: each against the sequence it replaces, the median of the interleaved rounds. Decode step: "
           f"{timing.method(batch)}.", "",
           "| kernel | hidden | batch | fused (torch) | torch | speedup | fused (jax) | jax.jit | speedup |",
           "|---|---|---|---|---|---|---|---|---|"]
    for name, hidden, b, t in rows:
        out.append(f"| {name} | {hidden} | {b} | {t['fused/torch'] * 1e6:.1f} us | {t['torch'] * 1e6:.1f} us | "
                   f"{t['torch'] / t['fused/torch']:.2f}x | {t['fused/jax'] * 1e6:.1f} us | "
                   f"{t['jax.jit'] * 1e6:.1f} us | {t['jax.jit'] / t['fused/jax']:.2f}x |")
    out += ["", f"| decode step, batch {batch} | own ops | fused_kernels ops | speedup |", "|---|---|---|---|"]
    for framework in ("numpy", "torch", "torch.compile", "jax.jit"):
        own, fused = times[framework], times[f"fused/{framework}"]
        out.append(f"| {framework} | {own * 1e3:.2f} ms | {fused * 1e3:.2f} ms | {own / fused:.2f}x |")
    out += ["", f"tensorplug's call: {per_call['numpy'] * 1e6:.1f} us (numpy), {per_call['torch'] * 1e6:.1f} us "
                f"(torch) per op; {calls} fused op calls per step."]
    return "\n".join(out) + "\n"


def plot(rows, decode, batch, directory: Path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, NullFormatter

    plt.rcParams.update({"font.size": 13, "axes.titlesize": 14})
    directory.mkdir(parents=True, exist_ok=True)
    # One subplot per kernel, two to a row, so that each is read at half the page's width
    # (a 2x4 grid shrank every label to a few pixels on the site); one legend above all.
    names = list(dict.fromkeys(r[0] for r in rows))
    cols = 2
    nrows = (len(names) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(10, 3.3 * nrows + 0.8), squeeze=False)
    styles = (("fused/torch", "o-", "#2a7", "fused op, torch"), ("torch", "o--", "#888", "torch's own ops"),
              ("fused/jax", "s-", "#26b", "fused op, jax (eager call)"), ("jax.jit", "s--", "#c73", "jax.jit's own ops"))
    biggest = max(r[2] for r in rows)
    for ax, name in zip(axes.flat, names):
        sel = [r for r in rows if r[0] == name and r[2] == biggest]
        hidden = [r[1] for r in sel]
        for key, style, colour, label in styles:
            ax.plot(hidden, [r[3][key] * 1e6 for r in sel], style, color=colour, label=label, linewidth=2,
                    markersize=7)
        ax.set_title(name)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(hidden, [str(h) for h in hidden])
        ax.set_ylabel("us per call")
        ax.set_xlabel("hidden size")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.grid(True, which="major", alpha=0.3)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=2, frameon=False,
               title=f"time per call at batch {biggest} (log scale; lower is faster)")
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.85 / fig.get_figheight()))
    fig.savefig(directory / "fused_kernels.png", dpi=100)
    plt.close(fig)

    # The decode step: own ops and fused ops side by side per framework, each bar labelled
    # with its time, the speedup at the right; the tensorplug calls' share is too small to
    # draw as a bar (under 1 ms of a step), so the axis label states it.
    times, per_call, calls = decode
    frameworks = [f for f in timing.FRAMEWORKS if f in times]
    fig, ax = plt.subplots(figsize=(9, 4.6))
    y = list(range(len(frameworks)))
    own = [times[f] * 1e3 for f in frameworks]
    fused = [times[f"fused/{f}"] * 1e3 for f in frameworks]
    ax.barh([v - 0.2 for v in y], own, height=0.38, color="#999", label="framework's own ops")
    ax.barh([v + 0.2 for v in y], fused, height=0.38, color="#2a7", label="fused_kernels ops")
    right = max(own + fused)
    for v, o, f in zip(y, own, fused):
        ax.text(o + right * 0.01, v - 0.2, f"{o:.1f} ms", va="center", fontsize=11)
        ax.text(f + right * 0.01, v + 0.2, f"{f:.1f} ms  ({o / f:.1f}x faster)", va="center", fontsize=11,
                fontweight="bold")
    ax.set_yticks(y, frameworks)
    ax.invert_yaxis()
    ax.set_xlim(0, right * 1.45)
    share = max(per_call.values()) * calls * 1e3
    ax.set_xlabel(f"ms per decode step (batch {batch}, hidden 1024, 4 layers, int8);\n"
                  f"tensorplug's {calls} calls take under {share:.1f} ms of a fused step")
    ax.legend(loc="lower right", frameon=False)
    fig.tight_layout()
    fig.savefig(directory / "fused_decode.png", dpi=100)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one size and few rounds (a smoke run)")
    parser.add_argument("--plots", type=Path, help="directory for the PNG figures")
    parser.add_argument("--markdown", type=Path, help="write the tables as Markdown here")
    parser.add_argument("--threads", type=int, help="threads of every contender (default: each library's "
                        "own choice); 1 gives steady numbers on a machine shared with other work, where a "
                        "pool's descheduled worker stalls the call that waits for it")
    args = parser.parse_args(argv)
    global np, fk, timing
    if args.threads:
        set_threads(args.threads)
    import numpy
    np = numpy
    fk = develop.import_fused_kernels()
    from fused_kernels import timing as fused_timing
    timing = fused_timing
    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    start = time.perf_counter()
    load_start = os.getloadavg()[0]
    print(f"fused_kernels {fk.isa}, {fk.num_threads} threads; load average {load_start:.1f}", flush=True)
    threads = f"{args.threads} thread(s) each" if args.threads else "each library's default threads"
    if args.quick:
        rows = bench_kernels([1024], [1, 8], rounds=3)
        decode = bench_decode(batch=1, rounds=2)
    else:
        rows = bench_kernels([1024, 2048, 4096], [1, 8, 32], rounds=5)
        decode = bench_decode(batch=1, rounds=5)
    load = (load_start, os.getloadavg()[0])
    text = markdown(rows, decode, 1, load, threads)
    if args.markdown:
        args.markdown.write_text(text)
    if args.plots:
        plot(rows, decode, 1, args.plots)
    print(f"total {time.perf_counter() - start:.0f} s; load average {load[1]:.1f}")


if __name__ == "__main__":
    main()
