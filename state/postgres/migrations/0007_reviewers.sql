-- Version 7: team mode. One row per registered reviewer (state.reviewers.Reviewer): its name and
-- the signed envelope (state.reviewers.seal: the MAC under the deployment's signing key), so a row
-- written or edited by hand is refused like a checkpoint whose MAC does not verify.
CREATE TABLE reviewers (
    name     text PRIMARY KEY,
    envelope jsonb NOT NULL
);
