"""Checkpoint envelope, schema, integrity and storage. Never imports the SDK (fast read-only commands)."""
