//! The cryptography under `jsonwebtoken`: one provider on `ring`, the library rustls already
//! uses here, for every algorithm the gateway accepts (HS256/384/512, ES256/384, EdDSA,
//! RS256/384/512 and PS256/384/512 to verify; HMAC, ES256/384, EdDSA and PKCS#1 v1.5 RSA to
//! sign). The crate's own providers would add a second implementation of each (and the `rsa`
//! crate, with its published timing advisory); this one adds none. [`install`] makes it the
//! process's provider; every path that parses or uses a token key calls it first.

use jsonwebtoken::crypto::{CryptoProvider, JwtSigner, JwtVerifier, KeyUtils};
use jsonwebtoken::errors::{Error, ErrorKind};
use jsonwebtoken::jwk::{EllipticCurve, ThumbprintHash};
use jsonwebtoken::signature;
use jsonwebtoken::{Algorithm, DecodingKey, DecodingKeyKind, EncodingKey};
use ring::signature::{self as sig, KeyPair as _};

/// Installs the provider for this process (again is a no-op).
pub fn install() {
    let _ = PROVIDER.install_default();
}

static PROVIDER: CryptoProvider = CryptoProvider {
    signer_factory: new_signer,
    verifier_factory: new_verifier,
    key_utils: KeyUtils {
        rsa_pub_components_from_private_key: |_| Err(unsupported()),
        rsa_pub_components_from_public_key: |_| Err(unsupported()),
        ec_pub_components_from_private_key: |_, _| Err(unsupported()),
        ed_pub_components_from_private_key,
        compute_digest,
    },
};

/// Deriving a JWK from a private RSA or EC key: the gateway never publishes keys.
fn unsupported() -> Error {
    ErrorKind::Provider("not supported by this provider".into()).into()
}

fn ed_pub_components_from_private_key(der: &[u8], curve: &EllipticCurve) -> Result<Vec<u8>, Error> {
    match curve {
        EllipticCurve::Ed25519 => sig::Ed25519KeyPair::from_pkcs8_maybe_unchecked(der)
            .map(|k| k.public_key().as_ref().to_vec())
            .map_err(|_| ErrorKind::InvalidEddsaKey.into()),
        _ => Err(ErrorKind::InvalidAlgorithm.into()),
    }
}

fn compute_digest(data: &[u8], hash: ThumbprintHash) -> Result<Vec<u8>, Error> {
    let alg = match hash {
        ThumbprintHash::SHA256 => &ring::digest::SHA256,
        ThumbprintHash::SHA384 => &ring::digest::SHA384,
        ThumbprintHash::SHA512 => &ring::digest::SHA512,
        _ => return Err(unsupported()),
    };
    Ok(ring::digest::digest(alg, data).as_ref().to_vec())
}

