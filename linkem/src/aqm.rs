//! The bottleneck's queue disciplines (issue 46), free of sockets and clocks like sched.rs: a
//! packet is enqueued at its arrival and dequeued when the link can start sending it; each
//! discipline decides at those two instants what to drop, or to mark where the packet is
//! ECN-capable and ECN is asked for. Times are nanoseconds of the caller's clock.
//!
//! - droptail: a FIFO of `limit` packets; a packet arriving to a full queue is dropped.
//! - CoDel (RFC 8289): the sojourn time of each dequeued packet; above TARGET for a whole INTERVAL,
//!   drop (or mark) at the head at INTERVAL / sqrt(count) until it goes below. Its pseudocode's
//!   `dodequeue` and `dequeue`, with the count carried over a quick return to the dropping state.
//! - FQ-CoDel (RFC 8290): packets hashed by their flow (5-tuple) into `flows` queues, each its own
//!   CoDel; deficit round robin of a quantum between new and old flows, new flows first; a full
//!   queue drops from the head of the flow with the most bytes.
//! - PIE (RFC 8033): a drop probability updated every T_UPDATE from the head packet's queueing
//!   delay (its timestamp) against TARGET, with the RFC's auto-tuning of alpha and beta, its burst
//!   allowance and its no-drop rules; the drop (or mark) is decided at enqueue.

use crate::rng::Rng;
use std::collections::VecDeque;

/// A packet as the queues see it: the verdict's id, its length, its flow and whether it is
/// ECN-capable (ECT(0) or ECT(1): it may be marked CE instead of dropped).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pkt {
    pub id: u32,
    pub len: u32,
    pub flow: u32,
    pub ect: bool,
    pub enq_ns: u64,
    /// marked CE on its way through (its verdict then carries the mark)
    pub ce: bool,
    /// its origin's own path (Direction::path_of): 0 none, else 1 + the path's index
    pub path: u16,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    DropTail,
    Codel { target_ns: u64, interval_ns: u64 },
    FqCodel { target_ns: u64, interval_ns: u64, flows: u32, quantum: u32 },
    Pie { target_ns: u64, tupdate_ns: u64, max_burst_ns: u64 },
}

impl Kind {
    pub fn name(&self) -> &'static str {
        match self {
            Kind::DropTail => "droptail",
            Kind::Codel { .. } => "codel",
            Kind::FqCodel { .. } => "fq_codel",
            Kind::Pie { .. } => "pie",
        }
    }
}

/// RFC 8289's and RFC 8290's defaults: 5 ms, 100 ms; 1024 flows of a 1514-byte quantum.
pub const CODEL_TARGET_NS: u64 = 5_000_000;
pub const CODEL_INTERVAL_NS: u64 = 100_000_000;
pub const FQ_FLOWS: u32 = 1024;
pub const FQ_QUANTUM: u32 = 1514;
/// RFC 8033's defaults: QDELAY_REF 15 ms, T_UPDATE 15 ms, MAX_BURST 150 ms.
pub const PIE_TARGET_NS: u64 = 15_000_000;
pub const PIE_TUPDATE_NS: u64 = 15_000_000;
pub const PIE_MAX_BURST_NS: u64 = 150_000_000;
/// The largest packet (RFC 8289's MAXPACKET; PIE's MEAN_PKTSIZE for its "2 packets" rule).
pub const MTU: u64 = 1514;

/// What a discipline did, for the stats and the verification: drops it chose (apart from a full
/// queue's), marks, a full queue's drops, and the sojourn of the packets it let through.
#[derive(Default, Clone, Debug, PartialEq)]
pub struct AqmCounters {
    pub aqm_drops: u64,
    pub marks: u64,
    pub overlimit_drops: u64,
    pub dequeued: u64,
    pub sojourn_sum_ns: u128,
    pub sojourn_max_ns: u64,
}

/// RFC 8289's CoDel state for one queue.
#[derive(Default, Clone, Debug)]
struct Codel {
    first_above_time: u64,
    drop_next: u64,
    count: u32,
    lastcount: u32,
    dropping: bool,
}

fn control_law(t: u64, interval_ns: u64, count: u32) -> u64 {
    t + (interval_ns as f64 / (count.max(1) as f64).sqrt()) as u64
}

