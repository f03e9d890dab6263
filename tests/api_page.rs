//! The status page on the API's listener, black-box: a tenant's token exchanged for a session
//! cookie a script cannot read and another site cannot send; the tenant sees and acts on its own
//! workflows only; sessions end on sign-out and for good when their token does.

mod support;

use serde_json::json;
use support::api_daemon::*;

/// The session cookie a sign-in set (`infraflow_session=…`), from its `Set-Cookie`.
fn session_cookie(r: &support::api::Reply) -> String {
    let line = r.headers.lines().find(|l| l.to_ascii_lowercase().starts_with("set-cookie:")).expect("a Set-Cookie");
    line.split_once(':').unwrap().1.trim().split(';').next().unwrap().to_string()
}

/// The status page on the API's listener sits behind a sign-in: a token exchanged for a cookie
/// a script cannot read and another site cannot send; the tenant sees and acts on its own
/// workflows only, and sees the submitter of each; signing out ends the session.
#[test]
fn the_page_on_the_api_shows_a_signed_in_tenant_its_own_workflows_only() {
    let a = api();
    for (token, id) in [(TOKEN_A, "a-canary"), (TOKEN_B, "b-canary")] {
        let r = a.client.post("/v1/workflows", token, &json!({"workflow": "canary", "input": {"steps": 1}, "id": id}));
        assert_eq!(r.status, 201, "{r:?}");
        rested(&a, token, id);
    }
    let origin = format!("https://localhost:{}", a.port);
    let form = "application/x-www-form-urlencoded";
    let sign_in = |token: &str| {
        let body = format!("token={}", token.replace('-', "%2D"));
        a.client.request("POST", "/login", &[("Origin", &origin)], form, body.as_bytes())
    };
    // Not signed in: the page sends the browser to sign in; nothing of the journal shows.
    let r = a.client.request("GET", "/", &[], "text/html", b"");
    assert_eq!(r.status, 303, "{r:?}");
    assert!(r.headers.contains("location: /login") || r.headers.contains("Location: /login"), "{}", r.headers);
    let r = sign_in("no-such-token");
    assert_eq!(r.status, 401, "{r:?}");
    assert!(!r.headers.to_ascii_lowercase().contains("set-cookie"), "{}", r.headers);
    // From another site, even the right token signs no one in.
    let r = a.client.request(
        "POST",
        "/login",
        &[("Origin", "https://evil.example")],
        form,
        format!("token={TOKEN_A}").as_bytes(),
    );
    assert_eq!(r.status, 403, "{r:?}");
    let r = sign_in(TOKEN_A);
    assert_eq!(r.status, 303, "{r:?}");
    let set = r.headers.to_ascii_lowercase();
    for attr in ["httponly", "secure", "samesite=strict"] {
        assert!(set.contains(attr), "the cookie lacks {attr}: {}", r.headers);
    }
    let cookie = session_cookie(&r);
    let get = |path: &str, cookie: &str| a.client.request("GET", path, &[("Cookie", cookie)], "text/html", b"");
    let list = get("/", &cookie);
    assert_eq!(list.status, 200, "{list:?}");
    let text = list.body.as_str().unwrap_or_default().to_string();
    // minijinja escapes the slash of `a/token`.
    assert!(text.contains("a-canary") && text.contains("signed in as <span class=\"who\">a&#x2f;token"), "{text}");
    assert!(!text.contains("b-canary"), "another tenant's workflow on the page: {text}");
    assert!(!text.contains(a.e.s.db().to_str().unwrap()), "the daemon's journal shown to a tenant");
    let own = get("/workflows/a-canary", &cookie);
    assert_eq!(own.status, 200, "{own:?}");
    assert!(own.body.as_str().unwrap_or_default().contains("class=\"submitter\">a&#x2f;token<"), "{:?}", own.body);
    assert_eq!(get("/workflows/b-canary", &cookie).status, 404, "another tenant's is as absent as none");
    assert_eq!(get("/workflows/b-canary/cancel", &cookie).status, 404);
    // An action on its own workflow goes through the page's confirmation and token.
    let confirm = get("/workflows/a-canary/retry", &cookie);
    assert_eq!(confirm.status, 200, "{confirm:?}");
    let html = confirm.body.as_str().unwrap_or_default().to_string();
    let csrf = html.split("name=\"csrf\" value=\"").nth(1).and_then(|s| s.split('"').next()).unwrap().to_string();
    let post = |path: &str, cookie: &str, body: &str| {
        a.client.request("POST", path, &[("Cookie", cookie), ("Origin", &origin)], form, body.as_bytes())
    };
    assert_eq!(post("/workflows/b-canary/cancel", &cookie, &format!("csrf={csrf}")).status, 404);
    let retried = post("/workflows/a-canary/retry", &cookie, &format!("csrf={csrf}"));
    assert_eq!(retried.status, 409, "a completed workflow is not retried, and the page says so: {retried:?}");
    // Each session's forms carry a token of their own: another session's does not act here.
    let second = session_cookie(&sign_in(TOKEN_A));
    let confirm2 = get("/workflows/a-canary/retry", &second).body.as_str().unwrap_or_default().to_string();
    let csrf2 = confirm2.split("name=\"csrf\" value=\"").nth(1).and_then(|s| s.split('"').next()).unwrap().to_string();
    assert_ne!(csrf, csrf2, "two sessions, one token");
    assert_eq!(post("/workflows/a-canary/retry", &second, &format!("csrf={csrf}")).status, 403);
    // Which host and process runs the workflow is the daemon's, not the tenant's.
    assert!(!own.body.as_str().unwrap_or_default().contains("run by"), "the daemon's owner shown to a tenant");
    // Another site's form signs no one out.
    let r = a.client.request("POST", "/logout", &[("Cookie", &cookie), ("Origin", "https://evil.example")], form, b"");
    assert_eq!(r.status, 403, "{r:?}");
    assert_eq!(get("/", &cookie).status, 200, "still signed in");
    // Signing out ends the session: the old cookie is a stranger's.
    let out = post("/logout", &cookie, "");
    assert_eq!(out.status, 303, "{out:?}");
    assert!(out.headers.to_ascii_lowercase().contains("max-age=0"), "{}", out.headers);
    assert_eq!(get("/", &cookie).status, 303);
    assert_eq!(post("/workflows/a-canary/cancel", &cookie, &format!("csrf={csrf}")).status, 401);
    // B signed in sees B's alone; nothing of the token or the cookie reaches the log.
    let b = session_cookie(&sign_in(TOKEN_B));
    let text = get("/", &b).body.as_str().unwrap_or_default().to_string();
    assert!(text.contains("b-canary") && !text.contains("a-canary"), "{text}");
    // B's token taken out of the tenants file ends B's session for good: putting it back does
    // not bring the old cookie back to life.
    let hup = |a: &Api| {
        let sent = std::process::Command::new("kill").args(["-HUP", &a.daemon.id().to_string()]).status().unwrap();
        assert!(sent.success());
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    let mut without_b = tenants();
    without_b["tenants"][1]["tokenSha256"] = json!([]);
    a.e.s.write_json("tenants.json", &without_b);
    hup(&a);
    assert_eq!(get("/", &b).status, 303, "a removed token's session ends");
    a.e.s.write_json("tenants.json", &tenants());
    hup(&a);
    assert_eq!(get("/", &b).status, 303, "and stays ended when the token comes back");
    assert_eq!(get("/", &session_cookie(&sign_in(TOKEN_B))).status, 200, "a new sign-in works");
    let log = a.e.s.daemon_log();
    for secret in [TOKEN_A, TOKEN_B, cookie.split('=').nth(1).unwrap(), b.split('=').nth(1).unwrap()] {
        assert!(!log.contains(secret), "a secret in the log");
    }
    assert!(log.contains("sign-in") && log.contains("page-view"), "the page's requests are audited");
    assert!(log.contains("not signed in") && log.contains("sign-out"), "and those refused or signing out too");
}
