//! Authentication: `opaque_auth`, AUTH_NONE and AUTH_SYS.
//!
//! Specs: RFC 5531 §8.2 (`opaque_auth`), §9 (authentication), appendix A (AUTH_SYS).
//! Bounds enforced on decode, before any slice is taken:
//! - `opaque_auth` body: at most [`MAX_AUTH_BYTES`] (400) bytes;
//! - AUTH_SYS `machinename`: at most [`MAX_MACHINENAME`] (255) bytes;
//! - AUTH_SYS `gids`: at most [`MAX_GIDS`] (16) entries.

use bytes::Bytes;
use xdr::{Decode, Decoder, Encode, Encoder, XdrError};

use crate::wire_enum::wire_enum;

/// RFC 5531 §8.2: `opaque body<400>`.
pub const MAX_AUTH_BYTES: u32 = 400;
/// RFC 5531 appendix A: `string machinename<255>`.
pub const MAX_MACHINENAME: u32 = 255;
/// RFC 5531 appendix A: `unsigned int gids<16>`.
pub const MAX_GIDS: u32 = 16;

wire_enum! {
    /// RFC 5531 §8.2 `auth_flavor` (values from the IANA registry, RFC 5531 §13.2).
    pub struct AuthFlavor {
        /// No authentication (§10.1).
        AUTH_NONE = 0,
        /// Unix-style credentials (appendix A); also called AUTH_UNIX.
        AUTH_SYS = 1,
        /// Short-hand credentials (appendix A).
        AUTH_SHORT = 2,
        /// Diffie-Hellman (RFC 2695).
        AUTH_DH = 3,
        /// RPCSEC_GSS (RFC 2203).
        RPCSEC_GSS = 6,
    }
}

wire_enum! {
    /// RFC 5531 §9 `auth_stat`: why authentication failed.
    pub struct AuthStat {
        /// Success.
        AUTH_OK = 0,
        /// Bad credential (seal broken).
        AUTH_BADCRED = 1,
        /// Client must begin new session.
        AUTH_REJECTEDCRED = 2,
        /// Bad verifier (seal broken).
        AUTH_BADVERF = 3,
        /// Verifier expired or replayed.
        AUTH_REJECTEDVERF = 4,
        /// Rejected for security reasons.
        AUTH_TOOWEAK = 5,
        /// Bogus response verifier.
        AUTH_INVALIDRESP = 6,
        /// Reason unknown.
        AUTH_FAILED = 7,
        /// Kerberos generic error.
        AUTH_KERB_GENERIC = 8,
        /// Time of credential expired.
        AUTH_TIMEEXPIRE = 9,
        /// Problem with ticket file.
        AUTH_TKTFILE = 10,
        /// Can't decode authenticator.
        AUTH_DECODE = 11,
        /// Wrong net address in ticket.
        AUTH_NET_ADDR = 12,
        /// RPCSEC_GSS: no credentials for user.
        RPCSEC_GSS_CREDPROBLEM = 13,
        /// RPCSEC_GSS: problem with context.
        RPCSEC_GSS_CTXPROBLEM = 14,
    }
}

/// RFC 5531 §8.2: `struct opaque_auth { auth_flavor flavor; opaque body<400>; }`.
///
/// Invariant: `body.len() <= MAX_AUTH_BYTES` when decoded; the encoder writes what it
/// is given, so build values within the bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpaqueAuth {
    /// The authentication flavor.
    pub flavor: AuthFlavor,
    /// The flavor-specific body, a slice of the received buffer.
    pub body: Bytes,
}

impl OpaqueAuth {
    /// AUTH_NONE with an empty body (RFC 5531 §10.1).
    pub const fn none() -> Self {
        OpaqueAuth {
            flavor: AuthFlavor::AUTH_NONE,
            body: Bytes::new(),
        }
    }
}

impl Default for OpaqueAuth {
    fn default() -> Self {
        Self::none()
    }
}