/// One FIFO with CoDel's state (CoDel's queue, and each of FQ-CoDel's flows).
#[derive(Default, Clone, Debug)]
struct CodelQueue {
    q: VecDeque<Pkt>,
    bytes: u64,
    st: Codel,
    deficit: i64,
}

impl CodelQueue {
    fn push(&mut self, p: Pkt) {
        self.bytes += p.len as u64;
        self.q.push_back(p);
    }

    fn pop(&mut self) -> Option<Pkt> {
        let p = self.q.pop_front()?;
        self.bytes -= p.len as u64;
        Some(p)
    }

    /// RFC 8289's dodequeue: the head packet and whether the sojourn has been above target for an interval.
    fn dodequeue(&mut self, now: u64, target: u64, interval: u64) -> (Option<Pkt>, bool) {
        let Some(p) = self.pop() else {
            self.st.first_above_time = 0;
            return (None, false);
        };
        let sojourn = now.saturating_sub(p.enq_ns);
        let mut ok_to_drop = false;
        if sojourn < target || self.bytes <= MTU {
            self.st.first_above_time = 0;
        } else if self.st.first_above_time == 0 {
            self.st.first_above_time = now + interval;
        } else if now >= self.st.first_above_time {
            ok_to_drop = true;
        }
        (Some(p), ok_to_drop)
    }

    /// RFC 8289's dequeue: the packet to send, or None; drops go to `dropped`, a packet marked in
    /// place of a drop is sent with `ce` set.
    fn dequeue(&mut self, now: u64, target: u64, interval: u64, ecn: bool, c: &mut AqmCounters,
               dropped: &mut Vec<u32>) -> Option<Pkt> {
        let (mut p, mut ok_to_drop) = self.dodequeue(now, target, interval);
        let Some(mut pkt) = p else {
            self.st.dropping = false;
            return None;
        };
        if self.st.dropping {
            if !ok_to_drop {
                self.st.dropping = false;
            }
            while self.st.dropping && now >= self.st.drop_next {
                self.st.count += 1;
                if ecn && pkt.ect {
                    pkt.ce = true;
                    c.marks += 1;
                    self.st.drop_next = control_law(self.st.drop_next, interval, self.st.count);
                    return Some(pkt);
                }
                c.aqm_drops += 1;
                dropped.push(pkt.id);
                (p, ok_to_drop) = self.dodequeue(now, target, interval);
                match p {
                    None => {
                        self.st.dropping = false;
                        return None;
                    }
                    Some(x) => pkt = x,
                }
                if !ok_to_drop {
                    self.st.dropping = false;
                } else {
                    self.st.drop_next = control_law(self.st.drop_next, interval, self.st.count);
                }
            }
        } else if ok_to_drop {
            if ecn && pkt.ect {
                pkt.ce = true;
                c.marks += 1;
            } else {
                c.aqm_drops += 1;
                dropped.push(pkt.id);
                let (q, _) = self.dodequeue(now, target, interval);
                match q {
                    Some(x) => pkt = x,
                    None => {
                        self.enter_dropping(now, interval);
                        return None;
                    }
                }
            }
            self.enter_dropping(now, interval);
        }
        Some(pkt)
    }

    fn enter_dropping(&mut self, now: u64, interval: u64) {
        self.st.dropping = true;
        // a return to dropping soon after leaving it starts from the rate it left at
        let delta = self.st.count.saturating_sub(self.st.lastcount);
        self.st.count = if delta > 1 && now.saturating_sub(self.st.drop_next) < 16 * interval { delta } else { 1 };
        self.st.drop_next = control_law(now, interval, self.st.count);
        self.st.lastcount = self.st.count;
    }
}

/// RFC 8033's PIE state.
#[derive(Clone, Debug, Default)]
struct PieState {
    drop_prob: f64,
    qdelay_old_ns: u64,
    burst_allowance_ns: u64,
    last_update: u64,
    started: bool,
}

/// A bottleneck's queue under its discipline.
pub struct Aqm {
    pub kind: Kind,
    /// packets the whole queue holds at most (FQ-CoDel: across its flows)
    pub limit: usize,
    pub ecn: bool,
    pub c: AqmCounters,
    fifo: CodelQueue,
    flows: Vec<CodelQueue>,
    new_flows: VecDeque<u32>,
    old_flows: VecDeque<u32>,
    listed: Vec<bool>,
    len: usize,
    pie: PieState,
    rng: Rng,
}

