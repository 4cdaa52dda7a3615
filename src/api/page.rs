//! Cursor-paged lists (docs/api.md, Pagination): a list handler takes the [`PageRequest`] of its
//! query string, reads that page of rows with [`PageRequest::read`] (or, for a plain list of
//! the caller's scope, `AppState::list_scoped`), maps the rows to its response items, and
//! answers with [`Page::answer`] in the resource's page struct, declared by `page_out!`.

use std::collections::HashMap;
use std::future::Future;

use actix_web::dev::Payload;
use actix_web::http::StatusCode;
use actix_web::{FromRequest, HttpRequest, HttpResponse};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Serialize;
use uuid::Uuid;

use super::QueryParams;
use crate::error::{ApiError, success};
use crate::store::StoreError;
use crate::store::messages::Position;

/// `limit` and `cursor` of every list operation.
#[derive(Debug, Clone, Copy)]
pub struct PageRequest {
    pub limit: u64,
    pub after: Option<Position>,
}

/// Default and bounds of list page sizes.
pub const DEFAULT_PAGE_SIZE: u64 = 25;
pub const MAX_PAGE_SIZE: u64 = 100;

impl PageRequest {
    /// Reads `limit` (1–100, default 25) and `cursor` from a query map.
    pub fn parse(query: &HashMap<String, String>) -> Result<PageRequest, ApiError> {
        let limit = parse_limit(query, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)?;
        let after = parse_cursor(query, decode_cursor)?;
        Ok(PageRequest { limit, after })
    }

    /// Reads this page with `read` (a store list returning the rows and whether more
    /// follow).
    pub async fn read<R: Positioned, F>(
        self,
        read: impl FnOnce(Option<Position>, u64) -> F,
    ) -> Result<Page<R>, ApiError>
    where
        F: Future<Output = Result<(Vec<R>, bool), StoreError>>,
    {
        let (rows, has_more) = read(self.after, self.limit).await?;
        let next_cursor = if has_more {
            rows.last().map(|row| encode_cursor(row.position()))
        } else {
            None
        };
        Ok(Page {
            items: rows,
            has_more,
            next_cursor,
        })
    }
}

/// The page a plain list's query string asks for. A list that also takes filters or a path
/// id reads it from its [`QueryParams`] with [`PageRequest::parse`] instead, where it judges
/// `limit` and `cursor`: before its filters, after its id.
impl FromRequest for PageRequest {
    type Error = actix_web::Error;
    type Future = std::future::Ready<Result<PageRequest, actix_web::Error>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let query = QueryParams::from_request(req, payload).into_inner();
        std::future::ready(query.and_then(|query| Ok(PageRequest::parse(&query)?)))
    }
}

/// `limit` of a query map: an integer from 1 to `max`, `default` when absent.
pub fn parse_limit(
    query: &HashMap<String, String>,
    default: u64,
    max: u64,
) -> Result<u64, ApiError> {
    match query.get("limit") {
        None => Ok(default),
        Some(text) => match text.parse::<u64>() {
            Ok(n) if (1..=max).contains(&n) => Ok(n),
            _ => Err(ApiError::validation(
                "limit",
                format!("limit must be an integer from 1 to {max}"),
            )),
        },
    }
}

/// `cursor` of a query map, read with `decode` (None when absent or empty); a value `decode`
/// refuses is 422.
pub fn parse_cursor<C>(
    query: &HashMap<String, String>,
    decode: impl FnOnce(&str) -> Option<C>,
) -> Result<Option<C>, ApiError> {
    match query.get("cursor").map(String::as_str) {
        None | Some("") => Ok(None),
        Some(cursor) => decode(cursor).map(Some).ok_or_else(|| {
            ApiError::validation("cursor", "cursor is not a value this API returned")
        }),
    }
}

/// Opaque cursor for a (created_at, id) position.
pub fn encode_cursor(position: Position) -> String {
    URL_SAFE_NO_PAD.encode(format!("{}:{}", position.created_at, position.id))
}

