//! TLS to PostgreSQL as libpq users write it in the URL: `sslmode` (`disable`, `prefer`, `require`,
//! `verify-ca`, `verify-full`) and `sslrootcert` (a PEM file of the CAs to trust), through
//! `tokio-postgres-rustls` (rustls, the aws-lc-rs provider the AWS SDK already brings).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

/// How much of TLS a connection insists on, as libpq's `sslmode` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SslMode {
    /// Plain TCP.
    Disable,
    /// TLS if the server offers it, unverified (libpq's default).
    Prefer,
    /// TLS or no connection; the certificate is verified against `sslrootcert` when one is given
    /// (as libpq does), else not at all.
    Require,
    /// TLS with a certificate signed by a trusted CA, whatever name it carries.
    VerifyCa,
    /// TLS with a trusted certificate for the host the URL names.
    VerifyFull,
}

impl SslMode {
    pub fn parse(s: &str) -> Option<SslMode> {
        Some(match s {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// What tokio-postgres negotiates: the verification is the connector's.
    pub(crate) fn negotiation(self) -> tokio_postgres::config::SslMode {
        match self {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            _ => tokio_postgres::config::SslMode::Require,
        }
    }
}

/// The connector for `mode`: trusting the CAs in `root_cert`, or the system's when `system`
/// (`sslrootcert=system`, verify-full only). `verify-*` with neither is refused, naming the
/// setting: the system's public CAs would accept anyone's certificate under verify-ca (the
/// caller passes libpq's default file, `~/.postgresql/root.crt`, when it exists). An unreadable
/// or empty CA file is an error naming it.
pub(crate) fn connector(mode: SslMode, root_cert: Option<&Path>, system: bool) -> Result<MakeRustlsConnect, String> {
    if matches!(mode, SslMode::VerifyCa | SslMode::VerifyFull) && root_cert.is_none() && !system {
        return Err(format!(
            "sslmode={} needs the CAs to trust: give sslrootcert=FILE (or PGSSLROOTCERT, or put them in ~/.postgresql/root.crt){}",
            mode.as_str(),
            if mode == SslMode::VerifyFull { ", or sslrootcert=system for the system's public CAs" } else { "" }
        ));
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?;
    let verify = matches!(mode, SslMode::VerifyCa | SslMode::VerifyFull) || root_cert.is_some();
    let config = if !verify {
        builder.dangerous().with_custom_certificate_verifier(Arc::new(AnyCertificate(provider))).with_no_client_auth()
    } else {
        let roots = Arc::new(roots(root_cert)?);
        let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider)
            .build()
            .map_err(|e| format!("TLS setup: {e}"))?;
        match mode {
            SslMode::VerifyFull => builder.with_webpki_verifier(webpki).with_no_client_auth(),
            _ => builder.dangerous().with_custom_certificate_verifier(Arc::new(AnyName(webpki))).with_no_client_auth(),
        }
    };
    Ok(MakeRustlsConnect::new(config))
}

fn roots(root_cert: Option<&Path>) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    match root_cert {
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|it| it.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("sslrootcert={}: cannot read a PEM certificate ({e})", path.display()))?;
            let (added, _) = store.add_parsable_certificates(certs);
            if added == 0 {
                return Err(format!("sslrootcert={}: no CA certificate in it", path.display()));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            store.add_parsable_certificates(found.certs);
            if store.is_empty() {
                return Err(
                    "sslmode asks to verify the server, and this system has no CA certificates: give sslrootcert=FILE"
                        .into(),
                );
            }
        }
    }
    Ok(store)
}

/// `require` without a CA file: encrypted, the peer unauthenticated (libpq's meaning). The
/// handshake's signatures are still checked.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain must reach a trusted CA; the name on the certificate is not checked.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            r => r,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// A connection error as one line an operator can act on: what TLS refused, and which URL
/// setting asked for it. None for errors that are not about TLS.
pub(crate) fn explain(mode: SslMode, root_cert: Option<&PathBuf>, e: &tokio_postgres::Error) -> Option<String> {
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        text.push_str(&format!(": {c}"));
        cause = c.source();
    }
    let ca =
        || root_cert.map(|p| format!("the CA in sslrootcert={}", p.display())).unwrap_or("the system's CAs".into());
    if text.contains("server does not support TLS") {
        Some(format!(
            "the server does not offer TLS, and sslmode={} requires it: enable ssl on the server, or use sslmode=disable on a private network",
            mode.as_str()
        ))
    } else if text.contains("UnknownIssuer") || text.contains("BadSignature") {
        Some(format!("the server's certificate is not signed by {} (sslmode={})", ca(), mode.as_str()))
    } else if text.contains("NotValidForName") {
        Some(
            "the server's certificate does not name the host in the URL (sslmode=verify-full); use the name it carries, or sslmode=verify-ca"
                .to_string(),
        )
    } else if text.contains("Expired") || text.contains("NotValidYet") {
        Some(format!("the server's certificate is outside its validity period (sslmode={})", mode.as_str()))
    } else if text.to_ascii_lowercase().contains("tls") && mode != SslMode::Disable {
        Some(format!("TLS failed (sslmode={}): {text}", mode.as_str()))
    } else {
        None
    }
}