impl Aqm {
    pub fn new(kind: Kind, limit: usize, ecn: bool, seed: u64) -> Aqm {
        let n = if let Kind::FqCodel { flows, .. } = kind { flows as usize } else { 0 };
        Aqm { kind, limit, ecn, c: AqmCounters::default(), fifo: CodelQueue::default(), flows: vec![CodelQueue::default(); n],
              new_flows: VecDeque::new(), old_flows: VecDeque::new(), listed: vec![false; n], len: 0,
              pie: PieState { burst_allowance_ns: PIE_MAX_BURST_NS, ..Default::default() }, rng: Rng::new(seed) }
    }

    /// Packets held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// A packet arrives at `now`: queued, or dropped (its id in `dropped`; a full queue's drop is
    /// the arriving packet's, except FQ-CoDel's, which drops from the fattest flow's head).
    pub fn enqueue(&mut self, now: u64, mut p: Pkt, dropped: &mut Vec<u32>) {
        p.enq_ns = now;
        match self.kind {
            Kind::DropTail | Kind::Codel { .. } => {
                if self.len >= self.limit {
                    self.c.overlimit_drops += 1;
                    dropped.push(p.id);
                    return;
                }
                self.fifo.push(p);
            }
            Kind::Pie { target_ns, tupdate_ns, max_burst_ns } => {
                if self.len >= self.limit {
                    self.c.overlimit_drops += 1;
                    dropped.push(p.id);
                    return;
                }
                self.pie_update(now, target_ns, tupdate_ns, max_burst_ns);
                if self.pie_drop_early(target_ns) {
                    if self.ecn && p.ect && self.pie.drop_prob <= 0.1 {
                        p.ce = true;
                        self.c.marks += 1;
                    } else {
                        self.c.aqm_drops += 1;
                        dropped.push(p.id);
                        return;
                    }
                }
                self.fifo.push(p);
            }
            Kind::FqCodel { flows, .. } => {
                let i = (p.flow % flows) as usize;
                self.flows[i].push(p);
                if !self.listed[i] {
                    self.listed[i] = true;
                    self.flows[i].deficit = self.quantum() as i64;
                    self.new_flows.push_back(i as u32);
                }
                if self.len + 1 > self.limit {
                    // RFC 8290 4.1.2: drop from the head of the flow holding the most bytes
                    let fat = (0..self.flows.len()).max_by_key(|&j| self.flows[j].bytes).unwrap();
                    if let Some(x) = self.flows[fat].pop() {
                        self.c.overlimit_drops += 1;
                        dropped.push(x.id);
                        self.len -= 1;
                    }
                }
            }
        }
        self.len += 1;
    }

    fn quantum(&self) -> u32 {
        if let Kind::FqCodel { quantum, .. } = self.kind { quantum } else { MTU as u32 }
    }

    /// The link can start sending at `now`: the packet it sends, or None; drops go to `dropped`.
    pub fn dequeue(&mut self, now: u64, dropped: &mut Vec<u32>) -> Option<Pkt> {
        let before = dropped.len();
        let out = match self.kind {
            Kind::DropTail | Kind::Pie { .. } => self.fifo.pop(),
            Kind::Codel { target_ns, interval_ns } => {
                self.fifo.dequeue(now, target_ns, interval_ns, self.ecn, &mut self.c, dropped)
            }
            Kind::FqCodel { target_ns, interval_ns, .. } => self.fq_dequeue(now, target_ns, interval_ns, dropped),
        };
        // what CoDel dropped at the head left the queue too (its ids are in `dropped`)
        let gone = dropped.len() - before;
        if let Some(p) = out {
            self.len -= 1 + gone;
            self.c.dequeued += 1;
            let s = now.saturating_sub(p.enq_ns);
            self.c.sojourn_sum_ns += s as u128;
            self.c.sojourn_max_ns = self.c.sojourn_max_ns.max(s);
        } else {
            self.len -= gone;
        }
        out
    }

