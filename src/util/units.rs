//! Sizes and durations as people type them on a command line or in a volume attribute.

use std::time::Duration;

/// `512K`, `256M`, `2G` or plain bytes.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    // Kubernetes quantities spell the same binary units `Ki`, `Mi`, `Gi`, `Ti`.
    let s = match s.strip_suffix('i') {
        Some(head) if head.ends_with(['K', 'M', 'G', 'T', 'k', 'm', 'g', 't']) => head,
        _ => s,
    };
    let (num, mult) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_uppercase() {
                'K' => 1u64 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => return Err(format!("{s:?}: use a number with K, M, G or T")),
            };
            (&s[..i], m)
        }
        _ => (s, 1),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (e.g. 512M, 2G)"))?;
    if n.is_nan() || n < 0.0 {
        return Err(format!("{s:?} must not be negative"));
    }
    Ok((n * mult as f64) as u64)
}

/// `500ms`, `30s`, `5m`, `1h` or plain seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let bad = || format!("{s:?} is not a duration (e.g. 30s, 5m, 500ms)");
    let (num, unit) = s
        .find(|c: char| c.is_ascii_alphabetic())
        .map(|i| (&s[..i], &s[i..]))
        .unwrap_or((s, "s"));
    let n: f64 = num.parse().map_err(|_| bad())?;
    if n.is_nan() || n < 0.0 {
        return Err(bad());
    }
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(bad()),
    };
    Duration::try_from_secs_f64(secs).map_err(|_| format!("{s:?} is too long a duration"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_our_suffixes_and_kubernetes_ones() {
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("256Mi"), Ok(256 << 20));
        assert_eq!(parse_size("2Gi"), Ok(2 << 30));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("10Xi").is_err());
        assert!(parse_size("i").is_err());
    }
}
