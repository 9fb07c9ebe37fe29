//! The dashboard in a real browser: headless Chromium driven through chromedriver
//! (WebDriver, `fantoccini`), against a real `dueq-server` on a free port with a token
//! configured and its own `redis-server` (dueq-testkit). It logs in, watches a queue's count
//! change after an enqueue (htmx polling), retries a dead task, pauses a queue, watches a
//! worker join and leave the workers page, pauses a schedule, opens the scheduled tasks page
//! (the falling-due charts and a task row), runs that task now, retries dead tasks in bulk
//! (the dry run's count, then the confirmed run), purges a queue's dead tasks, follows an
//! active task to the worker holding it (its row and language on the workers page), and
//! saves screenshots for CI to keep: `target/dashboard.png` (the overview), and beside it
//! `dashboard-queue.png` (a queue with its charts), `-login`, `-dead`, `-task`, `-workers`,
//! `-schedules`, `-scheduled`, `-bulk` (a bulk retry's confirmation) and `-active`.
//!
//! Needs Debian's `chromium` and `chromium-driver` (`.ci/run` installs them); without them
//! the test fails and says so.

// Test code panics on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dueq::{Client, Queue, RateLimit, SettingsPatch, TaskId, TaskRef, TaskSpec, TaskState};
use dueq_server::{AppState, Tokens};
use dueq_testkit::{RedisServer, wait_until, wait_until_async};
use fantoccini::{ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::json;

/// Deadline of each condition; htmx polls the live parts every 2 to 3 s.
const DEADLINE: Duration = Duration::from_secs(20);
const TOKEN: &str = "browser-s3cret";

/// An executable on `PATH` (or at one of the Debian paths).
fn find(name: &str) -> Option<PathBuf> {
    let debian = [
        format!("/usr/bin/{name}"),
        format!("/usr/lib/chromium/{name}"),
    ];
    std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(name))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default()
        .into_iter()
        .chain(debian.into_iter().map(PathBuf::from))
        .find(|p| p.is_file())
}

/// chromedriver in its own process group; on drop the whole group (the browser it started
/// included, even after a failed assertion) is killed and the driver reaped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"))
}

/// Text of the first element matching `css`, or "" when there is none (yet).
async fn text(b: &fantoccini::Client, css: &str) -> String {
    match b.find(Locator::Css(css)).await {
        Ok(e) => e.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    }
}

async fn path(b: &fantoccini::Client) -> String {
    let u = b.current_url().await.unwrap();
    match u.query() {
        Some(q) => format!("{}?{q}", u.path()),
        None => u.path().to_owned(),
    }
}

async fn wait_text(b: &fantoccini::Client, css: &str, want: &str) {
    let what = format!("{css} reads {want:?}");
    wait_until_async(
        DEADLINE,
        &what,
        || async move { text(b, css).await == want },
    )
    .await;
}

async fn wait_path(b: &fantoccini::Client, want: &str) {
    let what = format!("the browser is at {want}");
    wait_until_async(DEADLINE, &what, || async move { path(b).await == want }).await;
}