    /// RFC 8290 4.2: new flows first, each its quantum of bytes per round; a new flow that empties
    /// goes to the old list (once), an old one that empties leaves.
    fn fq_dequeue(&mut self, now: u64, target: u64, interval: u64, dropped: &mut Vec<u32>) -> Option<Pkt> {
        let quantum = self.quantum() as i64;
        loop {
            let (from_new, i) = if let Some(&i) = self.new_flows.front() {
                (true, i as usize)
            } else if let Some(&i) = self.old_flows.front() {
                (false, i as usize)
            } else {
                return None;
            };
            if self.flows[i].deficit <= 0 {
                self.flows[i].deficit += quantum;
                let moved = if from_new { self.new_flows.pop_front() } else { self.old_flows.pop_front() };
                self.old_flows.push_back(moved.unwrap());
                continue;
            }
            let got = self.flows[i].dequeue(now, target, interval, self.ecn, &mut self.c, dropped);
            match got {
                Some(p) => {
                    self.flows[i].deficit -= p.len as i64;
                    return Some(p);
                }
                None => {
                    if from_new {
                        self.new_flows.pop_front();
                        // an empty new flow goes to the end of the old list, so it cannot starve them by coming back
                        self.old_flows.push_back(i as u32);
                    } else {
                        self.old_flows.pop_front();
                        self.listed[i] = false;
                    }
                }
            }
        }
    }

    /// RFC 8033 4.2: every T_UPDATE, p moves by alpha (delay against target) and beta (its trend),
    /// both scaled down while p is small (the auto-tuning table); the burst allowance runs down.
    fn pie_update(&mut self, now: u64, target: u64, tupdate: u64, max_burst: u64) {
        if !self.pie.started {
            self.pie.started = true;
            self.pie.last_update = now;
            return;
        }
        while now >= self.pie.last_update + tupdate {
            self.pie.last_update += tupdate;
            let qdelay = self.fifo.q.front().map_or(0, |h| self.pie.last_update.saturating_sub(h.enq_ns));
            let (mut alpha, mut beta) = (0.125, 1.25); // per second of delay, as the RFC's
            let p = self.pie.drop_prob;
            let scale = if p < 0.000001 { 1.0 / 2048.0 } else if p < 0.00001 { 1.0 / 512.0 } else if p < 0.0001 {
                1.0 / 128.0 } else if p < 0.001 { 1.0 / 32.0 } else if p < 0.01 { 1.0 / 8.0 } else if p < 0.1 {
                1.0 / 2.0 } else { 1.0 };
            alpha *= scale;
            beta *= scale;
            let s = |ns: u64| ns as f64 / 1e9;
            let mut delta = alpha * (s(qdelay) - s(target)) + beta * (s(qdelay) - s(self.pie.qdelay_old_ns));
            if p >= 0.1 && delta > 0.02 {
                delta = 0.02; // RFC 8033 4.2: no more than 2% a step at a high probability
            }
            let mut np = p + delta;
            if qdelay == 0 && self.pie.qdelay_old_ns == 0 {
                np *= 0.98; // an idle queue: p decays
            }
            self.pie.drop_prob = np.clamp(0.0, 1.0);
            if qdelay > 250_000_000 {
                self.pie.drop_prob = (self.pie.drop_prob + 0.02).min(1.0); // 4.2: a runaway delay
            }
            self.pie.burst_allowance_ns = self.pie.burst_allowance_ns.saturating_sub(tupdate);
            if self.pie.drop_prob == 0.0 && qdelay < target / 2 && self.pie.qdelay_old_ns < target / 2 {
                self.pie.burst_allowance_ns = max_burst; // 4.4: the allowance is given back once the queue is calm
            }
            self.pie.qdelay_old_ns = qdelay;
        }
    }

    /// RFC 8033 4.1's drop_early: never within the burst allowance, with a calm queue at a low
    /// probability, or with two packets or fewer queued; else with probability p.
    fn pie_drop_early(&mut self, target: u64) -> bool {
        if self.pie.burst_allowance_ns > 0 {
            return false;
        }
        if self.pie.qdelay_old_ns < target / 2 && self.pie.drop_prob < 0.2 {
            return false;
        }
        if self.fifo.bytes <= 2 * MTU {
            return false;
        }
        self.rng.chance(self.pie.drop_prob)
    }

