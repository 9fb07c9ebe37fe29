-- Payment arrived for order :order: mark it paid and cancel its timer in the same
-- transaction. A timer the relay has not carried into Redis yet ends `cancelled` at once; one
-- already in Redis becomes `cancelling`, and the relay cancels its task and writes the end
-- state back (`cancelled`, or `succeeded`/`dead` if it had already run).
-- Run: psql postgres://app@db/shop -v ON_ERROR_STOP=1 -v order=43 -f order_paid.sql

BEGIN;
UPDATE orders SET paid = true WHERE id = :order;
UPDATE dueq_outbox SET
    state    = CASE WHEN state = 'pending' THEN 'cancelled' ELSE 'cancelling' END,
    relay_op = CASE WHEN state = 'pending' THEN NULL ELSE 'cancel' END
WHERE queue = 'orders' AND key = 'order:' || :order || ':cancel'
  AND state IN ('pending', 'relayed');
COMMIT;
