//! linkem: plt-bench's userspace link emulator for kernels without sch_netem.
//!
//! It takes each direction's forwarded packets from an NFQUEUE in the router namespace, drops
//! each with probability p, and releases the others (by verdict) at arrival + delay + a jitter
//! sample. One thread per direction, each an epoll loop over its queue's netlink socket and a
//! timerfd set to its next release; the main thread keeps the signalfd and the stats file. It never fails open: queues are bound without NFQA_CFG_F_FAIL_OPEN,
//! so when linkem dies the kernel drops what it held and what arrives (the iptables rule has no
//! --queue-bypass): traffic stops rather than run unshaped.
//!
//! Counters go to the --stats file (JSON) every --stats-ms and at exit. On SIGUSR1 they go to
//! PATH.snap (a file nothing else writes) with "snapshot" counting the requests, and the maxima
//! since the last mark are reset: a reader waits for the number it asked for, never for a file
//! time (a periodic write in the same clock tick, or after the reset, would pass for the answer).
//!
//! A direction given trace=PATH (and limit=N packets) follows a Mahimahi link trace: its packets
//! wait in a droptail queue for the trace's 1500-byte delivery opportunities (sched::Trace), then
//! for their delay. SIGUSR2 starts every trace over (one trial's mark, sent by the browser's worker
//! the instant before it navigates); the stats count the rewinds and give the last one's time.
//!
//! --cpu-dma-latency-us N holds the kernel's PM QoS request (/dev/cpu_dma_latency) at N for linkem's
//! life: idle CPUs then wake within N us. Without it, a CPU that went idle between two packets
//! (a lossy link's gaps) wakes late: in a KVM guest its halt hands the vCPU back to the host, and
//! on this project's 2-core guest 0.6-0.9% of a 5%-loss bulk download's packets were released
//! >= 1 ms late (3-5 of 12 trials refused), against 0-0.14% (none refused) with it held at 0.
//! The kernel drops the request when the file closes, so it never outlives linkem.
//!
//! A direction given rate_bps=R (and limit=N packets) is a bottleneck of linkem's at a constant rate:
//! its packets wait their turn in a queue under a discipline (aqm=droptail|codel|fq_codel|pie, with
//! the RFCs' parameters: aqm.rs), then for their delay. A trace's queue takes a discipline too.
//! ecn=1: where the discipline would drop an ECN-capable packet, it marks it instead; the packet's
//! verdict then sets the mark CE_MARK, which the link's rule after the queue turns into the IP
//! header's CE codepoint.
//!
//! usage: linkem --dir NAME:queue=N,delay_us=D,jitter_us=J,dist=uniform|normal,loss=P,reorder=0|1
//!                   [,trace=PATH|rate_bps=R,limit=N[,aqm=A[,target_us=,interval_us=,flows=,quantum=,tupdate_us=,burst_us=]][,ecn=1]]
//!               [--dir ...] --stats PATH [--seed S] [--maxlen 65536] [--fifo PRIO] [--cpu-dma-latency-us N]

mod aqm;
mod nfq;
mod rng;
mod sched;

use sched::{Action, Direction, Dist, Params, Trace, LATE_BUCKETS_US};
use std::fmt::Write as _;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

struct Config {
    dirs: Vec<Params>,
    stats: String,
    seed: u64,
    maxlen: u32,
    fifo: i32,
    stats_ms: u64,
    cpu_dma_latency_us: Option<i32>,
}

fn usage(msg: &str) -> ! {
    eprintln!("linkem: {msg}");
    eprintln!("usage: linkem --dir NAME:queue=N,delay_us=D,jitter_us=J,dist=uniform|normal,loss=P,reorder=0|1\
               [,trace=PATH|rate_bps=R,limit=N[,aqm=droptail|codel|fq_codel|pie[,target_us=,interval_us=,flows=,quantum=,tupdate_us=,burst_us=]][,ecn=1]] \
               [--dir ...] --stats PATH [--seed S] [--maxlen N] [--fifo PRIO] [--stats-ms MS] [--cpu-dma-latency-us N]");
    std::process::exit(2);
}

