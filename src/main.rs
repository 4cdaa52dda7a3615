//! The `smsgw` command: serve, migrate, workspace and key administration, phone simulator,
//! load test.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use smsgw::config::Settings;
use smsgw::domain::ids::WorkspaceId;
use smsgw::domain::status::Mode;
use smsgw::startup::Application;
use smsgw::store::{self, workspaces};

/// See Cargo.toml: fewer resident bytes per idle phone than glibc malloc.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Turns transparent huge pages off for this process. mimalloc asks for huge pages on its
/// arenas (`madvise`), and a 2 MiB page stays resident while any object in it lives, so idle
/// phones held far more resident memory than their live heap (docs/performance.md,
/// "Transparent huge pages off"). Linux only; elsewhere a no-op.
fn disable_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_THP_DISABLE takes plain integers and only sets a flag of this process.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}

#[derive(Parser)]
#[command(
    name = "smsgw",
    version,
    about = "SMS gateway through your own paired phones"
)]
struct Cli {
    /// Configuration file (default: smsgw.toml when present).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run migrations, then serve the API, phone WebSockets and portal. The first start
    /// creates the `default` workspace and prints its keys once.
    Serve {
        /// Listen on this address, e.g. 0.0.0.0:8080 to be reached from other machines
        /// (phones included); wins over server.bind and SMSGW_SERVER__BIND.
        #[arg(long, value_name = "HOST:PORT")]
        bind: Option<String>,
    },
    /// Run migrations and exit.
    Migrate {
        /// List the migrations this build would apply, oldest first, and apply none.
        #[arg(long)]
        dry_run: bool,
    },
    /// Write a consistent snapshot of the SQLite database to a new file, while the server runs
    /// (docs/deploy.md, "Backups"); the secrets key is not in it.
    Backup {
        /// The file to write; it must not exist.
        #[arg(long, value_name = "FILE")]
        to: std::path::PathBuf,
    },
    /// Put a backup in place of the SQLite database (no server may be running on it); the
    /// database it replaces is kept beside it.
    Restore {
        /// The backup `smsgw backup` wrote.
        #[arg(long, value_name = "FILE")]
        from: std::path::PathBuf,
    },
    /// Workspace administration.
    Workspace {
        #[command(subcommand)]
        command: WorkspaceCommand,
    },
    /// API key administration.
    Key {
        #[command(subcommand)]
        command: KeyCommand,
    },
    /// The secrets key that seals webhook signing keys at rest.
    Secrets {
        #[command(subcommand)]
        command: SecretsCommand,
    },
    /// A simulated phone: smsgw's WebSocket protocol, or the device API as the SMSGate app
    /// speaks it (`--protocol smsgate`).
    #[cfg(feature = "tools")]
    PhoneSim(smsgw::tools::phone_sim::SimArgs),
    /// Load test: simulated phones, concurrent API clients, a webhook receiver.
    #[cfg(feature = "tools")]
    Loadtest(smsgw::tools::loadtest::LoadtestArgs),
}

#[derive(Subcommand)]
enum WorkspaceCommand {
    /// Create a workspace and print its id and first keys.
    Create {
        /// Its name, shown in the portal; `key create --workspace NAME` takes it.
        #[arg(long)]
        name: String,
    },
    /// List the workspaces: id, name, created_at and their unrevoked live and test keys.
    List,
}

/// A workspace as `--workspace` names it: its id, or its name.
#[derive(Debug, Clone)]
enum WorkspaceRef {
    Id(WorkspaceId),
    Name(String),
}

/// `--workspace`: a UUID is an id, anything else a name.
fn parse_workspace_ref(text: &str) -> Result<WorkspaceRef, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("expected a workspace id or name (`smsgw workspace list` shows them)".into());
    }
    Ok(match text.parse::<WorkspaceId>() {
        Ok(id) => WorkspaceRef::Id(id),
        Err(_) => WorkspaceRef::Name(text.to_string()),
    })
}

