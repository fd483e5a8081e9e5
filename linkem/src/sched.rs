//! The emulator's logic, free of sockets and clocks: for each packet, drop it or hold it until
//! a release time; hand out the packets that are due. Times are nanoseconds on any monotonic
//! clock the caller chooses (a fake one in the tests).

use crate::rng::Rng;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Dist {
    /// netem's default: delay + U(-jitter, +jitter)
    Uniform,
    /// delay + N(0, jitter^2)
    Normal,
}

#[derive(Clone, Debug)]
pub struct Params {
    pub name: String,
    pub queue: u16,
    pub delay_ns: u64,
    pub jitter_ns: u64,
    pub dist: Dist,
    /// probability in [0, 1]
    pub loss: f64,
    /// false: a packet never overtakes the one before it (release times are made monotone)
    pub reorder: bool,
}

/// Lateness histogram bucket upper bounds, microseconds (the last bucket is open).
pub const LATE_BUCKETS_US: [u64; 9] = [10, 50, 100, 250, 500, 1000, 2000, 5000, u64::MAX];

#[derive(Default, Clone, Debug)]
pub struct Counters {
    pub packets: u64,
    pub bytes: u64,
    pub dropped: u64,
    pub released: u64,
    pub max_depth: u64,
    pub late_hist: [u64; 9],
    /// signed: a release ahead of its time counts negative (see `due`'s horizon)
    pub late_sum_ns: i128,
    pub late_max_ns: u64,
    pub early: u64,
    pub early_max_ns: u64,
    pub reordered: u64,
    /// The maxima since the last mark (a snapshot on SIGUSR1): one trial's own worst, where the
    /// lifetime maxima above would carry one trial's stall into every later trial's figures.
    pub mark: Marked,
}

#[derive(Default, Clone, Debug, PartialEq)]
pub struct Marked {
    pub late_max_ns: u64,
    pub early_max_ns: u64,
    pub max_depth: u64,
}

pub struct Direction {
    pub p: Params,
    pub rng: Rng,
    heap: BinaryHeap<Reverse<(u64, u64, u32)>>, // (release time, arrival seq, packet id)
    seq: u64,
    last_release: u64,
    last_released_seq: u64,
    pub c: Counters,
}

pub enum Action {
    Drop,
    /// held until this release time (the event loop only needs to know it is held)
    Hold(#[allow(dead_code)] u64),
}

impl Direction {
    pub fn new(p: Params, seed: u64) -> Direction {
        Direction { p, rng: Rng::new(seed), heap: BinaryHeap::new(), seq: 0, last_release: 0,
                    last_released_seq: 0, c: Counters::default() }
    }

    /// One delay sample in ns (never negative).
    pub fn sample_delay(&mut self) -> u64 {
        let j = self.p.jitter_ns as f64;
        let off = if self.p.jitter_ns == 0 {
            0.0
        } else {
            match self.p.dist {
                Dist::Uniform => self.rng.symmetric(j),
                Dist::Normal => self.rng.normal() * j,
            }
        };
        let d = self.p.delay_ns as f64 + off;
        if d < 0.0 { 0 } else { d.round() as u64 }
    }

    /// A packet arrived at `now`: drop it, or hold it until the returned time.
    pub fn on_packet(&mut self, now: u64, id: u32, len: u32) -> Action {
        self.c.packets += 1;
        self.c.bytes += len as u64;
        if self.rng.chance(self.p.loss) {
            self.c.dropped += 1;
            return Action::Drop;
        }
        let mut at = now + self.sample_delay();
        if !self.p.reorder && at < self.last_release {
            at = self.last_release;
        }
        self.last_release = self.last_release.max(at);
        self.seq += 1;
        self.heap.push(Reverse((at, self.seq, id)));
        self.c.max_depth = self.c.max_depth.max(self.heap.len() as u64);
        self.c.mark.max_depth = self.c.mark.max_depth.max(self.heap.len() as u64);
        Action::Hold(at)
    }

    /// Earliest release time held, if any.
    pub fn next_due(&self) -> Option<u64> {
        self.heap.peek().map(|Reverse((t, _, _))| *t)
    }

