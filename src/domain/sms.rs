//! Owns SMS content rules: GSM-7 versus UCS-2 encoding, length in units, and segment counting.

use std::fmt;
use std::ops::ControlFlow;

/// The encoding a phone will use to send a text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, utoipa::ToSchema)]
pub enum Encoding {
    /// GSM 03.38 7-bit default alphabet with its extension table.
    #[serde(rename = "GSM-7")]
    Gsm7,
    /// UCS-2, used as soon as one character falls outside GSM-7; counted in UTF-16 code units.
    #[serde(rename = "UCS-2")]
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

/// One encoding's view of a growing text: its units, and its parts as a phone packs them.
#[derive(Debug, Clone, Copy, Default)]
struct Packing {
    /// Units of the whole text.
    units: usize,
    /// Parts of at most `multi_segment_units` filled greedily, a character never split.
    parts: usize,
    /// Units in the last of those parts.
    last_part_units: usize,
}

impl Packing {
    /// Adds a character of `cost` units: it joins the last part if it fits there whole, else it
    /// starts a new one. Filling each part as far as it goes is what phones do, and no other
    /// order-keeping split needs fewer parts.
    fn push(&mut self, cost: usize, part_units: usize) {
        self.units += cost;
        if self.parts == 0 || self.last_part_units + cost > part_units {
            self.parts += 1;
            self.last_part_units = cost;
        } else {
            self.last_part_units += cost;
        }
    }

    /// Segments of the text in `encoding`: none if empty, one if it fits a single segment
    /// (not split, so nothing can straddle), else its parts.
    fn segments(&self, encoding: Encoding) -> u32 {
        let segments = if self.units == 0 {
            0
        } else if self.units <= encoding.single_segment_units() {
            1
        } else {
            self.parts
        };
        // Only reachable with texts far beyond any request size limit; saturate rather than wrap.
        u32::try_from(segments).unwrap_or(u32::MAX)
    }
}

/// Measures a text as it grows, one character at a time, in constant memory: the GSM-7 view
/// while every character so far is in GSM 03.38, and the UCS-2 view always.
#[derive(Debug, Clone, Copy)]
pub struct Meter {
    gsm7: Option<Packing>,
    ucs2: Packing,
}

impl Default for Meter {
    fn default() -> Meter {
        Meter {
            gsm7: Some(Packing::default()),
            ucs2: Packing::default(),
        }
    }
}

impl Meter {
    /// Adds `c` at the end of the text.
    pub fn push(&mut self, c: char) {
        if let Some(gsm7) = &mut self.gsm7 {
            match gsm7_units(c) {
                Some(cost) => gsm7.push(cost, Encoding::Gsm7.multi_segment_units()),
                None => self.gsm7 = None,
            }
        }
        self.ucs2
            .push(c.len_utf16(), Encoding::Ucs2.multi_segment_units());
    }

