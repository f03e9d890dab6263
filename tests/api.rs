//! The daemon's API for tenants, black-box: the real daemon over loopback TLS with a tenants
//! file, on moto; two tenants that cannot see or act on each other's workflows and clusters,
//! tokens of every wrong kind refused, a JWKS read from a URL, malformed bodies answered with
//! problem documents, and no secret in the journal or the log. The page behind its sign-in is
//! `api_page.rs`.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::api::{AUDIENCE, ISSUER, Issuer, JwksServer, claims, now};
use support::api_daemon::*;
use support::*;

#[test]
fn two_tenants_see_and_act_only_on_their_own_workflows_and_clusters() {
    let a = api();
    let sub = a.client.post(
        "/v1/workflows",
        TOKEN_A,
        &json!({"workflow": "provision-infra", "input": provision("a-abcde"), "id": "a-prov"}),
    );
    assert_eq!(sub.status, 201, "{sub:?}");
    let done = rested(&a, TOKEN_A, "a-prov");
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(done["submitter"], "a/token", "the journal records who asked: {done}");
    // The journal path shows the same submitter.
    assert_eq!(a.e.s.status("a-prov")["submitter"], "a/token");

    // B: A's workflow is a 404 whatever it asks, and A's cluster is not B's to name.
    for (method, path) in [
        ("GET", "/v1/workflows/a-prov"),
        ("GET", "/v1/workflows/a-prov/history"),
        ("GET", "/v1/workflows/a-prov/wait?timeout=1s"),
        ("POST", "/v1/workflows/a-prov/cancel"),
        ("POST", "/v1/workflows/a-prov/retry"),
        ("GET", "/v1/clusters/a-abcde/check?region=us-east-1"),
    ] {
        let r = a.client.raw(method, path, Some(TOKEN_B), b"");
        assert_eq!(r.status, 404, "{method} {path}: {r:?}");
        assert_eq!(r.body["status"], 404, "a problem document: {r:?}");
    }
    let list = a.client.get("/v1/workflows", TOKEN_B);
    assert_eq!(list.status, 200);
    assert_eq!(list.body, json!([]), "B lists none of A's");
    let mine = a.client.get("/v1/workflows", TOKEN_A);
    assert_eq!(mine.body.as_array().map(Vec::len), Some(1), "{}", mine.body);

    let teardown = json!({"infraID": "a-abcde", "region": "us-east-1"});
    let r = a.client.post("/v1/workflows", TOKEN_B, &json!({"workflow": "teardown", "input": teardown}));
    assert_eq!(r.status, 403, "{r:?}");
    assert!(r.body["detail"].as_str().unwrap().contains("may not name infraID a-abcde"), "{r:?}");
    let r = a.client.post("/v1/teardown-plan", TOKEN_B, &teardown);
    assert_eq!(r.status, 403, "{r:?}");
    let r =
        a.client.post("/v1/workflows", TOKEN_B, &json!({"workflow": "provision-infra", "input": provision("a-abcde")}));
    assert_eq!(r.status, 403, "{r:?}");
    let r = a.client.post("/v1/workflows", TOKEN_B,
        &json!({"workflow": "provision-infra", "input": {"name": "b", "infraID": "b-abcde", "region": "us-west-2", "baseDomain": "example.com"}}));
    assert_eq!(r.status, 403, "{r:?}");
    assert!(r.body["detail"].as_str().unwrap().contains("region \"us-west-2\""), "{r:?}");
    // A role B's tenant does not list.
    let mut theirs = provision("b-abcde");
    theirs["roleARN"] = json!("arn:aws:iam::123456789012:role/a-operator");
    let r = a.client.post("/v1/workflows", TOKEN_B, &json!({"workflow": "provision-infra", "input": theirs}));
    assert_eq!(r.status, 403, "{r:?}");
    assert!(r.body["detail"].as_str().unwrap().contains("may not act through role"), "{r:?}");
    // D names no prefix or region: the cluster's first workflow, A's, keeps it off A's cluster,
    // whether it names a role or not (the journal's cluster keys differ; the infraID does not).
    for route in ["/v1/workflows", "/v1/teardown-plan"] {
        let body = if route == "/v1/teardown-plan" {
            teardown.clone()
        } else {
            json!({"workflow": "teardown", "input": teardown})
        };
        let r = a.client.post(route, TOKEN_D, &body);
        assert_eq!(r.status, 403, "{route}: {r:?}");
        assert!(r.body["detail"].as_str().unwrap().contains("cluster a-abcde belongs to another tenant"), "{r:?}");
    }
    // Nothing on the daemon's host is a tenant's to name, and a canary names no cluster.
    for (input, field) in [
        (json!({"steps": 1, "effectsFile": "/etc/passwd"}), "input.effectsFile"),
        (json!({"steps": 1, "cluster": "a-abcde"}), "input.cluster"),
    ] {
        let r = a.client.post("/v1/workflows", TOKEN_D, &json!({"workflow": "canary", "input": input}));
        assert_eq!((r.status, r.body["field"].as_str()), (400, Some(field)), "{r:?}");
    }
    let pool = json!({"infraID": "d-abcde", "nodePool": "np", "replicas": 1, "instanceType": "m6i.xlarge",
        "imageID": "ami-12c6146b", "subnetID": "subnet-0123abcd", "securityGroupIDs": ["sg-0123abcd"],
        "userDataFile": "/etc/shadow"});
    let r = a.client.post("/v1/workflows", TOKEN_D, &json!({"workflow": "scale-nodepool", "input": pool}));
    assert_eq!((r.status, r.body["field"].as_str()), (400, Some("input.userDataFile")), "{r:?}");
    // A reader reads its own (none) and may not submit.
    let r = a.client.post("/v1/workflows", TOKEN_READER, &json!({"workflow": "canary", "input": {"steps": 1}}));
    assert_eq!(r.status, 403, "{r:?}");

    // A's own check, then A's teardown: its cluster is gone, B's refusals changed nothing.
    let check = a.client.get("/v1/clusters/a-abcde/check?region=us-east-1", TOKEN_A);
    assert_eq!(check.status, 200, "{check:?}");
    let r =
        a.client.post("/v1/workflows", TOKEN_A, &json!({"workflow": "teardown", "input": teardown, "id": "a-down"}));
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(rested(&a, TOKEN_A, "a-down")["state"], "completed");

    // The API's submissions leave the daemon's hold on its journal whole: another process's
    // read (sqlite3) and an operator's submit through the journal path still meet the daemon.
    let r = a.client.post("/v1/workflows", TOKEN_D, &json!({"workflow": "canary", "input": {"steps": 1}, "id": "d-1"}));
    assert_eq!(r.status, 201, "{r:?}");
    let read =
        std::process::Command::new("sqlite3").arg(a.e.s.db()).arg("select count(*) from workflows").output().unwrap();
    assert!(read.status.success(), "{read:?}");
    let wal = format!("{}-wal", a.e.s.db().display());
    assert!(std::path::Path::new(&wal).exists(), "the daemon's WAL was taken from under it");
    let op = a.e.input("op.json", json!({"steps": 1}));
    let out = a.e.s.cli(&["submit", "canary", "--input", &op, "--id", "op-1"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let st = a.e.s.wait_for_state("op-1", &["completed"], Duration::from_secs(30));
    assert_eq!(st["state"], "completed", "the daemon runs the operator's workflow: {st}");

    // Secrets: no token in the journal or the daemon's log; every request audited.
    let log = a.e.s.daemon_log();
    let journal = std::fs::read(a.e.s.db()).unwrap();
    for secret in [TOKEN_A, TOKEN_B, TOKEN_READER, TOKEN_D] {
        assert!(!log.contains(secret), "a token in the log");
        assert!(!String::from_utf8_lossy(&journal).contains(secret), "a token in the journal");
    }
    assert!(log.matches("api request").count() >= 15, "{log}");
    assert!(log.contains("refused") && log.contains("accepted"), "{log}");
}

#[test]
fn the_cli_as_a_client_prints_and_exits_as_on_the_journal_path() {
    let a = api();
    let input = a.e.input("c.json", json!({"steps": 2}));
    let sub = a.remote(TOKEN_A, &["submit", "canary", "--input", &input, "--id", "a-canary"]);
    assert_eq!(sub.status.code(), Some(0), "{}", stderr(&sub));
    assert_eq!(String::from_utf8_lossy(&sub.stdout).trim(), "a-canary");
    let waited = a.remote(TOKEN_A, &["wait", "a-canary", "--timeout", "60s"]);
    assert_eq!(waited.status.code(), Some(0), "{}", stderr(&waited));
    let remote = a.remote(TOKEN_A, &["status", "a-canary", "--json"]);
    assert_eq!(remote.status.code(), Some(0), "{}", stderr(&remote));
    let local = a.e.s.cli(&["status", "a-canary", "--json"]);
    let (r, l): (Value, Value) =
        (serde_json::from_slice(&remote.stdout).unwrap(), serde_json::from_slice(&local.stdout).unwrap());
    assert_eq!(r, l, "the same status --json");
    // Another tenant's, a bad input, a refused token: the journal path's exit codes.
    let theirs = a.remote(TOKEN_B, &["status", "a-canary", "--json"]);
    assert_eq!(theirs.status.code(), Some(2), "{}", stderr(&theirs));
    let bad = a.e.input("bad.json", json!({"steps": -1}));
    let refused = a.remote(TOKEN_A, &["submit", "canary", "--input", &bad]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert_eq!(stderr(&refused).trim().lines().count(), 1, "{}", stderr(&refused));
    let wrong = a.remote("nobody", &["status"]);
    assert_eq!(wrong.status.code(), Some(2), "{}", stderr(&wrong));
    let paused_or_failed = a.remote(TOKEN_A, &["retry", "a-canary"]);
    assert_eq!(
        paused_or_failed.status.code(),
        Some(2),
        "a completed workflow is not retried: {}",
        stderr(&paused_or_failed)
    );
}

/// The daemon, never the input, sets the ExternalId of a tenant's role and the SourceIdentity of
/// its session: an input naming either is refused (an ExternalId would be journaled), and the
/// AssumeRole the proxy sees carries the tenants file's ExternalId and the caller's name.
#[test]
fn a_tenants_role_is_assumed_with_the_external_id_the_tenants_file_gives() {
    let a = api();
    support::moto::Clients::as_role(&a.e.moto.endpoint(), ROLE_B).create_public_zone("example.com");
    let mut input = provision("b-abcde");
    input["roleARN"] = json!(ROLE_B);
    input["externalID"] = json!("forged-by-the-input");
    let r = a.client.post("/v1/workflows", TOKEN_B, &json!({"workflow": "provision-infra", "input": input}));
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(r.body["field"], "input.externalID", "{r:?}");
    input.as_object_mut().unwrap().remove("externalID");
    input["sourceIdentity"] = json!("b,someone-else");
    let r = a.client.post("/v1/workflows", TOKEN_B, &json!({"workflow": "provision-infra", "input": input}));
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(r.body["field"], "input.sourceIdentity", "{r:?}");
    input.as_object_mut().unwrap().remove("sourceIdentity");
    let r = a.client.post(
        "/v1/workflows",
        TOKEN_B,
        &json!({"workflow": "provision-infra", "input": input, "id": "b-prov"}),
    );
    assert_eq!(r.status, 201, "{r:?}");
    let done = rested(&a, TOKEN_B, "b-prov");
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(done["account"], "222222222222", "{done}");
    // The same submission again by another subject of the tenant: the same workflow, not a
    // conflict over the session name the daemon added.
    let bob = a.issuer.token("bob");
    let again =
        a.client.post("/v1/workflows", &bob, &json!({"workflow": "provision-infra", "input": input, "id": "b-prov"}));
    assert_eq!((again.status, &again.body["created"]), (200, &json!(false)), "{again:?}");
    // The operator's own drift check reads through the role in nobody's name: not the
    // submitter's, who did not ask for it.
    let asked_before = a.e.proxy.assume_role_requests().len();
    let checked = a.e.cli(&["check", "--infra-id", "b-abcde", "--region", "us-east-1", "--json"]);
    assert!(checked.status.code().is_some_and(|c| c <= 1), "{}", stderr(&checked));
    let by_check: Vec<String> = a.e.proxy.assume_role_requests().split_off(asked_before);
    assert!(!by_check.is_empty(), "the check assumed no role");
    assert!(by_check.iter().all(|b| !b.contains("SourceIdentity")), "{by_check:?}");
    // Tenant d, acting as the daemon itself (no role), may not tear down B's cluster made under
    // B's role: the journal's cluster keys differ (`b-abcde@222222222222` and `b-abcde`), the
    // infraID does not (the review's first finding).
    let theirs = json!({"infraID": "b-abcde", "region": "us-east-1"});
    let r = a.client.post("/v1/workflows", TOKEN_D, &json!({"workflow": "teardown", "input": theirs}));
    assert_eq!(r.status, 403, "{r:?}");
    let r = a.client.post("/v1/teardown-plan", TOKEN_D, &theirs);
    assert_eq!(r.status, 403, "{r:?}");
    // The daemon's sessions (before the operator's check): the tenants file's ExternalId, the
    // caller's name.
    let mut assumed = a.e.proxy.assume_role_requests();
    assumed.truncate(asked_before);
    assert!(!assumed.is_empty(), "no AssumeRole went through the proxy");
    for body in &assumed {
        assert!(body.contains(&format!("ExternalId={EXTERNAL_ID_B}")), "{body}");
        // CloudTrail names who asked: tenant b, by its bearer token.
        assert!(body.contains("SourceIdentity=b%2Ctoken"), "{body}");
    }
    let journal = String::from_utf8_lossy(&std::fs::read(a.e.s.db()).unwrap()).to_string();
    assert!(!journal.contains(EXTERNAL_ID_B), "the external id is in the journal");
    assert!(!a.e.s.daemon_log().contains(EXTERNAL_ID_B), "the external id is in the log");
}

#[test]
fn every_wrong_token_is_a_401_and_journals_nothing() {
    let mut a = api();
    let body = json!({"workflow": "canary", "input": {"steps": 1}});
    let signed = |a: &Api, header: Value, c: Value| a.issuer.sign(header, c);
    let h = |a: &Api| json!({"alg": "ES256", "kid": a.issuer.kid});
    let good = a.issuer.token("alice");
    let mut tampered: Vec<String> = good.split('.').map(str::to_string).collect();
    tampered[1] = base64_url(&claims("root", now() - 10, now() + 600).to_string());
    let none = format!(
        "{}.{}.",
        base64_url(r#"{"alg":"none"}"#),
        base64_url(&claims("alice", now() - 10, now() + 600).to_string())
    );
    let mut wrong_issuer = claims("alice", now() - 10, now() + 600);
    wrong_issuer["iss"] = json!("https://elsewhere");
    let mut wrong_audience = claims("alice", now() - 10, now() + 600);
    wrong_audience["aud"] = json!("someone-else");
    let stranger = Issuer::new(a.e.s.file("stranger.json"));
    let cases: Vec<(&str, Option<String>)> = vec![
        ("no header", None),
        ("a wrong token", Some("not-a-token-of-anyone".into())),
        ("expired", Some(signed(&a, h(&a), claims("alice", now() - 7200, now() - 3600)))),
        ("not yet valid", Some(signed(&a, h(&a), claims("alice", now() + 3600, now() + 7200)))),
        ("wrong issuer", Some(signed(&a, h(&a), wrong_issuer))),
        ("wrong audience", Some(signed(&a, h(&a), wrong_audience))),
        (
            "unknown key",
            Some(stranger.sign(json!({"alg": "ES256", "kid": "k1"}), claims("alice", now() - 10, now() + 600))),
        ),
        ("alg none", Some(none)),
        ("tampered payload", Some(tampered.join("."))),
        ("a subject of no tenant", Some(a.issuer.token("mallory"))),
    ];
    for (what, token) in &cases {
        let r = a.client.raw("POST", "/v1/workflows", token.as_deref(), body.to_string().as_bytes());
        assert_eq!(r.status, 401, "{what}: {r:?}");
        assert!(r.headers.to_ascii_lowercase().contains("www-authenticate: bearer"), "{what}: {}", r.headers);
    }
    let st = a.e.s.cli(&["status", "--json"]);
    assert_eq!(serde_json::from_slice::<Value>(&st.stdout).unwrap(), json!([]), "nothing journaled");
    // The issuer's own token works; after a rotation, the new key's token does too.
    let r = a.client.post("/v1/workflows", &good, &body);
    assert_eq!(r.status, 201, "{r:?}");
    a.issuer.rotate();
    std::thread::sleep(Duration::from_millis(1100));
    let r = a.client.get("/v1/workflows", &a.issuer.token("alice"));
    assert_eq!(r.status, 200, "a rotated JWKS is honoured: {r:?}");
    assert_eq!(r.body.as_array().map(Vec::len), Some(1));
}

#[test]
fn malformed_bodies_are_400_problems_that_journal_nothing_and_the_daemon_serves_on() {
    let a = api();
    let cases: Vec<(&str, Vec<u8>, u16, Option<&str>)> = vec![
        ("truncated JSON", br#"{"workflow": "canary", "input": {"st"#.to_vec(), 400, None),
        ("a wrong type", json!({"workflow": 5, "input": {}}).to_string().into_bytes(), 400, Some("workflow")),
        ("an unknown field", json!({"workflow": "canary", "input": {}, "priority": 1}).to_string().into_bytes(), 400, None),
        ("an unknown workflow", json!({"workflow": "reboot", "input": {}}).to_string().into_bytes(), 400, Some("workflow")),
        ("an invalid infraID", json!({"workflow": "provision-infra", "input": {"name": "b", "infraID": "b_NOT valid", "region": "us-east-1", "baseDomain": "example.com"}}).to_string().into_bytes(), 400, Some("input")),
        ("ten megabytes", vec![b' '; 10 << 20], 413, None),
    ];
    for (what, body, status, field) in cases {
        let r = a.client.raw("POST", "/v1/workflows", Some(TOKEN_B), &body);
        assert_eq!(r.status, status, "{what}: {r:?}");
        assert!(r.headers.contains("application/problem+json"), "{what}: {}", r.headers);
        assert_eq!(r.body["status"], status, "{what}: {r:?}");
        if let Some(f) = field {
            assert_eq!(r.body["field"], f, "{what}: {r:?}");
        }
        assert!(!r.body["detail"].as_str().unwrap_or_default().is_empty(), "{what}: {r:?}");
    }
    let st = a.e.s.cli(&["status", "--json"]);
    assert_eq!(serde_json::from_slice::<Value>(&st.stdout).unwrap(), json!([]), "nothing journaled");
    let r = a.client.get("/v1/workflows", TOKEN_B);
    assert_eq!(r.status, 200, "the daemon serves on: {r:?}");
    let doc = a.client.raw("GET", "/v1/openapi.json", None, b"");
    assert_eq!(doc.body["openapi"], "3.1.0", "{doc:?}");
}

#[test]
fn a_tenant_at_its_unfinished_limit_is_told_to_wait_and_a_client_that_keeps_failing_is_slowed() {
    let a = api();
    // Two canaries that wait (a long step) hold tenant b's two unfinished places.
    for id in ["b-1", "b-2"] {
        let r = a.client.post(
            "/v1/workflows",
            TOKEN_B,
            &json!({"workflow": "canary", "input": {"steps": 1, "stepMillis": 30000}, "id": id}),
        );
        assert_eq!(r.status, 201, "{r:?}");
    }
    let r = a.client.post("/v1/workflows", TOKEN_B, &json!({"workflow": "canary", "input": {"steps": 1}, "id": "b-3"}));
    assert_eq!(r.status, 429, "{r:?}");
    assert!(r.headers.to_ascii_lowercase().contains("retry-after"), "{}", r.headers);
    for id in ["b-1", "b-2"] {
        assert_eq!(a.client.post(&format!("/v1/workflows/{id}/cancel"), TOKEN_B, &json!({})).status, 202);
    }
    // Twenty failures from one client, then 429 even for a good token.
    for _ in 0..20 {
        assert_eq!(a.client.get("/v1/workflows", "wrong").status, 401);
    }
    let r = a.client.get("/v1/workflows", TOKEN_A);
    assert_eq!(r.status, 429, "{r:?}");
}

#[test]
fn an_api_off_loopback_without_tls_is_refused_in_one_line() {
    let s = Scratch::new();
    let tenants = s.write_json("tenants.json", &tenants());
    let out = s.cli(&["daemon", "--api-listen", "0.0.0.0:0", "--tenants", tenants.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("is not a loopback address: give --tls-cert and --tls-key") && err.trim().lines().count() == 1,
        "{err}"
    );
    std::fs::write(&tenants, r#"{"tenants": [{"name": "a", "permission": "admin"}]}"#).unwrap();
    let out = s.cli(&["daemon", "--api-listen", "127.0.0.1:0", "--tenants", tenants.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("tenants[0].permission"), "{}", stderr(&out));
}

fn base64_url(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s)
}

/// The issuer's keys from its jwks_uri: fetched at start, again when a token names a key id
/// the daemon lacks (a rotation) but at most once in five seconds, however many such tokens
/// come; an unreachable URL at start is the operator's one-line error.
#[test]
fn a_jwks_url_is_fetched_again_on_a_rotation_and_not_for_every_unknown_key() {
    let mut server = None;
    let mut a = api_with_jwks(|issuer| {
        let s = JwksServer::serve(issuer.jwks.clone());
        let url = s.url.clone();
        server = Some(s);
        url
    });
    let server = server.unwrap();
    assert_eq!(server.fetched(), 1, "fetched once at start");
    let r = a.client.get("/v1/workflows", &a.issuer.token("alice"));
    assert_eq!(r.status, 200, "{r:?}");
    a.issuer.rotate();
    // A stream of tokens under the new key id within the five seconds: refused, one fetch.
    for _ in 0..5 {
        let r = a.client.get("/v1/workflows", &a.issuer.token("alice"));
        assert!(r.status == 401 || r.status == 200, "{r:?}");
    }
    assert!(server.fetched() <= 2, "{} fetches for one rotation", server.fetched());
    std::thread::sleep(Duration::from_millis(5100));
    let r = a.client.get("/v1/workflows", &a.issuer.token("alice"));
    assert_eq!(r.status, 200, "the rotated key, fetched from the URL: {r:?}");
    let before = server.fetched();
    let r = a.client.get("/v1/workflows", &a.issuer.token("alice"));
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(server.fetched(), before, "a known key fetches nothing");
    // An issuer answering megabytes that are not a JWKS: the daemon does not start, and its one
    // line does not carry them.
    let junk = a.e.s.file("junk.json");
    std::fs::write(&junk, "<html>".repeat(200_000)).unwrap();
    let junk_server = JwksServer::serve(junk);
    let tenants_file = a.e.s.write_json("tenants3.json", &tenants());
    let out = a.e.s.cli(&[
        "daemon",
        "--api-listen",
        "127.0.0.1:0",
        "--tenants",
        tenants_file.to_str().unwrap(),
        "--oidc-issuer",
        ISSUER,
        "--oidc-audience",
        AUDIENCE,
        "--oidc-jwks",
        &junk_server.url,
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("not a JWKS") && stderr(&out).len() < 400, "{}", stderr(&out));
    for bad in ["ftp://127.0.0.1/jwks.json", "http://10.1.2.3/jwks.json", ""] {
        let out = a.e.s.cli(&[
            "daemon",
            "--api-listen",
            "127.0.0.1:0",
            "--tenants",
            tenants_file.to_str().unwrap(),
            "--oidc-issuer",
            ISSUER,
            "--oidc-audience",
            AUDIENCE,
            "--oidc-jwks",
            bad,
        ]);
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", stderr(&out));
        assert_eq!(stderr(&out).trim().lines().count(), 1, "{bad}: {}", stderr(&out));
        assert!(!stderr(&out).contains("cannot read JWKS"), "{bad} read as a file: {}", stderr(&out));
    }
    // A URL nothing answers at: the daemon does not start, and says why in one line.
    let dead = format!("http://127.0.0.1:{}/jwks.json", free_port());
    let tenants = a.e.s.write_json("tenants2.json", &tenants());
    let out = a.e.s.cli(&[
        "daemon",
        "--api-listen",
        "127.0.0.1:0",
        "--tenants",
        tenants.to_str().unwrap(),
        "--oidc-issuer",
        ISSUER,
        "--oidc-audience",
        AUDIENCE,
        "--oidc-jwks",
        &dead,
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("JWKS") && stderr(&out).contains(&dead), "{}", stderr(&out));
    assert_eq!(stderr(&out).trim().lines().count(), 1, "{}", stderr(&out));
}
