//! The emulator's logic, free of sockets and clocks: for each packet, drop it or hold it until
//! a release time; hand out the packets that are due. Times are nanoseconds on any monotonic
//! clock the caller chooses (a fake one in the tests).

use crate::aqm::{Aqm, Kind, Pkt};
use crate::rng::Rng;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Bytes one delivery opportunity of a trace carries (Mahimahi's MTU-sized opportunity).
pub const OPPORTUNITY_BYTES: u32 = 1500;

/// A Mahimahi link trace: one millisecond timestamp per 1500-byte delivery opportunity, looping
/// with the last timestamp as its period. Packets wait in a droptail queue of `limit` packets;
/// an opportunity carries up to 1500 bytes of the queue's head (a larger packet spans several);
/// an opportunity that finds the queue empty, or what is left of one when it empties, is lost.
#[derive(Clone, Debug)]
pub struct Trace {
    pub path: String,
    /// opportunity offsets within one period, ms, non-decreasing
    pub ms: Vec<u64>,
    /// the period, ms (the last timestamp, > 0)
    pub period_ms: u64,
    /// droptail queue limit, packets
    pub limit: usize,
}

impl Trace {
    /// A trace file's text (the format's rules; the Python side checks the same before any run).
    pub fn parse(path: &str, text: &str, limit: usize) -> Result<Trace, String> {
        let mut ms = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let t = line.trim();
            if t.is_empty() {
                continue;
            }
            let v: u64 = t.parse().map_err(|_| format!("{path}: line {}: '{t}' is not a whole number of milliseconds", i + 1))?;
            if let Some(&last) = ms.last() {
                if v < last {
                    return Err(format!("{path}: line {}: {v} is before the line above ({last}); timestamps never decrease", i + 1));
                }
            }
            ms.push(v);
        }
        let period_ms = *ms.last().ok_or_else(|| format!("{path}: no timestamps"))?;
        if period_ms == 0 {
            return Err(format!("{path}: the trace lasts 0 ms; its last timestamp is its period and must be > 0"));
        }
        if limit == 0 {
            return Err(format!("{path}: a queue of 0 packets"));
        }
        Ok(Trace { path: path.to_string(), ms, period_ms, limit })
    }
}

/// A trace direction's state: its place in the trace, its counters (its queue is the direction's
/// bottleneck queue, `Direction::q`).
#[derive(Default, Clone, Debug)]
pub struct TraceState {
    /// the trace's time zero (the monotonic ns of its first period's start)
    pub epoch_ns: u64,
    cycle: u64,
    idx: usize,
    pub rewinds: u64,
    /// packets refused by the full queue (the droptail's own drops, apart from random loss)
    pub queue_drops: u64,
    /// bytes the opportunities carried out of the queue
    pub served_bytes: u64,
    /// opportunities passed (used, partly used or lost) since the epoch
    pub opportunities: u64,
    /// of those, the ones that found the queue empty (lost whole): a sender that does not keep the
    /// queue full (a verification's stream short of CPU) shows here, not as the trace's fault
    pub idle_opportunities: u64,
    pub max_qdepth: u64,
}

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
    /// a rate that follows a trace (the packet waits for its opportunities, then for its delay)
    pub trace: Option<Trace>,
    /// a constant rate of linkem's own, bits per second (the packet waits its turn at this rate,
    /// then for its delay): the bottleneck is linkem's, under its queue discipline
    pub rate_bps: Option<u64>,
    /// the bottleneck queue's discipline (a trace's or a rate's queue; droptail by default)
    pub aqm: Kind,
    /// the bottleneck queue's limit in packets, for a rate (a trace's is the trace's `limit`)
    pub limit: usize,
    /// mark ECN-capable packets CE where the discipline would drop them
    pub ecn: bool,
    /// origins' own paths: a packet from or to one of these addresses (IPv6's 16 bytes, IPv4 mapped)
    /// waits this much more (ns) after its delay; packets of different paths may overtake each other,
    /// those of one path keep their order as the direction does
    pub paths: Vec<([u8; 16], u64)>,
}

