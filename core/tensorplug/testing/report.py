"""The capability report: per adapter and capability, one status:

- ``FAILED``: a check failed;
- ``partial``: no check failed, but some were skipped for a reason other than a missing
  framework ("... not installed") or device ("no CUDA device", "needs two CUDA devices"):
  something the adapter should do was not checked;
- ``passed``: checks passed, and every skip was for a missing framework or device, or for
  something optional the adapter does not offer (a reason starting "not provided");
- ``skipped``: nothing ran, for a missing framework or device;
- ``not provided``: nothing ran because the adapter does not offer the capability (an
  optional one, such as ``compiler``).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

CAPABILITIES = ("exchange", "dtypes", "layouts", "read-only", "stream", "allocator", "output", "errors", "mixed",
                "lists", "ints", "compiler", "gradients")
NOT_PROVIDED = "not provided"  # the skip reason of an optional capability the adapter lacks


@dataclass
class Outcomes:
    passed: int = 0
    failed: list[str] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)

    @property
    def status(self) -> str:
        if self.failed:
            return "FAILED"
        if self.skipped and not self.passed and all(r.startswith(NOT_PROVIDED) for r in self.skipped):
            return NOT_PROVIDED
        if any(not is_missing(reason) for reason in self.skipped):
            return "partial"
        return "passed" if self.passed else "skipped"

    def details(self) -> str:
        parts = []
        if self.failed:
            parts.append(f"{len(self.failed)} failed: {', '.join(self.failed)}")
        if self.passed:
            parts.append(f"{self.passed} passed")
        if self.skipped:
            reasons = "; ".join(f"{reason} ({n})" if n > 1 else reason for reason, n in self.skipped.items())
            parts.append(f"{sum(self.skipped.values())} skipped: {reasons}")
        return ", ".join(parts)


class CapabilityReport:
    """A pytest plugin object: collects the reports of the conformance tests (items carrying
    the user properties ``tensorplug_capability`` and ``tensorplug_adapters``) and writes
    the table at the end of the run."""

    def __init__(self) -> None:
        self.results: dict[str, dict[str, Outcomes]] = defaultdict(lambda: defaultdict(Outcomes))

    def pytest_runtest_logreport(self, report) -> None:
        props = dict(report.user_properties)
        capability = props.get("tensorplug_capability")
        if capability is None:
            return
        test = report.nodeid.rpartition("::")[2]
        form = props.get("tensorplug_kernels", "tensorplug")
        for adapter in props.get("tensorplug_adapters", ()):
            row = adapter if form == "tensorplug" else f"{adapter} (the kit's {form} kernels)"
            outcomes = self.results[row][capability]
            if report.failed:
                outcomes.failed.append(test if report.when == "call" else f"{test} ({report.when})")
            elif report.skipped:
                outcomes.skipped[_skip_reason(report)] += 1
            elif report.when == "call":
                outcomes.passed += 1

    def pytest_terminal_summary(self, terminalreporter) -> None:
        terminal = terminalreporter
        if not self.results:
            return
        terminal.write_sep("=", "tensorplug capability report")
        width = max(len(c) for c in CAPABILITIES)
        for adapter, by_capability in self.results.items():
            terminal.write_line(adapter, bold=True)
            skips = {reason for o in by_capability.values() for reason in o.skipped}
            if all(o.status == "skipped" for o in by_capability.values()) and len(skips) == 1:
                terminal.write_line(f"  {'all':<{width}}  skipped  {skips.pop()}", yellow=True)
                continue
            order = [c for c in CAPABILITIES if c in by_capability] + sorted(set(by_capability) - set(CAPABILITIES))
            for capability in order:
                outcomes = by_capability[capability]
                color = {"FAILED": "red", "partial": "yellow", "passed": "green", "skipped": "yellow",
                         NOT_PROVIDED: "yellow"}[outcomes.status]
                terminal.write_line(f"  {capability:<{width}}  {outcomes.status:<7}  {outcomes.details()}",
                                    **{color: True})


def is_missing(reason: str) -> bool:
    """Whether a skip reason says a framework or a device is missing here, or that the
    adapter does not offer something optional (the only skips that leave a capability
    "passed")."""
    return (reason.endswith(" not installed") or reason.startswith("no CUDA device")
            or reason.startswith("needs two CUDA devices") or reason.startswith(NOT_PROVIDED))


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return reason.removeprefix("Skipped: ")
