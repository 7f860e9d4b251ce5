"""The library's one way to print: a line, flushed."""

from __future__ import annotations

import os
import select
import subprocess
import sys


def test_a_line_reaches_a_pipe_when_it_is_said_not_when_the_process_ends():
    program = "import sys, time\nfrom istar_tune.console import say\nsay('first')\ntime.sleep(60)\n"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # a pipe buffers by default
    with subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, text=True, env=env) as process:
        try:  # the line must arrive while the process sleeps: a say that stopped flushing waits out the minute
            ready, _, _ = select.select([process.stdout], [], [], 20)
            assert ready, "nothing reached the pipe within 20 s: say did not flush"
            assert process.poll() is None and process.stdout.readline() == "first\n"
        finally:
            process.kill()
