-- Version 4: which signing key signs this database's checkpoints, as a fingerprint (HMAC-SHA256 of
-- a fixed label under the key: it names the key without revealing it). One row at most, written
-- by the first process that saves a checkpoint and never changed; a process with another key is
-- refused before it writes anything (two deployments with different keys sharing one database).
CREATE TABLE key_fingerprint (
    one         boolean PRIMARY KEY DEFAULT true CHECK (one),
    fingerprint text NOT NULL CHECK (fingerprint ~ '^[0-9a-f]{64}$'),
    recorded_at timestamptz NOT NULL DEFAULT now()
);
