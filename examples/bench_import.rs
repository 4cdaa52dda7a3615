//! Times `POST /v1/contacts/import` of 10,000 realistic contacts on a fresh SQLite database
//! (goal: ≤ 1 s). Each round imports 10,000 new numbers (all created), then the same 10,000
//! again (all updated). Prints the median of each.
//!
//! Run: `cargo run --release --example bench_import [-- ROUNDS]` (default 5 rounds).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use smsgw::startup::Application;

const CONTACTS: usize = 10_000;

fn body(round: usize) -> Value {
    let items: Vec<Value> = (0..CONTACTS)
        .map(|i| {
            // 10,000 distinct valid numbers per round: a different area code each round.
            let area = [202, 212, 305, 312, 415, 503, 617, 702, 808, 917][round % 10];
            json!({
                "phone_number": format!("+1{area}555{i:04}"),
                "first_name": "Alexandra",
                "last_name": "Johnson",
                "email": format!("alexandra.johnson{i}@example.com"),
                "custom_fields": { "plan": "gold" },
                "tags": ["customer", if i % 2 == 0 { "even" } else { "odd" }],
            })
        })
        .collect();
    json!({ "contacts": items })
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[actix_web::main]
async fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5)
        .clamp(1, 10);
    let dir = tempfile::tempdir().unwrap();
    let settings = common::bench_settings(dir.path(), "warn");
    let app = Application::build(settings).await.unwrap();
    let key = app.initial_keys.clone().unwrap().test_key;
    let url = format!("http://{}/v1/contacts/import", app.address());
    actix_web::rt::spawn(app.run_until_stopped());
    let client = awc::Client::builder()
        .timeout(Duration::from_secs(60))
        .finish();
    let (mut created, mut updated) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let bytes = serde_json::to_vec(&body(round)).unwrap();
        for (label, into) in [("created", &mut created), ("updated", &mut updated)] {
            let started = Instant::now();
            let mut response = client
                .post(&url)
                .insert_header(("x-api-key", key.as_str()))
                .insert_header(("content-type", "application/json"))
                .send_body(bytes.clone())
                .await
                .unwrap();
            let answer: Value = response.json().limit(1 << 20).await.unwrap();
            let took = started.elapsed();
            assert_eq!(response.status().as_u16(), 200, "{answer}");
            assert_eq!(answer["data"][label], CONTACTS, "{answer}");
            println!(
                "round {round}: {label} {CONTACTS} in {:.0} ms (body {} KiB)",
                took.as_secs_f64() * 1000.0,
                bytes.len() / 1024
            );
            into.push(took);
        }
    }
    println!(
        "median over {rounds} rounds: create {:.0} ms, update {:.0} ms",
        median(created).as_secs_f64() * 1000.0,
        median(updated).as_secs_f64() * 1000.0
    );
}
