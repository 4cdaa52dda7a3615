//! A phone's health (docs/api.md, "Phone health"): the facts a device reports about itself
//! (battery, charging, network, SIM cards), read from the WebSocket `status` frame or from the
//! SMSGate app's `system:ping` and `app:started` webhooks (compatible with the app's health
//! checks and SIM list), each held to bounds; and the rule of a low battery.
//!
//! A report may carry only some facts (`system:ping` has no SIMs, `app:started` nothing
//! else): [`HealthReport::merged_over`] keeps what the report leaves out.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::sim_slot::SimSlot;

/// A battery at or below this level, in percent, and not charging fires `phone.low_battery`.
pub const LOW_BATTERY_PERCENT: u8 = 15;

/// SIM cards a report may list at most (the slots a line may have, with room for eSIMs).
pub const MAX_SIMS: usize = 8;

/// Longest carrier name kept, in characters.
pub const MAX_CARRIER_CHARS: usize = 64;

/// Longest SIM phone number kept, in characters.
pub const MAX_SIM_NUMBER_CHARS: usize = 32;

/// How the phone reaches the network.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    ToSchema,
    strum::IntoStaticStr,
    strum::EnumString,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Network {
    Wifi,
    Cellular,
    Ethernet,
    /// No connection (the phone reported it is offline from the internet).
    None,
    Unknown,
}

impl Network {
    /// The wire and storage name (`wifi`).
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The SMSGate app's `connection:transport` flags (0 none, 2 cellular, 4 Wi-Fi,
    /// 8 Ethernet; the app gives one).
    pub fn of_app_transport(flags: i64) -> Network {
        match flags {
            0 => Network::None,
            f if f & 4 != 0 => Network::Wifi,
            f if f & 8 != 0 => Network::Ethernet,
            f if f & 2 != 0 => Network::Cellular,
            _ => Network::Unknown,
        }
    }
}

/// One SIM card of the device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SimCard {
    /// 1–3, as the phone numbers its slots (a line's `sim_slot`).
    #[schema(value_type = u8)]
    pub slot: SimSlot,
    pub carrier: Option<String>,
    pub phone_number: Option<String>,
}

/// The facts of one report; None is "not reported", kept from earlier reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HealthReport {
    pub battery_percent: Option<u8>,
    pub charging: Option<bool>,
    pub network: Option<Network>,
    pub sims: Option<Vec<SimCard>>,
}

/// A device's latest health, as stored and shown.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PhoneHealth {
    pub battery_percent: Option<u8>,
    pub charging: Option<bool>,
    pub network: Option<Network>,
    pub sims: Option<Vec<SimCard>>,
    /// When the last report arrived, in ms since the epoch.
    pub reported_at: i64,
}

impl PhoneHealth {
    /// ≤ [`LOW_BATTERY_PERCENT`] and not known to be charging.
    pub fn is_low_battery(&self) -> bool {
        self.battery_percent
            .is_some_and(|b| b <= LOW_BATTERY_PERCENT)
            && self.charging != Some(true)
    }
}

/// The kinds of a phone's alert episodes (`phone_alerts.kind`); each fires its webhook event
/// once per episode (docs/api.md, "Phone health").
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    strum::IntoStaticStr,
    strum::EnumString,
    strum::EnumIter,
)]
#[strum(serialize_all = "snake_case")]
pub enum AlertKind {
    /// Offline longer than `phones.offline_alert_after`.
    Offline,
    /// At most [`LOW_BATTERY_PERCENT`] and not charging.
    LowBattery,
    /// Marked by the stall watchdog (`domain::stall`).
    Stalled,
}

