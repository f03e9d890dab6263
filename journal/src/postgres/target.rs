//! A PostgreSQL journal's address: a libpq-style URL, parsed once, shown without its password.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use tokio_postgres_rustls::MakeRustlsConnect;

use super::tls::SslMode;
use crate::error::{JournalError, Result};

/// Where a PostgreSQL journal is, with the credentials to reach it. `Display` and `Debug` never
/// show the password, so a target can be logged.
#[derive(Clone)]
pub struct PgTarget {
    pub(crate) config: tokio_postgres::Config,
    shown: String,
    ssl_mode: SslMode,
    root_cert: Option<PathBuf>,
    tls: MakeRustlsConnect,
}

/// A connection to the journal's server and its driver, which the caller must poll.
pub(crate) type Connected = (
    tokio_postgres::Client,
    tokio_postgres::Connection<
        tokio_postgres::Socket,
        <MakeRustlsConnect as tokio_postgres::tls::MakeTlsConnect<tokio_postgres::Socket>>::Stream,
    >,
);

impl PgTarget {
    /// Parses `postgres://[user[:password]@]host[:port][/dbname][?param=value…]`.
    pub fn parse(url: &str) -> Result<PgTarget> {
        let shown = redact(url);
        let bad = |detail: String| JournalError::BadLocation { location: shown.clone(), detail };
        // `sslmode` and `sslrootcert` as libpq reads them; tokio-postgres knows neither
        // `verify-*` nor `sslrootcert`, so they are taken out here and enforced by the connector.
        let (url, params) = take_params(url, &["sslmode", "sslrootcert"]);
        let system = params.get("sslrootcert").is_some_and(|r| r == "system");
        let ssl_mode = match params.get("sslmode") {
            // libpq: the system's CAs imply verify-full.
            None if system => SslMode::VerifyFull,
            None => SslMode::Prefer,
            Some(m) => SslMode::parse(m).ok_or_else(|| {
                bad(format!("sslmode={m} is not one of disable, prefer, require, verify-ca, verify-full"))
            })?,
        };
        if system && ssl_mode != SslMode::VerifyFull {
            // Anyone can buy a publicly trusted certificate for a name of their own: trusting the
            // system's CAs authenticates a server only together with its name (libpq refuses too).
            return Err(bad(format!(
                "sslrootcert=system trusts the public CAs, which authenticates nobody without the host name: use sslmode=verify-full (not {}), or sslrootcert=FILE with your server's CA",
                ssl_mode.as_str()
            )));
        }
        let root_cert = params.get("sslrootcert").filter(|r| *r != "system").map(PathBuf::from);
        let tls = super::tls::connector(ssl_mode, root_cert.as_deref(), system).map_err(&bad)?;
        let mut config =
            tokio_postgres::Config::from_str(&url).map_err(|e| bad(format!("not a PostgreSQL URL ({e})")))?;
        config.ssl_mode(ssl_mode.negotiation());
        if config.get_hosts().is_empty() {
            return Err(JournalError::BadLocation {
                location: shown,
                detail: "the URL names no host; write postgres://USER@HOST:PORT/DATABASE".into(),
            });
        }
        if config.get_user().is_none() {
            return Err(JournalError::BadLocation {
                location: shown,
                detail: "the URL names no user; write postgres://USER@HOST:PORT/DATABASE".into(),
            });
        }
        // A dead peer must surface as an error within seconds, not after TCP's minutes of
        // retransmissions: a daemon cut off from the database has leases to give up.
        config
            .application_name("infraflow")
            .connect_timeout(Duration::from_secs(5))
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(5))
            .keepalives_interval(Duration::from_secs(1))
            .keepalives_retries(3)
            .tcp_user_timeout(Duration::from_secs(8));
        Ok(PgTarget { config, shown, ssl_mode, root_cert, tls })
    }

    /// A new connection (with `options`, the server settings of the session), TLS as the URL
    /// asks. A TLS refusal is final (`Tls`): no retry makes a certificate trusted.
    pub(crate) async fn connect(&self, options: Option<&str>) -> Result<Connected> {
        let mut config = self.config.clone();
        if let Some(o) = options {
            config.options(o);
        }
        config.connect(self.tls.clone()).await.map_err(|e| {
            match super::tls::explain(self.ssl_mode, self.root_cert.as_ref(), &e) {
                Some(detail) => JournalError::Tls { location: self.shown.clone(), detail },
                None => unreachable(self, &e),
            }
        })
    }

    pub(crate) fn ssl_mode(&self) -> SslMode {
        self.ssl_mode
    }

    pub fn has_password(&self) -> bool {
        self.config.get_password().is_some()
    }

    pub fn set_password(&mut self, password: &str) {
        self.config.password(password);
    }

    pub fn host(&self) -> String {
        match self.config.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
            Some(tokio_postgres::config::Host::Unix(p)) => p.display().to_string(),
            None => String::new(),
        }
    }

    pub fn port(&self) -> u16 {
        self.config.get_ports().first().copied().unwrap_or(5432)
    }

    pub fn user(&self) -> &str {
        self.config.get_user().unwrap_or_default()
    }

    pub fn dbname(&self) -> &str {
        self.config.get_dbname().unwrap_or_else(|| self.user())
    }

    /// The password for this target in a `.pgpass` file's text (`host:port:db:user:password`,
    /// `*` matching anything, `\:` and `\\` escaped), as libpq looks it up.
    pub fn password_from_pgpass(&self, pgpass: &str) -> Option<String> {
        let want = [self.host(), self.port().to_string(), self.dbname().to_string(), self.user().to_string()];
        pgpass.lines().filter(|l| !l.trim_start().starts_with('#')).find_map(|line| {
            let fields = split_pgpass(line);
            if fields.len() != 5 {
                return None;
            }
            let matches = fields[..4].iter().zip(&want).all(|(f, w)| f == "*" || f == w);
            matches.then(|| fields[4].clone())
        })
    }
}

