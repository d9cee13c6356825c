//! The configuration's layers and parse: every error names its key.

use super::*;

const BASE: &str = r#"
    [[tenants]]
    id = "acme"
    api_keys = ["sha256:2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"]
    token_secret = "0123456789abcdef0123456789abcdef"
    allowed_origins = ["https://app.acme.example"]
"#;

fn load(text: &str, env: &[(&str, &str)]) -> Result<Settings, ConfigError> {
    let env = env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned()));
    Settings::load(text, env, &Overrides::default())
}

#[test]
fn defaults_apply_and_a_good_file_loads() {
    let c = load(BASE, &[]).unwrap();
    assert_eq!(c.server.listen.to_string(), "0.0.0.0:8080");
    assert_eq!(c.tenants[0].limits, TenantLimits::default());
}

#[test]
fn errors_name_the_key() {
    let e = load(
        &format!("{BASE}\n[tenants.limits]\ncalls_per_second = \"fast\""),
        &[],
    )
    .unwrap_err();
    assert_eq!(e.key, "tenants[0].limits.calls_per_second");
    let e = load(
        &format!("{BASE}\n[tenants.limits]\ncalls_per_second = 0"),
        &[],
    )
    .unwrap_err();
    assert_eq!(e.key, "tenants[0].limits.calls_per_second");
    // A tenant's policy for access tokens needs its issuer, and a policy's rate is at least 1.
    let e = load(
        &format!("{BASE}\nmcp_policy = {{hints = \"readOnly\"}}"),
        &[],
    )
    .unwrap_err();
    assert_eq!(e.key, "tenants[0].mcp_policy");
    let e = load(&format!("{BASE}\nmcp_policy = {{callsPerSecond = 0}}"), &[]).unwrap_err();
    assert!(e.key.starts_with("tenants[0].mcp_policy"), "{}", e.key);
    let e = load(&format!("[server]\nlisten = \"nowhere\"\n{BASE}"), &[]).unwrap_err();
    assert_eq!(e.key, "server.listen");
    let e = load(&format!("[server]\nlisten_on = 1\n{BASE}"), &[]).unwrap_err();
    assert_eq!(e.key, "server.listen_on");
    let e = load(
        &BASE.replace("https://app.acme.example", "https://app.acme.example/"),
        &[],
    )
    .unwrap_err();
    assert_eq!(e.key, "tenants[0].allowed_origins[0]");
    let e = load(&BASE.replace("sha256:2bb8", "md5:2bb8"), &[]).unwrap_err();
    assert_eq!(e.key, "tenants[0].api_keys[0]");
    let e = load(&BASE.replace("\"acme\"", "\"Acme\""), &[]).unwrap_err();
    assert_eq!(e.key, "tenants[0].id");
    let e = load(&format!("[broker]\nkind = \"redis\"\n{BASE}"), &[]).unwrap_err();
    assert_eq!(e.key, "broker.url");
    let e = load(
        &format!("[broker]\nkind = \"redis\"\nurl = \"http://x\"\n{BASE}"),
        &[],
    )
    .unwrap_err();
    assert_eq!(e.key, "broker.url");
    assert!(load(&format!("[broker]\nkind = \"redis\"\nurl = \"redis-cluster://127.0.0.1:7000,127.0.0.1:7001\"\n{BASE}"), &[]).is_ok());
    let e = load("not toml [", &[]).unwrap_err();
    assert_eq!(e.key, "config");
}

#[test]
fn pusher_keys_select_one_tenant_each() {
    let pusher = |extra: &str| {
        let second = BASE.replace("\"acme\"", "\"globex\"");
        format!(
            "{BASE}\npusher_key = \"k1\"\npusher_secret = \"0123456789abcdef\"\n{second}\n{extra}"
        )
    };
    assert!(load(&pusher(""), &[]).is_ok());
    let old = "pusher_key = \"k2\"\npusher_secret = \"0123456789abcdef\"\npusher_old_keys = [{ key = \"k1\", secret = \"0123456789abcdef\" }]";
    let e = load(&pusher(old), &[]).unwrap_err();
    assert_eq!(e.key, "tenants[1].pusher_old_keys[0]", "{e}");
    let e = load(
        &pusher("pusher_old_keys = [{ key = \"k3\", secret = \"0123456789abcdef\" }]"),
        &[],
    )
    .unwrap_err();
    assert_eq!(e.key, "tenants[1].pusher_old_keys");
    let e = load(
        &pusher("pusher_key = \"a:b\"\npusher_secret = \"0123456789abcdef\""),
        &[],
    )
    .unwrap_err();
    assert_eq!(e.key, "tenants[1].pusher_key");
    let e = load(
        &pusher("pusher_key = \"k4\"\npusher_secret = \"short\""),
        &[],
    )
    .unwrap_err();
    assert_eq!(
        e.key, "tenants[1].pusher_secret",
        "the short value is the secret"
    );
    let e = load(&pusher("pusher_key = \"k4\""), &[]).unwrap_err();
    assert_eq!(e.key, "tenants[1].pusher_secret");
}

