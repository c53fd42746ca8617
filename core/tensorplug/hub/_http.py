"""HTTP(S) GETs for the hub, with the limits a misbehaving server cannot stretch.

``urllib`` bounds each socket read, not a request: a server that sends one byte a second
keeps a read alive for as long as it likes, and its redirect handler follows ``https`` to
``http``. Here one deadline covers connecting, the headers and the whole body; a redirect
may keep or raise the scheme, never drop it from https to http (the index is the trust
root, so it must come over the channel its URL names); bodies are bounded by the caller.
Imported only when an HTTP source is used (``import tensorplug.hub`` reaches no network).
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import urllib.parse

from ._deadline import Deadline

MAX_REDIRECTS = 5


def get(url: str, deadlines: list[Deadline], limit: int, sink=None) -> bytes | None:
    """The body of ``url`` (None for HTTP 404), at most ``limit`` bytes (one more is read,
    to tell a larger body; the caller refuses it), every step inside every deadline of
    ``deadlines``. With ``sink`` (a writable file) the body is written there and None is
    returned for 404, else b"". OSError (TimeoutError included) for anything else."""
    for _ in range(MAX_REDIRECTS + 1):
        parts = urllib.parse.urlsplit(url)
        left = min(d.left(url) for d in deadlines)
        if parts.scheme == "https":
            connection = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=left,
                                                     context=ssl.create_default_context())
        elif parts.scheme == "http":
            connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=left)
        else:
            raise OSError(f"GET {url}: expected an http:// or https:// URL")
        # The watchdog: a read blocked past the deadline (a server dripping the chunk headers of
        # a chunked body defeats per-read timeouts) is cut by shutting the socket down.
        held: list = []  # the socket, once connected (the connection drops it when the body owns it)
        watchdog = threading.Timer(left, _cut, (held,))
        watchdog.daemon = True
        watchdog.start()
        try:
            connection.connect()
            held.append(connection.sock)
            path = parts.path or "/"
            connection.request("GET", path + (f"?{parts.query}" if parts.query else ""),
                               headers={"User-Agent": "tensorplug-hub", "Accept-Encoding": "identity"})
            response = connection.getresponse()
            if response.status in (301, 302, 303, 307, 308):
                target = urllib.parse.urljoin(url, response.getheader("Location") or "")
                if parts.scheme == "https" and not target.startswith("https://"):
                    raise OSError(f"GET {url}: redirected to {target}, which would leave https: refused")
                url = target
                continue
            if response.status == 404:
                return None
            if response.status != 200:
                raise OSError(f"GET {url} failed: HTTP {response.status} {response.reason}")
            body = _read_body(response, held[0], url, deadlines, limit, sink)
            for d in deadlines:
                d.left(url)  # a body cut short by the watchdog is a timeout, not a short file
            return body
        except (http.client.HTTPException, ssl.SSLError, OSError) as exc:
            for d in deadlines:
                d.left(url)
            if isinstance(exc, OSError) and str(exc).startswith("GET "):
                raise
            raise OSError(f"GET {url} failed: {type(exc).__name__}: {exc}") from None
        finally:
            watchdog.cancel()
            connection.close()
    raise OSError(f"GET {url}: more than {MAX_REDIRECTS} redirects")


def _cut(held: list) -> None:
    for sock in held:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _read_body(response, sock, url: str, deadlines: list[Deadline], limit: int, sink) -> bytes:
    chunks = []
    left = limit + 1
    while left > 0:
        if response.isclosed():
            # The whole body is read: Python 3.13 closes the response (and the socket, whose
            # settimeout then fails with EBADF) as a read takes its last byte; 3.12 at the next read.
            break
        # Each read waits at most until the nearest deadline, and reads what has arrived.
        sock.settimeout(min(d.left(url) for d in deadlines))
        chunk = response.read1(min(left, 1 << 20))
        if not chunk:
            break
        left -= len(chunk)
        if sink is not None:
            sink.write(chunk)
        else:
            chunks.append(chunk)
    return b"".join(chunks)
