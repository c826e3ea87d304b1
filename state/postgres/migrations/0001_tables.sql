-- Version 1: the store's tables. Applied once, in one transaction, by state/postgres/store.py.

-- The database's identity: every checkpoint written here carries it in its signed envelope
-- (state_id), so a row copied from another database is refused, as state.id does for a state dir.
CREATE TABLE store_identity (
    store_id   text PRIMARY KEY CHECK (store_id ~ '^[0-9a-f]{32}$'),
    created_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO store_identity (store_id) VALUES (replace(gen_random_uuid()::text, '-', ''));

-- One row per task: the latest signed checkpoint envelope (the exact JSON text that was signed),
-- with its revision, status and MAC as columns for the compare-and-swap and for listing.
CREATE TABLE checkpoints (
    task_id    text PRIMARY KEY,
    revision   integer NOT NULL CHECK (revision >= 1),
    status     text NOT NULL,
    mac        text NOT NULL,
    envelope   text NOT NULL,
    written_at timestamptz NOT NULL DEFAULT now()
);

-- One row per revision written (append-only): what happened when, for audits and the benchmark.
CREATE TABLE history (
    task_id    text NOT NULL,
    revision   integer NOT NULL,
    event      text NOT NULL,
    status     text NOT NULL,
    at         text NOT NULL,
    PRIMARY KEY (task_id, revision)
);

-- The ledger: one row per idempotency key, never updated (INSERT ... ON CONFLICT DO NOTHING).
CREATE TABLE ledger (
    idempotency_key text PRIMARY KEY,
    task_id         text NOT NULL,
    action          text NOT NULL,
    title           text NOT NULL,
    content_sha256  text NOT NULL,
    published_at    text NOT NULL
);

-- Rejection records: one per task, kept outside the checkpoint (an older checkpoint put back
-- cannot undo a reject).
CREATE TABLE rejections (
    task_id        text PRIMARY KEY,
    content_sha256 text NOT NULL,
    call_id        text NOT NULL,
    by_name        text NOT NULL,
    at             text NOT NULL,
    reason         text
);
