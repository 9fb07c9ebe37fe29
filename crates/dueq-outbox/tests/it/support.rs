//! A database per test, a redis-server per test, and a relay running in the background.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use dueq_outbox::{Relay, RelayConfig, migrate};
use dueq_testkit::RedisServer;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

static SEQ: AtomicU32 = AtomicU32::new(0);

/// The server's URL without a database name.
fn base_url() -> String {
    std::env::var("DUEQ_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into())
}

/// A fresh database, migrated; dropped (WITH FORCE) when the value is dropped.
pub struct TestDb {
    pub pool: PgPool,
    name: String,
}

impl TestDb {
    pub async fn new() -> Self {
        let name = format!(
            "dueq_outbox_t_{}_{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let admin = PgPool::connect(&format!("{}/postgres", base_url()))
            .await
            .unwrap();
        sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .execute(&admin)
            .await
            .unwrap();
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&admin)
            .await
            .unwrap();
        admin.close().await;
        let url = format!("{}/{name}", base_url());
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .connect(&url)
            .await
            .unwrap();
        assert_eq!(migrate(&pool).await.unwrap(), vec![1, 2, 3, 4]);
        Self { pool, name }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let name = self.name.clone();
        // Drop runs inside the test's runtime: drop the database from a thread of its own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                if let Ok(admin) = PgPool::connect(&format!("{}/postgres", base_url())).await {
                    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .execute(&admin)
                        .await;
                    admin.close().await;
                }
            });
        })
        .join();
    }
}

/// A database, a redis-server and a client on it.
pub struct Env {
    pub db: TestDb,
    pub redis: RedisServer,
    pub client: dueq::Client,
}

impl Env {
    pub async fn new() -> Self {
        let db = TestDb::new().await;
        let redis = RedisServer::start();
        let client = dueq::Client::connect(&redis.url()).await.unwrap();
        Self { db, redis, client }
    }

    pub fn relay(&self, cfg: RelayConfig) -> Relay {
        Relay::new(self.db.pool.clone(), self.client.clone(), cfg)
    }

    /// Starts a relay in the background; it stops when the returned guard is dropped.
    pub fn spawn_relay(&self, cfg: RelayConfig) -> RelayGuard {
        let relay = self.relay(cfg);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let join = tokio::spawn(async move {
            relay
                .run_until(async {
                    let _ = rx.await;
                })
                .await
                .unwrap();
        });
        RelayGuard {
            stop: Some(tx),
            join: Some(join),
        }
    }

    /// Relays until no row is pending.
    pub async fn relay_all(&self, relay: &Relay) {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let r = relay.relay_once().await.unwrap();
            if !r.more {
                let n: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM dueq_outbox WHERE relay_op IS NOT NULL",
                )
                .fetch_one(&self.db.pool)
                .await
                .unwrap();
                if n == 0 {
                    return;
                }
            }
            assert!(std::time::Instant::now() < deadline, "relay did not finish");
        }
    }

    pub async fn state(&self, key: &str) -> Option<String> {
        sqlx::query_scalar("SELECT state FROM dueq_outbox WHERE key = $1 ORDER BY id DESC LIMIT 1")
            .bind(key)
            .fetch_optional(&self.db.pool)
            .await
            .unwrap()
    }
}

pub struct RelayGuard {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    join: Option<tokio::task::JoinHandle<()>>,
}

impl RelayGuard {
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(j) = self.join.take() {
            j.await.unwrap();
        }
    }
}

impl Drop for RelayGuard {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}
