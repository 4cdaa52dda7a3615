//! The stop signals: SIGTERM and SIGINT (Ctrl-C elsewhere) start a graceful stop
//! (`Application::run_until_stopped`).

/// SIGTERM and SIGINT listeners, registered when created: a signal that arrives any time after
/// that is handled gracefully (the default action would kill the process).
pub struct ShutdownSignals {
    #[cfg(unix)]
    streams: Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>,
}

impl ShutdownSignals {
    /// Registers the listeners now.
    pub fn listen() -> ShutdownSignals {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let streams = match (
                signal(SignalKind::terminate()),
                signal(SignalKind::interrupt()),
            ) {
                (Ok(term), Ok(int)) => Some((term, int)),
                _ => None,
            };
            ShutdownSignals { streams }
        }
        #[cfg(not(unix))]
        {
            ShutdownSignals {}
        }
    }

    /// Resolves at the first SIGTERM or SIGINT.
    pub async fn recv(self) {
        #[cfg(unix)]
        {
            match self.streams {
                Some((mut term, mut int)) => {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = int.recv() => {}
                    }
                }
                None => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
