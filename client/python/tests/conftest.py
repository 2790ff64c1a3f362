# SPDX-License-Identifier: BSD-3-Clause
"""A real dashd for the tests: started from the build directory on a fresh ipc://
endpoint, CPU backend unless DASH_TEST_BACKEND says otherwise, stopped with SIGTERM.
The dashd binary: $DASHD, else build/dashd of this checkout."""
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.normpath(os.path.join(HERE, "..")))

import dash_attn  # noqa: E402


def dashd_path():
    return os.environ.get("DASHD") or os.path.join(ROOT, "build", "dashd")


def dashctl_path():
    return os.path.join(os.path.dirname(dashd_path()), "dashctl")


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on (for a moment)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    def __init__(self, extra=(), sock=None):
        """sock: the socket's path (default: dashd.sock in a directory of its own)."""
        self.dir = tempfile.mkdtemp(prefix="dash-py-")
        self.sock = sock or f"{self.dir}/dashd.sock"
        self.endpoint = f"ipc://{self.sock}"
        self.extra = list(extra)
        self.log = open(os.path.join(self.dir, "dashd.log"), "a")
        self._spawn()

    def _spawn(self):
        backend = os.environ.get("DASH_TEST_BACKEND", "cpu")
        args = [dashd_path(), "--endpoint", self.endpoint, "--backend", backend]
        if backend == "cpu":
            args += ["--threads", "2"]
        self.proc = subprocess.Popen(args + self.extra, stderr=self.log)
        deadline = time.time() + 20
        while not os.path.exists(self.sock):
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("dashd did not start: see " + self.log.name)
            time.sleep(0.02)

    def kill_and_restart(self):
        """SIGKILL (a crash: the socket file stays) and start again on the same endpoint."""
        self.proc.kill()
        self.proc.wait(timeout=30)
        os.unlink(self.sock)  # so that waiting for it waits for the new one
        self._spawn()

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=30)
        self.log.close()
        return rc


@pytest.fixture(scope="session")
def daemon():
    d = Daemon()
    yield d
    assert d.stop() == 0


@pytest.fixture(scope="session")
def client(daemon):
    c = dash_attn.connect(daemon.endpoint, client_name="pytest", run_tag="pytest")
    yield c
    c.close()
