//! Campaign templating: `{{name}}` / `{{ name }}` tokens replaced with per-recipient values.

use std::ops::ControlFlow;

/// A piece of a template body: literal text or the name inside a well-formed token.
enum Segment<'a> {
    Text(&'a str),
    Token(&'a str),
}

/// Renders `body` piece by piece into `push`: its text as is, every token as `lookup(name)`, or
/// nothing when that is `None`. Text that is not a well-formed token (e.g. `{{`, `{{ }}`,
/// `{{a b}}`) is left as is. Stops as soon as `push` answers `Break` and returns it, so a sink
/// that refuses to grow past a bound bounds the work too, however many tokens the body has.
pub fn render_into<'v>(
    body: &str,
    lookup: impl Fn(&str) -> Option<&'v str>,
    mut push: impl FnMut(&str) -> ControlFlow<()>,
) -> ControlFlow<()> {
    for segment in segments(body) {
        let piece = match segment {
            Segment::Text(text) => text,
            Segment::Token(name) => lookup(name).unwrap_or(""),
        };
        push(piece)?;
    }
    ControlFlow::Continue(())
}

/// Names of tokens in the body, in order of first appearance, deduplicated.
pub fn variables(body: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for segment in segments(body) {
        if let Segment::Token(name) = segment
            && !names.iter().any(|n| n == name)
        {
            names.push(name.to_owned());
        }
    }
    names
}

/// Splits `body` into literal text and tokens, left to right.
fn segments(body: &str) -> impl Iterator<Item = Segment<'_>> {
    let mut rest = body;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let Some(open) = rest.find("{{") else {
            let text = rest;
            rest = "";
            return Some(Segment::Text(text));
        };
        if open > 0 {
            let text = &rest[..open];
            rest = &rest[open..];
            return Some(Segment::Text(text));
        }
        if let Some((name, len)) = token_at(rest) {
            rest = &rest[len..];
            return Some(Segment::Token(name));
        }
        // Not a token: emit one brace as text and rescan from the next one, so that in
        // "{{{a}}}" the inner "{{a}}" is still found.
        let text = &rest[..1];
        rest = &rest[1..];
        Some(Segment::Text(text))
    })
}

/// If `s` starts with a well-formed token, returns its name and byte length.
/// All delimiters are ASCII, so every index used here is a char boundary.
fn token_at(s: &str) -> Option<(&str, usize)> {
    let bytes = s.as_bytes();
    let mut i = 2; // past "{{"
    while bytes.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    let start = i;
    while bytes.get(i).is_some_and(|&b| is_name_byte(b)) {
        i += 1;
    }
    if i == start {
        return None;
    }
    let end = i;
    while bytes.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    if bytes.get(i..i + 2) == Some(b"}}") {
        Some((&s[start..end], i + 2))
    } else {
        None
    }
}

/// Name characters: `[A-Za-z0-9_.-]`.
fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-')
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The whole rendering, into a String that takes everything.
    fn render<'v>(body: &str, lookup: impl Fn(&str) -> Option<&'v str>) -> String {
        let mut out = String::new();
        let flow = render_into(body, lookup, |piece| {
            out.push_str(piece);
            ControlFlow::Continue(())
        });
        assert_eq!(flow, ControlFlow::Continue(()));
        out
    }

    fn vars(name: &str) -> Option<&'static str> {
        match name {
            "name" => Some("Ada"),
            "contact.city" => Some("Zürich"),
            "x" => Some("1"),
            "y" => Some("2"),
            "a-b_c" => Some("ok"),
            _ => None,
        }
    }

    #[test]
    fn render_cases() {
        let cases: &[(&str, &str)] = &[
            ("Hi {{name}}!", "Hi Ada!"),
            ("Hi {{ name }}!", "Hi Ada!"),
            ("Hi {{\tname\n}}!", "Hi Ada!"),
            ("Hi {{name }} and {{  name}}", "Hi Ada and Ada"),
            ("From {{contact.city}}", "From Zürich"),
            ("{{a-b_c}}", "ok"),
            ("Hi {{missing}}!", "Hi !"),
            ("{{x}}{{y}}", "12"),
            ("{{x}}{{x}}{{x}}", "111"),
            (
                "Grüße {{name}} 🎉 — 你好{{ name }}",
                "Grüße Ada 🎉 — 你好Ada",
            ),
            ("Hi {{name", "Hi {{name"),
            ("Hi {{ name }", "Hi {{ name }"),
            ("Hi {{", "Hi {{"),
            ("{{ }}", "{{ }}"),
            ("{{}}", "{{}}"),
            ("{{a b}}", "{{a b}}"),
            ("{{näme}}", "{{näme}}"),
            ("{name}", "{name}"),
            ("{{{x}}}", "{1}"),
            ("{{{{x}}", "{{1"),
            ("}}{{x}}{{", "}}1{{"),
            ("{{ {{x}} }}", "{{ 1 }}"),
            ("", ""),
        ];
        for &(body, expected) in cases {
            assert_eq!(render(body, vars), expected, "{body:?}");
        }
    }

    #[test]
    fn variables_in_order_deduplicated() {
        assert_eq!(
            variables("{{ b }} {{a}} {{b}} {{bad name}} {{c.d}} {{a}} {{"),
            vec!["b", "a", "c.d"]
        );
        assert!(variables("no tokens {{ }} here").is_empty());
    }

    #[test]
    fn lookup_receives_trimmed_name() {
        let out = render("{{  first_name  }}", |n| {
            (n == "first_name").then_some("<ok>")
        });
        assert_eq!(out, "<ok>");
    }

    #[test]
    fn rendering_stops_when_the_sink_breaks() {
        let body = "{{a}}".repeat(1000);
        let (mut pieces, mut lookups) = (0, std::cell::Cell::new(0));
        let flow = render_into(
            &body,
            |_| {
                lookups.set(lookups.get() + 1);
                Some("value")
            },
            |_| {
                pieces += 1;
                if pieces == 3 {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            },
        );
        assert_eq!(flow, ControlFlow::Break(()));
        assert_eq!((pieces, *lookups.get_mut()), (3, 3));
    }

    proptest! {
        #[test]
        fn text_without_open_braces_is_unchanged(body in any::<String>().prop_filter("no {{", |s| !s.contains("{{"))) {
            prop_assert_eq!(render(&body, |_| Some("X")), body.clone());
            prop_assert!(variables(&body).is_empty());
        }

        #[test]
        fn token_round_trip(prefix in "[^{]*", name in "[A-Za-z0-9_.-]{1,12}", suffix in "[^{]*") {
            let body = format!("{prefix}{{{{ {name} }}}}{suffix}");
            let out = render(&body, |n| (n == name).then_some("[value]"));
            prop_assert_eq!(out, format!("{prefix}[value]{suffix}"));
            prop_assert_eq!(variables(&body), vec![name]);
        }
    }
}
