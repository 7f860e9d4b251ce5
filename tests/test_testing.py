"""Test services: a free loopback port, and a service that does not start fails with its log's tail."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from istar_tune.testing import MlflowServer, PostgresServer, ServiceError, _wait, free_port


def test_a_free_port_is_one_no_socket_holds():
    """While the first port is held, the next is another one, and it binds too."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", free_port()))
        held.listen()
        port = free_port()
        assert port != held.getsockname()[1]
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_a_service_that_exits_fails_at_once_with_its_log(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("FATAL: could not bind")
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    with pytest.raises(ServiceError, match="server did not start within 30 s: FATAL: could not bind"):
        _wait(lambda: False, "server", 30, process, log)


def _listening(pid: int) -> set[tuple[str, int]]:
    """The addresses a process and its children listen on."""
    import psutil

    parent = psutil.Process(pid)
    found = set()
    for process in [parent, *parent.children(recursive=True)]:
        try:
            found |= {(c.laddr.ip, c.laddr.port) for c in process.net_connections(kind="inet")
                      if c.status == psutil.CONN_LISTEN}
        except psutil.NoSuchProcess:
            continue
    return found


@pytest.mark.slow
def test_a_started_mlflow_server_listens_on_loopback_only():
    with MlflowServer() as server:
        listening = _listening(server.process.pid)
        assert (("127.0.0.1", server.port)) in listening
        assert all(ip == "127.0.0.1" for ip, _ in listening), listening
    assert server.uri.startswith("http://127.0.0.1:") and "@127.0.0.1:" in PostgresServer(port=5998).url
