//! The HTTP/1.1 accept loop of [`serve`](crate::serve) and [`serve_starting`](crate::serve_starting):
//! hyper's connection builder, plus the connection limits of [`HttpOptions`] (header-read
//! timeout, idle keep-alive timeout, most open connections), and graceful shutdown.
//!
//! Why not `axum::serve`: it takes no options (no timer, so no timeout at all; a client
//! sending one header byte every 10 s held its connection forever). hyper's own
//! `header_read_timeout` is a single timer which in hyper 1.x also runs over the idle wait
//! between requests (hyperium/hyper#3828), so it cannot give a short head limit with a
//! longer keep-alive: [`Paced`] keeps the two apart. It parses nothing: it only knows whether the connection is busy with a request
//! ([`Busy`], held from the service call until the answer's body is done; its end wakes the
//! reading task) and whether bytes came in since the last answer, and fails the next read
//! when the phase's deadline passed, which makes hyper close the connection.
//!
//! The cap: a slot (semaphore permit) is taken before each accept and held by the
//! connection's task, so at the cap the loop stops accepting and new connections wait in the
//! kernel's listen backlog (see [`HttpOptions::max_connections`]).

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::serve::Listener;
use futures_util::task::AtomicWaker;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::{Instant, Sleep};
use tower::Service;

use crate::options::HttpOptions;

/// Serves `app` on `listener` until `signal` completes; then stops accepting, asks every
/// connection to close after its request in flight (an idle one closes at once) and waits
/// for all of them to end.
pub(crate) async fn run<L: Listener>(
    mut listener: L,
    app: Router,
    opts: HttpOptions,
    signal: impl Future<Output = ()>,
) {
    let max = opts.max_connections.clamp(1, Semaphore::MAX_PERMITS);
    let slots = Arc::new(Semaphore::new(max));
    let (stop, stopping) = watch::channel(false);
    // every connection task holds a receiver: `closed()` once all of them ended
    let (all_done, done) = watch::channel(());
    let mut signal = pin!(signal);
    let mut full = false;
    loop {
        let slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                if !full {
                    tracing::warn!(
                        max_connections = max,
                        "connection cap reached: new connections wait in the listen backlog \
                         until open ones close"
                    );
                }
                full = true;
                tokio::select! {
                    slot = slots.clone().acquire_owned() => match slot {
                        Ok(slot) => slot,
                        // never closed; stop serving rather than spin if it were
                        Err(_) => break,
                    },
                    () = &mut signal => break,
                }
            }
        };
        if full && slots.available_permits() > max / 10 {
            tracing::info!("open connections back under the cap");
            full = false;
        }
        let (io, _addr) = tokio::select! {
            conn = listener.accept() => conn,
            () = &mut signal => break,
        };
        tokio::spawn(connection(
            io,
            app.clone(),
            opts,
            slot,
            stopping.clone(),
            done.clone(),
        ));
    }
    stop.send_replace(true);
    drop(listener);
    drop(done);
    all_done.closed().await;
}

