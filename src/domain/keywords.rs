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
    use proptest::prelude::*;

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

    /// Any casing of a keyword, padded with any ASCII whitespace, is that keyword.
    fn casing(word: &'static str) -> impl Strategy<Value = String> {
        proptest::collection::vec(proptest::bool::ANY, word.len()).prop_map(move |upper| {
            word.chars()
                .zip(upper)
                .map(|(c, u)| {
                    if u {
                        c.to_ascii_uppercase()
                    } else {
                        c.to_ascii_lowercase()
                    }
                })
                .collect()
        })
    }

    proptest! {
        #[test]
        fn padding_and_case_do_not_matter(
            index in 0usize..6,
            pad_left in "[ \t\r\n]{0,3}",
            pad_right in "[ \t\r\n]{0,3}",
            upper in proptest::collection::vec(proptest::bool::ANY, 11),
        ) {
            let words = ["STOP", "UNSUBSCRIBE", "CANCEL", "END", "QUIT", "START"];
            let word: String = words[index]
                .chars()
                .zip(upper)
                .map(|(c, u)| if u { c } else { c.to_ascii_lowercase() })
                .collect();
            let expected = if index == 5 { Keyword::OptIn } else { Keyword::OptOut };
            prop_assert_eq!(classify(&format!("{pad_left}{word}{pad_right}")), Some(expected));
            // Any extra word after it makes it an ordinary message.
            prop_assert_eq!(classify(&format!("{pad_left}{word} now{pad_right}")), None);
        }

        #[test]
        fn stop_ai_in_any_case(stop in casing("stop"), ai in casing("ai"), gap in "[ \t]{1,3}") {
            prop_assert_eq!(classify(&format!("{stop}{gap}{ai}")), Some(Keyword::StopAi));
        }
    }
}
