"""Ask: streamed answers about the databases, their findings, alerts and queries.

Flow (one way): api/ask.py or web/ask.py validates and refuses (usecases/ask.py), then
`engine.answer` streams SPEC events: a provider (providers/) turns one model turn into small
deltas, tools (tools.py) read the store and insights, and the conversation is stored as it goes.
"""
