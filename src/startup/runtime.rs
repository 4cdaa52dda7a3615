//! The process's runtime: the actix System every command runs on, and the TLS crypto
//! provider of the whole process.

/// Runs `future` to completion on a fresh actix System and tears the System down inside a
/// fallback Tokio context.
///
/// actix's runtime drops its local task set (every actor and spawned future still pending)
/// outside any Tokio context. A pending database call that holds a pooled sqlx connection then
/// panics in its destructor ("this functionality requires a Tokio context"), and a second such
/// panic during that unwind aborts the process. The fallback context gives those destructors a
/// runtime to hand their connection to; it is never driven, and is dropped last.
pub fn block_on_system<F: std::future::Future>(future: F) -> std::io::Result<F::Output> {
    let fallback = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let _context = fallback.enter();
    let output = actix_web::rt::System::new().block_on(future);
    Ok(output)
}

/// Selects ring as the process's TLS crypto provider (outbound HTTPS of webhooks and clients).
/// Idempotent: later calls keep the provider already installed.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
