"""The tensorplug fuzzer: feeds adversarial inputs to every parameter kind of a kernel library
built for it (tests/fuzz/kernels.cc) and reports every crash with the case that caused it.

    python tests/fuzz/run.py --calls 100000 --seed 1          # the long run (docs/reliability.md)
    python tests/fuzz/run.py --calls 3000 --seed 1 --jobs 2   # the short run (tests/fuzz/test_fuzz.py)
    python tests/fuzz/run.py --seed 1 --case 1234             # replay one case in the foreground

Workers (tests/fuzz/worker.py) run slices of the case range; each logs a case before
running it. When a worker dies, its log's last line names the case; the parent records the
crash, replays that case alone in a fresh process (to tell a crash of its own from damage
left by earlier cases), and restarts the worker after it. Exit status: 0 when no worker
crashed, hung or reported an anomaly, else 1.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
DEFAULT_FRAMEWORKS = "numpy,torch,jax,paddle"


def build_kernels() -> str:
    from tensorplug import cpp

    return cpp.build("fuzz_kernels", [HERE / "kernels.cc"])


def _status(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


def _headline(stderr: str) -> str:
    """The most telling line of a dead worker's stderr."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for marker in ("ERROR: AddressSanitizer", "runtime error:", "terminate called", "Fatal Python error",
                   "Segfault", "Abort"):
        for ln in lines:
            if marker in ln:
                return ln[:240]
    return lines[0][:240] if lines else "(no stderr)"


def _last_case(log: Path):
    """(index, line) of the last case the log names; index None after the END marker."""
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return None, ""
    for line in reversed(lines):
        parts = line.split(" ", 2)
        if len(parts) >= 2 and parts[1] == "END":
            return None, line
        if len(parts) >= 2 and parts[1].isdigit():
            return int(parts[1]), line
    return None, ""


def _worker_cmd(args, lib, start, stop, log):
    return [sys.executable, "-W", "ignore", str(HERE / "worker.py"), "--lib", lib, "--seed", str(args.seed),
            "--start", str(start), "--stop", str(stop), "--log", str(log), "--frameworks", args.frameworks]


def replay(args, lib, index, workdir) -> tuple[int, str]:
    """Runs case ``index`` alone in a fresh process; (returncode, stderr tail)."""
    log = Path(workdir) / f"replay_{index}.log"
    proc = subprocess.run(_worker_cmd(args, lib, index, index + 1, log), capture_output=True, text=True,
                          timeout=args.hang_timeout * 2)
    return proc.returncode, proc.stderr[-2000:]


class Slice:
    """A worker and the case range it still has to run."""

    def __init__(self, number, start, stop, workdir):
        self.number, self.next, self.stop = number, start, stop
        self.log = Path(workdir) / f"worker_{number}.log"
        self.err = Path(workdir) / f"worker_{number}.err"
        self.out = Path(workdir) / f"worker_{number}.out"  # a file, not a pipe: no blocking
        self.proc = None
        self.last_progress = time.monotonic()
        self.last_size = 0

    def start(self, args, lib):
        self.began = self.next  # first case of this process (an exit crash names the range)
        self.log.write_text("")
        self.err_file = open(self.err, "w")
        self.out_file = open(self.out, "w")
        self.proc = subprocess.Popen(_worker_cmd(args, lib, self.next, self.stop, self.log),
                                     stdout=self.out_file, stderr=self.err_file, text=True)
        self.last_progress, self.last_size = time.monotonic(), 0

    def finish(self) -> list[str]:
        """Closes the worker's files; the anomalies it reported."""
        self.err_file.close()
        self.out_file.close()
        found = [ln for ln in self.out.read_text(errors="replace").splitlines() if ln.startswith("ANOMALY")]
        for line in found:
            print(line, flush=True)
        return found


