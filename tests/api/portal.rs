//! The web portal (docs/api.md, Operations): `GET /` leads to `/portal/`, the page links every
//! section and is served with a strict Content-Security-Policy, every file it names is served by
//! the binary with its content type, its scripts call only documented `/v1` routes, and
//! `/portal/qr.svg` draws the QR code of a pairing token.

use std::collections::BTreeSet;

use qrcode::render::svg;
use qrcode::{EcLevel, QrCode};
use serde_json::Value;

use crate::backend_tests;
use crate::helpers::{Backend, spawn_app, spawn_app_with};

/// The portal's sections: each has a link in the navigation and an element with its id.
const SECTIONS: [&str; 9] = [
    "home",
    "conversations",
    "inbox",
    "send",
    "phones",
    "contacts",
    "campaigns",
    "webhooks",
    "drafts",
];

/// A plain GET that does not follow redirects: status, headers, body.
/// Values of every `name="…"` attribute of the page.
fn attributes(html: &str, name: &str) -> Vec<String> {
    html.split(&format!(" {name}=\""))
        .skip(1)
        .map(|rest| rest.split('"').next().unwrap().to_string())
        .collect()
}

/// The files the page loads or links to on this server (scripts, stylesheets, icons).
fn page_assets(html: &str) -> Vec<String> {
    let mut out: Vec<String> = attributes(html, "src");
    out.extend(attributes(html, "href").into_iter().filter(|h| {
        h.starts_with("/portal/") // the page's own files; `#section` and `/docs` are links
    }));
    out
}

fn expected_content_type(path: &str) -> &'static str {
    match path.rsplit('.').next().unwrap() {
        "js" => "text/javascript",
        "css" => "text/css",
        "svg" => "image/svg+xml",
        other => panic!("{path}: no expected content type for .{other}"),
    }
}

async fn root_redirects_to_the_portal(backend: Backend) {
    let app = spawn_app(backend).await;
    for path in ["/", "/portal"] {
        let reply = app.fetch(path, &[]).await;
        assert_eq!(reply.status, 302, "{path}");
        assert_eq!(reply.header("location"), "/portal/", "{path}");
    }
    // An unknown portal file is the API's 404 envelope, not the page.
    let missing = app.request("GET", "/portal/nope.js", None, None).await;
    missing.expect_error(404, "not_found");
}