#[derive(Subcommand)]
enum SecretsCommand {
    /// Seal every stored signing key again under a new key (servers stopped); then configure
    /// the new key (secrets.key, or the key file) before the next start.
    Rotate {
        /// The new key: standard base64 of 32 bytes.
        #[arg(long)]
        new_key: String,
    },
}

#[derive(Subcommand)]
enum KeyCommand {
    /// Create one more key for a workspace and print it.
    Create {
        /// The workspace's id or name (`smsgw workspace list` shows both), e.g. `default`.
        #[arg(long, value_parser = parse_workspace_ref)]
        workspace: WorkspaceRef,
        /// live: real messages through paired phones; test: simulated ones.
        #[arg(long, value_enum)]
        mode: Mode,
    },
    /// Revoke a key, given as printed (`sk_live_…`): a running server refuses it within a second.
    Revoke {
        /// The key itself, as whoever holds a leaked key has it.
        key: String,
    },
}

fn main() -> ExitCode {
    disable_transparent_huge_pages();
    let cli = Cli::parse();
    for warning in smsgw::config::unknown_variable_warnings() {
        eprintln!("{warning}");
    }
    let settings = match load_settings(&cli) {
        Ok(s) => s,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::from(2);
        }
    };
    // The load test's own servers (ceiling, webhook receiver) would log every start and stop.
    let level = match &cli.command {
        #[cfg(feature = "tools")]
        Command::Loadtest(_) => "warn",
        _ => settings.log.level.as_str(),
    };
    smsgw::telemetry::init(settings.log.format, level);
    smsgw::startup::install_crypto_provider();
    let result = smsgw::startup::block_on_system(run(cli.command, settings))
        .map_err(Into::into)
        .and_then(|r| r);
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err}");
            // Another node serves this SQLite file: a usage error, like a bad configuration.
            match err.downcast_ref::<smsgw::startup::StartupError>() {
                Some(smsgw::startup::StartupError::SingleNode(
                    smsgw::single_node::SingleNodeError::AlreadyServing(_),
                )) => ExitCode::from(2),
                _ => ExitCode::FAILURE,
            }
        }
    }
}

/// The settings from the file and the environment, with the command line's own (`serve
/// --bind`) over them.
fn load_settings(cli: &Cli) -> Result<Settings, smsgw::config::ConfigError> {
    let mut settings = Settings::load(cli.config.as_deref())?;
    if let Command::Serve { bind: Some(bind) } = &cli.command {
        settings.server.bind = bind.trim().to_string();
        settings.validate()?;
    }
    Ok(settings)
}

/// A line above and below the key block, so it stands out from the log lines around it.
const KEY_BLOCK_RULE: &str =
    "==========================================================================";

/// Prints a workspace's new keys on stdout as a block set apart from the log (stderr): the
/// `workspace:`, `live key:` and `test key:` lines between two rules, with how to get more.
fn print_key_block(heading: &str, workspace: WorkspaceId, live_key: &str, test_key: &str) {
    println!("{KEY_BLOCK_RULE}");
    println!("{heading}");
    println!("These keys are shown only once: store them now. Another key at any time:");
    println!("  smsgw key create --workspace {workspace} --mode live");
    println!();
    println!("workspace: {workspace}");
    println!("live key: {live_key}");
    println!("test key: {test_key}");
    println!("{KEY_BLOCK_RULE}");
}

/// Refuses an administration command whose SQLite database file does not exist: run in the
/// wrong folder, it would create an empty database there and answer as if nothing existed.
fn require_database(settings: &Settings) -> Result<(), String> {
    match smsgw::single_node::sqlite_file(&settings.database.url) {
        Some(file) if !std::path::Path::new(file).exists() => Err(format!(
            "no database at {file}: run this where `smsgw serve` runs, or name the database with --config or SMSGW_DATABASE__URL"
        )),
        _ => Ok(()),
    }
}

