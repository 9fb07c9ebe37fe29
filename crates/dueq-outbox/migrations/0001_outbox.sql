-- dueq-outbox migration 1: the outbox table, its tombstones, and the triggers that wake the
-- relay and record rows that leave Redis behind. Applied by dueq_outbox::migrate() inside one
-- transaction under an advisory lock; the row format below is the contract for writers in any
-- language (see the crate README).

-- Epoch milliseconds by the database clock, at the moment of the call (not the transaction
-- start): how a delay becomes an absolute due time.
CREATE OR REPLACE FUNCTION dueq_outbox_now_ms() RETURNS bigint
    LANGUAGE sql VOLATILE
    AS $$ SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint $$;

CREATE TABLE dueq_outbox (
    id            bigserial   PRIMARY KEY,
    -- dueq queue name: [A-Za-z0-9_.-]{1,128}, not "." or ".."
    queue         text        NOT NULL,
    -- business key, 1 to 512 bytes of UTF-8; how rows and Redis tasks are matched
    key           text        NOT NULL,
    payload       bytea       NOT NULL DEFAULT '\x',
    -- absolute due time, Unix epoch ms (a delay is turned into this by dueq_outbox_now_ms())
    due_at_ms     bigint      NOT NULL,
    -- NULL = dueq's defaults (5 attempts, 30 000 ms lease)
    max_attempts  integer,
    lease_ms      bigint,
    -- pending    committed, not yet in Redis (the relay will enqueue it)
    -- relayed    in Redis as task_id
    -- cancelling cancel requested; the relay will cancel task_id in Redis
    -- succeeded | dead | cancelled   finished (written back by the relay)
    -- rejected   Redis refused it (last_error says why); never ran
    state         text        NOT NULL DEFAULT 'pending',
    -- what the relay still has to do in Redis: 'enqueue' (state pending), 'cancel'
    -- (cancelling), 'reschedule' (relayed, due_at_ms moved), or NULL (nothing)
    relay_op      text                 DEFAULT 'enqueue',
    -- the dueq task id once relayed
    task_id       text,
    -- times the reconciler re-added the task after Redis lost it
    restores      integer     NOT NULL DEFAULT 0,
    last_error    text,
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    relayed_at    timestamptz,
    finished_at   timestamptz,
    -- when the relay last looked the task up in Redis, epoch ms (database clock)
    checked_at_ms bigint,
    CONSTRAINT dueq_outbox_queue_ok CHECK (queue ~ '^[A-Za-z0-9_.-]{1,128}$' AND queue NOT IN ('.', '..')),
    CONSTRAINT dueq_outbox_key_ok CHECK (octet_length(key) BETWEEN 1 AND 512),
    CONSTRAINT dueq_outbox_payload_ok CHECK (octet_length(payload) <= 1048576),
    CONSTRAINT dueq_outbox_due_ok CHECK (due_at_ms BETWEEN 0 AND 253402300799999),
    CONSTRAINT dueq_outbox_attempts_ok CHECK (max_attempts IS NULL OR max_attempts BETWEEN 1 AND 65535),
    CONSTRAINT dueq_outbox_lease_ok CHECK (lease_ms IS NULL OR lease_ms BETWEEN 1 AND 4294967295),
    CONSTRAINT dueq_outbox_state_ok CHECK (state IN
        ('pending', 'relayed', 'cancelling', 'succeeded', 'dead', 'cancelled', 'rejected')),
    CONSTRAINT dueq_outbox_op_ok CHECK (
        (state = 'pending' AND relay_op = 'enqueue')
        OR (state = 'cancelling' AND relay_op = 'cancel')
        OR (state = 'relayed' AND (relay_op IS NULL OR relay_op = 'reschedule'))
        OR (state IN ('succeeded', 'dead', 'cancelled', 'rejected') AND relay_op IS NULL))
);

COMMENT ON TABLE dueq_outbox IS
    'dueq timers written in application transactions; relayed into Redis by dueq relay';

-- One live row per (queue, key), as dueq keeps one live task per key.
CREATE UNIQUE INDEX dueq_outbox_live_key ON dueq_outbox (queue, key)
    WHERE state IN ('pending', 'relayed', 'cancelling');
-- The relay's work list.
CREATE INDEX dueq_outbox_todo ON dueq_outbox (id) WHERE relay_op IS NOT NULL;
-- Outcome tracking and the reconciler walk relayed rows by due time.
CREATE INDEX dueq_outbox_relayed_due ON dueq_outbox (due_at_ms, id) WHERE state = 'relayed';

-- Redis tasks whose row was deleted or finished by hand: the relay cancels them by id.
CREATE TABLE dueq_outbox_tombstones (
    id         bigserial   PRIMARY KEY,
    queue      text        NOT NULL,
    key        text        NOT NULL,
    task_id    text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- a task found running is tried again from this epoch ms on
    retry_at_ms bigint     NOT NULL DEFAULT 0
);

-- Wakes the relays (LISTEN dueq_outbox) when a row needs work; delivered at commit, and
-- several notifications of one transaction are folded into one.
CREATE FUNCTION dueq_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('dueq_outbox', '');
    RETURN NULL;
END $$;

CREATE TRIGGER dueq_outbox_notify AFTER INSERT OR UPDATE ON dueq_outbox
    FOR EACH ROW WHEN (NEW.relay_op IS NOT NULL) EXECUTE FUNCTION dueq_outbox_notify();
CREATE TRIGGER dueq_outbox_tombstone_notify AFTER INSERT ON dueq_outbox_tombstones
    FOR EACH ROW EXECUTE FUNCTION dueq_outbox_notify();

-- A row that is in Redis (relayed or cancelling) and is deleted, or set to a finished state, by
-- anyone but the relay (which sets dueq.relay = 'on' in its transactions; so may a cleanup
-- that knows its Redis tasks are gone), leaves a tombstone so its Redis task is removed before
-- it runs (case C39). Also keeps updated_at current.
CREATE FUNCTION dueq_outbox_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF coalesce(current_setting('dueq.relay', true), '') <> 'on'
           AND OLD.task_id IS NOT NULL AND OLD.state IN ('relayed', 'cancelling') THEN
            INSERT INTO dueq_outbox_tombstones (queue, key, task_id)
                VALUES (OLD.queue, OLD.key, OLD.task_id);
        END IF;
        RETURN OLD;
    END IF;
    NEW.updated_at := clock_timestamp();
    IF coalesce(current_setting('dueq.relay', true), '') <> 'on'
       AND OLD.task_id IS NOT NULL
       AND OLD.state IN ('relayed', 'cancelling')
       AND NEW.state IN ('succeeded', 'dead', 'cancelled', 'rejected') THEN
        INSERT INTO dueq_outbox_tombstones (queue, key, task_id)
            VALUES (OLD.queue, OLD.key, OLD.task_id);
        NEW.relay_op := NULL;
        NEW.finished_at := coalesce(NEW.finished_at, clock_timestamp());
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER dueq_outbox_guard BEFORE UPDATE OR DELETE ON dueq_outbox
    FOR EACH ROW EXECUTE FUNCTION dueq_outbox_guard();
