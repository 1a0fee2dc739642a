//! Medians and units. Throughput is in MB/s with MB = 10^6 bytes (the paper's unit);
//! CPU per byte in CPU seconds per GiB (2^30 bytes).

/// Bytes in a GiB.
pub const GIB: f64 = (1u64 << 30) as f64;

/// The median of `v` (mean of the two middle values for an even count); NaN if empty.
pub fn median(v: &[f64]) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| !x.is_nan()).collect();
    if s.is_empty() {
        return f64::NAN;
    }
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// MB/s for `bytes` in `secs`.
pub fn mb_per_s(bytes: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        bytes as f64 / secs / 1e6
    } else {
        0.0
    }
}

/// CPU seconds per GiB moved.
pub fn cpu_per_gib(cpu_secs: f64, bytes: u64) -> f64 {
    if bytes > 0 {
        cpu_secs / (bytes as f64 / GIB)
    } else {
        f64::NAN
    }
}

/// `1 MiB`, `64 KiB`, `512 B`.
pub fn size_label(n: u64) -> String {
    if n >= 1 << 20 && n % (1 << 20) == 0 {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n % (1 << 10) == 0 {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn units() {
        assert_eq!(mb_per_s(2_000_000, 2.0), 1.0);
        assert_eq!(cpu_per_gib(1.0, 1 << 30), 1.0);
        assert_eq!(size_label(1 << 20), "1 MiB");
        assert_eq!(size_label(4096), "4 KiB");
        assert_eq!(size_label(100), "100 B");
    }
}