impl AlertKind {
    /// The storage and wire name (`low_battery`).
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// Why a report is refused: the field it names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HealthRefusal {
    #[error("{0} must be a whole number from 0 to 100")]
    Battery(&'static str),
    #[error("{0} must list at most 8 SIM cards")]
    TooManySims(&'static str),
    #[error("{0} must be 1, 2 or 3")]
    Slot(String),
    #[error("{field} must be at most {max} characters without control characters")]
    Text { field: String, max: usize },
    #[error("{0} must be one of wifi, cellular, ethernet, none, unknown")]
    Network(&'static str),
}

impl HealthReport {
    /// True when it reports nothing.
    pub fn is_empty(&self) -> bool {
        *self == HealthReport::default()
    }

    /// This report over the `older` health, at `now_ms`.
    pub fn merged_over(self, older: Option<PhoneHealth>, now_ms: i64) -> PhoneHealth {
        let older = older.unwrap_or_default();
        PhoneHealth {
            battery_percent: self.battery_percent.or(older.battery_percent),
            charging: self.charging.or(older.charging),
            network: self.network.or(older.network),
            sims: self.sims.or(older.sims),
            reported_at: now_ms,
        }
    }

    /// The report of a WebSocket `status` frame, whose fields are named as the API shows them.
    pub fn of_frame(frame: StatusFrame) -> Result<HealthReport, HealthRefusal> {
        let battery_percent = frame
            .battery_percent
            .map(|b| percent(b).ok_or(HealthRefusal::Battery("battery_percent")))
            .transpose()?;
        let network = frame
            .network
            .map(|n| {
                n.parse::<Network>()
                    .map_err(|_| HealthRefusal::Network("network"))
            })
            .transpose()?;
        let sims = frame
            .sims
            .map(|sims| {
                if sims.len() > MAX_SIMS {
                    return Err(HealthRefusal::TooManySims("sims"));
                }
                sims.into_iter()
                    .enumerate()
                    .map(|(i, sim)| {
                        sim_card(
                            &format!("sims[{i}]"),
                            sim.slot,
                            sim.carrier,
                            sim.phone_number,
                        )
                    })
                    .collect()
            })
            .transpose()?;
        Ok(HealthReport {
            battery_percent,
            charging: frame.charging,
            network,
            sims,
        })
    }

    /// The report of the SMSGate app's `system:ping` payload (`{health: {checks: …}}`,
    /// compatible with the app's health checks): battery level, charging flags and transport;
    /// a check that is absent or not a number is not reported.
    pub fn of_app_ping(payload: &serde_json::Value) -> Result<HealthReport, HealthRefusal> {
        let checks = &payload["health"]["checks"];
        let observed = |name: &str| checks[name]["observedValue"].as_f64();
        let battery_percent = observed("battery:level")
            .map(|b| {
                if b.fract() == 0.0 && (0.0..=100.0).contains(&b) {
                    // unwrap-free: a whole number from 0 to 100 fits u8.
                    percent(b as i64).ok_or(HealthRefusal::Battery(
                        "payload.health.checks.battery:level",
                    ))
                } else {
                    Err(HealthRefusal::Battery(
                        "payload.health.checks.battery:level",
                    ))
                }
            })
            .transpose()?;
        // Flags: 1 charging, 2 AC, 4 USB; any of them is a phone on power.
        let charging = observed("battery:charging").map(|f| f != 0.0);
        let network = match observed("connection:status") {
            Some(0.0) => Some(Network::None),
            _ => observed("connection:transport").map(|f| Network::of_app_transport(f as i64)),
        };
        Ok(HealthReport {
            battery_percent,
            charging,
            network,
            sims: None,
        })
    }

    /// The report of the SMSGate app's `app:started` payload (`{simCards: [{simNumber,
    /// carrierName, phoneNumber, …}]}`, compatible with the app's SIM list).
    pub fn of_app_started(payload: &serde_json::Value) -> Result<HealthReport, HealthRefusal> {
        let Some(cards) = payload["simCards"].as_array() else {
            return Ok(HealthReport::default());
        };
        if cards.len() > MAX_SIMS {
            return Err(HealthRefusal::TooManySims("payload.simCards"));
        }
        let text = |v: &serde_json::Value| v.as_str().map(str::to_string);
        let sims = cards
            .iter()
            .enumerate()
            .map(|(i, card)| {
                sim_card(
                    &format!("payload.simCards[{i}]"),
                    card["simNumber"].as_i64().unwrap_or(-1),
                    text(&card["carrierName"]),
                    text(&card["phoneNumber"]),
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(HealthReport {
            sims: Some(sims),
            ..HealthReport::default()
        })
    }
}

fn percent(n: i64) -> Option<u8> {
    u8::try_from(n).ok().filter(|p| *p <= 100)
}

fn sim_card(
    field: &str,
    slot: i64,
    carrier: Option<String>,
    phone_number: Option<String>,
) -> Result<SimCard, HealthRefusal> {
    let slot = SimSlot::parse(slot).map_err(|_| HealthRefusal::Slot(format!("{field}.slot")))?;
    let bounded = |name: &str, value: Option<String>, max: usize| match value {
        Some(v) if v.chars().count() > max || v.chars().any(char::is_control) => {
            Err(HealthRefusal::Text {
                field: format!("{field}.{name}"),
                max,
            })
        }
        Some(v) if v.trim().is_empty() => Ok(None),
        other => Ok(other),
    };
    Ok(SimCard {
        slot,
        carrier: bounded("carrier", carrier, MAX_CARRIER_CHARS)?,
        phone_number: bounded("phone_number", phone_number, MAX_SIM_NUMBER_CHARS)?,
    })
}

/// The fields of a WebSocket `status` frame (docs/api.md, "Phone WebSocket"), every one
/// optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StatusFrame {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub battery_percent: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub charging: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sims: Option<Vec<StatusSim>>,
}

/// One SIM of a `status` frame.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusSim {
    pub slot: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub carrier: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phone_number: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_ping_reads_battery_charging_and_network() {
        let payload = json!({"health": {"checks": {
            "battery:level": {"observedValue": 14},
            "battery:charging": {"observedValue": 0},
            "connection:status": {"observedValue": 1},
            "connection:transport": {"observedValue": 2},
            "messages:failed": {"observedValue": 0}
        }}});
        let report = HealthReport::of_app_ping(&payload).unwrap();
        assert_eq!(report.battery_percent, Some(14));
        assert_eq!(report.charging, Some(false));
        assert_eq!(report.network, Some(Network::Cellular));
        assert!(report.merged_over(None, 5).is_low_battery());
    }

    #[test]
    fn a_ping_out_of_bounds_is_refused_naming_the_check() {
        let payload = json!({"health": {"checks": {"battery:level": {"observedValue": 140}}}});
        let err = HealthReport::of_app_ping(&payload).unwrap_err();
        assert!(err.to_string().contains("battery:level"));
    }

    #[test]
    fn app_started_lists_the_sims_and_keeps_the_rest() {
        let older = HealthReport {
            battery_percent: Some(80),
            ..HealthReport::default()
        }
        .merged_over(None, 1);
        let payload = json!({"simCards": [
            {"slotIndex": 0, "simNumber": 1, "carrierName": "Vodafone", "phoneNumber": null},
            {"slotIndex": 1, "simNumber": 2, "carrierName": "O2"}
        ]});
        let health = HealthReport::of_app_started(&payload)
            .unwrap()
            .merged_over(Some(older), 2);
        assert_eq!(health.battery_percent, Some(80));
        assert_eq!(health.reported_at, 2);
        let sims = health.sims.unwrap();
        assert_eq!(sims.len(), 2);
        assert_eq!(sims[1].carrier.as_deref(), Some("O2"));
        assert_eq!(sims[1].slot.get(), 2);
    }

    #[test]
    fn a_frame_names_the_field_it_breaks() {
        let frame = StatusFrame {
            sims: Some(vec![StatusSim {
                slot: 4,
                carrier: None,
                phone_number: None,
            }]),
            ..StatusFrame::default()
        };
        assert_eq!(
            HealthReport::of_frame(frame).unwrap_err().to_string(),
            "sims[0].slot must be 1, 2 or 3"
        );
        let frame = StatusFrame {
            network: Some("carrier pigeon".into()),
            ..StatusFrame::default()
        };
        assert!(HealthReport::of_frame(frame).is_err());
        let frame = StatusFrame {
            battery_percent: Some(101),
            ..StatusFrame::default()
        };
        assert!(HealthReport::of_frame(frame).is_err());
    }

    #[test]
    fn low_battery_is_at_most_15_and_not_charging() {
        let at = |b: u8, charging: Option<bool>| PhoneHealth {
            battery_percent: Some(b),
            charging,
            ..PhoneHealth::default()
        };
        assert!(at(15, Some(false)).is_low_battery());
        assert!(at(15, None).is_low_battery());
        assert!(!at(16, Some(false)).is_low_battery());
        assert!(!at(5, Some(true)).is_low_battery());
        assert!(!PhoneHealth::default().is_low_battery());
    }
}
