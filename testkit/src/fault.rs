//! Faults of a Redis as a client lives them, injected for real between the client and a real
//! `redis-server`: [`FaultProxy`] is a TCP proxy that can stall (every byte held both ways, the
//! sockets left open, as a stalled host or a partition does), now or right after the reply of
//! the Nth command matching a pattern, drop the reply of the Nth command matching a pattern
//! (the command is applied; its answer never comes back), and cut every connection. Commands
//! and replies are read as RESP (RESP3, else RESP2, `redis-protocol`, the parser the Redis
//! client crate uses), so a reply is dropped whole and the ones after it still reach their
//! commands. With [`RedisProc::pause`] (`SIGSTOP`) and [`RedisProc::resume`]
//! (`SIGCONT`) the server itself stalls.
//!
//! The proxy serves one standalone server: a Cluster's clients follow its redirections to the
//! nodes' own ports, around any proxy.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use redis_protocol::resp3::decode::complete::decode;
use redis_protocol::resp3::types::OwnedFrame;

use crate::redis::RedisProc;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One rule of [`FaultProxy::drop_reply`] or [`FaultProxy::stall_after_reply`]: what becomes of
/// the reply of the `left`-th next command whose text contains `pattern`.
#[derive(Debug)]
struct Rule {
    pattern: String,
    left: usize,
    then: Reply,
}

/// What becomes of one command's reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reply {
    Pass,
    Drop,
    /// Dropped, and the connection cut there: a reply lost as TCP loses one, with its
    /// connection (a client that pipelines never reads a later reply as this one's).
    DropAndCut,
    /// Passed, and the proxy stalls right after it ([`FaultProxy::stall`]).
    PassThenStall,
}

#[derive(Debug, Default)]
struct Shared {
    stalled: Mutex<bool>,
    resumed: Condvar,
    rules: Mutex<Vec<Rule>>,
    /// Every socket of every connection, both sides, for [`FaultProxy::cut`].
    sockets: Mutex<Vec<TcpStream>>,
    dropped: AtomicUsize,
    commands: AtomicUsize,
}

