//! The kernel's CPU list format (`0-3,8,10-11`), as in `/sys/devices/system/cpu/isolated`, `smp_affinity_list`,
//! `thread_siblings_list` and the `isolcpus=` boot parameter (Documentation/admin-guide/kernel-parameters.rst,
//! "cpu lists"). `isolcpus=` may carry flags first (`isolcpus=nohz,domain,2-3`); those are skipped.

/// Parses a CPU list; `isolcpus=` flags and empty items are skipped, anything else malformed yields `None`.
pub fn parse(text: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for item in text.trim().split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if matches!(item, "nohz" | "domain" | "managed_irq") {
            continue; // isolcpus flags
        }
        match item.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.split(':').next()?.parse().ok()?);
                if a > b {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(item.parse().ok()?),
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    Some(cpus)
}

/// Formats CPUs back into the kernel's list form, ranges collapsed.
pub fn format(cpus: &[usize]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        out.push(if start == end { start.to_string() } else { format!("{start}-{end}") });
        i += 1;
    }
    if out.is_empty() {
        "(none)".to_owned()
    } else {
        out.join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_and_format() {
        assert_eq!(parse("0-3,8,10-11\n"), Some(vec![0, 1, 2, 3, 8, 10, 11]));
        assert_eq!(parse("nohz,domain,2-3"), Some(vec![2, 3]));
        assert_eq!(parse(""), Some(vec![]));
        assert_eq!(parse("3-1"), None);
        assert_eq!(parse("x1"), None);
        assert_eq!(parse("x"), None);
        assert_eq!(format(&[11, 0, 1, 2, 3, 8, 10]), "0-3,8,10-11");
        assert_eq!(format(&[]), "(none)");
    }
}
