//! Bounds graceful shutdown: connections still open a grace period after the shutdown signal
//! are closed.
//!
//! The accept loop (`connections`) with graceful shutdown waits for every connection to
//! finish. The request time limit (`AppState::request_timeout_ms`, 408) ends a handler that
//! waits on a stalled body and the header-read timeout a request head that never ends (when
//! it is not turned off), but a client can also stall after the handler returned (not
//! reading a large answer); hyper would wait for it forever.
//! [`Guarded`] wraps the listener so that every accepted connection fails its next read or
//! write once the kill signal is sent, which ends the connection's task and lets `serve`
//! return.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::serve::Listener;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::watch;

/// A listener whose connections are closed when `kill` turns `true` (or its sender is
/// dropped).
pub(crate) struct Guarded<L> {
    inner: L,
    kill: watch::Receiver<bool>,
}

impl<L> Guarded<L> {
    pub(crate) fn new(inner: L, kill: watch::Receiver<bool>) -> Self {
        Self { inner, kill }
    }
}

impl<L: Listener> Listener for Guarded<L> {
    type Io = Killable<L::Io>;
    type Addr = L::Addr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (io, addr) = self.inner.accept().await;
        let mut kill = self.kill.clone();
        let killed = Box::pin(async move {
            // Err: the sender is gone, which also means "stop".
            let _ = kill.wait_for(|k| *k).await;
        });
        (
            Killable {
                io,
                killed,
                dead: false,
            },
            addr,
        )
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// A connection that fails every read and write once its listener's kill signal is sent.
pub(crate) struct Killable<T> {
    io: T,
    killed: Pin<Box<dyn Future<Output = ()> + Send>>,
    dead: bool,
}

impl<T> Killable<T> {
    /// Whether the kill signal was sent (registers the task to be woken when it is).
    fn dead(&mut self, cx: &mut Context<'_>) -> bool {
        if !self.dead && self.killed.as_mut().poll(cx).is_ready() {
            self.dead = true;
        }
        self.dead
    }
}

fn closed() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "connection closed: the server shut down",
    )
}

impl<T: AsyncRead + Unpin> AsyncRead for Killable<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.dead(cx) {
            return Poll::Ready(Err(closed()));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Killable<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.dead(cx) {
            return Poll::Ready(Err(closed()));
        }
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.dead(cx) {
            return Poll::Ready(Err(closed()));
        }
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.dead(cx) {
            return Poll::Ready(Err(closed()));
        }
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
