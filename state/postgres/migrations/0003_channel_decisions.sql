-- Version 3: several channels per task. A ledger entry records whether a human's approval was on
-- record ("human") or the approval rule let the call run without one ("not_needed"); null in an
-- entry written before channels existed. A rejection record is per (task, channel): channel is
-- null for a task with one channel, so the key is the task and its channel or the task alone.
ALTER TABLE ledger ADD COLUMN approval text;
ALTER TABLE rejections ADD COLUMN channel text;
ALTER TABLE rejections DROP CONSTRAINT rejections_pkey;
CREATE UNIQUE INDEX rejections_by_task_channel ON rejections (task_id, (coalesce(channel, '')));
