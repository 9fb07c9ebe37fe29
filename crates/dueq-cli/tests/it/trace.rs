//! Trace context that survives the delay (DESIGN 2.15), end to end: `dueq work` and `dueq
//! serve` export each run as a consumer span to a real OTLP receiver (HTTP/protobuf and gRPC,
//! decoded with the protocol's own types); the run is a child of the producer's span when the
//! task runs at once on its first attempt, else a root linked to it; the command and the
//! webhook receiver get the run's `traceparent`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dueq_testkit::RedisServer;
use dueq_testkit::otlp::{OtlpReceiver, ReceivedSpan};

use crate::{dueq, dueq_json};

const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const PARENT: &str = "b7ad6b7169203331";
const WAIT: Duration = Duration::from_secs(20);
/// OTLP span kind `SPAN_KIND_CONSUMER`; status code `STATUS_CODE_ERROR`.
const CONSUMER: i32 = 5;
const ERROR: i32 = 2;

fn traceparent() -> String {
    format!("00-{TRACE}-{PARENT}-01")
}

/// `dueq work QUEUE -- COMMAND` exporting to `endpoint` by `protocol` (none: no export).
fn worker(url: &str, queue: &str, export: Option<(&str, &str)>, command: &str) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dueq"));
    cmd.args(["--redis", url, "work", queue, "--", "sh", "-c", command])
        .env_remove("DUEQ_LOG")
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .env("OTEL_SERVICE_NAME", "orders-worker")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    for v in [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_SDK_DISABLED",
        "OTEL_TRACES_EXPORTER",
    ] {
        cmd.env_remove(v);
    }
    if let Some((endpoint, protocol)) = export {
        cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
            .env("OTEL_EXPORTER_OTLP_PROTOCOL", protocol);
    }
    cmd.spawn().unwrap()
}

fn stop(mut child: Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
}

fn key_is(key: &str) -> impl Fn(&ReceivedSpan) -> bool + '_ {
    move |s| s.attr("dueq.task.key").as_deref() == Some(key)
}

/// The lines the command appended: `key attempt due claimed traceparent`.
fn runs(path: &std::path::Path) -> Vec<Vec<String>> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| l.split(' ').map(str::to_owned).collect())
        .collect()
}