fn parse_dir(spec: &str) -> Params {
    let (name, rest) = spec.split_once(':').unwrap_or_else(|| usage(&format!("--dir '{spec}': expected NAME:key=value,...")));
    let mut p = Params::plain(name, u16::MAX, 0, 0, Dist::Uniform, 0.0, true);
    let (mut trace_path, mut limit) = (None, None);
    let (mut aqm_name, mut aqm_keys) = (None::<String>, Vec::<(String, u64)>::new());
    for kv in rest.split(',').filter(|s| !s.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or_else(|| usage(&format!("--dir '{spec}': '{kv}' is not key=value")));
        macro_rules! bad {
            () => {
                usage(&format!("--dir '{spec}': bad value for {k}: '{v}'"))
            };
        }
        match k {
            "queue" => p.queue = v.parse().unwrap_or_else(|_| bad!()),
            "delay_us" => p.delay_ns = v.parse::<u64>().unwrap_or_else(|_| bad!()) * 1000,
            "jitter_us" => p.jitter_ns = v.parse::<u64>().unwrap_or_else(|_| bad!()) * 1000,
            "dist" => p.dist = match v { "uniform" => Dist::Uniform, "normal" => Dist::Normal, _ => bad!() },
            "loss" => {
                p.loss = v.parse().unwrap_or_else(|_| bad!());
                if !(0.0..=1.0).contains(&p.loss) {
                    bad!()
                }
            }
            "reorder" => p.reorder = match v { "1" => true, "0" => false, _ => bad!() },
            "trace" => trace_path = Some(v.to_string()),
            "limit" => limit = Some(v.parse::<usize>().ok().filter(|n| *n > 0).unwrap_or_else(|| bad!())),
            "rate_bps" => p.rate_bps = Some(v.parse::<u64>().ok().filter(|n| *n > 0).unwrap_or_else(|| bad!())),
            "aqm" => aqm_name = Some(v.to_string()),
            "ecn" => p.ecn = match v { "1" => true, "0" => false, _ => bad!() },
            "target_us" | "interval_us" | "flows" | "quantum" | "tupdate_us" | "burst_us" => {
                aqm_keys.push((k.to_string(), v.parse::<u64>().ok().filter(|n| *n > 0).unwrap_or_else(|| bad!())))
            }
            _ => usage(&format!("--dir '{spec}': unknown key '{k}'")),
        }
    }
    if p.queue == u16::MAX {
        usage(&format!("--dir '{spec}': queue= is required"));
    }
    match (trace_path, p.rate_bps, limit) {
        (Some(path), None, Some(limit)) => {
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| usage(&format!("--dir '{spec}': {path}: {e}")));
            p.trace = Some(Trace::parse(&path, &text, limit).unwrap_or_else(|e| usage(&format!("--dir '{spec}': {e}"))));
        }
        (None, Some(_), Some(limit)) => p.limit = limit,
        (None, None, None) => {}
        (Some(_), Some(_), _) => usage(&format!("--dir '{spec}': trace= and rate_bps= are two rates; give one")),
        _ => usage(&format!("--dir '{spec}': limit= goes with trace= or rate_bps= (the bottleneck's queue)")),
    }
    if (aqm_name.is_some() || p.ecn || !aqm_keys.is_empty()) && !p.has_bottleneck() {
        usage(&format!("--dir '{spec}': aqm=, ecn= and their parameters need a bottleneck of linkem's (trace= or rate_bps=)"));
    }
    p.aqm = aqm_kind(spec, aqm_name.as_deref().unwrap_or("droptail"), &aqm_keys);
    p
}

/// A discipline by name with its parameters (the RFCs' defaults where none is given).
fn aqm_kind(spec: &str, name: &str, keys: &[(String, u64)]) -> aqm::Kind {
    use aqm::*;
    let get = |k: &str, default: u64| keys.iter().find(|(n, _)| n == k).map_or(default, |(_, v)| *v);
    let allowed: &[&str] = match name {
        "droptail" => &[],
        "codel" => &["target_us", "interval_us"],
        "fq_codel" => &["target_us", "interval_us", "flows", "quantum"],
        "pie" => &["target_us", "tupdate_us", "burst_us"],
        _ => usage(&format!("--dir '{spec}': aqm '{name}': expected droptail, codel, fq_codel or pie")),
    };
    if let Some((k, _)) = keys.iter().find(|(k, _)| !allowed.contains(&k.as_str())) {
        usage(&format!("--dir '{spec}': {k} is not a parameter of aqm={name}"));
    }
    match name {
        "droptail" => Kind::DropTail,
        "codel" => Kind::Codel { target_ns: get("target_us", CODEL_TARGET_NS / 1000) * 1000,
                                 interval_ns: get("interval_us", CODEL_INTERVAL_NS / 1000) * 1000 },
        "fq_codel" => Kind::FqCodel { target_ns: get("target_us", CODEL_TARGET_NS / 1000) * 1000,
                                      interval_ns: get("interval_us", CODEL_INTERVAL_NS / 1000) * 1000,
                                      flows: get("flows", FQ_FLOWS as u64).min(65536) as u32,
                                      quantum: get("quantum", FQ_QUANTUM as u64).min(65536) as u32 },
        _ => Kind::Pie { target_ns: get("target_us", PIE_TARGET_NS / 1000) * 1000,
                         tupdate_ns: get("tupdate_us", PIE_TUPDATE_NS / 1000) * 1000,
                         max_burst_ns: get("burst_us", PIE_MAX_BURST_NS / 1000) * 1000 },
    }
}

