-- Version 9: the reviewer list as one signed, versioned record (state.reviewers.ReviewerList), and a
-- signed revocation per token that left it. A change of the list inserts the row of the next
-- version (compare-and-swap: the primary key lets one writer of a version win); the newest version
-- is the list. A revocation row is inserted in the same transaction and never deleted: a list that
-- names a revoked token (an older row restored from a dump) is refused. Both envelopes are the exact
-- JSON text that was signed (record kind, store_id, the fields, mac). The table "reviewers" of
-- version 7 (one row per reviewer, not bound to this database, no admin) is left as it is: while it
-- holds a row, every read of the reviewer list is refused, naming it (register the team again).
CREATE TABLE reviewer_lists (
    version  integer PRIMARY KEY CHECK (version > 0),
    envelope text NOT NULL
);
CREATE TABLE reviewer_revocations (
    token_id text PRIMARY KEY,
    envelope text NOT NULL
);
