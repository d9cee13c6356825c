//! A webhook receiver on a loopback port whose behaviour the test switches at run time.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};

/// What the receiver does with the next request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    Ok = 0,
    Fail = 1,
    Hang = 2,
    /// 307 to `/elsewhere` on the same receiver, which counts what reaches it.
    Redirect = 3,
}

/// One request as received.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub id: String,
    pub timestamp: String,
    pub signature: String,
    pub body: String,
    pub answered: u16,
}

#[derive(Default)]
struct Shared {
    mode: AtomicU8,
    script: Mutex<Vec<Mode>>,
    seen: Mutex<Vec<Delivery>>,
    followed: std::sync::atomic::AtomicUsize,
}

/// The receiver's handle.
#[derive(Clone)]
pub struct Receiver {
    shared: Arc<Shared>,
    pub url: String,
}

impl Receiver {
    pub async fn start(mode: Mode) -> Receiver {
        let shared = Arc::new(Shared::default());
        shared.mode.store(mode as u8, Ordering::SeqCst);
        let s = shared.clone();
        let f = shared.clone();
        let app = axum::Router::new()
            .route(
                "/hook",
                axum::routing::post(move |headers: HeaderMap, body: Bytes| {
                    let s = s.clone();
                    async move { handle(&s, &headers, &body).await }
                }),
            )
            .route(
                "/elsewhere",
                axum::routing::post(move || {
                    f.followed.fetch_add(1, Ordering::SeqCst);
                    async { StatusCode::OK }
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Receiver { shared, url }
    }

    pub fn set(&self, mode: Mode) {
        self.shared.mode.store(mode as u8, Ordering::SeqCst);
    }

    /// The next requests get these answers, in order, before the mode applies again.
    pub fn script(&self, modes: &[Mode]) {
        *self.shared.script.lock().unwrap() = modes.iter().rev().copied().collect();
    }

    pub fn seen(&self) -> Vec<Delivery> {
        self.shared.seen.lock().unwrap().clone()
    }

    /// Requests that followed a redirect to `/elsewhere`.
    pub fn followed(&self) -> usize {
        self.shared.followed.load(Ordering::SeqCst)
    }

    /// Requests answered 2xx.
    pub fn delivered(&self) -> Vec<Delivery> {
        self.seen()
            .into_iter()
            .filter(|d| d.answered == 200)
            .collect()
    }
}

async fn handle(s: &Shared, headers: &HeaderMap, body: &Bytes) -> (StatusCode, HeaderMap) {
    let mode = s
        .script
        .lock()
        .unwrap()
        .pop()
        .unwrap_or(match s.mode.load(Ordering::SeqCst) {
            0 => Mode::Ok,
            1 => Mode::Fail,
            3 => Mode::Redirect,
            _ => Mode::Hang,
        });
    let h = |k: &str| {
        headers
            .get(k)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let answered = match mode {
        Mode::Ok => 200,
        Mode::Fail => 500,
        Mode::Hang => 0,
        Mode::Redirect => 307,
    };
    // Recorded on arrival: a request that hangs counts as an attempt too.
    s.seen.lock().unwrap().push(Delivery {
        id: h("webhook-id"),
        timestamp: h("webhook-timestamp"),
        signature: h("webhook-signature"),
        body: String::from_utf8_lossy(body).into_owned(),
        answered,
    });
    if mode == Mode::Hang {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
    let mut out = HeaderMap::new();
    if mode == Mode::Redirect {
        out.insert("location", "/elsewhere".parse().unwrap());
    }
    (
        StatusCode::from_u16(answered).unwrap_or(StatusCode::OK),
        out,
    )
}