/// How one algorithm signs.
enum Signing {
    Hmac(ring::hmac::Key),
    Ecdsa(sig::EcdsaKeyPair),
    Ed25519(sig::Ed25519KeyPair),
    Rsa(sig::RsaKeyPair, &'static dyn sig::RsaEncoding),
}

struct Signer {
    alg: Algorithm,
    how: Signing,
}

impl signature::Signer<Vec<u8>> for Signer {
    fn try_sign(&self, msg: &[u8]) -> Result<Vec<u8>, signature::Error> {
        let rng = ring::rand::SystemRandom::new();
        match &self.how {
            Signing::Hmac(key) => Ok(ring::hmac::sign(key, msg).as_ref().to_vec()),
            Signing::Ecdsa(key) => key
                .sign(&rng, msg)
                .map(|s| s.as_ref().to_vec())
                .map_err(|_| signature::Error::new()),
            Signing::Ed25519(key) => Ok(key.sign(msg).as_ref().to_vec()),
            Signing::Rsa(key, encoding) => {
                let mut out = vec![0; key.public().modulus_len()];
                key.sign(*encoding, &rng, msg, &mut out)
                    .map_err(|_| signature::Error::new())?;
                Ok(out)
            }
        }
    }
}

impl JwtSigner for Signer {
    fn algorithm(&self) -> Algorithm {
        self.alg
    }
}

fn new_signer(alg: &Algorithm, key: &EncodingKey) -> Result<Box<dyn JwtSigner>, Error> {
    let der = key.as_bytes();
    let rng = ring::rand::SystemRandom::new();
    let ecdsa = |a: &'static sig::EcdsaSigningAlgorithm| {
        sig::EcdsaKeyPair::from_pkcs8(a, der, &rng)
            .map_err(|_| Error::from(ErrorKind::InvalidEcdsaKey))
    };
    let rsa = |encoding: &'static dyn sig::RsaEncoding| {
        sig::RsaKeyPair::from_der(der)
            .or_else(|_| sig::RsaKeyPair::from_pkcs8(der))
            .map(|k| Signing::Rsa(k, encoding))
            .map_err(|e| Error::from(ErrorKind::InvalidRsaKey(e.to_string())))
    };
    let hmac = |a| Signing::Hmac(ring::hmac::Key::new(a, der));
    let how = match alg {
        Algorithm::HS256 => hmac(ring::hmac::HMAC_SHA256),
        Algorithm::HS384 => hmac(ring::hmac::HMAC_SHA384),
        Algorithm::HS512 => hmac(ring::hmac::HMAC_SHA512),
        Algorithm::ES256 => Signing::Ecdsa(ecdsa(&sig::ECDSA_P256_SHA256_FIXED_SIGNING)?),
        Algorithm::ES384 => Signing::Ecdsa(ecdsa(&sig::ECDSA_P384_SHA384_FIXED_SIGNING)?),
        Algorithm::EdDSA => Signing::Ed25519(
            sig::Ed25519KeyPair::from_pkcs8_maybe_unchecked(der)
                .map_err(|_| Error::from(ErrorKind::InvalidEddsaKey))?,
        ),
        Algorithm::RS256 => rsa(&sig::RSA_PKCS1_SHA256)?,
        Algorithm::RS384 => rsa(&sig::RSA_PKCS1_SHA384)?,
        Algorithm::RS512 => rsa(&sig::RSA_PKCS1_SHA512)?,
        Algorithm::PS256 => rsa(&sig::RSA_PSS_SHA256)?,
        Algorithm::PS384 => rsa(&sig::RSA_PSS_SHA384)?,
        Algorithm::PS512 => rsa(&sig::RSA_PSS_SHA512)?,
        _ => return Err(ErrorKind::InvalidAlgorithm.into()),
    };
    Ok(Box::new(Signer { alg: *alg, how }))
}

