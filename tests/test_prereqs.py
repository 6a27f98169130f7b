"""tests/prereqs.sh, the script ``make test`` (so ``.ci/run``) calls first, on a machine made bare.

Each case runs the real script under ``/bin/bash`` with ``PATH`` set to a scratch directory of
stub tools only, so what is "installed" is exactly what the case puts there: a missing tool with
no way to install it stops at once with the exact apt-get command; with apt-get (a stub that
records its arguments and "installs" stub binaries) the script calls it with the right
packages; a Redis that does not answer is started with the real redis-server.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from pathlib import Path

import pytest
import redis

from tests.redis_server import free_port

pytestmark = pytest.mark.e2e

SCRIPT = Path(__file__).resolve().parent / "prereqs.sh"
BASH = shutil.which("bash") or "/bin/bash"
TOOLS = ("redis-server", "valgrind", "chromium", "systemd-analyze", "faketime", "espeak-ng")

# apt-get: records each call, and "installs" a package by dropping a stub of its binary.
APT_GET = """#!/bin/sh
echo "$*" >> "{log}"
if [ "$1" = install ]; then
  shift
  for pkg in "$@"; do
    case "$pkg" in
      systemd) bin=systemd-analyze ;;
      -*) continue ;;
      *) bin="$pkg" ;;
    esac
    printf '#!/bin/sh\\nexit 0\\n' > "{bin_dir}/$bin"
    /bin/chmod +x "{bin_dir}/$bin"
  done
fi
"""
# sudo without a password, for a run as an ordinary user: `sudo -n true` works, the rest runs.
SUDO = """#!/bin/sh
[ "$1" = -n ] && shift
exec "$@"
"""


def stub(bin_dir: Path, name: str, body: str = "#!/bin/sh\nexit 0\n") -> None:
    path = bin_dir / name
    path.write_text(body)
    path.chmod(0o755)


def run(bin_dir: Path, redis_port: int, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": str(bin_dir), "REDIS_PORT": str(redis_port), "REDIS_LOG": str(tmp_path / "r")}
    return subprocess.run(
        [BASH, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    made = tmp_path / "bin"
    made.mkdir()
    return made


def answering_port(real_redis_url: str) -> int:
    port = redis.Redis.from_url(real_redis_url).connection_pool.connection_kwargs["port"]
    assert isinstance(port, int)
    return port


def test_missing_tools_without_apt_stop_at_once_with_the_exact_command(
    bin_dir: Path, tmp_path: Path
) -> None:
    result = run(bin_dir, free_port(), tmp_path)  # no Redis answers there
    assert result.returncode == 1, result.stderr
    assert (
        "sudo apt-get update && sudo apt-get install -y redis-server valgrind chromium systemd "
        "faketime espeak-ng" in result.stderr
    )
    assert not (tmp_path / "r").exists()  # nothing was started


def test_missing_tools_are_installed_with_apt_get_and_the_right_packages(
    bin_dir: Path, tmp_path: Path, real_redis_url: str
) -> None:
    log = tmp_path / "apt.log"
    stub(bin_dir, "apt-get", APT_GET.format(log=log, bin_dir=bin_dir))
    stub(bin_dir, "sudo", SUDO)
    stub(bin_dir, "chromium")
    stub(bin_dir, "redis-server")
    result = run(bin_dir, answering_port(real_redis_url), tmp_path)
    assert result.returncode == 0, result.stderr
    assert log.read_text().splitlines() == [
        "update -qq",
        "install -y -qq valgrind systemd faketime espeak-ng",
    ]
    assert "installing valgrind systemd faketime espeak-ng" in result.stderr


def test_a_machine_with_everything_installs_and_starts_nothing(
    bin_dir: Path, tmp_path: Path, real_redis_url: str
) -> None:
    log = tmp_path / "apt.log"
    stub(bin_dir, "apt-get", APT_GET.format(log=log, bin_dir=bin_dir))
    for tool in TOOLS:
        stub(bin_dir, tool)
    result = run(bin_dir, answering_port(real_redis_url), tmp_path)
    assert (result.returncode, result.stderr) == (0, "")
    assert not log.exists()


def test_a_redis_that_does_not_answer_is_started(bin_dir: Path, tmp_path: Path) -> None:
    server = shutil.which("redis-server")
    assert server, "redis-server is needed here (tests/prereqs.sh installs it)"
    for tool in TOOLS[1:]:
        stub(bin_dir, tool)
    (bin_dir / "redis-server").symlink_to(server)
    port = free_port()
    result = run(bin_dir, port, tmp_path)
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=10)
    try:
        assert result.returncode == 0, result.stderr + (tmp_path / "r").read_text()
        assert f"no Redis on 127.0.0.1:{port}; starting one" in result.stderr
        assert client.ping()
    finally:
        with contextlib.suppress(redis.ConnectionError):  # gone, or never came up
            client.shutdown(nosave=True)
        client.close()
