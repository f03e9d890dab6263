//! How Route53 writes a zone's id and a record's name, and how infraflow compares them.

/// A zone id without Route53's `/hostedzone/` prefix.
pub(super) fn bare(zone_id: &str) -> String {
    zone_id.trim_start_matches("/hostedzone/").to_string()
}

/// A name as Route53 returns it: fully qualified, with its trailing dot.
pub(super) fn fqdn(name: &str) -> String {
    if name.ends_with('.') { name.to_string() } else { format!("{name}.") }
}
