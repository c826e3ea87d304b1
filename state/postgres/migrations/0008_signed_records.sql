-- Version 8: every record that decides whether an effect runs is signed (state/record_seal.py).
-- Each row of ledger, rejections, effect_intents and effect_settlements gets the signed envelope it
-- was written with (the exact JSON text that was signed: record kind, store_id, the fields, mac);
-- its other columns stay, for queries and people, and must agree with the envelope. A row whose
-- envelope is null was written by an earlier version (unsigned): it is never trusted. doctor names
-- each; doctor --repair signs those a signed checkpoint proves (state/adoption.py).
ALTER TABLE ledger ADD COLUMN envelope text;
ALTER TABLE rejections ADD COLUMN envelope text;
ALTER TABLE effect_intents ADD COLUMN envelope text;
ALTER TABLE effect_settlements ADD COLUMN envelope text;