fn parse_args() -> Config {
    let mut c = Config { dirs: vec![], stats: String::new(), seed: 1, maxlen: 65536, fifo: 0, stats_ms: 250,
                          cpu_dma_latency_us: None };
    let mut args = std::env::args().skip(1);
    let mut paths = Vec::new();
    while let Some(a) = args.next() {
        let mut val = || args.next().unwrap_or_else(|| usage(&format!("{a} needs a value")));
        match a.as_str() {
            "--dir" => c.dirs.push(parse_dir(&val())),
            "--origin-delay" => paths.push(val()),
            "--stats" => c.stats = val(),
            "--seed" => c.seed = val().parse().unwrap_or_else(|_| usage("--seed takes a whole number")),
            "--maxlen" => c.maxlen = val().parse().unwrap_or_else(|_| usage("--maxlen takes a whole number")),
            "--fifo" => c.fifo = val().parse().unwrap_or_else(|_| usage("--fifo takes a priority 0-99")),
            "--stats-ms" => c.stats_ms = val().parse().unwrap_or_else(|_| usage("--stats-ms takes milliseconds")),
            "--cpu-dma-latency-us" => c.cpu_dma_latency_us = Some(val().parse().ok().filter(|n: &i32| *n >= 0)
                .unwrap_or_else(|| usage("--cpu-dma-latency-us takes microseconds (0 or more)"))),
            _ => usage(&format!("unknown argument '{a}'")),
        }
    }
    if c.dirs.is_empty() || c.stats.is_empty() {
        usage("at least one --dir and --stats are required");
    }
    for spec in paths {
        let (dir, addr, us) = parse_origin_delay(&spec);
        let d = c.dirs.iter_mut().find(|d| d.name == dir)
            .unwrap_or_else(|| usage(&format!("--origin-delay '{spec}': no --dir named '{dir}'")));
        if d.paths.iter().any(|(a, _)| *a == addr) {
            usage(&format!("--origin-delay '{spec}': that address is given twice for '{dir}'"));
        }
        d.paths.push((addr, us * 1000));
    }
    c
}

/// DIR:ADDR=US: packets of direction DIR from or to ADDR (IPv4 or IPv6) wait US microseconds more.
fn parse_origin_delay(spec: &str) -> (String, [u8; 16], u64) {
    let bad = || -> String { format!("--origin-delay '{spec}': expected DIR:ADDR=US (down:198.19.1.12=50000)") };
    let (dir, rest) = spec.split_once(':').unwrap_or_else(|| usage(&bad()));
    let (addr, us) = rest.rsplit_once('=').unwrap_or_else(|| usage(&bad()));
    let ip: std::net::IpAddr = addr.parse().unwrap_or_else(|_| usage(&bad()));
    let bytes = match ip {
        std::net::IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        std::net::IpAddr::V6(v6) => v6.octets(),
    };
    let us: u64 = us.parse().ok().filter(|n| *n <= 60_000_000).unwrap_or_else(|| usage(&bad()));
    (dir.to_string(), bytes, us)
}

/// An address as it was given (an IPv4 one back from its mapped form).
fn addr_text(a: &[u8; 16]) -> String {
    let v6 = std::net::Ipv6Addr::from(*a);
    v6.to_ipv4_mapped().map_or(v6.to_string(), |v4| v4.to_string())
}

/// recvmmsg calls per loop turn before due packets are released (64 packets each).
const MAX_BATCHES_PER_TURN: usize = 4;