impl Encode for OpaqueAuth {
    fn encode(&self, enc: &mut Encoder) {
        self.flavor.encode(enc);
        enc.opaque(&self.body);
    }
}

impl Decode for OpaqueAuth {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        let flavor = AuthFlavor::decode(dec)?;
        // RFC 5531 §8.2: "opaque body<400>".
        let body = dec.opaque(MAX_AUTH_BYTES)?;
        Ok(OpaqueAuth { flavor, body })
    }
}

/// RFC 5531 appendix A: the body of an AUTH_SYS credential.
///
/// ```text
/// struct authsys_parms {
///    unsigned int stamp;
///    string machinename<255>;
///    unsigned int uid;
///    unsigned int gid;
///    unsigned int gids<16>;
/// };
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AuthSysParms {
    /// Arbitrary ID the caller's machine may generate.
    pub stamp: u32,
    /// Name of the caller's machine; at most 255 bytes.
    pub machinename: Bytes,
    /// The caller's effective user ID.
    pub uid: u32,
    /// The caller's effective group ID.
    pub gid: u32,
    /// Groups the caller is a member of; at most 16.
    pub gids: Gids,
}

/// AUTH_SYS `gids<16>`: at most [`MAX_GIDS`] group IDs, held inline. Every call a
/// server receives carries one, and services copy it on to the identity a call runs
/// as, so it is never allocated.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gids {
    len: u8,
    ids: [u32; MAX_GIDS as usize],
}

impl Gids {
    /// `ids` as AUTH_SYS groups; `None` beyond [`MAX_GIDS`].
    pub fn new(ids: &[u32]) -> Option<Gids> {
        let mut g = Gids::default();
        g.ids.get_mut(..ids.len())?.copy_from_slice(ids);
        g.len = ids.len() as u8;
        Some(g)
    }

    /// The first [`MAX_GIDS`] of `ids` (a client whose user is in more groups sends
    /// the first 16, as Linux's does).
    pub fn truncating(ids: &[u32]) -> Gids {
        let n = ids.len().min(MAX_GIDS as usize);
        Gids::new(&ids[..n]).unwrap_or_default()
    }

    /// Each group ID mapped by `f`.
    pub fn map(mut self, f: impl Fn(u32) -> u32) -> Gids {
        for id in &mut self.ids[..usize::from(self.len)] {
            *id = f(*id);
        }
        self
    }
}

impl std::ops::Deref for Gids {
    type Target = [u32];
    fn deref(&self) -> &[u32] {
        &self.ids[..usize::from(self.len)]
    }
}

impl std::fmt::Debug for Gids {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Encode for Gids {
    fn encode(&self, enc: &mut Encoder) {
        enc.array(self, |e, g| {
            e.u32(*g);
        });
    }
}

impl Decode for Gids {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        // RFC 5531 appendix A: "unsigned int gids<16>".
        let len = dec.length(MAX_GIDS)?;
        let mut g = Gids {
            len: len as u8,
            ..Gids::default()
        };
        for id in &mut g.ids[..len] {
            *id = dec.u32()?;
        }
        Ok(g)
    }
}

impl Encode for AuthSysParms {
    fn encode(&self, enc: &mut Encoder) {
        enc.u32(self.stamp);
        enc.string(&self.machinename);
        enc.u32(self.uid);
        enc.u32(self.gid);
        self.gids.encode(enc);
    }
}

impl Decode for AuthSysParms {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        let stamp = dec.u32()?;
        // RFC 5531 appendix A: "string machinename<255>".
        let machinename = dec.string(MAX_MACHINENAME)?;
        let uid = dec.u32()?;
        let gid = dec.u32()?;
        let gids = Gids::decode(dec)?;
        Ok(AuthSysParms {
            stamp,
            machinename,
            uid,
            gid,
            gids,
        })
    }
}

impl AuthSysParms {
    /// This credential as an `opaque_auth` with flavor AUTH_SYS.
    pub fn to_opaque_auth(&self) -> OpaqueAuth {
        OpaqueAuth {
            flavor: AuthFlavor::AUTH_SYS,
            body: self.to_xdr().to_bytes(),
        }
    }
}

