-- dueq-outbox migration 4: a task's other options (priority, group, and those dueq adds later)
-- as one JSON object with the names of dueq's HTTP API, e.g. {"priority": 2, "group": "m-7"}.
-- NULL or {} = dueq's defaults; null for an option = its default. max_attempts and lease_ms
-- have their own columns, which win over the same names here when set. The relay refuses a
-- row whose options dueq cannot read, does not know or finds out of range (state
-- 'rejected', naming the option). The check is NOT VALID: the column is new, so no row
-- needs checking, and a table scan under the lock would block the application's writes.

ALTER TABLE dueq_outbox ADD COLUMN options jsonb;
ALTER TABLE dueq_outbox ADD CONSTRAINT dueq_outbox_options_ok CHECK (
    options IS NULL OR jsonb_typeof(options) = 'object') NOT VALID;
