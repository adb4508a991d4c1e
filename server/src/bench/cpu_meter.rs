//! The machine's busy CPU time over a stretch of a benchmark, from
//! `/proc/stat` (Linux).
//!
//! Throughput on a shared VM swings with the host's load from one sitting
//! to the next; the CPU time the work took swings far less, so the bench
//! prints both. It counts every process on the machine (the database
//! server, the replicas, anything else running), which is what competes
//! for the cores.

use std::time::Duration;

/// Clock ticks per second in `/proc/stat` (`USER_HZ`, 100 on Linux).
const TICKS_PER_SECOND: u64 = 100;

#[derive(Debug, Clone, Copy)]
pub struct CpuMeter {
    /// Busy ticks at the start; `None` where `/proc/stat` cannot be read.
    busy: Option<u64>,
}

impl CpuMeter {
    pub fn start() -> Self {
        CpuMeter { busy: busy_ticks() }
    }

    /// Busy CPU time, summed over all cores, since [`Self::start`]; `None`
    /// where `/proc/stat` cannot be read.
    pub fn busy(&self) -> Option<Duration> {
        let ticks = busy_ticks()?.saturating_sub(self.busy?);
        Some(Duration::from_millis(ticks * 1000 / TICKS_PER_SECOND))
    }
}

/// Ticks every core spent on anything but idling or waiting for I/O.
fn busy_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    parse_busy(stat.lines().next()?)
}

/// `cpu  user nice system idle iowait irq softirq steal guest guest_nice`:
/// guest time is already counted in user, and steal is time the host gave
/// to someone else.
fn parse_busy(line: &str) -> Option<u64> {
    let mut fields = line.split_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    let v: Vec<u64> = fields.map(|f| f.parse().ok()).collect::<Option<_>>()?;
    let [user, nice, system, _idle, _iowait, irq, softirq, ..] = v[..] else {
        return None;
    };
    Some(user + nice + system + irq + softirq)
}

#[cfg(test)]
mod tests {
    #[test]
    fn busy_leaves_out_idle_iowait_and_steal() {
        let line = "cpu  100 5 40 900 30 2 3 50 0 0";
        assert_eq!(super::parse_busy(line), Some(150));
        assert_eq!(super::parse_busy("cpu0 1 2 3 4 5 6 7"), None);
        assert_eq!(super::parse_busy("cpu  1 2"), None);
    }
}