    /// Move every packet due by `now + horizon` into `out` (packet ids, in release order).
    ///
    /// The horizon is the timer's expected wake-up latency: the event loop arms its timer that
    /// much ahead of the next release, so releasing what falls due within the horizon lands, on
    /// average, on time rather than one wake-up latency late.
    pub fn due(&mut self, now: u64, horizon: u64, out: &mut Vec<u32>) {
        while let Some(Reverse((t, seq, id))) = self.heap.peek().copied() {
            if t > now + horizon {
                break;
            }
            self.heap.pop();
            if now >= t {
                let late = now - t;
                let us = late / 1000;
                let b = LATE_BUCKETS_US.iter().position(|&u| us < u).unwrap_or(LATE_BUCKETS_US.len() - 1);
                self.c.late_hist[b] += 1;
                self.c.late_sum_ns += late as i128;
                self.c.late_max_ns = self.c.late_max_ns.max(late);
                self.c.mark.late_max_ns = self.c.mark.late_max_ns.max(late);
            } else {
                self.c.early += 1;
                self.c.early_max_ns = self.c.early_max_ns.max(t - now);
                self.c.mark.early_max_ns = self.c.mark.early_max_ns.max(t - now);
                self.c.late_sum_ns -= (t - now) as i128;
            }
            if seq < self.last_released_seq {
                self.c.reordered += 1;
            }
            self.last_released_seq = self.last_released_seq.max(seq);
            self.c.released += 1;
            out.push(id);
        }
    }

