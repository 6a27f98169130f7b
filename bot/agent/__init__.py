"""The agent: one message in, one answer out, through a bounded tool loop over any provider.

``prompting`` lays a conversation out as an ``LLMRequest`` whose prefix the provider can cache;
``reasoning`` decides how hard the model should think; ``loop`` runs the model and its tool
calls to a final answer within iteration and time budgets.

May import: ``bot.events``, ``bot.llm``, ``bot.tools``, ``bot.ops``, ``bot.settings`` and
``prompts``. It knows nothing of platforms, the bus or Redis.
"""
