//! The fault proxy against a real `redis-server`, spoken to in RESP by hand: a dropped reply is
//! of a command the server applied, and the replies after it still reach their commands; a
//! stall holds both ways and lets everything through in order, and one can start right after a
//! reply; a cut closes; `SIGSTOP` stalls the server itself.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use toolmark_testkit::fault::FaultProxy;
use toolmark_testkit::redis::RedisProc;

/// A command in RESP.
fn resp(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend(format!("${}\r\n{a}\r\n", a.len()).into_bytes());
    }
    out
}

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// What arrives within `wait` (stopping once `want` bytes came).
fn read_for(s: &mut TcpStream, wait: Duration, want: usize) -> String {
    let deadline = std::time::Instant::now() + wait;
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    while got.len() < want {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            break;
        }
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&chunk[..n]),
            Err(_) => break,
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// Long enough to be sure nothing comes on a busy machine; an answer that comes is read at once.
const QUIET: Duration = Duration::from_millis(500);
const ANSWER: Duration = Duration::from_secs(10);

#[test]
fn a_dropped_reply_is_of_an_applied_command_and_the_next_replies_stay_in_order() {
    let redis = RedisProc::start(&[]);
    let proxy = FaultProxy::to(&redis);
    let mut c = connect(proxy.port);
    proxy.drop_reply("set b", 1);
    // Three commands in one write: the reply of the second never comes, the others do, each to
    // its own command.
    let mut batch = resp(&["SET", "a", "1"]);
    batch.extend(resp(&["SET", "b", "2"]));
    batch.extend(resp(&["GET", "b"]));
    c.write_all(&batch).unwrap();
    assert_eq!(read_for(&mut c, ANSWER, 12), "+OK\r\n$1\r\n2\r\n");
    assert_eq!(read_for(&mut c, QUIET, 1), "", "a dropped reply came late");
    assert_eq!(proxy.dropped(), 1);
    // The rule is spent: the next SET b is answered.
    c.write_all(&resp(&["SET", "b", "3"])).unwrap();
    assert_eq!(read_for(&mut c, ANSWER, 5), "+OK\r\n");
    // The Nth match: the second `incr n` from now loses its reply.
    proxy.drop_reply("incr n", 2);
    for _ in 0..3 {
        c.write_all(&resp(&["INCR", "n"])).unwrap();
    }
    c.write_all(&resp(&["GET", "n"])).unwrap();
    assert_eq!(read_for(&mut c, ANSWER, 15), ":1\r\n:3\r\n$1\r\n3\r\n");
    assert_eq!(redis.cli(&["get", "n"]).trim(), "3");
}

#[test]
fn a_stall_holds_both_ways_and_lets_everything_through_in_order() {
    let redis = RedisProc::start(&[]);
    let proxy = FaultProxy::to(&redis);
    let mut c = connect(proxy.port);
    c.write_all(&resp(&["PING"])).unwrap();
    assert_eq!(read_for(&mut c, ANSWER, 7), "+PONG\r\n");
    proxy.stall();
    c.write_all(&resp(&["SET", "k", "held"])).unwrap();
    c.write_all(&resp(&["GET", "k"])).unwrap();
    assert_eq!(read_for(&mut c, QUIET, 1), "", "an answer during the stall");
    assert_eq!(
        redis.cli(&["exists", "k"]).trim(),
        "0",
        "a held command reached the server"
    );
    proxy.resume();
    assert_eq!(read_for(&mut c, ANSWER, 15), "+OK\r\n$4\r\nheld\r\n");
}

