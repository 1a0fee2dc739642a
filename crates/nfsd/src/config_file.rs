//! The configuration file (`/etc/nfsd-rs.conf`, or `--config FILE`): the command
//! line's settings, one per line, read before the command line, which wins.
//!
//! ```text
//! # /etc/nfsd-rs.conf
//! exports = /etc/exports
//! max-memory = 2G
//! metrics = 127.0.0.1:9750
//! no-nlm = true
//! ```
//!
//! A line is `NAME = VALUE`, NAME a long option of `nfsd --help` without its
//! dashes; an option without a value (a flag) takes `true` or `false`. Blank lines
//! and lines starting with `#` are skipped. The value is the rest of the line, spaces
//! around it trimmed (no quoting). Which names exist is the binary's to check (it
//! knows its options); this module only reads the lines.

use std::fmt;
use std::path::Path;

/// The default file, read when it exists and `--config` does not name another.
pub const DEFAULT_PATH: &str = "/etc/nfsd-rs.conf";

/// One setting: its name, its value and the line it is on (from 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// The option's long name, without dashes.
    pub name: String,
    /// Its value as written.
    pub value: String,
    /// Where it is.
    pub line: usize,
}

/// A line that is not a setting, or a file that cannot be read.
#[derive(Debug)]
pub struct ConfigError {
    /// The file.
    pub path: String,
    /// The line (from 1), if the error is on one.
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{l}: {}", self.path, self.message),
            None => write!(f, "{}: {}", self.path, self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

/// The settings of `text` (read from `path`, for errors), in file order.
pub fn parse(path: &str, text: &str) -> Result<Vec<Setting>, ConfigError> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let err = |message: String| ConfigError {
            path: path.to_string(),
            line: Some(i + 1),
            message,
        };
        let (name, value) = line
            .split_once('=')
            .ok_or_else(|| err(format!("{line:?} is not NAME = VALUE")))?;
        let name = name.trim();
        let valid = name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if name.is_empty() || name.starts_with('-') || !valid {
            return Err(err(format!(
                "{name:?} is not an option name (as --NAME, without the dashes)"
            )));
        }
        out.push(Setting {
            name: name.to_string(),
            value: value.trim().to_string(),
            line: i + 1,
        });
    }
    Ok(out)
}

/// Reads and parses the file at `path`.
pub fn load(path: &Path) -> Result<Vec<Setting>, ConfigError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        path: shown.clone(),
        line: None,
        message: e.to_string(),
    })?;
    parse(&shown, &text)
}

/// The value of a flag: `true` or `false` (also `yes`/`no`, `1`/`0`, `on`/`off`).
pub fn flag_value(s: &Setting) -> Result<bool, String> {
    match s.value.to_ascii_lowercase().as_str() {
        "true" | "yes" | "1" | "on" => Ok(true),
        "false" | "no" | "0" | "off" => Ok(false),
        v => Err(format!(
            "line {}: {}: {v:?} is not true or false",
            s.line, s.name
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_comments_and_blank_lines() {
        let text = "# a comment\n\n exports = /etc/exports \nmax-memory=2G\nno-nlm = true\nidmap-domain =\n";
        let s = parse("f", text).unwrap();
        let pairs: Vec<(&str, &str, usize)> = s
            .iter()
            .map(|s| (s.name.as_str(), s.value.as_str(), s.line))
            .collect();
        assert_eq!(
            pairs,
            [
                ("exports", "/etc/exports", 3),
                ("max-memory", "2G", 4),
                ("no-nlm", "true", 5),
                ("idmap-domain", "", 6)
            ]
        );
        assert_eq!(flag_value(&s[2]), Ok(true));
        assert!(flag_value(&s[1]).is_err());
    }

    #[test]
    fn a_line_that_is_not_a_setting_is_named() {
        let e = parse("/etc/nfsd-rs.conf", "bind = 0.0.0.0\nmax memory 2G\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "/etc/nfsd-rs.conf:2: \"max memory 2G\" is not NAME = VALUE"
        );
        let e = parse("f", "--bind = ::\n").unwrap_err();
        assert_eq!(e.line, Some(1));
        assert!(load(Path::new("/nonexistent/nfsd-rs.conf")).is_err());
    }
}
