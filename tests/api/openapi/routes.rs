//! The document and the routes cannot drift: the document is OpenAPI 3.1 with every route,
//! every documented operation is served and every other method on its path is 405, and no
//! `/v1` route is registered outside the route list.

use super::*;

async fn document_is_openapi_3_1_with_every_route(backend: Backend) {
    let app = spawn_app(backend).await;
    let doc = fetch_document(&app).await;
    assert!(
        doc["openapi"].as_str().unwrap().starts_with("3.1"),
        "OpenAPI 3.1: {}",
        doc["openapi"]
    );
    let ops = operations(&doc);
    // The routes of docs/api.md that exist so far are all documented.
    for (method, path) in [
        ("post", "/v1/messages/send"),
        ("post", "/v1/messages/bulk-send"),
        ("post", "/v1/messages/batch-status"),
        ("get", "/v1/messages"),
        ("get", "/v1/messages/{id}"),
        ("delete", "/v1/messages/{id}"),
        ("get", "/v1/phones/connect"),
        ("post", "/v1/phones"),
        ("get", "/v1/phones"),
        ("get", "/v1/phones/{id}"),
        ("patch", "/v1/phones/{id}"),
        ("delete", "/v1/phones/{id}"),
        ("post", "/v1/phones/{id}/rotate-token"),
        ("get", "/v1/keys"),
        ("post", "/v1/keys"),
        ("delete", "/v1/keys/{id}"),
    ] {
        assert!(
            ops.contains(&(method.to_string(), path.to_string())),
            "{method} {path} is not in the document"
        );
    }
    let mut ids = BTreeSet::new();
    for (method, path) in &ops {
        assert!(path.starts_with("/v1/"), "{path} is not under /v1");
        let op = &doc["paths"][path][method];
        assert!(
            ids.insert(op["operationId"].as_str().unwrap().to_string()),
            "operationId of {method} {path} is not unique"
        );
        assert!(
            op["responses"]["500"]["x-error-codes"]
                .as_array()
                .is_some_and(|c| c.contains(&json!("internal_error"))),
            "{method} {path} documents the internal error"
        );
        if path != "/v1/phones/connect" {
            assert_eq!(
                op["security"],
                json!([{ "api_key": [] }]),
                "{method} {path}"
            );
            let codes = &op["responses"]["401"]["x-error-codes"];
            assert_eq!(
                codes,
                &json!(["missing_api_key", "invalid_api_key"]),
                "{method} {path}"
            );
            let limited = &op["responses"]["429"];
            assert!(
                limited["x-error-codes"]
                    .as_array()
                    .is_some_and(|c| c.contains(&json!("rate_limited"))),
                "{method} {path}"
            );
            assert_eq!(
                limited["headers"]["Retry-After"]["schema"]["type"], "integer",
                "{method} {path}"
            );
        }
        for (status, response) in op["responses"].as_object().unwrap() {
            let status: u16 = status.parse().unwrap();
            if status >= 400 {
                assert!(
                    response["x-error-codes"]
                        .as_array()
                        .is_some_and(|c| !c.is_empty()),
                    "{method} {path} {status} lists its error codes"
                );
                assert_eq!(
                    response["content"]["application/json"]["schema"]["$ref"],
                    "#/components/schemas/ErrorEnvelope"
                );
            }
        }
    }
    // The schema's codes are exactly the enum's (which a unit test checks against docs/api.md).
    let codes = doc["components"]["schemas"]["ErrorCode"]["enum"]
        .as_array()
        .unwrap()
        .clone();
    let expected: Vec<Value> = ErrorCode::iter().map(|code| json!(code.as_str())).collect();
    assert_eq!(codes, expected);
}

