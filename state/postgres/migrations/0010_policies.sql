-- Version 10: the approval policy lives in the store (state/policy.py), one row per version, never
-- updated or deleted: a task records the version it was started under and is decided under it.
-- The envelope is the signed record (state.record_seal, kind "policy": the exact JSON text that was
-- signed, bound to this database's store_identity); its version column must agree with it. Version
-- N + 1 is one INSERT, so two writers that read N race for one primary key and one wins.
CREATE TABLE policies (
    version  integer PRIMARY KEY CHECK (version >= 1),
    envelope text NOT NULL
);
