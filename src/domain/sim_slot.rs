//! A SIM line's slot on a multi-SIM phone (docs/api.md, "Phones"): 1, 2 or 3, as the phone's
//! settings number them (the SMSGate app's `simNumber`, the WebSocket frames' `sim_slot`).

use serde::{Deserialize, Serialize};

/// Highest SIM slot a line may have.
pub const MAX_SIM_SLOT: u8 = 3;

/// A SIM slot, 1 to [`MAX_SIM_SLOT`]; only [`SimSlot::parse`] makes one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct SimSlot(u8);

/// A slot outside 1–3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("sim_slot must be 1, 2 or 3")]
pub struct NotASimSlot;

impl SimSlot {
    /// The slot `n`, when it is 1 to 3.
    pub fn parse(n: i64) -> Result<SimSlot, NotASimSlot> {
        match u8::try_from(n) {
            Ok(slot) if (1..=MAX_SIM_SLOT).contains(&slot) => Ok(SimSlot(slot)),
            _ => Err(NotASimSlot),
        }
    }

    /// The slot's number.
    pub fn get(self) -> u8 {
        self.0
    }
}

impl<'de> Deserialize<'de> for SimSlot {
    /// A frame naming a slot outside 1–3 is refused like any malformed frame.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<SimSlot, D::Error> {
        let n = i64::deserialize(deserializer)?;
        SimSlot::parse(n).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_one_to_three() {
        assert_eq!(SimSlot::parse(0), Err(NotASimSlot));
        assert_eq!(SimSlot::parse(1).map(SimSlot::get), Ok(1));
        assert_eq!(SimSlot::parse(3).map(SimSlot::get), Ok(3));
        assert_eq!(SimSlot::parse(4), Err(NotASimSlot));
        assert_eq!(SimSlot::parse(-1), Err(NotASimSlot));
        assert_eq!(SimSlot::parse(257), Err(NotASimSlot));
        assert!(serde_json::from_str::<SimSlot>("4").is_err());
        assert_eq!(
            serde_json::from_str::<SimSlot>("2").ok(),
            SimSlot::parse(2).ok()
        );
    }
}