/// The id of the workspace `workspace` names; an unknown or ambiguous name is an error that
/// says how to find the right one.
async fn resolve_workspace(
    db: &sea_orm::DatabaseConnection,
    workspace: &WorkspaceRef,
) -> Result<WorkspaceId, String> {
    let name = match workspace {
        WorkspaceRef::Id(id) => return Ok(*id),
        WorkspaceRef::Name(name) => name,
    };
    let found = workspaces::find_by_name(db, name)
        .await
        .map_err(|e| e.to_string())?;
    match found.as_slice() {
        [] => Err(format!(
            "no workspace is named {name:?}; `smsgw workspace list` shows every workspace's id and name"
        )),
        [one] => Ok(one.id),
        several => Err(format!(
            "{} workspaces are named {name:?}; pass one's id instead: {}",
            several.len(),
            several
                .iter()
                .map(|w| w.id.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// Runs one command; a tool's own failure is its exit code, any other error is returned.
async fn run(command: Command, settings: Settings) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let now = chrono::Utc::now().timestamp_millis();
    match command {
        Command::Serve { .. } => {
            let settings_tls = settings.server.tls.is_some();
            let app = Application::build(settings).await?;
            if let Some(keys) = &app.initial_keys {
                print_key_block(
                    &format!(
                        "First start: created the workspace `{}` and its keys.",
                        smsgw::startup::FIRST_WORKSPACE
                    ),
                    keys.workspace_id,
                    &keys.live_key,
                    &keys.test_key,
                );
            }
            let scheme = if settings_tls { "https" } else { "http" };
            println!("listening on {scheme}://{}", app.address());
            app.run_until_stopped().await?;
        }
        Command::Migrate { dry_run: true } => {
            let db = store::connect(&settings.database.url, 2).await?;
            let pending = store::pending_migrations(&db).await?;
            if pending.is_empty() {
                println!("no pending migrations: the schema is up to date");
            } else {
                println!("{} pending migration(s), none applied:", pending.len());
                for name in pending {
                    println!("  {name}");
                }
            }
        }
        Command::Backup { to } => {
            let done = smsgw::backup::backup(&settings, &to).await?;
            println!(
                "backup written to {} ({} bytes)",
                done.path.display(),
                done.bytes
            );
            println!(
                "The secrets key is not in the backup: keep {} with it. Without that key the webhook signing keys and client-API secrets in the backup cannot be read.",
                smsgw::backup::key_location(&settings)
            );
        }
        Command::Restore { from } => {
            let done = smsgw::backup::restore(&settings, &from).await?;
            println!("restored {} into {}", from.display(), done.database);
            if let Some(aside) = done.replaced {
                println!("the database it replaced is kept at {}", aside.display());
            }
            println!(
                "Start the server with the secrets key the backup was taken with ({}); it migrates the backup if it is older.",
                smsgw::backup::key_location(&settings)
            );
        }
        Command::Migrate { dry_run: false } => {
            let db = store::connect(&settings.database.url, 2).await?;
            store::migrate(&db).await?;
            println!("migrations applied");
        }
        Command::Workspace {
            command: WorkspaceCommand::Create { name },
        } => {
            let db = store::connect(&settings.database.url, 2).await?;
            store::migrate(&db).await?;
            let created = store::retry_busy(|| workspaces::create(&db, &name, now)).await?;
            print_key_block(
                &format!("Created the workspace {name:?} and its keys."),
                created.workspace.id,
                &created.live_key,
                &created.test_key,
            );
        }
        Command::Workspace {
            command: WorkspaceCommand::List,
        } => {
            require_database(&settings)?;
            let db = store::connect(&settings.database.url, 2).await?;
            store::migrate(&db).await?;
            let listed = workspaces::list(&db).await?;
            if listed.is_empty() {
                println!(
                    "no workspace yet: the first `smsgw serve` creates `{}`, and `smsgw workspace create --name NAME` another",
                    smsgw::startup::FIRST_WORKSPACE
                );
            } else {
                println!(
                    "{:<36}  {:<29}  {:>9}  {:>9}  NAME",
                    "ID", "CREATED_AT", "LIVE_KEYS", "TEST_KEYS"
                );
                for summary in listed {
                    let workspace = &summary.workspace;
                    println!(
                        "{:<36}  {:<29}  {:>9}  {:>9}  {}",
                        workspace.id.to_string(),
                        smsgw::clock::format_ms(workspace.created_at),
                        summary.live_keys,
                        summary.test_keys,
                        workspace.name
                    );
                }
            }
        }
        Command::Key {
            command: KeyCommand::Create { workspace, mode },
        } => {
            require_database(&settings)?;
            let db = store::connect(&settings.database.url, 2).await?;
            store::migrate(&db).await?;
            let workspace = resolve_workspace(&db, &workspace).await?;
            let quota = settings.quotas.count(smsgw::domain::quota::Quota::ApiKeys);
            let key =
                store::retry_busy(|| workspaces::create_key(&db, workspace, mode, quota, now))
                    .await
                    .map_err(|e| match e {
                        store::StoreError::NotFound => format!(
                            "no workspace {workspace}; `smsgw workspace list` shows every workspace's id and name"
                        ),
                        store::StoreError::QuotaExceeded(quota) => format!(
                            "quota exceeded: workspace {workspace} already has {} active {} keys \
                         (quotas.api_keys); revoke one first",
                            quota.limit,
                            mode.as_str()
                        ),
                        other => other.to_string(),
                    })?;
            println!("{} key: {}", mode.as_str(), key.secret);
        }
        Command::Key {
            command: KeyCommand::Revoke { key },
        } => {
            let key = key.trim();
            if smsgw::domain::keys::api_key_mode(key).is_none() {
                return Err("not an API key: expected sk_live_… or sk_test_… as printed".into());
            }
            require_database(&settings)?;
            let db = store::connect(&settings.database.url, 2).await?;
            store::migrate(&db).await?;
            let which = workspaces::KeyToRevoke::Hash(smsgw::domain::keys::hash_secret(key));
            let revoked = store::retry_busy(|| workspaces::revoke_key(&db, which.clone(), now))
                .await
                .map_err(|e| match e {
                    store::StoreError::NotFound => "no such API key".to_string(),
                    other => other.to_string(),
                })?;
            let record = &revoked.record;
            let at = record
                .revoked_at
                .map(smsgw::clock::format_ms)
                .unwrap_or_default();
            let what = if revoked.newly {
                "revoked"
            } else {
                "already revoked"
            };
            println!(
                "{what}: {} key {} ({}…) at {at}",
                record.mode.as_str(),
                record.id,
                record.prefix
            );
        }
        Command::Secrets {
            command: SecretsCommand::Rotate { new_key },
        } => {
            let new = smsgw::domain::secrets::SecretBox::from_base64(&new_key)
                .map_err(|e| format!("--new-key: {e}"))?;
            require_database(&settings)?;
            let (current, source) = smsgw::secrets::load_secrets_key(&settings)?;
            let db = store::connect(&settings.database.url, 2).await?;
            store::migrate(&db).await?;
            let report =
                store::retry_busy(|| store::webhooks::seal_signing_keys(&db, &current, Some(&new)))
                    .await
                    .map_err(|e| format!("{e}; is {source} the key they were sealed with?"))?;
            println!(
                "sealed {} signing keys under the new key; now replace {source} with it",
                report.opened + report.sealed
            );
        }
        #[cfg(feature = "tools")]
        Command::PhoneSim(args) => {
            if let Err(err) = smsgw::tools::phone_sim::run(args).await {
                eprintln!("error: {err}");
                return Ok(ExitCode::FAILURE);
            }
        }
        // The harness's own exit code: 0 when every check passed (docs/api.md, `smsgw loadtest`).
        #[cfg(feature = "tools")]
        Command::Loadtest(args) => {
            return Ok(ExitCode::from(smsgw::tools::loadtest::run(args).await));
        }
    }
    Ok(ExitCode::SUCCESS)
}
