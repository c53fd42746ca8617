"""The hub's matching rules at the inputs that tell a right rule from a slip (issue 40: the
survivors of the last 58 mutants of cosmic-ray's run on core/tensorplug/hub/_select.py,
docs/testing.md "Mutation testing with a tool"): versions ranked as versions in the reason
a build is ranked below, and a build listed twice is one candidate, the builds after it
still matched."""

from __future__ import annotations

import hashlib
import itertools
import json
import tempfile
from pathlib import Path

from tensorplug import hub

NAME = "tp-mutants/kern"
_serial = itertools.count()


def _build(**fields) -> dict:
    entry = {**dict(name=NAME, version="1.0.0", abi=1, os="linux", arch="x86_64", libc="glibc", libc_version="2.17",
                    isa="x86-64", cuda=None, rocm=None, gpu_archs=[], functions=["f"]), **fields}
    serial = next(_serial)
    entry.update(sha256=hashlib.sha256(f"mutants{serial}".encode()).hexdigest(), size=1000 + serial,
                 file=f"{entry['version']}/{entry['arch']}-{entry['isa']}-{serial}/k.so")
    return entry


def _select(builds: list[dict]):
    machine = hub.Machine(abi=1, os="linux", arch="x86_64", libc="glibc", libc_version="2.36", isa="x86-64-v4",
                          gpus_probed=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / NAME).mkdir(parents=True)
        (root / "tensorplug-hub.json").write_text(json.dumps({"format": "tensorplug-hub/1", "libraries": [NAME]}))
        (root / NAME / "builds.json").write_text(json.dumps({"format": "tensorplug-hub/1", "name": NAME,
                                                             "builds": builds}))
        return hub.select(NAME, source=root, machine=machine)


def test_a_build_ranked_below_names_the_versions_in_version_order():
    # 10.0.0 is newer than 9.0.0, though it sorts before it as text
    selection = _select([_build(version="9.0.0"), _build(version="10.0.0")])
    assert [(c.build.version, c.verdict) for c in selection.candidates] == [("10.0.0", "chosen"), ("9.0.0", "runs")]
    assert selection.candidates[1].why == "ranked below: version 9.0.0 < 10.0.0"


def test_a_build_listed_twice_is_one_candidate_and_the_next_is_still_matched():
    twice = _build(version="1.0.0")
    selection = _select([twice, twice, _build(version="2.0.0")])
    assert [c.build.version for c in selection.candidates] == ["2.0.0", "1.0.0"]
