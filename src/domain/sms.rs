//! Owns SMS content rules: GSM-7 versus UCS-2 encoding, length in units, and segment counting.

use std::fmt;

/// The encoding a phone will use to send a text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// GSM 03.38 7-bit default alphabet with its extension table.
    Gsm7,
    /// UCS-2, used as soon as one character falls outside GSM-7; counted in UTF-16 code units.
    Ucs2,
}

impl Encoding {
    /// The wire name: `"GSM-7"` or `"UCS-2"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Encoding::Gsm7 => "GSM-7",
            Encoding::Ucs2 => "UCS-2",
        }
    }

    /// The inverse of [`Encoding::as_str`]; the match is exact.
    pub fn parse(s: &str) -> Option<Encoding> {
        match s {
            "GSM-7" => Some(Encoding::Gsm7),
            "UCS-2" => Some(Encoding::Ucs2),
            _ => None,
        }
    }

    /// Units that fit in a message sent as a single segment.
    fn single_segment_units(self) -> usize {
        match self {
            Encoding::Gsm7 => 160,
            Encoding::Ucs2 => 70,
        }
    }

    /// Units per segment once a message is split, the rest of each segment being its UDH header.
    fn multi_segment_units(self) -> usize {
        match self {
            Encoding::Gsm7 => 153,
            Encoding::Ucs2 => 67,
        }
    }
}

impl fmt::Display for Encoding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for Encoding {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// The most segments one message may span.
pub const MAX_SEGMENTS: u32 = 10;

/// How a text would be sent: its encoding, its length in that encoding's units, and its segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Measure {
    /// GSM-7 if every character is in GSM 03.38, otherwise UCS-2.
    pub encoding: Encoding,
    /// GSM-7 septets (extension characters count 2) or UTF-16 code units.
    pub units: usize,
    /// Segments needed; 0 for empty text, and not capped at [`MAX_SEGMENTS`].
    pub segments: u32,
}

/// GSM-7 septets needed for `c`, or `None` if GSM 03.38 cannot represent it.
fn gsm7_units(c: char) -> Option<usize> {
    match c {
        'A'..='Z' | 'a'..='z' | '0'..='9' => Some(1),
        // The rest of the basic table, in code-point order (0x00 to 0x7F). ESC (0x1B) is left
        // out on purpose: it introduces the extension table and is not a character to send.
        '@' | '£' | '$' | '¥' | 'è' | 'é' | 'ù' | 'ì' | 'ò' | 'Ç' | '\n' | 'Ø' | 'ø' | '\r'
        | 'Å' | 'å' | 'Δ' | '_' | 'Φ' | 'Γ' | 'Λ' | 'Ω' | 'Π' | 'Ψ' | 'Σ' | 'Θ' | 'Ξ' | 'Æ'
        | 'æ' | 'ß' | 'É' | ' ' | '!' | '"' | '#' | '¤' | '%' | '&' | '\'' | '(' | ')' | '*'
        | '+' | ',' | '-' | '.' | '/' | ':' | ';' | '<' | '=' | '>' | '?' | '¡' | 'Ä' | 'Ö'
        | 'Ñ' | 'Ü' | '§' | '¿' | 'ä' | 'ö' | 'ñ' | 'ü' | 'à' => Some(1),
        // The extension table costs an ESC septet plus the character itself.
        '\u{0C}' | '^' | '{' | '}' | '\\' | '[' | '~' | ']' | '|' | '€' => Some(2),
        _ => None,
    }
}

/// Segments for `units` of `encoding`, following the simple ceiling rule of docs/api.md, Messages.
fn segments_for(encoding: Encoding, units: usize) -> u32 {
    let segments = if units == 0 {
        0
    } else if units <= encoding.single_segment_units() {
        1
    } else {
        units.div_ceil(encoding.multi_segment_units())
    };
    // Only reachable with texts far beyond any request size limit; saturate rather than wrap.
    u32::try_from(segments).unwrap_or(u32::MAX)
}

/// Measures `text` as a phone would send it. Never fails; the segment limit is [`SmsText`]'s job.
pub fn measure(text: &str) -> Measure {
    let mut gsm7_total = Some(0usize);
    for c in text.chars() {
        gsm7_total = match (gsm7_total, gsm7_units(c)) {
            (Some(total), Some(units)) => Some(total + units),
            _ => None,
        };
        if gsm7_total.is_none() {
            break;
        }
    }
    let (encoding, units) = match gsm7_total {
        Some(units) => (Encoding::Gsm7, units),
        None => (Encoding::Ucs2, text.encode_utf16().count()),
    };
    Measure {
        encoding,
        units,
        segments: segments_for(encoding, units),
    }
}

/// Message content that is not blank and fits in [`MAX_SEGMENTS`] segments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmsText {
    text: String,
    measure: Measure,
}

/// Why content cannot be sent as one message.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ContentError {
    /// The text is empty or only whitespace.
    #[error("content must not be empty")]
    Empty,
    /// The text needs more than [`MAX_SEGMENTS`] segments.
    #[error(
        "content is {segments} segments of {encoding}; the limit is {}",
        MAX_SEGMENTS
    )]
    TooLong {
        /// Segments the text would need.
        segments: u32,
        /// Encoding the text would be sent in.
        encoding: Encoding,
    },
}

