//! CPU over exactly the stretch a throughput figure is timed over.
//!
//! A phase's window is known only afterwards, from the runs' stored
//! timestamps (the first submit or round, the last finish), and the
//! bench's own looks at its plans come after it. So the meters are read
//! every [`SAMPLE_EVERY`] on a thread of their own through the phase, and
//! the CPU counted is between the sample before the window and the one
//! after: the whole machine's, PostgreSQL's processes' (whose sum near the
//! machine's core count is where more replicas cannot go faster), the
//! replica processes' and this process's.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::cpu_meter::{CpuMeter, ProcessCpu};
use domain::time::Ts;

/// CPU used since the sampler started, at one moment.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub at: Ts,
    pub machine: Option<Duration>,
    pub postgres: Option<Duration>,
    /// Replicas in processes of their own; zero when they run in this one.
    pub replicas: Option<Duration>,
    /// This process: its sampling and its looks at the plans, and the
    /// replicas when they run in it.
    pub bench: Option<Duration>,
}

impl Sample {
    /// What was used between the last sample at or before `from` and the
    /// first at or after `to`, and how long that was; `None` if the
    /// samples do not surround the window.
    pub fn over(samples: &[Sample], from: Ts, to: Ts) -> Option<(Sample, Duration)> {
        let start = samples.iter().rev().find(|s| s.at.0 <= from.0)?;
        let end = samples.iter().find(|s| s.at.0 >= to.0)?;
        let minus = |a: Option<Duration>, b: Option<Duration>| Some(a?.saturating_sub(b?));
        let used = Sample {
            at: end.at,
            machine: minus(end.machine, start.machine),
            postgres: minus(end.postgres, start.postgres),
            replicas: minus(end.replicas, start.replicas),
            bench: minus(end.bench, start.bench),
        };
        Some((used, (end.at.0 - start.at.0).to_std().ok()?))
    }
}

/// Takes a [`Sample`] at [`Meters::new`], then every [`SAMPLE_EVERY`] on a
/// thread of its own (the reads of `/proc` are blocking) from
/// [`Meters::start`] until [`Sampler::stop`].
pub struct Meters {
    machine: CpuMeter,
    postgres: ProcessCpu,
    replicas: ProcessCpu,
    bench: ProcessCpu,
    samples: Vec<Sample>,
}

pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<Sample>>>,
}

const SAMPLE_EVERY: Duration = Duration::from_millis(50);

impl Sampler {
    /// The samples, the last one taken now.
    pub fn stop(mut self) -> Vec<Sample> {
        self.stop.store(true, Ordering::Relaxed);
        let thread = self.thread.take().expect("stopped only once");
        thread.join().unwrap_or_default()
    }
}

impl Meters {
    /// The meters, with their first sample taken.
    pub fn new() -> Self {
        let mut meters = Meters {
            machine: CpuMeter::start(),
            postgres: ProcessCpu::named("postgres"),
            replicas: ProcessCpu::pids([]),
            bench: ProcessCpu::pids([std::process::id()]),
            samples: Vec::new(),
        };
        meters.sample();
        meters
    }

    fn sample(&mut self) {
        self.samples.push(Sample {
            at: Ts::now(),
            machine: self.machine.busy(),
            postgres: self.postgres.busy(),
            replicas: self.replicas.busy(),
            bench: self.bench.busy(),
        });
    }

    /// Samples from now on, with the replicas' processes (started since the
    /// first sample, so counted from zero).
    pub fn start(mut self, replica_pids: impl IntoIterator<Item = u32>) -> Sampler {
        for pid in replica_pids {
            self.replicas.add(pid);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            loop {
                let done = stopping.load(Ordering::Relaxed);
                self.sample();
                if done {
                    return self.samples;
                }
                std::thread::sleep(SAMPLE_EVERY);
            }
        });
        Sampler {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Sampler {
    /// A bench that failed before [`Sampler::stop`] ends its thread too.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// `used` over `window` as a number of busy cores, or "-" when unknown.
pub fn cores(used: Option<Duration>, window: Duration) -> String {
    match used {
        Some(used) if !window.is_zero() => {
            format!("{:.2}", used.as_secs_f64() / window.as_secs_f64())
        }
        _ => "-".into(),
    }
}