impl Params {
    /// A direction with delay, jitter and loss only (no bottleneck of linkem's).
    pub fn plain(name: &str, queue: u16, delay_ns: u64, jitter_ns: u64, dist: Dist, loss: f64, reorder: bool) -> Params {
        Params { name: name.into(), queue, delay_ns, jitter_ns, dist, loss, reorder, trace: None, rate_bps: None,
                 aqm: Kind::DropTail, limit: 0, ecn: false, paths: Vec::new() }
    }

    /// Whether packets wait in a queue of linkem's (a trace's or a rate's) before their delay.
    pub fn has_bottleneck(&self) -> bool {
        self.trace.is_some() || self.rate_bps.is_some()
    }

    fn queue_limit(&self) -> usize {
        self.trace.as_ref().map_or(self.limit, |tr| tr.limit)
    }
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
    /// arrivals by their ECN codepoint: Not-ECT, ECT(1), ECT(0), CE (whether the endpoints ask for ECN)
    pub ecn: [u64; 4],
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
    /// the bottleneck queue (used where the direction has a trace or a rate)
    pub q: Aqm,
    /// the packet being sent: dequeued, bytes of it still to send (a trace's opportunities)
    head: Option<Pkt>,
    head_left: u32,
    /// a rate's link is busy sending until this time
    free_ns: u64,
    /// packets the discipline dropped after their arrival (at the head, or the fattest flow's):
    /// their verdicts are the event loop's to send (take_drops)
    later_drops: Vec<u32>,
    /// packets to release marked CE (ECN), by id
    marked: Vec<u32>,
    heap: BinaryHeap<Reverse<(u64, u64, u32, u16)>>, // (release time, arrival seq, packet id, path)
    seq: u64,
    last_release: u64,
    /// per path (0: none; 1 + each of p.paths): the latest arrival released, for counting reorders
    last_released_seq: Vec<u64>,
    /// packets each of p.paths carried (arrivals)
    pub path_packets: Vec<u64>,
    pub c: Counters,
    pub t: TraceState,
}

pub enum Action {
    Drop,
    /// waiting in a trace's queue for its delivery opportunities
    Queued,
    /// held until this release time (the event loop only needs to know it is held)
    Hold(#[allow(dead_code)] u64),
}

impl Direction {
    pub fn new(p: Params, seed: u64) -> Direction {
        let q = Aqm::new(p.aqm, p.queue_limit(), p.ecn, seed ^ 0x5DEE_CE66);
        let n = p.paths.len();
        Direction { p, rng: Rng::new(seed), q, head: None, head_left: 0, free_ns: 0, later_drops: Vec::new(),
                    marked: Vec::new(), heap: BinaryHeap::new(), seq: 0, last_release: 0,
                    last_released_seq: vec![0; n + 1], path_packets: vec![0; n], c: Counters::default(),
                    t: TraceState::default() }
    }

    /// Packets waiting in the bottleneck (its queue and the one being sent).
    fn backlog(&self) -> usize {
        self.q.len() + self.head.is_some() as usize
    }

    /// The drops decided after the packets' arrival, since the last call (their verdicts).
    pub fn take_drops(&mut self, out: &mut Vec<(u16, u32)>) {
        let queue = self.p.queue;
        out.extend(self.later_drops.drain(..).map(|id| (queue, id)));
    }

    /// Whether a released packet is to carry the CE mark (forgets it: asked once, at its release).
    pub fn take_mark(&mut self, id: u32) -> bool {
        match self.marked.iter().position(|&m| m == id) {
            Some(i) => {
                self.marked.swap_remove(i);
                true
            }
            None => false,
        }
    }

    /// Start the trace over at `now` (its first period begins then); the queue keeps what it holds.
    pub fn rewind(&mut self, now: u64) {
        self.t.epoch_ns = now;
        self.t.cycle = 0;
        self.t.idx = 0;
        self.t.opportunities = 0;
        self.t.idle_opportunities = 0;
    }

    /// The trace's next opportunity, ns (None without a trace).
    fn opportunity(&self) -> Option<u64> {
        let tr = self.p.trace.as_ref()?;
        Some(self.t.epoch_ns + (self.t.cycle * tr.period_ms + tr.ms[self.t.idx]) * 1_000_000)
    }

