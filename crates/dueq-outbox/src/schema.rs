//! The table's migrations, shipped in `migrations/` and applied by [`migrate`].
//!
//! Its own version table (`dueq_outbox_migrations`) rather than sqlx's migrator: an
//! application that runs its own sqlx migrations on the same database would otherwise see
//! ours as unknown entries in `_sqlx_migrations` and refuse to start.

use sqlx::PgPool;

use crate::error::Result;

/// The migrations, in order: (version, name, SQL).
const MIGRATIONS: &[(i32, &str, &str)] = &[
    (1, "outbox", include_str!("../migrations/0001_outbox.sql")),
    (2, "renew", include_str!("../migrations/0002_renew.sql")),
    (
        3,
        "lease_floor",
        include_str!("../migrations/0003_lease_floor.sql"),
    ),
    (4, "options", include_str!("../migrations/0004_options.sql")),
];

/// Key of the advisory lock that serialises concurrent [`migrate`] calls (any constant
/// works; this one spells "dueqobx").
const LOCK_KEY: i64 = 0x0064_7565_716f_6278;

/// Creates or upgrades the outbox table and its triggers; safe to call at every start, from
/// several processes at once (an advisory lock serialises them, each migration is applied in
/// one transaction exactly once). Returns the versions it applied.
///
/// # Errors
/// [`Error::Postgres`](crate::Error::Postgres) when a statement fails (the failing migration
/// is rolled back whole).
pub async fn migrate(pool: &PgPool) -> Result<Vec<i32>> {
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(LOCK_KEY)
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS dueq_outbox_migrations (
             version integer PRIMARY KEY,
             name text NOT NULL,
             applied_at timestamptz NOT NULL DEFAULT now())",
    )
    .execute(&mut *tx)
    .await?;
    let done: Vec<i32> = sqlx::query_scalar("SELECT version FROM dueq_outbox_migrations")
        .fetch_all(&mut *tx)
        .await?;
    let mut applied = Vec::new();
    for (version, name, sql) in MIGRATIONS {
        if done.contains(version) {
            continue;
        }
        // A bare `&str` goes as a simple query (several statements allowed), like
        // `sqlx::raw_sql`, whose future is not `Send` for every lifetime and so cannot be
        // spawned (`tokio::spawn` of the relay in `dueq serve`).
        sqlx::Executor::execute(&mut *tx, *sql).await?;
        sqlx::query("INSERT INTO dueq_outbox_migrations (version, name) VALUES ($1, $2)")
            .bind(version)
            .bind(name)
            .execute(&mut *tx)
            .await?;
        applied.push(*version);
    }
    tx.commit().await?;
    Ok(applied)
}