/// The credentials of a call, decoded for the service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credentials {
    /// AUTH_NONE.
    None,
    /// AUTH_SYS with its decoded parameters.
    Sys(AuthSysParms),
}

impl Credentials {
    /// The credentials as they go on the wire.
    pub fn to_opaque_auth(&self) -> OpaqueAuth {
        match self {
            Credentials::None => OpaqueAuth::none(),
            Credentials::Sys(p) => p.to_opaque_auth(),
        }
    }

    /// Checks and decodes a call's credential and verifier, as a server's
    /// authentication step does (RFC 5531 §9; libtirpc `_authenticate`).
    ///
    /// - AUTH_NONE: any body is accepted (§10.1 says it is usually empty).
    /// - AUTH_SYS: the body must decode exactly as `authsys_parms`, else AUTH_BADCRED;
    ///   its verifier is AUTH_NONE (appendix A), else AUTH_BADVERF.
    /// - Any other flavor: AUTH_REJECTEDCRED, the answer libtirpc gives to a flavor it
    ///   does not serve.
    pub fn authenticate(cred: &OpaqueAuth, verf: &OpaqueAuth) -> Result<Self, AuthStat> {
        match cred.flavor {
            AuthFlavor::AUTH_NONE => Ok(Credentials::None),
            AuthFlavor::AUTH_SYS => {
                let parms = AuthSysParms::from_xdr(cred.body.clone())
                    .map_err(|_: XdrError| AuthStat::AUTH_BADCRED)?;
                // RFC 5531 appendix A: "The verifier accompanying the credential should
                // have AUTH_NONE flavor value".
                if verf.flavor != AuthFlavor::AUTH_NONE {
                    return Err(AuthStat::AUTH_BADVERF);
                }
                Ok(Credentials::Sys(parms))
            }
            _ => Err(AuthStat::AUTH_REJECTEDCRED),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sys() -> AuthSysParms {
        AuthSysParms {
            stamp: 7,
            machinename: Bytes::from_static(b"host"),
            uid: 1000,
            gid: 100,
            gids: Gids::new(&[1, 2, 3]).unwrap(),
        }
    }

    #[test]
    fn auth_sys_round_trip_byte_exact() {
        let bytes = sys().to_xdr().to_bytes();
        let expected: &[u8] = &[
            0, 0, 0, 7, // stamp
            0, 0, 0, 4, b'h', b'o', b's', b't', // machinename
            0, 0, 3, 0xe8, // uid
            0, 0, 0, 100, // gid
            0, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, // gids
        ];
        assert_eq!(&bytes[..], expected);
        assert_eq!(AuthSysParms::from_xdr(bytes).unwrap(), sys());
    }

    proptest::proptest! {
        #[test]
        fn auth_sys_round_trips_within_bounds(
            stamp: u32, uid: u32, gid: u32,
            name in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..=255),
            gids in proptest::collection::vec(proptest::prelude::any::<u32>(), 0..=16),
        ) {
            let gids = Gids::new(&gids).unwrap();
            let p = AuthSysParms { stamp, machinename: Bytes::from(name), uid, gid, gids };
            let cred = p.to_opaque_auth();
            proptest::prop_assert!(cred.body.len() <= MAX_AUTH_BYTES as usize);
            proptest::prop_assert_eq!(
                Credentials::authenticate(&cred, &OpaqueAuth::none()),
                Ok(Credentials::Sys(p))
            );
        }
    }

    #[test]
    fn auth_sys_machinename_over_255_is_rejected() {
        let mut p = sys();
        p.machinename = Bytes::from(vec![b'a'; 256]);
        let err = AuthSysParms::from_xdr(p.to_xdr().to_bytes()).unwrap_err();
        assert_eq!(err, XdrError::LengthOverBound { len: 256, max: 255 });
        p.machinename = Bytes::from(vec![b'a'; 255]);
        assert!(AuthSysParms::from_xdr(p.to_xdr().to_bytes()).is_ok());
    }

    #[test]
    fn auth_sys_more_than_16_gids_is_rejected() {
        let mut p = sys();
        let sixteen: Vec<u32> = (0..16).collect();
        p.gids = Gids::new(&sixteen).unwrap();
        let ok = p.to_xdr().to_bytes();
        assert_eq!(
            AuthSysParms::from_xdr(ok.clone()).unwrap().gids[..],
            sixteen[..]
        );
        // The same with a 17th group: the count word says 17, one more u32 follows.
        let mut bytes = ok[..ok.len() - 16 * 4 - 4].to_vec();
        bytes.extend_from_slice(&17u32.to_be_bytes());
        for g in 0..17u32 {
            bytes.extend_from_slice(&g.to_be_bytes());
        }
        let err = AuthSysParms::from_xdr(Bytes::from(bytes)).unwrap_err();
        assert_eq!(err, XdrError::LengthOverBound { len: 17, max: 16 });
        assert!(Gids::new(&(0..17).collect::<Vec<u32>>()).is_none());
        assert_eq!(
            Gids::truncating(&(0..20).collect::<Vec<u32>>())[..],
            sixteen[..]
        );
    }

    #[test]
    fn opaque_auth_body_over_400_is_rejected() {
        let a = OpaqueAuth {
            flavor: AuthFlavor::AUTH_SYS,
            body: Bytes::from(vec![0u8; 401]),
        };
        let err = OpaqueAuth::from_xdr(a.to_xdr().to_bytes()).unwrap_err();
        assert_eq!(err, XdrError::LengthOverBound { len: 401, max: 400 });
    }

    #[test]
    fn opaque_auth_unknown_flavor_decodes() {
        let a = OpaqueAuth {
            flavor: AuthFlavor(99),
            body: Bytes::from_static(b"abcd"),
        };
        let back = OpaqueAuth::from_xdr(a.to_xdr().to_bytes()).unwrap();
        assert_eq!(back, a);
        assert!(!back.flavor.is_known());
        assert_eq!(format!("{:?}", back.flavor), "AuthFlavor(99)");
    }

    #[test]
    fn authenticate_none_and_sys() {
        let none = OpaqueAuth::none();
        assert_eq!(
            Credentials::authenticate(&none, &none),
            Ok(Credentials::None)
        );
        let cred = sys().to_opaque_auth();
        assert_eq!(
            Credentials::authenticate(&cred, &none),
            Ok(Credentials::Sys(sys()))
        );
    }

    #[test]
    fn authenticate_garbled_auth_sys_is_badcred() {
        let cred = OpaqueAuth {
            flavor: AuthFlavor::AUTH_SYS,
            body: Bytes::from_static(&[0, 0, 0, 1]),
        };
        assert_eq!(
            Credentials::authenticate(&cred, &OpaqueAuth::none()),
            Err(AuthStat::AUTH_BADCRED)
        );
    }

    #[test]
    fn authenticate_auth_sys_with_non_none_verifier_is_badverf() {
        let verf = OpaqueAuth {
            flavor: AuthFlavor::AUTH_SYS,
            body: Bytes::new(),
        };
        assert_eq!(
            Credentials::authenticate(&sys().to_opaque_auth(), &verf),
            Err(AuthStat::AUTH_BADVERF)
        );
    }

    #[test]
    fn authenticate_unknown_flavor_is_rejectedcred() {
        for flavor in [
            AuthFlavor::AUTH_DH,
            AuthFlavor::RPCSEC_GSS,
            AuthFlavor(1234),
        ] {
            let cred = OpaqueAuth {
                flavor,
                body: Bytes::new(),
            };
            assert_eq!(
                Credentials::authenticate(&cred, &OpaqueAuth::none()),
                Err(AuthStat::AUTH_REJECTEDCRED)
            );
        }
    }
}
