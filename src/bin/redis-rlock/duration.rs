//! Durations on the command line: `500ms`, `10s`, `2m`, `1h`, `1.5s`; a bare number is seconds.
//!
//! Written here rather than taken from `humantime`: four units and a decimal number are all
//! the command needs, and the messages can say exactly what is accepted.

use std::time::Duration;

/// What every duration message ends with, so a mistake shows how to write it right.
const FORMAT: &str = "write a number with a unit: 500ms, 10s, 2m, 1h (a bare number is seconds)";

/// Parses one duration. Rounds to whole milliseconds, the precision Redis keeps.
pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    if number.is_empty() {
        return Err(format!("{text:?} does not start with a number; {FORMAT}"));
    }
    let millis_per_unit: f64 = match unit.trim() {
        "ms" => 1.0,
        "" | "s" => 1_000.0,
        "m" => 60_000.0,
        "h" => 3_600_000.0,
        other => return Err(format!("unknown unit {other:?}; {FORMAT}")),
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{number:?} is not a number; {FORMAT}"))?;
    let millis = (value * millis_per_unit).round();
    // 2^52 ms is the library's upper bound for every duration (about 142,000 years); refusing
    // more here keeps the conversion below exact and the message about the argument.
    if !millis.is_finite() || millis > (1u64 << 52) as f64 {
        return Err(format!("{text:?} is too long"));
    }
    if value > 0.0 && millis == 0.0 {
        return Err(format!("{text:?} is shorter than a millisecond"));
    }
    Ok(Duration::from_millis(millis as u64))
}

/// Like [`parse`], and zero is refused (a lease or a grace period of nothing).
pub fn parse_positive(text: &str) -> Result<Duration, String> {
    let duration = parse(text)?;
    if duration.is_zero() {
        return Err("must be more than zero".into());
    }
    Ok(duration)
}

/// Shows a duration for people: `850ms`, `12.3s`, `4m05s`, `2h10m`.
pub fn show(duration: Duration) -> String {
    let ms = duration.as_millis();
    if ms < 1_000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{}.{}s", ms / 1_000, ms % 1_000 / 100)
    } else if ms < 3_600_000 {
        format!("{}m{:02}s", ms / 60_000, ms % 60_000 / 1_000)
    } else {
        format!("{}h{:02}m", ms / 3_600_000, ms % 3_600_000 / 60_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_bare_numbers() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1_500)));
        assert_eq!(parse("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3_600)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse(" 3 s "), Ok(Duration::from_secs(3)));
    }

    #[test]
    fn mistakes_are_explained() {
        for bad in ["", "s", "ten", "5x", "-1s", "1..2s", "1e3", "0.1ms"] {
            let err = parse(bad).expect_err(bad);
            assert!(!err.is_empty(), "{bad}");
        }
        assert!(parse("5 days").unwrap_err().contains("unknown unit"));
        assert!(parse("99999999999999999h")
            .unwrap_err()
            .contains("too long"));
        assert!(parse_positive("0s").is_err());
        assert!(parse_positive("1ms").is_ok());
    }

    #[test]
    fn shown_for_people() {
        assert_eq!(show(Duration::from_millis(850)), "850ms");
        assert_eq!(show(Duration::from_millis(12_345)), "12.3s");
        assert_eq!(show(Duration::from_secs(245)), "4m05s");
        assert_eq!(show(Duration::from_secs(7_800)), "2h10m");
    }
}
