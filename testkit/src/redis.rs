//! Real `redis-server` processes for the tests: a standalone server or a six-node cluster
//! (three masters, three replicas) on loopback, with persistence off. A watchdog stops them if
//! the test process dies without cleaning up.
//!
//! A port is never probed and handed over (another process could take it in between): the
//! server itself binds a random port, and when that bind fails (the server exits), it is
//! started again on another.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A random port for a server to try to bind: below 55536, so that a cluster node's bus port
/// (the port plus 10000) exists too, and above the usual ephemeral range's start.
pub(crate) fn random_port() -> u16 {
    use rand::RngExt;
    rand::rng().random_range(20_000..55_000)
}

/// How many ports a server tries before the start is a failure.
const ATTEMPTS: usize = 20;

fn require(binary: &str) {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {binary}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "{binary} is not installed: run `make deps` or `apt-get install -y redis-server redis-tools`"
    );
}

/// Whether the server answering on `port` is the process `pid` (and not another test's
/// server that already had the port our server failed to bind).
fn serves(port: u16, tls_ca: Option<&str>, pid: u32) -> bool {
    let mut cmd = Command::new("redis-cli");
    if let Some(ca) = tls_ca {
        cmd.args(["--tls", "--cacert", ca, "-h", "localhost"]);
    }
    cmd.args(["-p", &port.to_string(), "info", "server"])
        .output()
        .is_ok_and(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .any(|l| l.trim() == format!("process_id:{pid}"))
        })
}

/// One `redis-server` process.
#[derive(Debug)]
pub struct RedisProc {
    child: Option<Child>,
    pub port: u16,
    dir: PathBuf,
    extra: Vec<String>,
    /// TLS only, with this directory's `tls.crt`, `tls.key` and `ca.crt`.
    tls: Option<String>,
}

impl RedisProc {
    /// Starts a server with persistence off (plus `extra` arguments).
    pub fn start(extra: &[&str]) -> RedisProc {
        Self::start_with(extra.iter().map(|s| (*s).to_owned()).collect(), None)
    }

    /// A server speaking TLS only, with the certificates in `keys` (`tls.crt`, `tls.key`,
    /// `ca.crt`).
    pub fn start_tls(keys: &str) -> RedisProc {
        Self::start_with(Vec::new(), Some(keys.to_owned()))
    }