#[test]
fn environment_overrides_the_file() {
    let c = load(
        BASE,
        &[
            ("TOOLMARK_SERVER__DRAIN_TIMEOUT_MS", "2500"),
            ("TOOLMARK_TENANTS__0__LIMITS__CALLS_PER_SECOND", "7"),
            ("OTHER", "x"),
        ],
    )
    .unwrap();
    assert_eq!(
        c.server.drain_timeout,
        std::time::Duration::from_millis(2500)
    );
    assert_eq!(c.tenants[0].limits.calls_per_second, 7);
    let e = load(BASE, &[("TOOLMARK_SERVER__DRAIN_TIMEOUT_MS", "soon")]).unwrap_err();
    assert_eq!(e.key, "server.drain_timeout_ms");
    let e = load(BASE, &[("TOOLMARK_TENANTS__3__ID", "x")]).unwrap_err();
    assert_eq!(e.key, "tenants.3.id");
    let e = load(BASE, &[("TOOLMARK_SERVER__STATS_FLUSH_MS", "50")]).unwrap_err();
    assert_eq!(e.key, "server.stats_flush_ms");
    let c = load(BASE, &[("TOOLMARK_SERVER__STATS_FLUSH_MS", "250")]).unwrap();
    assert_eq!(c.server.stats_flush, std::time::Duration::from_millis(250));
}

#[test]
fn flags_override_environment_and_file() {
    let o = Overrides {
        listen: Some("127.0.0.1:9999".into()),
        ..Overrides::default()
    };
    let c = Settings::load(
        BASE,
        [(
            "TOOLMARK_SERVER__LISTEN".to_owned(),
            "127.0.0.1:1".to_owned(),
        )],
        &o,
    )
    .unwrap();
    assert_eq!(c.server.listen.to_string(), "127.0.0.1:9999");
}

#[test]
fn dev_mode_is_loopback_only() {
    let c = Settings::dev([], &Overrides::default()).unwrap();
    assert_eq!(c.server.listen.to_string(), "127.0.0.1:8080");
    assert!(c.dev_mode && c.tenants.is_empty());
    let public = Overrides {
        listen: Some("0.0.0.0:8080".into()),
        ..Overrides::default()
    };
    assert_eq!(Settings::dev([], &public).unwrap_err().key, "server.listen");
    let env = [("TOOLMARK_SERVER__LISTEN".to_owned(), "0.0.0.0:1".to_owned())];
    assert_eq!(
        Settings::dev(env, &Overrides::default()).unwrap_err().key,
        "server.listen"
    );
}

#[test]
fn the_admin_section_and_the_public_url_are_checked_key_by_key() {
    let admin = "[admin]\napi_keys = [\"sha256:2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b\"]\nencryption_key = \"base64:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\"\n";
    let c = load(&format!("{BASE}\n{admin}"), &[]).unwrap();
    let a = c.admin.expect("[admin] parsed");
    assert_eq!(a.listen.to_string(), "127.0.0.1:8081");
    // With [admin], tenants may all come at run time.
    assert!(load(admin, &[]).unwrap().tenants.is_empty());
    assert_eq!(load("", &[]).unwrap_err().key, "tenants");
    for (bad, key) in [
        (
            admin.replace("base64:AAAA", "base64:AA"),
            "admin.encryption_key",
        ),
        (admin.replace("sha256:2bb8", "2bb8"), "admin.api_keys[0]"),
        (format!("{admin}listen = \"anywhere\"\n"), "admin.listen"),
        (
            "[admin]\nencryption_key = \"base64:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\"\n"
                .to_owned(),
            "admin.api_keys",
        ),
    ] {
        assert_eq!(
            load(&format!("{BASE}\n{bad}"), &[]).unwrap_err().key,
            key,
            "{bad}"
        );
    }
    let o = Overrides {
        admin_listen: Some("127.0.0.1:0".into()),
        ..Overrides::default()
    };
    let c = Settings::load(&format!("{BASE}\n{admin}"), [], &o).unwrap();
    assert_eq!(c.admin.unwrap().listen.port(), 0, "--admin-listen wins");
    let url = |u: &str| load(&format!("[server]\npublic_url = \"{u}\"\n{BASE}"), &[]);
    assert_eq!(
        url("https://toolmark.example/")
            .unwrap()
            .server
            .public_url
            .as_deref(),
        Some("https://toolmark.example")
    );
    for bad in [
        "ftp://toolmark.example",
        "https://toolmark.example/?a=1",
        "toolmark",
    ] {
        assert_eq!(url(bad).unwrap_err().key, "server.public_url", "{bad}");
    }
}

