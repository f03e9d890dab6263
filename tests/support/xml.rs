//! The pieces of AWS's XML answers the test proxy reads and rewrites: the text between two tags,
//! and each top-level element of a set (EC2's `item`s, ELB's `member`s).

/// The text between the first `open` and the `close` after it.
pub fn between<'a>(text: &'a str, open: &str, close: &str) -> Option<&'a str> {
    let start = text.find(open)? + open.len();
    let end = text[start..].find(close)? + start;
    Some(&text[start..end])
}

/// Rewrites each top-level `<elem>` of `<set>` with `f` (None drops it): `item` in EC2's
/// answers, `member` in ELB's.
pub fn rewrite_elements(xml: &str, set: &str, elem: &str, f: impl Fn(&str) -> Option<String>) -> String {
    let (open_item, close_item) = (format!("<{elem}>"), format!("</{elem}>"));
    let open = format!("<{set}>");
    let Some(start) = xml.find(&open).map(|i| i + open.len()) else { return xml.to_string() };
    let Some(end) = xml[start..].find(&format!("</{set}>")).map(|i| i + start) else { return xml.to_string() };
    let inner = &xml[start..end];
    let mut kept = String::new();
    let mut depth = 0usize;
    let mut item_start = 0usize;
    let mut i = 0usize;
    while i < inner.len() {
        let rest = &inner[i..];
        if rest.starts_with(&open_item) {
            if depth == 0 {
                item_start = i;
            }
            depth += 1;
            i += open_item.len();
        } else if rest.starts_with(&close_item) {
            depth = depth.saturating_sub(1);
            i += close_item.len();
            if depth == 0
                && let Some(item) = f(&inner[item_start..i])
            {
                kept.push_str(&item);
            }
        } else {
            if depth == 0 {
                kept.push_str(&rest[..rest.chars().next().map_or(1, char::len_utf8)]);
            }
            i += rest.chars().next().map_or(1, char::len_utf8);
        }
    }
    format!("{}{kept}{}", &xml[..start], &xml[end..])
}
