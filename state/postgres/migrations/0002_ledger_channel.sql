-- Version 2: a ledger entry may name the channel of a task that publishes to several (its
-- idempotency key is then <task>#<channel>); null for a task with one. The inbox lists tasks by
-- status, so status gets an index.
ALTER TABLE ledger ADD COLUMN channel text;
CREATE INDEX checkpoints_by_status ON checkpoints (status);
