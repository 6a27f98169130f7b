"""The wheel, built from the checkout and installed into a fresh virtualenv outside it.

Why: the checkout hides packaging mistakes. Run from the repository, every file is on disk
whether or not the wheel carries it, so a word list or a template left out of the package data
breaks only the people who ``pip install`` Chorus. Here the wheel is built from a copy of the
sources (``python -m build --no-isolation``: sdist, then the wheel from it; no network, nothing
written into the checkout), every file under the packages is looked up in its RECORD (so a new
data file that the ``package-data`` patterns of pyproject.toml miss fails this test), then it is
installed with its dependencies (pinned by constraints.txt, from the configured index) into a
new virtualenv that cannot see the checkout. From directories outside the checkout, that
install runs what a new user runs: ``chorus --version``, ``chorus init --non-interactive``
(its credential check answered by a loopback OpenAI server), a piped ``chorus chat`` and a
``chorus run`` that answers on the console, serves its health endpoints and the dashboard's
login page, and stops cleanly on SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.loopback.openai_server import OpenAIServer
from tests.redis_server import free_port

# It starts processes (tests/suite_rules.py): `make test-fast` leaves it out.
pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parent.parent

PACKAGES = ("bot", "adapters", "insights", "prompts")

# What the smoke installs: the vendor its loopback server speaks and the dashboard (templates).
EXTRAS = "openai,admin"

ADMIN_TOKEN = "wheel-smoke-admin-token-0123"  # a throwaway: the dashboard wants 16+ characters


def _package_files() -> list[str]:
    """Every file under the packages that the wheel must carry, relative to the root."""
    found = []
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*"):
            if not path.is_file() or "__pycache__" in path.parts or path.suffix == ".pyc":
                continue
            if any(part.startswith(".") for part in path.relative_to(ROOT).parts):
                continue  # editor and OS droppings (.DS_Store), never read by the code
            found.append(path.relative_to(ROOT).as_posix())
    return sorted(found)


def _run(args: list[str], cwd: Path | None = None, timeout: float = 300) -> None:
    result = subprocess.run(
        args, capture_output=True, text=True, check=False, cwd=cwd, timeout=timeout
    )
    assert result.returncode == 0, (
        f"{args[:5]} exited {result.returncode}:\n{result.stderr[-4000:]}"
    )


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel ``python -m build`` makes from a copy of the sources: by way of the sdist, as
    by default, so a file the sdist leaves out is missing from the wheel too."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    for package in PACKAGES:
        shutil.copytree(
            ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    out = work / "dist"
    _run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), "."],
        cwd=source,
        timeout=300,
    )
    [built] = out.glob("*.whl")
    assert len(list(out.glob("*.tar.gz"))) == 1, "the sdist"
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A new virtualenv (no system site-packages) with the wheel and its dependencies."""
    where = tmp_path_factory.mktemp("venv") / "venv"
    _run([sys.executable, "-m", "venv", str(where)], timeout=300)
    python = where / "bin" / "python"
    _run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         "-c", str(ROOT / "constraints.txt"), f"{wheel}[{EXTRAS}]"],
        cwd=where.parent, timeout=600,
    )  # fmt: skip
    yield where