/// The position an [`encode_cursor`] cursor stands for.
pub fn decode_cursor(cursor: &str) -> Option<Position> {
    let bytes = URL_SAFE_NO_PAD.decode(cursor).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (at, id) = text.split_once(':')?;
    Some(Position {
        created_at: at.parse().ok()?,
        id: Uuid::parse_str(id).ok()?,
    })
}

/// The query parameters every cursor-paged list takes, documented once (`params(PageParams)`
/// in a list's `#[utoipa::path]`); [`PageRequest::parse`] reads them.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // documentation only: the handlers parse the query with `PageRequest`
pub struct PageParams {
    /// 1–100, default 25
    limit: Option<u32>,
    /// `next_cursor` of the previous page
    cursor: Option<String>,
}

/// A stored row a cursor can point after: its `(created_at, id)`.
pub trait Positioned {
    fn position(&self) -> Position;
}

/// Rows listed newest first by their `(created_at, id)`; after `typed:`, rows whose id is one
/// of the `domain::ids` types (the cursor keeps its UUID).
macro_rules! positioned_by_creation {
    (@row $row:ty, $id:ident => $uuid:expr) => {
        impl Positioned for $row {
            fn position(&self) -> Position {
                let $id = self.id;
                Position {
                    created_at: self.created_at,
                    id: $uuid,
                }
            }
        }
    };
    (typed: $($row:ty),* $(,)?) => {
        $(positioned_by_creation!(@row $row, id => id.as_uuid());)*
    };
    ($($row:ty),* $(,)?) => {
        $(positioned_by_creation!(@row $row, id => id);)*
    };
}

positioned_by_creation!(
    crate::store::messages::Message,
    crate::store::phones::PhoneRecord,
    crate::store::pools::PoolRecord,
    crate::store::workspaces::KeyRecord,
    crate::store::ai::Draft,
);
positioned_by_creation!(
    typed: crate::store::contacts::Contact,
    crate::store::webhooks::EndpointRecord,
    crate::store::campaigns::Campaign,
);

/// One page of a list: the items, whether more follow, and the cursor after the last item
/// (null when nothing follows).
#[derive(Debug)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub has_more: bool,
    pub next_cursor: Option<String>,
}

impl<T> Page<T> {
    /// The list's answer: 200 with this page as the resource's page struct `P` (declared by
    /// `page_out!`) in the success envelope.
    pub fn answer<P>(self, message: &str) -> HttpResponse
    where
        P: From<Page<T>> + Serialize,
    {
        success(StatusCode::OK, message, P::from(self))
    }

    /// The same page with each item mapped (a row to its response item).
    pub fn map<'a, O>(&'a self, out: impl FnMut(&'a T) -> O) -> Page<O> {
        Page {
            items: self.items.iter().map(out).collect(),
            has_more: self.has_more,
            next_cursor: self.next_cursor.clone(),
        }
    }
}

/// Declares a list's response `data`: `{<key>: [item…], has_more, next_cursor}`, built from a
/// [`Page`] of its items.
macro_rules! page_out {
    ($(#[$doc:meta])* $name:ident $(<$lt:lifetime>)?, $key:ident: $item:ty) => {
        $(#[$doc])*
        #[derive(serde::Serialize, utoipa::ToSchema)]
        pub struct $name $(<$lt>)? {
            pub $key: Vec<$item>,
            pub has_more: bool,
            /// Pass as `cursor` for the next page; null when `has_more` is false.
            pub next_cursor: Option<String>,
        }

        impl $(<$lt>)? From<$crate::api::page::Page<$item>> for $name $(<$lt>)? {
            fn from(page: $crate::api::page::Page<$item>) -> Self {
                $name {
                    $key: page.items,
                    has_more: page.has_more,
                    next_cursor: page.next_cursor,
                }
            }
        }
    };
}
pub(crate) use page_out;
