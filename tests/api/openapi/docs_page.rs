//! The reference page (`GET /docs`): complete and served by the binary, nothing loaded from
//! elsewhere.

use super::*;

/// `GET /docs` is a complete page served by the binary: every operation and schema of the
/// document, internal links that resolve, nothing loaded from elsewhere.
async fn docs_page_is_self_contained(backend: Backend) {
    let app = spawn_app(backend).await;
    let doc = fetch_document(&app).await;
    let page = app.fetch("/docs", &[]).await;
    assert_eq!(page.status, 200);
    let content_type = page.header("content-type");
    assert!(content_type.starts_with("text/html"), "{content_type}");
    let html = page.body;
    assert!(html.starts_with("<!doctype html>"));
    // Its icon is one the binary serves (no request for a missing /favicon.ico).
    assert!(
        html.contains(r#"<link rel="icon" href="/portal/favicon.svg""#),
        "no favicon link"
    );
    // Operations are filed under the tag their handler names, not all under one.
    let mut tags = BTreeSet::new();
    for (method, path) in operations(&doc) {
        let tag = doc["paths"][&path][&method]["tags"][0].as_str();
        let tag = tag.unwrap_or_else(|| panic!("{method} {path} has no tag"));
        tags.insert(tag.to_string());
    }
    for tag in [
        "messages",
        "phones",
        "contacts",
        "campaigns",
        "webhooks",
        "ai",
    ] {
        assert!(tags.contains(tag), "no operation tagged {tag}: {tags:?}");
        assert!(
            html.contains(&format!("<h2>{tag}</h2>")),
            "no /docs section {tag}"
        );
    }
    for (method, path) in operations(&doc) {
        let id = doc["paths"][&path][&method]["operationId"]
            .as_str()
            .unwrap();
        assert!(
            html.contains(&format!("id=\"op-{id}\"")),
            "{method} {path} has a section"
        );
        assert!(
            html.contains(&format!("<code>{path}</code>")),
            "{path} is shown"
        );
    }
    for name in doc["components"]["schemas"].as_object().unwrap().keys() {
        assert!(
            html.contains(&format!("id=\"schema-{name}\"")),
            "schema {name}"
        );
    }
    // Every internal link has its target; nothing points outside the server.
    for piece in html.split("href=\"").skip(1) {
        let target = piece.split('"').next().unwrap();
        if let Some(anchor) = target.strip_prefix('#') {
            assert!(
                html.contains(&format!("id=\"{anchor}\"")),
                "dangling link #{anchor}"
            );
        } else {
            assert!(target.starts_with('/'), "external link {target}");
        }
    }
    for external in ["src=", "http://", "https://", "<script", "@import", "url("] {
        assert!(
            !html.contains(external),
            "the page loads nothing from elsewhere ({external})"
        );
    }
}

backend_tests!(docs_page_is_self_contained,);
