//! Integration tests: real `redis-server` processes.

use std::time::Duration;

use dueq_testkit::{
    RedisCluster, RedisServer, hlen, info_field, keys_matching, slowlog_max_us, wait_until,
    wait_until_async, zcard,
};
use redis::{AsyncCommands, Commands};

/// Skip (pass) when there is no redis-server to run.
macro_rules! require_redis {
    () => {
        if !RedisServer::available() {
            eprintln!("redis-server not on PATH; skipping");
            return;
        }
    };
}

#[test]
fn unix_server_answers_ping_set_get() {
    require_redis!();
    let server = RedisServer::start();
    assert!(
        server.url().starts_with("redis+unix:///"),
        "{}",
        server.url()
    );
    assert_eq!(server.port(), None);
    let mut conn = redis::Client::open(server.url())
        .expect("open url")
        .get_connection()
        .expect("connect");
    let pong: String = redis::cmd("PING").query(&mut conn).expect("PING");
    assert_eq!(pong, "PONG");
    let _: () = conn.set("k", "v").expect("SET");
    let v: String = conn.get("k").expect("GET");
    assert_eq!(v, "v");
    assert_eq!(
        info_field(&mut conn, "server", "process_id"),
        Some(server.pid().to_string())
    );
    assert_eq!(
        info_field(&mut conn, "persistence", "aof_enabled").as_deref(),
        Some("0")
    );
    assert!(server.dir().exists());
}

#[test]
fn tcp_server_works_and_extra_args_apply() {
    require_redis!();
    let server = RedisServer::builder()
        .tcp()
        .arg("--maxmemory-policy")
        .arg("allkeys-lru")
        .start();
    let port = server.port().expect("tcp mode has a port");
    assert_eq!(server.url(), format!("redis://127.0.0.1:{port}"));
    let mut conn = server.conn();
    let _: () = conn.set("k", 42).expect("SET");
    let v: i64 = conn.get("k").expect("GET");
    assert_eq!(v, 42);
    let policy: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query(&mut conn)
        .expect("CONFIG GET");
    assert_eq!(policy, ["maxmemory-policy", "allkeys-lru"]);
}

#[test]
fn kill9_and_restart_with_aof_keeps_data() {
    require_redis!();
    for tcp in [false, true] {
        let builder = RedisServer::builder().appendonly(true);
        let mut server = if tcp { builder.tcp() } else { builder }.start();
        let (url, port) = (server.url(), server.port());
        let _: () = server.conn().set("survivor", "yes").expect("SET");
        let old_pid = server.pid();

        server.kill9();
        assert!(!server.is_running());
        assert!(server.client().get_connection().is_err(), "server is dead");

        server.restart();
        assert!(server.is_running());
        assert_ne!(server.pid(), old_pid);
        assert_eq!((server.url(), server.port()), (url, port));
        let v: Option<String> = server.conn().get("survivor").expect("GET");
        assert_eq!(v.as_deref(), Some("yes"), "tcp={tcp}");
    }
}

#[test]
fn stop_is_graceful_and_dir_can_be_reused() {
    require_redis!();
    let data = tempfile::tempdir().expect("tempdir");
    let mut first = RedisServer::builder()
        .appendonly(true)
        .dir(data.path())
        .start();
    let _: () = first.conn().set("k", "v").expect("SET");
    first.stop();
    assert!(!first.is_running());
    drop(first);
    assert!(data.path().exists(), "a caller-provided dir is not deleted");

    let second = RedisServer::builder()
        .appendonly(true)
        .dir(data.path())
        .start();
    let v: Option<String> = second.conn().get("k").expect("GET");
    assert_eq!(v.as_deref(), Some("v"));
}

#[test]
fn replica_follows_master() {
    require_redis!();
    let master = RedisServer::builder().tcp().start();
    let replica = RedisServer::builder().replica_of(&master).start();
    let _: () = master.conn().set("rk", "rv").expect("SET on master");
    let mut rconn = replica.conn();
    assert_eq!(
        info_field(&mut rconn, "replication", "role").as_deref(),
        Some("slave")
    );
    wait_until(
        Duration::from_secs(10),
        "the key reaches the replica",
        || {
            rconn
                .get::<_, Option<String>>("rk")
                .expect("GET on replica")
                == Some("rv".into())
        },
    );
}

