//! The node's HTTP connections: accepted, served (HTTP/1.1 with upgrades, and HTTP/2) and, at
//! shutdown, closed gracefully, as `axum::serve(..).with_graceful_shutdown(..)` does, with one
//! difference: each connection's task is polled through [`Polled`].
//!
//! Why: hyper's HTTP/1 server polls the connection and the request's handler in one task, and
//! the request body's channel between the two signals the other side with that task's own
//! waker. So each request with a body wakes its connection's task while the task is running.
//! Tokio reschedules a task woken while it runs as a yield: to the back of the run queue, and
//! it wakes an idle worker thread to come and take it (a futex wake, and the other thread's
//! two context switches, per request; measured on one node at 2,000 calls/s: one such wake
//! per call, and a worker thread that finds nothing to do). Through [`Polled`], a wake that
//! comes while the connection is being polled means "poll again now", in the same poll; one
//! that comes between polls wakes the task as before.

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use axum::Router;
use axum::serve::Listener;
use futures_util::FutureExt as _;
use futures_util::task::AtomicWaker;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::sync::watch;

/// Serves `router` on `listener` until `shutdown` resolves; then accepts no more connections,
/// tells each open one to finish gracefully (HTTP/1.1: after its request in flight; HTTP/2: a
/// GOAWAY) and resolves once every one has closed. Upgraded connections (WebSockets) run in
/// tasks of their own and are the caller's to close.
pub async fn serve<L>(
    mut listener: L,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) where
    L: Listener,
{
    // Connections watch `stop` close; the node waits for every `open` receiver to drop.
    let (stop, stop_rx) = watch::channel(());
    tokio::spawn(async move {
        shutdown.await;
        drop(stop_rx);
    });
    let (open_tx, open) = watch::channel(());
    loop {
        // Stopping first: no connection is accepted once the shutdown came.
        let (io, _) = tokio::select! {
            biased;
            () = stop.closed() => break,
            conn = listener.accept() => conn,
        };
        let service = TowerToHyperService::new(router.clone());
        let stop = stop.clone();
        let open = open.clone();
        tokio::spawn(Polled::new(async move {
            let mut builder = Builder::new(TokioExecutor::new());
            // The extended CONNECT of WebSockets over HTTP/2 (RFC 8441).
            builder.http2().enable_connect_protocol();
            let mut conn = pin!(builder.serve_connection_with_upgrades(TokioIo::new(io), service));
            let mut stopping = pin!(stop.closed().fuse());
            loop {
                // Stopping first: a connection accepted as the shutdown came serves nothing.
                tokio::select! {
                    biased;
                    () = &mut stopping => conn.as_mut().graceful_shutdown(),
                    result = conn.as_mut() => {
                        if let Err(e) = result {
                            tracing::trace!(error = %e, "connection ended with an error");
                        }
                        break;
                    }
                }
            }
            drop(open);
        }));
    }
    drop(open);
    drop(listener);
    open_tx.closed().await;
}

/// Not polled now; a wake goes to the task.
const IDLE: u8 = 0;
/// Being polled; a wake asks for another poll.
const POLLING: u8 = 1;
/// Woken while polled: polled again before the poll returns.
const WOKEN: u8 = 2;
/// Polls in one, at most: past them, a wake while polled wakes the task (a future that wakes
/// itself on every poll, as one out of Tokio's cooperative budget does, yields as before).
const POLLS: usize = 4;

/// A future whose wakes while it is being polled are answered by polling it again at once,
/// not by waking its task (module docs). Wakes between polls, from any thread, wake the task.
pub struct Polled<F> {
    inner: Pin<Box<F>>,
    wakes: Arc<Wakes>,
    waker: Waker,
}

impl<F> std::fmt::Debug for Polled<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Polled").finish_non_exhaustive()
    }
}

impl<F: Future> Polled<F> {
    /// `inner`, polled so.
    pub fn new(inner: F) -> Self {
        let wakes = Arc::new(Wakes {
            state: AtomicU8::new(IDLE),
            task: AtomicWaker::new(),
        });
        Self {
            inner: Box::pin(inner),
            waker: Waker::from(Arc::clone(&wakes)),
            wakes,
        }
    }
}

impl<F: Future> Future for Polled<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        // Before the state can say idle again: a wake after that finds this waker.
        this.wakes.task.register(cx.waker());
        let mut inner_cx = Context::from_waker(&this.waker);
        for _ in 0..POLLS {
            this.wakes.state.store(POLLING, Ordering::Release);
            if let Poll::Ready(out) = this.inner.as_mut().poll(&mut inner_cx) {
                this.wakes.state.store(IDLE, Ordering::Release);
                return Poll::Ready(out);
            }
            if this
                .wakes
                .state
                .compare_exchange(POLLING, IDLE, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return Poll::Pending;
            }
        }
        this.wakes.state.store(IDLE, Ordering::Release);
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// What a [`Polled`] future's waker does.
struct Wakes {
    state: AtomicU8,
    task: AtomicWaker,
}