/// Never aim the timer more than this ahead of a release, whatever the wake-ups measured.
const MAX_COMPENSATION_NS: u64 = 300_000;

fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn check(r: i32, what: &str) -> io::Result<i32> {
    if r < 0 {
        let e = io::Error::last_os_error();
        Err(io::Error::new(e.kind(), format!("{what}: {e}")))
    } else {
        Ok(r)
    }
}

fn arm(tfd: i32, at_ns: u64) -> io::Result<()> {
    let spec = libc::itimerspec {
        it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
        it_value: libc::timespec { tv_sec: (at_ns / 1_000_000_000) as i64, tv_nsec: (at_ns % 1_000_000_000) as i64 },
    };
    check(unsafe { libc::timerfd_settime(tfd, libc::TFD_TIMER_ABSTIME, &spec, std::ptr::null_mut()) }, "timerfd_settime")?;
    Ok(())
}

/// The counters as JSON (lifetime figures), with each direction's maxima since the last mark
/// under "since_mark"; the caller resets the marks after a snapshot taken on SIGUSR1.
fn write_stats(path: &str, shared: &[Arc<Shared>], started: &Instant, running: bool, snapshot: u64, dma_us: Option<i32>) {
    let cpu = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru); // every thread's
        ru.ru_utime.tv_sec as f64 + ru.ru_utime.tv_usec as f64 / 1e6 + ru.ru_stime.tv_sec as f64 + ru.ru_stime.tv_usec as f64 / 1e6
    };
    let enobufs = shared.iter().map(|sh| sh.enobufs.load(Ordering::Relaxed)).sum();
    let guards: Vec<_> = shared.iter().map(|sh| sh.dir.lock().unwrap()).collect();
    let dirs: Vec<&Direction> = guards.iter().map(|g| &**g).collect();
    let s = stats_json(std::process::id(), running, snapshot, started.elapsed().as_secs_f64(), cpu, enobufs, dma_us, &dirs);
    drop(dirs);
    drop(guards);
    let tmp = format!("{path}.tmp");
    if std::fs::write(&tmp, s).is_ok() {
        let _ = std::fs::rename(&tmp, path);
    }
}

