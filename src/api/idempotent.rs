//! `request_id` on creates other than sends (docs/api.md, "Idempotent creates"): a repeat of
//! a create that succeeded answers 409 `duplicate_request` with the first resource's id, and
//! never creates a second one, even when the two requests arrive at once.

use std::time::Duration;

use actix_web::HttpResponse;
use uuid::Uuid;

use super::{Answer, AppState, Caller};
use crate::error::ApiError;
use crate::send::RequestId;
use crate::store::idempotency::{self, IdempotencyKey, Operation, Reservation};

/// How long a repeat waits for the first request with its key to finish before answering
/// that it is still running.
const WAIT_FOR_FIRST: Duration = Duration::from_secs(5);
/// How often a waiting repeat looks again.
const POLL_EVERY: Duration = Duration::from_millis(25);

/// The body of a create that takes a `request_id`. Each resource implements it beside its
/// request type (with [`create_body!`]), so this module knows no resource.
pub trait CreateBody {
    /// Which create it is (a key's operation).
    const OPERATION: Operation;
    /// What it creates, as `duplicate_request` names it.
    const WHAT: &'static str;

    /// Takes the `request_id` out of the body.
    fn take_request_id(&mut self) -> Option<String>;
}

/// Declares a create body whose `request_id: Option<String>` field is the key: the body type,
/// its [`Operation`] variant and what it creates, e.g.
/// `create_body!(ContactIn => CreateContact, "contact");`.
macro_rules! create_body {
    ($body:ty => $operation:ident, $what:literal) => {
        impl $crate::api::idempotent::CreateBody for $body {
            const OPERATION: $crate::store::idempotency::Operation =
                $crate::store::idempotency::Operation::$operation;
            const WHAT: &'static str = $what;

            fn take_request_id(&mut self) -> Option<String> {
                self.request_id.take()
            }
        }
    };
}
pub(crate) use create_body;

/// What a create answers: its response and the new resource's id.
pub type Created = Result<(HttpResponse, Uuid), ApiError>;

/// Runs `create` with `body` at most once per the body's `request_id` (none given: every
/// time). `create` answers the response and the new resource's id; its error releases the
/// key, so a corrected retry may use it.
pub async fn create_once<B: CreateBody>(
    state: &AppState,
    caller: &Caller,
    mut body: B,
    create: impl AsyncFnOnce(&AppState, &Caller, B) -> Created,
) -> Answer {
    let Some(text) = body.take_request_id() else {
        return create(state, caller, body).await.map(|(out, _)| out);
    };
    let request_id = RequestId::parse(text)
        .map_err(|err| ApiError::validation("request_id", err.to_string()))?;
    let key = IdempotencyKey {
        scope: caller.scope(),
        operation: B::OPERATION,
        request_id: request_id.into_string(),
    };
    let deadline = actix_web::rt::time::Instant::now() + WAIT_FOR_FIRST;
    loop {
        match idempotency::reserve(&state.db, &key, state.clock.now_ms()).await? {
            Reservation::Reserved => break,
            Reservation::Done(id) => {
                return Err(ApiError::DuplicateRequest { id, what: B::WHAT });
            }
            Reservation::Running if actix_web::rt::time::Instant::now() < deadline => {
                actix_web::rt::time::sleep(POLL_EVERY).await;
            }
            Reservation::Running => return Err(ApiError::RequestInProgress),
        }
    }
    match create(state, caller, body).await {
        Ok((out, id)) => {
            if let Err(err) = idempotency::complete(&state.db, &key, id).await {
                // The resource exists; the key stays reserved and is given up after a minute.
                tracing::warn!(error = %err, "request_id could not be recorded");
            }
            Ok(out)
        }
        Err(err) => {
            if let Err(release) = idempotency::release(&state.db, &key).await {
                tracing::warn!(error = %release, "request_id could not be released");
            }
            Err(err)
        }
    }
}
