//! The resource a `/v1/<resources>/{id}` path names, looked up in the caller's scope: the
//! first step of every handler that reads or changes one resource. A path that is not a UUID
//! and an id the caller's scope does not hold are both the resource's 404 (docs/api.md,
//! Errors), so ids of other workspaces and modes are never revealed.

use std::future::Future;

use sea_orm::DatabaseConnection;
use uuid::Uuid;

use super::{AppState, Caller, missing, parse_id};
use crate::error::ApiError;
use crate::store::StoreError;
use crate::store::messages::{Message, MessageEvent, Scope};
use crate::store::{ai, campaigns, contacts, messages, phones, webhooks};

/// A stored resource found by id within a scope.
pub trait Scoped: Sized {
    /// Its name in the 404 (`webhook not found`).
    const WHAT: &'static str;

    /// The store's read of one resource of `scope`; `StoreError::NotFound` when it has none.
    fn get(
        db: &DatabaseConnection,
        scope: Scope,
        id: Uuid,
    ) -> impl Future<Output = Result<Self, StoreError>>;
}

/// Declares which store read finds a resource, and its name in the 404.
macro_rules! scoped {
    ($($row:ty => $what:literal, $get:path;)*) => {
        $(impl Scoped for $row {
            const WHAT: &'static str = $what;

            fn get(
                db: &DatabaseConnection,
                scope: Scope,
                id: Uuid,
            ) -> impl Future<Output = Result<Self, StoreError>> {
                // The store's own id type (`ContactId`, `EndpointId`, …) or the Uuid itself.
                $get(db, scope, id.into())
            }
        })*
    };
}

scoped! {
    contacts::Contact => "contact", contacts::get;
    webhooks::EndpointRecord => "webhook", webhooks::get;
    phones::PhoneRecord => "phone", phones::get;
    campaigns::Campaign => "campaign", campaigns::get;
    ai::Draft => "draft", ai::get;
    (Message, Vec<MessageEvent>) => "message", messages::get_with_events;
}

impl AppState {
    /// The resource whose id is the path segment `path`, in the caller's scope, or its 404.
    pub async fn find<T: Scoped>(&self, caller: &Caller, path: &str) -> Result<T, ApiError> {
        let id = parse_id(path, T::WHAT)?;
        self.find_id(caller, id).await
    }

    /// The resource `id` (a path id already parsed) in the caller's scope, or its 404.
    pub async fn find_id<T: Scoped>(&self, caller: &Caller, id: Uuid) -> Result<T, ApiError> {
        T::get(&self.db, caller.scope(), id)
            .await
            .map_err(missing(T::WHAT))
    }
}
