"""Test services: a free loopback port, and a service that does not start fails with its log's tail."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from istar_tune.testing import MlflowServer, PostgresServer, ServiceError, _wait, free_port


def test_a_free_port_can_be_bound_on_loopback():
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_a_service_that_exits_fails_at_once_with_its_log(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("FATAL: could not bind")
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    with pytest.raises(ServiceError, match="server did not start within 30 s: FATAL: could not bind"):
        _wait(lambda: False, "server", 30, process, log)


def test_the_services_listen_on_loopback():
    assert MlflowServer(port=5999).uri == "http://127.0.0.1:5999"
    assert "@127.0.0.1:5998/mlflow" in PostgresServer(port=5998).url
