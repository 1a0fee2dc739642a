//! Where the CLI (or any caller) points: `nfs://host[:port]/path` or `host:/path`.
//!
//! The path names the export and, optionally, something inside it; where the export
//! ends is found by asking MOUNT ([`crate::Mount::mount_longest`]). IPv6 literals are
//! written in brackets: `nfs://[::1]:2049/srv`, `[::1]:/srv`.

use std::fmt;
use std::str::FromStr;

/// A parsed target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Host name or address (IPv6 without brackets).
    pub host: String,
    /// NFS port given in a URL.
    pub port: Option<u16>,
    /// Absolute path on the server: the export, possibly followed by a path inside it.
    pub path: String,
}

/// Why a target does not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TargetError {
    /// No host before the path.
    #[error("missing host (expected nfs://host/path or host:/path)")]
    MissingHost,
    /// The path does not start with `/`.
    #[error("the path must be absolute (expected nfs://host/path or host:/path)")]
    RelativePath,
    /// The port of a URL is not a number in 1..=65535.
    #[error("invalid port")]
    BadPort,
    /// An IPv6 literal's `[` has no `]`.
    #[error("unclosed '[' in host")]
    UnclosedBracket,
}

/// Splits `[v6]rest` or `host rest` at the end of the host part.
fn split_host<'a>(s: &'a str, stop: &[char]) -> Result<(&'a str, &'a str), TargetError> {
    if let Some(inner) = s.strip_prefix('[') {
        let end = inner.find(']').ok_or(TargetError::UnclosedBracket)?;
        return Ok((&inner[..end], &inner[end + 1..]));
    }
    let end = s.find(stop).unwrap_or(s.len());
    Ok((&s[..end], &s[end..]))
}

impl FromStr for Target {
    type Err = TargetError;

    fn from_str(s: &str) -> Result<Self, TargetError> {
        let (host, port, path) = if let Some(url) = s.strip_prefix("nfs://") {
            let (host, rest) = split_host(url, &[':', '/'])?;
            let (port, path) = match rest.strip_prefix(':') {
                Some(p) => {
                    let end = p.find('/').unwrap_or(p.len());
                    let port = p[..end]
                        .parse::<u16>()
                        .ok()
                        .filter(|&p| p != 0)
                        .ok_or(TargetError::BadPort)?;
                    (Some(port), &p[end..])
                }
                None => (None, rest),
            };
            (host, port, if path.is_empty() { "/" } else { path })
        } else {
            let (host, rest) = split_host(s, &[':'])?;
            let path = rest.strip_prefix(':').ok_or(TargetError::RelativePath)?;
            (host, None, path)
        };
        if host.is_empty() {
            return Err(TargetError::MissingHost);
        }
        if !path.starts_with('/') {
            return Err(TargetError::RelativePath);
        }
        Ok(Target {
            host: host.to_string(),
            port,
            path: path.to_string(),
        })
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        match self.port {
            Some(p) => write!(f, "nfs://{host}:{p}{}", self.path),
            None => write!(f, "{host}:{}", self.path),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(host: &str, port: Option<u16>, path: &str) -> Target {
        Target {
            host: host.into(),
            port,
            path: path.into(),
        }
    }

    #[test]
    fn parses_host_colon_path() {
        assert_eq!("srv:/export/a".parse(), Ok(t("srv", None, "/export/a")));
        assert_eq!("[::1]:/e".parse(), Ok(t("::1", None, "/e")));
        assert_eq!("10.0.0.1:/".parse(), Ok(t("10.0.0.1", None, "/")));
    }

    #[test]
    fn parses_urls() {
        assert_eq!("nfs://srv/export".parse(), Ok(t("srv", None, "/export")));
        assert_eq!(
            "nfs://srv:2050/e/f".parse(),
            Ok(t("srv", Some(2050), "/e/f"))
        );
        assert_eq!(
            "nfs://[fe80::1]:20049/e".parse(),
            Ok(t("fe80::1", Some(20049), "/e"))
        );
        assert_eq!("nfs://srv".parse(), Ok(t("srv", None, "/")));
    }

    #[test]
    fn rejects_malformed_targets() {
        assert_eq!("srv".parse::<Target>(), Err(TargetError::RelativePath));
        assert_eq!(
            "srv:export".parse::<Target>(),
            Err(TargetError::RelativePath)
        );
        assert_eq!(":/e".parse::<Target>(), Err(TargetError::MissingHost));
        assert_eq!("nfs://srv:0/e".parse::<Target>(), Err(TargetError::BadPort));
        assert_eq!("nfs://srv:x/e".parse::<Target>(), Err(TargetError::BadPort));
        assert_eq!(
            "[::1:/e".parse::<Target>(),
            Err(TargetError::UnclosedBracket)
        );
    }

    #[test]
    fn display_round_trips() {
        for s in [
            "srv:/e/f",
            "nfs://srv:2049/e",
            "[::1]:/e",
            "nfs://[::1]:1/e",
        ] {
            assert_eq!(s.parse::<Target>().unwrap().to_string(), s);
        }
    }
}
