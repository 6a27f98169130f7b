"""Generate ``busy_chat.jsonl``, the synthetic busy live chat the engagement replay runs on.

Recorded chat from real streams belongs to its chatters, so the shipped trace is synthetic but
shaped like a busy stream: a Twitch channel with dozens of chatters (a few very talkative, most
occasional) in bursts of hype and quiet stretches, plus a smaller YouTube live chat; mentions
of the bot and replies to it, questions, a spam flood, repeated lines, emote walls and
copypasta, another bot's announcements, a viewer trying ``!chorus pause`` and a moderator
pausing and resuming the bot. The generator is seeded and uses only ``random.Random``, so the
same seed always writes the same bytes:

    python bench/traces/make_trace.py            # rewrites bench/traces/busy_chat.jsonl
    python bench/traces/make_trace.py --seed 7 --out /tmp/other.jsonl
    python bench/traces/make_trace.py --regulars # rewrites bench/traces/busy_regulars.jsonl

``--regulars`` writes the second shipped trace, ``busy_regulars.jsonl``: 30 minutes of a busy
Twitch channel where a few regulars mention the bot twice within seconds (the second mention
waits out their 10 s cooldown) and then flood the chat with ordinary lines. Before mentions were
exempt from flood control, the flood dropped the waiting mention with the rest of the regular's
queue: the trace exists to show that every mention is answered or declined with a reason.

``--youtube-busy`` writes a four-hour busy YouTube live chat: 74 messages a minute on average
(quieter and busier stretches), about 300 mentions of the bot, 200 chatters. It is not shipped
(2.6 MB); ``make bench`` generates it from the seed in memory (``generate_youtube_busy``), and
so does this command, byte for byte:

    python bench/traces/make_trace.py --youtube-busy --out /tmp/youtube_busy.jsonl

``--youtube-busier`` writes a busier four hours the same way (1.5 lines a second, about 500
mentions; ``generate_youtube_busier``), the reply budget's benchmark and test.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

BOT = "chorusbot"
SEED = 20250101

# (start, end, messages per second) on the Twitch channel; YouTube runs at a fifth of the rate.
PHASES = [
    (0, 300, 1.0),
    (300, 900, 3.0),
    (900, 1200, 0.04),  # quiet: the streamer is away
    (1200, 1800, 2.5),
    (1800, 2100, 0.2),
    (2100, 2700, 3.0),
]
PAUSE_AT, RESUME_AT, VIEWER_PAUSE_AT = 1500.0, 1620.0, 1400.0

CHATTER = [
    "lol",
    "LUL",
    "that was insane",
    "gg",
    "nice shot",
    "no way",
    "PogChamp",
    "clip it",
    "this music slaps",
    "hi chat",
    "first time here, love the vibe",
    "he's cracked",
    "KEKW",
    "close one",
    "W streamer",
    "that boss is brutal",
    "ez",
    "monkaS",
    "let's gooo",
    "the lag lol",
    "hydrate!",
    "back from dinner",
    "this run is clean",
    "rip",
    "F",
    "chat is wild today",
    "been watching for 3 years",
    "so smooth",
    "true",
    "100%",
]
QUESTIONS = [
    "what game is this?",
    "how long have you been streaming today?",
    "anyone know the song?",
    "what rank is he?",
    "is this the new patch?",
    "why did he skip the chest?",
    "what keyboard do you use?",
    "how do you do that jump?",
    "when is the next stream?",
    "who's the guest tomorrow?",
    "can you show the settings",
    "which build is this",
]
ASKS = [
    "what do you think of this run?",
    "can you explain the boss mechanics?",
    "who is winning the tournament?",
    "tell us a fun fact",
    "is this strategy any good?",
    "what's the best weapon here?",
    "summarise the last ten minutes please",
    "how many deaths so far?",
    "do you like this song?",
    "give me a tip for this level",
]
REPLIES = ["haha fair", "really?", "that's not what I meant", "good point", "source?", "thanks!"]
EMOTES = ["KEKW", "LUL", "PogChamp", "monkaS", "Kappa", "catJAM"]
COPYPASTA = (
    "I have been watching this stream since the very beginning and I just want to say that "
    "every single run has been an absolute masterpiece of skill and patience, "
)


class _Trace:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.rows: list[dict[str, Any]] = []
        self.counter = 0

    def add(
        self, t: float, platform: str, channel: str, user: tuple[str, str], text: str, **extra: Any
    ) -> None:
        self.counter += 1
        row: dict[str, Any] = {
            "t": round(t, 3),
            "platform": platform,
            "channel": channel,
            "id": f"m{self.counter}",
            "user_id": user[0],
            "user_name": user[1],
            "text": text,
        }
        row.update({k: v for k, v in extra.items() if v})
        self.rows.append(row)


def _users(rng: random.Random, prefix: str, count: int) -> list[tuple[str, str]]:
    parts = [
        "pixel",
        "night",
        "frost",
        "turbo",
        "lazy",
        "cosmic",
        "mango",
        "shadow",
        "retro",
        "salty",
        "quiet",
        "lucky",
        "zen",
        "hyper",
        "tiny",
        "grand",
    ]
    tails = ["fox", "owl", "gamer", "panda", "wizard", "cat", "otter", "knight", "pilot", "bean"]
    names: set[str] = set()
    while len(names) < count:
        names.add(f"{rng.choice(parts)}{rng.choice(tails)}{rng.randrange(10, 999)}")
    return [(f"{prefix}{1000 + i}", name) for i, name in enumerate(sorted(names))]


def _line(rng: random.Random) -> tuple[str, dict[str, Any]]:
    roll = rng.random()
    if roll < 0.013:
        return f"@{BOT} {rng.choice(ASKS)}", {"mentions_bot": True}
    if roll < 0.017:
        return rng.choice(REPLIES), {"reply_to_bot": True}
    if roll < 0.14:
        return rng.choice(QUESTIONS), {}
    text = rng.choice(CHATTER)
    if rng.random() < 0.3:
        text += " " + rng.choice(EMOTES)
    return text, {}


def _ambient(
    trace: _Trace, platform: str, channel: str, users: list[tuple[str, str]], scale: float
) -> None:
    rng = trace.rng
    weights = [1.0 / (rank + 1) ** 0.6 for rank in range(len(users))]  # Zipf-like talkativeness
    for start, end, rate in PHASES:
        t = float(start)
        while True:
            t += rng.expovariate(rate * scale)
            if t >= end:
                break
            user = rng.choices(users, weights)[0]
            text, flags = _line(rng)
            trace.add(t, platform, channel, user, text, **flags)


def _incidents(trace: _Trace, channel: str, viewers: list[tuple[str, str]]) -> None:
    rng = trace.rng
    streamer, mod = ("t1", channel), ("t2", "mod_amelia")
    spammer, repeater = ("t900", "cheap_followers_4u"), viewers[7]
    for i in range(25):  # a flood: 25 messages in 12 s, mostly the same advert
        trace.add(420 + i * 0.5, "twitch", channel, spammer, f"BUY FOLLOWERS cheap {i % 3}")
    for i in range(4):  # the same line over and over
        trace.add(650 + i * 9, "twitch", channel, repeater, "who else is here from the clip?")
    for t in (500.0, 1300.0, 2200.0):  # emote walls and copypasta
        trace.add(t, "twitch", channel, rng.choice(viewers), " ".join(["KEKW"] * 12))
        trace.add(t + 3, "twitch", channel, rng.choice(viewers), COPYPASTA * 4)
        trace.add(t + 5, "twitch", channel, rng.choice(viewers), "A" * 60)
    for t in range(60, 2700, 300):  # another bot's announcements
        trace.add(
            float(t), "twitch", channel, ("t3", "Nightbot"), "Follow on socials!", is_bot=True
        )
    trace.add(VIEWER_PAUSE_AT, "twitch", channel, viewers[3], "!chorus pause")
    trace.add(PAUSE_AT, "twitch", channel, mod, "!chorus pause", roles=["moderator"])
    trace.add(
        PAUSE_AT + 30, "twitch", channel, viewers[5], f"@{BOT} are you there?", mentions_bot=True
    )
    trace.add(RESUME_AT, "twitch", channel, streamer, "!chorus resume", roles=["owner"])
    trace.add(
        RESUME_AT + 20,
        "twitch",
        channel,
        streamer,
        f"@{BOT} welcome back, say hi",
        mentions_bot=True,
        roles=["owner"],
    )


def generate(seed: int = SEED) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    trace = _Trace(rng)
    twitch_users = _users(rng, "t", 48)
    youtube_users = _users(rng, "y", 16)
    _ambient(trace, "twitch", "bigstreamer", twitch_users, scale=1.0)
    _ambient(trace, "youtube", "live-abc123", youtube_users, scale=0.2)
    _incidents(trace, "bigstreamer", twitch_users)
    trace.rows.sort(key=lambda row: row["t"])
    return trace.rows


REGULARS_PHASES = [(0, 600, 2.0), (600, 1200, 3.0), (1200, 1800, 2.0)]


def _regular_visits(trace: _Trace, channel: str, regulars: list[tuple[str, str]]) -> None:
    """Each regular, about every 80 s: a mention, a second one 2-8 s later (inside the 10 s
    cooldown, so it waits in the ledger), then 7-10 ordinary lines within 12 s (a flood)."""
    rng = trace.rng
    for regular in regulars:
        t = rng.uniform(5, 60)
        while t < 1780:
            trace.add(
                t, "twitch", channel, regular, f"@{BOT} {rng.choice(ASKS)}", mentions_bot=True
            )
            t += rng.uniform(2, 8)
            trace.add(
                t, "twitch", channel, regular, f"@{BOT} {rng.choice(ASKS)}", mentions_bot=True
            )
            for _ in range(rng.randrange(7, 11)):
                t += rng.uniform(0.5, 1.5)
                trace.add(
                    t, "twitch", channel, regular, f"{rng.choice(CHATTER)} {rng.randrange(99)}"
                )
            t += rng.uniform(50, 100)


def generate_regulars(seed: int = SEED) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    trace = _Trace(rng)
    viewers = _users(rng, "t", 40)
    regulars = [(f"r{i}", name) for i, (_, name) in enumerate(_users(rng, "r", 6))]
    for start, end, rate in REGULARS_PHASES:
        t = float(start)
        while (t := t + rng.expovariate(rate)) < end:
            text, flags = _line(rng)
            trace.add(t, "twitch", "busystreamer", rng.choice(viewers), text, **flags)
    _regular_visits(trace, "busystreamer", regulars)
    trace.rows.sort(key=lambda row: row["t"])
    return trace.rows


# (start, end, messages per minute) of the four-hour YouTube stream: 74 a minute on average.
YOUTUBE_PHASES = [(0, 1800, 52), (1800, 5400, 82), (5400, 7200, 60), (7200, 12600, 86)]
YOUTUBE_PHASES += [(12600, 14400, 70)]
YOUTUBE_MENTION_SHARE = 0.0169  # ~300 of ~17,800 lines


# The busier stream: 1.5 lines a second on average, about 500 mentions.
YOUTUBE_BUSIER_SCALE = 90 / 74
YOUTUBE_BUSIER_MENTION_SHARE = 0.0235


def generate_youtube_busy(
    seed: int = SEED, *, scale: float = 1.0, mention_share: float = YOUTUBE_MENTION_SHARE
) -> list[dict[str, Any]]:
    """Four hours of a busy YouTube live chat (see the module docstring); ``scale`` multiplies
    the message rate."""
    rng = random.Random(seed)
    trace = _Trace(rng)
    users = _users(rng, "UC", 200)
    weights = [1.0 / (rank + 1) ** 0.7 for rank in range(len(users))]
    for start, end, per_minute in YOUTUBE_PHASES:
        t = float(start)
        while (t := t + rng.expovariate(per_minute * scale / 60)) < end:
            user = rng.choices(users, weights)[0]
            roll = rng.random()
            if roll < mention_share:
                text, flags = f"@{BOT} {rng.choice(ASKS)}", {"mentions_bot": True}
            elif roll < 0.13:
                text, flags = rng.choice(QUESTIONS), {}
            else:
                text, flags = rng.choice(CHATTER), {}
                if rng.random() < 0.3:
                    text += " " + rng.choice(EMOTES)
            trace.add(t, "youtube", "live-busy4h", user, text, **flags)
    return trace.rows


def generate_youtube_busier(seed: int = SEED) -> list[dict[str, Any]]:
    """Four hours of a busier YouTube live chat: 1.5 lines a second, about 500 mentions."""
    return generate_youtube_busy(
        seed, scale=YOUTUBE_BUSIER_SCALE, mention_share=YOUTUBE_BUSIER_MENTION_SHARE
    )


def write(rows: list[dict[str, Any]], out: Path) -> None:
    with out.open("w", encoding="utf-8", newline="\n") as handle:
        for row in rows:
            handle.write(json.dumps(row, separators=(",", ":"), ensure_ascii=False) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=SEED)
    kind = parser.add_mutually_exclusive_group()
    kind.add_argument("--regulars", action="store_true", help="write busy_regulars.jsonl")
    kind.add_argument(
        "--youtube-busy", action="store_true", help="write the four-hour YouTube trace (--out)"
    )
    kind.add_argument(
        "--youtube-busier",
        action="store_true",
        help="write the busier four-hour YouTube trace, 1.5 lines/s (--out)",
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.youtube_busy or args.youtube_busier:
        if args.out is None:
            parser.error("--youtube-busy/--youtube-busier need --out (the trace is not shipped)")
        make = generate_youtube_busier if args.youtube_busier else generate_youtube_busy
        rows = make(args.seed)
        write(rows, args.out)
        print(f"wrote {len(rows)} messages to {args.out}")
        return
    name = "busy_regulars.jsonl" if args.regulars else "busy_chat.jsonl"
    args.out = args.out or Path(__file__).with_name(name)
    rows = (generate_regulars if args.regulars else generate)(args.seed)
    write(rows, args.out)
    print(f"wrote {len(rows)} messages to {args.out}")


if __name__ == "__main__":
    main()