/// The page: HTML with the CSP, a link to and an element for each section, no inline script,
/// and every file it names served by the binary with the right content type.
async fn portal_page_links_every_section_and_serves_its_assets(backend: Backend) {
    let app = spawn_app(backend).await;
    // No key needed: the page asks for one.
    let page = app.fetch("/portal/", &[]).await;
    assert_eq!(page.status, 200);
    assert!(page.header("content-type").starts_with("text/html"));
    let csp = page.header("content-security-policy");
    for directive in [
        "default-src 'none'",
        "script-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(directive), "CSP {csp:?} lacks {directive}");
    }
    assert!(
        !csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"),
        "{csp}"
    );
    assert_eq!(page.header("x-content-type-options"), "nosniff");
    assert_eq!(page.header("cache-control"), "no-cache");
    let html = &page.body;
    assert!(html.starts_with("<!doctype html>"));
    for section in SECTIONS {
        assert!(
            html.contains(&format!("href=\"#{section}\"")),
            "no link to {section}"
        );
        assert!(
            html.contains(&format!("id=\"{section}\"")),
            "no section {section}"
        );
    }
    // The AI drafts section edits the settings: the form's inputs, named after the fields of
    // `PUT /v1/ai/settings` so an error's `data.field` marks them.
    let drafts = html
        .split("<section id=\"drafts\"")
        .nth(1)
        .and_then(|rest| rest.split("</section>").next())
        .expect("the drafts section");
    for (id, name) in [
        ("ai-settings-form", None),
        ("ai-enabled", Some("enabled")),
        ("ai-mode", Some("mode")),
        ("ai-instructions", Some("instructions")),
        ("ai-rules-set", Some("rules")),
        ("ai-rules", None),
        ("ai-rule-add", None),
        ("ai-settings-save", None),
    ] {
        let tag = drafts
            .split(&format!(" id=\"{id}\""))
            .nth(1)
            .and_then(|rest| rest.split('>').next())
            .unwrap_or_else(|| panic!("the AI section has no #{id}"));
        if let Some(name) = name {
            assert!(
                tag.contains(&format!(" name=\"{name}\"")),
                "#{id} is not named {name}"
            );
        }
    }
    for mode in ["draft", "auto"] {
        assert!(
            drafts.contains(&format!("<option value=\"{mode}\">")),
            "no mode {mode}"
        );
    }
    // Scripts come from files only (the CSP would block inline ones anyway).
    for tag in html.split("<script").skip(1) {
        let open = tag.split('>').next().unwrap();
        assert!(open.contains(" src=\""), "inline script: <script{open}>");
    }
    for inline in [" style=\"", "<style", " onclick=", " onload=", " onsubmit="] {
        assert!(
            !html.contains(inline),
            "inline {inline:?} would be blocked by the CSP"
        );
    }
    let assets = page_assets(html);
    let scripts = attributes(html, "src");
    assert!(scripts.len() >= 2, "{scripts:?}");
    assert!(assets.iter().any(|a| a.ends_with(".css")), "{assets:?}");
    for asset in &assets {
        assert!(
            asset.starts_with("/portal/"),
            "{asset}: every file comes from this server's /portal/"
        );
        let reply = app.fetch(asset, &[]).await;
        assert_eq!(reply.status, 200, "{asset}");
        let content_type = reply.header("content-type");
        assert!(
            content_type.starts_with(expected_content_type(asset)),
            "{asset}: {content_type}"
        );
        assert_eq!(reply.header("x-content-type-options"), "nosniff", "{asset}");
        assert!(!reply.body.is_empty(), "{asset}");
        // Revalidation: the ETag answers 304 without a body.
        let etag = reply.header("etag").to_string();
        assert!(etag.starts_with('"'), "{asset}: etag {etag:?}");
        let again = app.fetch(asset, &[("if-none-match", &etag)]).await;
        assert_eq!(again.status, 304, "{asset}");
        assert!(again.body.is_empty());
    }
    // Nothing points outside this server.
    for value in attributes(html, "href").into_iter().chain(scripts) {
        assert!(
            value.starts_with('#') || (value.starts_with('/') && !value.starts_with("//")),
            "{value} leaves the server"
        );
    }
}

/// String literals of a script (quotes, apostrophes, backticks), in order, each with the text
/// before it; `${…}` parts of template literals become `{}`. Comments are skipped.
fn string_literals(js: &str) -> Vec<(String, String)> {
    let chars: Vec<char> = js.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '/' if chars.get(i + 1) == Some(&'/') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '/' if chars.get(i + 1) == Some(&'*') => {
                i += 2;
                while i + 1 < chars.len() && !(chars[i] == '*' && chars[i + 1] == '/') {
                    i += 1;
                }
                i += 2;
            }
            quote @ ('\'' | '"' | '`') => {
                let before: String = chars[i.saturating_sub(40)..i].iter().collect();
                let (text, end) = read_literal(&chars, i + 1, quote, &mut out);
                out.push((before, text));
                i = end;
            }
            _ => i += 1,
        }
    }
    out
}

/// Reads a literal opened by `quote` just before `start`; returns its text and the index after
/// it. Literals inside `${…}` are collected into `nested`.
fn read_literal(
    chars: &[char],
    mut i: usize,
    quote: char,
    nested: &mut Vec<(String, String)>,
) -> (String, usize) {
    let mut text = String::new();
    while i < chars.len() {
        let c = chars[i];
        if c == '\\' {
            text.push(chars.get(i + 1).copied().unwrap_or('\\'));
            i += 2;
        } else if c == quote {
            return (text, i + 1);
        } else if quote == '`' && c == '$' && chars.get(i + 1) == Some(&'{') {
            // Skip the expression, with its own nested braces and literals.
            i += 2;
            let mut depth = 1;
            while i < chars.len() && depth > 0 {
                match chars[i] {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    q @ ('\'' | '"' | '`') => {
                        let before: String = chars[i.saturating_sub(40)..i].iter().collect();
                        let (inner, end) = read_literal(chars, i + 1, q, nested);
                        nested.push((before, inner));
                        i = end;
                        continue;
                    }
                    _ => {}
                }
                i += 1;
            }
            text.push_str("{}");
        } else {
            text.push(c);
            i += 1;
        }
    }
    panic!("unterminated literal: {text}");
}

