-- Version 5: a ledger entry keeps what the effect returned the first time (JSON text), so a repeat
-- of the call is answered with it without running the effect again; null when it returned nothing
-- and in entries written before.
ALTER TABLE ledger ADD COLUMN result text;
