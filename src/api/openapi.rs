//! The OpenAPI 3.1 document of every `/v1` route, built from the route list
//! ([`super::documented_routes`]), served at `GET /openapi.json`, and the reference page rendered from
//! it at `GET /docs`.

use std::sync::OnceLock;

use actix_web::{HttpResponse, web};
use serde_json::Value;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, SecurityScheme};
use utoipa::openapi::{
    ComponentsBuilder, InfoBuilder, OpenApi, OpenApiBuilder, PathsBuilder, RefOr, Schema,
};
use utoipa::{PartialSchema, ToSchema};

use super::routes::API_KEY_SCHEME;
use super::schemas::ErrorEnvelope;

/// Builds the document from the route list.
pub fn document() -> OpenApi {
    let mut paths = PathsBuilder::new().build();
    let mut schemas: Vec<(String, RefOr<Schema>)> = Vec::new();
    for endpoint in super::documented_routes() {
        for method in endpoint.methods() {
            paths.add_path_operation(
                endpoint.path(),
                vec![method.clone()],
                endpoint.document_operation(method),
            );
        }
        schemas.extend(endpoint.schemas().iter().cloned());
    }
    schemas.push((ErrorEnvelope::name().into_owned(), ErrorEnvelope::schema()));
    ErrorEnvelope::schemas(&mut schemas);
    let mut components = ComponentsBuilder::new().security_scheme(
        API_KEY_SCHEME,
        SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
            "x-api-key",
            "A workspace key, `sk_live_…` or `sk_test_…`; its mode scopes everything.",
        ))),
    );
    for (name, schema) in schemas {
        components = components.schema(name, schema);
    }
    OpenApiBuilder::new()
        .info(
            InfoBuilder::new()
                .title("smsgw")
                .version(env!("CARGO_PKG_VERSION"))
                .description(Some(
                    "SMS gateway API. Every body, success or error, is the envelope \
                     `{status, message, data, error_code?}`; error responses list the \
                     `error_code`s they can carry in `x-error-codes`.",
                ))
                .build(),
        )
        .paths(paths)
        .components(Some(components.build()))
        .build()
}

/// The document as JSON, built once per process.
pub fn document_json() -> &'static str {
    static JSON: OnceLock<String> = OnceLock::new();
    JSON.get_or_init(|| {
        document()
            .to_pretty_json()
            .unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    })
}

/// Registers `GET /openapi.json` and `GET /docs`.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/openapi.json", web::get().to(openapi_json))
        .route("/docs", web::get().to(docs));
}

async fn openapi_json() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(document_json())
}

/// The API reference page, rendered once from the document: plain HTML and inline CSS, no
/// script and nothing fetched from elsewhere.
pub fn docs_html() -> &'static str {
    static HTML: OnceLock<String> = OnceLock::new();
    HTML.get_or_init(|| {
        let doc: Value = serde_json::from_str(document_json()).unwrap_or(Value::Null);
        render_docs(&doc)
    })
}

/// The reference page carries the portal's security headers (docs/api.md "Operations"): no
/// script, no framing, nothing loaded from elsewhere; its inline style is allowed by hash.
async fn docs() -> HttpResponse {
    use actix_web::http::header;
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .insert_header((header::CONTENT_SECURITY_POLICY, docs_csp()))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::REFERRER_POLICY, "no-referrer"))
        .insert_header((header::X_FRAME_OPTIONS, "DENY"))
        .body(docs_html())
}

/// Content-Security-Policy of `/docs`: the portal page's rules, with the inline style sheet
/// allowed by its SHA-256.
pub fn docs_csp() -> &'static str {
    static CSP: OnceLock<String> = OnceLock::new();
    CSP.get_or_init(|| {
        use base64::Engine;
        use sha2::{Digest, Sha256};
        let hash = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(DOCS_STYLE));
        format!(
            "default-src 'none'; style-src 'sha256-{hash}'; img-src 'self'; form-action 'none'; \
             base-uri 'none'; frame-ancestors 'none'"
        )
    })
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `code` spans for backquoted words of a description.
fn prose(text: &str) -> String {
    escape(text)
        .split('`')
        .enumerate()
        .map(|(i, part)| {
            if i % 2 == 1 {
                format!("<code>{part}</code>")
            } else {
                part.to_string()
            }
        })
        .collect()
}

