//! The ceiling: a bare actix-web JSON route (parse the send body, answer an envelope; served at
//! `/ceiling/send`, it is not part of the API) in a process of its own (this binary, run as
//! `smsgw loadtest --serve-ceiling`), measured with the same clients in the same run. Our
//! sends/s reads as a share of what the framework alone does on this machine at this moment,
//! and its rate (cores × 1 s ÷ ceiling/s) is the unit of `server_cpu_per_send_bare`, its
//! process's CPU per request that of `server_cpu_per_send_bare_cpu` (docs/performance.md, "The
//! steering figure").

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};

use actix_web::{App, HttpResponse, HttpServer, web};
use serde_json::{Value, json};

use super::LoadError;
use crate::domain::status::MessageStatus;

/// The line the child prints once it listens, followed by its address.
const LISTENING: &str = "ceiling listening on ";

/// A running bare server process; killed when dropped.
pub struct Ceiling {
    /// Full URL of its send route.
    pub send_url: String,
    /// Its process, whose CPU time the harness reads.
    pub pid: u32,
    child: Child,
}

impl Drop for Ceiling {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn send(body: web::Json<Value>) -> HttpResponse {
    let id = uuid::Uuid::now_v7();
    HttpResponse::Accepted().json(json!({
        "status": "success",
        "message": "accepted",
        "data": {
            "id": id,
            "status": MessageStatus::Queued.as_str(),
            "to_number": body.get("to_number"),
            "from_number": body.get("from_number"),
            "content": body.get("content"),
        }
    }))
}

/// Starts the bare route in a child process with `workers` worker threads (the server's
/// count) on 127.0.0.1:0, and waits for its address.
pub fn start(workers: usize) -> Result<Ceiling, LoadError> {
    let exe = std::env::current_exe()
        .map_err(|e| LoadError::Setup(format!("cannot find the smsgw binary: {e}")))?;
    let mut child = Command::new(exe)
        .args(["loadtest", "--serve-ceiling", "--workers"])
        .arg(workers.max(1).to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| LoadError::Setup(format!("cannot start the ceiling server: {e}")))?;
    let address = child.stdout.take().and_then(|stdout| {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .find_map(|line| line.strip_prefix(LISTENING).map(str::to_string))
    });
    let Some(address) = address else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(LoadError::Setup(
            "the ceiling server exited before printing its address".into(),
        ));
    };
    Ok(Ceiling {
        send_url: format!("http://{}/ceiling/send", address.trim()),
        pid: child.id(),
        child,
    })
}

/// `smsgw loadtest --serve-ceiling`: serves the bare route with `workers` worker threads until
/// the process is killed, after printing its address.
pub async fn serve(workers: usize) -> std::io::Result<()> {
    let server = HttpServer::new(|| App::new().route("/ceiling/send", web::post().to(send)))
        .workers(workers.max(1))
        .disable_signals()
        .bind("127.0.0.1:0")?;
    let addr = server
        .addrs()
        .first()
        .copied()
        .ok_or_else(|| std::io::Error::other("the ceiling server has no address"))?;
    let running = server.run();
    let mut stdout = std::io::stdout();
    writeln!(stdout, "{LISTENING}{addr}")?;
    stdout.flush()?;
    running.await
}
