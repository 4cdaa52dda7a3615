//! Opt-out keywords of inbound replies: recognises STOP-style, START and "STOP AI" messages.

/// What an inbound reply asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keyword {
    /// Stop all messages to this number (STOP, UNSUBSCRIBE, CANCEL, END, QUIT).
    OptOut,
    /// Resume messages after an opt-out (START).
    OptIn,
    /// Stop AI-generated replies only ("STOP AI").
    StopAi,
}

/// Words that opt the sender out, per carrier convention.
const OPT_OUT_WORDS: &[&str] = &["STOP", "UNSUBSCRIBE", "CANCEL", "END", "QUIT"];

/// The inbound text trimmed and compared case-insensitively: STOP, UNSUBSCRIBE, CANCEL, END,
/// QUIT → `OptOut`; START → `OptIn`; "STOP AI" (any run of ASCII whitespace between the
/// words) → `StopAi`. Anything else, including extra words, → `None`.
pub fn classify(text: &str) -> Option<Keyword> {
    let text = text.trim();
    // ASCII-only case folding: Unicode folding would let look-alikes such as "ſtop" (long s)
    // or a Turkish dotless "quıt" count as keywords, which carriers do not do.
    if OPT_OUT_WORDS.iter().any(|w| text.eq_ignore_ascii_case(w)) {
        return Some(Keyword::OptOut);
    }
    if text.eq_ignore_ascii_case("START") {
        return Some(Keyword::OptIn);
    }
    if is_stop_ai(text) {
        return Some(Keyword::StopAi);
    }
    None
}

/// "STOP", at least one ASCII whitespace character, then "AI", case-insensitively.
fn is_stop_ai(text: &str) -> bool {
    // `get` instead of slicing: the 4th byte may fall inside a multi-byte character.
    let (Some(head), Some(rest)) = (text.get(..4), text.get(4..)) else {
        return false;
    };
    let tail = rest.trim_start_matches(|c: char| c.is_ascii_whitespace());
    head.eq_ignore_ascii_case("STOP") && tail.len() < rest.len() && tail.eq_ignore_ascii_case("AI")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        let cases: &[(&str, Option<Keyword>)] = &[
            ("STOP", Some(Keyword::OptOut)),
            ("stop ", Some(Keyword::OptOut)),
            ("Stop", Some(Keyword::OptOut)),
            ("\tQUIT\n", Some(Keyword::OptOut)),
            ("unsubscribe", Some(Keyword::OptOut)),
            ("Cancel", Some(Keyword::OptOut)),
            ("end", Some(Keyword::OptOut)),
            ("start", Some(Keyword::OptIn)),
            (" START\r\n", Some(Keyword::OptIn)),
            ("STOP AI", Some(Keyword::StopAi)),
            ("stop  ai", Some(Keyword::StopAi)),
            ("Stop\tAi", Some(Keyword::StopAi)),
            (" stop \n ai ", Some(Keyword::StopAi)),
            ("STOP please", None),
            ("STOPAI", None),
            ("STOP AI now", None),
            ("STOP\u{a0}AI", None), // non-breaking space is not ASCII whitespace
            ("", None),
            ("   ", None),
            ("STOPP", None),
            ("S TOP", None),
            ("starts", None),
            ("ſtop", None),     // long s folds to 's' only under Unicode rules
            ("quıt", None),     // dotless i
            ("ＳＴＯＰ", None), // fullwidth letters
            ("ST€P AI", None),
            ("stop ai?", None),
        ];
        for &(text, expected) in cases {
            assert_eq!(classify(text), expected, "{text:?}");
        }
    }
}
