//! The access log: one JSON object a line per response, written when its body has been handed to
//! the connection, in plt-bench's own terms (plt_bench/servers/base.py): no parsing of a server's
//! words on the other side.

use serde::Serialize;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// What a request was, known when it arrives.
#[derive(Debug, Clone, Default)]
pub struct Request {
    pub method: String,
    pub uri: String,
    pub host: String,
    pub proto: &'static str,
    pub referer: Option<String>,
    pub remote_port: u16,
    /// its connection's TLS session was resumed (h3: None unless a request came in 0-RTT, which only a
    /// resumed session can send; quinn tells a server no more)
    pub resumed: Option<bool>,
    /// the congestion controller its connection ran: quinn's for h3, the kernel's for TCP
    pub cc: String,
    pub start_unix_s: f64,
    /// its connection's handshake round trip as the server measured it (ms): the kernel's first RTT sample
    /// of a TCP connection (its SYN-ACK's), quinn's RTT once a QUIC handshake completed; None: unknown
    pub rtt_ms: Option<f64>,
}

#[derive(Serialize)]
struct Line<'a> {
    uri: &'a str,
    host: &'a str,
    proto: &'a str,
    status: u16,
    size: u64,
    end_unix_s: f64,
    duration_s: f64,
    referer: Option<&'a str>,
    remote_port: u16,
    resumed: Option<bool>,
    method: &'a str,
    replay: Option<&'a str>,
    cc: &'a str,
    /// the think stage's header X-Plt-Think (asked and waited ms), where a think was asked
    think: Option<&'a str>,
    rtt_ms: Option<f64>,
    /// the response's body was not handed over whole (the client went away)
    aborted: bool,
}

pub fn now_unix_s() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

pub struct AccessLog {
    file: Mutex<File>,
}

impl AccessLog {
    pub fn open(path: &Path) -> std::io::Result<AccessLog> {
        Ok(AccessLog { file: Mutex::new(OpenOptions::new().create(true).append(true).open(path)?) })
    }

    /// One response's line: status, body bytes, replayd's word on how it matched, its think, whether it
    /// ended early.
    pub fn write(&self, r: &Request, status: u16, size: u64, replay: Option<&str>, think: Option<&str>, aborted: bool) {
        let end = now_unix_s();
        let line = Line {
            uri: &r.uri, host: &r.host, proto: r.proto, status, size, end_unix_s: end,
            duration_s: (end - r.start_unix_s).max(0.0), referer: r.referer.as_deref(), remote_port: r.remote_port,
            resumed: r.resumed, method: &r.method, replay, cc: &r.cc, think, rtt_ms: r.rtt_ms, aborted,
        };
        let mut text = serde_json::to_string(&line).unwrap_or_default();
        text.push('\n');
        if let Ok(mut f) = self.file.lock() {
            let _ = f.write_all(text.as_bytes()); // one write a line (O_APPEND): a reader never sees half of one
        }
    }
}