def _recorded(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        [record] = [n for n in archive.namelist() if n.endswith(".dist-info/RECORD")]
        lines = archive.read(record).decode().splitlines()
    return {line.rsplit(",", 2)[0] for line in lines if line}


def test_the_wheel_carries_every_file_under_the_packages(wheel: Path) -> None:
    files = _package_files()
    # The scan sees the files the code opens: the safety word lists, prompts, templates.
    for opened in ("bot/safety/data/slurs.txt", "prompts/system.md", "prompts/admin/base.html"):
        assert opened in files
    recorded = _recorded(wheel)
    missing = [name for name in files if name not in recorded]
    assert missing == [], "not in the wheel (pyproject.toml [tool.setuptools.package-data])"
    assert not [n for n in recorded if n.startswith(("tests/", "bench/", "examples/"))]


def _environment(venv: Path, home: Path) -> dict[str, str]:
    """Nothing of the checkout: no PYTHONPATH, the new venv first on PATH, a new HOME."""
    return {
        "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": str(home),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "CHORUS_BLOCK_REAL_LLM": "1",
        "CHORUS_LLM_MAX_RETRIES": "1",
        "CHORUS_INSIGHTS_ENABLED": "false",
    }


async def _finished(
    args: list[str], env: dict[str, str], cwd: Path, stdin: bytes = b""
) -> tuple[str, str]:
    proc = await asyncio.create_subprocess_exec(
        *args, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=env, cwd=cwd,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(stdin), timeout=120)
    assert proc.returncode == 0, f"{args} exited {proc.returncode}:\n{err.decode()[-4000:]}"
    return out.decode(), err.decode()


async def _get(url: str, limit: float = 60) -> tuple[int, str]:
    """The status and body of ``url`` once something answers there (polled up to ``limit``)."""
    deadline = asyncio.get_running_loop().time() + limit
    async with aiohttp.ClientSession() as session:
        while True:
            try:
                async with session.get(url) as response:
                    return response.status, await response.text()
            except aiohttp.ClientConnectionError:
                if asyncio.get_running_loop().time() > deadline:
                    raise
                await asyncio.sleep(0.2)


# Its fixtures build the wheel and install it with its dependencies first: minutes on a loaded
# machine, so more than the suite's default per-test limit.
@pytest.mark.timeout(900)
async def test_the_installed_wheel_sets_up_chats_and_runs_outside_the_checkout(
    venv: Path, tmp_path: Path
) -> None:
    home, elsewhere, project = tmp_path / "home", tmp_path / "elsewhere", tmp_path / "project"
    for directory in (home, elsewhere):
        directory.mkdir()
    env = _environment(venv, home)
    chorus = str(venv / "bin" / "chorus")

    # The packages resolve to the install, not to the checkout.
    probe = "import json, adapters, bot, insights, prompts; print(json.dumps([m.__file__ for m in (adapters, bot, insights, prompts)]))"  # fmt: skip
    out, _ = await _finished([str(venv / "bin" / "python"), "-c", probe], env, elsewhere)
    for module_file in json.loads(out):
        assert Path(module_file).is_relative_to(venv), module_file

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    out, _ = await _finished([chorus, "--version"], env, elsewhere)
    assert out.strip() == f"chorus {version}"

    async with OpenAIServer() as model:
        out, _ = await _finished(
            [chorus, "init", "--non-interactive", "--vendor=openai", "--api-key=sk-wheel-0123",
             f"--base-url={model.base_url}", "--model=gpt-test", "--platforms=none",
             "--persona-name=Wren", f"--dir={project}"],
            env, elsewhere,
        )  # fmt: skip
        assert "ok: openai answered" in out
        assert (project / ".env").is_file() and (project / "chorus.toml").is_file()

        model.replies.append("Hello from the wheel.")
        out, err = await _finished([chorus, "chat"], env, project, b"hello\n")
        assert out.splitlines() == ["Hello from the wheel."], err[-3000:]
        assert "Wren" in json.dumps(model.bodies[-1]), "chorus.toml's persona reached the model"

        health, admin = free_port(), free_port()
        run_env = env | {
            "CHORUS_HEALTH_PORT": str(health),
            "CHORUS_HEALTH_HOST": "127.0.0.1",
            "CHORUS_ADMIN_PORT": str(admin),
            "CHORUS_ADMIN_TOKEN": ADMIN_TOKEN,
        }
        model.replies.append("Still here.")
        proc = await asyncio.create_subprocess_exec(
            chorus, "run", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=run_env, cwd=project,
        )  # fmt: skip
        assert proc.stdin is not None and proc.stdout is not None
        try:
            status, _ = await _get(f"http://127.0.0.1:{health}/healthz")
            assert status == 200
            status, page = await _get(f"http://127.0.0.1:{admin}/login")
            assert status == 200 and "<form" in page, "the dashboard's templates are installed"
            proc.stdin.write(b"are you there?\n")  # stdin stays open: the console waits on
            await proc.stdin.drain()
            line = await asyncio.wait_for(proc.stdout.readline(), 60)
            assert line.decode().strip() == "Still here."
            proc.send_signal(signal.SIGTERM)
            _, err_bytes = await asyncio.wait_for(proc.communicate(), 60)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        logs = err_bytes.decode(errors="replace")
        assert proc.returncode == 0, logs[-3000:]
        assert "shutdown drain finished" in logs
