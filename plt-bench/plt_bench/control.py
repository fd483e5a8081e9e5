"""The control channel between `plt-bench serve` and a client on another machine.

One TCP connection, JSON lines. It carries what only the server can tell: its pages, Caddy's
CPU time, the access-log entry that proves which protocol served a trial, and an iperf3 server
for the link check. It carries no test traffic and is never shaped.

Authentication: `serve` draws a random token and prints it; the client proves it knows the
token by answering a fresh challenge with HMAC-SHA256(token, nonce), so the token itself never
crosses the wire. The channel changes nothing on the server but its own iperf3.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import socket
import socketserver
import threading

from .errors import ServerError, UsageError

SERVER_PORT_DEFAULT_CONTROL = 4443

MAX_LINE = 1 << 20
# At most this many connections at once (a client needs one; more are refused at once), and an
# unauthenticated one has this long to log in: 3,000 idle connections once held 3,005 threads.
MAX_CONNECTIONS = 8
LOGIN_TIMEOUT_S = 10.0
IDLE_TIMEOUT_S = 600.0
TOKEN_RE = re.compile(r"^[0-9a-f]{64}$")


def new_token() -> str:
    return secrets.token_hex(32)


def check_token(text: str, option: str = "--server-token") -> str:
    if not TOKEN_RE.match(text or ""):
        raise UsageError(f"{option}: expected the 64 hex digits 'plt-bench serve' printed (token: ...)")
    return text


def answer_for(token: str, nonce: str) -> str:
    return hmac.new(bytes.fromhex(token), bytes.fromhex(nonce), hashlib.sha256).hexdigest()


def _send(f, obj: dict) -> None:
    f.write((json.dumps(obj) + "\n").encode())
    f.flush()


def _recv(f) -> dict | None:
    line = f.readline(MAX_LINE)
    if not line:
        return None
    if not line.endswith(b"\n"):
        raise ValueError("line too long")
    obj = json.loads(line)
    if not isinstance(obj, dict):
        raise ValueError("a control message is a JSON object")
    return obj


class ControlServer:
    """Serves `ops` ({name: callable(**args) -> dict}) to clients that know the token, one at a time."""

    def __init__(self, addr: str, port: int, token: str, ops: dict, on_close=None):
        self.token, self.ops, self.on_close = token, ops, on_close
        self.lock = threading.Lock()  # one client's request at a time: the access log is read once
        self.open_connections = 0
        self._count = threading.Lock()
        outer = self

        class Handler(socketserver.StreamRequestHandler):
            timeout = LOGIN_TIMEOUT_S

            def handle(self):
                outer._handle(self.rfile, self.wfile, self.connection)

            def finish(self):
                try:
                    super().finish()
                except OSError:
                    pass
                finally:
                    with outer._count:
                        outer.open_connections -= 1

        class TCPServer(socketserver.ThreadingTCPServer):
            allow_reuse_address = True
            daemon_threads = True

            def verify_request(self, request, client_address):
                with outer._count:
                    if outer.open_connections >= MAX_CONNECTIONS:
                        return False  # closed at once, no thread
                    outer.open_connections += 1
                    return True

            def handle_error(self, request, client_address):  # never a traceback on the console
                pass

        try:
            self.server = TCPServer((addr, port), Handler)
        except OSError as e:
            raise UsageError(f"--control-port: cannot listen on {addr}:{port}: {e.strerror}") from None
        self.thread = threading.Thread(target=self.server.serve_forever, name="control", daemon=True)

    def start(self) -> "ControlServer":
        self.thread.start()
        return self

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handle(self, rfile, wfile, conn=None) -> None:
        nonce = secrets.token_hex(16)
        authenticated = False
        try:
            _send(wfile, {"nonce": nonce})
            auth = _recv(rfile)
            if not auth or not hmac.compare_digest(str(auth.get("mac", "")), answer_for(self.token, nonce)):
                _send(wfile, {"error": "authentication failed: wrong token"})
                return
            authenticated = True
            if conn is not None:
                conn.settimeout(IDLE_TIMEOUT_S)
            _send(wfile, {"ok": True})
            while (req := _recv(rfile)) is not None:
                op = self.ops.get(req.get("op"))
                if op is None:
                    _send(wfile, {"error": f"unknown operation {req.get('op')!r}"})
                    continue
                try:
                    with self.lock:
                        _send(wfile, {"ok": True, **op(**(req.get("args") or {}))})
                except Exception as e:  # the client gets the message; the server goes on
                    _send(wfile, {"error": f"{type(e).__name__}: {e}"})
        except (OSError, ValueError):
            return
        finally:
            if self.on_close and authenticated:  # a stranger's connection ending changes nothing
                self.on_close()


class Control:
    """The client's end."""

    def __init__(self, addr: str, port: int, token: str, timeout_s: float = 10.0):
        self.where = f"{addr}:{port}"
        try:
            self.sock = socket.create_connection((addr, port), timeout=timeout_s)
        except OSError as e:
            raise ServerError(f"--server-machine: cannot reach plt-bench serve's control channel at {self.where}: "
                              f"{e.strerror or e}. Is 'plt-bench serve --addr {addr}' running there?") from None
        self.f = self.sock.makefile("rwb")
        try:
            hello = _recv(self.f) or {}
            _send(self.f, {"mac": answer_for(token, hello.get("nonce", ""))})
            ok = _recv(self.f) or {}
        except (OSError, ValueError) as e:
            raise ServerError(f"--server-machine: the control channel at {self.where} broke during login: {e}") from None
        if not ok.get("ok"):
            self.close()
            raise UsageError(f"--server-token: the server at {self.where} refused it ({ok.get('error', 'no answer')}); "
                             "copy the token 'plt-bench serve' printed")

    def call(self, op: str, timeout_s: float = 60.0, **args) -> dict:
        try:
            self.sock.settimeout(timeout_s)
            _send(self.f, {"op": op, "args": args})
            ans = _recv(self.f)
        except (OSError, ValueError) as e:
            raise ServerError(f"control channel to {self.where} broke ({op}): {e}") from None
        if ans is None:
            raise ServerError(f"control channel to {self.where} closed ({op}): did 'plt-bench serve' stop?")
        if "error" in ans:
            raise ServerError(f"the server at {self.where} could not {op}: {ans['error']}")
        ans.pop("ok", None)
        return ans

    def close(self) -> None:
        try:
            self.f.close()
            self.sock.close()
        except OSError:
            pass
