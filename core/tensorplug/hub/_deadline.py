"""The deadline a hub request is held to: one point in time every step of it is checked
against. Its own module so that the HTTP client (:mod:`._http`, imported only when an HTTP
source is used) and the sources (:mod:`._sources`) both read it without importing each
other."""

from __future__ import annotations

import time


class Deadline:
    """A point in time (``time.monotonic``) that every step of a request is checked against."""

    def __init__(self, seconds: float, what: str):
        self.at = time.monotonic() + seconds
        self.seconds = seconds
        self.what = what

    def left(self, url: str) -> float:
        left = self.at - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"GET {url}: {self.what} took longer than its {self.seconds:g} s deadline")
        return left