/// A short type label for a schema, linking to named schemas.
fn type_label(schema: &Value) -> String {
    if let Some(reference) = schema["$ref"].as_str() {
        let name = reference.trim_start_matches("#/components/schemas/");
        return format!("<a href=\"#schema-{0}\">{0}</a>", escape(name));
    }
    if let Some(options) = schema["oneOf"].as_array().or(schema["anyOf"].as_array()) {
        return options
            .iter()
            .map(type_label)
            .collect::<Vec<_>>()
            .join(" | ");
    }
    if let Some(parts) = schema["allOf"].as_array() {
        return parts
            .iter()
            .map(type_label)
            .collect::<Vec<_>>()
            .join(" &amp; ");
    }
    if let Some(content) = schema.get("contentSchema") {
        return format!("string: JSON of {}", type_label(content));
    }
    let base = match &schema["type"] {
        Value::String(t) => t.clone(),
        Value::Array(types) => types
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" | "),
        _ => "any".into(),
    };
    let base = if base.starts_with("array") {
        format!("array of {}", type_label(&schema["items"]))
    } else {
        escape(&base)
    };
    match schema["format"].as_str() {
        Some(format) => format!("{base} ({})", escape(format)),
        None => base,
    }
}

/// A table of an object schema's fields.
fn fields_table(schema: &Value) -> String {
    let Some(props) = schema["properties"].as_object() else {
        return String::new();
    };
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut html =
        String::from("<table><tr><th>field</th><th>type</th><th>required</th><th></th></tr>");
    for (name, prop) in props {
        let mut description = prop["description"].as_str().map(prose).unwrap_or_default();
        if let Some(values) = prop["enum"].as_array() {
            let values: Vec<String> = values
                .iter()
                .map(|v| format!("<code>{}</code>", escape(v.as_str().unwrap_or_default())))
                .collect();
            description.push_str(&format!(" One of {}.", values.join(", ")));
        }
        html.push_str(&format!(
            "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(name),
            type_label(prop),
            if required.contains(&name.as_str()) {
                "yes"
            } else {
                ""
            },
            description
        ));
    }
    html.push_str("</table>");
    html
}

fn render_operation(html: &mut String, method: &str, path: &str, op: &Value) {
    let id = op["operationId"].as_str().unwrap_or_default();
    html.push_str(&format!(
        "<section class=\"op\" id=\"op-{id}\"><h3><span class=\"m {m}\">{M}</span> <code>{p}</code></h3>",
        id = escape(id),
        m = escape(method),
        M = escape(&method.to_uppercase()),
        p = escape(path)
    ));
    if let Some(summary) = op["summary"].as_str() {
        html.push_str(&format!("<p>{}</p>", prose(summary)));
    }
    if let Some(description) = op["description"].as_str() {
        html.push_str(&format!("<p>{}</p>", prose(description)));
    }
    let auth = if op.get("security").is_some() {
        "<code>x-api-key</code>"
    } else {
        "none (see description)"
    };
    html.push_str(&format!("<p class=\"auth\">Authentication: {auth}</p>"));
    if let Some(params) = op["parameters"].as_array() {
        html.push_str("<h4>Parameters</h4><table><tr><th>name</th><th>in</th><th>type</th><th>required</th><th></th></tr>");
        for p in params {
            html.push_str(&format!(
                "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                escape(p["name"].as_str().unwrap_or_default()),
                escape(p["in"].as_str().unwrap_or_default()),
                type_label(&p["schema"]),
                if p["required"] == true { "yes" } else { "" },
                p["description"].as_str().map(prose).unwrap_or_default()
            ));
        }
        html.push_str("</table>");
    }
    if let Some(schema) = op["requestBody"]["content"]["application/json"].get("schema") {
        html.push_str(&format!(
            "<h4>Request body</h4><p>{}</p>",
            type_label(schema)
        ));
    }
    html.push_str("<h4>Responses</h4><table><tr><th>status</th><th>body</th><th></th></tr>");
    if let Some(responses) = op["responses"].as_object() {
        for (status, response) in responses {
            let body = response["content"]["application/json"]
                .get("schema")
                .map(type_label)
                .or_else(|| {
                    let events = response["content"]["text/event-stream"].get("schema")?;
                    Some(format!("event stream, each event {}", type_label(events)))
                })
                .unwrap_or_default();
            html.push_str(&format!(
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                escape(status),
                body,
                response["description"]
                    .as_str()
                    .map(prose)
                    .unwrap_or_default()
            ));
        }
    }
    html.push_str("</table></section>");
}

