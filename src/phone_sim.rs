//! `smsgw phone-sim`: a simulated phone over the real WebSocket protocol (being written).

/// Command-line options of the simulator.
#[derive(Debug, Clone, clap::Args)]
pub struct SimArgs {
    /// Server base URL, e.g. http://127.0.0.1:8080
    #[arg(long)]
    pub server: String,
    /// Device token (dt_…) shown when the phone was paired.
    #[arg(long)]
    pub token: String,
    /// Share of send attempts that fail, 0.0–1.0.
    #[arg(long, default_value_t = 0.0)]
    pub fail_rate: f64,
    /// Delay between `sent` and `delivered`, in milliseconds.
    #[arg(long, default_value_t = 200)]
    pub deliver_after_ms: u64,
}

/// Runs the simulator until interrupted.
pub async fn run(_args: SimArgs) -> Result<(), Box<dyn std::error::Error>> {
    Err("phone-sim is not built yet".into())
}