/// The method of the call a `/v1` literal sits in: `api('POST', '/v1/…')` gives POST; a path
/// given to a list (`path: '/v1/…'`) is read with GET.
fn method_before(before: &str) -> String {
    let before = before.trim_end();
    for method in ["GET", "POST", "PUT", "PATCH", "DELETE"] {
        if before.ends_with(&format!("api('{method}',")) {
            return method.to_string();
        }
    }
    assert!(
        before.ends_with("path:"),
        "a /v1 path outside api('METHOD', …) or a list's `path:`: …{before}"
    );
    "GET".to_string()
}

/// Path templates match segment by segment; `{…}` matches any one parameter.
fn same_template(a: &str, b: &str) -> bool {
    let (a, b): (Vec<&str>, Vec<&str>) = (a.split('/').collect(), b.split('/').collect());
    a.len() == b.len()
        && a.iter()
            .zip(&b)
            .all(|(x, y)| x == y || (x.starts_with('{') && y.starts_with('{')))
}

/// Every request the scripts can make is a documented `/v1` operation (method and path).
/// Nothing else is fetched: one `fetch` call, in the API client.
async fn portal_scripts_call_only_documented_v1_routes(backend: Backend) {
    let app = spawn_app(backend).await;
    let doc = app
        .request("GET", "/openapi.json", None, None)
        .await
        .expect(200);
    let mut documented = Vec::new();
    for (path, item) in doc.body["paths"].as_object().unwrap() {
        for method in ["get", "post", "put", "patch", "delete"] {
            if item.get(method).is_some() {
                documented.push((method.to_uppercase(), path.clone()));
            }
        }
    }
    let page = app.fetch("/portal/", &[]).await;
    let mut scripts = String::new();
    for src in attributes(&page.body, "src") {
        let body = app.fetch(&src, &[]).await.body;
        if src.starts_with("/portal/vendor/") {
            // A vendored library (the QR code drawer) is not scanned for paths: its comments
            // cite its home page. It must still reach nothing.
            for forbidden in [
                "fetch(",
                "XMLHttpRequest",
                "WebSocket(",
                "EventSource",
                "sendBeacon",
                "import(",
                "eval(",
            ] {
                assert!(!body.contains(forbidden), "{src} uses {forbidden}");
            }
            continue;
        }
        scripts.push_str(&body);
        scripts.push('\n');
    }
    assert_eq!(
        scripts.matches("fetch(").count(),
        1,
        "one fetch call, in the API client"
    );
    for forbidden in [
        "XMLHttpRequest",
        "WebSocket(",
        "EventSource",
        "sendBeacon",
        "import(",
        "http://",
        "https://",
        "innerHTML",
        "eval(",
    ] {
        assert!(!scripts.contains(forbidden), "the scripts use {forbidden}");
    }
    let mut calls = BTreeSet::new();
    for (before, literal) in string_literals(&scripts) {
        if !literal.starts_with('/') || literal.starts_with("//") || literal == "/v1/" {
            continue; // not a path, or the client's own prefix check
        }
        let path = literal.split('?').next().unwrap().to_string();
        if path.starts_with("/v1/") {
            calls.insert((method_before(&before), path));
        } else {
            assert!(
                path.starts_with("/portal/"),
                "{literal}: the scripts reach only /v1 and the portal's own files"
            );
        }
    }
    // The scan saw the calls of every section (so it is not vacuous).
    for (method, path) in [
        ("GET", "/v1/messages"),
        ("POST", "/v1/messages/send"),
        ("POST", "/v1/messages/bulk-send"),
        ("POST", "/v1/phones"),
        ("POST", "/v1/phones/{}/rotate-token"),
        ("POST", "/v1/contacts"),
        ("POST", "/v1/campaigns"),
        ("POST", "/v1/campaigns/{}/pause"),
        ("POST", "/v1/webhooks"),
        ("GET", "/v1/webhooks/{}/deliveries"),
        ("GET", "/v1/ai/drafts"),
        ("GET", "/v1/ai/settings"),
        ("PUT", "/v1/ai/settings"),
        ("GET", "/v1/workspace"),
        ("PATCH", "/v1/workspace"),
        ("GET", "/v1/overview"),
        ("GET", "/v1/stats/daily"),
        ("GET", "/v1/conversations"),
        ("GET", "/v1/conversations/{}"),
        ("GET", "/v1/numbers/lookup"),
        ("POST", "/v1/campaigns/preview"),
        ("POST", "/v1/contacts/import"),
        ("GET", "/v1/events/stream"),
    ] {
        assert!(
            calls.contains(&(method.to_string(), path.to_string())),
            "the scripts do not call {method} {path}: {calls:?}"
        );
    }
    for (method, path) in &calls {
        assert!(
            documented
                .iter()
                .any(|(m, p)| m == method && same_template(p, path)),
            "{method} {path} is called by the portal but is not a documented /v1 operation"
        );
    }
}