def fuzz(args) -> int:
    lib = build_kernels()
    workdir = tempfile.mkdtemp(prefix="tensorplug-fuzz-")
    if args.case is not None:
        code, err = replay(args, lib, args.case, workdir)
        print(Path(workdir, f"replay_{args.case}.log").read_text(), end="")
        sys.stderr.write(err)
        print(f"case {args.case}: {_status(code) if code else 'ok'}")
        return 0 if code == 0 else 1

    begin = time.monotonic()
    jobs = max(1, min(args.jobs, args.calls))
    bounds = [args.start + args.calls * j // jobs for j in range(jobs + 1)]
    slices = [Slice(j, bounds[j], bounds[j + 1], workdir) for j in range(jobs)]
    crashes, anomalies, hangs = [], [], []
    replayed = set()  # (kernel, status) keys already replayed alone
    for s in slices:
        s.start(args, lib)
    running = list(slices)
    while running:
        time.sleep(0.05)
        for s in list(running):
            code = s.proc.poll()
            if code is None:
                size = s.log.stat().st_size if s.log.exists() else 0
                if size != s.last_size:
                    s.last_size, s.last_progress = size, time.monotonic()
                elif time.monotonic() - s.last_progress > args.hang_timeout:
                    s.proc.kill()
                    s.proc.wait()
                    index, line = _last_case(s.log)
                    hangs.append((index, line))
                    print(f"HANG {line}", flush=True)
                    anomalies.extend(s.finish())
                    if index is None or index + 1 >= s.stop:
                        running.remove(s)
                    else:
                        s.next = index + 1
                        s.start(args, lib)
                continue
            anomalies.extend(s.finish())
            if code == 0:
                running.remove(s)
                continue
            index, line = _last_case(s.log)
            stderr = s.err.read_text(errors="replace")[-3000:]
            if index is None:  # every case ran: the process died on its way out
                crashes.append({"case": None, "line": f"at interpreter exit after cases {s.began}..{s.stop - 1}",
                                "range": (s.began, s.stop),
                                "status": _status(code), "stderr": stderr, "alone": None,
                                "key": ("<exit>", _status(code))})
                print(f"CRASH at exit of worker {s.number} ({_status(code)})", flush=True)
                running.remove(s)
                continue
            key = (line.split(" ", 2)[-1].split("(", 1)[0], _status(code))
            alone = None
            if args.replay and key not in replayed and len(replayed) < args.max_replays:
                replayed.add(key)
                alone_code, _ = replay(args, lib, index, workdir)
                alone = _status(alone_code) if alone_code else "passes alone"
            crashes.append({"case": index, "line": line, "status": _status(code), "stderr": stderr,
                            "alone": alone, "key": key})
            print(f"CRASH {line} ({_status(code)}; alone: {alone})", flush=True)
            if index + 1 >= s.stop:
                running.remove(s)
            else:
                s.next = index + 1
                s.start(args, lib)

    elapsed = time.monotonic() - begin
    print(f"\n{args.calls} cases, seed {args.seed}, {jobs} workers, {elapsed:.1f} s: "
          f"{len(crashes)} crashes, {len(hangs)} hangs, {len(anomalies)} anomalies")
    fw = "" if args.frameworks == DEFAULT_FRAMEWORKS else f" --frameworks {args.frameworks}"
    groups: dict = {}
    for c in crashes:
        groups.setdefault(c["key"], []).append(c)
    for (kernel, status), group in groups.items():
        first = group[0]
        print(f"  {kernel}: {status}, {len(group)} case(s); first: {first['line']}")
        if first["alone"] is not None:
            print(f"    replayed alone: {first['alone']}")
        print(f"    {_headline(first['stderr'])}")
        if first["case"] is not None:
            print(f"    replay: python tests/fuzz/run.py --seed {args.seed} --case {first['case']}{fw}")
        else:
            a, b = first["range"]
            print(f"    replay: python tests/fuzz/run.py --seed {args.seed} --start {a} --calls {b - a} --jobs 1{fw}")
    failed = bool(crashes or hangs or anomalies)
    if failed or args.keep_logs:
        print(f"logs: {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=3000, help="number of cases (calls)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--start", type=int, default=0, help="first case index")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    p.add_argument("--frameworks", default=DEFAULT_FRAMEWORKS,
                   help="comma-separated frameworks whose tensors are used (missing ones are skipped)")
    p.add_argument("--case", type=int, help="replay this one case in the foreground")
    p.add_argument("--no-replay", dest="replay", action="store_false",
                   help="do not replay crashing cases alone")
    p.add_argument("--max-replays", type=int, default=50)
    p.add_argument("--keep-logs", action="store_true", help="keep the case logs of a clean run too")
    p.add_argument("--hang-timeout", type=float, default=120.0, help="seconds without a new case")
    return fuzz(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
