//! A PostgreSQL journal over TLS, as libpq URLs say it (`sslmode`, `sslrootcert`), against a real
//! server whose pg_hba refuses every connection without TLS: a workflow runs over
//! `verify-full`; a certificate from another CA, a server without TLS under `require`, and a
//! mode libpq does not know each end with one line naming the problem, and nothing journaled.

mod support;

use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::json;
use support::postgres::{self, Server};
use support::*;

fn tls_server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(|| postgres::start_tls_on("127.0.0.1", None, &[]))
}

/// `infraflow --db URL ARGS`, the password in PGPASSWORD.
fn cli(pg: &Server, url: &str, args: &[&str]) -> Output {
    Command::new(infraflow()).arg("--db").arg(url).args(args).env("PGPASSWORD", &pg.password).output().unwrap()
}

fn canary(s: &Scratch) -> String {
    s.write_json("c.json", &json!({"steps": 3})).to_str().unwrap().to_string()
}

#[test]
fn a_journal_over_verify_full_tls_runs_a_workflow_and_plain_tcp_is_refused() {
    let (pg, s) = (tls_server(), Scratch::new());
    let db = pg.fresh_database();
    let url = format!("{}?sslmode=verify-full&sslrootcert={}", pg.url_without_password(&db), pg.ca_cert().display());
    let run = cli(pg, &url, &["run", "canary", "--input", &canary(&s), "--id", "tls"]);
    assert!(run.status.success(), "{}", stderr(&run));
    let st = cli(pg, &url, &["status", "tls", "--json"]);
    let st: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    assert_eq!(st["state"], "completed");
    // The same server without TLS: pg_hba says no, so the run above did speak TLS.
    let plain = format!("{}?sslmode=disable", pg.url_without_password(&db));
    let out = cli(pg, &plain, &["status"]);
    assert_ne!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(stderr(&out).contains("no encryption") || stderr(&out).contains("pg_hba"), "{}", stderr(&out));
}

#[test]
fn a_server_certificate_from_another_ca_is_refused_with_one_line_naming_the_ca_file() {
    let (pg, s) = (tls_server(), Scratch::new());
    let db = pg.fresh_database();
    let other = s.file("other-ca.crt");
    let key = s.file("other-ca.key");
    let made = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=another CA"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&other)
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", stderr(&made));
    let url = format!("{}?sslmode=verify-full&sslrootcert={}", pg.url_without_password(&db), other.display());
    let out = cli(pg, &url, &["run", "canary", "--input", &canary(&s), "--id", "x"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("not signed by the CA in sslrootcert=") && err.lines().count() == 1, "{err}");
    assert!(err.contains("***") || !err.contains(&pg.password), "no password in messages: {err}");
}

#[test]
fn sslmode_require_against_a_server_without_tls_fails_naming_the_mode() {
    let (pg, s) = (postgres::server(), Scratch::new());
    let db = pg.fresh_database();
    let url = format!("{}?sslmode=require", pg.url_without_password(&db));
    let out = cli(pg, &url, &["run", "canary", "--input", &canary(&s), "--id", "x"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("does not offer TLS, and sslmode=require requires it") && err.lines().count() == 1, "{err}");
}

#[test]
fn an_sslmode_libpq_does_not_know_is_refused_before_connecting() {
    let pg = postgres::server();
    let url = format!("{}?sslmode=bogus", pg.url_without_password("postgres"));
    let out = cli(pg, &url, &["status"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("sslmode=bogus is not one of disable, prefer, require, verify-ca, verify-full"));
    let missing =
        format!("{}?sslmode=verify-full&sslrootcert=/nonexistent/ca.crt", pg.url_without_password("postgres"));
    let out = cli(pg, &missing, &["status"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("sslrootcert=/nonexistent/ca.crt"), "{}", stderr(&out));
}

/// `infraflow --db URL ARGS` with a home of its own and these libpq variables.
fn cli_env(pg: &Server, url: &str, home: &std::path::Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut c = Command::new(infraflow());
    c.arg("--db").arg(url).args(args).env("PGPASSWORD", &pg.password).env("HOME", home);
    c.env_remove("PGSSLMODE").env_remove("PGSSLROOTCERT");
    c.envs(env.iter().copied()).output().unwrap()
}

/// SAFETY-7243D60 N6: settings libpq users rely on are honoured as libpq does, and none trusts
/// the public CAs where a CA of one's own is meant.
#[test]
fn tls_settings_come_from_pgsslmode_pgsslrootcert_and_root_crt_and_verify_ca_never_trusts_public_cas() {
    let (pg, s) = (tls_server(), Scratch::new());
    let db = pg.fresh_database();
    let home = tempfile::tempdir().unwrap();
    let bare = pg.url_without_password(&db);
    let ca = pg.ca_cert().display().to_string();

    // verify-ca with no CA file anywhere: refused before connecting, naming what to give.
    let out = cli_env(pg, &format!("{bare}?sslmode=verify-ca"), home.path(), &[], &["status"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("needs the CAs to trust") && stderr(&out).lines().count() == 1, "{}", stderr(&out));
    let out = cli_env(pg, &format!("{bare}?sslmode=verify-ca&sslrootcert=system"), home.path(), &[], &["status"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("sslmode=verify-full"), "{}", stderr(&out));

    // PGSSLMODE and PGSSLROOTCERT, as libpq reads them, when the URL says nothing.
    let env = [("PGSSLMODE", "verify-full"), ("PGSSLROOTCERT", ca.as_str())];
    let run = cli_env(pg, &bare, home.path(), &env, &["run", "canary", "--input", &canary(&s), "--id", "env"]);
    assert!(run.status.success(), "{}", stderr(&run));
    let wrong = [("PGSSLMODE", "verify-full"), ("PGSSLROOTCERT", "/nonexistent/ca.crt")];
    let out = cli_env(pg, &bare, home.path(), &wrong, &["status"]);
    assert_eq!(out.status.code(), Some(2), "PGSSLROOTCERT is read: {}", stderr(&out));
    let out = cli_env(pg, &format!("{bare}?sslmode=disable"), home.path(), &wrong, &["status"]);
    assert_ne!(out.status.code(), Some(0), "the URL's own sslmode wins; pg_hba refuses plain TCP");

    // libpq's default CA file.
    std::fs::create_dir(home.path().join(".postgresql")).unwrap();
    std::fs::copy(pg.ca_cert(), home.path().join(".postgresql/root.crt")).unwrap();
    let out = cli_env(pg, &format!("{bare}?sslmode=verify-full"), home.path(), &[], &["status", "env", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
}
