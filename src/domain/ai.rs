//! AI reply drafts: modes, draft statuses, the keyword rules of the embedded `rules` provider,
//! and fitting a provider's reply into one message.

use serde::{Deserialize, Serialize};

use super::sms::{MAX_SEGMENTS, measure};

/// What happens to a reply the provider made: `draft` stores it for review, `auto` sends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = AiModeOut)]
pub enum AiMode {
    /// Stored pending for review (`ai.draft.created`).
    Draft,
    /// Sent at once.
    Auto,
}

impl AiMode {
    pub fn as_str(self) -> &'static str {
        match self {
            AiMode::Draft => "draft",
            AiMode::Auto => "auto",
        }
    }

    pub fn parse(text: &str) -> Option<AiMode> {
        match text {
            "draft" => Some(AiMode::Draft),
            "auto" => Some(AiMode::Auto),
            _ => None,
        }
    }
}

/// Where a draft is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = DraftStatusOut)]
pub enum DraftStatus {
    Pending,
    Sent,
    Discarded,
}

impl DraftStatus {
    pub const ALL: [DraftStatus; 3] = [
        DraftStatus::Pending,
        DraftStatus::Sent,
        DraftStatus::Discarded,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DraftStatus::Pending => "pending",
            DraftStatus::Sent => "sent",
            DraftStatus::Discarded => "discarded",
        }
    }

    pub fn parse(text: &str) -> Option<DraftStatus> {
        DraftStatus::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

impl std::fmt::Display for DraftStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One keyword rule of the embedded `rules` provider: any of `keywords` in an inbound text
/// makes `reply` the draft.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = AiRule)]
pub struct Rule {
    /// Any of these, found in an inbound text as a whole word or phrase (any case).
    pub keywords: Vec<String>,
    /// The draft's text.
    pub reply: String,
}

/// The reply of the first rule with a keyword in `text`: case-insensitive, as a whole word or
/// phrase (the characters around it are not letters or digits), so "price" does not match
/// "priceless".
pub fn match_rule<'a>(rules: &'a [Rule], text: &str) -> Option<&'a str> {
    let text = text.to_lowercase();
    rules
        .iter()
        .find(|rule| {
            rule.keywords
                .iter()
                .any(|k| contains_phrase(&text, &k.trim().to_lowercase()))
        })
        .map(|rule| rule.reply.as_str())
}

fn contains_phrase(text: &str, phrase: &str) -> bool {
    if phrase.is_empty() {
        return false;
    }
    let mut from = 0;
    while let Some(found) = text[from..].find(phrase) {
        let start = from + found;
        let end = start + phrase.len();
        let before = text[..start].chars().next_back();
        let after = text[end..].chars().next();
        if !before.is_some_and(char::is_alphanumeric) && !after.is_some_and(char::is_alphanumeric) {
            return true;
        }
        from = start + text[start..].chars().next().map_or(1, char::len_utf8);
    }
    false
}

/// `text` trimmed and, when longer than one message may be, cut (at a character boundary) to
/// the longest prefix that fits in [`MAX_SEGMENTS`] segments.
pub fn fit_reply(text: &str) -> String {
    let text = text.trim();
    if measure(text).segments <= MAX_SEGMENTS {
        return text.to_string();
    }
    let chars: Vec<char> = text.chars().collect();
    let (mut low, mut high) = (0, chars.len());
    while low < high {
        let mid = (low + high).div_ceil(2);
        let prefix: String = chars[..mid].iter().collect();
        if measure(&prefix).segments <= MAX_SEGMENTS {
            low = mid;
        } else {
            high = mid - 1;
        }
    }
    chars[..low]
        .iter()
        .collect::<String>()
        .trim_end()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> Vec<Rule> {
        vec![
            Rule {
                keywords: vec!["price".into(), "how much".into()],
                reply: "10 EUR".into(),
            },
            Rule {
                keywords: vec!["hours".into()],
                reply: "9 to 5".into(),
            },
        ]
    }

    #[test]
    fn keywords_match_whole_words_and_phrases_in_any_case() {
        assert_eq!(match_rule(&rules(), "What's the PRICE?"), Some("10 EUR"));
        assert_eq!(match_rule(&rules(), "how   much"), None);
        assert_eq!(match_rule(&rules(), "So, how much is it"), Some("10 EUR"));
        assert_eq!(match_rule(&rules(), "opening hours"), Some("9 to 5"));
        assert_eq!(match_rule(&rules(), "priceless"), None);
        assert_eq!(match_rule(&rules(), "the price-list"), Some("10 EUR"));
        assert_eq!(match_rule(&rules(), "hello"), None);
    }

    #[test]
    fn the_first_matching_rule_wins() {
        assert_eq!(match_rule(&rules(), "hours and price"), Some("10 EUR"));
    }

    #[test]
    fn long_replies_are_cut_to_ten_segments() {
        let long = "a".repeat(2000);
        let fitted = fit_reply(&long);
        assert_eq!(fitted.len(), 1530);
        assert_eq!(fit_reply("  short  "), "short");
        let emoji = "😀".repeat(400);
        assert!(measure(&fit_reply(&emoji)).segments <= MAX_SEGMENTS);
    }

    #[test]
    fn names_round_trip() {
        for s in DraftStatus::ALL {
            assert_eq!(DraftStatus::parse(s.as_str()), Some(s));
        }
        assert_eq!(AiMode::parse("auto"), Some(AiMode::Auto));
        assert_eq!(AiMode::parse("x"), None);
    }
}
