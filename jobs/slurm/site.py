"""What jobs/slurm/search.sbatch checks of the node it runs on before Ray starts, each a one-line refusal naming the
fix: the job's port window (outside Linux's ephemeral range, where the kernel hands out client ports that would take
Ray's; every port of it free on this node) and the head's address (one of this node's own, or no node would know it
is the head and the job would wait for nothing).

    python jobs/slurm/site.py ports JOB_ID     # prints the job's window's first port
    python jobs/slurm/site.py free BASE        # every port of the window free on this node, or one line
    python jobs/slurm/site.py head ADDRESS     # ADDRESS is one of this node's, or one line
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

WINDOW = 200
"""Ports a job takes: Ray's head, its agents and managers at base+0..8, workers at base+20..199."""
LOWEST = 10000
"""The first port a window may start at (below it: services a site runs)."""
EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_range(path: Path = EPHEMERAL) -> tuple[int, int]:
    """The kernel's ephemeral ports (Linux's default 32768-60999 where the file cannot be read)."""
    try:
        low, high = map(int, path.read_text().split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def window(job_id: int, ephemeral: tuple[int, int]) -> int:
    """The first port of a job's window: below the ephemeral range (above it where the range leaves too little room
    below), by the job id, so two jobs on one node differ unless their ids are a slot count apart."""
    low, high = ephemeral
    below = (low - LOWEST) // WINDOW
    above = (65536 - (high + 1)) // WINDOW
    if below >= above and below > 0:
        return LOWEST + (job_id % below) * WINDOW
    if above > 0:
        return high + 1 + (job_id % above) * WINDOW
    raise SystemExit(f"istar-tune: the ephemeral port range {low}-{high} leaves no {WINDOW}-port window for Ray: set "
                     "ISTAR_TUNE_PORT_BASE to a free window's first port")


def taken(base: int) -> list[int]:
    """The ports of a window something on this node listens on (or cannot be bound for another reason). A port whose
    last connection is closing (TIME_WAIT: a requeued job on the nodes its earlier run used) is free, as Ray's servers
    bind it (SO_REUSEADDR)."""
    found = []
    for port in range(base, base + WINDOW):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("0.0.0.0", port))
            except OSError:
                found.append(port)
    return found


def own_addresses() -> set[str]:
    """This node's addresses, every interface (psutil comes with Ray)."""
    import psutil

    return {a.address.split("%")[0] for addresses in psutil.net_if_addrs().values() for a in addresses
            if a.family in (socket.AF_INET, socket.AF_INET6)}


def head_problem(address: str, own: set[str]) -> str:
    """Why ``address`` cannot be this node's head address ("" when it can)."""
    try:
        resolved = {info[4][0] for info in socket.getaddrinfo(address, None, proto=socket.IPPROTO_TCP)}
    except socket.gaierror as err:
        return f"the head address {address!r} does not resolve ({err.strerror})"
    if resolved & own:
        return ""
    return (f"the head address {address!r} resolves to {', '.join(sorted(resolved))}, none of this node's own "
            f"addresses ({', '.join(sorted(own))}): Ray would make no node the head (a hostname mapped to 127.0.1.1, "
            "Debian's way, or another node's address)")


def main(argv: list[str]) -> int:
    command, value = (argv + ["", ""])[:2]
    if command == "ports" and value.isdigit():
        print(window(int(value), ephemeral_range()))
        return 0
    if command == "free" and value.isdigit():
        base = int(value)
        busy = taken(base)
        if busy:
            print(f"istar-tune: port {busy[0]} of this job's window {base}-{base + WINDOW - 1} is taken on "
                  f"{socket.gethostname()} ({len(busy)} taken): set ISTAR_TUNE_PORT_BASE to a free window's first "
                  "port", file=sys.stderr)
            return 2
        return 0
    if command == "head" and value:
        try:
            own = own_addresses()
        except ImportError as err:  # an interpreter without Ray's psutil: a line, never a traceback
            print(f"istar-tune: {sys.executable} has no {err.name} (it comes with Ray): the head check needs the "
                  "job's environment, ISTAR_TUNE_VENV=/path/to/venv", file=sys.stderr)
            return 2
        problem = head_problem(value, own)
        if problem:
            print(f"istar-tune: {problem}: set ISTAR_TUNE_HEAD_ADDRESS to this node's address on the network the "
                  "nodes share", file=sys.stderr)
            return 2
        return 0
    print("\n".join(line.strip() for line in __doc__.strip().splitlines()[-3:]), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
