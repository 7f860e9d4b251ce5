"""The library's one way to print: a line, flushed."""

from __future__ import annotations

import subprocess
import sys


def test_a_line_reaches_a_pipe_when_it_is_said_not_when_the_process_ends():
    program = "import sys, time\nfrom istar_tune.console import say\nsay('first')\ntime.sleep(30)\n"
    with subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout.readline() == "first\n"  # before the sleep ends: flushed, not buffered
        finally:
            process.kill()
