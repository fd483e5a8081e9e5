//! The configuration plt-bench writes for one server (plt_bench/servers/quinnserve.py builds it):
//! a JSON file, checked whole before anything listens.

use serde::Deserialize;
use std::net::IpAddr;
use std::path::PathBuf;

/// QUIC congestion controllers quinn offers, by the names plt-bench's --cc uses.
pub const CONTROLLERS: &[&str] = &["newreno", "cubic", "bbr"];
pub const PROTOCOLS: &[&str] = &["h3", "h2", "h1"];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// the folder the generated pages are served from
    pub sites: PathBuf,
    /// the testbed's certificate (PEM, every origin's name) and its key
    pub cert: PathBuf,
    pub key: PathBuf,
    /// where each response's entry is appended, one JSON object a line
    pub access_log: PathBuf,
    /// the paths served from `sites` (a regular expression over the request's path, anchored)
    pub served: String,
    /// HTTP/3's congestion controller: newreno, cubic or bbr
    pub cc: String,
    /// a file whose content, when it exists, names the controller of the connections to come (plt-bench
    /// writes it when a campaign switches --cc): read as each connection arrives
    #[serde(default)]
    pub cc_file: Option<PathBuf>,
    /// concurrent request streams a client may open per connection, h3 and h2 alike
    #[serde(default = "default_streams")]
    pub max_streams: u32,
    pub listeners: Vec<Listener>,
    /// replayd's address (127.0.0.1:PORT), for the listeners that replay recordings
    #[serde(default)]
    pub replay_upstream: Option<String>,
    /// a file whose content is the think time asked of the loads to come (plt_bench/pages/timing.py:
    /// off, recorded or MS): a file's response waits MS before its first byte (recorded is a
    /// recording's, whose wait is replayd's). Read as each request arrives.
    #[serde(default)]
    pub think_file: Option<PathBuf>,
}

fn default_streams() -> u32 {
    100
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct Listener {
    pub addr: IpAddr,
    #[serde(default = "default_port")]
    pub port: u16,
    /// what it offers: h3 (UDP), h2 and h1 (TCP, by ALPN)
    pub protocols: Vec<String>,
    /// its requests go to replayd (a recording's hosts) rather than to the files
    #[serde(default)]
    pub replay: bool,
}

fn default_port() -> u16 {
    443
}

impl Listener {
    pub fn offers(&self, proto: &str) -> bool {
        self.protocols.iter().any(|p| p == proto)
    }
}

impl Config {
    /// The configuration in a JSON text, or what is wrong with it.
    pub fn parse(text: &str) -> Result<Config, String> {
        let c: Config = serde_json::from_str(text).map_err(|e| format!("configuration: {e}"))?;
        if !CONTROLLERS.contains(&c.cc.as_str()) {
            return Err(format!("cc: {:?} is no QUIC controller of quinn's; expected one of {}", c.cc,
                               CONTROLLERS.join(", ")));
        }
        if c.listeners.is_empty() {
            return Err("listeners: none given".into());
        }
        for l in &c.listeners {
            if l.protocols.is_empty() || l.protocols.iter().any(|p| !PROTOCOLS.contains(&p.as_str())) {
                return Err(format!("listener {}: protocols {:?}; expected some of h3, h2, h1", l.addr, l.protocols));
            }
            if l.replay && c.replay_upstream.is_none() {
                return Err(format!("listener {}: replays, but no replay_upstream is given", l.addr));
            }
        }
        if c.max_streams == 0 {
            return Err("max_streams: 0; a client could send no request".into());
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: &str = r#"{"sites": "/s", "cert": "/c", "key": "/k", "access_log": "/a", "served": "^/x$", "cc": "bbr",
        "listeners": [{"addr": "10.0.0.1", "protocols": ["h3", "h2", "h1"]},
                      {"addr": "10.0.0.2", "protocols": ["h1"], "replay": true}], "replay_upstream": "127.0.0.1:9"}"#;

    #[test]
    fn a_whole_configuration_is_read() {
        let c = Config::parse(OK).unwrap();
        assert_eq!((c.cc.as_str(), c.max_streams, c.listeners.len()), ("bbr", 100, 2));
        assert!(c.listeners[0].offers("h3") && !c.listeners[1].offers("h3") && c.listeners[1].replay);
        assert_eq!(c.listeners[0].port, 443);
    }

    #[test]
    fn what_cannot_run_is_refused_by_name() {
        for (from, to, says) in [("\"bbr\"", "\"vegas\"", "cc: \"vegas\""), ("\"h1\"]", "\"h4\"]", "expected some of h3, h2, h1"),
                                 (", \"replay_upstream\": \"127.0.0.1:9\"", "", "no replay_upstream"),
                                 ("\"cc\"", "\"congestion\"", "unknown field")] {
            let e = Config::parse(&OK.replace(from, to)).unwrap_err();
            assert!(e.contains(says), "{e}");
        }
    }
}