/// Checks the attributes every run span carries, and the lateness against the claim the
/// command saw (Redis time): the span's is from the handler's start, a little later.
fn check_run(s: &ReceivedSpan, queue: &str, run: &[String]) {
    assert_eq!(s.span.kind, CONSUMER, "{s:?}");
    // the messaging attributes, not the process's source paths and threads
    for private in ["code.file.path", "thread.id", "busy_ns", "target"] {
        assert_eq!(s.attr(private), None, "{private} on {s:?}");
    }
    assert_eq!(s.span.name, format!("process {queue}"));
    assert_eq!(s.service, "orders-worker");
    assert_eq!(s.attr("messaging.system").as_deref(), Some("dueq"));
    assert_eq!(s.attr("messaging.destination.name").as_deref(), Some(queue));
    assert_eq!(
        s.attr("messaging.operation.type").as_deref(),
        Some("process")
    );
    assert!(
        s.attr("messaging.message.id")
            .is_some_and(|id| id.len() == 12)
    );
    assert_eq!(s.int("dueq.task.attempt").to_string(), run[1]);
    let due: i64 = run[2].parse().unwrap();
    let claimed: i64 = run[3].parse().unwrap();
    assert_eq!(s.int("dueq.task.due_at_ms"), due);
    let lateness = s.int("dueq.task.lateness_ms");
    assert!(
        (claimed - due..claimed - due + 1_000).contains(&lateness),
        "lateness {lateness} against claimed - due = {}",
        claimed - due
    );
    // the command got the run's own span as its parent
    assert_eq!(
        run[4],
        format!("00-{}-{}-01", s.trace_id(), s.span_id()),
        "TRACEPARENT of the command"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_continues_the_trace_only_when_it_runs_at_once() {
    let redis = RedisServer::start();
    let url = redis.url();
    let otlp = OtlpReceiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs.txt");
    let (ok, r) = dueq_json(
        &url,
        &[
            "settings",
            "set",
            "orders",
            r#"{"backoff": {"base_ms": 200, "factor": 1.0, "max_ms": 200}}"#,
        ],
    );
    assert!(ok, "{r}");
    let tp = traceparent();
    let header = format!("traceparent={tp}");
    for args in [
        vec!["--key", "now"],
        vec!["--key", "later", "--delay", "2s"],
        vec!["--key", "retry"],
    ] {
        let mut all = vec![
            "enqueue",
            "orders",
            "--header",
            &header,
            "--header",
            "x-tenant=acme",
        ];
        all.extend(args);
        let (ok, r) = dueq_json(&url, &all);
        assert!(ok, "{r}");
    }
    // a schedule's ticks link to the trace context of its template
    let (ok, r) = dueq_json(
        &url,
        &[
            "schedule",
            "set",
            "orders",
            "nightly",
            "--every-ms",
            "1000",
            "--header",
            &header,
        ],
    );
    assert!(ok, "{r}");
    let command = format!(
        "echo \"$DUEQ_TASK_KEY $DUEQ_TASK_ATTEMPT $DUEQ_TASK_DUE_AT_MS $DUEQ_TASK_CLAIMED_AT_MS \
         $TRACEPARENT\" >> {}; [ \"$DUEQ_TASK_KEY\" != retry ] || [ \"$DUEQ_TASK_ATTEMPT\" -gt 1 ]",
        out.display()
    );
    let w = worker(
        &url,
        "orders",
        Some((&otlp.http_endpoint, "http/protobuf")),
        &command,
    );

    let now = otlp.wait_for(WAIT, "of task now", key_is("now")).await;
    let run = |key: &str, attempt: &str| {
        runs(&out)
            .into_iter()
            .find(|r| r[0] == key && r[1] == attempt)
            .unwrap_or_else(|| panic!("no run of {key} attempt {attempt}: {:?}", runs(&out)))
    };
    // due at once, first attempt: a child of the producer's span
    assert_eq!(
        (now.trace_id(), now.parent_span_id()),
        (TRACE.into(), PARENT.into())
    );
    assert!(now.links().is_empty());
    check_run(&now, "orders", &run("now", "1"));
    assert_eq!(now.attr("dueq.task.outcome").as_deref(), Some("succeeded"));

    // delayed: a new trace, linked to the producer's span
    let later = otlp.wait_for(WAIT, "of task later", key_is("later")).await;
    assert_ne!(later.trace_id(), TRACE);
    assert_eq!(later.parent_span_id(), "");
    assert_eq!(later.links(), vec![(TRACE.to_owned(), PARENT.to_owned())]);
    check_run(&later, "orders", &run("later", "1"));

    // retried: the first attempt (at once) is a child and failed; the second is linked
    let first = otlp
        .wait_for(WAIT, "of retry's first attempt", |s| {
            key_is("retry")(s) && s.int("dueq.task.attempt") == 1
        })
        .await;
    assert_eq!(first.parent_span_id(), PARENT);
    assert_eq!(first.attr("dueq.task.outcome").as_deref(), Some("retried"));
    let status = first.span.status.clone().unwrap_or_default();
    assert_eq!(status.code, ERROR, "{status:?}");
    assert!(status.message.contains("exit"), "{status:?}");
    check_run(&first, "orders", &run("retry", "1"));
    let second = otlp
        .wait_for(WAIT, "of retry's second attempt", |s| {
            key_is("retry")(s) && s.int("dueq.task.attempt") == 2
        })
        .await;
    assert_eq!(second.parent_span_id(), "");
    assert_eq!(second.links(), vec![(TRACE.to_owned(), PARENT.to_owned())]);
    assert_eq!(
        second.attr("dueq.task.outcome").as_deref(),
        Some("succeeded")
    );
    check_run(&second, "orders", &run("retry", "2"));

    // a tick: a root linked to the template's trace context
    let tick = otlp
        .wait_for(WAIT, "of a tick", |s| {
            s.attr("dueq.task.key")
                .is_some_and(|k| k.starts_with("schedule:nightly:"))
        })
        .await;
    assert_eq!(tick.parent_span_id(), "");
    assert_eq!(tick.links(), vec![(TRACE.to_owned(), PARENT.to_owned())]);
    stop(w);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_export_only_a_run_at_once_hands_the_producers_context_on() {
    let redis = RedisServer::start();
    let url = redis.url();
    let dir = tempfile::tempdir().unwrap();
    let tp = traceparent();
    let header = format!("traceparent={tp}");
    for (key, delay) in [("now", "0ms"), ("later", "1s")] {
        let out = dueq(
            &url,
            &[
                "enqueue",
                "q",
                "--key",
                key,
                "--delay",
                delay,
                "--header",
                &header,
                "--header",
                "tracestate=v=1",
                "--header",
                "X-Tenant=acme",
            ],
        );
        assert!(out.status.success());
    }
    let command = format!(
        "printf '%s\\n%s\\n%s\\n' \"$TRACEPARENT\" \"$TRACESTATE\" \"$DUEQ_TASK_HEADERS\" \
         > {}/$DUEQ_TASK_KEY.tmp && mv {0}/$DUEQ_TASK_KEY.tmp {0}/$DUEQ_TASK_KEY.txt",
        dir.path().display()
    );
    let w = worker(&url, "q", None, &command);
    let lines = |key: &str| -> Vec<String> {
        std::fs::read_to_string(dir.path().join(format!("{key}.txt")))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    };
    dueq_testkit::wait_until(WAIT, "both runs", || {
        lines("now").len() == 3 && lines("later").len() == 3
    });
    stop(w);
    // at once: what the command calls joins the producer's trace
    let now = lines("now");
    assert_eq!((now[0].as_str(), now[1].as_str()), (tp.as_str(), "v=1"));
    let headers: serde_json::Value = serde_json::from_str(&now[2]).unwrap();
    assert_eq!(headers["x-tenant"], "acme");
    assert_eq!(headers["traceparent"], tp.as_str());
    // delayed: no run span to hang it under, and the producer's trace is not stretched
    let later = lines("later");
    assert_eq!((later[0].as_str(), later[1].as_str()), ("", ""));
    let headers: serde_json::Value = serde_json::from_str(&later[2]).unwrap();
    assert_eq!(headers["traceparent"], tp.as_str());
}

/// A webhook receiver: answers 200 to every request and keeps each request's head.
fn webhook_receiver() -> (String, Arc<Mutex<Vec<String>>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", l.local_addr().unwrap());
    let heads = Arc::new(Mutex::new(Vec::new()));
    let keep = heads.clone();
    std::thread::spawn(move || {
        for s in l.incoming().map_while(Result::ok) {
            let keep = keep.clone();
            std::thread::spawn(move || serve_one(s, &keep));
        }
    });
    (url, heads)
}

fn serve_one(mut s: TcpStream, keep: &Mutex<Vec<String>>) {
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut head = String::new();
    let mut len = 0;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap_or(0);
        }
        head.push_str(&line.to_ascii_lowercase());
    }
    let mut body = vec![0; len];
    let _ = r.read_exact(&mut body);
    keep.lock().unwrap().push(head);
    let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
}

fn header_of(head: &str, name: &str) -> Option<String> {
    head.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .map(|v| v.trim().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_exports_by_grpc_and_hands_the_run_to_the_webhook() {
    let redis = RedisServer::start();
    let url = redis.url();
    let otlp = OtlpReceiver::start().await;
    let (hook, heads) = webhook_receiver();
    let (ok, r) = dueq_json(&url, &["webhook", "set", "orders", &hook]);
    assert!(ok, "{r}");
    let s = crate::serve::serve(
        &["--redis", &url],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.grpc_endpoint.as_str()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ("OTEL_SERVICE_NAME", "orders-hooks"),
        ],
    );
    // the enqueue request's own traceparent goes into the task's headers
    let body = r#"{"payload": {"order": 42}, "key": "order:42", "headers": {"X-Tenant": "acme"}}"#;
    let mut c = TcpStream::connect(&s.addr).unwrap();
    write!(
        c,
        "POST /v1/queues/orders/tasks HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\
         content-type: application/json\r\ntraceparent: {}\r\ncontent-length: {}\r\n\r\n{body}",
        traceparent(),
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    c.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");

    let run = otlp
        .wait_for(WAIT, "of the delivery", key_is("order:42"))
        .await;
    assert_eq!(run.service, "orders-hooks");
    assert_eq!(run.span.kind, CONSUMER);
    assert_eq!(
        (run.trace_id(), run.parent_span_id()),
        (TRACE.into(), PARENT.into())
    );
    assert_eq!(run.attr("dueq.task.outcome").as_deref(), Some("succeeded"));
    let head = heads.lock().unwrap().first().cloned().expect("a delivery");
    assert_eq!(
        header_of(&head, "traceparent"),
        Some(format!("00-{TRACE}-{}-01", run.span_id())),
        "{head}"
    );
    assert_eq!(
        header_of(&head, "dueq-header-x-tenant").as_deref(),
        Some("acme")
    );
    drop(s);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_stopped_at_shutdown_is_exported_as_handed_back() {
    let redis = RedisServer::start();
    let url = redis.url();
    let otlp = OtlpReceiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let (ok, r) = dueq_json(&url, &["enqueue", "slow", "--key", "slow:1"]);
    assert!(ok, "{r}");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dueq"));
    cmd.args([
        "--redis",
        &url,
        "work",
        "slow",
        "--shutdown-grace",
        "100ms",
        "--",
    ])
    .args([
        "sh",
        "-c",
        &format!("touch {}; sleep 30", started.display()),
    ])
    .env_remove("DUEQ_LOG")
    .env("OTEL_EXPORTER_OTLP_ENDPOINT", &otlp.http_endpoint)
    .env("OTEL_BSP_SCHEDULE_DELAY", "100")
    .stdout(Stdio::null())
    .stderr(Stdio::inherit());
    let w = cmd.spawn().unwrap();
    dueq_testkit::wait_until(WAIT, "the command started", || started.exists());
    stop(w);
    let run = otlp
        .wait_for(WAIT, "of the stopped run", key_is("slow:1"))
        .await;
    assert_eq!(
        run.attr("dueq.task.outcome").as_deref(),
        Some("handed_back")
    );
    assert_eq!(run.span.status.clone().unwrap_or_default().code, ERROR);
}
