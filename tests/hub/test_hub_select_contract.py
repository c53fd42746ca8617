"""The hub's matching rules as a contract (docs/hub.md, "Matching: which build loads here"),
through the public ``hub.select(name, source=<directory>, machine=...)``.

A build runs here when its ABI, OS and architecture are the machine's, its libc is the
process's and no newer (versions compared as versions, an equal one included), its ISA
level is one the CPU runs, and its GPU code (if any) has a driver at least its toolkit and
code for every visible device. Among those that run the best is the newest version, then
the newest ABI, then GPU code over none (the newer toolkit first), then the highest ISA.

The layouts here are index files only (``builds.json`` written as ``publish`` writes it):
``select`` reads descriptions, never the files, so no compiler is needed. The oracle below
is written from the docs, not from ``hub/_select.py``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import tempfile
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis not installed")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tensorplug import hub  # noqa: E402

NAME = "tp-contract/kern"
EXAMPLES = int(os.environ.get("TENSORPLUG_HYPOTHESIS_EXAMPLES", "100"))
BOUNDED = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                   suppress_health_check=[HealthCheck.too_slow])

LEVELS = {"x86_64": ["x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4"], "aarch64": ["armv8-a", "armv8.2-a", "armv9-a"]}
_serial = itertools.count()


def _build(**fields) -> dict:
    """An index entry (the fields publish writes), a fresh digest each."""
    base = dict(name=NAME, version="1.0.0", abi=1, os="linux", arch="x86_64", libc="glibc", libc_version="2.17",
                isa="x86-64", cuda=None, rocm=None, gpu_archs=[], functions=["f"])
    entry = {**base, **fields}
    serial = next(_serial)
    entry["sha256"] = hashlib.sha256(f"{serial}".encode()).hexdigest()
    gpu = f"-cuda{entry['cuda']}" if entry["cuda"] else f"-rocm{entry['rocm']}" if entry["rocm"] else ""
    entry["file"] = f"{entry['version']}/{entry['arch']}-{entry['isa']}{gpu}-{serial}/k.so"
    entry["size"] = 1000 + serial
    entry["gpu_archs"] = list(entry["gpu_archs"])
    return entry


def _layout(root: Path, builds: list[dict]) -> Path:
    (root / NAME).mkdir(parents=True, exist_ok=True)
    (root / "tensorplug-hub.json").write_text(json.dumps({"format": "tensorplug-hub/1", "libraries": [NAME]}))
    (root / NAME / "builds.json").write_text(json.dumps({"format": "tensorplug-hub/1", "name": NAME,
                                                         "builds": builds}))
    return root


def _machine(**fields) -> hub.Machine:
    base = dict(abi=1, os="linux", arch="x86_64", libc="glibc", libc_version="2.36", isa="x86-64-v4",
                gpus_probed=True)
    return hub.Machine(**{**base, **fields})


def _select(builds: list[dict], machine: hub.Machine):
    with tempfile.TemporaryDirectory() as tmp:
        return hub.select(NAME, source=_layout(Path(tmp), builds), machine=machine)


# ------------------------------------------------------------ the rows of issue 40 ----
def test_a_build_needing_exactly_this_glibc_runs_and_a_newer_one_does_not():
    same, newer = _build(libc_version="2.36", isa="x86-64-v2"), _build(libc_version="2.37", isa="x86-64-v3")
    selection = _select([same, newer], _machine(libc_version="2.36"))
    assert selection.chosen is not None and selection.chosen.sha256 == same["sha256"]
    verdicts = {c.build.sha256: (c.verdict, c.why) for c in selection.candidates}
    assert verdicts[same["sha256"]] == ("chosen", "the only build that runs here")
    assert verdicts[newer["sha256"]] == ("rejected", "needs glibc 2.37, this process has 2.36")


def test_glibc_versions_compare_as_versions_not_text():
    # "2.4" < "2.36" as versions (as text it is greater); "2.10" > "2.9".
    old = _build(libc_version="2.4")
    assert _select([old], _machine(libc_version="2.36")).chosen.sha256 == old["sha256"]
    ten = _build(libc_version="2.10")
    assert [c.why for c in _select([ten], _machine(libc_version="2.9")).candidates] == \
        ["needs glibc 2.10, this process has 2.9"]


def test_gpu_code_beats_a_higher_isa_level_without_it():
    gpu = _build(isa="x86-64", cuda="12.4", gpu_archs=["sm_80"])
    cpu = _build(isa="x86-64-v4")
    selection = _select([cpu, gpu], _machine(cuda="12.4", cuda_devices=("sm_80",)))
    assert selection.chosen.sha256 == gpu["sha256"]
    assert [(c.verdict, c.why) for c in selection.candidates] == [
        ("chosen", "the best build that runs here"),
        ("runs", "ranked below: no GPU code, the chosen build has some")]
    # Without a device the GPU build does not run, and the CPU build of the higher level wins.
    assert _select([cpu, gpu], _machine(cuda="12.4")).chosen.sha256 == cpu["sha256"]


def test_the_documented_order_version_abi_gpu_isa():
    m = _machine(abi=2, cuda="12.6", cuda_devices=("sm_90",))
    gpu_old_toolkit = _build(abi=2, cuda="12.0", gpu_archs=["sm_90"], isa="x86-64-v4")
    gpu_new_toolkit = _build(abi=2, cuda="12.4", gpu_archs=["sm_90"], isa="x86-64")
    assert _select([gpu_old_toolkit, gpu_new_toolkit], m).chosen.sha256 == gpu_new_toolkit["sha256"]
    abi1 = _build(abi=1, cuda="12.4", gpu_archs=["sm_90"], isa="x86-64-v4")
    abi2 = _build(abi=2, isa="x86-64")
    # a build of another ABI than the runtime's never runs, whatever it holds
    assert _select([abi1, abi2], m).chosen.sha256 == abi2["sha256"]
    newer = _build(version="1.10.0", abi=2, isa="x86-64")
    older = _build(version="1.9.0", abi=2, cuda="12.6", gpu_archs=["sm_90"], isa="x86-64-v4")
    assert _select([older, newer], m).chosen.sha256 == newer["sha256"]  # 1.10 > 1.9 as versions


def test_each_cuda_code_against_each_device():
    # docs/hub.md: sm_XY runs on devices of major X and minor >= Y (sm_90a, and the family
    # form sm_XYf, only on X.Y); compute_XY (PTX) on any device >= X.Y.
    codes = ["sm_80", "sm_86", "sm_87", "sm_90", "sm_90a", "sm_100", "sm_100a", "sm_100f", "sm_120",
             "compute_80", "compute_86", "compute_90", "compute_100"]
    devices = ["sm_75", "sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "sm_100", "sm_103", "sm_120", "sm_121"]
    entries = [_build(cuda="12.4", gpu_archs=[code]) for code in codes]
    for device in devices:
        selection = _select(entries, _machine(cuda="12.8", cuda_devices=(device,)))
        got = {c.build.gpu_archs[0]: c.verdict != "rejected" for c in selection.candidates}
        assert got == {code: _cuda_code_runs(code, device) for code in codes}, device
        for c in selection.candidates:
            if c.verdict == "rejected":
                assert c.why == f"holds CUDA 12.4 code ({c.build.gpu_archs[0]}); none for device {device}"
    # spot checks of the oracle itself, from the docs' words
    assert _cuda_code_runs("sm_86", "sm_89") and not _cuda_code_runs("sm_87", "sm_86")
    assert not _cuda_code_runs("sm_80", "sm_90") and not _cuda_code_runs("sm_90a", "sm_100")
    assert not _cuda_code_runs("sm_100a", "sm_103") and _cuda_code_runs("compute_80", "sm_120")


def test_each_rocm_target_against_each_device():
    # gfx targets match exactly; a feature suffix (":xnack+") does not change the target
    codes = ["gfx90a", "gfx90a:xnack+", "gfx942", "gfx1100"]
    entries = [_build(rocm="6.2", gpu_archs=[code]) for code in codes]
    for device in ["gfx908", "gfx90a", "gfx942", "gfx1030", "gfx1100"]:
        selection = _select(entries, _machine(rocm="6.2", rocm_devices=(device,)))
        got = {c.build.gpu_archs[0]: c.verdict != "rejected" for c in selection.candidates}
        assert got == {code: code.split(":")[0] == device for code in codes}, device


def test_another_abi_or_os_never_runs_either_way():
    # older or newer, before or after in any order: only the runtime's own ABI and OS run
    for build_abi, runtime_abi in ((1, 2), (2, 1)):
        assert [c.why for c in _select([_build(abi=build_abi)], _machine(abi=runtime_abi)).candidates] == \
            [f"built for tensorplug ABI {build_abi}, this runtime is ABI {runtime_abi}"]
    for build_os, machine_os in (("freebsd", "linux"), ("linux", "freebsd")):
        assert [c.why for c in _select([_build(os=build_os)], _machine(os=machine_os)).candidates] == \
            [f"built for {build_os}, this is {machine_os}"]
    aarch64 = _machine(arch="aarch64", isa="armv9-a")
    assert [c.why for c in _select([_build(arch="x86_64", isa="x86-64")], aarch64).candidates] == \
        ["built for x86_64, this machine is aarch64"]
    assert [c.why for c in _select([_build(arch="aarch64", isa="armv8-a")], _machine()).candidates] == \
        ["built for aarch64, this machine is x86_64"]


def test_the_reasons_a_build_is_rejected_or_ranked_below():
    m = _machine(libc=None, libc_version=None)
    assert [c.why for c in _select([_build()], m).candidates] == ["built for glibc, this process uses no known libc"]
    cpu_low, cpu_high = _build(isa="x86-64"), _build(isa="x86-64-v3")
    selection = _select([cpu_low, cpu_high], _machine())
    assert [(c.build.isa, c.why) for c in selection.candidates] == [
        ("x86-64-v3", "the best build that runs here"), ("x86-64", "ranked below: ISA x86-64 < x86-64-v3")]
    old, new = _build(cuda="12.0", gpu_archs=["sm_90"]), _build(cuda="12.4", gpu_archs=["sm_90"])
    selection = _select([old, new], _machine(cuda="12.4", cuda_devices=("sm_90",)))
    assert [c.why for c in selection.candidates] == ["the best build that runs here",
                                                     "ranked below: older GPU toolkit (12.0 < 12.4)"]
    assert [c.why for c in _select([new], _machine(cuda="12.2", cuda_devices=("sm_90",))).candidates] == \
        ["needs a CUDA 12.4 driver, this one supports 12.2"]


# ------------------------------------------------------------------- the oracle ----
def _vkey(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.split("."))


def _sm(text: str) -> tuple[int, int]:
    digits = text.split("_")[1].rstrip("af")
    return int(digits[:-1]), int(digits[-1])


def _cuda_code_runs(code: str, device: str) -> bool:
    have = _sm(device)
    want = _sm(code)
    if code.startswith("compute_"):
        return have >= want
    if code[-1] in "af":
        return have == want
    return have[0] == want[0] and have[1] >= want[1]


def _runs(b: dict, m: hub.Machine, version: str | None = None) -> bool:
    if version is not None and b["version"] != version:
        return False
    if b["abi"] != m.abi or b["os"] != m.os or b["arch"] != m.arch:
        return False
    levels = LEVELS[b["arch"]]
    if b["isa"] not in levels or levels.index(b["isa"]) > levels.index(m.isa):
        return False
    if b["libc"] is not None:
        if b["libc"] != m.libc:
            return False
        if b["libc_version"] and m.libc_version and _vkey(b["libc_version"]) > _vkey(m.libc_version):
            return False
    if b["cuda"]:
        if m.cuda is None or not m.cuda_devices or _vkey(b["cuda"]) > _vkey(m.cuda):
            return False
        if not all(any(_cuda_code_runs(c, d) for c in b["gpu_archs"]) for d in m.cuda_devices):
            return False
    if b["rocm"]:
        if m.rocm is None or not m.rocm_devices or _vkey(b["rocm"]) > _vkey(m.rocm):
            return False
        if not all(d in [c.split(":")[0] for c in b["gpu_archs"]] for d in m.rocm_devices):
            return False
    return True


def _order(b: dict) -> tuple:
    gpu = b["cuda"] or b["rocm"]
    return (_vkey(b["version"]), b["abi"], gpu is not None, _vkey(gpu) if gpu else (),
            LEVELS[b["arch"]].index(b["isa"]))


def _ranked_below(b: dict, best: dict) -> str | None:
    """The documented reason a running build ranks below the chosen one, by the first part
    of the order that differs (None when they rank equal)."""
    mine, theirs = _order(b), _order(best)
    if mine[0] != theirs[0]:
        return f"version {b['version']} < {best['version']}"
    if mine[1] != theirs[1]:
        return f"ABI {b['abi']} < {best['abi']}"
    if mine[2] != theirs[2]:
        return "no GPU code, the chosen build has some"
    if mine[3] != theirs[3]:
        return f"older GPU toolkit ({b['cuda'] or b['rocm']} < {best['cuda'] or best['rocm']})"
    if mine[4] != theirs[4]:
        return f"ISA {b['isa']} < {best['isa']}"
    return None


# ------------------------------------------------------------------ generators ----
VERSIONS = ["1.0.0", "1.2.0", "1.9.0", "1.10.0", "2.0"]
GLIBCS = ["2.4", "2.17", "2.9", "2.10", "2.35", "2.36"]
TOOLKITS = ["11.8", "12.0", "12.4", "12.10"]
SMS = ["sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"]
CUDA_CODES = SMS + ["sm_90a", "sm_100a", "sm_86f", "compute_80", "compute_90", "compute_120"]
GFX = ["gfx90a", "gfx942", "gfx1100"]
ROCMS = ["6.0", "6.2", "6.10"]


@st.composite
def machines(draw) -> hub.Machine:
    arch = draw(st.sampled_from(["x86_64", "x86_64", "aarch64"]))
    libc = draw(st.sampled_from(["glibc", "glibc", "musl"]))
    cuda = draw(st.sampled_from([None, "11.8", "12.4", "12.10", "13.0"]))
    rocm = draw(st.sampled_from([None, "6.2", "6.10"]))
    n_cuda, n_rocm = draw(st.sampled_from([0, 1, 1])), draw(st.sampled_from([0, 1, 1]))
    return _machine(abi=draw(st.sampled_from([1, 1, 2])), os=draw(st.sampled_from(["linux", "linux", "freebsd"])),
                    arch=arch, isa=draw(st.sampled_from(LEVELS[arch])),
                    libc=libc, libc_version=draw(st.sampled_from(GLIBCS)) if libc == "glibc" else None,
                    cuda=cuda, cuda_devices=tuple(draw(st.lists(st.sampled_from(SMS), min_size=n_cuda, max_size=2,
                                                                unique=True)))
                    if cuda else (),
                    rocm=rocm, rocm_devices=tuple(draw(st.lists(st.sampled_from(GFX), min_size=n_rocm, max_size=2,
                                                                unique=True)))
                    if rocm else ())


@st.composite
def builds(draw, m: hub.Machine) -> dict:
    """A build, mostly one that fits ``m`` but for one or two parts (so that many run and
    the order decides, and each rule is broken alone)."""
    near = draw(st.sampled_from([True, True, True, False]))
    arch = m.arch if near else draw(st.sampled_from(["x86_64", "aarch64"]))
    levels = LEVELS[arch]
    fits = levels[:levels.index(m.isa) + 1] if arch == m.arch and m.isa in levels else levels
    isa = draw(st.sampled_from(fits * 3 + levels + (["x86-64-v5"] if arch == "x86_64" else [])))
    gpu = draw(st.sampled_from([None, None, "cuda", "rocm"]))
    fields = dict(version=draw(st.sampled_from(VERSIONS)), abi=m.abi if near else draw(st.sampled_from([1, 2])),
                  os=m.os if near else draw(st.sampled_from(["linux", "freebsd"])), arch=arch, isa=isa,
                  libc=m.libc if near else draw(st.sampled_from(["glibc", "musl", None])))
    if fields["libc"] == "glibc":
        older = [v for v in GLIBCS if m.libc_version and _vkey(v) <= _vkey(m.libc_version)]
        fields["libc_version"] = draw(st.sampled_from(older * 2 + GLIBCS if older else GLIBCS))
    else:
        fields["libc_version"] = None
    if gpu == "cuda":
        toolkits = [t for t in TOOLKITS if m.cuda and _vkey(t) <= _vkey(m.cuda)]
        codes = list(m.cuda_devices) if near and draw(st.booleans()) else []
        codes += draw(st.lists(st.sampled_from(CUDA_CODES), min_size=0 if codes else 1, max_size=2))
        fields.update(cuda=draw(st.sampled_from(toolkits * 2 + TOOLKITS if toolkits else TOOLKITS)),
                      gpu_archs=list(dict.fromkeys(codes)))
    elif gpu == "rocm":
        codes = list(m.rocm_devices) if near and draw(st.booleans()) else []
        codes += draw(st.lists(st.sampled_from(GFX), min_size=0 if codes else 1, max_size=2))
        codes = [c + ":xnack+" if draw(st.booleans()) else c for c in dict.fromkeys(codes)]
        toolkits = [t for t in ROCMS if m.rocm and _vkey(t) <= _vkey(m.rocm)]
        fields.update(rocm=draw(st.sampled_from(toolkits * 2 + ROCMS if toolkits else ROCMS)), gpu_archs=codes)
    return _build(**fields)


@BOUNDED
@given(st.data())
def test_the_chosen_build_runs_here_and_no_better_one_does(data):
    machine = data.draw(machines(), "machine")
    entries = data.draw(st.lists(builds(machine), min_size=0, max_size=8), "builds")
    version = data.draw(st.sampled_from([None, None, None, *VERSIONS]), "version")
    with tempfile.TemporaryDirectory() as tmp:
        source = _layout(Path(tmp), entries)
        selection = hub.select(NAME, version, source=source, machine=machine)
        table = selection.table()
    by_digest = {e["sha256"]: e for e in entries}
    running = [e for e in entries if _runs(e, machine, version)]
    verdicts = {c.build.sha256: c.verdict for c in selection.candidates}
    assert set(verdicts) == set(by_digest)
    for digest, verdict in verdicts.items():  # every build judged by the documented rules
        assert (verdict != "rejected") == _runs(by_digest[digest], machine, version), \
            (by_digest[digest], machine, verdict)
    for c in selection.candidates:
        if c.verdict == "rejected" and version is not None and c.build.version != version:
            assert c.why == f"version {c.build.version}, asked for {version}"
    _check_table(table, selection, source, version)
    if not running:
        assert selection.chosen is None
        return
    chosen = by_digest[selection.chosen.sha256]
    assert _order(chosen) == max(_order(e) for e in running), (chosen, running)
    # the others that run follow, best first, each saying why it ranks below; then the rejected ones
    keys = [_order(by_digest[c.build.sha256]) for c in selection.candidates if c.verdict != "rejected"]
    assert keys == sorted(keys, reverse=True)
    assert [c.verdict for c in selection.candidates] == \
        ["chosen"] + ["runs"] * (len(running) - 1) + ["rejected"] * (len(entries) - len(running))
    assert selection.candidates[0].why == ("the only build that runs here" if len(running) == 1
                                           else "the best build that runs here")
    for c in selection.candidates[1:len(running)]:
        reason = _ranked_below(by_digest[c.build.sha256], chosen)
        if reason is not None:
            assert c.why == f"ranked below: {reason}"


def _check_table(table: str, selection, source: Path, version) -> None:
    """The table (docs/hub.md): a head naming the request, the sources and the machine, then
    one row per candidate in order, each ending with its verdict and reason."""
    lines = table.splitlines()
    request = f"version {version}" if version else "newest version"
    assert lines[0] == f"{NAME} ({request}) from {source}"
    assert lines[1] == f"this machine: {selection.machine.describe()}"
    if not selection.candidates:
        assert lines[2:] == ["no builds of this library in these sources"]
        return
    assert lines[2].split() == ["version", "abi", "platform", "libc", "isa", "gpu", "sha256", "verdict"]
    assert set(lines[3]) <= {"-", " "}
    assert len(lines) == 4 + len(selection.candidates)
    for line, c in zip(lines[4:], selection.candidates):
        b = c.build
        libc = f"{b.libc} {b.libc_version or ''}".strip() if b.libc else "-"
        gpu = (f"cuda {b.cuda}" if b.cuda else f"rocm {b.rocm}" if b.rocm else "-") + \
            (f" {','.join(b.gpu_archs)}" if b.gpu_archs else "")
        cells = [b.version, str(b.abi), f"{b.os} {b.arch}", libc, b.isa, gpu, b.sha256[:12]]
        assert line.split()[:2] == cells[:2] and line.endswith(f"{c.verdict}: {c.why}"), line
        for cell in cells:
            assert f" {cell} " in f" {line} ", (cell, line)
        assert b.sha256[:12] in line and b.sha256[:13] not in line