#[test]
fn helpers_read_server_state() {
    require_redis!();
    let server = RedisServer::builder()
        .arg("--enable-debug-command")
        .arg("yes")
        .start();
    let mut conn = server.conn();
    let _: () = conn.zadd("q:z", "a", 1).expect("ZADD");
    let _: () = conn.zadd("q:z", "b", 2).expect("ZADD");
    let _: () = conn.hset("q:h", "f", "v").expect("HSET");
    for i in 0..2500 {
        let _: () = conn.set(format!("other:{i}"), i).expect("SET");
    }
    assert_eq!(zcard(&mut conn, "q:z"), 2);
    assert_eq!(zcard(&mut conn, "missing"), 0);
    assert_eq!(hlen(&mut conn, "q:h"), 1);
    assert_eq!(keys_matching(&mut conn, "q:*"), ["q:h", "q:z"]);
    assert_eq!(keys_matching(&mut conn, "other:*").len(), 2500);
    assert_eq!(info_field(&mut conn, "server", "no_such_field"), None);

    let _: () = redis::cmd("SLOWLOG")
        .arg("RESET")
        .query(&mut conn)
        .expect("RESET");
    assert_eq!(slowlog_max_us(&mut conn), 0);
    let _: () = redis::cmd("DEBUG")
        .arg("SLEEP")
        .arg("0.02")
        .query(&mut conn)
        .expect("DEBUG SLEEP");
    // slowlog-log-slower-than defaults to 10000 µs.
    assert!(slowlog_max_us(&mut conn) >= 20_000);
}

#[tokio::test]
async fn async_connection_and_wait_until_async() {
    require_redis!();
    let server = RedisServer::start();
    let conn = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .expect("async connect");
    let mut writer_conn = conn.clone();
    let writer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let _: () = writer_conn.set("late", 1).await.expect("SET");
    });
    wait_until_async(Duration::from_secs(5), "key `late` is visible", || {
        let mut conn = conn.clone();
        async move { conn.exists::<_, bool>("late").await.expect("EXISTS") }
    })
    .await;
    writer.await.expect("writer task");
    let v: i64 = conn.clone().get("late").await.expect("GET");
    assert_eq!(v, 1);
}

#[test]
fn three_master_cluster_serves_keys_on_all_slots() {
    require_redis!();
    let cluster = RedisCluster::start(3);
    assert_eq!(cluster.nodes().len(), 3);
    assert_eq!(cluster.urls().len(), 3);
    let mut conn = cluster.client().get_connection().expect("cluster connect");
    // Keys chosen to hash to slots owned by different masters.
    let keys = ["a", "b", "c", "foo", "bar", "{user1}:x", "{user2}:x"];
    for (i, key) in keys.iter().enumerate() {
        let _: () = conn.set(*key, i).expect("SET");
    }
    for (i, key) in keys.iter().enumerate() {
        let v: usize = conn.get(*key).expect("GET");
        assert_eq!(v, i, "{key}");
    }
    // The keys really are spread: every master holds at least one of them.
    for node in cluster.nodes() {
        let n: usize = redis::cmd("DBSIZE")
            .query(&mut node.conn())
            .expect("DBSIZE");
        assert!(n > 0, "node {} holds none of the keys", node.url());
    }
    for node in cluster.nodes() {
        let mut c = node.conn();
        assert_eq!(
            info_field(&mut c, "cluster", "cluster_enabled").as_deref(),
            Some("1")
        );
    }
}

/// The failover steps of `dueq chaos --cluster`: a killed master's replica is promoted, the
/// killed node comes back on its port and data as the new master's replica.
#[test]
fn killed_master_rejoins_as_replica_of_the_promoted_one() {
    require_redis!();
    let mut cluster = RedisCluster::start_with_replicas(3, 1);
    let masters = cluster.masters_with_replica();
    assert_eq!(masters, [0, 1, 2]);
    let slot = cluster.slot_of_key("k");
    let victim = cluster.master_of_slot(slot);
    cluster.kill9(victim);
    let promoted = cluster.wait_for_promotion(victim, Duration::from_secs(30));
    assert_eq!(cluster.master_of_slot(slot), promoted);
    assert!(!cluster.masters_with_replica().contains(&promoted));
    cluster.restart(victim);
    let master = cluster.wait_for_rejoin(victim, Duration::from_secs(30));
    assert_eq!(master, promoted);
    assert_eq!(cluster.replicas_of(promoted), [victim]);
    assert!(cluster.masters_with_replica().contains(&promoted));
}

/// A `try_` form reports what the panicking form panics with.
#[test]
fn try_start_returns_the_error_the_start_panics_with() {
    require_redis!();
    let e = RedisServer::builder()
        .arg("--no-such-option")
        .arg("x")
        .try_start()
        .unwrap_err();
    assert!(
        e.to_string().contains("redis-server failed to start"),
        "{e}"
    );
}

#[test]
#[should_panic(expected = "redis-server failed to start")]
fn bad_arguments_panic_with_the_log() {
    if !RedisServer::available() {
        panic!("redis-server failed to start (skipped: not on PATH)");
    }
    let _ = RedisServer::builder()
        .arg("--no-such-option")
        .arg("x")
        .start();
}
