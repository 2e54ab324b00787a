"""A scripted hostile HTTP server on loopback, for the Prometheus client's tests.

``HostileServer(case)`` listens on 127.0.0.1 at an ephemeral port (``socketserver.ThreadingTCPServer``); every
connection reads the request (bounded: 64 KiB, 5 s) and hands the raw socket to ``case(conn, request)``, which
writes whatever misbehaviour it scripts: a bad status line, HTTP/0.9, a truncated body, a stall, an endless body…
Cases that wait use :meth:`HostileServer.wait` (returns at once when the server stops) and every write checks
:attr:`HostileServer.stopping`, so ``stop()`` (or leaving the ``with`` block) ends every case promptly.
"""

from __future__ import annotations

import json
import socket
import socketserver
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any

Case = Callable[["Conn", bytes], None]


class Conn:
    """The accepted socket, with writes that give up quietly once the client has gone or the server stops."""

    def __init__(self, sock: socket.socket, server: HostileServer) -> None:
        self.sock = sock
        self.server = server
        self.sent = 0

    def send(self, data: bytes) -> bool:
        if self.server.stopping.is_set():
            return False
        try:
            self.sock.sendall(data)
        except OSError:  # the client refused the answer and closed: what the tests want
            return False
        self.sent += len(data)
        return True

    def wait(self, seconds: float) -> bool:
        """Sleep ``seconds`` unless the server stops first; True if it is still running."""
        return not self.server.stopping.wait(seconds)


class _Handler(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.settimeout(5.0)
        owner = self.server.owner
        if owner.tls is not None:
            try:
                sock = owner.tls.wrap_socket(sock, server_side=True)
            except OSError:  # the client refused the certificate: what a TLS test wants
                return
        req = b""
        try:
            while b"\r\n\r\n" not in req and len(req) < 65536:
                piece = sock.recv(65536)
                if not piece:
                    return
                req += piece
            head, _, body = req.partition(b"\r\n\r\n")
            n = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    n = int(line.split(b":", 1)[1])
            while len(body) < min(n, 1 << 20):
                piece = sock.recv(65536)
                if not piece:
                    break
                body += piece
        except OSError:
            return
        with owner.lock:
            owner.requests.append(head + b"\r\n\r\n" + body)
        sock.settimeout(None)
        try:
            owner.case(Conn(sock, owner), head + b"\r\n\r\n" + body)
        except OSError:
            pass


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    owner: HostileServer


class HostileServer:
    """Serves one scripted case on 127.0.0.1 (context manager; ``url`` once started)."""

    def __init__(self, case: Case, *, tls: ssl.SSLContext | None = None) -> None:
        """``tls``: a server-side context, to serve HTTPS (e.g. with a throwaway self-signed certificate)."""
        self.case = case
        self.tls = tls
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.requests: list[bytes] = []
        self._srv: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._srv is not None
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://127.0.0.1:{self._srv.server_address[1]}"

    def start(self) -> HostileServer:
        self._srv = _Server(("127.0.0.1", 0), _Handler)
        self._srv.owner = self
        self._thread = threading.Thread(
            target=self._srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        if self._srv is not None:
            self._srv.shutdown()
            self._srv.server_close()
            self._srv = None
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> HostileServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ---------------------------------------------------------------------------------------------- building blocks
def raw(data: bytes) -> Case:
    """Send ``data`` as it is, then close."""

    def case(c: Conn, req: bytes) -> None:
        c.send(data)

    return case


def answer(
    body: bytes | str | Any,
    *,
    status: str = "200 OK",
    headers: tuple[str, ...] = (),
    length: int | None = None,
) -> Case:
    """An HTTP/1.1 answer: ``body`` (JSON-encoded unless bytes/str), Content-Length ``length`` (default: true)."""
    if isinstance(body, str):
        data = body.encode()
    elif isinstance(body, bytes):
        data = body
    else:
        data = json.dumps(body).encode()
    n = len(data) if length is None else length
    head = "".join(f"{h}\r\n" for h in headers)
    msg = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {n}\r\n{head}Connection: close\r\n\r\n"
    return raw(msg.encode() + data)


def success(data: Any, **envelope: Any) -> dict[str, Any]:
    return {"status": "success", "data": data, **envelope}


def vector(*samples: tuple[dict[str, Any], Any, Any]) -> dict[str, Any]:
    """A vector answer from (labels, time, value) triples (values as given: the tests pass lies)."""
    return success(
        {"resultType": "vector", "result": [{"metric": m, "value": [t, v]} for m, t, v in samples]}
    )


def matrix(*series: tuple[dict[str, Any], list[list[Any]]]) -> dict[str, Any]:
    return success({"resultType": "matrix", "result": [{"metric": m, "values": v} for m, v in series]})


def stall(_c: Conn, _req: bytes) -> None:
    """Read the request, never answer (until the server stops)."""
    _c.wait(3600)


def trickle(prefix: bytes, drip: bytes, every_s: float) -> Case:
    """Send ``prefix``, then ``drip`` every ``every_s`` seconds for as long as the client listens."""

    def case(c: Conn, req: bytes) -> None:
        if not c.send(prefix):
            return
        while c.wait(every_s) and c.send(drip):
            pass

    return case


def endless(head: bytes, total_bytes: int, piece: bytes = b" " * (1 << 20)) -> Case:
    """Send ``head``, then ``piece`` again and again up to ``total_bytes`` (or until the client closes)."""

    def case(c: Conn, req: bytes) -> None:
        if not c.send(head):
            return
        while c.sent < total_bytes and c.send(piece):
            pass

    return case


def sequence(*cases: Case) -> Case:
    """The n-th connection gets the n-th case (the last one repeats)."""
    lock = threading.Lock()
    count = [0]

    def case(c: Conn, req: bytes) -> None:
        with lock:
            i = min(count[0], len(cases) - 1)
            count[0] += 1
        cases[i](c, req)

    return case


def slow(case: Case, delay_s: float) -> Case:
    """``case`` after ``delay_s`` seconds."""

    def wrapped(c: Conn, req: bytes) -> None:
        if c.wait(delay_s):
            case(c, req)

    return wrapped


def now() -> float:
    return time.time()


def proxy(upstream: str, edit: Callable[[str, Any], Any]) -> Case:
    """Forward each request to ``upstream`` (a real Prometheus) and answer with ``edit(path, answer)``: a lying
    middlebox over honest data. ``edit`` gets the request path and the parsed JSON answer and returns the JSON to
    send (or bytes, sent as they are)."""
    import urllib.error
    import urllib.request

    def case(c: Conn, req: bytes) -> None:
        head, _, body = req.partition(b"\r\n\r\n")
        method, target, _v = head.split(b"\r\n", 1)[0].decode().split(" ", 2)
        fwd = urllib.request.Request(
            upstream + target,
            data=body if method == "POST" else None,
            method=method,
            headers={"Content-Type": "application/x-www-form-urlencoded"} if method == "POST" else {},
        )
        try:
            with urllib.request.urlopen(fwd, timeout=60) as r:
                status, doc = "200 OK", json.loads(r.read())
        except urllib.error.HTTPError as e:
            status, doc = f"{e.code} {e.reason}", json.loads(e.read() or b"{}")
        out = edit(target.split("?", 1)[0], doc) if status.startswith("200") else doc
        answer(out, status=status)(c, req)

    return case
