//! A real PostgreSQL server for the tests: Debian's `postgresql`, a cluster made by `initdb` in
//! a temporary folder, listening on loopback only (run as the `postgres` user when the tests
//! run as root, as PostgreSQL refuses root). Each test takes a database of its own
//! ([`PostgresProc::database`]); faults are real: the server killed ([`PostgresProc::kill`])
//! and started again on its data ([`PostgresProc::start_again`]). A watchdog stops it, and removes its
//! folder, if the test process ends without doing so (the shared server is a static, never
//! dropped).

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const INSTALL: &str =
    "PostgreSQL is not installed: run `make deps` or `apt-get install -y postgresql`";

/// The folder of PostgreSQL's server programs: Debian keeps them under
/// `/usr/lib/postgresql/<major>/bin` (the newest wins), else they are on the `PATH`.
fn bin_dir() -> PathBuf {
    let mut majors: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let major = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("postgres").exists().then_some((major, bin))
        })
        .collect();
    majors.sort();
    if let Some((_, bin)) = majors.pop() {
        return bin;
    }
    let out = Command::new("sh")
        .args(["-c", "command -v postgres"])
        .output()
        .expect("sh runs");
    let path = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(!path.is_empty(), "{INSTALL}");
    Path::new(&path).parent().expect("a folder").to_path_buf()
}

/// The user and group the server runs as: `postgres` when this process is root.
fn server_user() -> Option<(u32, u32)> {
    let me = Command::new("id").arg("-u").output().expect("id runs");
    if String::from_utf8_lossy(&me.stdout).trim() != "0" {
        return None;
    }
    let id = |flag: &str| -> u32 {
        let out = Command::new("id")
            .args([flag, "postgres"])
            .output()
            .expect("id runs");
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("no `postgres` user to run the server as: {INSTALL}"))
    };
    Some((id("-u"), id("-g")))
}

/// One PostgreSQL server.
#[derive(Debug)]
pub struct PostgresProc {
    child: Option<Child>,
    /// Its port on 127.0.0.1.
    pub port: u16,
    dir: PathBuf,
    bin: PathBuf,
    user: Option<(u32, u32)>,
}

impl PostgresProc {
    /// Makes a cluster (`initdb`, user `toolmark`, trust on loopback) and starts it.
    pub fn start() -> PostgresProc {
        let bin = bin_dir();
        assert!(bin.join("initdb").exists(), "{INSTALL}");
        let user = server_user();
        let dir = std::env::temp_dir().join(format!("toolmark-pg-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).expect("chown the data folder");
        }
        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .arg("-D")
            .arg(dir.join("data"))
            .args(["-U", "toolmark", "--auth=trust", "-E", "UTF8", "--no-sync"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some((uid, gid)) = user {
            initdb.uid(uid).gid(gid);
        }
        let out = initdb.output().expect("initdb runs");
        assert!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut pg = PostgresProc {
            child: None,
            port: 0,
            dir,
            bin,
            user,
        };
        for _ in 0..20 {
            pg.port = super::redis::random_port();
            if pg.spawn() {
                return pg;
            }
        }
        panic!("postgres did not start");
    }

    fn spawn(&mut self) -> bool {
        let mut cmd = Command::new(self.bin.join("postgres"));
        cmd.arg("-D")
            .arg(self.dir.join("data"))
            .args(["-p", &self.port.to_string(), "-k"])
            .arg(&self.dir)
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "fsync=off",
                "-c",
                "max_connections=200",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some((uid, gid)) = self.user {
            cmd.uid(uid).gid(gid);
        }
        let child = cmd.spawn().expect("postgres starts");
        let pid = child.id();
        super::redis::watchdog(pid, "QUIT", &self.dir);
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Some(c) = self.child.as_mut()
                && c.try_wait().ok().flatten().is_some()
            {
                self.child = None;
                return false;
            }
            if self.sql("postgres", "SELECT 1").is_ok() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// The URL of database `db`.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://toolmark@127.0.0.1:{}/{db}", self.port)
    }

    /// A new database of its own; its URL.
    pub fn database(&self) -> String {
        let name = format!("t{}", uuid::Uuid::new_v4().simple());
        self.sql("postgres", &format!("CREATE DATABASE {name}"))
            .expect("CREATE DATABASE");
        self.url(&name)
    }

    /// Runs `sql` in database `db` with `psql`; its output (unaligned, tuples only).
    pub fn sql(&self, db: &str, sql: &str) -> Result<String, String> {
        let out = Command::new(self.bin.join("psql"))
            .args([
                "-X",
                "-q",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                "127.0.0.1",
            ])
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                "toolmark",
                "-d",
                db,
                "-c",
                sql,
            ])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// A backup of database `db` as `pg_dump` makes it (plain SQL).
    pub fn dump(&self, db: &str) -> String {
        let out = Command::new(self.bin.join("pg_dump"))
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "toolmark",
            ])
            .args(["--no-owner", "-d", db])
            .stdin(Stdio::null())
            .output()
            .expect("pg_dump runs");
        assert!(
            out.status.success(),
            "pg_dump failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("a plain SQL dump")
    }

    /// Restores `backup` (a [`PostgresProc::dump`]) into a new database; its URL.
    pub fn restore(&self, backup: &str) -> String {
        let url = self.database();
        let db = url.rsplit('/').next().expect("a database").to_owned();
        let mut psql = Command::new(self.bin.join("psql"))
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1"])
            .args(["-p", &self.port.to_string(), "-U", "toolmark", "-d", &db])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("psql runs");
        {
            use std::io::Write as _;
            psql.stdin
                .take()
                .expect("stdin")
                .write_all(backup.as_bytes())
                .expect("the backup is written to psql");
        }
        let out = psql.wait_with_output().expect("psql ends");
        assert!(
            out.status.success(),
            "the restore failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        url
    }

    /// Whether the server runs (it was not killed).
    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    /// Kills the server at once (`SIGKILL` of the postmaster, as a crashed host).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the server again on its data and port (crash recovery runs first), once the
    /// killed server's backends, which notice their postmaster's death, have left.
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "the server runs");
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if self.spawn() {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!("postgres did not start again on port {}", self.port);
    }
}

impl Drop for PostgresProc {
    fn drop(&mut self) {
        if let Some(c) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-QUIT", &c.id().to_string()])
                .status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
