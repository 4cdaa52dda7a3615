//! `smsgw loadtest` (docs/api.md, `smsgw loadtest`): tiny runs through the CLI, checking the JSON
//! report's names and that nothing is lost; a server without a scenario's feature makes it exit 2.

use actix_web::{App, HttpResponse, HttpServer};
use serde_json::{Value, json};

use crate::backend_tests;
use crate::helpers::{Backend, fresh_database, run_cli, spawn_app_with};

fn read_report(path: &std::path::Path) -> Value {
    let text = std::fs::read_to_string(path).expect("the report was written");
    serde_json::from_str(&text).expect("the report is JSON")
}

#[track_caller]
fn assert_number(report: &Value, pointer: &str) -> f64 {
    report
        .pointer(pointer)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("{pointer} is a number in {report}"))
}

/// Runs `smsgw loadtest` with `args` plus `--json <temp file>`, asserts it exited 0 and that
/// its report has every documented name; returns its stdout and the report.
async fn loadtest_ok(args: &[&str]) -> (String, Value) {
    let out = tempfile::tempdir().unwrap();
    let path = out.path().join("report.json");
    let mut all = vec!["loadtest"];
    all.extend_from_slice(args);
    all.extend(["--json", path.to_str().unwrap()]);
    let output = run_cli(&all, &[]).await;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(
        output.status.code(),
        Some(0),
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report = read_report(&path);
    assert_contract_names(&report);
    (stdout, report)
}

/// Every report name of docs/api.md, `smsgw loadtest`, is present, whatever the scenario measures.
fn assert_contract_names(report: &Value) {
    for key in [
        "scenario",
        "phones",
        "clients",
        "duration_s",
        "accepted",
        "accepted_per_s",
        "api_latency_ms",
        "dispatch_latency_ms",
        "webhooks_delivered",
        "webhooks_per_s",
        "e2e_latency_ms",
        "server_rss_mb",
        "pace_violations",
        "lost",
        "duplicates",
    ] {
        assert!(report.get(key).is_some(), "{key} missing from {report}");
    }
}

async fn send_scenario_delivers_every_accepted_message(backend: Backend) {
    let (database, _dir) = fresh_database(backend).await;
    let (stdout, report) = loadtest_ok(&[
        "--scenario",
        "send",
        "--count",
        "40",
        "--clients",
        "4",
        "--phones",
        "2",
        "--drain-timeout",
        "20",
        "--database",
        &database,
    ])
    .await;
    assert!(stdout.contains("accepted/s"), "{stdout}");
    assert_eq!(report["scenario"], "send");
    assert_eq!(report["phones"], 2);
    assert_eq!(report["clients"], 4);
    assert_eq!(report["accepted"], 40);
    assert_eq!(report["lost"], 0);
    assert_eq!(report["duplicates"], 0);
    assert_eq!(report["pace_violations"], 0);
    assert!(assert_number(&report, "/accepted_per_s") > 0.0);
    assert!(assert_number(&report, "/ceiling_per_s") > 0.0);
    assert!(assert_number(&report, "/ceiling_ratio") > 0.0);
    let p50 = assert_number(&report, "/api_latency_ms/p50");
    let p99 = assert_number(&report, "/api_latency_ms/p99");
    let max = assert_number(&report, "/api_latency_ms/max");
    assert!(0.0 < p50 && p50 <= p99 && p99 <= max, "{report}");
    let d50 = assert_number(&report, "/dispatch_latency_ms/p50");
    assert!(d50 <= assert_number(&report, "/dispatch_latency_ms/p99"));
    assert!(assert_number(&report, "/server_rss_mb") > 1.0);
    // CPU per accepted send of the server it started and of the harness itself, and the share
    // of the ceiling the harness's own work leaves possible: every core on the harness alone.
    let harness = assert_number(&report, "/harness_cpu_us_per_accepted");
    assert!(
        assert_number(&report, "/server_cpu_us_per_accepted") > 0.0,
        "{report}"
    );
    assert!(harness > 0.0, "{report}");
    let cores = assert_number(&report, "/machine/cores");
    let ceiling = assert_number(&report, "/ceiling_per_s");
    let bound = assert_number(&report, "/harness_bound_ratio");
    let expected = cores * 1_000_000.0 / harness / ceiling;
    assert!(
        (bound - expected).abs() <= 0.001 + expected * 0.01,
        "{bound} vs {expected}: {report}"
    );
    assert!(stdout.contains("harness bound"), "{stdout}");
    // The figure we steer by: the server's CPU per send in units of one bare-route request
    // measured in the same run (cores × 1 s ÷ ceiling/s), from the other reported numbers; and
    // beside it the same cost in units of the CPU the ceiling's own process spent per request.
    let server = assert_number(&report, "/server_cpu_us_per_accepted");
    let per_send = assert_number(&report, "/server_cpu_per_send_bare");
    let expected = server / (cores * 1_000_000.0 / ceiling);
    assert!(
        (per_send - expected).abs() <= 0.01 + expected * 0.01,
        "{per_send} vs {expected}: {report}"
    );
    let bare = assert_number(&report, "/ceiling_cpu_us_per_request");
    assert!(bare > 0.0, "{report}");
    assert!(stdout.contains("cpu per bare request"), "{stdout}");
    let per_send_cpu = assert_number(&report, "/server_cpu_per_send_bare_cpu");
    let expected = server / bare;
    assert!(
        (per_send_cpu - expected).abs() <= 0.01 + expected * 0.01,
        "{per_send_cpu} vs {expected}: {report}"
    );
    assert!(
        stdout.contains(&format!(
            "{per_send:.1} bare requests (goal ≤ 4); {per_send_cpu:.1} by the bare route's own CPU"
        )),
        "{stdout}"
    );
}

async fn inbound_scenario_stores_every_forwarded_sms(backend: Backend) {
    // A running server this time (--server), so both ways of targeting are exercised.
    // Its receiver is http on loopback: the server must allow insecure webhook targets.
    let app = spawn_app_with(backend, |s| s.webhooks.allow_insecure_targets = true).await;
    let pid = std::process::id().to_string();
    let (_, report) = loadtest_ok(&[
        "--scenario",
        "inbound",
        "--count",
        "30",
        "--clients",
        "4",
        "--phones",
        "2",
        "--drain-timeout",
        "20",
        "--server",
        &app.address,
        "--api-key",
        &app.live_key,
        "--server-pid",
        &pid,
    ])
    .await;
    assert_eq!(report["scenario"], "inbound");
    assert_eq!(report["accepted"], 30);
    assert_eq!(report["lost"], 0);
    assert_eq!(report["duplicates"], 0);
    let p50 = assert_number(&report, "/inbound_ack_latency_ms/p50");
    assert!(p50 > 0.0 && p50 <= assert_number(&report, "/inbound_ack_latency_ms/p99"));
    // --server-pid points at this test process: its memory and CPU are read.
    assert!(assert_number(&report, "/server_rss_mb") > 1.0);
    assert!(
        assert_number(&report, "/server_cpu_us_per_accepted") > 0.0,
        "{report}"
    );
    // No ceiling was measured (inbound has none), so no bound and no CPU in bare requests.
    crate::helpers::assert_null(&report, "harness_bound_ratio");
    crate::helpers::assert_null(&report, "server_cpu_per_send_bare");
    crate::helpers::assert_null(&report, "server_cpu_per_send_bare_cpu");
    // The messages really are stored as inbound.
    let list = app
        .get("/v1/messages?limit=100", &app.live_key)
        .await
        .expect(200);
    let inbound = list.data()["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["direction"] == "inbound")
        .count();
    assert_eq!(inbound, 30);
}

/// A server whose every route answers 404 in the envelope, like one built without a feature.
fn server_without_features() -> (String, actix_web::dev::ServerHandle) {
    let server = HttpServer::new(|| {
        App::new().default_service(actix_web::web::to(|| async {
            HttpResponse::NotFound().json(json!({
                "status": "error",
                "message": "not found",
                "error_code": "not_found",
                "data": {}
            }))
        }))
    })
    .workers(1)
    .bind("127.0.0.1:0")
    .unwrap();
    let address = format!("http://{}", server.addrs()[0]);
    let server = server.run();
    let handle = server.handle();
    actix_web::rt::spawn(server);
    (address, handle)
}

#[test]
fn a_missing_feature_exits_2_with_a_clear_message() {
    crate::helpers::run(missing_feature_exits_2())
}

async fn missing_feature_exits_2() {
    let (address, handle) = server_without_features();
    for (scenario, feature) in [("campaign", "campaigns"), ("webhooks", "webhooks")] {
        let output = run_cli(
            &[
                "loadtest",
                "--scenario",
                scenario,
                "--server",
                &address,
                "--api-key",
                "sk_live_00000000000000000000000000000000",
            ],
            &[],
        )
        .await;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{scenario}: {stderr}");
        assert!(
            stderr.contains(&format!("does not implement {feature}")),
            "{scenario}: {stderr}"
        );
        assert!(output.stdout.is_empty(), "no figures are printed");
    }
    handle.stop(false).await;
}

#[test]
fn the_cluster_scenario_needs_a_postgresql_url() {
    crate::helpers::run(async {
        for extra in [
            &[][..],
            &["--database-url", "sqlite://cluster.db?mode=rwc"][..],
        ] {
            let mut args = vec!["loadtest", "--scenario", "cluster", "--duration", "1"];
            args.extend_from_slice(extra);
            let output = run_cli(&args, &[]).await;
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(output.status.code(), Some(1), "{extra:?}: {stderr}");
            assert!(
                stderr.contains("--database-url postgres://"),
                "{extra:?}: {stderr}"
            );
            assert!(output.stdout.is_empty(), "no figures are printed");
        }
    })
}

/// Three nodes, one killed halfway: nothing lost, duplicated or mis-paced, and the killed
/// node's phones are served again by a survivor within the takeover bound (15 s). Webhook
/// events are delivered at least once: those the killed node had sent but not recorded come
/// again from the endpoint's next owner, and only those (any other repeat is a duplicate).
#[test]
#[ignore = "needs SMSGW_TEST_DATABASE_URL (PostgreSQL)"]
fn the_cluster_scenario_loses_nothing_when_a_node_dies() {
    crate::helpers::run_on_postgres(async {
        let server = std::env::var("SMSGW_TEST_DATABASE_URL").unwrap();
        let (stdout, report) = loadtest_ok(&[
            "--scenario",
            "cluster",
            "--nodes",
            "3",
            "--phones",
            "6",
            "--clients",
            "6",
            "--duration",
            "8",
            "--drain-timeout",
            "30",
            "--database-url",
            &server,
        ])
        .await;
        assert_eq!(report["scenario"], "cluster");
        assert_eq!(report["nodes"], 3);
        assert!(assert_number(&report, "/accepted") > 0.0, "{stdout}");
        assert_eq!(report["lost"], 0, "{stdout}");
        assert_eq!(report["duplicates"], 0, "{stdout}");
        assert_eq!(report["pace_violations"], 0, "{stdout}");
        assert!(
            assert_number(&report, "/takeover_ms/max") <= 15_000.0,
            "{stdout}"
        );
        assert!(
            stdout.contains("2 of its 2 phones were handed a message by a survivor"),
            "{stdout}"
        );
        let redelivered = assert_number(&report, "/webhook_redeliveries");
        let in_flight = assert_number(&report, "/webhook_in_flight_at_kill");
        assert!(
            redelivered <= in_flight,
            "redeliveries stay within the killed node's unrecorded attempts: {stdout}"
        );
        assert!(
            assert_number(&report, "/webhook_after_kill_ms") <= 15_000.0,
            "webhooks flow again within the takeover bound: {stdout}"
        );
    })
}

async fn campaign_scenario_completes_the_campaign(backend: Backend) {
    let (database, _dir) = fresh_database(backend).await;
    let (stdout, report) = loadtest_ok(&[
        "--scenario",
        "campaign",
        "--recipients",
        "120",
        "--drain-timeout",
        "20",
        "--database",
        &database,
    ])
    .await;
    assert_eq!(report["scenario"], "campaign");
    assert_eq!(report["accepted"], 120, "every recipient reached the phone");
    assert_eq!(report["lost"], 0);
    assert_eq!(report["duplicates"], 0);
    assert_eq!(report["pace_violations"], 0);
    assert_eq!(
        report["webhooks_delivered"], 240,
        "sent and delivered of each"
    );
    assert!(
        assert_number(&report, "/server_cpu_us_per_accepted") > 0.0,
        "{report}"
    );
    assert!(
        assert_number(&report, "/harness_cpu_us_per_accepted") > 0.0,
        "{report}"
    );
    assert!(
        stdout.contains("campaign status completed with 120 of 120 delivered"),
        "{stdout}"
    );
}

backend_tests!(
    send_scenario_delivers_every_accepted_message,
    campaign_scenario_completes_the_campaign,
    inbound_scenario_stores_every_forwarded_sms,
);

/// The soak scenario samples the started server once a minute: memory, file descriptors,
/// database size, queue and latency, and loses nothing meanwhile (a one-minute run; the
/// hour-long ones are in BENCHMARKS.md).
#[test]
fn soak_scenario_samples_each_minute_and_loses_nothing() {
    crate::helpers::run(async {
        let (stdout, report) = loadtest_ok(&[
            "--scenario",
            "soak",
            "--duration",
            "62",
            "--rate",
            "2",
            "--phones",
            "2",
            "--no-ceiling",
            "--drain-timeout",
            "30",
        ])
        .await;
        assert_eq!(report["scenario"], "soak");
        assert_eq!(report["lost"], 0, "{report}");
        assert_eq!(report["duplicates"], 0);
        let samples = report["soak"]["samples"].as_array().expect("samples");
        assert_eq!(samples.len(), 1, "{report}");
        let sample = &samples[0];
        assert_eq!(sample["minute"], 1);
        assert!(assert_number(sample, "/rss_mb") > 1.0);
        assert!(assert_number(sample, "/open_fds") > 3.0);
        assert!(assert_number(sample, "/database_mb") > 0.0);
        assert_eq!(
            assert_number(sample, "/queued"),
            assert_number(sample, "/queued").floor()
        );
        assert!(assert_number(sample, "/sends") >= 100.0, "{sample}");
        assert!(assert_number(&report, "/accepted") >= 100.0);
        assert!(stdout.contains("slopes per hour"), "{stdout}");
    });
}
