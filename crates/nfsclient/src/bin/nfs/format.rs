//! Text output of `nfs ls -l` and `nfs stat`.

use nfsclient::nfs3::{Fattr3, Ftype3, NfsTime3};

/// `ls -l`'s type letter and permission string, e.g. `drwxr-xr-x`.
pub(crate) fn mode_string(a: &Fattr3) -> String {
    let t = match a.ftype {
        Ftype3::NF3DIR => 'd',
        Ftype3::NF3LNK => 'l',
        Ftype3::NF3BLK => 'b',
        Ftype3::NF3CHR => 'c',
        Ftype3::NF3SOCK => 's',
        Ftype3::NF3FIFO => 'p',
        _ => '-',
    };
    let mut s = String::with_capacity(10);
    s.push(t);
    let m = a.mode;
    for (shift, special, set_char) in [(6, 0o4000, 's'), (3, 0o2000, 's'), (0, 0o1000, 't')] {
        let bits = (m >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        let x = bits & 1 != 0;
        s.push(match (m & special != 0, x) {
            (true, true) => set_char,
            (true, false) => set_char.to_ascii_uppercase(),
            (false, true) => 'x',
            (false, false) => '-',
        });
    }
    s
}

/// `nfstime3` as UTC `YYYY-MM-DD HH:MM:SS.nnnnnnnnn`.
pub(crate) fn time_string(t: NfsTime3) -> String {
    let secs = u64::from(t.seconds);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, mo, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{mo:02}-{d:02} {:02}:{:02}:{:02}.{:09}",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        t.nseconds
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian
/// (H. Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// `nfs stat` output.
pub(crate) fn stat_text(name: &str, a: &Fattr3) -> String {
    format!(
        "  File: {name}\n  Type: {:?}  Mode: {} ({:04o})\n  Size: {}  Used: {}  Links: {}\n   Uid: {}  Gid: {}\n  Fsid: {:#x}  Fileid: {}\n  Rdev: {},{}\nAccess: {}\nModify: {}\nChange: {}\n",
        a.ftype,
        mode_string(a),
        a.mode & 0o7777,
        a.size,
        a.used,
        a.nlink,
        a.uid,
        a.gid,
        a.fsid,
        a.fileid,
        a.rdev.specdata1,
        a.rdev.specdata2,
        time_string(a.atime),
        time_string(a.mtime),
        time_string(a.ctime),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(
            time_string(NfsTime3 {
                seconds: 1_700_000_000,
                nseconds: 5
            }),
            "2023-11-14 22:13:20.000000005"
        );
    }
}
