//! Test-mode helpers: `POST /v1/test/inbound` simulates an SMS arriving on a phone, through the
//! same writer path as a phone's `received` frame (opt-out keywords and all that follows).

use std::future::{Ready, ready};

use actix_web::dev::Payload;
use actix_web::http::StatusCode;
use actix_web::{FromRequest, HttpRequest, web};
use serde::Deserialize;
use utoipa::ToSchema;

use super::fields::{parse_content, parse_number};
use super::messages::{MessageEnvelope, message_out};
use super::{Answer, AppState, Caller, DocumentedRoute, JsonBody, required};
use crate::domain::status::Mode;
use crate::error::{ApiError, ErrorCode, success};
use crate::store::writer::{InboundOutcome, NewMessage};

/// The test-mode operations (route list, see `super::documented_routes`).
pub fn documented_routes() -> Vec<DocumentedRoute> {
    use ErrorCode::*;
    vec![
        DocumentedRoute::of::<__path_inbound>(|| web::to(inbound)).errors(&[
            TestModeOnly,
            ValidationFailed,
            InvalidPhoneNumber,
            ContentTooLong,
        ]),
    ]
}

/// Body of `POST /v1/test/inbound`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct TestInboundIn {
    /// E.164 sender.
    #[schema(required = true, nullable = false)]
    pub from_number: Option<String>,
    /// E.164 number it arrives on (any valid number; no phone needed).
    #[schema(required = true, nullable = false)]
    pub to_number: Option<String>,
    /// The text, up to 10 segments.
    #[schema(required = true, nullable = false)]
    pub content: Option<String>,
}

/// A caller holding a test key; a live key is refused with 403 test_mode_only before the
/// body is read.
pub struct TestCaller(pub Caller);

impl FromRequest for TestCaller {
    type Error = ApiError;
    type Future = Ready<Result<TestCaller, ApiError>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let caller = match Caller::from_request(req, payload).into_inner() {
            Ok(caller) => caller,
            Err(err) => return ready(Err(err)),
        };
        ready(match caller.mode {
            Mode::Test => Ok(TestCaller(caller)),
            Mode::Live => Err(ApiError::TestModeOnly),
        })
    }
}

/// Simulates an SMS arriving (test keys only), with everything that follows.
#[utoipa::path(
    post,
    path = "/v1/test/inbound",
    tag = "test mode",
    request_body = TestInboundIn,
    responses((status = 201, description = "The stored inbound message.", body = MessageEnvelope))
)]
#[tracing::instrument(skip_all, fields(workspace_id = %caller.workspace_id))]
async fn inbound(
    state: web::Data<AppState>,
    TestCaller(caller): TestCaller,
    JsonBody(body): JsonBody<TestInboundIn>,
) -> Answer {
    let from_text = required(body.from_number, "from_number")?;
    let to_text = required(body.to_number, "to_number")?;
    let content = required(body.content, "content")?;
    let from_number = parse_number(&from_text, "from_number")?;
    let to_number = parse_number(&to_text, "to_number")?;
    let text = parse_content(content, "content")?;
    let new = NewMessage::inbound(
        from_number.into_string(),
        to_number.into_string(),
        text.into(),
        state.clock.now_ms(),
    );
    match state.writer.inbound(new, caller.scope()).await? {
        InboundOutcome::Stored(message) => Ok(success(
            StatusCode::CREATED,
            "inbound message received",
            message_out(&message),
        )),
        // Without a phone there is no ref, so nothing can repeat.
        InboundOutcome::Repeat => Err(ApiError::internal(
            "a test inbound message was taken for a repeat",
        )),
    }
}
