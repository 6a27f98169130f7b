"""Dice for Chorus: an example plugin with a tool the model can call and a ``/roll`` command.

Installed (``pip install examples/plugins/chorus_dice``), it is found through its
``chorus.plugins`` entry point ``dice``, and loaded when ``CHORUS_PLUGINS=dice`` names it (or
CHORUS_PLUGIN_ENTRY_POINTS=true); ``CHORUS_PLUGINS=chorus_dice`` loads it from anywhere on the
path too. Everything it defines at module level with ``@tool`` or ``@command`` is registered.
"""

from __future__ import annotations

import random
import re

from bot.plugins import CommandContext, ToolError, command, tool

NOTATION = re.compile(r"\s*(\d{0,3})\s*d\s*(\d{1,4})\s*([+-]\s*\d{1,4})?\s*", re.IGNORECASE)
MAX_DICE = 100

_random = random.SystemRandom()


def throw(notation: str) -> tuple[list[int], int, int]:
    """The rolls, the modifier and the total of ``NdM+K`` (``d20``, ``2d6``, ``3d8-1``)."""
    match = NOTATION.fullmatch(notation)
    if match is None:
        raise ToolError(f"{notation!r} is not dice notation; write NdM, e.g. 2d6 or d20+3")
    count = int(match[1] or 1)
    sides = int(match[2])
    if not 1 <= count <= MAX_DICE or sides < 2:
        raise ToolError(f"roll 1 to {MAX_DICE} dice of at least 2 sides, not {notation!r}")
    modifier = int(match[3].replace(" ", "")) if match[3] else 0
    rolls = [_random.randint(1, sides) for _ in range(count)]
    return rolls, modifier, sum(rolls) + modifier


@tool(timeout=2)
async def roll_dice(dice: str = "1d6") -> dict[str, object]:
    """Roll dice and return each die and the total.

    Args:
        dice: dice notation NdM with an optional modifier, e.g. 1d6, 2d20 or 3d8+2
    """
    rolls, modifier, total = throw(dice)
    return {"dice": dice.strip(), "rolls": rolls, "modifier": modifier, "total": total}


@command(name="roll")
async def roll_command(ctx: CommandContext) -> str:
    """Roll dice, e.g. /roll 2d6"""
    notation = ctx.args or "1d6"
    try:
        rolls, modifier, total = throw(notation)
    except ToolError as exc:
        return str(exc)
    shown = " + ".join(map(str, rolls))
    if modifier:
        shown += f" {'+' if modifier > 0 else '-'} {abs(modifier)}"
    return f"{notation.strip()}: {shown} = {total}"