    /// PIE's drop probability now (0 for the others).
    pub fn drop_prob(&self) -> f64 {
        self.pie.drop_prob
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkt(id: u32, flow: u32) -> Pkt {
        Pkt { id, len: 1500, flow, ect: false, enq_ns: 0, ce: false, path: 0 }
    }

    /// A link of `rate_pps` packets a second fed `offered_pps` (one flow, or `flows` of them in turn)
    /// for `secs`: (sojourn of each sent packet in ns, sent, dropped, per-flow sent).
    fn run(a: &mut Aqm, rate_pps: u64, offered_pps: u64, secs: u64, flows: u32) -> (Vec<u64>, u64, u64, Vec<u64>) {
        let (gap_in, gap_out) = (1_000_000_000 / offered_pps, 1_000_000_000 / rate_pps);
        let (mut next_in, mut next_out, mut id) = (0u64, 0u64, 0u32);
        let (mut sojourns, mut sent, mut dropped, mut per_flow) = (vec![], 0, 0, vec![0u64; flows as usize]);
        let mut drops = vec![];
        let end = secs * 1_000_000_000;
        while next_in < end || next_out < end {
            if next_in <= next_out {
                a.enqueue(next_in, pkt(id, id % flows), &mut drops);
                id += 1;
                next_in += gap_in;
            } else {
                if let Some(p) = a.dequeue(next_out, &mut drops) {
                    sojourns.push(next_out - p.enq_ns);
                    sent += 1;
                    per_flow[p.flow as usize] += 1;
                }
                next_out += gap_out;
            }
            dropped += drops.len() as u64;
            drops.clear();
        }
        (sojourns, sent, dropped, per_flow)
    }

    fn median(mut v: Vec<u64>) -> u64 {
        v.sort();
        v[v.len() / 2]
    }

    #[test]
    fn droptail_fills_its_buffer_and_drops_what_arrives_to_it_full() {
        let mut a = Aqm::new(Kind::DropTail, 100, false, 1);
        let (soj, sent, dropped, _) = run(&mut a, 1000, 1200, 10, 1);
        // a standing queue of the whole buffer: 100 packets at 1 ms each
        let late = median(soj[soj.len() / 2..].to_vec());
        assert!((99_000_000..=101_000_000).contains(&late), "{late}");
        assert_eq!(a.c.overlimit_drops, dropped);
        assert!(sent >= 9_900 && dropped >= 1_800, "{sent} {dropped}");
    }

    /// A Reno-like sender (one packet more a round trip, half on a loss or a mark, once a round trip)
    /// through a link of 1000 packets a second (12 Mbit/s of 1500 bytes) with 40 ms of delay outside
    /// the queue, for `secs`: the sojourns of the packets sent in the second half, and the link's use.
    fn reno(a: &mut Aqm, secs: u64) -> (Vec<u64>, f64) {
        const STEP: u64 = 100_000;
        const TX: u64 = 1_000_000;
        const BASE: u64 = 40_000_000;
        let (mut cwnd, mut inflight, mut id, mut last_cut) = (2.0f64, 0u64, 0u32, 0u64);
        let mut news: VecDeque<(u64, bool)> = VecDeque::new(); // (when the sender hears, congestion seen)
        let (mut next_out, mut drops, mut soj, mut sent) = (0u64, vec![], vec![], 0u64);
        let end = secs * 1_000_000_000;
        let mut t = 0;
        while t < end {
            while news.front().map_or(false, |n| n.0 <= t) {
                let (_, congested) = news.pop_front().unwrap();
                inflight -= 1;
                if congested {
                    if t >= last_cut + BASE {
                        cwnd = (cwnd / 2.0).max(2.0);
                        last_cut = t;
                    }
                } else {
                    cwnd += 1.0 / cwnd;
                }
            }
            while (inflight as f64) < cwnd {
                a.enqueue(t, Pkt { ect: a.ecn, ..pkt(id, 0) }, &mut drops);
                id += 1;
                inflight += 1;
            }
            if t >= next_out {
                match a.dequeue(t, &mut drops) {
                    Some(p) => {
                        if t >= end / 2 {
                            soj.push(t - p.enq_ns);
                            sent += 1;
                        }
                        news.push_back((t + TX + BASE, p.ce));
                        next_out = t + TX;
                    }
                    None => next_out = t + STEP,
                }
            }
            for _ in drops.drain(..) {
                news.push_back((t + BASE, true));
            }
            t += STEP;
        }
        let mut v: Vec<_> = news.into_iter().collect();
        v.sort_by_key(|n| n.0);
        (soj, sent as f64 / (secs / 2 * 1000) as f64)
    }

    #[test]
    fn codel_keeps_a_reno_flow_s_standing_delay_near_its_target_where_droptail_fills_the_buffer() {
        let mut a = Aqm::new(Kind::Codel { target_ns: CODEL_TARGET_NS, interval_ns: CODEL_INTERVAL_NS }, 1000, false, 1);
        let (soj, used) = reno(&mut a, 60);
        let m = median(soj);
        assert!((1_000_000..=15_000_000).contains(&m), "CoDel's standing delay {m} ns (target 5 ms)");
        assert!(used > 0.85 && a.c.aqm_drops > 0 && a.c.overlimit_drops == 0, "{used} {:?}", a.c);
        let mut d = Aqm::new(Kind::DropTail, 1000, false, 1);
        let (soj, used) = reno(&mut d, 60);
        assert!(median(soj) > 200_000_000 && used > 0.95, "droptail fills its 1000 packets (1 s)");
    }

    #[test]
    fn codel_never_drops_below_its_target_and_its_drops_speed_up_as_the_square_root() {
        let mut a = Aqm::new(Kind::Codel { target_ns: CODEL_TARGET_NS, interval_ns: CODEL_INTERVAL_NS }, 1000, false, 1);
        let (_, sent, dropped, _) = run(&mut a, 1000, 900, 5, 1); // under the rate: no queue
        assert_eq!((dropped, a.c.aqm_drops), (0, 0));
        assert!(sent >= 4_400);
        assert_eq!(control_law(0, 100, 4), 50);
        assert_eq!(control_law(10, 100, 1), 110);
    }

    #[test]
    fn codel_marks_ect_packets_instead_of_dropping_them_when_ecn_is_on() {
        let mut a = Aqm::new(Kind::Codel { target_ns: CODEL_TARGET_NS, interval_ns: CODEL_INTERVAL_NS }, 100_000, true, 1);
        let mut drops = vec![];
        let mut marked = 0;
        // 2000 packets queued at once, drained at 1 ms each: the sojourn grows past 5 ms for long
        for i in 0..2000 {
            a.enqueue(0, Pkt { ect: true, ..pkt(i, 0) }, &mut drops);
        }
        for k in 0..2000u64 {
            if let Some(p) = a.dequeue(k * 1_000_000, &mut drops) {
                marked += p.ce as u64;
            }
        }
        assert!(drops.is_empty() && marked > 0 && a.c.marks == marked, "{marked} {:?}", a.c);
        // not ECN-capable: the same queue drops
        let mut b = Aqm::new(Kind::Codel { target_ns: CODEL_TARGET_NS, interval_ns: CODEL_INTERVAL_NS }, 100_000, true, 1);
        for i in 0..2000 {
            b.enqueue(0, pkt(i, 0), &mut drops);
        }
        for k in 0..2000u64 {
            b.dequeue(k * 1_000_000, &mut drops);
        }
        assert!(!drops.is_empty() && b.c.marks == 0 && b.c.aqm_drops == drops.len() as u64);
    }

    #[test]
    fn fq_codel_serves_a_sparse_flow_at_once_beside_a_bulk_one() {
        let kind = Kind::FqCodel { target_ns: CODEL_TARGET_NS, interval_ns: CODEL_INTERVAL_NS, flows: FQ_FLOWS, quantum: FQ_QUANTUM };
        let mut a = Aqm::new(kind, 10_240, false, 1);
        let mut drops = vec![];
        // a bulk flow 50% over the rate, and a sparse flow's packet every 100 ms
        let (mut t, mut id, mut sparse, mut n) = (0u64, 0u32, vec![], 0u64);
        let mut next_out = 0u64;
        while t < 10_000_000_000 {
            a.enqueue(t, pkt(id, 1), &mut drops);
            id += 1;
            n += 1;
            if n % 150 == 0 {
                a.enqueue(t, pkt(id, 2), &mut drops);
                id += 1;
            }
            t += 666_667;
            while next_out <= t {
                if let Some(p) = a.dequeue(next_out, &mut drops) {
                    if p.flow == 2 {
                        sparse.push(next_out - p.enq_ns);
                    }
                }
                next_out += 1_000_000;
            }
        }
        assert!(sparse.len() >= 95, "{}", sparse.len());
        assert!(sparse.iter().all(|&s| s <= 2_000_000), "the sparse flow waited {:?} ns", sparse.iter().max());
        assert!(a.c.aqm_drops > 0, "the bulk flow's CoDel drops its excess");
    }

    #[test]
    fn fq_codel_shares_the_link_equally_among_backlogged_flows_and_drops_the_fattest_when_full() {
        let kind = Kind::FqCodel { target_ns: CODEL_TARGET_NS, interval_ns: CODEL_INTERVAL_NS, flows: FQ_FLOWS, quantum: FQ_QUANTUM };
        let mut a = Aqm::new(kind, 10_240, false, 1);
        let (_, sent, _, per_flow) = run(&mut a, 1000, 3000, 10, 3);
        assert!(per_flow.iter().all(|&n| (n as f64 - sent as f64 / 3.0).abs() < sent as f64 * 0.02), "{per_flow:?}");
        let mut b = Aqm::new(Kind::FqCodel { target_ns: CODEL_TARGET_NS, interval_ns: CODEL_INTERVAL_NS, flows: 4, quantum: 1514 }, 10, false, 1);
        let mut drops = vec![];
        for i in 0..8 {
            b.enqueue(0, pkt(i, 0), &mut drops); // flow 0: 8 packets
        }
        for i in 8..11 {
            b.enqueue(0, pkt(i, 1), &mut drops); // flow 1: 3 packets: the 11th goes over the limit
        }
        assert_eq!((drops, b.len(), b.c.overlimit_drops), (vec![0], 10, 1), "the fattest flow's head goes");
    }

    #[test]
    fn pie_holds_a_reno_flow_s_delay_near_its_target() {
        let kind = Kind::Pie { target_ns: PIE_TARGET_NS, tupdate_ns: PIE_TUPDATE_NS, max_burst_ns: PIE_MAX_BURST_NS };
        let mut a = Aqm::new(kind, 1000, false, 7);
        let (soj, used) = reno(&mut a, 60);
        let m = median(soj);
        assert!((5_000_000..=30_000_000).contains(&m), "PIE's delay {m} ns (target 15 ms)");
        assert!(used > 0.85 && a.c.aqm_drops > 0, "{used} {:?}", a.c);
    }

    #[test]
    fn with_ecn_codel_and_pie_mark_a_reno_flow_and_drop_nothing() {
        for kind in [Kind::Codel { target_ns: CODEL_TARGET_NS, interval_ns: CODEL_INTERVAL_NS },
                     Kind::Pie { target_ns: PIE_TARGET_NS, tupdate_ns: PIE_TUPDATE_NS, max_burst_ns: PIE_MAX_BURST_NS }] {
            let mut a = Aqm::new(kind, 1000, true, 7);
            let (soj, _) = reno(&mut a, 60);
            assert!(a.c.marks > 0 && a.c.aqm_drops == 0 && a.c.overlimit_drops == 0, "{kind:?}: {:?}", a.c);
            assert!(median(soj) <= 30_000_000, "{kind:?}");
        }
    }

    #[test]
    fn pie_lets_a_burst_through_within_its_allowance_and_drops_nothing_below_its_rate() {
        let kind = Kind::Pie { target_ns: PIE_TARGET_NS, tupdate_ns: PIE_TUPDATE_NS, max_burst_ns: PIE_MAX_BURST_NS };
        let mut a = Aqm::new(kind, 100_000, false, 7);
        let (_, _, dropped, _) = run(&mut a, 1000, 800, 10, 1);
        assert_eq!(dropped, 0);
        let mut b = Aqm::new(kind, 100_000, false, 7);
        let mut drops = vec![];
        for i in 0..100 {
            b.enqueue(i as u64 * 1_000_000, pkt(i, 0), &mut drops); // 100 ms of a burst, nothing sent
        }
        assert!(drops.is_empty(), "within the 150 ms allowance");
    }
}
