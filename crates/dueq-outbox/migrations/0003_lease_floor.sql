-- dueq-outbox migration 3: a lease below 1 000 ms is refused, as dueq refuses it everywhere
-- a lease is set (a shorter lease expires before a worker can renew it, and a second worker
-- runs the task at the same time). Rows written before keep their value (NOT VALID: new
-- writes are checked, the table is not scanned); the relay refuses such a row when it
-- carries it into Redis (state 'rejected', naming lease_ms).

ALTER TABLE dueq_outbox DROP CONSTRAINT dueq_outbox_lease_ok;
ALTER TABLE dueq_outbox ADD CONSTRAINT dueq_outbox_lease_ok CHECK (
    lease_ms IS NULL OR lease_ms BETWEEN 1000 AND 4294967295) NOT VALID;
