//! The ceiling: a bare actix-web JSON route (parse the send body, answer an envelope; served at
//! `/ceiling/send`, it is not part of the API) on its own
//! threads, measured with the same clients in the same run, so our sends/s reads as a share of
//! what the framework alone does on this machine at this moment.

use actix_web::{App, HttpResponse, HttpServer, web};
use serde_json::{Value, json};

use super::LoadError;

/// A running bare server; stopped when dropped.
pub struct Ceiling {
    /// Full URL of its send route.
    pub send_url: String,
    handle: actix_web::dev::ServerHandle,
}

impl Drop for Ceiling {
    fn drop(&mut self) {
        let handle = self.handle.clone();
        actix_web::rt::spawn(async move { handle.stop(false).await });
    }
}

async fn send(body: web::Json<Value>) -> HttpResponse {
    let id = uuid::Uuid::now_v7();
    HttpResponse::Accepted().json(json!({
        "status": "success",
        "message": "accepted",
        "data": {
            "id": id,
            "status": "queued",
            "to_number": body.get("to_number"),
            "from_number": body.get("from_number"),
            "content": body.get("content"),
        }
    }))
}

/// Starts the bare route with `workers` worker threads (the server's count) on 127.0.0.1:0.
pub fn start(workers: usize) -> Result<Ceiling, LoadError> {
    let server = HttpServer::new(|| App::new().route("/ceiling/send", web::post().to(send)))
        .workers(workers.max(1))
        .disable_signals()
        .bind("127.0.0.1:0")
        .map_err(|e| LoadError::Setup(format!("ceiling server: {e}")))?;
    let addr = server
        .addrs()
        .first()
        .copied()
        .ok_or_else(|| LoadError::Setup("ceiling server has no address".into()))?;
    let server = server.run();
    let handle = server.handle();
    actix_web::rt::spawn(server);
    Ok(Ceiling {
        send_url: format!("http://{addr}/ceiling/send"),
        handle,
    })
}
