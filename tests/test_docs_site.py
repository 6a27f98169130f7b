"""The documentation site builds with ``mkdocs build --strict`` (what ``make docs`` and CI run),
and strict really refuses a broken link and a page left out of the nav; README stays a page a
newcomer reads in five minutes, with every link into docs/ pointing at a page that exists."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# It starts processes (tests/suite_rules.py): `make test-fast` leaves it out.
pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parent.parent
README_MAX_LINES = 250


def build(project: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_site_builds_strict(tmp_path: Path) -> None:
    done = build(ROOT, tmp_path / "site")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "site" / "reference" / "settings" / "index.html").is_file()
    assert (tmp_path / "site" / "platforms" / "discord" / "index.html").is_file()


def test_strict_refuses_a_broken_link_and_a_page_missing_from_the_nav(tmp_path: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(ROOT / "docs", project / "docs")
    shutil.copy(ROOT / "mkdocs.yml", project / "mkdocs.yml")
    (project / "docs" / "orphan.md").write_text("# Not in the nav\n", encoding="utf-8")
    done = build(project, tmp_path / "site")
    assert done.returncode != 0 and "orphan.md" in done.stderr
    (project / "docs" / "orphan.md").unlink()
    page = project / "docs" / "memory.md"
    page.write_text(page.read_text() + "\nSee [gone](nowhere.md).\n", encoding="utf-8")
    done = build(project, tmp_path / "site")
    assert done.returncode != 0 and "nowhere.md" in done.stderr


def test_the_readme_is_short_and_links_only_to_pages_that_exist() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= README_MAX_LINES
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    local = [target for target in targets if not target.startswith(("http://", "https://"))]
    assert any(target.startswith("docs/") for target in local)
    for target in local:
        assert (ROOT / target).exists(), f"README links to {target}, which does not exist"


def test_the_readme_quick_start_names_chorus_init_and_each_platform_page() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert ".venv/bin/chorus init" in readme  # the binary as it is after `make run`
    quick = readme.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    for title, page in (
        ("Console", "platforms/console.md"),
        ("Discord", "platforms/discord.md"),
        ("Slack", "platforms/slack.md"),
        ("Twitch", "platforms/twitch.md"),
        ("YouTube live chat", "platforms/youtube.md"),
    ):
        section = quick.split(f"\n### {title}\n", 1)[1].split("\n### ", 1)[0]
        assert f"](docs/{page})" in section, f"README's {title} quick start: link {page}"
        assert len(section.strip().splitlines()) <= 20, f"README's {title} quick start is long"
