"""The console on a terminal: what ``chorus chat`` shows a person, as opposed to a script.

``adapters/console.py`` owns the conversation (messages out, replies in, the piped contract);
this module owns the screen when stdin and stdout are both a terminal:

- a welcome line: the bot's name, the model, ``/help``, Ctrl-D to quit (``prompts/console``);
- line editing, the arrow keys and history across sessions, from prompt_toolkit (the history
  file is ``$XDG_STATE_HOME/chorus/history``, ``~/.local/state/chorus/history`` by default);
- the answer rendered as Markdown (rich) under the bot's name in colour, shown as it is written
  (``ReplyDraft``s re-render it in place) and replaced by the final text when it comes;
- a spinner line while the model thinks or a tool runs ("Chorus is fetching a page…");
- notices in colour. Logs never land between the turns: ``bot/cli.py`` sends them to a file
  in the same directory unless ``--verbose``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TextIO

from prompt_toolkit import PromptSession
from prompt_toolkit.formatted_text import FormattedText
from prompt_toolkit.history import FileHistory, History, InMemoryHistory
from prompt_toolkit.styles import Style
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.markdown import Markdown
from rich.spinner import Spinner
from rich.text import Text

import prompts
from bot.events import ReplyDraft

NAME_STYLE = "bold cyan"
NOTICE_STYLE = "yellow"
ERROR_STYLE = "bold red"
_PROMPT_STYLE = Style.from_dict({"user": "bold ansigreen"})


def state_dir() -> Path:
    """Where the console keeps its history and logs (XDG's state directory)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "chorus"


def welcome_line(bot_name: str, model: str) -> str:
    return prompts.render("console/welcome", bot=bot_name, model=model)


def logs_line(path: Path) -> str:
    return prompts.render("console/logs", path=str(path))


def activity_line(bot_name: str, activity: str) -> str:
    """The spinner's words while the model thinks or a tool runs."""
    return prompts.render("console/status", bot=bot_name, activity=activity)


class Terminal:
    """The screen and keyboard of one ``chorus chat`` session on a terminal."""

    def __init__(
        self,
        *,
        bot_name: str,
        model: str,
        user: str,
        history: Path | None = None,
        output: TextIO | None = None,
    ) -> None:
        self.bot_name = bot_name
        self.model = model
        self.user = user
        self.console = Console(file=output, highlight=False)
        self.history = history
        self._session: PromptSession[str] | None = None  # made on the first read
        self._live: Live | None = None
        self._text = ""

    def welcome(self, logs: Path | None = None) -> None:
        line = welcome_line(self.bot_name, self.model)
        name, _, rest = line.partition(self.bot_name)
        self.console.print(Text.assemble(name, (self.bot_name, NAME_STYLE), rest))
        if logs is not None:
            self.console.print(logs_line(logs), style="dim")

    async def read(self) -> str | None:
        """The next line the user typed; None at Ctrl-D or Ctrl-C (quit)."""
        if self._session is None:
            store: History = InMemoryHistory()
            if self.history is not None:
                self.history.parent.mkdir(parents=True, exist_ok=True)
                store = FileHistory(str(self.history))
            self._session = PromptSession(history=store, style=_PROMPT_STYLE)
        try:
            return await self._session.prompt_async(
                FormattedText([("class:user", f"{self.user}> ")])
            )
        except (EOFError, KeyboardInterrupt):
            return None

    def waiting(self) -> None:
        """A message was sent: a spinner until the answer starts."""
        self._text = ""
        self._live = Live(
            self._render("", prompts.render("progress/thinking")),
            console=self.console,
            refresh_per_second=8,
            transient=False,
            redirect_stdout=False,
            redirect_stderr=False,
            vertical_overflow="visible",
        )
        self._live.start()

    def draft(self, draft: ReplyDraft) -> None:
        """The answer so far (and what runs), re-rendered in place."""
        if self._live is None:
            return
        self._text = draft.text
        self._live.update(self._render(draft.text, draft.status), refresh=True)

    def answer(self, text: str, *, error: bool = False) -> None:
        """The final answer, in place of the drafts."""
        body: RenderableType = Text(text, style=ERROR_STYLE) if error else Markdown(text)
        final = Group(Text(self.bot_name, style=NAME_STYLE), body)
        if self._live is not None:
            self._live.update(final, refresh=True)
            self._live.stop()
            self._live = None
        else:
            self.console.print(final)
        self.console.print()  # a blank line before the next prompt

    def notice(self, text: str) -> None:
        self.close()
        self.console.print(f"[chorus] {text}", style=NOTICE_STYLE, markup=False)

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def _render(self, text: str, status: str | None) -> RenderableType:
        parts: list[RenderableType] = [Text(self.bot_name, style=NAME_STYLE)]
        if text.strip():
            parts.append(Markdown(text))
        if status is not None:
            line = activity_line(self.bot_name, status)
            parts.append(Spinner("dots", text=Text(line, style="dim")))
        return Group(*parts)
