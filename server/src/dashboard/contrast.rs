//! Proof that every status badge is readable: the text and background
//! colours the compiled stylesheet gives each status reach WCAG AA (4.5:1)
//! contrast. Tailwind's palette is OKLCH, so colours are converted to sRGB
//! luminance here, following the WCAG 2 formula.

#![cfg(test)]

use app::components::status::task_status_class;
use domain::model::TaskStatus;

use super::STYLESHEET;

/// The colour a one-colour utility rule sets, as relative luminance.
fn luminance_of(class: &str) -> f64 {
    if class == "text-white" {
        return 1.0;
    }
    let rule = STYLESHEET
        .split(&format!(".{class} {{"))
        .nth(1)
        .unwrap_or_else(|| panic!("the stylesheet has no rule for .{class}"));
    let oklch = rule
        .split("oklch(")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .unwrap_or_else(|| panic!(".{class} is not an OKLCH colour"));
    let parts: Vec<f64> = oklch
        .split_whitespace()
        .map(|p| p.trim_end_matches('%').parse().expect("a number"))
        .collect();
    oklch_luminance(parts[0] / 100.0, parts[1], parts[2])
}

/// OKLCH → linear sRGB (Björn Ottosson's OKLab matrices) → luminance.
fn oklch_luminance(l: f64, c: f64, hue: f64) -> f64 {
    let (a, b) = (c * hue.to_radians().cos(), c * hue.to_radians().sin());
    let l_ = (l + 0.396_337_777_4 * a + 0.215_803_757_3 * b).powi(3);
    let m_ = (l - 0.105_561_345_8 * a - 0.063_854_172_8 * b).powi(3);
    let s_ = (l - 0.089_484_177_5 * a - 1.291_485_548_0 * b).powi(3);
    let r = 4.076_741_662_1 * l_ - 3.307_711_591_3 * m_ + 0.230_969_929_2 * s_;
    let g = -1.268_438_004_6 * l_ + 2.609_757_401_1 * m_ - 0.341_319_396_5 * s_;
    let bl = -0.004_196_086_3 * l_ - 0.703_418_614_7 * m_ + 1.707_614_701_0 * s_;
    let clamp = |x: f64| x.clamp(0.0, 1.0);
    0.2126 * clamp(r) + 0.7152 * clamp(g) + 0.0722 * clamp(bl)
}

fn contrast(a: f64, b: f64) -> f64 {
    (a.max(b) + 0.05) / (a.min(b) + 0.05)
}

#[test]
fn every_status_badge_passes_wcag_aa() {
    for status in TaskStatus::ALL {
        let classes = task_status_class(status);
        let pick = |prefix: &str| {
            classes
                .split_whitespace()
                .find(|c| c.starts_with(prefix))
                .unwrap_or_else(|| panic!("{status} has no {prefix} class"))
        };
        let ratio = contrast(luminance_of(pick("text-")), luminance_of(pick("bg-")));
        assert!(ratio >= 4.5, "{status}: contrast {ratio:.2} is below 4.5:1");
    }
}

#[test]
fn the_conversion_matches_known_colours() {
    // Tailwind's white and black are oklch(100% 0 0) and oklch(0% 0 0).
    assert!((oklch_luminance(1.0, 0.0, 0.0) - 1.0).abs() < 1e-3);
    assert!(oklch_luminance(0.0, 0.0, 0.0).abs() < 1e-9);
    assert!((contrast(1.0, 0.0) - 21.0).abs() < 1e-9);
}