#[test]
fn the_mcp_section_and_a_tenants_authorization_server_are_checked_key_by_key() {
    let c = load(BASE, &[]).unwrap();
    assert_eq!(c.mcp.session_idle, std::time::Duration::from_secs(3600));
    assert_eq!(
        (c.mcp.max_streams_per_tenant, c.mcp.max_streams_per_token),
        (1000, 4)
    );
    assert_eq!(
        (c.mcp.max_sessions_per_tenant, c.mcp.max_sessions_per_token),
        (1000, 8)
    );
    let e = load(&format!("[mcp]\nmax_sessions_per_token = 0\n{BASE}"), &[]).unwrap_err();
    assert_eq!(e.key, "mcp.max_sessions_per_token");
    assert!(c.tenants[0].mcp_oauth.is_none());
    let e = load(&format!("[mcp]\nsession_idle_secs = 0\n{BASE}"), &[]).unwrap_err();
    assert_eq!(e.key, "mcp.session_idle_secs");
    let e = load(&format!("[mcp]\nmax_streams = 3\n{BASE}"), &[]).unwrap_err();
    assert_eq!(e.key, "mcp.max_streams");

    let public = "[server]\npublic_url = \"https://gw.acme.example\"\n";
    let with = |extra: &str| load(&format!("{public}{BASE}{extra}"), &[]);
    let jwks = "mcp_jwks_url = \"https://auth.acme.example/jwks\"\n";
    let issuer = "mcp_issuer = \"https://auth.acme.example\"\n";
    // The audience is the public URL: without one, a tenant with an issuer is refused.
    let e = load(&format!("{BASE}{issuer}{jwks}"), &[]).unwrap_err();
    assert_eq!(e.key, "server.public_url");
    let c = with(&format!(
        "{issuer}{jwks}mcp_default_conversation = \"main\"\n"
    ))
    .unwrap();
    let oauth = c.tenants[0].mcp_oauth.as_ref().unwrap();
    assert_eq!(oauth.issuer, "https://auth.acme.example");
    assert_eq!(oauth.default_conversation.as_deref(), Some("main"));
    assert!(matches!(&oauth.keys, OAuthKeys::Jwks(u) if u == "https://auth.acme.example/jwks"));
    for (extra, key) in [
        (jwks.to_owned(), "tenants[0].mcp_issuer"),
        (issuer.to_owned(), "tenants[0].mcp_jwks_url"),
        (
            format!("{issuer}{jwks}mcp_public_key = \"x\"\n"),
            "tenants[0].mcp_public_key",
        ),
        (
            format!("{issuer}mcp_public_key = \"not a key\"\n"),
            "tenants[0].mcp_public_key",
        ),
        (
            format!("{issuer}mcp_jwks_url = \"ftp://x\"\n"),
            "tenants[0].mcp_jwks_url",
        ),
        (
            format!("mcp_issuer = \"not a url\"\n{jwks}"),
            "tenants[0].mcp_issuer",
        ),
        (
            format!("{issuer}{jwks}mcp_default_conversation = \"a b\"\n"),
            "tenants[0].mcp_default_conversation",
        ),
        (
            "mcp_default_conversation = \"main\"\n".to_owned(),
            "tenants[0].mcp_default_conversation",
        ),
    ] {
        assert_eq!(with(&extra).unwrap_err().key, key, "{extra}");
    }
}

#[test]
fn every_kind_of_secret_has_a_minimum_length_and_the_error_names_its_key() {
    // Token secret: 32 bytes.
    let e = load(
        &BASE.replace(
            "0123456789abcdef0123456789abcdef",
            "0123456789abcdef0123456789abcde",
        ),
        &[],
    )
    .unwrap_err();
    assert_eq!(e.key, "tenants[0].token_secret");
    assert!(e.reason.contains("at least 32 bytes"), "{e}");
    // Pusher secret: 16 bytes.
    let pusher =
        |secret: &str| format!("{BASE}pusher_key = \"acme-key\"\npusher_secret = \"{secret}\"\n");
    assert!(load(&pusher("0123456789abcdef"), &[]).is_ok());
    let e = load(&pusher("0123456789abcde"), &[]).unwrap_err();
    assert_eq!(e.key, "tenants[0].pusher_secret");
    // Webhook secret: 16 bytes of key after `whsec_` and base64 (an empty one included).
    let webhook = |secret: &str| {
        format!(
            "{BASE}webhook_url = \"https://hooks.acme.example/t\"\nwebhook_secret = \"{secret}\"\n"
        )
    };
    assert!(load(&webhook("whsec_MDEyMzQ1Njc4OWFiY2RlZg=="), &[]).is_ok());
    for short in ["whsec_", "whsec_MDEyMzQ1Njc4OWFiY2Rl"] {
        let e = load(&webhook(short), &[]).unwrap_err();
        assert_eq!(e.key, "tenants[0].webhook_secret", "{short}");
        assert!(e.reason.contains("at least 16 bytes"), "{e}");
    }
}
