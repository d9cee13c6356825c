//! Round-trip recording: HdrHistograms in microseconds of the schedule-corrected latency (from
//! the instant a call was due to its answer) and of the service time (from the request leaving
//! to its answer), plus counts of good and failed calls.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use hdrhistogram::Histogram;

/// Highest latency recorded as is (one hour); longer ones are clamped to it.
const HIGHEST_US: u64 = 3_600_000_000;

/// Shared by every call task; each records once, under a short lock.
#[derive(Debug)]
pub struct Recorder {
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    corrected: Histogram<u64>,
    service: Histogram<u64>,
    errors: BTreeMap<String, u64>,
}

/// Percentiles of one histogram, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Percentiles {
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Largest value.
    pub max: u64,
}

/// What a run recorded.
#[derive(Debug, Clone)]
pub struct Summary {
    /// Calls answered with the expected echo.
    pub ok: u64,
    /// Calls that failed, any reason.
    pub errors: u64,
    /// Failure reasons with counts.
    pub reasons: BTreeMap<String, u64>,
    /// Due-to-answer latency of good calls.
    pub corrected: Percentiles,
    /// Send-to-answer latency of good calls.
    pub service: Percentiles,
}

/// A histogram of µs from 1 µs to one hour, three significant digits.
pub(crate) fn histogram() -> Histogram<u64> {
    // Constant bounds that HdrHistogram accepts.
    Histogram::new_with_bounds(1, HIGHEST_US, 3).expect("valid bounds")
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            inner: Mutex::new(Inner {
                corrected: histogram(),
                service: histogram(),
                errors: BTreeMap::new(),
            }),
        }
    }
}

/// `d` in whole µs, within the histograms' bounds.
pub(crate) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros())
        .unwrap_or(u64::MAX)
        .clamp(1, HIGHEST_US)
}

impl Summary {
    /// The latency fields of a JSON line: `p50_us` … `max_us` of the schedule-corrected latency,
    /// `service_p50_us` and `service_p99_us`.
    pub fn latency_fields(&self, line: &mut serde_json::Value) {
        let c = &self.corrected;
        for (k, v) in [
            ("p50_us", c.p50),
            ("p90_us", c.p90),
            ("p99_us", c.p99),
            ("p999_us", c.p999),
            ("max_us", c.max),
            ("service_p50_us", self.service.p50),
            ("service_p99_us", self.service.p99),
        ] {
            line[k] = serde_json::json!(v);
        }
    }

    /// The same for people, in ms: `<corrected> p50 …, max … (<service> p50 …, p99 …)`.
    pub fn latency_text(&self, corrected: &str, service: &str) -> String {
        let ms = |us: u64| us as f64 / 1000.0;
        let c = &self.corrected;
        format!(
            "{corrected} p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms, p99.9 {:.3} ms, max {:.3} ms ({service} p50 {:.3} ms, p99 {:.3} ms)",
            ms(c.p50),
            ms(c.p90),
            ms(c.p99),
            ms(c.p999),
            ms(c.max),
            ms(self.service.p50),
            ms(self.service.p99),
        )
    }
}

impl Recorder {
    /// A good call: due-to-answer `corrected`, send-to-answer `service`.
    pub fn ok(&self, corrected: Duration, service: Duration) {
        let mut inner = self.lock();
        inner.corrected.saturating_record(micros(corrected));
        inner.service.saturating_record(micros(service));
    }

    /// A failed call and why.
    pub fn error(&self, reason: String) {
        *self.lock().errors.entry(reason).or_default() += 1;
    }

    /// Everything recorded so far.
    pub fn summary(&self) -> Summary {
        let inner = self.lock();
        Summary {
            ok: inner.corrected.len(),
            errors: inner.errors.values().sum(),
            reasons: inner.errors.clone(),
            corrected: percentiles(&inner.corrected),
            service: percentiles(&inner.service),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn percentiles(h: &Histogram<u64>) -> Percentiles {
    Percentiles {
        p50: h.value_at_quantile(0.50),
        p90: h.value_at_quantile(0.90),
        p99: h.value_at_quantile(0.99),
        p999: h.value_at_quantile(0.999),
        max: h.max(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_counts() {
        let r = Recorder::default();
        for us in 1..=1000 {
            r.ok(Duration::from_micros(us), Duration::from_micros(us / 2));
        }
        r.error("HTTP 409 no_page".into());
        r.error("HTTP 409 no_page".into());
        let s = r.summary();
        assert_eq!((s.ok, s.errors), (1000, 2));
        assert_eq!(s.reasons["HTTP 409 no_page"], 2);
        assert_eq!(s.corrected.p50, 500);
        assert_eq!(s.corrected.p99, 990);
        assert_eq!(s.corrected.max, 1000);
        assert!(s.service.p50 <= 250);
    }
}
