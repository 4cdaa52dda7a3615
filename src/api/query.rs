//! The query string of a `/v1` request (`?limit=10&status=sent`), read once into name → value,
//! and the readers of its optional parameters: a list's filters ([`QueryFilter`]) and its
//! `true`/`false` flags. A value a reader refuses is 422 naming the parameter (docs/api.md,
//! Errors); an absent one is `None`.

use std::collections::HashMap;
use std::future::{Ready, ready};
use std::ops::Deref;

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpRequest, web};

use crate::domain::ai::DraftStatus;
use crate::domain::campaign::CampaignStatus;
use crate::domain::status::{Direction, MessageStatus};
use crate::error::ApiError;

/// A request's query parameters by name (a repeated name keeps its last value), as
/// `web::Query<HashMap<String, String>>` reads them.
pub struct QueryParams(HashMap<String, String>);

impl FromRequest for QueryParams {
    type Error = actix_web::Error;
    type Future = Ready<Result<QueryParams, actix_web::Error>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        // `web::Query` itself, so a malformed query string fails as it always did.
        let query = web::Query::<HashMap<String, String>>::from_request(req, payload).into_inner();
        ready(query.map(|query| QueryParams(query.into_inner())))
    }
}

impl Deref for QueryParams {
    type Target = HashMap<String, String>;

    fn deref(&self) -> &HashMap<String, String> {
        &self.0
    }
}

impl QueryParams {
    /// The optional parameter `name` read with `parse`; a value it refuses is 422 naming
    /// `name` with `refusal`.
    pub fn param<T>(
        &self,
        name: &str,
        parse: impl Fn(&str) -> Option<T>,
        refusal: &str,
    ) -> Result<Option<T>, ApiError> {
        self.get(name)
            .map(|value| parse(value).ok_or_else(|| ApiError::validation(name, refusal)))
            .transpose()
    }

    /// The list filter `T` (its parameter and its refusal are `T`'s).
    pub fn filter<T: QueryFilter>(&self) -> Result<Option<T>, ApiError> {
        self.param(T::NAME, T::from_query, T::REFUSAL)
    }

    /// The optional flag `name`: `true` or `false`.
    pub fn flag(&self, name: &str) -> Result<Option<bool>, ApiError> {
        let refusal = format!("{name} must be true or false");
        self.param(name, |value| value.parse().ok(), &refusal)
    }
}

/// A value a list can be filtered by, read from one query parameter.
pub trait QueryFilter: Sized {
    /// The query parameter.
    const NAME: &'static str;
    /// The 422 message for a value that is none of the type's.
    const REFUSAL: &'static str;

    /// The value `text` names, if any.
    fn from_query(text: &str) -> Option<Self>;
}

/// Declares the list filters: each type's parameter and refusal; the type's own `parse`
/// reads it.
macro_rules! query_filters {
    ($($filter:ty => $name:literal, $refusal:literal;)*) => {
        $(impl QueryFilter for $filter {
            const NAME: &'static str = $name;
            const REFUSAL: &'static str = $refusal;

            fn from_query(text: &str) -> Option<Self> {
                <$filter>::parse(text)
            }
        })*
    };
}

query_filters! {
    Direction => "direction", "direction must be inbound or outbound";
    MessageStatus => "status", "status is not a message status";
    CampaignStatus => "status",
        "status must be draft, scheduled, running, paused, completed or canceled";
    DraftStatus => "status", "status must be pending, sent or discarded";
}