#[test]
fn a_stall_after_a_reply_lets_that_reply_through_and_holds_what_comes_next() {
    let redis = RedisProc::start(&[]);
    let proxy = FaultProxy::to(&redis);
    let mut c = connect(proxy.port);
    let mut other = connect(proxy.port);
    proxy.stall_after_reply("set a", 1);
    c.write_all(&resp(&["SET", "a", "1"])).unwrap();
    assert_eq!(read_for(&mut c, ANSWER, 5), "+OK\r\n", "the matching reply");
    c.write_all(&resp(&["SET", "b", "held"])).unwrap();
    other.write_all(&resp(&["PING"])).unwrap();
    assert_eq!(read_for(&mut c, QUIET, 1), "", "an answer after the reply");
    assert_eq!(
        read_for(&mut other, QUIET, 1),
        "",
        "another connection's answer"
    );
    assert_eq!(
        redis.cli(&["exists", "b"]).trim(),
        "0",
        "a command after the reply reached the server"
    );
    proxy.resume();
    assert_eq!(read_for(&mut c, ANSWER, 5), "+OK\r\n");
    assert_eq!(read_for(&mut other, ANSWER, 7), "+PONG\r\n");
    assert_eq!(redis.cli(&["get", "b"]).trim(), "held");
}

#[test]
fn a_cut_closes_every_connection_and_new_ones_are_served() {
    let redis = RedisProc::start(&[]);
    let proxy = FaultProxy::to(&redis);
    let mut a = connect(proxy.port);
    let mut b = connect(proxy.port);
    for c in [&mut a, &mut b] {
        c.write_all(&resp(&["PING"])).unwrap();
        assert_eq!(read_for(c, ANSWER, 7), "+PONG\r\n");
    }
    proxy.cut();
    for c in [&mut a, &mut b] {
        let _ = c.write_all(&resp(&["PING"]));
        assert_eq!(read_for(c, ANSWER, 7), "", "a cut connection answered");
    }
    let mut c = connect(proxy.port);
    c.write_all(&resp(&["PING"])).unwrap();
    assert_eq!(read_for(&mut c, ANSWER, 7), "+PONG\r\n");
    assert!(proxy.commands() >= 3);
}

#[test]
fn a_paused_server_answers_nothing_until_it_resumes() {
    let redis = RedisProc::start(&[]);
    let mut c = connect(redis.port);
    redis.pause();
    c.write_all(&resp(&["PING"])).unwrap();
    assert_eq!(read_for(&mut c, QUIET, 1), "");
    redis.resume();
    assert_eq!(read_for(&mut c, ANSWER, 7), "+PONG\r\n");
}

#[test]
fn a_reply_dropped_with_its_connection_is_of_an_applied_command_and_the_client_sees_a_close() {
    let redis = RedisProc::start(&[]);
    let proxy = FaultProxy::to(&redis);
    let mut c = connect(proxy.port);
    proxy.drop_reply_and_cut("set lost", 1);
    let mut batch = resp(&["SET", "a", "1"]);
    batch.extend(resp(&["SET", "lost", "2"]));
    batch.extend(resp(&["GET", "a"]));
    c.write_all(&batch).unwrap();
    // The reply before the lost one comes; then the connection closes: no reply after it is
    // read as the lost one's.
    assert_eq!(read_for(&mut c, ANSWER, 64), "+OK\r\n");
    assert_eq!(proxy.dropped(), 1);
    assert_eq!(
        redis.cli(&["get", "lost"]).trim(),
        "2",
        "the command was applied"
    );
    let mut again = connect(proxy.port);
    again.write_all(&resp(&["GET", "lost"])).unwrap();
    assert_eq!(read_for(&mut again, ANSWER, 7), "$1\r\n2\r\n");
}

#[test]
fn replies_after_a_resp2_nil_stay_aligned() {
    let redis = RedisProc::start(&[]);
    let proxy = FaultProxy::to(&redis);
    let mut c = connect(proxy.port);
    proxy.drop_reply("set after", 1);
    // `$-1` (RESP2's nil) is no RESP3 frame: the proxy must still count it as one reply.
    let mut batch = resp(&["GET", "missing"]);
    batch.extend(resp(&["SET", "after", "1"]));
    batch.extend(resp(&["GET", "after"]));
    c.write_all(&batch).unwrap();
    assert_eq!(read_for(&mut c, ANSWER, 12), "$-1\r\n$1\r\n1\r\n");
    assert_eq!(proxy.dropped(), 1);
}