    fn next_opportunity(&mut self) {
        let n = self.p.trace.as_ref().map_or(1, |tr| tr.ms.len());
        self.t.opportunities += 1;
        self.t.idx += 1;
        if self.t.idx == n {
            self.t.idx = 0;
            self.t.cycle += 1;
        }
    }

    /// With the queue empty, every opportunity before `now` is lost: move to the first at or after it.
    fn skip_to(&mut self, now: u64) {
        let Some(tr) = self.p.trace.as_ref() else { return };
        if self.opportunity().map_or(true, |t| t >= now) {
            return;
        }
        let rel = now - self.t.epoch_ns;
        let period_ns = tr.period_ms * 1_000_000;
        let (cycle, within) = (rel / period_ns, rel % period_ns);
        let idx = tr.ms.partition_point(|&m| m * 1_000_000 < within);
        let n = tr.ms.len() as u64;
        let before = self.t.cycle * n + self.t.idx as u64;
        let (cycle, idx) = if idx == tr.ms.len() { (cycle + 1, 0) } else { (cycle, idx) };
        let skipped = (cycle * n + idx as u64).saturating_sub(before);
        self.t.opportunities += skipped;
        self.t.idle_opportunities += skipped;
        self.t.cycle = cycle;
        self.t.idx = idx;
    }

    /// The path of a packet with these addresses (source, destination): 0 for none, else 1 + the
    /// index of the first of p.paths that either address is.
    pub fn path_of(&self, addrs: &[[u8; 16]; 2]) -> u16 {
        self.p.paths.iter().position(|(a, _)| addrs.contains(a)).map_or(0, |i| i as u16 + 1)
    }

    fn extra_ns(&self, path: u16) -> u64 {
        if path == 0 { 0 } else { self.p.paths[path as usize - 1].1 }
    }

    /// Hold a packet until `at` (its delivery), in or out of order as asked, then its path's extra
    /// delay: a constant per path, so order within a path is kept and paths overtake each other.
    fn hold(&mut self, mut at: u64, id: u32, path: u16) -> u64 {
        if !self.p.reorder && at < self.last_release {
            at = self.last_release;
        }
        self.last_release = self.last_release.max(at);
        let at = at + self.extra_ns(path);
        self.seq += 1;
        self.heap.push(Reverse((at, self.seq, id, path)));
        self.c.max_depth = self.c.max_depth.max(self.heap.len() as u64);
        self.c.mark.max_depth = self.c.mark.max_depth.max(self.heap.len() as u64);
        at
    }

    /// The packet the bottleneck sends next, dequeued at `t` (its discipline's drops go to later_drops).
    fn next_head(&mut self, t: u64) -> Option<Pkt> {
        let mut dropped = Vec::new();
        let p = self.q.dequeue(t, &mut dropped);
        self.later_drops.extend(dropped);
        p
    }

    /// A packet the bottleneck has sent whole at `t`: held for its delay (and marked, if it was).
    fn sent(&mut self, p: Pkt, t: u64) {
        if p.ce {
            self.marked.push(p.id);
        }
        let at = t + self.sample_delay();
        self.hold(at, p.id, p.path);
    }

