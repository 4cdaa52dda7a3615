//! Owns reading a phone number as a person types it: a country (ISO 3166-1 alpha-2) to read
//! national forms in, and the lookup's verdict (E.164 form, number type, premium rate) from
//! libphonenumber's metadata (docs/api.md, "Number lookup"). The API itself stays strict
//! E.164 (`domain::phone_number`); this is what the portal normalises input through.

use std::fmt;
use std::str::FromStr;

use phonenumber::country::Id;
use phonenumber::metadata::DATABASE;
use phonenumber::{Mode, Type};

/// Longest input a lookup reads, in characters.
pub const MAX_LOOKUP_CHARS: usize = 64;

/// A region libphonenumber has metadata for, by its ISO 3166-1 alpha-2 code (`US`, `GB`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Country(Id);

/// The text is not an ISO 3166-1 alpha-2 code libphonenumber knows.
#[derive(Debug, Clone, Copy, thiserror::Error, PartialEq, Eq)]
#[error("not an ISO 3166-1 alpha-2 country code with phone number metadata (e.g. US, GB, DE)")]
pub struct UnknownCountry;

impl Country {
    /// Parses a two-letter code, upper case only (`US`, not `us` or `USA`).
    pub fn parse(code: &str) -> Result<Country, UnknownCountry> {
        if code.len() != 2 || !code.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err(UnknownCountry);
        }
        let id = Id::from_str(code).map_err(|_| UnknownCountry)?;
        DATABASE.by_id(code).ok_or(UnknownCountry)?;
        Ok(Country(id))
    }

    /// The two-letter code.
    pub fn as_str(&self) -> &'static str {
        // `AsRefStr` yields the variant's name, which is the code.
        let name: &str = self.0.as_ref();
        match DATABASE.by_id(name) {
            // The metadata's id is the same text with a 'static lifetime held by the database.
            Some(meta) => meta.id(),
            None => "",
        }
    }
}

impl fmt::Display for Country {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A number's type as libphonenumber classifies it, by its snake_case name in the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, serde::Serialize)]
#[strum(serialize_all = "snake_case")]
#[serde(rename_all = "snake_case")]
pub enum NumberType {
    Mobile,
    FixedLine,
    FixedLineOrMobile,
    TollFree,
    PremiumRate,
    SharedCost,
    PersonalNumber,
    Voip,
    Pager,
    Uan,
    Emergency,
    Voicemail,
    ShortCode,
    StandardRate,
    Carrier,
    NoInternational,
    Unknown,
}

impl From<Type> for NumberType {
    fn from(kind: Type) -> NumberType {
        match kind {
            Type::Mobile => NumberType::Mobile,
            Type::FixedLine => NumberType::FixedLine,
            Type::FixedLineOrMobile => NumberType::FixedLineOrMobile,
            Type::TollFree => NumberType::TollFree,
            Type::PremiumRate => NumberType::PremiumRate,
            Type::SharedCost => NumberType::SharedCost,
            Type::PersonalNumber => NumberType::PersonalNumber,
            Type::Voip => NumberType::Voip,
            Type::Pager => NumberType::Pager,
            Type::Uan => NumberType::Uan,
            Type::Emergency => NumberType::Emergency,
            Type::Voicemail => NumberType::Voicemail,
            Type::ShortCode => NumberType::ShortCode,
            Type::StandardRate => NumberType::StandardRate,
            Type::Carrier => NumberType::Carrier,
            Type::NoInternational => NumberType::NoInternational,
            Type::Unknown => NumberType::Unknown,
        }
    }
}

/// What a lookup found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// A valid number: what the API accepts as `e164`.
    Valid {
        e164: String,
        country: Option<&'static str>,
        kind: NumberType,
    },
    /// Not a number the API would accept; `country` is the region the text was read in when
    /// it parsed at all. `reason` is plain words for a person.
    Invalid {
        country: Option<&'static str>,
        reason: &'static str,
    },
}

/// Reads `input` as a person types it: E.164 or international form (`+44 7911 123456`), or a
/// national form (`(415) 555-0177`) read in `country`. The caller bounds the input's length.
pub fn lookup(input: &str, country: Option<Country>) -> Lookup {
    let text = input.trim();
    if !text.chars().any(|c| c.is_ascii_digit()) {
        return Lookup::Invalid {
            country: None,
            reason: "this doesn't look like a phone number",
        };
    }
    let international = text.starts_with('+') || text.starts_with("00");
    if !international && country.is_none() {
        return Lookup::Invalid {
            country: None,
            reason: "no country to read a national number in: start it with + and the country \
                     code, or give a country",
        };
    }
    let Ok(number) = phonenumber::parse(country.map(|c| c.0), text) else {
        return Lookup::Invalid {
            country: None,
            reason: "this doesn't look like a phone number",
        };
    };
    let region = number
        .country()
        .id()
        .and_then(|id| Country::parse(id.as_ref()).ok())
        .map(|c| c.as_str());
    let kind = number.number_type(&DATABASE);
    if kind == Type::Unknown {
        return Lookup::Invalid {
            country: region,
            reason: "this is not a valid phone number: check the digits and the country",
        };
    }
    Lookup::Valid {
        e164: number.format().mode(Mode::E164).to_string(),
        country: region,
        kind: kind.into(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn us() -> Option<Country> {
        Some(Country::parse("US").unwrap())
    }

    #[test]
    fn countries_are_two_upper_case_letters_with_metadata() {
        assert_eq!(Country::parse("US").unwrap().as_str(), "US");
        assert_eq!(Country::parse("GB").unwrap().as_str(), "GB");
        for bad in ["us", "USA", "U", "", "ZZ", "1A", "U S"] {
            assert_eq!(Country::parse(bad), Err(UnknownCountry), "{bad}");
        }
    }

    #[test]
    fn national_forms_are_read_in_the_country() {
        for input in [
            "(415) 555-0177",
            "415-555-0177",
            "4155550177",
            " 415 555 0177 ",
        ] {
            match lookup(input, us()) {
                Lookup::Valid { e164, country, .. } => {
                    assert_eq!(e164, "+14155550177", "{input}");
                    assert_eq!(country, Some("US"));
                }
                other => panic!("{input}: {other:?}"),
            }
        }
        // The country does not matter once the number carries its own code.
        assert!(matches!(
            lookup("+44 7400 123456", us()),
            Lookup::Valid { ref e164, country: Some("GB"), kind: NumberType::Mobile } if e164 == "+447400123456"
        ));
    }

    #[test]
    fn types_and_premium_rate_come_from_the_metadata() {
        assert!(matches!(
            lookup("+19005550123", None),
            Lookup::Valid {
                kind: NumberType::PremiumRate,
                ..
            }
        ));
        assert!(matches!(
            lookup("+18005550123", None),
            Lookup::Valid {
                kind: NumberType::TollFree,
                ..
            }
        ));
    }

    #[test]
    fn text_that_is_no_number_says_why() {
        for (input, country) in [
            ("hello", us()),
            ("", us()),
            ("4155550177", None),
            ("12", us()),
        ] {
            assert!(
                matches!(lookup(input, country), Lookup::Invalid { .. }),
                "{input}"
            );
        }
    }
}