    pub fn depth(&self) -> usize {
        self.heap.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(delay_ms: f64, jitter_ms: f64, dist: Dist, loss: f64, reorder: bool) -> Direction {
        Direction::new(Params { name: "t".into(), queue: 0, delay_ns: (delay_ms * 1e6) as u64,
                                jitter_ns: (jitter_ms * 1e6) as u64, dist, loss, reorder }, 42)
    }

    /// Kolmogorov-Smirnov statistic of samples against a CDF.
    fn ks(mut xs: Vec<f64>, cdf: impl Fn(f64) -> f64) -> f64 {
        xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let n = xs.len() as f64;
        xs.iter().enumerate().map(|(i, &x)| {
            let f = cdf(x);
            (f - i as f64 / n).abs().max(((i + 1) as f64 / n - f).abs())
        }).fold(0.0, f64::max)
    }

    fn erf(x: f64) -> f64 {
        // Abramowitz-Stegun 7.1.26, |error| < 1.5e-7
        let t = 1.0 / (1.0 + 0.3275911 * x.abs());
        let y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * (-x * x).exp();
        if x >= 0.0 { y } else { -y }
    }

    const N: usize = 20000;
    // KS critical value at alpha = 0.001: 1.95 / sqrt(n)
    fn ks_crit() -> f64 { 1.95 / (N as f64).sqrt() }

    #[test]
    fn fixed_delay_is_exact() {
        let mut d = dir(25.0, 0.0, Dist::Uniform, 0.0, true);
        for i in 0..100u64 {
            match d.on_packet(i * 1000, i as u32, 1500) {
                Action::Hold(t) => assert_eq!(t, i * 1000 + 25_000_000),
                Action::Drop => panic!("no loss configured"),
            }
        }
    }

    #[test]
    fn uniform_jitter_follows_its_distribution() {
        let mut d = dir(50.0, 10.0, Dist::Uniform, 0.0, true);
        let xs: Vec<f64> = (0..N).map(|_| d.sample_delay() as f64 / 1e6).collect();
        let stat = ks(xs, |x| ((x - 40.0) / 20.0).clamp(0.0, 1.0));
        assert!(stat < ks_crit(), "KS {stat} >= {}", ks_crit());
    }

    #[test]
    fn normal_jitter_follows_its_distribution() {
        let mut d = dir(50.0, 5.0, Dist::Normal, 0.0, true);
        let xs: Vec<f64> = (0..N).map(|_| d.sample_delay() as f64 / 1e6).collect();
        let stat = ks(xs, |x| 0.5 * (1.0 + erf((x - 50.0) / (5.0 * 2f64.sqrt()))));
        assert!(stat < ks_crit(), "KS {stat} >= {}", ks_crit());
    }

    #[test]
    fn a_wrong_distribution_is_rejected_by_the_same_test() {
        // the KS check has teeth: uniform samples are not normal with the same sd
        let mut d = dir(50.0, 10.0, Dist::Uniform, 0.0, true);
        let xs: Vec<f64> = (0..N).map(|_| d.sample_delay() as f64 / 1e6).collect();
        let sd = 10.0 / 3f64.sqrt();
        let stat = ks(xs, |x| 0.5 * (1.0 + erf((x - 50.0) / (sd * 2f64.sqrt()))));
        assert!(stat > ks_crit());
    }

    #[test]
    fn loss_is_binomial_within_three_sigma() {
        for &p in &[0.001, 0.01, 0.05, 0.10] {
            let mut d = dir(0.0, 0.0, Dist::Uniform, p, true);
            let n = 200_000u64;
            let drops = (0..n).filter(|&i| matches!(d.on_packet(i, i as u32, 100), Action::Drop)).count() as f64;
            let (mean, sd) = (n as f64 * p, (n as f64 * p * (1.0 - p)).sqrt());
            assert!((drops - mean).abs() <= 3.0 * sd, "p={p}: {drops} drops, expected {mean} +- {}", 3.0 * sd);
            assert_eq!(d.c.dropped as f64, drops);
        }
    }

    #[test]
    fn no_reorder_keeps_arrival_order_and_reorder_does_not() {
        for &reorder in &[false, true] {
            let mut d = dir(10.0, 5.0, Dist::Uniform, 0.0, reorder);
            let mut out = vec![];
            let mut now = 0u64;
            for i in 0..5000u32 {
                d.on_packet(now, i, 1500);
                now += 100_000; // a packet every 0.1 ms, far closer than the jitter
                d.due(now, 0, &mut out);
            }
            d.due(u64::MAX, 0, &mut out);
            assert_eq!(out.len(), 5000);
            let in_order = out.windows(2).all(|w| w[0] < w[1]);
            assert_eq!(in_order, !reorder, "reorder={reorder}");
            assert_eq!(d.c.reordered > 0, reorder);
        }
    }

    #[test]
    fn due_releases_exactly_what_is_due_and_measures_lateness() {
        let mut d = dir(1.0, 0.0, Dist::Uniform, 0.0, true);
        d.on_packet(0, 1, 1500);
        d.on_packet(500_000, 2, 1500);
        assert_eq!(d.next_due(), Some(1_000_000));
        let mut out = vec![];
        d.due(999_999, 0, &mut out);
        assert!(out.is_empty());
        d.due(1_020_000, 0, &mut out); // 20 us late
        assert_eq!(out, vec![1]);
        assert_eq!(d.c.late_hist[1], 1); // 10..50 us bucket
        d.due(1_490_000, 10_000, &mut out); // within the horizon: released 10 us early
        assert_eq!(out, vec![1, 2]);
        assert_eq!((d.c.early, d.c.early_max_ns), (1, 10_000));
        assert_eq!((d.c.released, d.depth()), (2, 0));
        assert_eq!(d.c.max_depth, 2);
    }

    #[test]
    fn the_mark_holds_the_worst_since_it_was_taken_not_since_start() {
        let mut d = dir(1.0, 0.0, Dist::Uniform, 0.0, true);
        let mut out = vec![];
        d.on_packet(0, 1, 1500);
        d.due(2_001_000_000, 0, &mut out); // a 2 s stall (kill -STOP)
        assert_eq!(d.c.mark.late_max_ns, 2_000_000_000);
        d.c.mark = Marked::default(); // a snapshot: the trial with the stall ends here
        d.on_packet(3_000_000_000, 2, 1500);
        d.due(3_001_000_500, 0, &mut out); // 0.5 us late
        assert_eq!(d.c.mark, Marked { late_max_ns: 500, early_max_ns: 0, max_depth: 1 });
        assert_eq!(d.c.late_max_ns, 2_000_000_000); // the lifetime figure keeps it
    }

    #[test]
    fn same_seed_same_stream() {
        let mut a = dir(10.0, 3.0, Dist::Normal, 0.05, true);
        let mut b = dir(10.0, 3.0, Dist::Normal, 0.05, true);
        for i in 0..1000u64 {
            let x = matches!(a.on_packet(i, i as u32, 1), Action::Drop);
            let y = matches!(b.on_packet(i, i as u32, 1), Action::Drop);
            assert_eq!(x, y);
        }
        assert_eq!(a.next_due(), b.next_due());
    }
}
