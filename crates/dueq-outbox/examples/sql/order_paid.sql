-- Payment arrived for order :order: mark it paid and cancel its timer in the same
-- transaction. The row becomes `cancelling`, and the relay cancels its task in Redis and
-- writes the end state back (`cancelled`, or `succeeded`/`dead` if it had already run). This
-- holds for a row still `pending` too (a relay round that enqueued it and then failed to
-- commit may have left its task in Redis), and for a `cancelling` one whose timer was set
-- again (`relay_op = 'renew'`): that drops the new timer.
-- Run: psql postgres://app@db/shop -v ON_ERROR_STOP=1 -v order=43 -f order_paid.sql

BEGIN;
UPDATE orders SET paid = true WHERE id = :order;
UPDATE dueq_outbox SET state = 'cancelling', relay_op = 'cancel'
WHERE queue = 'orders' AND key = 'order:' || :order || ':cancel'
  AND state IN ('pending', 'relayed', 'cancelling');
COMMIT;