    /// Run the bottleneck up to `until`: a trace's opportunities each carry up to 1500 bytes of the
    /// packets in turn (a packet fully carried leaves at its last opportunity's time); a rate sends
    /// one packet after the other, each taking its bytes' time. The discipline dequeues a packet
    /// when its first byte is sent. Each sent packet is then held for its delay.
    fn serve(&mut self, until: u64) {
        if self.p.trace.is_some() {
            while self.backlog() > 0 {
                let t = match self.opportunity() {
                    Some(t) if t <= until => t,
                    _ => break,
                };
                let mut credit = OPPORTUNITY_BYTES;
                while credit > 0 {
                    if self.head.is_none() {
                        self.head = self.next_head(t);
                        self.head_left = self.head.map_or(0, |p| p.len);
                        if self.head.is_none() {
                            break;
                        }
                    }
                    if self.head_left <= credit {
                        credit -= self.head_left;
                        self.t.served_bytes += self.head_left as u64;
                        let p = self.head.take().unwrap();
                        self.sent(p, t);
                    } else {
                        self.head_left -= credit;
                        self.t.served_bytes += credit as u64;
                        credit = 0;
                    }
                }
                self.next_opportunity();
            }
        } else if let Some(bps) = self.p.rate_bps {
            while self.q.len() > 0 && self.free_ns <= until {
                let t = self.free_ns;
                let Some(p) = self.next_head(t) else { break };
                let done = t + (p.len as u64 * 8 * 1_000_000_000).div_ceil(bps.max(1));
                self.free_ns = done;
                self.t.served_bytes += p.len as u64;
                self.sent(p, done);
            }
        }
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
    #[cfg(test)]
    pub fn on_packet(&mut self, now: u64, id: u32, len: u32) -> Action {
        self.on_packet_of(now, id, len, 0, 0, 0)
    }

    /// A packet of flow `flow` (its 5-tuple's hash) with its ECN codepoint (nfq::flow_of) on its
    /// origin's path `path` (path_of) arrived at `now`.
    pub fn on_packet_of(&mut self, now: u64, id: u32, len: u32, flow: u32, ecn: u8, path: u16) -> Action {
        if path > 0 {
            self.path_packets[path as usize - 1] += 1;
        }
        let ect = ecn != 0; // ECT(0), ECT(1) or CE already: an ECN-capable transport
        self.c.ecn[(ecn & 3) as usize] += 1;
        self.c.packets += 1;
        self.c.bytes += len as u64;
        if self.rng.chance(self.p.loss) {
            self.c.dropped += 1;
            return Action::Drop;
        }
        if self.p.has_bottleneck() {
            self.serve(now); // the link's time before this packet went to the packets before it
            if self.backlog() == 0 {
                self.skip_to(now);
                self.free_ns = self.free_ns.max(now);
            }
            let mut dropped = Vec::new();
            self.q.enqueue(now, Pkt { id, len, flow, ect, enq_ns: now, ce: false, path }, &mut dropped);
            let refused = dropped.contains(&id);
            self.later_drops.extend(dropped.into_iter().filter(|&d| d != id));
            if refused {
                self.t.queue_drops += 1;
                return Action::Drop;
            }
            self.t.max_qdepth = self.t.max_qdepth.max(self.backlog() as u64);
            self.serve(now);
            return Action::Queued;
        }
        let at = now + self.sample_delay();
        Action::Hold(self.hold(at, id, path))
    }

    /// Earliest time something is due, if any: a release, or the trace's next opportunity for a
    /// packet waiting in its queue.
    pub fn next_due(&self) -> Option<u64> {
        let release = self.heap.peek().map(|Reverse((t, _, _, _))| *t);
        let opp = if self.backlog() == 0 {
            None
        } else if self.p.trace.is_some() {
            self.opportunity()
        } else {
            self.p.rate_bps.map(|_| self.free_ns)
        };
        match (release, opp) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Packets waiting in the bottleneck (a trace's or a rate's queue, and the one being sent).
    pub fn queued(&self) -> usize {
        self.backlog()
    }

    /// Move every packet due by `now + horizon` into `out` (packet ids, in release order).
    ///
    /// The horizon is the timer's expected wake-up latency: the event loop arms its timer that
    /// much ahead of the next release, so releasing what falls due within the horizon lands, on
    /// average, on time rather than one wake-up latency late.
    pub fn due(&mut self, now: u64, horizon: u64, out: &mut Vec<u32>) {
        self.serve(now + horizon);
        while let Some(Reverse((t, seq, id, path))) = self.heap.peek().copied() {
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
            let last = &mut self.last_released_seq[path as usize];
            if seq < *last {
                self.c.reordered += 1; // within its path: another path's packets may pass it by design
            }
            *last = (*last).max(seq);
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
        Direction::new(Params::plain("t", 0, (delay_ms * 1e6) as u64, (jitter_ms * 1e6) as u64, dist, loss, reorder), 42)
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
                _ => panic!("no loss and no trace configured"),
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
    fn an_origin_s_path_adds_its_delay_keeps_its_order_and_lets_other_paths_pass() {
        let far = [7u8; 16];
        for rate in [None, Some(100_000_000u64)] {
            let mut p = Params::plain("down", 0, 10_000_000, 2_000_000, Dist::Uniform, 0.0, false);
            p.paths = vec![(far, 40_000_000)];
            if rate.is_some() {
                p.rate_bps = rate;
                p.limit = 1000;
            }
            let mut d = Direction::new(p, 3);
            assert_eq!(d.path_of(&[[0; 16], far]), 1);
            assert_eq!(d.path_of(&[far, [0; 16]]), 1);
            assert_eq!(d.path_of(&[[1; 16], [2; 16]]), 0);
            let (mut out, mut at) = (vec![], std::collections::HashMap::new());
            let mut now = 0u64;
            for i in 0..2000u32 {
                d.on_packet_of(now, i, 1500, 0, 0, (i % 2) as u16); // odd ids: the far origin's
                now += 200_000;
                let before = out.len();
                d.due(now, 0, &mut out);
                for &id in &out[before..] {
                    at.insert(id, now);
                }
            }
            d.due(u64::MAX, 0, &mut out);
            assert_eq!(out.len(), 2000);
            let (near, far_ids): (Vec<u32>, Vec<u32>) = out.iter().partition(|&&id| id % 2 == 0);
            assert!(near.windows(2).all(|w| w[0] < w[1]) && far_ids.windows(2).all(|w| w[0] < w[1]),
                    "each path keeps its order");
            assert!(out.windows(2).any(|w| w[0] > w[1]), "the near path passes the far one");
            assert_eq!(d.c.reordered, 0, "passing another path is no reorder");
            assert_eq!(d.path_packets, vec![1000]);
            // the far path's packets came 40 ms later than the near ones that arrived beside them
            let (n, f) = (at[&1000] as f64, at[&1001] as f64);
            assert!((f - n - 40e6).abs() < 3e6, "far {f} near {n} rate {rate:?}");
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
    fn traced(ms: Vec<u64>, limit: usize, delay_ms: f64) -> Direction {
        let period_ms = *ms.last().unwrap();
        let mut p = Params::plain("t", 0, (delay_ms * 1e6) as u64, 0, Dist::Uniform, 0.0, true);
        p.trace = Some(Trace { path: "t".into(), ms, period_ms, limit });
        let mut d = Direction::new(p, 42);
        d.rewind(0);
        d
    }

    /// Feed `n` packets of `len` bytes at `gap_ns` intervals from t=0; the release time of each.
    fn releases(d: &mut Direction, n: u32, len: u32, gap_ns: u64, until: u64) -> Vec<(u32, u64)> {
        let mut out = vec![];
        let mut got = vec![];
        let mut now = 0;
        for i in 0..n {
            now = i as u64 * gap_ns;
            let _ = d.on_packet(now, i, len);
            // the loop wakes at each next due time, as the event loop's timer does
            while let Some(t) = d.next_due() {
                if t > now { break; }
                d.due(t, 0, &mut got);
                out.extend(got.drain(..).map(|id| (id, t)));
            }
        }
        while let Some(t) = d.next_due() {
            if t > until.max(now) { break; }
            d.due(t, 0, &mut got);
            out.extend(got.drain(..).map(|id| (id, t)));
        }
        out
    }

    #[test]
    fn a_trace_of_one_line_holding_1_is_12_mbit() {
        // one 1500-byte opportunity a millisecond: a saturated queue delivers 1500 B/ms
        let mut d = traced(vec![1], 100_000, 0.0);
        let out = releases(&mut d, 5000, 1500, 100_000, 10_000_000_000); // offered 10x the rate
        let delivered_by_1s = out.iter().filter(|(_, t)| *t <= 1_000_000_000).count();
        assert_eq!(delivered_by_1s, 1000, "12 Mbit/s is 1000 packets of 1500 B a second");
        assert!(out.windows(2).all(|w| w[1].1 - w[0].1 == 1_000_000), "one packet each ms");
    }

    #[test]
    fn small_packets_share_an_opportunity_and_large_ones_span_several() {
        let mut d = traced(vec![1], 1000, 0.0);
        let out = releases(&mut d, 3, 500, 0, 100_000_000); // three 500 B packets: one opportunity
        assert_eq!(out.iter().map(|x| x.1).collect::<Vec<_>>(), vec![1_000_000; 3]);
        let mut d = traced(vec![1], 1000, 0.0);
        d.p.trace.as_mut().unwrap().ms = vec![1];
        let mut got = vec![];
        d.on_packet(0, 9, 4000); // 4000 B: opportunities at 1, 2 and 3 ms
        d.due(2_999_999, 0, &mut got);
        assert!(got.is_empty());
        d.due(3_000_000, 0, &mut got);
        assert_eq!(got, vec![9]);
        assert_eq!(d.t.served_bytes, 4000);
    }

    #[test]
    fn unused_opportunities_are_lost_and_the_trace_loops() {
        // opportunities at 10 and 10 ms (two), period 100 ms: off for 90 ms of each 100
        let mut d = traced(vec![10, 10, 100], 1000, 0.0);
        let mut got = vec![];
        d.on_packet(50_000_000, 1, 1500); // after this period's burst: waits for the one at 100 ms
        assert_eq!(d.t.idle_opportunities, 2, "the two at 10 ms found the queue empty");
        d.due(99_999_999, 0, &mut got);
        assert!(got.is_empty());
        d.due(100_000_000, 0, &mut got);
        assert_eq!(got, vec![1]);
        // the next period: opportunities at 110 (two) and 200
        for i in 2..6 {
            d.on_packet(105_000_000, i, 1500);
        }
        d.due(110_000_000, 0, &mut got);
        assert_eq!(got, vec![1, 2, 3]);
        d.due(200_000_000, 0, &mut got);
        assert_eq!(got, vec![1, 2, 3, 4]);
        assert_eq!(d.next_due(), Some(210_000_000));
        // idle for 10 periods: those opportunities are gone, none is spent late
        got.clear();
        d.due(210_000_000, 0, &mut got);
        assert_eq!(got, vec![5]);
        d.on_packet(1_234_000_000, 6, 1500);
        assert_eq!(d.next_due(), Some(1_300_000_000));
        // lost whole with the queue empty: the second at 210 ms and the one at 300, nine whole periods
        // of three, the two at 1210 ms (and the two at 10 ms before)
        assert_eq!((d.t.idle_opportunities, d.t.opportunities), (2 + 2 + 27 + 2, 38));
    }

    #[test]
    fn the_queue_is_droptail_with_its_limit() {
        let mut d = traced(vec![1], 10, 0.0);
        let mut queued = 0;
        for i in 0..25u32 {
            if let Action::Queued = d.on_packet(0, i, 1500) { queued += 1; }
        }
        assert_eq!((queued, d.t.queue_drops, d.queued()), (10, 15, 10));
        assert_eq!(d.c.dropped, 0, "random loss is counted apart from the queue's drops");
    }

    #[test]
    fn delay_comes_after_the_trace_and_a_rewind_starts_it_over() {
        let mut d = traced(vec![5, 100], 100, 20.0);
        let mut got = vec![];
        d.on_packet(0, 1, 1500);
        assert_eq!(d.next_due(), Some(5_000_000)); // its opportunity
        d.due(5_000_000, 0, &mut got);
        assert_eq!(d.next_due(), Some(25_000_000)); // then its 20 ms
        d.due(25_000_000, 0, &mut got);
        assert_eq!(got, vec![1]);
        d.rewind(1_000_003_000);
        d.on_packet(1_000_003_000, 2, 1500);
        assert_eq!(d.next_due(), Some(1_000_003_000 + 5_000_000));
    }

    #[test]
    fn trace_files_are_parsed_with_their_rules() {
        let t = Trace::parse("f", "1\n1\n\n3\n", 5).unwrap();
        assert_eq!((t.ms, t.period_ms), (vec![1, 1, 3], 3));
        for (text, want) in [("", "no timestamps"), ("0\n", "lasts 0 ms"), ("5\n4\n", "line 2"), ("1\nx\n", "line 2")] {
            let e = Trace::parse("f", text, 5).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }
}
