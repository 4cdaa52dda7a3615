//! Campaign templating: `{{name}}` / `{{ name }}` tokens replaced with per-recipient values.

/// A piece of a template body: literal text or the name inside a well-formed token.
enum Segment<'a> {
    Text(&'a str),
    Token(&'a str),
}

/// Replaces every token with `lookup(name)`, or "" when it returns `None`. Text that is not a
/// well-formed token (e.g. `{{`, `{{ }}`, `{{a b}}`) is left as is.
pub fn render(body: &str, lookup: impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(body.len());
    for segment in segments(body) {
        match segment {
            Segment::Text(text) => out.push_str(text),
            Segment::Token(name) => {
                if let Some(value) = lookup(name) {
                    out.push_str(&value);
                }
            }
        }
    }
    out
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

    fn vars(name: &str) -> Option<String> {
        match name {
            "name" => Some("Ada".to_owned()),
            "contact.city" => Some("Zürich".to_owned()),
            "x" => Some("1".to_owned()),
            "y" => Some("2".to_owned()),
            "a-b_c" => Some("ok".to_owned()),
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
        let out = render("{{  first_name  }}", |n| Some(format!("<{n}>")));
        assert_eq!(out, "<first_name>");
    }

    proptest! {
        #[test]
        fn text_without_open_braces_is_unchanged(body in any::<String>().prop_filter("no {{", |s| !s.contains("{{"))) {
            prop_assert_eq!(render(&body, |_| Some("X".to_owned())), body.clone());
            prop_assert!(variables(&body).is_empty());
        }

        #[test]
        fn token_round_trip(prefix in "[^{]*", name in "[A-Za-z0-9_.-]{1,12}", suffix in "[^{]*") {
            let body = format!("{prefix}{{{{ {name} }}}}{suffix}");
            let out = render(&body, |n| Some(format!("[{n}]")));
            prop_assert_eq!(out, format!("{prefix}[{name}]{suffix}"));
            prop_assert_eq!(variables(&body), vec![name]);
        }
    }
}