/// Drift, through HTTP: every documented operation is served (never the route-level 404 or a
/// 405), and every method the document does not list on a path is 405.
async fn documented_routes_are_served_and_nothing_else(backend: Backend) {
    let app = spawn_app(backend).await;
    let doc = fetch_document(&app).await;
    let ops = operations(&doc);
    let paths: BTreeSet<&String> = ops.iter().map(|(_, p)| p).collect();
    for path in paths {
        let url = concrete(path);
        for method in METHODS {
            let documented = ops.contains(&(method.to_string(), path.clone()));
            if documented && is_event_stream(&doc, method, path) {
                // The answer never ends: only its status and type are checked.
                let response = app
                    .client
                    .request(
                        awc::http::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap(),
                        format!("{}{url}", app.address),
                    )
                    .insert_header(("x-api-key", app.test_key.as_str()))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(response.status().as_u16(), 200, "{method} {path}");
                assert_eq!(
                    response.headers().get("content-type").unwrap(),
                    "text/event-stream"
                );
                continue;
            }
            let body = (method != "get" && method != "delete").then(|| json!({}));
            let reply = app
                .request(
                    &method.to_uppercase(),
                    &url,
                    Some(&app.test_key),
                    body.clone(),
                )
                .await;
            if documented {
                assert_ne!(
                    reply.status, 405,
                    "{method} {path} is documented, not served"
                );
                assert_ne!(
                    reply.body["message"], "route not found",
                    "{method} {path} is documented, not served"
                );
                conforms(&doc, method, path, &reply);
            } else {
                assert_eq!(
                    reply.status, 405,
                    "{method} {path} is served but not documented: {:?}",
                    reply.body
                );
            }
        }
    }
}

/// Whether the operation's success answer is a server-sent event stream.
fn is_event_stream(doc: &Value, method: &str, template: &str) -> bool {
    doc["paths"][template][method]["responses"]["200"]["content"]
        .get("text/event-stream")
        .is_some()
}

/// Source scan: the route list (`api::documented_routes()`) is the only place `/v1` routes come from.
#[test]
fn no_v1_route_is_registered_outside_the_route_list() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    collect_rust_files(&root, &mut files);
    assert!(files.len() > 10, "the source tree was found");
    let route_list = root.join("api").join("routes.rs");
    let mut all_api_source = String::new();
    let mut annotated = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        if file.starts_with(root.join("api")) {
            all_api_source.push_str(&text);
        }
        // The route list itself, and the load-test harness's bare ceiling server (a separate
        // actix app measured beside ours, never mounted in smsgw's server).
        if *file == route_list || file.starts_with(root.join("tools").join("loadtest")) {
            continue;
        }
        let name = file.display();
        // Whitespace removed, so a call split over lines by rustfmt is still seen.
        let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
        for call in [
            "web::scope",
            "web::resource",
            "Scope::new",
            "Resource::new",
            ".route",
            "#[get",
            "#[post",
            "#[put",
            "#[patch",
            "#[delete",
            "#[route",
        ] {
            for path in [
                "(\"/v1",
                "(API_PREFIX",
                "(routes::API_PREFIX",
                "(crate::api::routes::API_PREFIX",
            ] {
                assert!(
                    !compact.contains(&format!("{call}{path}")),
                    "{name} registers a /v1 route outside the route list ({call}{path}…): add it \
                     to api::documented_routes(), see \"To add a route\" in docs/architecture.md"
                );
            }
        }
        // Every annotated handler is in the route list.
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if line.trim_start().starts_with("#[utoipa::path(") {
                let handler = lines[i..]
                    .iter()
                    .find_map(|l| {
                        let l = l.trim_start();
                        let rest = l
                            .strip_prefix("pub async fn ")
                            .or_else(|| l.strip_prefix("async fn "))?;
                        rest.split('(').next().map(str::to_string)
                    })
                    .unwrap_or_else(|| panic!("{name}:{}: no handler follows", i + 1));
                annotated.push((name.to_string(), handler));
            }
        }
    }
    assert!(
        annotated.len() >= 13,
        "annotated handlers found: {annotated:?}"
    );
    for (file, handler) in annotated {
        assert!(
            all_api_source.contains(&format!("__path_{handler}>")),
            "{file}: handler {handler} is annotated but not in any documented_routes() list"
        );
    }
}

fn collect_rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect_rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

backend_tests!(
    document_is_openapi_3_1_with_every_route,
    documented_routes_are_served_and_nothing_else,
);