/// How one algorithm verifies.
enum Verifying {
    Hmac(ring::hmac::Key),
    /// An EC point, Ed25519 key or PKCS#1 RSA public key, with its algorithm.
    Public(&'static dyn sig::VerificationAlgorithm, Vec<u8>),
    /// RSA by modulus and exponent (a JWK).
    RsaParts(&'static sig::RsaParameters, Vec<u8>, Vec<u8>),
}

struct Verifier {
    alg: Algorithm,
    how: Verifying,
}

impl signature::Verifier<Vec<u8>> for Verifier {
    fn verify(&self, msg: &[u8], signature: &Vec<u8>) -> Result<(), signature::Error> {
        let ok = match &self.how {
            Verifying::Hmac(key) => ring::hmac::verify(key, msg, signature).is_ok(),
            Verifying::Public(alg, key) => sig::UnparsedPublicKey::new(*alg, key)
                .verify(msg, signature)
                .is_ok(),
            Verifying::RsaParts(params, n, e) => sig::RsaPublicKeyComponents { n, e }
                .verify(params, msg, signature)
                .is_ok(),
        };
        ok.then_some(()).ok_or_else(signature::Error::new)
    }
}

impl JwtVerifier for Verifier {
    fn algorithm(&self) -> Algorithm {
        self.alg
    }
}

fn new_verifier(alg: &Algorithm, key: &DecodingKey) -> Result<Box<dyn JwtVerifier>, Error> {
    // A key verifies only its own family's algorithms: an RSA or EC public key is never used
    // as an HMAC secret (or the other way round), whatever a caller's validation names.
    if key.family() != alg.family() {
        return Err(ErrorKind::InvalidAlgorithm.into());
    }
    let rsa = |params: &'static sig::RsaParameters| match key.kind() {
        DecodingKeyKind::SecretOrDer(der) => Verifying::Public(params, der.clone()),
        DecodingKeyKind::RsaModulusExponent { n, e } => {
            Verifying::RsaParts(params, n.clone(), e.clone())
        }
    };
    let bytes = || match key.kind() {
        DecodingKeyKind::SecretOrDer(b) => Ok(b.clone()),
        DecodingKeyKind::RsaModulusExponent { .. } => Err(Error::from(ErrorKind::InvalidKeyFormat)),
    };
    let hmac = |a| bytes().map(|b| Verifying::Hmac(ring::hmac::Key::new(a, &b)));
    let public =
        |a: &'static dyn sig::VerificationAlgorithm| bytes().map(|b| Verifying::Public(a, b));
    let how = match alg {
        Algorithm::HS256 => hmac(ring::hmac::HMAC_SHA256)?,
        Algorithm::HS384 => hmac(ring::hmac::HMAC_SHA384)?,
        Algorithm::HS512 => hmac(ring::hmac::HMAC_SHA512)?,
        Algorithm::ES256 => public(&sig::ECDSA_P256_SHA256_FIXED)?,
        Algorithm::ES384 => public(&sig::ECDSA_P384_SHA384_FIXED)?,
        Algorithm::EdDSA => public(&sig::ED25519)?,
        Algorithm::RS256 => rsa(&sig::RSA_PKCS1_2048_8192_SHA256),
        Algorithm::RS384 => rsa(&sig::RSA_PKCS1_2048_8192_SHA384),
        Algorithm::RS512 => rsa(&sig::RSA_PKCS1_2048_8192_SHA512),
        Algorithm::PS256 => rsa(&sig::RSA_PSS_2048_8192_SHA256),
        Algorithm::PS384 => rsa(&sig::RSA_PSS_2048_8192_SHA384),
        Algorithm::PS512 => rsa(&sig::RSA_PSS_2048_8192_SHA512),
        _ => return Err(ErrorKind::InvalidAlgorithm.into()),
    };
    Ok(Box::new(Verifier { alg: *alg, how }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{Header, Validation, decode, encode};
    use serde_json::{Value, json};

    const ED_PRIVATE: &str = include_str!("../tests/keys/ed25519.key");
    const P256_PRIVATE: &str = include_str!("../tests/keys/p256.key");
    const P256_PUBLIC: &str = include_str!("../tests/keys/p256.pub");
    const RSA_PRIVATE: &str = include_str!("../tests/keys/rsa.key");
    const RSA_PUBLIC: &str = include_str!("../tests/keys/rsa.pub");

    /// Signs a token with `enc` and verifies it with `dec`: its claims, or `None` when refused.
    fn round_trip(alg: Algorithm, enc: &EncodingKey, dec: &DecodingKey) -> Option<Value> {
        install();
        let claims = json!({"sub": "u1", "exp": 4_000_000_000u64});
        let token = encode(&Header::new(alg), &claims, enc).expect("signs");
        decode::<Value>(&token, dec, &Validation::new(alg))
            .ok()
            .map(|t| t.claims)
    }

    fn b64(bytes: &[u8]) -> String {
        base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, bytes)
    }

    #[test]
    fn hmac_tokens_verify_with_their_secret_only() {
        let secret = b"0123456789abcdef0123456789abcdef";
        for alg in [Algorithm::HS256, Algorithm::HS384, Algorithm::HS512] {
            let enc = EncodingKey::from_secret(secret).unwrap();
            let dec = DecodingKey::from_secret(secret).unwrap();
            assert!(round_trip(alg, &enc, &dec).is_some());
            let other = DecodingKey::from_secret(b"another-secret-0123456789abcdefgh").unwrap();
            assert!(round_trip(alg, &enc, &other).is_none(), "{alg:?}");
        }
    }

    #[test]
    fn ed25519_tokens_verify_with_the_public_key_only() {
        let enc = EncodingKey::from_ed_pem(ED_PRIVATE.as_bytes()).unwrap();
        let public =
            ed_pub_components_from_private_key(enc.as_bytes(), &EllipticCurve::Ed25519).unwrap();
        let dec = DecodingKey::from_ed_components(&b64(&public)).unwrap();
        assert_eq!(
            round_trip(Algorithm::EdDSA, &enc, &dec).unwrap()["sub"],
            "u1"
        );
        let mut wrong = public.clone();
        wrong[0] ^= 1;
        let dec = DecodingKey::from_ed_components(&b64(&wrong)).unwrap();
        assert!(round_trip(Algorithm::EdDSA, &enc, &dec).is_none());
    }

    #[test]
    fn p256_tokens_verify_with_the_public_key_only() {
        let enc = EncodingKey::from_ec_pem(P256_PRIVATE.as_bytes()).unwrap();
        let dec = DecodingKey::from_ec_pem(P256_PUBLIC.as_bytes()).unwrap();
        assert!(round_trip(Algorithm::ES256, &enc, &dec).is_some());
        // The same key under another algorithm is refused.
        let secret = DecodingKey::from_secret(b"0123456789abcdef0123456789abcdef").unwrap();
        assert!(round_trip(Algorithm::ES256, &enc, &secret).is_none());
    }

    #[test]
    fn rsa_tokens_verify_from_a_pem_and_from_jwk_components() {
        let enc = EncodingKey::from_rsa_pem(RSA_PRIVATE.as_bytes()).unwrap();
        let pem = DecodingKey::from_rsa_pem(RSA_PUBLIC.as_bytes()).unwrap();
        let DecodingKeyKind::SecretOrDer(der) = pem.kind() else {
            panic!("a PEM key is DER");
        };
        // The modulus and exponent of the PKCS#1 public key, as a JWK carries them.
        let public = sig::UnparsedPublicKey::new(&sig::RSA_PKCS1_2048_8192_SHA256, der.clone());
        let (n, e) = rsa_components(public.as_ref());
        let jwk = DecodingKey::from_rsa_components(&b64(&n), &b64(&e)).unwrap();
        for alg in [
            Algorithm::RS256,
            Algorithm::RS384,
            Algorithm::RS512,
            Algorithm::PS256,
            Algorithm::PS384,
            Algorithm::PS512,
        ] {
            assert!(
                round_trip(alg, &enc, &pem).is_some(),
                "{alg:?} from the PEM"
            );
            assert!(
                round_trip(alg, &enc, &jwk).is_some(),
                "{alg:?} from n and e"
            );
        }
        let mut other = n.clone();
        other[10] ^= 1;
        let wrong = DecodingKey::from_rsa_components(&b64(&other), &b64(&e)).unwrap();
        assert!(round_trip(Algorithm::RS256, &enc, &wrong).is_none());
    }

    #[test]
    fn a_public_key_never_verifies_as_an_hmac_secret() {
        // The algorithm-confusion attack: a token signed with HS256 whose secret is the
        // public key's bytes, checked by a caller whose validation names HS256 with the
        // public key. The key's family is not HMAC: refused.
        for (dec, alg) in [
            (
                DecodingKey::from_rsa_pem(RSA_PUBLIC.as_bytes()).unwrap(),
                Algorithm::HS256,
            ),
            (
                DecodingKey::from_ec_pem(P256_PUBLIC.as_bytes()).unwrap(),
                Algorithm::HS384,
            ),
        ] {
            let DecodingKeyKind::SecretOrDer(der) = dec.kind() else {
                panic!("a PEM key is DER");
            };
            let enc = EncodingKey::from_secret(der).unwrap();
            assert!(round_trip(alg, &enc, &dec).is_none(), "{alg:?}");
        }
        // And an HMAC secret is never an EC or RSA key.
        let secret = DecodingKey::from_secret(b"0123456789abcdef0123456789abcdef").unwrap();
        assert!(new_verifier(&Algorithm::RS256, &secret).is_err());
        assert!(new_verifier(&Algorithm::EdDSA, &secret).is_err());
    }

    /// `n` and `e` of a DER `RSAPublicKey` (two INTEGERs in a SEQUENCE, long-form lengths).
    fn rsa_components(der: &[u8]) -> (Vec<u8>, Vec<u8>) {
        fn tlv(d: &[u8]) -> (&[u8], &[u8]) {
            let (len, at) = if d[1] & 0x80 == 0 {
                (usize::from(d[1]), 2)
            } else {
                let k = usize::from(d[1] & 0x7f);
                (
                    d[2..2 + k].iter().fold(0, |a, b| a << 8 | usize::from(*b)),
                    2 + k,
                )
            };
            (&d[at..at + len], &d[at + len..])
        }
        let (seq, _) = tlv(der);
        let (n, rest) = tlv(seq);
        let (e, _) = tlv(rest);
        let strip = |v: &[u8]| v.iter().skip_while(|b| **b == 0).copied().collect();
        (strip(n), strip(e))
    }
}