/// Sends one task of `q` to the dead-letter queue with `error`; returns its id.
async fn kill(q: &Queue, key: &str, error: &str) -> TaskId {
    let e = q
        .enqueue(TaskSpec::new(br#"{"order": 7}"#.to_vec()).key(key))
        .await
        .unwrap();
    let c = q.claim(1, None).await.unwrap();
    assert_eq!(c.tasks[0].id, e.id);
    q.nack(&e.id, &c.tasks[0].lease_token, error, None, true)
        .await
        .unwrap();
    e.id
}

/// Runs a few tasks through so the charts have something to show.
async fn some_activity(q: &Queue, n: usize) {
    for i in 0..n {
        q.enqueue(TaskSpec::new(format!("{{\"n\": {i}}}").into_bytes()))
            .await
            .unwrap();
    }
    let c = q.claim(n, None).await.unwrap();
    for t in &c.tasks {
        q.ack(&t.id, &t.lease_token).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_in_chromium() {
    let started = Instant::now();
    let (Some(chromium), Some(driver)) = (find("chromium"), find("chromedriver")) else {
        panic!(
            "the dashboard browser test needs Chromium and its WebDriver: \
             apt-get install -y chromium chromium-driver (.ci/run installs them)"
        );
    };

    // Redis, the library client, and the server with a token on a free port
    let redis = RedisServer::start();
    let client = Client::connect(&redis.url()).await.unwrap();
    let orders = client.queue("orders").unwrap();
    let mail = client.queue("mail").unwrap();
    some_activity(&orders, 12).await;
    some_activity(&mail, 3).await;
    orders
        .enqueue(TaskSpec::new(b"1".to_vec()).delay_ms(3_600_000))
        .await
        .unwrap();
    let dead = kill(
        &orders,
        "order:7:cancel",
        "payment service said <503> & gave up",
    )
    .await;
    let state = AppState::builder(client.clone())
        .tokens(Tokens::new([TOKEN]))
        .build();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(dueq_server::serve(listener, state, async move {
        let _ = stopped.await;
    }));
    let base = format!("http://{addr}");

    // chromedriver on a free port, its log in a temp dir
    let tmp = tempfile::tempdir().unwrap();
    let port = free_port();
    let log = std::fs::File::create(tmp.path().join("chromedriver.log")).unwrap();
    let _driver = Killed(
        Command::new(&driver)
            .arg(format!("--port={port}"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", driver.display())),
    );
    wait_until(DEADLINE, "chromedriver listens", || {
        TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    let profile = tmp.path().join("profile");
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": chromium,
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--window-size=1280,860",
                format!("--user-data-dir={}", profile.display()),
            ],
        }),
    );
    let b = ClientBuilder::new(HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        .unwrap_or_else(|e| {
            let log = std::fs::read_to_string(tmp.path().join("chromedriver.log"));
            panic!(
                "WebDriver session: {e}\nchromedriver log:\n{}",
                log.unwrap_or_default()
            )
        });

    // 1. log in: the dashboard sends us to /login; a wrong token is refused
    b.goto(&format!("{base}/")).await.unwrap();
    wait_path(&b, "/login").await;
    let shots = target_dir();
    std::fs::create_dir_all(&shots).unwrap();
    let shot = async |name: &str| {
        let png = b.screenshot().await.unwrap();
        std::fs::write(shots.join(name), png).unwrap();
    };
    shot("dashboard-login.png").await;
    b.find(Locator::Id("token"))
        .await
        .unwrap()
        .send_keys("nope")
        .await
        .unwrap();
    b.find(Locator::Id("login"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(
        &b,
        "#login-error",
        "That token is not one of the server's tokens.",
    )
    .await;
    b.find(Locator::Id("token"))
        .await
        .unwrap()
        .send_keys(TOKEN)
        .await
        .unwrap();
    b.find(Locator::Id("login"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_path(&b, "/").await;
    let row = r#"tr[data-queue="orders"]"#;
    let scheduled = format!(r#"{row} td[data-count="scheduled"]"#);
    wait_text(&b, &scheduled, "1").await;
    assert_eq!(
        text(&b, &format!(r#"{row} td[data-count="dead"]"#)).await,
        "1"
    );

    // 2. the count changes after an enqueue (htmx polling, no reload)
    b.execute("window.__same_page = true;", vec![])
        .await
        .unwrap();
    orders
        .enqueue(TaskSpec::new(b"2".to_vec()).delay_ms(3_600_000))
        .await
        .unwrap();
    wait_text(&b, &scheduled, "2").await;
    let same = b
        .execute("return window.__same_page === true;", vec![])
        .await
        .unwrap();
    assert_eq!(same, json!(true), "updated in place, not by a page load");

    // 3. retry a dead task from the dead-letter page
    b.goto(&format!("{base}/ui/queues/orders/dead"))
        .await
        .unwrap();
    let retry = format!(r#"tr[data-id="{dead}"] button.retry"#);
    assert!(
        text(&b, &format!(r#"tr[data-id="{dead}"]"#))
            .await
            .contains("<503> & gave up")
    );
    shot("dashboard-dead.png").await;
    b.find(Locator::Css(&format!(r#"tr[data-id="{dead}"] a"#)))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&b, "#task-state", "dead").await;
    assert!(text(&b, "#last-error").await.contains("<503> & gave up"));
    shot("dashboard-task.png").await;
    b.back().await.unwrap();
    b.find(Locator::Css(&retry))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_path(&b, "/ui/queues/orders/dead?done=retried").await;
    wait_text(&b, "#dead-empty", "No dead tasks.").await;
    let t = orders
        .get(&TaskRef::id(dead.as_str()).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(t.state, TaskState::Scheduled);

    // 4. pause a queue from the overview
    b.goto(&format!("{base}/")).await.unwrap();
    let pause = format!("{row} button.pause");
    b.wait()
        .at_most(DEADLINE)
        .for_element(Locator::Css(&pause))
        .await
        .unwrap();
    b.find(Locator::Css(&pause))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_path(&b, "/?done=paused").await;
    wait_text(&b, &format!("{row} .badge"), "paused").await;
    assert!(orders.stats().await.unwrap().paused);
    assert!(!mail.stats().await.unwrap().paused);

    // 5. a queue at its concurrency limit shows as throttled, active against the limit
    mail.update_settings(&SettingsPatch::default().concurrency(Some(1)))
        .await
        .unwrap();
    for i in 0..2 {
        mail.enqueue(TaskSpec::new(format!("{i}").into_bytes()))
            .await
            .unwrap();
    }
    assert_eq!(mail.claim(10, None).await.unwrap().tasks.len(), 1);
    assert!(mail.claim(10, None).await.unwrap().tasks.is_empty());
    let mrow = r#"tr[data-queue="mail"]"#;
    wait_text(&b, &format!(r#"{mrow} td[data-count="active"]"#), "1 / 1").await;
    wait_text(&b, &format!("{mrow} .badge"), "throttled (concurrency)").await;

    // screenshots for CI (the overview, and a queue page with its charts and settings)
    shot("dashboard.png").await;
    orders
        .update_settings(&SettingsPatch::default().rate_limit(Some(RateLimit::new(100, 1_000))))
        .await
        .unwrap();
    b.goto(&format!("{base}/ui/queues/orders")).await.unwrap();
    b.wait()
        .at_most(DEADLINE)
        .for_element(Locator::Css("svg.chart rect"))
        .await
        .unwrap();
    let settings = text(&b, "table[data-settings]").await.to_lowercase();
    assert!(settings.contains("100 per 1000 ms"), "{settings}");
    assert!(settings.contains("concurrency"), "{settings}");
    shot("dashboard-queue.png").await;

    // 5. the workers page: the server itself, then a worker that joins and leaves (polling)
    b.goto(&format!("{base}/ui/workers")).await.unwrap();
    wait_text(&b, r#"#workers tr td:nth-child(2)"#, "server").await;
    let worker = dueq::Worker::builder(client.clone())
        .concurrency(4)
        .heartbeat_ms(200)
        .handle("reports", |_t| async { dueq::Outcome::Success })
        .build()
        .unwrap();
    let id = worker.id().unwrap().to_owned();
    let handle = worker.start();
    let in_hand = format!(r#"tr[data-worker="{id}"] td.in-hand"#);
    wait_text(&b, &in_hand, "0").await;
    assert!(
        text(&b, &format!(r#"tr[data-worker="{id}"]"#))
            .await
            .contains("reports")
    );
    shot("dashboard-workers.png").await;
    handle.shutdown().await.unwrap();
    wait_text(&b, &in_hand, "").await;

    // 6. the schedules page: from the queue page, pause a schedule with its button
    orders
        .set_schedule(
            &dueq::ScheduleSpec::new("nightly-report", b"{}".to_vec())
                .cron("30 2 * * *")
                .tz("Europe/Berlin"),
        )
        .await
        .unwrap();
    b.goto(&format!("{base}/ui/queues/orders")).await.unwrap();
    b.find(Locator::Css(r#"a[href="/ui/queues/orders/schedules"]"#))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_path(&b, "/ui/queues/orders/schedules").await;
    let srow = r#"tr[data-schedule="nightly-report"]"#;
    assert!(text(&b, srow).await.contains("Europe/Berlin"));
    shot("dashboard-schedules.png").await;
    b.find(Locator::Css(&format!("{srow} button.pause")))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_path(&b, "/ui/queues/orders/schedules?done=schedule_paused").await;
    wait_text(&b, &format!("{srow} .badge"), "paused").await;
    assert!(
        orders
            .schedule("nightly-report")
            .await
            .unwrap()
            .unwrap()
            .paused
    );

    // 7. the scheduled page, from the queue page: the charts of what falls due, and the task
    let soon = orders
        .enqueue(
            TaskSpec::new(br#"{"remind": "<soon>"}"#.to_vec())
                .key("order:9:<remind>")
                .delay_ms(10 * 60_000),
        )
        .await
        .unwrap();
    b.goto(&format!("{base}/ui/queues/orders")).await.unwrap();
    b.find(Locator::Css(r#"a[href="/ui/queues/orders/scheduled"]"#))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_path(&b, "/ui/queues/orders/scheduled").await;
    b.wait()
        .at_most(DEADLINE)
        .for_element(Locator::Css("#coming svg.chart rect.c-sched"))
        .await
        .unwrap();
    let coming = text(&b, "#coming").await;
    assert!(
        coming.contains("Falling due per minute, next hour"),
        "{coming}"
    );
    assert!(coming.contains("in the next hour"), "{coming}");
    let trow = format!(r#"tr[data-id="{}"]"#, soon.id);
    assert_eq!(
        text(&b, &format!("{trow} td.key")).await,
        "order:9:<remind>"
    );
    assert!(text(&b, &format!("{trow} td.due")).await.starts_with("in "));
    shot("dashboard-scheduled.png").await;
    b.find(Locator::Css(&format!("{trow} a")))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&b, "#task-state", "scheduled").await;

    // 8. run it now from its page: due now by the Redis clock, back on the page with a notice
    b.find(Locator::Id("run-now"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_path(
        &b,
        &format!("/ui/task?queue=orders&by=id&value={}&done=run_now", soon.id),
    )
    .await;
    wait_text(&b, "#flash", "Task due now: the next free worker takes it.").await;
    let t = orders
        .get(&TaskRef::id(soon.id.as_str()).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(t.state, TaskState::Scheduled);
    assert!(t.due_at_ms < soon.due_at_ms - 9 * 60_000, "moved to now");
    assert!(orders.stats().await.unwrap().due >= 1);

    // 9. bulk retry: the filter form, the dry run's count, then the confirmed run
    let payments = client.queue("payments").unwrap();
    let mut gateway = Vec::new();
    for i in 0..3 {
        gateway.push(
            kill(
                &payments,
                &format!("pay:{i}"),
                "gateway <timeout> after 30 s",
            )
            .await,
        );
    }
    let declined = kill(&payments, "pay:9", "card declined").await;
    b.goto(&format!("{base}/ui/queues/payments/dead"))
        .await
        .unwrap();
    b.find(Locator::Id("bulk-error"))
        .await
        .unwrap()
        .send_keys("gateway <timeout>")
        .await
        .unwrap();
    b.find(Locator::Id("bulk-retry"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&b, "#confirm-count", "3 tasks match").await;
    assert_eq!(
        payments.stats().await.unwrap().dead,
        4,
        "the dry run changes nothing"
    );
    shot("dashboard-bulk.png").await;
    b.find(Locator::Id("confirm"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_path(
        &b,
        "/ui/queues/payments/dead?done=bulk_retried&n=3&refused=0",
    )
    .await;
    wait_text(&b, "#flash", "Retried 3 tasks from the dead-letter queue.").await;
    assert!(
        text(&b, &format!(r#"tr[data-id="{declined}"]"#))
            .await
            .contains("card declined")
    );
    for id in &gateway {
        let t = payments
            .get(&TaskRef::id(id.as_str()).unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!((t.state, t.attempt), (TaskState::Scheduled, 0));
    }

    // 10. purge the queue's dead tasks from its page: the count, then the purge
    b.goto(&format!("{base}/ui/queues/payments")).await.unwrap();
    b.find(Locator::Css("#purge button.purge-dead"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&b, "#confirm-count", "1 dead task").await;
    b.find(Locator::Id("confirm"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_path(&b, "/ui/queues/payments?done=purged_dead&n=1").await;
    wait_text(
        &b,
        "#flash",
        "Purged the dead-letter queue: 1 task deleted.",
    )
    .await;
    wait_text(
        &b,
        r#"tr[data-queue="payments"] td[data-count="dead"]"#,
        "0",
    )
    .await;
    let st = payments.stats().await.unwrap();
    assert_eq!((st.dead, st.scheduled), (0, 3));

    // 11. an active task names the worker holding it; the link leads to that worker's row
    let release = Arc::new(tokio::sync::Semaphore::new(0));
    let held = release.clone();
    let worker = dueq::Worker::builder(client.clone())
        .heartbeat_ms(200)
        .handle("payments", move |_t| {
            let held = held.clone();
            async move {
                let _ = held.acquire().await;
                dueq::Outcome::Success
            }
        })
        .build()
        .unwrap();
    let wid = worker.id().unwrap().to_owned();
    let handle = worker.start();
    b.goto(&format!("{base}/ui/queues/payments/active"))
        .await
        .unwrap();
    let arow = format!(r#"tr[data-id="{}"]"#, gateway[0]);
    let what = format!("{arow} names worker {wid}");
    wait_until_async(DEADLINE, &what, || async {
        b.refresh().await.unwrap();
        text(&b, &format!("{arow} td.worker")).await == wid
    })
    .await;
    let claimed = text(&b, &format!("{arow} td.claimed")).await;
    assert!(claimed == "now" || claimed.ends_with(" ago"), "{claimed}");
    shot("dashboard-active.png").await;
    b.find(Locator::Css(&format!("{arow} td.worker a")))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_path(&b, "/ui/workers").await;
    let target = format!("worker-{wid}");
    wait_until_async(
        DEADLINE,
        "the worker's row is the link's target",
        || async {
            let id = b
                .execute(
                    "var t = document.querySelector('tr:target'); return t ? t.id : null;",
                    vec![],
                )
                .await
                .unwrap();
            id == json!(target)
        },
    )
    .await;
    assert_eq!(
        text(&b, &format!(r#"tr[data-worker="{wid}"] td.language"#)).await,
        "rust"
    );
    release.add_permits(100);
    wait_until_async(DEADLINE, "the held tasks finish", || async {
        payments.stats().await.unwrap().active == 0
    })
    .await;
    handle.shutdown().await.unwrap();

    // logging out ends the session
    b.find(Locator::Css("header button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_path(&b, "/login").await;
    b.goto(&format!("{base}/")).await.unwrap();
    wait_path(&b, "/login").await;

    b.close().await.unwrap();
    let _ = stop.send(());
    server.await.unwrap().unwrap();
    eprintln!(
        "dashboard browser test: {:.1} s; screenshots in {}",
        started.elapsed().as_secs_f64(),
        shots.display()
    );
}
