-- The order flow of examples/order_service.rs in plain SQL: what an application in any
-- language sends through its own PostgreSQL driver (the row of dueq_outbox is the contract).
-- Run: psql postgres://app@db/shop -v ON_ERROR_STOP=1 -v order=43 -f order_created.sql
-- (the outbox table exists once `dueq relay --postgres URL` has run; the relay carries the
-- committed timer into Redis, due 30 minutes after the commit)

CREATE TABLE IF NOT EXISTS orders (
    id    bigint  PRIMARY KEY,
    total bigint  NOT NULL,
    paid  boolean NOT NULL DEFAULT false
);

-- the order and its cancel timer commit together
BEGIN;
INSERT INTO orders (id, total) VALUES (:order, 1990);
INSERT INTO dueq_outbox (queue, key, payload, due_at_ms)
VALUES ('orders', 'order:' || :order || ':cancel',
        convert_to('{"order":' || :order || '}', 'UTF8'),
        dueq_outbox_now_ms() + 30 * 60 * 1000)
ON CONFLICT (queue, key) WHERE state IN ('pending', 'relayed', 'cancelling') DO NOTHING;
COMMIT;

-- an order whose transaction rolls back leaves no timer either
BEGIN;
INSERT INTO orders (id, total) VALUES (:order + 1, 500);
INSERT INTO dueq_outbox (queue, key, payload, due_at_ms)
VALUES ('orders', 'order:' || :order + 1 || ':cancel',
        convert_to('{"order":' || :order + 1 || '}', 'UTF8'),
        dueq_outbox_now_ms() + 30 * 60 * 1000);
ROLLBACK;
