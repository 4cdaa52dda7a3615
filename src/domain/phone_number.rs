//! Owns recipient phone numbers: strict E.164 parsing, validity and premium-rate classification.

use std::cell::RefCell;
use std::fmt;

use hashlink::LruCache;
use phonenumber::{Mode, Type, metadata::DATABASE};

/// A phone number that libphonenumber accepts as valid, always held in E.164 form (`+14155550123`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PhoneNumber {
    e164: String,
    // Classified once at parse time because the lookup runs metadata regexes and callers ask
    // on every send. Derived comparisons stay consistent: equal strings imply equal flags.
    premium_rate: bool,
}

/// The input is not a valid E.164 phone number.
///
/// Carries no copy of the input so the error can be logged without leaking recipients.
#[derive(Debug, Clone, Copy, thiserror::Error, PartialEq, Eq)]
#[error("not a valid E.164 phone number")]
pub struct InvalidPhoneNumber;

/// E.164 caps a number at 15 digits, country code included.
const MAX_DIGITS: usize = 15;

impl PhoneNumber {
    /// Parses strict E.164 input: a `+` then at most 15 digits, nothing else (not even
    /// surrounding whitespace), which libphonenumber's metadata must consider a valid number.
    pub fn parse(input: &str) -> Result<PhoneNumber, InvalidPhoneNumber> {
        // libphonenumber is lenient (spaces, dashes, letters, national prefixes); the API takes
        // strict E.164 only (docs/api.md, Messages), so the shape is checked before the
        // metadata is consulted.
        let digits = input.strip_prefix('+').ok_or(InvalidPhoneNumber)?;
        if digits.is_empty()
            || digits.len() > MAX_DIGITS
            || !digits.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(InvalidPhoneNumber);
        }
        PARSED.with_borrow_mut(|cache| {
            if let Some(known) = cache.get(input) {
                return known.clone();
            }
            let parsed = classify(input);
            cache.insert(input.into(), parsed.clone());
            parsed
        })
    }

    /// The number in E.164 form.
    pub fn as_str(&self) -> &str {
        &self.e164
    }

    /// The number in E.164 form, by value.
    pub fn into_string(self) -> String {
        self.e164
    }

    /// Whether libphonenumber classifies the number as premium rate (costly to text).
    pub fn is_premium_rate(&self) -> bool {
        self.premium_rate
    }
}

/// Parsed numbers, most recently used first, per thread: a business sends from a handful of
/// numbers and often to the same customers, and libphonenumber's validity check costs several
/// microseconds (its regex cache hashes each pattern per lookup). Parsing is a pure function of
/// the input, so a cached answer is the answer; the bound keeps odd inputs from growing it.
const PARSED_CAPACITY: usize = 1_024;

thread_local! {
    static PARSED: RefCell<LruCache<Box<str>, Result<PhoneNumber, InvalidPhoneNumber>>> =
        RefCell::new(LruCache::new(PARSED_CAPACITY));
}

/// libphonenumber's verdict on input already shaped like E.164.
fn classify(input: &str) -> Result<PhoneNumber, InvalidPhoneNumber> {
    let number = phonenumber::parse(None, input).map_err(|_| InvalidPhoneNumber)?;
    // One classification answers both questions: libphonenumber's `is_valid` is exactly
    // "the number's type is known", and computing the type runs the metadata's regexes
    // (done twice, it showed in the send scenario's profile; docs/performance.md, "The
    // parsed-number cache").
    let kind = number.number_type(&DATABASE);
    if kind == Type::Unknown {
        return Err(InvalidPhoneNumber);
    }
    let e164 = number.format().mode(Mode::E164).to_string();
    // libphonenumber drops one national prefix per parse (`+62 0 0210…` reads as `+62 0210…`,
    // which reads as `+62 210…`): a number is only what reads as itself again, so a stored
    // number never turns into another one when it is read back.
    if e164 != input {
        let again = phonenumber::parse(None, &e164).map_err(|_| InvalidPhoneNumber)?;
        if again.format().mode(Mode::E164).to_string() != e164 {
            return Err(InvalidPhoneNumber);
        }
    }
    Ok(PhoneNumber {
        e164,
        premium_rate: kind == Type::PremiumRate,
    })
}