impl Shared {
    /// Waits while the proxy is stalled.
    fn pass(&self) {
        let mut stalled = lock(&self.stalled);
        while *stalled {
            stalled = self
                .resumed
                .wait(stalled)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// What becomes of the reply of a command whose text is `text` (a matching rule counts the
    /// command; the rule that reaches its count is spent).
    fn reply(&self, text: &str) -> Reply {
        let mut rules = lock(&self.rules);
        let mut hit = None;
        for (i, r) in rules.iter_mut().enumerate() {
            if text.contains(&r.pattern) {
                r.left -= 1;
                if r.left == 0 {
                    hit = Some(i);
                    break;
                }
            }
        }
        hit.map_or(Reply::Pass, |i| rules.remove(i).then)
    }
}

/// A TCP proxy in front of a `redis-server` on loopback, with faults on demand.
#[derive(Debug)]
pub struct FaultProxy {
    /// Where clients connect.
    pub port: u16,
    shared: Arc<Shared>,
}

impl FaultProxy {
    /// A proxy to the server listening on `upstream` (loopback), on a port of its own.
    pub fn start(upstream: u16) -> FaultProxy {
        let listener = TcpListener::bind(("127.0.0.1", 0)).expect("a loopback port");
        let port = listener.local_addr().expect("bound").port();
        let shared = Arc::new(Shared::default());
        let accepting = Arc::clone(&shared);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                serve(&accepting, client, server);
            }
        });
        FaultProxy { port, shared }
    }

    /// A proxy to `server`.
    pub fn to(server: &RedisProc) -> FaultProxy {
        Self::start(server.port)
    }

    /// The URL clients use.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Holds every byte, both ways, until [`FaultProxy::resume`]; connections stay open.
    pub fn stall(&self) {
        *lock(&self.shared.stalled) = true;
    }

    /// Lets the held bytes through, in order.
    pub fn resume(&self) {
        *lock(&self.shared.stalled) = false;
        self.shared.resumed.notify_all();
    }

    /// The reply of the `nth` (1 for the next) command from now whose text (its name and
    /// arguments, lower case, space-separated) contains `pattern` (lower case) is dropped: the
    /// server applies the command, the client never hears of it.
    /// The connection stays open, so a client that pipelines its commands would read the next
    /// reply as this one's: for those, [`FaultProxy::drop_reply_and_cut`].
    pub fn drop_reply(&self, pattern: &str, nth: usize) {
        self.rule(pattern, nth, Reply::Drop);
    }

    /// As [`FaultProxy::drop_reply`], and that connection is cut where the reply would have
    /// been: the command is applied, the client hears nothing of it but a closed connection
    /// (a reply lost as a real network loses one).
    pub fn drop_reply_and_cut(&self, pattern: &str, nth: usize) {
        self.rule(pattern, nth, Reply::DropAndCut);
    }

    /// The reply of the `nth` command from now whose text contains `pattern` reaches its client,
    /// and the proxy stalls right after it, until [`FaultProxy::resume`]: what the client
    /// sends next, on any connection, waits (a Redis lost between one command and the next).
    pub fn stall_after_reply(&self, pattern: &str, nth: usize) {
        self.rule(pattern, nth, Reply::PassThenStall);
    }

    fn rule(&self, pattern: &str, nth: usize, then: Reply) {
        assert!(nth >= 1, "nth counts from 1");
        lock(&self.shared.rules).push(Rule {
            pattern: pattern.to_ascii_lowercase(),
            left: nth,
            then,
        });
    }

    /// Replies dropped so far.
    pub fn dropped(&self) -> usize {
        self.shared.dropped.load(Ordering::SeqCst)
    }

    /// Commands passed to the server so far.
    pub fn commands(&self) -> usize {
        self.shared.commands.load(Ordering::SeqCst)
    }

    /// Closes every connection now, both sides (clients see them cut; new ones are served).
    pub fn cut(&self) {
        for s in lock(&self.shared.sockets).drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

/// The text a rule matches: a command's bulk strings, lower case, space-separated.
fn command_text(frame: &OwnedFrame) -> String {
    let OwnedFrame::Array { data, .. } = frame else {
        return String::new();
    };
    data.iter()
        .filter_map(|f| match f {
            OwnedFrame::BlobString { data, .. } | OwnedFrame::SimpleString { data, .. } => {
                Some(String::from_utf8_lossy(data).to_ascii_lowercase())
            }
            _ => None,
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether a command puts its connection in subscriber mode, where messages come unasked.
fn subscribes(text: &str) -> bool {
    ["subscribe", "ssubscribe", "psubscribe"]
        .iter()
        .any(|c| text.split(' ').next() == Some(c))
}

/// What the server side must do with the next reply of a connection.
#[derive(Debug)]
struct Conn {
    /// One entry per command sent: what becomes of its reply.
    replies: Mutex<VecDeque<Reply>>,
    /// Unaligned from here on (subscriber mode, or bytes that are not RESP): forward all.
    opaque: Mutex<bool>,
}

fn serve(shared: &Arc<Shared>, client: TcpStream, server: TcpStream) {
    let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    {
        let mut sockets = lock(&shared.sockets);
        for s in [&client, &server] {
            if let Ok(s) = s.try_clone() {
                sockets.push(s);
            }
        }
    }
    let conn = Arc::new(Conn {
        replies: Mutex::default(),
        opaque: Mutex::new(false),
    });
    let (up, down) = (Arc::clone(shared), Arc::clone(shared));
    let (commands, replies) = (Arc::clone(&conn), conn);
    std::thread::spawn(move || {
        pump(client, s2, &commands, true, |frame, bytes, out| {
            let text = command_text(frame);
            if subscribes(&text) {
                *lock(&commands.opaque) = true;
            }
            let reply = up.reply(&text);
            lock(&commands.replies).push_back(reply);
            up.pass();
            up.commands.fetch_add(1, Ordering::SeqCst);
            out.write_all(bytes)
        });
    });
    std::thread::spawn(move || {
        pump(server, c2, &replies, false, |frame, bytes, out| {
            let push = matches!(frame, OwnedFrame::Push { .. });
            let aligned = !push && !*lock(&replies.opaque);
            let reply = if aligned {
                lock(&replies.replies).pop_front().unwrap_or(Reply::Pass)
            } else {
                Reply::Pass
            };
            down.pass();
            match reply {
                Reply::Pass => out.write_all(bytes),
                // Stalled before the client can have read it: nothing it sends after the
                // reply gets through.
                Reply::PassThenStall => {
                    *lock(&down.stalled) = true;
                    out.write_all(bytes)
                }
                Reply::Drop => {
                    down.dropped.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                }
                Reply::DropAndCut => {
                    down.dropped.fetch_add(1, Ordering::SeqCst);
                    let _ = out.shutdown(Shutdown::Both);
                    Err(std::io::Error::other("cut where the reply was dropped"))
                }
            }
        });
    });
}

/// The next whole frame in `buf` and its length. A RESP2 connection's replies (a nil is `$-1`,
/// which is no RESP3 frame) are read as RESP2 and stand as a `Null` frame: only their length
/// and that they are not a push matter.
fn frame(buf: &[u8]) -> Result<Option<(OwnedFrame, usize)>, ()> {
    match decode(buf) {
        Ok(found) => Ok(found),
        Err(_) => match redis_protocol::resp2::decode::decode(buf) {
            Ok(Some((_, used))) => Ok(Some((OwnedFrame::Null, used))),
            Ok(None) => Ok(None),
            Err(_) => Err(()),
        },
    }
}

/// Copies `from` to `to` frame by frame, handing each whole frame to `each`; bytes that do not
/// parse as RESP are forwarded as they come (and the connection is no longer aligned).
fn pump(
    mut from: TcpStream,
    mut to: TcpStream,
    conn: &Conn,
    commands: bool,
    mut each: impl FnMut(&OwnedFrame, &[u8], &mut TcpStream) -> std::io::Result<()>,
) {
    let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut chunk = [0u8; 16 * 1024];
    let mut raw = false;
    loop {
        let n = match from.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if raw {
            if to.write_all(&chunk[..n]).is_err() {
                break;
            }
            continue;
        }
        buf.extend_from_slice(&chunk[..n]);
        loop {
            match frame(&buf) {
                Ok(Some((frame, used))) => {
                    let bytes: Vec<u8> = buf.drain(..used).collect();
                    if each(&frame, &bytes, &mut to).is_err() {
                        let _ = from.shutdown(Shutdown::Both);
                        return;
                    }
                }
                Ok(None) => break,
                Err(_) => {
                    // Not RESP (an inline command): forward from here on, unaligned.
                    raw = true;
                    if commands {
                        *lock(&conn.opaque) = true;
                    }
                    if to.write_all(&buf).is_err() {
                        return;
                    }
                    buf.clear();
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}