impl Wake for Wakes {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        match self
            .state
            .compare_exchange(POLLING, WOKEN, Ordering::AcqRel, Ordering::Acquire)
        {
            // Polled again before the poll returns.
            Ok(_) | Err(WOKEN) => {}
            Err(_) => self.task.wake(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// Reads what the server sends until it closes the connection (or `deadline`).
    async fn read_to_close(conn: &mut tokio::net::TcpStream) -> String {
        use tokio::io::AsyncReadExt;
        let mut got = Vec::new();
        let read = conn.read_to_end(&mut got);
        match tokio::time::timeout(std::time::Duration::from_secs(10), read).await {
            Ok(_) => String::from_utf8_lossy(&got).into_owned(),
            Err(_) => panic!(
                "the server kept the connection open: {:?}",
                String::from_utf8_lossy(&got)
            ),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn at_shutdown_a_request_in_flight_is_answered_idle_connections_close_and_none_is_accepted()
     {
        use axum::routing::{get, post};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        use tokio::net::{TcpListener, TcpStream};
        use tokio::sync::{Notify, oneshot};

        let entered = Arc::new(Notify::new());
        let release = Arc::new(Notify::new());
        let router = Router::new()
            .route(
                "/slow",
                post({
                    let (entered, release) = (Arc::clone(&entered), Arc::clone(&release));
                    move |body: String| async move {
                        entered.notify_one();
                        release.notified().await;
                        format!("got {}", body.len())
                    }
                }),
            )
            .route("/fast", get(|| async { "fast" }));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let served = tokio::spawn(serve(listener, router, async {
            let _ = stopped.await;
        }));

        // An idle keep-alive connection, one request answered on it.
        let mut idle = TcpStream::connect(addr).await.unwrap();
        idle.write_all(b"GET /fast HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 512];
        let n = idle.read(&mut buf).await.unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).ends_with("fast"));

        // A request in flight, its body read by the handler.
        let mut slow = TcpStream::connect(addr).await.unwrap();
        slow.write_all(b"POST /slow HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\nhello")
            .await
            .unwrap();
        entered.notified().await;

        stop.send(()).unwrap();
        // The idle connection is closed without an answer.
        assert_eq!(read_to_close(&mut idle).await, "");
        // No new connection is served once the node stopped accepting: refused, or closed
        // unanswered when it reached the listener's queue first.
        if let Ok(mut late) = TcpStream::connect(addr).await {
            let _ = late
                .write_all(b"GET /fast HTTP/1.1\r\nhost: x\r\n\r\n")
                .await;
            let mut got = Vec::new();
            let _ = tokio::time::timeout(
                std::time::Duration::from_secs(10),
                late.read_to_end(&mut got),
            )
            .await;
            assert!(
                got.is_empty(),
                "a late connection was answered: {:?}",
                String::from_utf8_lossy(&got)
            );
        }
        assert!(
            !served.is_finished(),
            "the request in flight holds the shutdown"
        );
        release.notify_one();
        let answered = read_to_close(&mut slow).await;
        assert!(answered.starts_with("HTTP/1.1 200"), "{answered}");
        assert!(answered.ends_with("got 5"), "{answered}");
        tokio::time::timeout(std::time::Duration::from_secs(10), served)
            .await
            .expect("serve ends once its connections closed")
            .unwrap();
    }

    /// A waker that counts its wakes.
    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    impl Count {
        fn wakes(&self) -> usize {
            self.0.load(Ordering::SeqCst)
        }
    }

    /// Pending `n` times, each time waking itself (`self_wakes`) or keeping its waker
    /// (`kept`) for someone else to wake later; then ready with how many times it was polled.
    struct Steps {
        polls: usize,
        n: usize,
        self_wake: bool,
        kept: Arc<std::sync::Mutex<Option<Waker>>>,
    }

    impl Future for Steps {
        type Output = usize;

        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<usize> {
            self.polls += 1;
            if self.polls > self.n {
                return Poll::Ready(self.polls);
            }
            if self.self_wake {
                cx.waker().wake_by_ref();
            } else {
                *self.kept.lock().unwrap() = Some(cx.waker().clone());
            }
            Poll::Pending
        }
    }

    fn steps(n: usize, self_wake: bool) -> (Steps, Arc<std::sync::Mutex<Option<Waker>>>) {
        let kept = Arc::new(std::sync::Mutex::new(None));
        let s = Steps {
            polls: 0,
            n,
            self_wake,
            kept: Arc::clone(&kept),
        };
        (s, kept)
    }

    #[test]
    fn a_wake_while_polled_is_another_poll_at_once_and_the_task_is_not_woken() {
        let count = Arc::new(Count::default());
        let waker = Waker::from(Arc::clone(&count));
        let mut cx = Context::from_waker(&waker);
        let (s, _) = steps(2, true);
        let mut f = pin!(Polled::new(s));
        assert_eq!(f.as_mut().poll(&mut cx), Poll::Ready(3));
        assert_eq!(count.wakes(), 0, "the task was not woken");
    }

    #[test]
    fn a_wake_between_polls_wakes_the_task_once_from_any_thread() {
        let count = Arc::new(Count::default());
        let waker = Waker::from(Arc::clone(&count));
        let mut cx = Context::from_waker(&waker);
        let (s, kept) = steps(1, false);
        let mut f = pin!(Polled::new(s));
        assert!(f.as_mut().poll(&mut cx).is_pending());
        assert_eq!(count.wakes(), 0);
        let w = kept
            .lock()
            .unwrap()
            .take()
            .expect("the future kept its waker");
        std::thread::spawn(move || w.wake()).join().unwrap();
        assert_eq!(count.wakes(), 1, "the task woken");
        assert_eq!(f.as_mut().poll(&mut cx), Poll::Ready(2));
    }

    #[test]
    fn a_future_that_wakes_itself_on_every_poll_yields_its_task_after_a_few_polls() {
        let count = Arc::new(Count::default());
        let waker = Waker::from(Arc::clone(&count));
        let mut cx = Context::from_waker(&waker);
        let (s, _) = steps(usize::MAX, true);
        let mut f = pin!(Polled::new(s));
        assert!(f.as_mut().poll(&mut cx).is_pending());
        assert_eq!(count.wakes(), 1, "woken to be polled again later");
        assert_eq!(f.inner.polls, POLLS);
    }
}
