//! A TCP proxy between a server and its PostgreSQL database that a test can cut and restore:
//! a database outage without touching the machine's PostgreSQL.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::io::copy_bidirectional;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Forwards every connection from `127.0.0.1:<port>` to `target` while up. [`DbProxy::cut`]
/// closes the open connections and closes new ones at once (what a database that went away
/// looks like to its clients); [`DbProxy::restore`] forwards again.
pub struct DbProxy {
    port: u16,
    up: Arc<AtomicBool>,
    /// Bumped on every cut: each forwarded connection ends when it changes.
    cuts: watch::Sender<u64>,
}

impl DbProxy {
    /// Starts the proxy in front of `target` (`host:port`).
    pub async fn start(target: String) -> DbProxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let port = listener.local_addr().unwrap().port();
        let up = Arc::new(AtomicBool::new(true));
        let (cuts, _) = watch::channel(0u64);
        let accepting_up = up.clone();
        let accepting_cuts = cuts.clone();
        actix_web::rt::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if !accepting_up.load(Ordering::SeqCst) {
                    // Refused: the connection closes before the database's first byte.
                    drop(client);
                    continue;
                }
                let target = target.clone();
                let mut cut = accepting_cuts.subscribe();
                actix_web::rt::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(&target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = copy_bidirectional(&mut client, &mut server) => {}
                        // Both ends close: the server's next read on it fails.
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        DbProxy { port, up, cuts }
    }

    /// `url` (a `postgres://` URL) with its host and port replaced by the proxy's.
    pub fn url_through(&self, url: &str) -> String {
        let (scheme, rest) = url.split_once("://").expect("a URL with a scheme");
        let (authority, path) = rest.split_once('/').expect("a URL with a database");
        let user = authority
            .rsplit_once('@')
            .map(|(user, _)| format!("{user}@"));
        format!(
            "{scheme}://{}127.0.0.1:{}/{path}",
            user.unwrap_or_default(),
            self.port
        )
    }

    /// The database goes away: open connections are closed, new ones closed at once.
    pub fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        self.cuts.send_modify(|n| *n += 1);
    }

    /// The database is back.
    pub fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

/// `host:port` of a `postgres://` URL.
pub fn host_port(url: &str) -> String {
    let rest = url.split_once("://").expect("a URL with a scheme").1;
    let authority = rest.split('/').next().unwrap();
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    if host.contains(':') {
        host.to_string()
    } else {
        format!("{host}:5432")
    }
}
