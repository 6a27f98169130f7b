"""A plugin with settings, for tests/test_plugin_settings.py: a greeting per place, a limit, and
a token read from the environment."""

from __future__ import annotations

from pydantic import BaseModel, Field, SecretStr

from bot.plugins import CommandContext, command, secret, settings


@settings
class GreetSettings(BaseModel):
    greeting: str = "hello"
    limit: int = Field(default=3, ge=1, le=10)
    token: SecretStr | None = secret("GREET_TOKEN")


@command
async def greet(ctx: CommandContext) -> str:
    """Greet, as the place's settings say."""
    found = ctx.settings(GreetSettings)
    count = await ctx.store.user.incr("greeted")
    return f"{found.greeting} x{min(count, found.limit)}"
