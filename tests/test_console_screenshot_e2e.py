"""The console screenshot the README shows (docs/img/console-reply.png) is a real capture:
``chorus chat`` on a pseudo-terminal answers a question the loopback model streams in chunks, the
bytes the terminal received are replayed by a terminal emulator (pyte), and the screen it holds
is drawn to HTML and photographed by the distribution's Chromium. The test checks the screen
first: the question, the answer rendered as Markdown (no ``**`` left), the prompt back. With
``CHORUS_UPDATE_SCREENSHOTS=1`` it rewrites the README's image; otherwise it writes to a
temporary directory, so every run still exercises the whole path.
"""

from __future__ import annotations

import html
import os
import shutil
import tempfile
from pathlib import Path

import pyte
from playwright.async_api import async_playwright

from tests.loopback.anthropic_server import AnthropicServer
from tests.test_chat_e2e import ROOT, base_env
from tests.test_chat_tty_e2e import CTRL_D, ENTER, exit_status, terminal

IMAGE = ROOT / "docs" / "img" / "console-reply.png"
# Read at import: the suite's autouse fixture clears CHORUS_* from the environment of each test.
UPDATE = os.environ.get("CHORUS_UPDATE_SCREENSHOTS") == "1"
STATE = Path(tempfile.gettempdir()) / "chorus-demo"
COLUMNS, ROWS = 160, 40  # the size tests.test_chat_tty_e2e.terminal gives the pty
QUESTION = "plan tonight's stream?"
ANSWER = (
    "Here is a **plan for tonight's stream**:\n\n"
    "1. Open with the *community poll* results\n"
    "2. Two ranked matches, then a short break\n"
    "3. Close with a Q&A: I will collect your questions\n\n"
    "Moderators can silence me any time with `!chorus pause`."
)
PALETTE = {
    "default": "#d4d4d4",
    "black": "#3c3c3c",
    "red": "#f14c4c",
    "green": "#23d18b",
    "brown": "#f5f543",
    "yellow": "#f5f543",
    "blue": "#3b8eea",
    "magenta": "#d670d6",
    "cyan": "#29b8db",
    "white": "#e5e5e5",
}
BACKGROUND = "#1e1e1e"


def colour(name: str, fallback: str) -> str:
    if name == "default":
        return fallback
    if name in PALETTE:
        return PALETTE[name]
    return f"#{name}" if len(name) == 6 else fallback


def screen_html(screen: pyte.Screen, rows: int) -> str:
    """The first ``rows`` lines of the emulated screen, as styled spans in a <pre>."""
    lines = []
    for y in range(rows):
        row = screen.buffer[y]
        spans = []
        for x in range(screen.columns):
            char = row[x]
            fg, bg = colour(char.fg, PALETTE["default"]), colour(char.bg, BACKGROUND)
            if char.reverse:
                fg, bg = bg, fg
            style = f"color:{fg};background:{bg}"
            style += ";font-weight:bold" if char.bold else ""
            style += ";font-style:italic" if char.italics else ""
            style += ";text-decoration:underline" if char.underscore else ""
            spans.append(f'<span style="{style}">{html.escape(char.data or " ")}</span>')
        lines.append("".join(spans))
    body = "\n".join(lines)
    return (
        "<!doctype html><meta charset=utf-8><style>"
        f"body{{margin:0;background:{BACKGROUND}}}"
        "pre{margin:0;padding:16px;font:15px/1.35 'DejaVu Sans Mono',monospace}"
        f"</style><pre id=screen>{body}</pre>"
    )


async def test_the_console_screenshot_is_a_real_streamed_reply(tmp_path: Path) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "install the distribution's chromium (apt-get install chromium; .ci/run does)"
    shutil.rmtree(STATE, ignore_errors=True)  # (a short path: the welcome line shows it)
    async with AnthropicServer() as model:
        model.replies.append({"text": ANSWER, "chunk_delay": 0.05})
        env = base_env(tmp_path) | {
            "CHORUS_MODEL": "anthropic:claude-sonnet-4-5",
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_BASE_URL": model.base_url,
            "XDG_STATE_HOME": str(STATE),
            "TERM": "xterm-256color",
            "PROMPT_TOOLKIT_NO_CPR": "1",  # (this terminal does not report the cursor)
            "PYTHONPATH": str(ROOT),
        }
        async with terminal(["chat", "--user", "ada"], env) as (pid, screen):
            await screen.wait_for(lambda t: "ada> " in t, limit=90)
            await screen.type(QUESTION)
            await screen.type(ENTER)
            last = "!chorus pause"
            await screen.wait_for(lambda t: last in t and "ada> " in t.split(last)[-1], limit=90)
            raw = bytes(screen.raw)
            await screen.type(CTRL_D)
            assert await exit_status(pid) == 0
    emulated = pyte.Screen(COLUMNS, ROWS)
    pyte.ByteStream(emulated).feed(raw)
    shown = [line.rstrip() for line in emulated.display]
    text = "\n".join(shown)
    assert f"ada> {QUESTION}" in text, text
    assert "plan for tonight's stream:" in text and "**" not in text, text  # Markdown rendered
    assert "Chorus · anthropic:claude-sonnet-4-5 · /help" in text, text
    used = max(y for y, line in enumerate(shown) if line) + 1
    assert shown[used - 1].startswith("ada>"), text  # the prompt is back: the answer is whole

    image = IMAGE if UPDATE else tmp_path / "console-reply.png"
    width = max(len(line) for line in shown) + 4
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=chromium, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = await browser.new_page(viewport={"width": 9 * width + 32, "height": 600})
            await page.set_content(screen_html(emulated, used))
            await page.locator("#screen").screenshot(path=str(image))
        finally:
            await browser.close()
    assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
