//! Slows password guessing. After [`ALLOWED`] wrong passwords for one user
//! name within [`WINDOW`], that name's password checks (sign-in form and
//! Basic auth) are refused without running Argon2 until the window has
//! passed since the first of them; a right password clears the count.
//!
//! A check is counted as wrong when it starts ([`Throttle::begin`]) and
//! forgiven when it turns out right: counted only after Argon2 answered,
//! forty guesses sent at once all passed the gate before the first failure
//! was recorded (a hostile trial got 39 checked against an allowance of 10).
//!
//! The same throttle counts per source address too ([`ALLOWED_PER_ADDRESS`]):
//! guesses under random names, each a new name, once ran Argon2 forty
//! times a second and slowed every page 4–7×, and wrote an audit entry
//! each. Behind a proxy the address is the client's as the trusted proxy
//! says (`BATON_TRUSTED_PROXIES`), not the proxy's, so one guesser does not
//! lock every user out.
//!
//! The count lives in each replica's memory: guesses spread over N
//! replicas get N times the allowance, still a few dozen per quarter hour.
//! API tokens are not throttled: 256 random bits cannot be guessed.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub const ALLOWED: u32 = 10;
/// Wrong passwords one source address may try in a [`WINDOW`], whatever
/// the names: a team behind one address mistypes far fewer.
pub const ALLOWED_PER_ADDRESS: u32 = 50;
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

impl Failures {
    fn first() -> Self {
        Failures {
            count: 1,
            since: Instant::now(),
        }
    }
}

impl Throttle {
    pub fn new(allowed: u32, window: Duration) -> Self {
        Throttle {
            allowed,
            window,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// Counts a check of `name`'s password as a wrong one, before it runs:
    /// `Err` with how long to wait when the allowance is used up (nothing
    /// counted then). [`Throttle::succeeded`] takes the count back.
    pub fn begin(&self, name: &str) -> Result<(), Duration> {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let key = key(name);
        if let Some(entry) = failures.get_mut(&key) {
            match self.window.checked_sub(entry.since.elapsed()) {
                Some(left) if !left.is_zero() => {
                    if entry.count >= self.allowed {
                        return Err(left);
                    }
                    entry.count += 1;
                    return Ok(());
                }
                // The window has passed: a new one starts at this check.
                _ => {
                    *entry = Failures::first();
                    return Ok(());
                }
            }
        }
        if failures.len() >= CAPACITY {
            self.make_room(&mut failures);
        }
        // Full of names locked out right now: a new name goes uncounted
        // rather than reopen theirs (clearing the table let anyone who
        // cycled 10,000 names lift every lockout).
        if failures.len() < CAPACITY {
            failures.insert(key, Failures::first());
        }
        Ok(())
    }

    /// Drops the names whose window has passed, then those not locked out.
    fn make_room(&self, failures: &mut HashMap<String, Failures>) {
        failures.retain(|_, f| f.since.elapsed() < self.window);
        if failures.len() >= CAPACITY {
            failures.retain(|_, f| f.count >= self.allowed);
        }
    }

    pub fn succeeded(&self, name: &str) {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        failures.remove(&key(name));
    }

    /// Takes back the one count [`Throttle::begin`] made for a check that
    /// turned out right, leaving the others: for a source address, where
    /// one right password must not wipe a guesser's count.
    pub fn forgive_one(&self, key_of: &str) {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = failures.get_mut(&key(key_of)) {
            entry.count = entry.count.saturating_sub(1);
        }
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
        for _ in 0..3 {
            assert_eq!(throttle.begin("alice"), Ok(()));
        }
        let wait = throttle
            .begin(" Alice ")
            .expect_err("the fourth check is refused");
        assert!(wait <= Duration::from_millis(300));
        assert_eq!(
            throttle.begin("bob"),
            Ok(()),
            "other names are not affected"
        );
        std::thread::sleep(Duration::from_millis(350));
        assert_eq!(throttle.begin("alice"), Ok(()), "the window has passed");
        assert_eq!(throttle.begin("alice"), Ok(()));
        assert_eq!(
            throttle.begin("alice"),
            Ok(()),
            "a new window started at one"
        );
        assert!(throttle.begin("alice").is_err());
    }

    #[test]
    fn checks_in_flight_use_the_allowance_before_any_answer() {
        // Ten checks started at once, none answered yet: the eleventh is
        // refused, not checked.
        let throttle = Throttle::new(10, WINDOW);
        let started = (0..40).filter(|_| throttle.begin("bob").is_ok()).count();
        assert_eq!(started, 10);
    }

    #[test]
    fn a_right_password_clears_the_count() {
        let throttle = Throttle::new(2, WINDOW);
        throttle.begin("alice").unwrap();
        throttle.succeeded("alice");
        throttle.begin("alice").unwrap();
        throttle.begin("alice").unwrap();
        assert!(throttle.begin("alice").is_err());
    }

    #[test]
    fn a_right_password_forgives_only_its_own_count() {
        let throttle = Throttle::new(3, WINDOW);
        for _ in 0..3 {
            throttle.begin("203.0.113.9").unwrap();
        }
        throttle.forgive_one("203.0.113.9");
        throttle.begin("203.0.113.9").unwrap();
        assert!(throttle.begin("203.0.113.9").is_err());
    }

    #[test]
    fn a_full_table_keeps_its_lockouts() {
        let throttle = Throttle::new(2, WINDOW);
        throttle.begin("victim").unwrap();
        throttle.begin("victim").unwrap();
        for i in 0..CAPACITY {
            let _ = throttle.begin(&format!("cycled-{i}"));
        }
        assert!(throttle.begin("victim").is_err(), "still locked out");
    }
}
