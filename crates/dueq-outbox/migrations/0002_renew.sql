-- dueq-outbox migration 2: a `cancelling` row may carry relay_op 'renew': a new timer was set
-- under its key before the relay carried the cancel. The relay then cancels the key's task in
-- Redis and enqueues the row's payload and due time as a new task. This only widens what the
-- op constraint allows, so existing rows need no check (NOT VALID: new writes are checked,
-- the table is not scanned).

ALTER TABLE dueq_outbox DROP CONSTRAINT dueq_outbox_op_ok;
ALTER TABLE dueq_outbox ADD CONSTRAINT dueq_outbox_op_ok CHECK (
    (state = 'pending' AND relay_op = 'enqueue')
    OR (state = 'cancelling' AND relay_op IN ('cancel', 'renew'))
    OR (state = 'relayed' AND (relay_op IS NULL OR relay_op = 'reschedule'))
    OR (state IN ('succeeded', 'dead', 'cancelled', 'rejected') AND relay_op IS NULL)) NOT VALID;
