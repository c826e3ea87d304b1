"""The flow that ties agent, tools and state together.

``workflow.hitl`` holds every SDK human-in-the-loop call (imports the SDK, about 2 s);
``workflow.observe.views`` renders tasks and the ledger for the read-only commands (never imports the SDK).
"""