/// The stats file's text (pure). Its shape is a contract with the Python reader
/// (plt_bench.link.linkem.parse_stats): tests/stats-sample.json is this function's output for
/// fixed counters, checked here and parsed there, so neither side can change it alone.
/// `dma_us`: the PM QoS request linkem holds (--cpu-dma-latency-us), None when it holds none.
fn stats_json(pid: u32, running: bool, snapshot: u64, uptime_s: f64, cpu_s: f64, enobufs: u64, dma_us: Option<i32>,
              dirs: &[&Direction]) -> String {
    let mut s = String::new();
    let dma = dma_us.map_or("null".to_string(), |n| n.to_string());
    let _ = write!(s, "{{\"pid\":{},\"running\":{},\"snapshot\":{},\"uptime_s\":{:.3},\"cpu_s\":{:.4},\"enobufs\":{},\
                       \"cpu_dma_latency_us\":{},\"dirs\":{{",
                   pid, running, snapshot, uptime_s, cpu_s, enobufs, dma);
    for (i, d) in dirs.iter().enumerate() {
        let c = &d.c;
        let mean_late_us = if c.released > 0 { c.late_sum_ns as f64 / c.released as f64 / 1000.0 } else { 0.0 };
        let early = format!("\"early\":{},\"early_max_us\":{:.1},", c.early, c.early_max_ns as f64 / 1000.0);
        let hist: Vec<String> = LATE_BUCKETS_US.iter().zip(c.late_hist.iter())
            .map(|(b, n)| format!("\"{}\":{}", if *b == u64::MAX { "inf".to_string() } else { b.to_string() }, n)).collect();
        let t = &d.t;
        let trace = format!("\"trace\":{{\"path\":{},\"period_ms\":{},\"opportunities_per_period\":{},\"limit\":{},\
                             \"epoch_ns\":{},\"rewinds\":{},\"opportunities\":{},\"idle_opportunities\":{},\"served_bytes\":{},\"queue_drops\":{},\
                             \"qdepth\":{},\"max_qdepth\":{}}},",
                            json_str(d.p.trace.as_ref().map_or("", |tr| tr.path.as_str())),
                            d.p.trace.as_ref().map_or(0, |tr| tr.period_ms), d.p.trace.as_ref().map_or(0, |tr| tr.ms.len()),
                            d.p.trace.as_ref().map_or(0, |tr| tr.limit), t.epoch_ns, t.rewinds, t.opportunities,
                            t.idle_opportunities, t.served_bytes, t.queue_drops, d.queued(), t.max_qdepth);
        let q = &d.q.c;
        let bottleneck = format!("\"bottleneck\":{{\"aqm\":\"{}\",\"rate_bps\":{},\"limit\":{},\"ecn\":{},\"aqm_drops\":{},\
                                  \"marks\":{},\"overlimit_drops\":{},\"dequeued\":{},\"sojourn_sum_us\":{:.1},\"sojourn_max_us\":{:.1},\
                                  \"qlen\":{},\"drop_prob\":{:.6}}},",
                                 if d.p.has_bottleneck() { d.p.aqm.name() } else { "none" }, d.p.rate_bps.unwrap_or(0),
                                 d.q.limit, d.p.ecn, q.aqm_drops, q.marks, q.overlimit_drops, q.dequeued,
                                 q.sojourn_sum_ns as f64 / 1000.0, q.sojourn_max_ns as f64 / 1000.0, d.queued(), d.q.drop_prob());
        let paths: Vec<String> = d.p.paths.iter().zip(d.path_packets.iter())
            .map(|((a, ns), n)| format!("{{\"addr\":\"{}\",\"extra_us\":{},\"packets\":{}}}", addr_text(a), ns / 1000, n))
            .collect();
        let _ = write!(s, "{}\"{}\":{{\"queue\":{},\"delay_us\":{},\"jitter_us\":{},\"dist\":\"{:?}\",\"loss\":{},\"reorder\":{},\
                           \"paths\":[{}],\"packets\":{},\"bytes\":{},\"dropped\":{},\"released\":{},\"depth\":{},\"max_depth\":{},\
                           \"reordered\":{},\"ecn\":{{\"not_ect\":{},\"ect1\":{},\"ect0\":{},\"ce\":{}}},{}{}{}\"late_mean_us\":{:.2},\"late_sum_us\":{:.1},\"late_max_us\":{:.1},\"late_hist_us\":{{{}}},\
                           \"since_mark\":{{\"late_max_us\":{:.1},\"early_max_us\":{:.1},\"max_depth\":{}}}}}",
                       if i > 0 { "," } else { "" }, d.p.name, d.p.queue, d.p.delay_ns / 1000, d.p.jitter_ns / 1000,
                       d.p.dist, d.p.loss, d.p.reorder, paths.join(","), c.packets, c.bytes, c.dropped, c.released, d.depth(), c.max_depth,
                       c.reordered, c.ecn[0], c.ecn[1], c.ecn[2], c.ecn[3], early, trace, bottleneck, mean_late_us, c.late_sum_ns as f64 / 1000.0, c.late_max_ns as f64 / 1000.0, hist.join(","),
                       c.mark.late_max_ns as f64 / 1000.0, c.mark.early_max_ns as f64 / 1000.0, c.mark.max_depth);
    }
    s.push_str("}}\n");
    s
}

/// A JSON string (paths are the only free text linkem writes).
fn json_str(v: &str) -> String {
    let mut out = String::from("\"");
    for ch in v.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => { let _ = write!(out, "\\u{:04x}", c as u32); }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// One direction: what its thread and the main thread (stats, signals) share.
struct Shared {
    dir: Mutex<Direction>,
    enobufs: AtomicU64,
}

/// A direction's timer: aimed ahead of the next release by its expected wake-up latency, learned
/// from every wake-up (an EWMA), so that releases land on time rather than one latency late.
struct Timer {
    fd: i32,
    armed_for: u64, // the release time the timer is set for
    armed_at: u64,  // the time the timer was asked to fire
    latency: u64,   // expected timer wake-up latency, ns
}

impl Timer {
    fn new() -> io::Result<Timer> {
        let fd = check(unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC) }, "timerfd")?;
        Ok(Timer { fd, armed_for: u64::MAX, armed_at: 0, latency: 0 })
    }

    fn fired(&mut self) {
        let mut buf = [0u8; 8];
        unsafe { libc::read(self.fd, buf.as_mut_ptr() as *mut libc::c_void, 8) };
        let lat = now_ns().saturating_sub(self.armed_at).min(MAX_COMPENSATION_NS);
        self.latency = (self.latency * 7 + lat) / 8;
        self.armed_for = u64::MAX;
    }

    fn aim(&mut self, next: Option<u64>, now: u64) -> io::Result<()> {
        if let Some(next) = next {
            if next != self.armed_for {
                self.armed_at = next.saturating_sub(self.latency).max(now + 1);
                arm(self.fd, self.armed_at)?;
                self.armed_for = next;
            }
        }
        Ok(())
    }
}

