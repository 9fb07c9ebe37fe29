//! `dueq webhook set | get | clear` round-trip through a real server.

use dueq_testkit::RedisServer;

use crate::{dueq, dueq_json};

#[test]
fn set_get_clear() {
    let server = RedisServer::start();
    let url = server.url();

    let out = dueq(&url, &["webhook", "set", "orders", "ftp://example.com/"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("http://"));
    let out = dueq(
        &url,
        &[
            "webhook",
            "set",
            "orders",
            "http://h/",
            "--concurrency",
            "0",
        ],
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("concurrency"));
    let (ok, _) = dueq_json(&url, &["webhook", "get", "orders"]);
    assert!(!ok, "a refused set must write nothing");

    let (ok, s) = dueq_json(
        &url,
        &[
            "webhook",
            "set",
            "orders",
            "https://example.com/hook",
            "--concurrency",
            "4",
            "--timeout-ms",
            "2500",
        ],
    );
    assert!(ok, "{s}");
    assert_eq!(s["url"], "https://example.com/hook");
    assert_eq!(s["concurrency"], 4);
    assert_eq!(s["timeout_ms"], 2500);
    assert_eq!(s["secret_generated"], true);
    let secret = s["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("whsec_"), "{secret}");
    assert_eq!(dueq::signing_key(&secret).len(), 32, "{secret}");

    let (ok, g) = dueq_json(&url, &["webhook", "get", "orders"]);
    assert!(ok);
    assert_eq!(g["url"], "https://example.com/hook");
    assert!(g.get("secret").is_none(), "{g}");
    let (ok, g) = dueq_json(&url, &["webhook", "get", "orders", "--show-secret"]);
    assert!(ok);
    assert_eq!(g["secret"], secret.as_str());

    let text = dueq(&url, &["webhook", "get", "orders"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("orders -> https://example.com/hook concurrency=4"),
        "{text}"
    );
    assert!(!text.contains(&secret));

    let (ok, c) = dueq_json(&url, &["webhook", "clear", "orders"]);
    assert!(ok);
    assert_eq!(c["removed"], true);
    let (ok, c) = dueq_json(&url, &["webhook", "clear", "orders"]);
    assert!(!ok, "clearing twice must not report success");
    assert_eq!(c["removed"], false);
    let (ok, _) = dueq_json(&url, &["webhook", "get", "orders"]);
    assert!(!ok);
}
