"""Worker processes for the sharding tests: started with a free 127.0.0.1 port, bounded by
a timeout, and killed (each by its own pid) when they overrun."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def free_port() -> int:
    """A TCP port on 127.0.0.1 the OS has just handed out (closed again for the workers to bind)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_workers(script: str, arg_lists: list[list[str]], out_dir: Path, timeout: float = 240) -> list[dict]:
    """Run ``python tests/<script> *args OUT`` once per item of ``arg_lists``, at the same
    time, and return each one's JSON record; every failed process's output is shown, with
    the Python stack of each of its threads where it died of a signal (faulthandler)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])),
               PYTHONFAULTHANDLER="1")
    procs, outs, logs = [], [], []
    try:
        for i, args in enumerate(arg_lists):
            out, log = out_dir / f"record{i}.json", out_dir / f"log{i}.txt"
            outs.append(out)
            logs.append(log)
            with open(log, "w") as stream:
                procs.append(subprocess.Popen([sys.executable, str(HERE / script), *args, str(out)], cwd=HERE,
                                              env=env, stdout=stream, stderr=subprocess.STDOUT))
        for proc in procs:
            proc.wait(timeout=timeout)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    failed = [f"{script} {' '.join(args)} exited {proc.returncode}:\n{log.read_text()[-6000:]}"
              for proc, out, log, args in zip(procs, outs, logs, arg_lists) if proc.returncode != 0 or not out.exists()]
    assert not failed, "\n\n".join(failed)
    records = []
    for out in outs:
        record = json.loads(out.read_text())
        assert "crash" not in record, record["crash"]
        records.append(record)
    return records