/// `url` without the query parameters named in `keys`, and their values (percent-decoded).
fn take_params(url: &str, keys: &[&str]) -> (String, std::collections::HashMap<String, String>) {
    let Some((base, query)) = url.split_once('?') else { return (url.to_string(), Default::default()) };
    let mut taken = std::collections::HashMap::new();
    let kept: Vec<&str> = query
        .split('&')
        .filter(|p| match p.split_once('=') {
            Some((k, v)) if keys.contains(&k) => {
                taken.insert(k.to_string(), percent_decode(v));
                false
            }
            _ => true,
        })
        .collect();
    let url = if kept.is_empty() { base.to_string() } else { format!("{base}?{}", kept.join("&")) };
    (url, taken)
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = (b[i] == b'%' && i + 2 < b.len())
            .then(|| s.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok()))
            .flatten();
        match hex {
            Some(v) => {
                out.push(v);
                i += 3;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn split_pgpass(line: &str) -> Vec<String> {
    let (mut fields, mut cur, mut chars) = (Vec::new(), String::new(), line.chars());
    while let Some(c) = chars.next() {
        match c {
            '\\' => cur.extend(chars.next()),
            ':' => fields.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    fields.push(cur);
    fields
}

/// The URL with any password replaced by `***`.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    let (authority, tail) = match rest.find(['/', '?']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:***@{host}"),
            None => format!("{userinfo}@{host}"),
        },
        None => authority.to_string(),
    };
    // A password may also come as a query parameter.
    let tail = tail
        .split('&')
        .map(|p| match p.split_once("password=") {
            Some((before, _)) => format!("{before}password=***"),
            None => p.to_string(),
        })
        .collect::<Vec<_>>()
        .join("&");
    format!("{scheme}://{authority}{tail}")
}

impl std::fmt::Display for PgTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

impl std::fmt::Debug for PgTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PgTarget({})", self.shown)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_is_never_shown() {
        let t = PgTarget::parse("postgres://app:s3cret@db.example:6543/jr?sslmode=disable").unwrap();
        assert_eq!(t.to_string(), "postgres://app:***@db.example:6543/jr?sslmode=disable");
        assert!(!format!("{t:?}").contains("s3cret"));
        let q = PgTarget::parse("postgres://app@db.example/jr?password=s3cret").unwrap();
        assert!(!q.to_string().contains("s3cret"), "{q}");
        assert!(q.has_password());
    }

    #[test]
    fn pgpass_lines_match_like_libpq() {
        let t = PgTarget::parse("postgres://app@db.example:6543/jr").unwrap();
        let file = "# comment\nother:5432:*:app:wrong\ndb.example:6543:*:app:pa\\:ss\n*:*:*:*:fallback\n";
        assert_eq!(t.password_from_pgpass(file).as_deref(), Some("pa:ss"));
        assert_eq!(t.password_from_pgpass("x:1:y:z:w\n"), None);
    }

    #[test]
    fn verifying_without_a_ca_of_ones_own_is_refused_as_libpq_does() {
        // SAFETY-7243D60 N6: verify-ca against the public CAs accepts anyone's certificate.
        for url in
            ["postgres://app@db.example/jr?sslmode=verify-ca", "postgres://app@db.example/jr?sslmode=verify-full"]
        {
            let err = PgTarget::parse(url).err().unwrap().to_string();
            assert!(err.contains("needs the CAs to trust") && err.contains("sslrootcert=FILE"), "{url}: {err}");
        }
        let weak = PgTarget::parse("postgres://app@db.example/jr?sslmode=verify-ca&sslrootcert=system");
        assert!(weak.err().unwrap().to_string().contains("use sslmode=verify-full (not verify-ca)"));
        let weak = PgTarget::parse("postgres://app@db.example/jr?sslmode=require&sslrootcert=system");
        assert!(weak.is_err(), "require with the system's CAs is as weak");
    }

    #[test]
    fn a_url_without_user_or_host_is_refused_with_what_to_write() {
        for url in ["postgres:///jr", "postgres://db.example/jr"] {
            let err = PgTarget::parse(url).err().unwrap().to_string();
            assert!(err.contains("postgres://USER@HOST:PORT/DATABASE"), "{url}: {err}");
        }
    }
}

/// The error of a failed connection, with its cause (refused, timed out, authentication).
pub(crate) fn unreachable(target: &PgTarget, e: &tokio_postgres::Error) -> JournalError {
    let detail = match std::error::Error::source(e) {
        Some(cause) => format!("{e}: {cause}"),
        None => e.to_string(),
    };
    JournalError::Unreachable { location: target.to_string(), detail }
}