/// The packets due now (within the timer's expected latency) into `due`, under the direction's lock
/// (let go before the kernel is asked to send them); returns (now, the next due time).
fn take_due(sh: &Shared, timer: &Timer, due: &mut Vec<u32>, drops: &mut Vec<(u16, u32)>, marked: &mut Vec<u32>)
             -> (u64, Option<u64>) {
    let now = now_ns();
    due.clear();
    let mut d = sh.dir.lock().unwrap();
    d.due(now, timer.latency, due);
    d.take_drops(drops);
    if d.p.ecn {
        marked.extend(due.iter().copied().filter(|&id| d.take_mark(id)));
    }
    (now, d.next_due())
}

/// The mark a CE-marked packet's verdict sets (the link's rule after the queue sets the IP header's
/// CE codepoint on packets that carry it): "CE" in ASCII.
pub const CE_MARK: u32 = 0x4345;

/// An epoll set over these descriptors (each event's u64 is its fd).
fn epoll_of(fds: &[i32]) -> io::Result<i32> {
    let ep = check(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) }, "epoll")?;
    for &fd in fds {
        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: fd as u64 };
        check(unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev) }, "epoll_ctl")?;
    }
    Ok(ep)
}

fn wait(ep: i32, events: &mut [libc::epoll_event]) -> io::Result<usize> {
    loop {
        let n = unsafe { libc::epoll_wait(ep, events.as_mut_ptr(), events.len() as i32, -1) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

/// One direction's loop over an NFQUEUE, on a thread of its own: its queue's socket, its timer. A
/// packet costs its verdict's system call, and the kernel runs the released packet's forwarding
/// (and the receiver's stack) inside that call: one thread per direction spreads this over the cores.
fn dir_loop(mut sock: nfq::Socket, sh: Arc<Shared>) -> io::Result<()> {
    let queue = sh.dir.lock().unwrap().p.queue;
    let mut timer = Timer::new()?;
    let ep = epoll_of(&[sock.fd, timer.fd])?;
    let mut pkts = Vec::with_capacity(4096);
    let mut drops = Vec::with_capacity(4096);
    let mut due = Vec::with_capacity(4096);
    let mut marked = Vec::with_capacity(256);
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; 4];
    loop {
        let n = wait(ep, &mut events)?;
        for ev in &events[..n] {
            let fd = ev.u64 as i32;
            if fd == timer.fd {
                timer.fired();
            } else if fd == sock.fd {
                // a bounded drain: releases that fall due are never starved by a flood of arrivals
                for _ in 0..MAX_BATCHES_PER_TURN {
                    let got = sock.recv_batch(&mut pkts)?;
                    if got == 0 {
                        break;
                    }
                    let now = now_ns();
                    {
                        let mut d = sh.dir.lock().unwrap();
                        for p in pkts.drain(..) {
                            if p.queue != queue {
                                drops.push((p.queue, p.id)); // not ours to pass
                            } else if let Action::Drop = { let path = d.path_of(&p.addrs); d.on_packet_of(now, p.id, p.len, p.flow, p.ecn, path) } {
                                drops.push((p.queue, p.id));
                            }
                        }
                        d.take_drops(&mut drops); // what its discipline dropped from the queue
                    }
                    for (q, id) in drops.drain(..) {
                        sock.verdict(q, id, nfq::NF_DROP)?;
                    }
                    if got < nfq::BATCH {
                        break; // the socket is drained: spare the call that would say EAGAIN
                    }
                }
            }
        }
        // release everything due, then sleep until the next release; the verdicts go out after
        // the lock is let go, so the stats writer never waits on the kernel's forwarding
        let (now, next) = take_due(&sh, &timer, &mut due, &mut drops, &mut marked);
        for (q, id) in drops.drain(..) {
            sock.verdict(q, id, nfq::NF_DROP)?;
        }
        for &id in &due {
            if !marked.is_empty() && marked.contains(&id) {
                sock.accept_marked(queue, id, CE_MARK)?;
            } else {
                sock.verdict(queue, id, nfq::NF_ACCEPT)?;
            }
        }
        marked.clear();
        sock.flush()?;
        sh.enobufs.store(sock.enobufs, Ordering::Relaxed);
        timer.aim(next, now)?;
    }
}

/// Ask the kernel's PM QoS that idle CPUs wake within `us`, for as long as the returned file is open
/// (the request goes when it closes, on any exit). None, said on stderr, where the kernel refuses:
/// linkem still runs, and its stats say no request is held.
fn hold_cpu_dma_latency(us: i32) -> Option<(std::fs::File, i32)> {
    use std::io::Write;
    let held = std::fs::OpenOptions::new().write(true).open("/dev/cpu_dma_latency")
        .and_then(|mut f| f.write_all(&us.to_ne_bytes()).map(|_| f));
    match held {
        Ok(f) => Some((f, us)),
        Err(e) => {
            eprintln!("linkem: not holding /dev/cpu_dma_latency at {us} us ({e}): packets may be released late \
                       when a CPU wakes from idle");
            None
        }
    }
}

fn run(c: Config) -> io::Result<()> {
    // the scheduling policy, the timer slack and the signal mask are set before the direction
    // threads start, which inherit them: signals reach only the main thread's signalfd
    if c.fifo > 0 {
        let param = libc::sched_param { sched_priority: c.fifo };
        check(unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) }, "SCHED_FIFO")?;
    }
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1, 0, 0, 0) };
    let _dma = c.cpu_dma_latency_us.and_then(hold_cpu_dma_latency); // held while this frame lives: linkem's life
    let dma_us = _dma.as_ref().map(|(_, n)| *n);
    let mut mask: libc::sigset_t = unsafe { std::mem::zeroed() };
    unsafe {
        libc::sigemptyset(&mut mask);
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGUSR1, libc::SIGUSR2] {
            libc::sigaddset(&mut mask, s);
        }
        libc::sigprocmask(libc::SIG_BLOCK, &mask, std::ptr::null_mut());
    }
    let sfd = check(unsafe { libc::signalfd(-1, &mask, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC) }, "signalfd")?;

    // every queue bound, each on its own socket, before anything runs: a failure is linkem's exit
    let mut socks = Vec::new();
    for p in &c.dirs {
        let mut sock = nfq::Socket::open(64 << 20)?;
        sock.bind_queue(p.queue, c.maxlen).map_err(|e| io::Error::new(e.kind(), format!("binding queue {}: {e}", p.queue)))?;
        socks.push(sock);
    }
    let shared: Vec<Arc<Shared>> = c.dirs.iter().enumerate()
        .map(|(i, p)| Arc::new(Shared { dir: Mutex::new(Direction::new(p.clone(), c.seed.wrapping_add(i as u64 * 0x9E37_79B9))),
                                        enobufs: AtomicU64::new(0) }))
        .collect();
    let started = Instant::now();
    let t0 = now_ns();
    for sh in &shared {
        sh.dir.lock().unwrap().rewind(t0); // every trace starts with linkem
    }
    for (sock, sh) in socks.into_iter().zip(shared.iter().cloned()) {
        let name = format!("linkem-q{}", sh.dir.lock().unwrap().p.queue);
        std::thread::Builder::new().name(name).spawn(move || {
            if let Err(e) = dir_loop(sock, sh) {
                eprintln!("linkem: {e}");
                std::process::exit(1); // fail closed: the queues go with the process
            }
        })?;
    }
    let snap_path = format!("{}.snap", c.stats);
    let mut snapshots = 0u64; // SIGUSR1 requests answered
    write_stats(&c.stats, &shared, &started, true, snapshots, dma_us); // ready: every queue is bound
    let mut next_stats = now_ns() + c.stats_ms * 1_000_000;
    let ep = check(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) }, "epoll")?;
    let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: sfd as u64 };
    check(unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, sfd, &mut ev) }, "epoll_ctl")?;
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; 1];
    loop {
        let wait_ms = (next_stats.saturating_sub(now_ns()) / 1_000_000) as i32;
        let n = unsafe { libc::epoll_wait(ep, events.as_mut_ptr(), 1, wait_ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        if n > 0 {
            let mut si: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
            let sz = std::mem::size_of::<libc::signalfd_siginfo>();
            let got = unsafe { libc::read(sfd, &mut si as *mut _ as *mut libc::c_void, sz) };
            if got == sz as isize && si.ssi_signo == libc::SIGUSR2 as u32 {
                let now = now_ns(); // a mark: every trace starts over now, in one instant for all directions
                for sh in &shared {
                    let mut d = sh.dir.lock().unwrap();
                    if d.p.trace.is_some() {
                        d.rewind(now);
                        d.t.rewinds += 1;
                    }
                }
                continue;
            }
            if got == sz as isize && si.ssi_signo == libc::SIGUSR1 as u32 {
                snapshots += 1;
                write_stats(&snap_path, &shared, &started, true, snapshots, dma_us); // a snapshot on request
                for sh in &shared {
                    sh.dir.lock().unwrap().c.mark = sched::Marked::default(); // the next snapshot's maxima are its own
                }
                continue;
            }
            if got == sz as isize {
                write_stats(&c.stats, &shared, &started, false, snapshots, dma_us);
                return Ok(());
            }
        }
        let now = now_ns();
        if now >= next_stats {
            write_stats(&c.stats, &shared, &started, true, snapshots, dma_us);
            next_stats = now + c.stats_ms * 1_000_000;
        }
    }
}

fn main() {
    let c = parse_args();
    if let Err(e) = run(c) {
        eprintln!("linkem: {e}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sched::Marked;

    /// Two directions with fixed counters, as after a short run with one 2 s stall.
    fn sample_dirs() -> Vec<Direction> {
        let mut dp = Params::plain("down", 42, 25_000_000, 5_000_000, Dist::Uniform, 0.01, true);
        dp.paths = vec![(std::net::Ipv4Addr::new(198, 19, 1, 12).to_ipv6_mapped().octets(), 50_000_000)];
        dp.rate_bps = Some(20_000_000);
        dp.limit = 100;
        dp.ecn = true;
        dp.aqm = aqm::Kind::FqCodel { target_ns: 5_000_000, interval_ns: 100_000_000, flows: 1024, quantum: 1514 };
        let mut down = Direction::new(dp, 1);
        down.path_packets = vec![2100];
        down.q.c = aqm::AqmCounters { aqm_drops: 9, marks: 30, overlimit_drops: 2, dequeued: 6900,
                                      sojourn_sum_ns: 34_500_000_000, sojourn_max_ns: 21_000_000 };
        down.c.packets = 7000;
        down.c.bytes = 10_150_000;
        down.c.dropped = 70;
        down.c.released = 6930;
        down.c.max_depth = 120;
        down.c.late_hist = [6000, 800, 100, 20, 0, 0, 2, 0, 8];
        down.c.late_sum_ns = 16_500_000_000;
        down.c.late_max_ns = 2_000_100_000;
        down.c.early = 3;
        down.c.early_max_ns = 40_000;
        down.c.reordered = 12;
        down.c.ecn = [6000, 0, 990, 10];
        down.c.mark = Marked { late_max_ns: 2_000_100_000, early_max_ns: 40_000, max_depth: 120 };
        let mut upp = Params::plain("up", 43, 25_000_000, 0, Dist::Normal, 0.0, false);
        upp.trace = Some(Trace { path: "/tmp/a \"b\".txt".into(), ms: vec![1, 1, 3], period_ms: 3, limit: 40 });
        let mut up = Direction::new(upp, 2);
        up.t.epoch_ns = 5_000_000_000;
        up.t.rewinds = 2;
        up.t.opportunities = 300;
        up.t.idle_opportunities = 120;
        up.t.served_bytes = 450_000;
        up.t.queue_drops = 7;
        up.t.max_qdepth = 40;
        vec![down, up]
    }

    #[test]
    fn the_stats_file_is_the_sample_the_python_reader_is_tested_on() {
        let dirs = sample_dirs();
        let got = stats_json(4242, true, 3, 12.5, 0.75, 1, Some(0), &dirs.iter().collect::<Vec<_>>());
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/stats-sample.json");
        if std::env::var("LINKEM_WRITE_SAMPLE").is_ok() {
            std::fs::write(path, &got).unwrap();
        }
        let want = std::fs::read_to_string(path).expect("tests/stats-sample.json (LINKEM_WRITE_SAMPLE=1 writes it)");
        assert_eq!(got, want, "the stats file changed: update plt_bench.link.linkem.parse_stats with it, then \
                               rewrite the sample with LINKEM_WRITE_SAMPLE=1 cargo test");
    }
}
