-- Version 6: effects through an external service. A ledger entry may say that a human settled an
-- effect that was in doubt (settled_by: who found it done; settle_reason: why); null otherwise.
-- effect_intents: the write-ahead intent of each attempt of an effect (state.records.EffectIntent),
-- one row per (key, attempt), written before the request is sent and never updated.
-- effect_settlements: a finding that one attempt did NOT happen (state.records.Settlement), one row
-- per attempt that has an intent, never updated. Both INSERT ... ON CONFLICT DO NOTHING.
ALTER TABLE ledger ADD COLUMN settled_by text, ADD COLUMN settle_reason text;

CREATE TABLE effect_intents (
    idempotency_key text NOT NULL,
    attempt         integer NOT NULL CHECK (attempt >= 1),
    task_id         text NOT NULL,
    channel         text NOT NULL,
    call_id         text NOT NULL,
    action          text NOT NULL,
    content_sha256  text NOT NULL,
    request_key     text NOT NULL,
    service         text NOT NULL,
    deduplicates    boolean NOT NULL,
    at              text NOT NULL,
    PRIMARY KEY (idempotency_key, attempt)
);

CREATE TABLE effect_settlements (
    idempotency_key text NOT NULL,
    attempt         integer NOT NULL,
    task_id         text NOT NULL,
    by_name         text NOT NULL,
    at              text NOT NULL,
    reason          text,
    source          text NOT NULL,
    PRIMARY KEY (idempotency_key, attempt),
    FOREIGN KEY (idempotency_key, attempt) REFERENCES effect_intents (idempotency_key, attempt)
);