impl SmsText {
    /// Accepts `text` unchanged if it is not blank and needs at most [`MAX_SEGMENTS`] segments.
    pub fn parse(text: String) -> Result<SmsText, ContentError> {
        if text.trim().is_empty() {
            return Err(ContentError::Empty);
        }
        let measure = measure(&text);
        if measure.segments > MAX_SEGMENTS {
            return Err(ContentError::TooLong {
                segments: measure.segments,
                encoding: measure.encoding,
            });
        }
        Ok(SmsText { text, measure })
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The text, by value.
    pub fn into_string(self) -> String {
        self.text
    }

    /// The encoding the text will be sent in.
    pub fn encoding(&self) -> Encoding {
        self.measure.encoding
    }

    /// Segments the text will be sent as, between 1 and [`MAX_SEGMENTS`].
    pub fn segments(&self) -> u32 {
        self.measure.segments
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// GSM 03.38 basic table in code-point order, ESC (0x1B) shown as `\u{1b}`.
    const BASIC_TABLE: &str = "@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞ\u{1b}ÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?\
                               ¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà";
    const EXTENSION_TABLE: &str = "\u{0C}^{}\\[~]|€";

    fn gsm(n: usize) -> String {
        "a".repeat(n)
    }

    fn m(text: &str) -> (Encoding, usize, u32) {
        let measure = measure(text);
        (measure.encoding, measure.units, measure.segments)
    }

    #[test]
    fn basic_table_is_exactly_gsm_03_38() {
        assert_eq!(BASIC_TABLE.chars().count(), 128);
        for (code, c) in BASIC_TABLE.chars().enumerate() {
            let expected = if code == 0x1B { None } else { Some(1) };
            assert_eq!(gsm7_units(c), expected, "0x{code:02X} {c:?}");
        }
        for c in EXTENSION_TABLE.chars() {
            assert_eq!(gsm7_units(c), Some(2), "{c:?}");
        }
        // Nothing outside the two tables is accepted.
        let accepted = (0..=u32::from(char::MAX))
            .filter_map(char::from_u32)
            .filter(|&c| gsm7_units(c).is_some())
            .count();
        assert_eq!(accepted, 127 + EXTENSION_TABLE.chars().count());
    }

    #[test]
    fn lookalikes_are_not_gsm() {
        for c in [
            'ç', '`', '\t', '\u{1b}', '\u{2126}', /* ohm sign, not Greek omega */
            'µ', 'ć', '中', '😀',
        ] {
            assert_eq!(gsm7_units(c), None, "{c:?}");
        }
    }

    #[test]
    fn empty_text_is_zero_segments() {
        assert_eq!(m(""), (Encoding::Gsm7, 0, 0));
    }

    #[test]
    fn gsm7_boundaries() {
        assert_eq!(m(&gsm(160)), (Encoding::Gsm7, 160, 1));
        assert_eq!(m(&gsm(161)), (Encoding::Gsm7, 161, 2));
        assert_eq!(m(&gsm(306)), (Encoding::Gsm7, 306, 2));
        assert_eq!(m(&gsm(307)), (Encoding::Gsm7, 307, 3));
        assert_eq!(m(&gsm(1530)), (Encoding::Gsm7, 1530, 10));
        assert_eq!(m(&gsm(1531)), (Encoding::Gsm7, 1531, 11));
    }

    #[test]
    fn extension_characters_count_two() {
        assert_eq!(m(&"€".repeat(80)), (Encoding::Gsm7, 160, 1));
        assert_eq!(m(&"€".repeat(81)), (Encoding::Gsm7, 162, 2));
        assert_eq!(m("{[|]}"), (Encoding::Gsm7, 10, 1));
    }

    #[test]
    fn ucs2_boundaries() {
        let ucs2 = |n: usize| format!("ć{}", "a".repeat(n - 1));
        assert_eq!(m(&ucs2(70)), (Encoding::Ucs2, 70, 1));
        assert_eq!(m(&ucs2(71)), (Encoding::Ucs2, 71, 2));
        assert_eq!(m(&ucs2(134)), (Encoding::Ucs2, 134, 2));
        assert_eq!(m(&ucs2(135)), (Encoding::Ucs2, 135, 3));
    }

    #[test]
    fn emoji_outside_the_bmp_counts_two_units() {
        assert_eq!(m("😀"), (Encoding::Ucs2, 2, 1));
        assert_eq!(m(&"😀".repeat(335)), (Encoding::Ucs2, 670, 10));
        assert_eq!(
            m(&format!("{}a", "😀".repeat(335))),
            (Encoding::Ucs2, 671, 11)
        );
    }

    #[test]
    fn one_non_gsm_character_switches_to_ucs2() {
        for c in ['ć', '中', '\u{1b}', 'ç'] {
            let text = format!("{}{c}", gsm(100));
            assert_eq!(m(&text), (Encoding::Ucs2, 101, 2), "{c:?}");
        }
        // Extension characters are one UTF-16 unit each once the text is UCS-2.
        assert_eq!(m("€ć"), (Encoding::Ucs2, 2, 1));
    }

    #[test]
    fn sms_text_accepts_up_to_ten_segments() {
        let text = SmsText::parse(gsm(1530)).unwrap();
        assert_eq!(text.encoding(), Encoding::Gsm7);
        assert_eq!(text.segments(), 10);
        assert_eq!(text.as_str().len(), 1530);

        let text = SmsText::parse("😀".repeat(335)).unwrap();
        assert_eq!(text.encoding(), Encoding::Ucs2);
        assert_eq!(text.segments(), 10);
        assert_eq!(text.into_string(), "😀".repeat(335));

        let text = SmsText::parse(" hi ".to_owned()).unwrap();
        assert_eq!(text.as_str(), " hi ");
        assert_eq!(text.segments(), 1);
    }

    #[test]
    fn sms_text_rejects_too_long() {
        assert_eq!(
            SmsText::parse(gsm(1531)),
            Err(ContentError::TooLong {
                segments: 11,
                encoding: Encoding::Gsm7
            })
        );
        assert_eq!(
            SmsText::parse(format!("{}a", "😀".repeat(335))),
            Err(ContentError::TooLong {
                segments: 11,
                encoding: Encoding::Ucs2
            })
        );
        assert_eq!(
            SmsText::parse("€".repeat(766)),
            Err(ContentError::TooLong {
                segments: 11,
                encoding: Encoding::Gsm7
            })
        );
    }

    #[test]
    fn sms_text_rejects_blank() {
        for text in ["", " ", "\n\r\t ", "\u{3000}"] {
            assert_eq!(
                SmsText::parse(text.to_owned()),
                Err(ContentError::Empty),
                "{text:?}"
            );
        }
    }

    #[test]
    fn error_messages() {
        assert_eq!(ContentError::Empty.to_string(), "content must not be empty");
        let too_long = ContentError::TooLong {
            segments: 11,
            encoding: Encoding::Ucs2,
        };
        assert_eq!(
            too_long.to_string(),
            "content is 11 segments of UCS-2; the limit is 10"
        );
    }

    #[test]
    fn encoding_names_round_trip() {
        for encoding in [Encoding::Gsm7, Encoding::Ucs2] {
            assert_eq!(Encoding::parse(encoding.as_str()), Some(encoding));
            assert_eq!(encoding.to_string(), encoding.as_str());
        }
        assert_eq!(Encoding::parse("gsm-7"), None);
        assert_eq!(Encoding::parse("UCS2"), None);
    }

    fn gsm_char() -> impl Strategy<Value = char> {
        let chars: Vec<char> = BASIC_TABLE
            .chars()
            .filter(|&c| c != '\u{1b}')
            .chain(EXTENSION_TABLE.chars())
            .collect();
        proptest::sample::select(chars)
    }

    proptest! {
        #[test]
        fn gsm7_segments_never_decrease_when_appending_gsm(
            text in proptest::collection::vec(gsm_char(), 0..1700),
            extra in gsm_char(),
        ) {
            let mut text: String = text.into_iter().collect();
            let before = measure(&text);
            text.push(extra);
            let after = measure(&text);
            prop_assert_eq!(before.encoding, Encoding::Gsm7);
            prop_assert_eq!(after.encoding, Encoding::Gsm7);
            prop_assert!(after.segments >= before.segments);
            prop_assert_eq!(after.units, before.units + gsm7_units(extra).unwrap());
        }

        #[test]
        fn ucs2_segments_never_decrease_when_appending(
            text in "中\\PC{0,800}",
            extra in any::<char>(),
        ) {
            let mut text = text;
            let before = measure(&text);
            text.push(extra);
            let after = measure(&text);
            prop_assert_eq!(before.encoding, Encoding::Ucs2);
            prop_assert_eq!(after.encoding, Encoding::Ucs2);
            prop_assert!(after.segments >= before.segments);
            prop_assert_eq!(after.units, before.units + extra.len_utf16());
        }

        #[test]
        fn ascii_alphanumeric_units_equal_length(text in "[A-Za-z0-9]{0,2000}") {
            let measure = measure(&text);
            prop_assert_eq!(measure.encoding, Encoding::Gsm7);
            prop_assert_eq!(measure.units, text.len());
        }

        #[test]
        fn sms_text_accepts_exactly_what_fits(text in "\\PC{0,1000}") {
            let measure = measure(&text);
            match SmsText::parse(text.clone()) {
                Ok(sms) => {
                    prop_assert!((1..=MAX_SEGMENTS).contains(&sms.segments()));
                    prop_assert_eq!(sms.encoding(), measure.encoding);
                    prop_assert_eq!(sms.into_string(), text);
                }
                Err(ContentError::Empty) => prop_assert!(text.trim().is_empty()),
                Err(ContentError::TooLong { segments, encoding }) => {
                    prop_assert!(segments > MAX_SEGMENTS);
                    prop_assert_eq!((segments, encoding), (measure.segments, measure.encoding));
                }
            }
        }
    }
}
