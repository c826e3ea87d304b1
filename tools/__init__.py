"""The agent's tools and the ledger they write. ``tools.ledger`` never imports the SDK."""
