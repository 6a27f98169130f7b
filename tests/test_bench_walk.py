"""``bench.walk``: the files one Discord mention walks through, and the calls against the layering.

The walk itself runs a real in-process Chorus with discord.py against the loopback gateway; it
also holds the turn to its shape: the router's stages are entered, and no call climbs from a
lower layer back into the composition root (the safety gate once asked ``bot/app.py`` for a
scope's rules through a lambda).
"""

from __future__ import annotations

from bench import walk


def test_a_file_s_layer_follows_the_layering_table() -> None:
    assert walk._unit("bot/router/core.py") == "bot.router"
    assert walk._unit("bot/app.py") == "bot.app"
    assert walk._unit("adapters/discord/adapter.py") == "adapters"
    assert walk._above("bot/router/core.py", "bot/state/claims.py")  # a callback into the router
    assert not walk._above("bot/state/claims.py", "bot/router/core.py")  # the router calling down
    assert not walk._above("bot/router/read.py", "bot/router/core.py")  # same layer


def test_back_and_forth_is_a_pair_of_files_calling_each_other() -> None:
    found = walk.Walk(edges={("a.py", "b.py"), ("b.py", "a.py"), ("a.py", "c.py")})
    assert found.back_and_forth == [("a.py", "b.py")]


async def test_a_mention_walks_the_stages_and_never_climbs_into_the_composition_root() -> None:
    whole, turn = await walk._walk_once()
    stages = ["admit", "screen", "read", "decide", "answer", "commit"]
    entered = [f for f in turn.files if f.startswith("bot/router/")]
    order = [entered.index(f"bot/router/{stage}.py") for stage in stages]
    assert order == sorted(order), entered
    assert "bot/app.py" not in whole.files and "bot/cli.py" not in whole.files
    # the message enters through the adapter before the first stage (the router's consume loop,
    # already waiting on the bus, may be traced first as it wakes)
    entry = next(i for i, f in enumerate(whole.files) if f.startswith("adapters/discord/"))
    assert entry < whole.files.index("bot/router/admit.py")
    assert ("bot/state/claims.py", "bot/router/core.py") not in whole.edges  # no fill callback
