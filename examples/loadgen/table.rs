//! The rows of the printed table and how they are printed.

use std::collections::BTreeMap;
use std::time::Duration;

/// One line of the table.
pub(crate) struct Row {
    workload: &'static str,
    figure: String,
    value: String,
    floor: String,
    ratio: String,
    target: &'static str,
}

pub(crate) fn row(
    workload: &'static str,
    figure: impl Into<String>,
    value: impl Into<String>,
) -> Row {
    Row {
        workload,
        figure: figure.into(),
        value: value.into(),
        floor: String::new(),
        ratio: String::new(),
        target: "",
    }
}

impl Row {
    pub(crate) fn against(
        mut self,
        floor: impl Into<String>,
        ratio: f64,
        target: &'static str,
    ) -> Self {
        self.floor = floor.into();
        self.ratio = format!("{ratio:.2}");
        self.target = target;
        self
    }
    pub(crate) fn target(mut self, target: &'static str) -> Self {
        self.target = target;
        self
    }
}

pub(crate) fn micros(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

/// A duration in the unit that suits it (W6's waits range from microseconds to seconds).
pub(crate) fn human(d: Duration) -> String {
    if d >= Duration::from_secs(1) {
        format!("{:.2} s", d.as_secs_f64())
    } else if d >= Duration::from_millis(1) {
        format!("{:.1} ms", d.as_secs_f64() * 1e3)
    } else {
        micros(d)
    }
}

pub(crate) fn print_table(rows: &[Row]) {
    let header = ["workload", "figure", "value", "floor", "ratio", "target"];
    let cells: Vec<[&str; 6]> = rows
        .iter()
        .map(|r| {
            [
                r.workload,
                r.figure.as_str(),
                r.value.as_str(),
                r.floor.as_str(),
                r.ratio.as_str(),
                r.target,
            ]
        })
        .collect();
    let mut widths = BTreeMap::new();
    for (i, h) in header.iter().enumerate() {
        let widest = cells
            .iter()
            .map(|c| c[i].chars().count())
            .max()
            .unwrap_or(0);
        widths.insert(i, widest.max(h.len()));
    }
    let line = |cols: [&str; 6]| {
        let padded: Vec<String> = cols
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths[&i]))
            .collect();
        println!("| {} |", padded.join(" | "));
    };
    println!();
    line(header);
    let rule: Vec<String> = (0..6).map(|i| "-".repeat(widths[&i])).collect();
    println!("|-{}-|", rule.join("-|-"));
    for c in cells {
        line(c);
    }
}
