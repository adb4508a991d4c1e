//! The machine's busy CPU time over a stretch of a benchmark, from
//! `/proc/stat` (Linux).
//!
//! Throughput on a shared VM swings with the host's load from one sitting
//! to the next; the CPU time the work took swings far less, so the bench
//! prints both. It counts every process on the machine (the database
//! server, the replicas, anything else running), which is what competes
//! for the cores.

use std::collections::HashMap;
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

/// CPU time of some processes over a stretch: those named `postgres` (the
/// database server's, to see when it is the one short of cores) or given
/// by pid (replica processes).
///
/// Read from `/proc/PID/stat` at the start and at each look: a process that
/// began in between counts from zero; one that ended in between counts in
/// the parent that reaped it, if that is counted (PostgreSQL's postmaster
/// reaps its workers), and not at all otherwise. A counted child of a
/// counted parent that ends is counted in both from then on, which the
/// benches avoid: their backends live to the end of the window.
#[derive(Debug, Clone)]
pub struct ProcessCpu {
    name: Option<&'static str>,
    /// Pids looked at, and whether they are counted: a process's name is
    /// read once, so a look reads only the counted ones' stat files.
    known: HashMap<u32, bool>,
    start: HashMap<u32, u64>,
}

impl ProcessCpu {
    /// Every process whose command name is `name`, now or later.
    pub fn named(name: &'static str) -> Self {
        Self::start(Some(name), HashMap::new())
    }

    /// These processes.
    pub fn pids(pids: impl IntoIterator<Item = u32>) -> Self {
        Self::start(None, pids.into_iter().map(|p| (p, true)).collect())
    }

    /// One more process, counted from zero: one started since the start.
    pub fn add(&mut self, pid: u32) {
        self.known.insert(pid, true);
    }

    fn start(name: Option<&'static str>, known: HashMap<u32, bool>) -> Self {
        let mut cpu = ProcessCpu {
            name,
            known,
            start: HashMap::new(),
        };
        cpu.start = cpu.ticks().unwrap_or_default();
        cpu
    }

    /// Their CPU time (user and system, with their reaped children's)
    /// since the start; `None` where `/proc` cannot be read.
    pub fn busy(&mut self) -> Option<Duration> {
        let ticks: u64 = self
            .ticks()?
            .iter()
            .map(|(pid, now)| now.saturating_sub(self.start.get(pid).copied().unwrap_or(0)))
            .sum();
        Some(Duration::from_millis(ticks * 1000 / TICKS_PER_SECOND))
    }

    /// CPU ticks of each counted process and its reaped children, by pid.
    fn ticks(&mut self) -> Option<HashMap<u32, u64>> {
        if self.name.is_some() {
            for entry in std::fs::read_dir("/proc").ok()?.flatten() {
                if let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) {
                    self.known.entry(pid).or_insert(true);
                }
            }
        } else {
            std::fs::metadata("/proc/self/stat").ok()?;
        }
        let mut ticks = HashMap::new();
        for (pid, counted) in self.known.iter_mut().filter(|(_, c)| **c) {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            match parse_process(&stat) {
                Some((name, _)) if self.name.is_some_and(|want| want != name) => *counted = false,
                Some((_, t)) => {
                    ticks.insert(*pid, t);
                }
                None => {}
            }
        }
        Some(ticks)
    }
}

/// `PID (COMM) STATE PPID ...`: the command name, and the CPU ticks of
/// the process and of its children it has reaped (utime, stime, cutime,
/// cstime: the 12th to 15th fields after the name, which may hold spaces
/// and parens, so the fields are counted from its last `)`).
///
/// The children's part is how PostgreSQL's short-lived processes count:
/// an autovacuum or parallel-query worker that ends within the window is
/// gone from `/proc`, but the postmaster reaped it and holds its time.
fn parse_process(stat: &str) -> Option<(&str, u64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let name = stat.get(open + 1..close)?;
    let fields: Vec<&str> = stat.get(close + 1..)?.split_whitespace().collect();
    let mut ticks = 0;
    for field in fields.get(11..15)? {
        // cutime and cstime are signed in the kernel's format.
        ticks += field.parse::<i64>().ok()?.max(0) as u64;
    }
    Some((name, ticks))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_process_line_gives_its_name_and_its_and_its_reaped_childrens_ticks() {
        let stat = "4242 (post gres) x) S 1 4242 4242 0 -1 4194560 1 2 3 4 170 30 5 6 20 0 1 0";
        assert_eq!(super::parse_process(stat), Some(("post gres) x", 211)));
        let negative = "7 (baton) S 1 7 7 0 -1 0 1 2 3 4 10 20 -1 -1 20 0";
        assert_eq!(super::parse_process(negative), Some(("baton", 30)));
        assert_eq!(super::parse_process("4242 (short) S 1 2"), None);
        assert_eq!(super::parse_process("garbage"), None);
    }

    #[test]
    fn busy_leaves_out_idle_iowait_and_steal() {
        let line = "cpu  100 5 40 900 30 2 3 50 0 0";
        assert_eq!(super::parse_busy(line), Some(150));
        assert_eq!(super::parse_busy("cpu0 1 2 3 4 5 6 7"), None);
        assert_eq!(super::parse_busy("cpu  1 2"), None);
    }
}