/// The reference page's only style sheet, inline; the page's Content-Security-Policy allows
/// exactly this text by its hash.
const DOCS_STYLE: &str = "\
         body{font:15px/1.5 system-ui,sans-serif;margin:0;display:flex;color:#1d2330}\
         nav{width:18rem;flex:none;height:100vh;overflow:auto;position:sticky;top:0;background:#f4f5f7;padding:1rem;box-sizing:border-box}\
         nav a{display:block;color:#1d2330;text-decoration:none;font-size:13px;padding:1px 0}\
         main{padding:1rem 2rem;max-width:60rem}\
         .op{border-top:1px solid #dde;padding-top:.5rem;margin-top:1.5rem}\
         .m{display:inline-block;min-width:4rem;text-align:center;border-radius:3px;color:#fff;font-size:12px;padding:2px 4px}\
         .get{background:#2b6cb0}.post{background:#2f855a}.patch{background:#b7791f}.put{background:#805ad5}.delete{background:#c53030}\
         table{border-collapse:collapse;margin:.3rem 0;font-size:13px}td,th{border:1px solid #dde;padding:3px 8px;text-align:left;vertical-align:top}\
         code{background:#eef;padding:0 3px;border-radius:2px}.auth{font-size:13px;color:#555}\
";

/// Renders the reference page from the document's JSON.
pub fn render_docs(doc: &Value) -> String {
    let mut html = String::from(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <link rel=\"icon\" href=\"/portal/favicon.svg\" type=\"image/svg+xml\">\
         <title>smsgw API reference</title><style>",
    );
    html.push_str(DOCS_STYLE);
    html.push_str("</style></head><body><nav><strong>smsgw API</strong>");
    let mut sections: Vec<(String, Vec<(String, String)>)> = Vec::new();
    if let Some(paths) = doc["paths"].as_object() {
        for (path, item) in paths {
            for method in ["get", "post", "put", "patch", "delete"] {
                if let Some(op) = item.get(method) {
                    let tag = op["tags"][0].as_str().unwrap_or("other").to_string();
                    match sections.iter_mut().find(|(t, _)| *t == tag) {
                        Some((_, ops)) => ops.push((method.to_string(), path.clone())),
                        None => sections.push((tag, vec![(method.to_string(), path.clone())])),
                    }
                }
            }
        }
    }
    for (tag, ops) in &sections {
        html.push_str(&format!("<p><strong>{}</strong></p>", escape(tag)));
        for (method, path) in ops {
            let id = doc["paths"][path][method]["operationId"]
                .as_str()
                .unwrap_or_default();
            html.push_str(&format!(
                "<a href=\"#op-{}\">{} {}</a>",
                escape(id),
                escape(&method.to_uppercase()),
                escape(path)
            ));
        }
    }
    html.push_str("<p><strong>schemas</strong></p>");
    let schemas = doc["components"]["schemas"].as_object();
    for name in schemas.into_iter().flatten().map(|(n, _)| n) {
        html.push_str(&format!("<a href=\"#schema-{0}\">{0}</a>", escape(name)));
    }
    html.push_str("</nav><main><h1>smsgw API reference</h1>");
    html.push_str(&format!(
        "<p>Version {}. {} The machine-readable document is at <a href=\"/openapi.json\"><code>/openapi.json</code></a> (OpenAPI {}).</p>",
        escape(doc["info"]["version"].as_str().unwrap_or_default()),
        prose(doc["info"]["description"].as_str().unwrap_or_default()),
        escape(doc["openapi"].as_str().unwrap_or_default())
    ));
    for (tag, ops) in &sections {
        html.push_str(&format!("<h2>{}</h2>", escape(tag)));
        for (method, path) in ops {
            render_operation(&mut html, method, path, &doc["paths"][path][method]);
        }
    }
    html.push_str("<h2>Schemas</h2>");
    for (name, schema) in schemas.into_iter().flatten() {
        html.push_str(&format!(
            "<section id=\"schema-{0}\"><h3>{0}</h3>",
            escape(name)
        ));
        if let Some(description) = schema["description"].as_str() {
            html.push_str(&format!("<p>{}</p>", prose(description)));
        }
        if let Some(values) = schema["enum"].as_array() {
            let values: Vec<String> = values
                .iter()
                .map(|v| format!("<code>{}</code>", escape(v.as_str().unwrap_or_default())))
                .collect();
            html.push_str(&format!("<p>One of {}.</p>", values.join(", ")));
        }
        if schema.get("oneOf").is_some() {
            html.push_str(&format!("<p>One of {}.</p>", type_label(schema)));
        }
        if let Some(parts) = schema["allOf"].as_array() {
            for part in parts {
                if part.get("$ref").is_some() {
                    html.push_str(&format!("<p>All fields of {}, and:</p>", type_label(part)));
                } else {
                    html.push_str(&fields_table(part));
                }
            }
        }
        html.push_str(&fields_table(schema));
        html.push_str("</section>");
    }
    html.push_str("</main></body></html>");
    html
}