    fn start_with(extra: Vec<String>, tls: Option<String>) -> RedisProc {
        require("redis-server");
        require("redis-cli");
        let dir = std::env::temp_dir().join(format!("toolmark-redis-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut r = RedisProc {
            child: None,
            port: 0,
            dir,
            extra,
            tls,
        };
        for _ in 0..ATTEMPTS {
            r.port = random_port();
            if r.spawn() {
                return r;
            }
        }
        panic!("redis-server did not start");
    }

    fn spawn(&mut self) -> bool {
        let mut cmd = Command::new("redis-server");
        let port = self.port.to_string();
        match &self.tls {
            None => {
                cmd.args(["--port", &port]);
            }
            Some(k) => {
                cmd.args([
                    "--port",
                    "0",
                    "--tls-port",
                    &port,
                    "--tls-auth-clients",
                    "no",
                ]);
                cmd.args([
                    "--tls-cert-file",
                    &format!("{k}/tls.crt"),
                    "--tls-key-file",
                    &format!("{k}/tls.key"),
                ]);
                cmd.args(["--tls-ca-cert-file", &format!("{k}/ca.crt")]);
            }
        }
        cmd.args([
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--protected-mode",
            "no",
            "--dir",
        ])
        .arg(&self.dir)
        .args(&self.extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        let child = cmd.spawn().expect("redis-server starts");
        let pid = child.id();
        watchdog(pid, "TERM", &self.dir);
        self.child = Some(child);
        let ca = self.tls.as_ref().map(|k| format!("{k}/ca.crt"));
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if serves(self.port, ca.as_deref(), pid) {
                return true;
            }
            if let Some(c) = self.child.as_mut()
                && c.try_wait().ok().flatten().is_some()
            {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// A Sentinel watching the master on `master_port` under the name `service`.
    pub fn sentinel(master_port: u16, service: &str) -> RedisProc {
        require("redis-server");
        let dir = std::env::temp_dir().join(format!("toolmark-sentinel-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let conf = dir.join("sentinel.conf");
        std::fs::write(&conf, format!("sentinel monitor {service} 127.0.0.1 {master_port} 1\nsentinel down-after-milliseconds {service} 5000\n")).unwrap();
        let mut r = RedisProc {
            child: None,
            port: 0,
            dir,
            extra: vec![],
            tls: None,
        };
        for _ in 0..ATTEMPTS {
            r.port = random_port();
            let child = Command::new("redis-server")
                .arg(&conf)
                .args([
                    "--sentinel",
                    "--port",
                    &r.port.to_string(),
                    "--bind",
                    "127.0.0.1",
                    "--protected-mode",
                    "no",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server --sentinel starts");
            let pid = child.id();
            watchdog(pid, "TERM", &r.dir);
            r.child = Some(child);
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if serves(r.port, None, pid) {
                    return r;
                }
                if let Some(c) = r.child.as_mut()
                    && c.try_wait().ok().flatten().is_some()
                {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            r.kill();
        }
        panic!("redis-server --sentinel did not start");
    }

    /// Whether the process runs (it was not killed).
    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    /// Stops the server at once (its data is gone: persistence is off).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port, empty.
    pub fn restart(&mut self) {
        self.kill();
        assert!(
            self.spawn(),
            "redis-server did not restart on port {}",
            self.port
        );
    }

    /// Stops the server where it is (`SIGSTOP`): its connections stay open and nothing is
    /// answered, as a stalled host does.
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// Lets a paused server go on (`SIGCONT`): it answers what waited in its sockets.
    pub fn resume(&self) {
        self.signal("CONT");
    }

    fn signal(&self, name: &str) {
        let pid = self.child.as_ref().expect("the server runs").id();
        let ok = Command::new("kill")
            .args([&format!("-{name}"), &pid.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -{name} {pid} failed");
    }

    /// Runs one redis-cli command against this server.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for RedisProc {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Every command a server executes, as `MONITOR` shows it, recorded from the moment
/// [`RedisProc::monitor`] returns: what a test counts round trips with. A connection of its own
/// reads the feed on a thread into memory.
#[derive(Debug)]
pub struct Monitor {
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    conn: std::net::TcpStream,
    port: u16,
}

impl RedisProc {
    /// Starts recording every command this server executes.
    pub fn monitor(&self) -> Monitor {
        use std::io::{BufRead, Write};
        let mut conn = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        conn.write_all(b"MONITOR\r\n").unwrap();
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let reader = std::io::BufReader::new(conn.try_clone().unwrap());
        let sink = std::sync::Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in reader.lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        let m = Monitor {
            lines,
            conn,
            port: self.port,
        };
        // Recording has begun once the server acknowledged `MONITOR`.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !m.lines.lock().unwrap().iter().any(|l| l == "+OK") {
            assert!(Instant::now() < deadline, "MONITOR was never acknowledged");
            std::thread::sleep(Duration::from_millis(10));
        }
        m
    }
}

impl Monitor {
    /// Sends `ECHO label` from a client of its own, to delimit what a test counts.
    pub fn mark(&self, label: &str) {
        Command::new("redis-cli")
            .args(["-p", &self.port.to_string(), "echo", label])
            .output()
            .unwrap();
    }

    /// The recorded lines up to the `ECHO` of `label`, waiting up to 10 s for it.
    fn lines_until(&self, label: &str) -> Vec<String> {
        let needle = format!("\"echo\" \"{label}\"");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            {
                let lines = self.lines.lock().unwrap();
                if let Some(end) = lines.iter().position(|l| l.contains(&needle)) {
                    return lines[..end].to_vec();
                }
            }
            assert!(Instant::now() < deadline, "MONITOR never showed {label}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Every command line between the marks `from` and `to`, those scripts ran included (a
    /// script's own commands show as `[0 lua]`), the marks' `ECHO`s left out, in order.
    pub fn all_lines(&self, from: &str, to: &str) -> Vec<String> {
        let start = format!("\"echo\" \"{from}\"");
        let lines = self.lines_until(to);
        let first = lines
            .iter()
            .position(|l| l.contains(&start))
            .map_or(0, |i| i + 1);
        lines[first..]
            .iter()
            .filter(|l| !l.contains("\"echo\""))
            .cloned()
            .collect()
    }

    /// The lines of the commands clients sent between the marks `from` and `to` (not those a
    /// script ran inside its own round trip), in order.
    pub fn client_lines(&self, from: &str, to: &str) -> Vec<String> {
        self.all_lines(from, to)
            .into_iter()
            .filter(|l| !l.contains(" lua]"))
            .collect()
    }

    /// The names of the commands of [`Monitor::client_lines`].
    pub fn client_commands(&self, from: &str, to: &str) -> Vec<String> {
        self.client_lines(from, to)
            .iter()
            .filter_map(|l| {
                let name = l.split('"').nth(1)?;
                Some(name.to_ascii_lowercase())
            })
            .collect()
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.conn.shutdown(std::net::Shutdown::Both);
    }
}

/// Six servers joined as a cluster of three masters with one replica each.
#[derive(Debug)]
pub struct RedisCluster {
    pub nodes: Vec<RedisProc>,
}

impl RedisCluster {
    /// The cluster the suite shares: a node is failed after 5 s without an answer.
    pub fn start() -> RedisCluster {
        Self::start_with_node_timeout(5000)
    }

    /// A cluster whose `cluster-node-timeout` is `ms` (a master failed after that long without
    /// an answer, and its replica promoted).
    pub fn start_with_node_timeout(ms: u32) -> RedisCluster {
        let ms = ms.to_string();
        let mut nodes: Vec<RedisProc> = (0..6)
            .map(|_| RedisProc::start(&["--cluster-enabled", "yes", "--cluster-node-timeout", &ms]))
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let ok = nodes
                .iter()
                .all(|n| n.cli(&["cluster", "info"]).contains("cluster_state:ok"));
            if ok {
                let cluster = RedisCluster { nodes };
                if cluster.converged() {
                    return cluster;
                }
                nodes = cluster.into_nodes();
            }
            assert!(Instant::now() < deadline, "cluster never became ok");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn into_nodes(self) -> Vec<RedisProc> {
        self.nodes
    }

    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis-cluster://{}", hosts.join(","))
    }
}

/// Which broker the suite runs against: `TOOLMARK_TEST_BROKER` = `memory` (default), `redis`
/// or `redis-cluster`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Memory,
    Redis,
    Cluster,
}

pub fn mode() -> Mode {
    match std::env::var("TOOLMARK_TEST_BROKER").as_deref() {
        Ok("redis") => Mode::Redis,
        Ok("redis-cluster") => Mode::Cluster,
        Ok("memory") | Err(_) => Mode::Memory,
        Ok(other) => panic!("TOOLMARK_TEST_BROKER={other}: use memory, redis or redis-cluster"),
    }
}

enum Shared {
    One(RedisProc),
    Many(RedisCluster),
}

static SHARED: OnceLock<Shared> = OnceLock::new();

/// The Redis every test of this process shares (each gateway group uses its own key prefix):
/// a cluster in cluster mode, else a standalone server.
pub fn shared_url() -> String {
    let shared = SHARED.get_or_init(|| match mode() {
        Mode::Cluster => Shared::Many(RedisCluster::start()),
        Mode::Memory | Mode::Redis => Shared::One(RedisProc::start(&[])),
    });
    match shared {
        Shared::One(r) => r.url(),
        Shared::Many(c) => c.url(),
    }
}

/// Watches a server started for the tests: when the test process goes away without stopping it
/// (a static server is never dropped; a test that panics in a child), the server gets `signal`
/// and, once it has exited, its folder `dir` is removed, so that no run leaves data behind.
/// While the test process lives nothing is removed: a server killed as a fault is started
/// again on the same folder.
pub(crate) fn watchdog(pid: u32, signal: &str, dir: &std::path::Path) {
    let me = std::process::id();
    let dir = dir.display();
    let script = format!(
        "while kill -0 {me} 2>/dev/null && kill -0 {pid} 2>/dev/null; do sleep 1; done; \
         kill -0 {me} 2>/dev/null && exit 0; \
         kill -{signal} {pid} 2>/dev/null; \
         n=0; while kill -0 {pid} 2>/dev/null && [ $n -lt 300 ]; do sleep 0.1; n=$((n+1)); done; \
         rm -rf '{dir}'"
    );
    let _ = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
}