impl fmt::Display for PhoneNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.e164)
    }
}

impl serde::Serialize for PhoneNumber {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.e164)
    }
}

/// The sender of an inbound SMS as the API shows it: E.164 when libphonenumber can read the
/// phone's text as a valid number, national forms read in the region of the receiving number
/// (`(415) 555-0199` received on a US number → `+14155550199`); anything else (short codes,
/// alphanumeric sender ids such as `VERIFY`) is kept as sent, trimmed.
pub fn normalize_sender(input: &str, receiving_number: &str) -> String {
    let input = input.trim();
    if let Ok(number) = PhoneNumber::parse(input) {
        return number.into_string();
    }
    let region = phonenumber::parse(None, receiving_number)
        .ok()
        .and_then(|n| n.country().id());
    match phonenumber::parse(region, input) {
        Ok(number)
            if phonenumber::is_valid(&number) && input.chars().any(|c| c.is_ascii_digit()) =>
        {
            number.format().mode(Mode::E164).to_string()
        }
        _ => input.to_string(),
    }
}

/// Parses one number so libphonenumber's lazily loaded metadata (about 150 ms on first use)
/// is paid for at server start-up rather than by the first API request.
pub fn warm_up() {
    // The outcome is irrelevant; only the side effect of loading the metadata matters.
    let _ = PhoneNumber::parse("+14155550123");
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn valid(input: &str) -> PhoneNumber {
        PhoneNumber::parse(input).unwrap()
    }

    #[test]
    fn accepts_valid_numbers_of_several_countries() {
        for input in [
            "+14155550123",   // US, San Francisco
            "+12025550123",   // US, Washington DC
            "+447911123456",  // UK mobile
            "+447400123456",  // UK mobile
            "+4915123456789", // DE mobile
            "+491701234567",  // DE mobile
            "+33612345678",   // FR mobile
            "+442079460000",  // UK fixed line
            "+4930123456",    // DE fixed line
            "+8613812345678", // CN mobile
        ] {
            assert_eq!(valid(input).as_str(), input, "{input}");
        }
    }

    #[test]
    fn inbound_senders_are_normalised_to_e164() {
        let us = "+14155550100";
        for (input, expected) in [
            ("+14155550199", "+14155550199"),
            (" +14155550199 ", "+14155550199"),
            ("(415) 555-0199", "+14155550199"),
            ("4155550199", "+14155550199"),
            ("+44 7911 123456", "+447911123456"),
            ("VERIFY", "VERIFY"),
            ("12345", "12345"),
        ] {
            assert_eq!(normalize_sender(input, us), expected, "{input}");
        }
        // A national number is read in the region of the receiving phone.
        assert_eq!(
            normalize_sender("07911 123456", "+447400123456"),
            "+447911123456"
        );
    }

    #[test]
    fn accepts_test_mode_magic_numbers() {
        // Test mode routes these to simulated outcomes, like Twilio's +1500555000x.
        for input in ["+15005550001", "+15005550002"] {
            let number = valid(input);
            assert_eq!(number.as_str(), input);
            assert!(!number.is_premium_rate());
        }
    }

    #[test]
    fn rejects_malformed_input() {
        for input in [
            "",
            "+",
            "14155550123",
            "0014155550123",
            "+1415555012a",
            "+1 415 555 0123",
            "+1-415-555-0123",
            "+1(415)5550123",
            " +14155550123",
            "+14155550123 ",
            "+14155550123\n",
            "++14155550123",
            "+1",
            "+12",
            "+1234",
            "+14155550",
            "+1415555012345678", // 16 digits
            "+4491234567890123", // 16 digits
            "+１4155550123",     // full-width digit
        ] {
            assert_eq!(
                PhoneNumber::parse(input),
                Err(InvalidPhoneNumber),
                "{input:?}"
            );
        }
    }

    #[test]
    fn rejects_numbers_the_metadata_does_not_assign() {
        for input in [
            "+10005551234",     // NANP area codes never start with 0
            "+19001234567",     // 900 exchange codes never start with 1
            "+447700900123",    // Ofcom drama range, unassigned
            "+999123456789",    // no such country code
            "+123456789012345", // 15 digits, too long for NANP
        ] {
            assert_eq!(
                PhoneNumber::parse(input),
                Err(InvalidPhoneNumber),
                "{input:?}"
            );
        }
    }

    #[test]
    fn detects_premium_rate_numbers() {
        for input in [
            "+19005550123",
            "+19002345678",
            "+449090901234",
            "+449091234567",
            "+4990012345678",
            "+33891234567",
        ] {
            assert!(valid(input).is_premium_rate(), "{input}");
        }
    }

    #[test]
    fn ordinary_numbers_are_not_premium_rate() {
        for input in [
            "+14155550123",
            "+447911123456",
            "+4915123456789",
            "+33612345678",
            "+442079460000",
        ] {
            assert!(!valid(input).is_premium_rate(), "{input}");
        }
    }

    #[test]
    fn e164_round_trips() {
        let number = valid("+447911123456");
        assert_eq!(number.to_string(), "+447911123456");
        assert_eq!(valid(number.as_str()), number);
        assert_eq!(number.clone().into_string(), "+447911123456");
    }

    #[test]
    fn trunk_prefix_after_country_code_is_normalised_away() {
        // "+44 (0)…" written without the parentheses; libphonenumber drops the trunk zero.
        assert_eq!(valid("+4407911123456").as_str(), "+447911123456");
    }

    #[test]
    fn cached_answers_are_libphonenumbers_answers() {
        // More distinct inputs than the cache holds, read twice: the second pass mixes
        // evicted and cached entries; every answer, valid or not, premium or not, must match
        // an uncached classification (a trunk zero normalised, an invalid number refused).
        let mut inputs: Vec<String> = (0..PARSED_CAPACITY as u32 + 100)
            .map(|n| format!("+1415555{n:04}"))
            .collect();
        inputs
            .extend(["+4407911123456", "+19005550123", "+1555", "+10000000000"].map(String::from));
        for _ in 0..2 {
            for input in &inputs {
                assert_eq!(PhoneNumber::parse(input), classify(input), "{input}");
            }
        }
        assert_eq!(valid("+4407911123456").as_str(), "+447911123456");
        assert!(valid("+19005550123").is_premium_rate());
        assert_eq!(PhoneNumber::parse("+1555"), Err(InvalidPhoneNumber));
    }

    #[test]
    fn a_number_that_reads_as_another_when_read_back_is_invalid() {
        // Found by `never_panics_and_valid_output_reparses`: libphonenumber read this as
        // +620210000000, which it reads as +62210000000.
        assert_eq!(
            PhoneNumber::parse("+62000210000000"),
            Err(InvalidPhoneNumber)
        );
        assert_eq!(valid("+4407911123456").as_str(), "+447911123456");
    }

    #[test]
    fn warm_up_does_not_panic() {
        warm_up();
    }

    proptest! {
        #[test]
        fn never_panics_and_valid_output_reparses(digits in "[0-9]{0,17}") {
            let input = format!("+{digits}");
            if let Ok(number) = PhoneNumber::parse(&input) {
                prop_assert!(number.as_str().starts_with('+'));
                prop_assert!(number.as_str().len() <= MAX_DIGITS + 1);
                prop_assert_eq!(PhoneNumber::parse(number.as_str()), Ok(number.clone()));
            }
        }

        #[test]
        fn never_panics_on_arbitrary_text(input in "\\PC{0,20}") {
            let _ = PhoneNumber::parse(&input);
        }
    }
}
