-- Version 11: how far the webhook notifications of each task got (state/notify.py): one row per
-- task, the record as JSON text and its version. Version N + 1 replaces N by one UPDATE ... WHERE
-- version = N (the first by one INSERT ... ON CONFLICT DO NOTHING), so of two notify processes that
-- read the same version, one writes. The events themselves are derived from the checkpoints'
-- history and the effect records, never stored twice.
CREATE TABLE notify_progress (
    task_id text PRIMARY KEY,
    version integer NOT NULL CHECK (version >= 1),
    record  text NOT NULL
);
