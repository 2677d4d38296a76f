"""A Redis that requires a password, given none or a wrong one: one line saying so (exit 2), not
redis-py's "HELLO must be called with the client already authenticated, otherwise…". A private
``redis-server --requirepass`` on a spare port, stopped afterwards."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import ROOT

pytestmark = pytest.mark.integration


@pytest.fixture
def guarded_redis(tmp_path: Path) -> Iterator[int]:
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("needs redis-server on PATH (deploy/services.sh installs it)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    proc = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--requirepass", "s3cret", "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def _erase(url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "REDIS_URL": url}
    return subprocess.run([sys.executable, "-m", "reasonwire.workers.cli", "erase", "--tenant", "t", "--thread", "x"], env=env, capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_a_redis_that_requires_a_password_given_none_says_so_in_one_line(guarded_redis: int) -> None:
    done = _erase(f"redis://127.0.0.1:{guarded_redis}/0")
    assert done.returncode == 2
    assert done.stderr == (
        f"reasonwire: error: Redis at 127.0.0.1:{guarded_redis}/0 requires a password and REDIS_URL gives none "
        "(redis://:PASSWORD@host:port/db, or redis://USER:PASSWORD@… for an ACL user)\n"
    )


def test_a_wrong_redis_password_is_one_line_that_never_prints_it(guarded_redis: int) -> None:
    done = _erase(f"redis://:wrong-pass@127.0.0.1:{guarded_redis}/0")
    assert done.returncode == 2
    assert done.stderr == f"reasonwire: error: Redis at 127.0.0.1:{guarded_redis}/0 refused REDIS_URL's user name or password\n"
    assert "wrong-pass" not in done.stderr
    assert _erase(f"redis://:s3cret@127.0.0.1:{guarded_redis}/0").returncode == 0
