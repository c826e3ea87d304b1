"""The agent's tools and the ledger they write. ``state.files.ledger`` never imports the SDK."""
