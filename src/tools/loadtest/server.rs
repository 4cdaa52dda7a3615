//! The server under load: a child `smsgw serve` on port 0 with a temporary SQLite database and
//! pace and limits lifted through environment configuration, or a server already running.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use super::LoadError;

/// How to reach the server, and its process when its memory can be read.
pub struct Target {
    pub url: String,
    pub api_key: String,
    pub pid: Option<u32>,
    /// The started server's database URL (None for a server the caller runs).
    pub database_url: Option<String>,
    child: Option<Child>,
    /// Temporary directory of the started server's database, removed with it.
    dir: Option<PathBuf>,
}

impl Drop for Target {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Configuration given to the child server: pace at its maximum (100,000 per window per phone), no throttling, no new-workspace cap or window, no quotas,
/// plain-HTTP loopback webhook targets (the harness's receiver), quiet logs.
const CHILD_ENV: &[(&str, &str)] = &[
    ("SMSGW_SERVER__BIND", "127.0.0.1:0"),
    ("SMSGW_PACE__PER_MINUTE", "100000"),
    ("SMSGW_PACE__PER_30_MINUTES", "100000"),
    ("SMSGW_LIMITS__API_PER_SECOND", "0"),
    ("SMSGW_LIMITS__NEW_WORKSPACE_MESSAGES", "1000000000"),
    // No new-workspace window either: within it a writer sharing the database (PostgreSQL)
    // counts the workspace's messages in every batch, which the real limit (50) bounds and
    // the lifted one above does not.
    ("SMSGW_LIMITS__NEW_WORKSPACE_WINDOW", "0s"),
    ("SMSGW_QUOTAS__PHONES", "0"),
    ("SMSGW_QUOTAS__WEBHOOK_ENDPOINTS", "0"),
    ("SMSGW_QUOTAS__QUEUED_MESSAGES", "0"),
    ("SMSGW_QUOTAS__TEST_MESSAGES_PER_DAY", "0"),
    ("SMSGW_QUOTAS__WEBHOOK_DELIVERIES", "0"),
    ("SMSGW_WEBHOOKS__ALLOW_INSECURE_TARGETS", "true"),
    ("SMSGW_WEBHOOKS__TIMEOUT", "5s"),
    ("SMSGW_PHONES__HEARTBEAT_TIMEOUT", "60s"),
    ("SMSGW_LOG__LEVEL", "error"),
];

impl Target {
    /// A server the caller runs; its pid (when given) lets the harness read its RSS.
    pub fn existing(url: String, api_key: String, pid: Option<u32>) -> Target {
        Target {
            url: url.trim_end_matches('/').to_string(),
            api_key,
            pid,
            database_url: None,
            child: None,
            dir: None,
        }
    }

    /// Starts `smsgw serve` (this same binary) on a fresh database and waits for its live key
    /// and address. `database` overrides the temporary SQLite file (it must be empty);
    /// `extra_env` adds configuration (the soak scenario's retention).
    pub fn start(
        database: Option<&str>,
        workers: Option<usize>,
        extra_env: &[(String, String)],
    ) -> Result<Target, LoadError> {
        Target::start_node(database, workers, extra_env, true)
    }

    /// [`Target::start`] with extra environment configuration; `first` when this start creates
    /// the database's first workspace (and prints its keys): a node joining a cluster does not,
    /// and its `api_key` stays empty.
    pub fn start_node(
        database: Option<&str>,
        workers: Option<usize>,
        extra_env: &[(String, String)],
        first: bool,
    ) -> Result<Target, LoadError> {
        let exe = std::env::current_exe()
            .map_err(|e| LoadError::Setup(format!("cannot find the smsgw binary: {e}")))?;
        let dir = std::env::temp_dir().join(format!("smsgw-loadtest-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir)
            .map_err(|e| LoadError::Setup(format!("cannot create a temp dir: {e}")))?;
        let url = match database {
            Some(url) => url.to_string(),
            None => format!("sqlite://{}?mode=rwc", dir.join("loadtest.db").display()),
        };
        let mut command = Command::new(exe);
        command
            .arg("serve")
            .current_dir(&dir)
            .envs(CHILD_ENV.iter().copied())
            .env("SMSGW_DATABASE__URL", &url)
            .envs(extra_env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(workers) = workers {
            command.env("SMSGW_SERVER__WORKERS", workers.to_string());
        }
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(LoadError::Setup(format!("cannot start the server: {e}")));
            }
        };
        let pid = child.id();
        let stdout = child.stdout.take();
        let mut target = Target {
            url: String::new(),
            api_key: String::new(),
            pid: Some(pid),
            database_url: Some(url.clone()),
            child: Some(child),
            dir: Some(dir),
        };
        let Some(stdout) = stdout else {
            return Err(LoadError::Setup("no stdout from the server".into()));
        };
        // Lines are read on a thread (the pipe is blocking) and handed over; the thread keeps
        // draining the pipe after start-up so the server never blocks on a full pipe.
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = tx.send(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        while target.url.is_empty() || (first && target.api_key.is_empty()) {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = rx.recv_timeout(left).map_err(|e| match e {
                RecvTimeoutError::Timeout => {
                    LoadError::Setup("the server did not print its key and address in 60 s".into())
                }
                RecvTimeoutError::Disconnected => LoadError::Setup(
                    "the server exited before printing its address (its error is above)".into(),
                ),
            })?;
            if let Some(key) = line.strip_prefix("live key: ") {
                target.api_key = key.trim().to_string();
            } else if let Some(addr) = line.strip_prefix("listening on ") {
                target.url = addr.trim().to_string();
            }
        }
        Ok(target)
    }
}

/// Resident and peak memory of a process in MB, from /proc (Linux only; None elsewhere).
pub fn rss_mb(pid: u32) -> Option<(f64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<f64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb / 1024.0)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// CPU time (user + system) a process has used so far, every thread it ever ran included,
/// from `/proc/<pid>/stat` (Linux only; None elsewhere); `None` for this process. Counted in
/// clock ticks (10 ms): a few ticks of error in a run of seconds.
pub fn cpu_time(pid: Option<u32>) -> Option<std::time::Duration> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/stat"),
        None => "/proc/self/stat".to_string(),
    };
    let stat = std::fs::read_to_string(path).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count from after it.
    // Field 3 is the state; 14 and 15 are utime and stime, in clock ticks.
    let fields: Vec<&str> = stat
        .get(stat.rfind(')')? + 1..)?
        .split_whitespace()
        .collect();
    let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf only reads a constant of the system; it has no preconditions.
    let per_second = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).ok()?;
    (per_second > 0)
        .then(|| std::time::Duration::from_micros(ticks.saturating_mul(1_000_000) / per_second))
}

/// CPU time the live threads of a process have used so far, to the nanosecond: the sum of the
/// first field of `/proc/<pid>/task/<tid>/schedstat` (Linux with scheduler statistics; None
/// elsewhere). Precise enough for a phase of a few requests, but a thread that has exited no
/// longer counts: for a process whose threads all live as long as it does (the ceiling).
pub fn threads_cpu_time(pid: u32) -> Option<std::time::Duration> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut nanos: u64 = 0;
    for task in tasks.flatten() {
        let stat = std::fs::read_to_string(task.path().join("schedstat")).ok()?;
        nanos = nanos.saturating_add(stat.split_whitespace().next()?.parse().ok()?);
    }
    Some(std::time::Duration::from_nanos(nanos))
}

/// Open file descriptors of a process, from /proc (Linux only; None elsewhere).
pub fn open_fds(pid: u32) -> Option<u64> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64)
}