/// Serves one connection until it ends, closes on a timeout, or shuts down gracefully.
async fn connection<I>(
    io: I,
    app: Router,
    opts: HttpOptions,
    _slot: OwnedSemaphorePermit,
    mut stopping: watch::Receiver<bool>,
    _done: watch::Receiver<()>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let shared = Arc::new(Shared::default());
    let io = TokioIo::new(Paced::new(io, shared.clone(), opts));
    let service = hyper::service::service_fn(move |req: axum::http::Request<Incoming>| {
        let busy = Busy::start(shared.clone());
        let mut app = app.clone();
        async move {
            // Router's poll_ready is always ready
            let res = match app.call(req).await {
                Ok(res) => res,
                Err(never) => match never {},
            };
            // the connection is busy until the answer's body is done (or dropped)
            Ok::<_, Infallible>(res.map(|body| {
                Body::new(body.map_frame(move |frame| {
                    let _held = &busy;
                    frame
                }))
            }))
        }
    });
    let mut builder = http1::Builder::new();
    // the head and idle limits are Paced's (module docs); hyper's one timer stays off
    builder.header_read_timeout(None);
    let mut conn = pin!(builder.serve_connection(io, service));
    let mut asked = false;
    loop {
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "connection ended");
                }
                break;
            }
            _ = stopping.wait_for(|s| *s), if !asked => {
                asked = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

/// What the service tells the connection's [`Paced`] reader.
#[derive(Debug, Default)]
struct Shared {
    /// Requests whose head is in and whose answer is not done yet.
    busy: AtomicUsize,
    /// Answers done, ever (a change: a new idle period began).
    finished: AtomicU64,
    /// The task that last read: woken when an answer is done, since hyper, whose last read
    /// (while busy) went pending, waits for the socket and would not read again to start the
    /// idle deadline.
    reader: AtomicWaker,
}

/// Held from a request's service call until its answer's body is done or dropped.
struct Busy(Arc<Shared>);

impl Busy {
    fn start(shared: Arc<Shared>) -> Self {
        shared.busy.fetch_add(1, Ordering::SeqCst);
        Self(shared)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        // `finished` first: a reader that sees `busy` 0 sees the new count too
        self.0.finished.fetch_add(1, Ordering::SeqCst);
        self.0.busy.fetch_sub(1, Ordering::SeqCst);
        self.0.reader.wake();
    }
}

/// Which limit runs while no request is busy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// A request head is being read (from the accept, or from the first byte after an
    /// answer).
    Head,
    /// Nothing came since the last answer.
    Idle,
}

/// A connection whose reads fail with `TimedOut` once the deadline of its phase passed
/// while no request is busy.
struct Paced<T> {
    io: T,
    shared: Arc<Shared>,
    head: Option<Duration>,
    idle: Option<Duration>,
    wait: Wait,
    /// `shared.finished` when the phase was last set.
    seen: u64,
    deadline: Option<Pin<Box<Sleep>>>,
}

impl<T> Paced<T> {
    fn new(io: T, shared: Arc<Shared>, opts: HttpOptions) -> Self {
        let ms = |ms: u64| (ms > 0).then(|| Duration::from_millis(ms));
        let mut p = Self {
            io,
            shared,
            head: ms(opts.header_read_timeout_ms),
            idle: ms(opts.idle_timeout_ms),
            wait: Wait::Head,
            seen: 0,
            deadline: None,
        };
        p.enter(Wait::Head);
        p
    }

    /// Starts phase `wait` now, with its deadline.
    fn enter(&mut self, wait: Wait) {
        self.wait = wait;
        let limit = match wait {
            Wait::Head => self.head,
            Wait::Idle => self.idle,
        };
        match (limit, &mut self.deadline) {
            (None, d) => *d = None,
            (Some(limit), Some(sleep)) => sleep.as_mut().reset(Instant::now() + limit),
            (Some(limit), d) => *d = Some(Box::pin(tokio::time::sleep(limit))),
        }
    }

    fn timed_out(&self) -> io::Error {
        let what = match self.wait {
            Wait::Head => "no complete request head within the header-read timeout",
            Wait::Idle => "idle keep-alive connection closed",
        };
        io::Error::new(io::ErrorKind::TimedOut, what)
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Paced<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        this.shared.reader.register(cx.waker());
        if this.shared.busy.load(Ordering::SeqCst) > 0 {
            // the request time limit bounds a busy connection
            return Pin::new(&mut this.io).poll_read(cx, buf);
        }
        let finished = this.shared.finished.load(Ordering::SeqCst);
        if finished != this.seen {
            this.seen = finished;
            this.enter(Wait::Idle);
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if this.wait == Wait::Idle && buf.filled().len() > before {
                    this.enter(Wait::Head);
                }
                return Poll::Ready(Ok(()));
            }
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => {}
        }
        if let Some(sleep) = &mut this.deadline
            && sleep.as_mut().poll(cx).is_ready()
        {
            let e = this.timed_out();
            tracing::debug!(error = %e, "closing a connection");
            return Poll::Ready(Err(e));
        }
        Poll::Pending
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Paced<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
