//! The OpenAPI document (`GET /openapi.json`) and the reference page (`GET /docs`): the
//! document and the routes cannot drift (`routes`), real answers have the documented statuses,
//! shapes and error codes (`answers`, checked by `validator`), the live event stream's events
//! match their declared schemas (`event_stream`), and the page is complete (`docs_page`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use smsgw::error::ErrorCode;
use uuid::Uuid;

use crate::backend_tests;
use crate::helpers::{Backend, RECIPIENT, Reply, SENDER, TestApp, spawn_app, spawn_app_with};

mod answers;
mod docs_page;
mod event_stream;
mod routes;
mod validator;

use validator::conforms;

const METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];

async fn fetch_document(app: &TestApp) -> Value {
    let reply = app.request("GET", "/openapi.json", None, None).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    reply.body
}

/// Every (method, path template) of the document.
fn operations(doc: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in METHODS {
            if item.get(method).is_some() {
                out.push((method.to_string(), path.clone()));
            }
        }
    }
    out
}

/// Replaces `{param}` segments with a fresh UUID.
fn concrete(template: &str) -> String {
    template
        .split('/')
        .map(|s| {
            if s.starts_with('{') {
                Uuid::now_v7().to_string()
            } else {
                s.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}
