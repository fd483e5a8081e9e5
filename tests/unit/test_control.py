"""The control channel's server, on this machine's loopback: bounded connections, strangers timed out,
malformed messages ignored without a traceback, and only an authenticated client's end changes anything."""
import json
import socket
import time

import pytest

from plt_bench import control


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setattr(control, "LOGIN_TIMEOUT_S", 2.0)
    closed = []
    token = control.new_token()
    srv = control.ControlServer("127.0.0.1", 0, token, {"echo": lambda **kw: {"echo": kw}},
                                on_close=lambda: closed.append(1)).start()
    yield srv, token, closed
    srv.close()


def _connect(srv):
    s = socket.create_connection(srv.server.server_address, timeout=5)
    return s, s.makefile("rwb")


def _wait(cond, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.01)
    return cond()


def test_connections_are_bounded_and_idle_strangers_are_dropped(server):
    srv, token, closed = server
    conns = [_connect(srv) for _ in range(control.MAX_CONNECTIONS + 4)]
    socks = [s for s, _ in conns]
    try:
        greeted = sum(bool(f.readline()) for _, f in conns)  # a refused one is closed without a nonce
        assert greeted == control.MAX_CONNECTIONS, greeted
        assert srv.open_connections <= control.MAX_CONNECTIONS
        # after the login timeout every stranger is gone, and a client gets in
        assert _wait(lambda: srv.open_connections == 0, 10)
        c = control.Control(*srv.server.server_address, token)
        assert c.call("echo", x=1) == {"echo": {"x": 1}}
        c.close()
        assert _wait(lambda: closed == [1])  # only the authenticated client's end is an ending
    finally:
        for s in socks:
            s.close()


@pytest.mark.parametrize("line", [b"[1, 2]\n", b"\"text\"\n", b"not json\n", b"5\n"])
def test_a_message_that_is_not_an_object_closes_the_connection_quietly(server, line, capfd):
    srv, token, closed = server
    s, f = _connect(srv)
    assert "nonce" in json.loads(f.readline())
    f.write(line)
    f.flush()
    assert f.readline() == b""  # closed, no answer
    s.close()
    assert _wait(lambda: srv.open_connections == 0)
    assert closed == [] and "Traceback" not in capfd.readouterr().err


def test_an_authenticated_client_sending_a_non_object_request_is_dropped_quietly(server, capfd):
    srv, token, closed = server
    c = control.Control(*srv.server.server_address, token)
    c.f.write(b"[\"op\"]\n")
    c.f.flush()
    assert c.f.readline() == b""
    c.close()
    assert _wait(lambda: closed == [1]) and "Traceback" not in capfd.readouterr().err
