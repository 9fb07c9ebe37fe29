-- dueq-outbox migration 4: a task's other options (priority, group, and those dueq adds later)
-- as one JSON object with the names of dueq's HTTP API, e.g. {"priority": 2, "group": "m-7"}.
-- NULL or {} = dueq's defaults. max_attempts and lease_ms stay in their own columns, which
-- win over the same names here. The relay refuses a row whose options dueq cannot read
-- (state 'rejected', naming the option).

ALTER TABLE dueq_outbox ADD COLUMN options jsonb;
ALTER TABLE dueq_outbox ADD CONSTRAINT dueq_outbox_options_ok CHECK (
    options IS NULL OR jsonb_typeof(options) = 'object');
