//! The resource a `/v1/<resources>/{id}` path names, looked up in the caller's scope: the
//! first step of every handler that reads or changes one resource. A path that is not a UUID
//! and an id the caller's scope does not hold are both the resource's 404 (docs/api.md,
//! Errors), so ids of other workspaces and modes are never revealed. A plain list of the
//! caller's scope reads its page here too ([`AppState::list_scoped`]).

use std::future::Future;

use sea_orm::DatabaseConnection;
use uuid::Uuid;

use super::page::{Page, Positioned};
use super::{AppState, Caller, PageRequest, missing, parse_id};
use crate::error::ApiError;
use crate::store::StoreError;
use crate::store::messages::{Message, MessageEvent, Position};
use crate::store::scoped::Scope;
use crate::store::{ai, campaigns, contacts, messages, phones, pools, webhooks};

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
    pools::PoolRecord => "pool", pools::get;
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

    /// The page `request` asks for of the caller's scope's rows, read with `list` (a store
    /// list of a scope, newest first).
    pub async fn list_scoped<'a, R: Positioned, F>(
        &'a self,
        caller: &Caller,
        request: PageRequest,
        list: impl FnOnce(&'a DatabaseConnection, Scope, Option<Position>, u64) -> F,
    ) -> Result<Page<R>, ApiError>
    where
        F: Future<Output = Result<(Vec<R>, bool), StoreError>>,
    {
        let scope = caller.scope();
        request
            .read(|after, limit| list(&self.db, scope, after, limit))
            .await
    }
}