/// `GET /portal/qr.svg?data=…` is the QR code of exactly that text; no data is a 422.
async fn qr_route_draws_the_code_of_its_data(backend: Backend) {
    let app = spawn_app(backend).await;
    // A real device token, as the pairing view shows it.
    let phone = app
        .post(
            "/v1/phones",
            &app.live_key,
            serde_json::json!({ "phone_number": "+14155550100" }),
        )
        .await
        .expect(201);
    let token = phone.data()["device_token"].as_str().unwrap().to_string();
    for data in [token.as_str(), "dt_a+b/c=d&e f%"] {
        let encoded: String = data
            .bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || b == b'_' {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect();
        let reply = app
            .fetch(&format!("/portal/qr.svg?data={encoded}"), &[])
            .await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert!(reply.header("content-type").starts_with("image/svg+xml"));
        assert_eq!(
            reply.header("cache-control"),
            "no-store",
            "it encodes a secret"
        );
        assert!(reply.body.contains("<svg"), "{}", reply.body);
        let expected = QrCode::with_error_correction_level(data.as_bytes(), EcLevel::M)
            .unwrap()
            .render::<svg::Color>()
            .min_dimensions(240, 240)
            .quiet_zone(true)
            .build();
        assert_eq!(reply.body, expected, "the code of {data:?}");
    }
    for query in [
        "",
        "?data=",
        "?other=1",
        &format!("?data={}", "x".repeat(600)),
    ] {
        let reply = app
            .request("GET", &format!("/portal/qr.svg{query}"), None, None)
            .await
            .expect_error(422, "validation_failed");
        assert_eq!(reply.data()["field"], Value::from("data"), "{query}");
    }
}

/// docs/api.md, CLI: `server.public_url` is used in pairing links: the page carries it (escaped)
/// for the pairing view, with an ETag of its own; without it the page leaves it empty (the view
/// then shows the page's own origin).
async fn the_page_carries_the_configured_public_url(backend: Backend) {
    let plain = spawn_app(backend).await;
    let page = plain.fetch("/portal/", &[]).await;
    assert!(
        page.body
            .contains(r#"<meta name="smsgw-public-url" content="">"#),
        "{}",
        page.body
    );
    let unconfigured_etag = page.header("etag").to_string();

    let app = spawn_app_with(backend, |s| {
        s.server.public_url = Some(r#"https://sms.example.com/gw?a=1&b="x""#.into());
    })
    .await;
    let page = app.fetch("/portal/", &[]).await;
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains(
            r#"<meta name="smsgw-public-url" content="https://sms.example.com/gw?a=1&amp;b=&quot;x&quot;">"#
        ),
        "{}",
        page.body
    );
    let etag = page.header("etag").to_string();
    assert_ne!(etag, unconfigured_etag);
    let again = app
        .fetch("/portal/", &[("if-none-match", etag.as_str())])
        .await;
    assert_eq!(again.status, 304);
    let script = app.fetch("/portal/app.js", &[]).await;
    assert!(
        script.body.contains("smsgw-public-url"),
        "the pairing view reads it"
    );
}

backend_tests!(
    root_redirects_to_the_portal,
    portal_page_links_every_section_and_serves_its_assets,
    portal_scripts_call_only_documented_v1_routes,
    qr_route_draws_the_code_of_its_data,
    the_page_carries_the_configured_public_url,
);
