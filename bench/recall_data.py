"""The recall benchmark's scripted people: what each said in early sessions (each fact is the pin
the insights agent writes from it) and the questions they ask days later.

Every fact has one question that shares a content word with it (the lexical score can find it)
and one paraphrase that shares none ("any vegetarian dinner ideas?" for "eats no meat"). The
paraphrases use only words of the loopback embedder's synonym table (tests/loopback/
embedding_model.py), so the embedding figures show what the pipeline does with a model that
knows those synonyms; the lexical figures are what today's scoring does with real wording.
"""

from __future__ import annotations

# person -> [(pin text, said in session, [(question, paraphrase?)])]
Fact = tuple[str, int, list[tuple[str, bool]]]

PEOPLE: dict[str, list[Fact]] = {
    "ada": [
        (
            "eats no meat",
            1,
            [("what meat is ok for me?", False), ("any vegetarian dinner ideas?", True)],
        ),
        (
            "has a labrador named Biscuit",
            1,
            [("is Biscuit due for a bath?", False), ("how often should I walk my dog?", True)],
        ),
        (
            "works night shifts as a nurse",
            2,
            [
                ("my night shifts are rough, tips?", False),
                ("how do I survive my hospital job?", True),
            ],
        ),
        (
            "learning Spanish on Duolingo",
            2,
            [("how do I say thanks in Spanish?", False), ("can you quiz me on vocabulary?", True)],
        ),
        (
            "allergic to peanuts",
            3,
            [("are peanuts in pad thai?", False), ("is this nut bar safe?", True)],
        ),
    ],
    "ben": [
        (
            "plays guitar in a punk band",
            1,
            [("which guitar strings last longest?", False), ("help me write a song", True)],
        ),
        (
            "training for the Berlin marathon",
            1,
            [
                ("how long before the marathon should I taper?", False),
                ("what workout should I do today?", True),
            ],
        ),
        (
            "has two kids, Mia and Leo",
            2,
            [("birthday ideas for Mia?", False), ("fun weekend plans with my children?", True)],
        ),
        (
            "lactose intolerant",
            2,
            [("which cheeses are low in lactose?", False), ("can I have milk in my coffee?", True)],
        ),
        (
            "moved to Lisbon last year",
            3,
            [("best neighborhoods in Lisbon?", False), ("what's fun to do around my city?", True)],
        ),
    ],
    "chen": [
        (
            "writes Rust at a fintech startup",
            1,
            [("is Rust good for web servers?", False), ("help me debug this compiler error", True)],
        ),
        (
            "cat named Miso",
            1,
            [("Miso keeps scratching the sofa", False), ("what should I feed my kitten?", True)],
        ),
        (
            "planning a trip to Japan in April",
            2,
            [("what to pack for Japan in spring?", False), ("draft an itinerary for Kyoto", True)],
        ),
        (
            "has insomnia",
            2,
            [("does melatonin help insomnia?", False), ("I can't sleep again, ideas?", True)],
        ),
        (
            "reads fantasy novels",
            3,
            [("recommend a fantasy series", False), ("what book should I read next?", True)],
        ),
    ],
    "dara": [
        ("vegan since 2019", 1, [("is honey vegan?", False), ("plant based lunch recipe?", True)]),
        (
            "plays chess online every evening",
            1,
            [
                ("best chess openings for beginners?", False),
                ("which board game should I learn?", True),
            ],
        ),
        (
            "works as a software engineer",
            2,
            [
                ("how do I ask my engineer lead for a raise?", False),
                ("my boss wants overtime at the office", True),
            ],
        ),
        ("learning piano", 2, [("easy piano pieces?", False), ("how do I practice chords?", True)]),
        (
            "hates cold weather",
            3,
            [
                ("is the weather cold in Oslo in May?", False),
                ("where should I go to escape winter?", True),
            ],
        ),
    ],
    "eli": [
        (
            "celiac, no gluten",
            1,
            [("is spelt gluten free?", False), ("can I eat this bread?", True)],
        ),
        (
            "has a terrier called Pip",
            1,
            [("Pip barks at the mailman", False), ("my puppy chews shoes", True)],
        ),
        ("cycles to work", 2, [("cycles rain gear?", False), ("best bike lights?", True)]),
        (
            "learning French for a move to Lyon",
            2,
            [("French grammar tips?", False), ("help me practice my language lessons", True)],
        ),
        (
            "plays Zelda on the Switch",
            3,
            [("Zelda puzzle hints?", False), ("what gaming console deals are on?", True)],
        ),
    ],
    "fay": [
        ("has a toddler", 1, [("toddler tantrum advice?", False), ("my baby won't nap", True)]),
        (
            "works at a hospital pharmacy",
            1,
            [
                ("hospital pharmacy hours are long", False),
                ("my colleague keeps swapping my shift", True),
            ],
        ),
        (
            "allergic to dairy",
            2,
            [("dairy free desserts?", False), ("is milk chocolate ok for me?", True)],
        ),
        (
            "writes Python for data analysis",
            2,
            [("Python pandas tips?", False), ("my code is slow, help me debug", True)],
        ),
        (
            "runs 5k every morning",
            3,
            [
                ("how to get faster at a 5k?", False),
                ("what exercise should I add to my training?", True),
            ],
        ),
    ],
    "gus": [
        (
            "sings in a choir",
            1,
            [("choir warmups?", False), ("help me pick a song for music practice", True)],
        ),
        (
            "lives in a tiny apartment in Berlin",
            1,
            [
                ("small apartment storage ideas?", False),
                ("what to do in my neighborhood tonight?", True),
            ],
        ),
        (
            "travels for work to Tokyo monthly",
            2,
            [("Tokyo jet lag tips?", False), ("how do I plan a long flight?", True)],
        ),
        (
            "does not eat beef",
            2,
            [("beef substitutes for tacos?", False), ("what meal should I cook tonight?", True)],
        ),
        (
            "has a son learning to read",
            3,
            [
                ("books for a son learning to read?", False),
                ("activities for my kid this weekend?", True),
            ],
        ),
    ],
    "hana": [
        (
            "plays violin in an orchestra",
            1,
            [("violin rosin brands?", False), ("how do I memorize music faster?", True)],
        ),
        (
            "training for a cycling race",
            1,
            [("cycling race nutrition?", False), ("plan my workout week", True)],
        ),
        (
            "teaches German",
            2,
            [("German exercises for beginners?", False), ("how to teach grammar to adults?", True)],
        ),
        (
            "gluten intolerant",
            2,
            [("gluten free pasta brands?", False), ("bread alternatives for lunch?", True)],
        ),
        (
            "reads sci-fi",
            3,
            [("sci-fi classics list?", False), ("recommend a novel for the weekend", True)],
        ),
    ],
}

# Chatter of the later sessions (the history that is trimmed away).
CHATTER = [
    "lol that stream was wild",
    "anyone up for a match later?",
    "brb getting coffee",
    "did you see the patch notes?",
    "good morning everyone",
    "that meme is everywhere now",
]