    /// How the text so far would be sent.
    pub fn measure(&self) -> Measure {
        let (encoding, packing) = match self.gsm7 {
            Some(gsm7) => (Encoding::Gsm7, gsm7),
            None => (Encoding::Ucs2, self.ucs2),
        };
        Measure {
            encoding,
            units: packing.units,
            segments: packing.segments(encoding),
        }
    }
}

/// Measures `text` as a phone would send it (docs/api.md "Messages", segments). Never fails;
/// the segment limit is [`SmsText`]'s job.
pub fn measure(text: &str) -> Measure {
    let mut meter = Meter::default();
    text.chars().for_each(|c| meter.push(c));
    meter.measure()
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

/// Builds an [`SmsText`] from pieces without ever holding more than fits: once the text needs
/// more than [`MAX_SEGMENTS`] segments it takes nothing more, so however many or large the
/// pieces, it stays within [`MAX_SEGMENTS`] segments (at most 1,530 characters).
#[derive(Debug, Clone, Default)]
pub struct SmsTextBuilder {
    text: String,
    meter: Meter,
    /// The measure of the first prefix of the pieces that did not fit, once there is one.
    overflow: Option<Measure>,
}

impl SmsTextBuilder {
    /// An empty text.
    pub fn new() -> SmsTextBuilder {
        SmsTextBuilder::default()
    }

    /// Appends `piece`, or as much of it as fits. `Break` once the text is too long: what was
    /// left out can only make it longer (segments never decrease as a text grows, and a GSM-7
    /// text over the limit is over it in UCS-2 too), so the caller may stop producing pieces.
    pub fn push_str(&mut self, piece: &str) -> ControlFlow<()> {
        if self.overflow.is_some() {
            return ControlFlow::Break(());
        }
        for c in piece.chars() {
            let mut meter = self.meter;
            meter.push(c);
            let measure = meter.measure();
            if measure.segments > MAX_SEGMENTS {
                self.overflow = Some(measure);
                return ControlFlow::Break(());
            }
            self.meter = meter;
            self.text.push(c);
        }
        ControlFlow::Continue(())
    }

    /// The text, or why it cannot be sent. For a text that did not fit, `segments` is that of
    /// its first prefix over the limit, not of everything pushed.
    pub fn finish(self) -> Result<SmsText, ContentError> {
        if let Some(measure) = self.overflow {
            return Err(ContentError::TooLong {
                segments: measure.segments,
                encoding: measure.encoding,
            });
        }
        if self.text.trim().is_empty() {
            return Err(ContentError::Empty);
        }
        Ok(SmsText {
            text: self.text,
            measure: self.meter.measure(),
        })
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
        assert_eq!(m(&"😀".repeat(35)), (Encoding::Ucs2, 70, 1));
        // A part of 67 units holds 33 emoji: the 34th would be split, so it starts the next.
        assert_eq!(m(&"😀".repeat(36)), (Encoding::Ucs2, 72, 2));
        assert_eq!(m(&"😀".repeat(66)), (Encoding::Ucs2, 132, 2));
        assert_eq!(m(&"😀".repeat(67)), (Encoding::Ucs2, 134, 3));
        assert_eq!(m(&"😀".repeat(330)), (Encoding::Ucs2, 660, 10));
        assert_eq!(m(&"😀".repeat(331)), (Encoding::Ucs2, 662, 11));
        assert_eq!(m(&"😀".repeat(335)), (Encoding::Ucs2, 670, 11));
    }

    /// At the end of every part `k` of a long GSM-7 text (1 to 9, the part holding septets
    /// `153k - 152 ..= 153k`), an extension character whose ESC is the part's last septet moves
    /// to the next part whole: one part more than the ceiling rule, and 11 at 1,530 septets.
    #[test]
    fn gsm7_extension_character_never_straddles_a_part() {
        for k in 1..=9usize {
            // `153k - 1` plain septets, then the extension character on septets 153k, 153k + 1.
            let prefix = gsm(153 * k - 1);
            let straddling = format!("{prefix}€");
            let plain_units = 153 * k + 1;
            let parts = if plain_units <= 160 { 1 } else { k + 1 };
            assert_eq!(
                m(&straddling),
                (Encoding::Gsm7, plain_units, parts as u32),
                "escape at the end of part {k}"
            );
            // Filled up to the ceiling rule's last septet of part k + 1: one part more.
            let full = format!("{straddling}{}", gsm(152));
            assert_eq!(
                m(&full),
                (Encoding::Gsm7, 153 * (k + 1), (k + 2) as u32),
                "escape at the end of part {k}, then a full part"
            );
            // The same characters with the extension character one septet earlier fit.
            let fitting = format!("{}€{}", gsm(153 * k - 2), gsm(153));
            assert_eq!(
                m(&fitting),
                (Encoding::Gsm7, 153 * (k + 1), (k + 1) as u32),
                "escape inside part {k}"
            );
        }
        // 1,530 septets with an escape at a boundary need 11 parts; a single part is not split.
        assert_eq!(
            m(&format!("{}€{}", gsm(152), gsm(1376))),
            (Encoding::Gsm7, 1530, 11)
        );
        assert_eq!(m(&format!("{}€", gsm(158))), (Encoding::Gsm7, 160, 1));
        assert_eq!(m(&format!("{}€", gsm(159))), (Encoding::Gsm7, 161, 2));
    }

    /// The same at every boundary of a long UCS-2 text, for a surrogate pair.
    #[test]
    fn ucs2_surrogate_pair_never_straddles_a_part() {
        for k in 1..=9usize {
            let prefix = format!("ć{}", "a".repeat(67 * k - 2));
            let straddling = format!("{prefix}😀");
            let units = 67 * k + 1;
            let parts = if units <= 70 { 1 } else { k + 1 };
            assert_eq!(
                m(&straddling),
                (Encoding::Ucs2, units, parts as u32),
                "emoji at the end of part {k}"
            );
            let full = format!("{straddling}{}", "a".repeat(66));
            assert_eq!(
                m(&full),
                (Encoding::Ucs2, 67 * (k + 1), (k + 2) as u32),
                "emoji at the end of part {k}, then a full part"
            );
            let fitting = format!("ć{}😀{}", "a".repeat(67 * k - 3), "a".repeat(67));
            assert_eq!(
                m(&fitting),
                (Encoding::Ucs2, 67 * (k + 1), (k + 1) as u32),
                "emoji inside part {k}"
            );
        }
        assert_eq!(
            m(&format!("ć{}😀{}", "a".repeat(65), "a".repeat(602))),
            (Encoding::Ucs2, 670, 11)
        );
        assert_eq!(
            m(&format!("ć{}😀", "a".repeat(67))),
            (Encoding::Ucs2, 70, 1)
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

        let text = SmsText::parse("😀".repeat(330)).unwrap();
        assert_eq!(text.encoding(), Encoding::Ucs2);
        assert_eq!(text.segments(), 10);
        assert_eq!(text.into_string(), "😀".repeat(330));

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
            SmsText::parse("😀".repeat(331)),
            Err(ContentError::TooLong {
                segments: 11,
                encoding: Encoding::Ucs2
            })
        );
        assert_eq!(
            SmsText::parse(format!("{}€{}", gsm(152), gsm(1376))),
            Err(ContentError::TooLong {
                segments: 11,
                encoding: Encoding::Gsm7
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

    /// The fewest parts of at most `part_units` that keep each character whole, by dynamic
    /// programming over every split (independent of the greedy packing under test).
    fn fewest_parts(costs: &[usize], part_units: usize) -> usize {
        let mut best = vec![usize::MAX; costs.len() + 1];
        best[0] = 0;
        for end in 1..=costs.len() {
            let mut units = 0;
            for start in (0..end).rev() {
                units += costs[start];
                if units > part_units {
                    break;
                }
                if best[start] != usize::MAX {
                    best[end] = best[end].min(best[start] + 1);
                }
            }
        }
        best[costs.len()]
    }

    /// Segments by the rule of docs/api.md "Messages", from first principles.
    fn reference_segments(text: &str) -> u32 {
        let (costs, single, part): (Vec<usize>, usize, usize) =
            match text.chars().map(gsm7_units).collect::<Option<Vec<_>>>() {
                Some(costs) => (costs, 160, 153),
                None => (text.chars().map(char::len_utf16).collect(), 70, 67),
            };
        let units: usize = costs.iter().sum();
        let segments = match units {
            0 => 0,
            n if n <= single => 1,
            _ => fewest_parts(&costs, part),
        };
        segments as u32
    }

    /// Long texts weighted towards the characters that matter at a boundary.
    fn boundary_text() -> impl Strategy<Value = String> {
        let gsm = proptest::collection::vec(
            prop_oneof![4 => Just('a'), 1 => Just('€'), 1 => Just('[')],
            0..1600,
        );
        let ucs2 = proptest::collection::vec(
            prop_oneof![4 => Just('ć'), 1 => Just('😀'), 1 => Just('a')],
            0..720,
        );
        prop_oneof![gsm, ucs2].prop_map(|chars| chars.into_iter().collect())
    }

    proptest! {
        #[test]
        fn segments_are_the_fewest_parts_a_phone_can_send(text in boundary_text()) {
            prop_assert_eq!(measure(&text).segments, reference_segments(&text));
        }

        #[test]
        fn texts_without_escapes_or_pairs_follow_the_ceiling_rule(
            n in 0usize..1700,
            ucs2 in any::<bool>(),
        ) {
            let (text, single, part) = if ucs2 && n > 0 {
                (format!("ć{}", "a".repeat(n - 1)), 70, 67)
            } else {
                (gsm(n), 160, 153)
            };
            let expected = match n {
                0 => 0,
                n if n <= single => 1,
                n => n.div_ceil(part),
            };
            prop_assert_eq!(measure(&text).segments as usize, expected);
        }

        #[test]
        fn builder_agrees_with_parse_and_stays_bounded(
            pieces in proptest::collection::vec(boundary_text(), 0..4),
        ) {
            let whole: String = pieces.concat();
            let mut builder = SmsTextBuilder::new();
            for piece in &pieces {
                if builder.push_str(piece).is_break() {
                    break;
                }
            }
            prop_assert!(builder.text.chars().count() <= 1530);
            match (builder.finish(), SmsText::parse(whole)) {
                (Ok(built), Ok(parsed)) => prop_assert_eq!(built, parsed),
                (Err(ContentError::Empty), Err(ContentError::Empty)) => {}
                (
                    Err(ContentError::TooLong { segments, .. }),
                    Err(ContentError::TooLong { segments: all, .. }),
                ) => {
                    // The first prefix over the limit; more than one over when its last
                    // character switched the text to UCS-2.
                    prop_assert!(segments > MAX_SEGMENTS && segments <= all);
                }
                (built, parsed) => prop_assert!(false, "{built:?} but {parsed:?}"),
            }
        }
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
