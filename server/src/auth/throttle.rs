//! Slows password guessing. After [`ALLOWED`] wrong passwords for one user
//! name within [`WINDOW`], that name's password checks (sign-in form and
//! Basic auth) are refused without running Argon2 until the window has
//! passed since the first of them; a right password clears the count.
//!
//! The count lives in each replica's memory: guesses spread over N
//! replicas get N times the allowance, still a few dozen per quarter hour.
//! API tokens are not throttled: 256 random bits cannot be guessed.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub const ALLOWED: u32 = 10;
pub const WINDOW: Duration = Duration::from_secs(15 * 60);
/// Names tracked at most; an attacker cycling names cannot grow memory
/// past this (the table starts over instead).
const CAPACITY: usize = 10_000;

pub struct Throttle {
    allowed: u32,
    window: Duration,
    failures: Mutex<HashMap<String, Failures>>,
}

struct Failures {
    count: u32,
    since: Instant,
}

impl Throttle {
    pub fn new(allowed: u32, window: Duration) -> Self {
        Throttle {
            allowed,
            window,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// How long `name` must wait before its password is checked again;
    /// `None` when it may be checked now.
    pub fn wait(&self, name: &str) -> Option<Duration> {
        let failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let entry = failures.get(&key(name))?;
        let left = self.window.checked_sub(entry.since.elapsed())?;
        (entry.count >= self.allowed && !left.is_zero()).then_some(left)
    }

    pub fn failed(&self, name: &str) {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if failures.len() >= CAPACITY {
            failures.retain(|_, f| f.since.elapsed() < self.window);
            if failures.len() >= CAPACITY {
                failures.clear();
            }
        }
        let entry = failures.entry(key(name)).or_insert(Failures {
            count: 0,
            since: Instant::now(),
        });
        if entry.since.elapsed() >= self.window {
            *entry = Failures {
                count: 0,
                since: Instant::now(),
            };
        }
        entry.count += 1;
    }

    pub fn succeeded(&self, name: &str) {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        failures.remove(&key(name));
    }
}

/// Names differ from guesses by case and spaces only in the attacker's
/// favour, so they count as one.
fn key(name: &str) -> String {
    name.trim().to_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_refused_after_the_allowance_until_the_window_ends() {
        let throttle = Throttle::new(3, Duration::from_millis(300));
        for _ in 0..2 {
            throttle.failed("alice");
        }
        assert_eq!(throttle.wait("alice"), None, "two of three used");
        throttle.failed(" Alice ");
        let wait = throttle.wait("alice").expect("the third failure closes it");
        assert!(wait <= Duration::from_millis(300));
        assert_eq!(throttle.wait("bob"), None, "other names are not affected");
        std::thread::sleep(Duration::from_millis(350));
        assert_eq!(throttle.wait("alice"), None, "the window has passed");
        throttle.failed("alice");
        assert_eq!(throttle.wait("alice"), None, "a new window starts at one");
    }

    #[test]
    fn a_right_password_clears_the_count() {
        let throttle = Throttle::new(2, WINDOW);
        throttle.failed("alice");
        throttle.succeeded("alice");
        throttle.failed("alice");
        assert_eq!(throttle.wait("alice"), None);
        throttle.failed("alice");
        assert!(throttle.wait("alice").is_some());
    }
}
