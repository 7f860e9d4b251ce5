"""Local services for rehearsals and tests: a PostgreSQL server and an MLflow tracking server on 127.0.0.1.

Both are context managers that start the real programs in a temporary folder, wait until they answer, and stop
them (and remove what they wrote) on exit. PostgreSQL refuses to run as root, so as root it runs as the
``postgres`` system user.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from istar_tune.errors import IstarTuneError


class ServiceError(IstarTuneError):
    """A local service could not be started."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait(check, what: str, timeout: float, process: subprocess.Popen | None = None, log: Path | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            break
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.2)
    tail = log.read_text(errors="replace")[-2000:] if log and log.is_file() else ""
    raise ServiceError(f"{what} did not start within {timeout:.0f} s{': ' + tail if tail else ''}")


class PostgresServer:
    """``initdb`` + ``pg_ctl start`` on 127.0.0.1:``port``, one database ``name``; ``url`` for SQLAlchemy."""

    def __init__(self, name: str = "mlflow", port: int | None = None, bin_dir: str | None = None):
        self.name = name
        self.port = port or free_port()
        self.bin_dir = bin_dir
        self.root: Path | None = None
        self.user = "postgres" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name

    @property
    def url(self) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{self.name}"

    def _tool(self, name: str) -> str:
        found = shutil.which(name, path=self.bin_dir) if self.bin_dir else shutil.which(name)
        if not found:
            raise ServiceError(f"{name} not found: install PostgreSQL (Debian: apt-get install postgresql) or put "
                               "its bin folder on PATH")
        return found

    def _run(self, *command: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        done = subprocess.run([*prefix, *command], capture_output=True, text=True)
        if done.returncode != 0:
            raise ServiceError(f"{' '.join(command[:2])} failed: {(done.stderr or done.stdout).strip()[-500:]}")

    def __enter__(self) -> PostgresServer:
        self.root = Path(tempfile.mkdtemp(prefix="istar-pg-"))
        data, sock = self.root / "data", self.root / "socket"
        sock.mkdir()
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres")
            shutil.chown(sock, "postgres")
        self._run(self._tool("initdb"), "-D", str(data), "-U", self.user, "--auth=trust", "-E", "UTF8")
        self._run(self._tool("pg_ctl"), "-D", str(data), "-l", str(self.root / "server.log"), "-w", "-t", "60",
                  "-o", f"-h 127.0.0.1 -p {self.port} -k {sock} -c max_connections=200 -c fsync=off", "start")
        self._run(self._tool("psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user, "-d", "postgres",
                  "-c", f'CREATE DATABASE "{self.name}"')
        return self

    def __exit__(self, *exc) -> None:
        if self.root is None:
            return
        try:
            self._run(self._tool("pg_ctl"), "-D", str(self.root / "data"), "-m", "fast", "-w", "stop")
        except ServiceError:
            pass
        shutil.rmtree(self.root, ignore_errors=True)


class MlflowServer:
    """``mlflow server`` on ``host`` (127.0.0.1, or an address other machines of a test's network reach) and
    ``port`` over ``backend`` (default: a sqlite file), serving artifacts through the server (``--serve-artifacts``);
    ``uri`` is its tracking URI. :meth:`stop` and :meth:`start` let a test take it away for a while."""

    def __init__(self, backend: str | None = None, port: int | None = None, workers: int = 1, host: str = "127.0.0.1"):
        self.host = host
        self.port = port or free_port()
        self.backend = backend
        self.workers = workers
        self.root: Path | None = None
        self.process: subprocess.Popen | None = None

    @property
    def uri(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> None:
        assert self.root is not None
        log = self.root / "server.log"
        mlflow = Path(sys.executable).with_name("mlflow")
        command = [str(mlflow) if mlflow.exists() else "mlflow", "server", "--host", self.host,
                   "--port", str(self.port), "--backend-store-uri", self.backend,
                   "--serve-artifacts", "--artifacts-destination", (self.root / "artifacts").as_uri(),
                   "--workers", str(self.workers)]
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        self.process = subprocess.Popen(command, stdout=log.open("ab"), stderr=subprocess.STDOUT, env=env,
                                        start_new_session=True)
        _wait(lambda: urllib.request.urlopen(self.uri + "/health", timeout=2).status == 200,
              f"mlflow server on port {self.port}", 120, self.process, log)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, 15)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, 9)
                self.process.wait()
        self.process = None

    def __enter__(self) -> MlflowServer:
        self.root = Path(tempfile.mkdtemp(prefix="istar-mlflow-"))
        self.backend = self.backend or f"sqlite:///{self.root / 'mlflow.db'}"
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)


TOOLS = Path(__file__).resolve().parents[1] / "tests" / "tools.txt"
"""The pins of the tools two tests run (SkyPilot, Syne Tune); ``make tool-envs`` builds them in ``.venv-tools``."""


def tool_pins(name: str) -> list[str]:
    """The pins of :data:`TOOLS` for ``skypilot`` (its line) or ``synetune`` (the others)."""
    lines = [line.strip() for line in TOOLS.read_text().splitlines() if line.strip()]
    return [line for line in lines if line.startswith("skypilot==") == (name == "skypilot")]


def built_tools() -> Path | None:
    """``.venv-tools`` when ``make tool-envs`` built it for today's pins (its key: the pins file's digest)."""
    import hashlib

    folder = TOOLS.parents[1] / ".venv-tools"
    key = hashlib.sha256(TOOLS.read_bytes()).hexdigest()[:16]
    try:
        return folder if (folder / ".key").read_text().strip() == key else None
    except OSError:
        return None
