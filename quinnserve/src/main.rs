//! quinnserve: plt-bench's second HTTP server. HTTP/3 on quinn, whose QUIC congestion controller is
//! chosen (NewReno, CUBIC or BBR), and HTTP/2 and HTTP/1.1 on hyper over the kernel's TCP (whose
//! controller is the kernel's, read back per connection). It serves what plt-bench's Caddy serves,
//! by the same rules (files.rs), on every listener's address, and writes an access log in
//! plt-bench's terms (access.rs).
//!
//!     quinnserve --config FILE     (config.rs; plt_bench/servers/quinnserve.py writes it)
//!     quinnserve --bulk-server ... | --bulk-client ...   (bulk.rs: competing QUIC flows, link/cross.py)
//!
//! It prints one line, "listening", on stderr once every listener is bound, and exits on SIGTERM or
//! SIGINT.

mod access;
mod bulk;
mod config;
mod files;

use access::{AccessLog, Request};
use bytes::{Buf, Bytes, BytesMut};
use config::{Config, Listener};
use futures_util::TryStreamExt;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Empty, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use tokio::io::AsyncReadExt;

type Error = Box<dyn std::error::Error + Send + Sync>;
const CHUNK: usize = 64 * 1024;

/// What every connection shares: the files, the rules, the log.
struct Site {
    sites: PathBuf,
    served: regex::Regex,
    log: AccessLog,
    upstream: Option<SocketAddr>,
    think_file: Option<PathBuf>,
}

/// The fixed think (ms) the think file asks now, or None: off (or recorded, a recording's: replayd
/// waits for those), or no file.
fn fixed_think_ms(site: &Site) -> Option<f64> {
    let text = std::fs::read_to_string(site.think_file.as_ref()?).ok()?;
    let t = text.trim().trim_end_matches("ms");
    if t == "off" {
        return None;
    }
    if t == "recorded" {
        return Some(0.0); // a file has no recorded think: answered at once, and says so
    }
    t.parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0)
}

/// The QUIC configurations, one per controller, and which one a new connection gets: the
/// configuration's, or the one the cc file names when it exists and names one.
struct Quic {
    configs: Vec<(&'static str, quinn::ServerConfig)>,
    default: String,
    cc_file: Option<PathBuf>,
}

impl Quic {
    fn for_new_connection(&self) -> (&'static str, quinn::ServerConfig) {
        let wanted = self.cc_file.as_ref().and_then(|f| std::fs::read_to_string(f).ok())
            .map(|t| t.trim().to_string()).unwrap_or_else(|| self.default.clone());
        let pick = self.configs.iter().find(|(n, _)| *n == wanted)
            .or_else(|| self.configs.iter().find(|(n, _)| *n == self.default)).expect("the default controller");
        (pick.0, pick.1.clone())
    }
}

/// A response before it is sent, whatever protocol carries it.
struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Body,
    replay: Option<String>,
    think: Option<String>,
}

enum Body {
    Empty,
    File(tokio::fs::File),
    Upstream(Incoming),
}

fn reply(status: StatusCode, headers: HeaderMap) -> Reply {
    Reply { status, headers, body: Body::Empty, replay: None, think: None }
}

fn put(h: &mut HeaderMap, name: &str, value: &str) {
    if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(value)) {
        h.append(n, v);
    }
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// The answer to a request for one of the pages' files.
async fn answer_file(site: &Site, method: &Method, path: &str, req: &HeaderMap, tcp_offers_h3: bool) -> Reply {
    let mut h = HeaderMap::new();
    put(&mut h, "server", "quinnserve");
    for (k, v) in files::site_headers(path, req.contains_key("origin"), tcp_offers_h3) {
        put(&mut h, k, v);
    }
    if !site.served.is_match(path) {
        put(&mut h, "content-length", "0");
        return reply(StatusCode::NOT_FOUND, h);
    }
    if method != Method::GET && method != Method::HEAD {
        put(&mut h, "allow", "GET, HEAD");
        put(&mut h, "content-length", "0");
        return reply(StatusCode::METHOD_NOT_ALLOWED, h);
    }
    let file_path = site.sites.join(path.trim_start_matches('/'));
    let (file, meta) = match tokio::fs::File::open(&file_path).await {
        Ok(f) => match f.metadata().await {
            Ok(m) if m.is_file() => (f, m),
            _ => {
                put(&mut h, "content-length", "0");
                return reply(StatusCode::NOT_FOUND, h);
            }
        },
        Err(_) => {
            put(&mut h, "content-length", "0");
            return reply(StatusCode::NOT_FOUND, h);
        }
    };
    let mtime = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
    let tag = files::etag(mtime, meta.len());
    put(&mut h, "etag", &tag);
    put(&mut h, "last-modified", &httpdate::fmt_http_date(mtime));
    if files::not_modified(header(req, "if-none-match"), header(req, "if-modified-since"), &tag, mtime) {
        return reply(StatusCode::NOT_MODIFIED, h);
    }
    put(&mut h, "content-type", files::content_type(path));
    put(&mut h, "content-length", &meta.len().to_string());
    let body = if method == Method::HEAD { Body::Empty } else { Body::File(file) };
    Reply { status: StatusCode::OK, headers: h, body, replay: None, think: None }
}

const HOP_BY_HOP: &[&str] = &["connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te",
                              "trailer", "proxy-authenticate", "proxy-authorization"];

/// A replayed recording's request, handed to replayd with its host; its answer as replayd gives it.
async fn answer_replay(site: &Site, method: &Method, pq: &str, host: &str, req: &HeaderMap, body: Bytes,
                       tcp_offers_h3: bool) -> Result<Reply, Error> {
    let upstream = site.upstream.ok_or("no replay upstream")?;
    let tcp = tokio::net::TcpStream::connect(upstream).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
    tokio::spawn(conn);
    let mut out = http::Request::builder().method(method.clone()).uri(pq);
    for (k, v) in req.iter() {
        if !HOP_BY_HOP.contains(&k.as_str()) && k != "host" {
            out = out.header(k, v);
        }
    }
    let out = out.header("host", host).body(Full::new(body))?;
    let resp = sender.send_request(out).await?;
    let (parts, incoming) = resp.into_parts();
    let mut h = HeaderMap::new();
    for (k, v) in parts.headers.iter() {
        if !HOP_BY_HOP.contains(&k.as_str()) {
            h.append(k.clone(), v.clone());
        }
    }
    if tcp_offers_h3 {
        put(&mut h, "alt-svc", "h3=\":443\"; ma=2592000");
    }
    let replay = header(&h, "x-plt-replay").map(str::to_string);
    let think = header(&h, "x-plt-think").map(str::to_string); // replayd's wait
    Ok(Reply { status: parts.status, headers: h, body: Body::Upstream(incoming), replay, think })
}

async fn answer(site: &Site, listener: &Listener, method: &Method, pq: &str, host: &str, req: &HeaderMap, body: Bytes,
                tcp: bool) -> Reply {
    let offers_h3 = tcp && listener.offers("h3");
    if listener.replay {
        return match answer_replay(site, method, pq, host, req, body, offers_h3).await {
            Ok(r) => r,
            Err(e) => {
                eprintln!("quinnserve: replay {pq}: {e}");
                let mut h = HeaderMap::new();
                put(&mut h, "content-length", "0");
                reply(StatusCode::BAD_GATEWAY, h)
            }
        };
    }
    let path = pq.split('?').next().unwrap_or("/");
    // the think asked (plt_bench/pages/timing.py): a wait before the first byte, said in X-Plt-Think
    let arrived = std::time::Instant::now();
    let asked = fixed_think_ms(site);
    if let Some(ms) = asked {
        tokio::time::sleep(std::time::Duration::from_secs_f64(ms / 1000.0).saturating_sub(arrived.elapsed())).await;
    }
    let mut r = answer_file(site, method, path, req, offers_h3).await;
    if let Some(ms) = asked {
        let said = format!("asked={:.3}; waited={:.3}", ms, arrived.elapsed().as_secs_f64() * 1000.0);
        put(&mut r.headers, "x-plt-think", &said);
        r.think = Some(said);
    }
    r
}

fn host_of(uri: &http::Uri, headers: &HeaderMap) -> String {
    let raw = uri.host().map(str::to_string).or_else(|| header(headers, "host").map(str::to_string)).unwrap_or_default();
    match raw.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') && p.chars().all(|c| c.is_ascii_digit()) => h.to_string(),
        _ => raw,
    }
}

// ---- HTTP/3 on quinn ----

fn quic_config(cfg: &Config, cc: &str, certs: &[rustls::pki_types::CertificateDer<'static>],
               key: &rustls::pki_types::PrivateKeyDer<'static>) -> Result<quinn::ServerConfig, Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_no_client_auth()
        .with_single_cert(certs.to_vec(), key.clone_key())?;
    tls.alpn_protocols = vec![b"h3".to_vec()];
    tls.max_early_data_size = u32::MAX; // 0-RTT, as Caddy's quic-go accepts it
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(quinn::crypto::rustls::QuicServerConfig::try_from(tls)?));
    let mut transport = quinn::TransportConfig::default();
    transport.max_concurrent_bidi_streams(cfg.max_streams.into());
    match cc {
        "newreno" => transport.congestion_controller_factory(Arc::new(quinn::congestion::NewRenoConfig::default())),
        "cubic" => transport.congestion_controller_factory(Arc::new(quinn::congestion::CubicConfig::default())),
        _ => transport.congestion_controller_factory(Arc::new(quinn::congestion::BbrConfig::default())),
    };
    server.transport_config(Arc::new(transport));
    Ok(server)
}

async fn serve_h3(endpoint: quinn::Endpoint, site: Arc<Site>, listener: Arc<Listener>, quic: Arc<Quic>) {
    while let Some(incoming) = endpoint.accept().await {
        let (site, listener) = (site.clone(), listener.clone());
        let (cc, config) = quic.for_new_connection();
        tokio::spawn(async move {
            let mut connecting = match incoming.accept_with(Arc::new(config)) {
                Ok(c) => c,
                Err(_) => return,
            };
            let remote_port = connecting.remote_address().port();
            // the whole ClientHello first (Chromium's spans two Initial packets): until its transport
            // parameters are read the client allows no stream, and a control stream opened then waited
            // for ever (seen on the first connection of a testbed: SETTINGS never sent, the page never
            // answered)
            if connecting.handshake_data().await.is_err() {
                return;
            }
            // 0.5-RTT: answer as soon as the client's first flight allows
            let (conn, done) = match connecting.into_0rtt() {
                Ok(pair) => pair,
                Err(_) => return,
            };
            // 1 once the handshake completes. A request that arrives before it came in 0-RTT, which only a
            // resumed session can send: the connection resumed (quinn tells a server no more: its
            // ZeroRttAccepted says whether a *client's* 0-RTT was accepted)
            let (settle, handshake) = tokio::sync::watch::channel(0u8);
            // the handshake's round trip as quinn measured it when the handshake completed (before any load
            // queued on the connection)
            let rtt = Arc::new(std::sync::Mutex::new(None::<f64>));
            let (measured, watched) = (conn.clone(), rtt.clone());
            tokio::spawn(async move {
                let _ = done.await;
                if let Ok(mut r) = watched.lock() {
                    *r = Some(measured.rtt().as_secs_f64() * 1000.0);
                }
                let _ = settle.send(1);
            });
            let early = Arc::new(AtomicBool::new(false));
            let mut h3conn: h3::server::Connection<h3_quinn::Connection, Bytes> =
                match h3::server::builder().build(h3_quinn::Connection::new(conn)).await {
                    Ok(c) => c,
                    Err(_) => return,
                };
            loop {
                match h3conn.accept().await {
                    Ok(Some(resolver)) => {
                        let (site, listener) = (site.clone(), listener.clone());
                        let (handshake, early, rtt) = (handshake.clone(), early.clone(), rtt.clone());
                        tokio::spawn(async move {
                            let _ = handle_h3(resolver, site, listener, remote_port, handshake, early, cc, rtt).await;
                        });
                    }
                    _ => break,
                }
            }
        });
    }
}

async fn handle_h3(resolver: h3::server::RequestResolver<h3_quinn::Connection, Bytes>, site: Arc<Site>,
                   listener: Arc<Listener>, remote_port: u16, mut handshake: tokio::sync::watch::Receiver<u8>,
                   early: Arc<AtomicBool>, cc: &'static str, rtt: Arc<std::sync::Mutex<Option<f64>>>)
                   -> Result<(), Error> {
    let start = access::now_unix_s();
    let (req, mut stream) = resolver.resolve_request().await?;
    if *handshake.borrow() == 0 {
        early.store(true, Ordering::Relaxed); // before the handshake completed: 0-RTT
    }
    let pq = req.uri().path_and_query().map(|p| p.as_str().to_string()).unwrap_or_else(|| "/".into());
    let info = Request {
        method: req.method().to_string(), uri: pq.clone(), host: host_of(req.uri(), req.headers()), proto: "h3",
        referer: header(req.headers(), "referer").map(str::to_string), remote_port,
        resumed: None, cc: cc.to_string(), start_unix_s: start, rtt_ms: None,
    };
    let mut body = BytesMut::new();
    if listener.replay && req.method() != Method::GET && req.method() != Method::HEAD {
        while let Some(mut chunk) = stream.recv_data().await? {
            body.extend_from_slice(&chunk.copy_to_bytes(chunk.remaining()));
        }
    }
    let r = answer(&site, &listener, req.method(), &pq, &info.host, req.headers(), body.freeze(), false).await;
    let mut resp = http::Response::builder().status(r.status);
    for (k, v) in r.headers.iter() {
        resp = resp.header(k, v);
    }
    let status = r.status.as_u16();
    let mut sent = 0u64;
    let result: Result<(), Error> = async {
        stream.send_response(resp.body(())?).await?;
        match r.body {
            Body::Empty => {}
            Body::File(mut f) => {
                let mut buf = vec![0u8; CHUNK];
                loop {
                    let n = f.read(&mut buf).await?;
                    if n == 0 {
                        break;
                    }
                    stream.send_data(Bytes::copy_from_slice(&buf[..n])).await?;
                    sent += n as u64;
                }
            }
            Body::Upstream(mut incoming) => {
                while let Some(frame) = incoming.frame().await {
                    if let Ok(data) = frame?.into_data() {
                        sent += data.len() as u64;
                        stream.send_data(data).await?;
                    }
                }
            }
        }
        stream.finish().await?;
        Ok(())
    }
    .await;
    // whether the connection took a request in 0-RTT is known once its handshake completes (bounded: a
    // client gone mid-handshake never completes it)
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), handshake.wait_for(|v| *v != 0)).await;
    let rtt_ms = rtt.lock().ok().and_then(|r| *r);
    let info = Request { resumed: if early.load(Ordering::Relaxed) { Some(true) } else { None }, rtt_ms, ..info };
    site.log.write(&info, status, sent, r.replay.as_deref(), r.think.as_deref(), result.is_err());
    result
}

// ---- HTTP/2 and HTTP/1.1 on hyper, over the kernel's TCP ----

/// The congestion controller the kernel runs on this socket (TCP_CONGESTION), as it says.
fn tcp_congestion(sock: &tokio::net::TcpStream) -> String {
    use std::os::fd::AsRawFd;
    let mut buf = [0u8; 32];
    let mut len = buf.len() as libc::socklen_t;
    let rc = unsafe {
        libc::getsockopt(sock.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_CONGESTION, buf.as_mut_ptr().cast(), &mut len)
    };
    if rc != 0 {
        return String::new();
    }
    let end = buf[..len as usize].iter().position(|&b| b == 0).unwrap_or(len as usize);
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// The kernel's smoothed RTT of this socket (ms; TCP_INFO): read when a connection is accepted, the
/// handshake's own sample (SYN-ACK to ACK), before anything else is sent on it.
fn tcp_rtt_ms(sock: &tokio::net::TcpStream) -> Option<f64> {
    use std::os::fd::AsRawFd;
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    let rc = unsafe {
        libc::getsockopt(sock.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_INFO, (&mut info as *mut libc::tcp_info).cast(),
                         &mut len)
    };
    if rc != 0 || info.tcpi_rtt == 0 {
        return None;
    }
    Some(info.tcpi_rtt as f64 / 1000.0)
}

/// A response body that writes its access-log line when it ends or is dropped (the client gone).
struct Logged {
    inner: BoxBody<Bytes, std::io::Error>,
    expected: Option<u64>, // the body's length where it is known (Content-Length of a body sent)
    site: Arc<Site>,
    info: Request,
    status: u16,
    replay: Option<String>,
    think: Option<String>,
    sent: u64,
    done: bool,
}

impl http_body::Body for Logged {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(d) = frame.data_ref() {
                    this.sent += d.len() as u64;
                }
            }
            Poll::Ready(None) => {
                if !this.done {
                    this.done = true;
                    this.site.log.write(&this.info, this.status, this.sent, this.replay.as_deref(), this.think.as_deref(), false);
                }
            }
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        if !self.done {
            // HTTP/1.1 stops polling a body once its Content-Length is written, an empty one may never be
            // polled: cut short is a body still owed bytes
            let aborted = match self.expected {
                Some(n) => self.sent < n,
                None => !http_body::Body::is_end_stream(&self.inner),
            };
            self.site.log.write(&self.info, self.status, self.sent, self.replay.as_deref(), self.think.as_deref(), aborted);
        }
    }
}

async fn handle_tcp(req: http::Request<Incoming>, site: Arc<Site>, listener: Arc<Listener>, proto: &'static str,
                    remote_port: u16, resumed: bool, cc: Arc<String>, rtt_ms: Option<f64>)
                    -> Result<http::Response<Logged>, Error> {
    let start = access::now_unix_s();
    let pq = req.uri().path_and_query().map(|p| p.as_str().to_string()).unwrap_or_else(|| "/".into());
    let info = Request {
        method: req.method().to_string(), uri: pq.clone(), host: host_of(req.uri(), req.headers()), proto,
        referer: header(req.headers(), "referer").map(str::to_string), remote_port, resumed: Some(resumed),
        cc: cc.to_string(), start_unix_s: start, rtt_ms,
    };
    let (parts, incoming) = req.into_parts();
    let body = if listener.replay { incoming.collect().await?.to_bytes() } else { Bytes::new() };
    let r = answer(&site, &listener, &parts.method, &pq, &info.host, &parts.headers, body, true).await;
    let expected = match &r.body {
        Body::File(_) => header(&r.headers, "content-length").and_then(|v| v.parse::<u64>().ok()),
        _ => None,
    };
    let inner: BoxBody<Bytes, std::io::Error> = match r.body {
        Body::Empty => Empty::new().map_err(|never| match never {}).boxed(),
        Body::File(f) => StreamBody::new(tokio_util::io::ReaderStream::with_capacity(f, CHUNK).map_ok(Frame::data)).boxed(),
        Body::Upstream(incoming) => incoming.map_err(std::io::Error::other).boxed(),
    };
    let mut resp = http::Response::builder().status(r.status);
    for (k, v) in r.headers.iter() {
        resp = resp.header(k, v);
    }
    let status = r.status.as_u16();
    Ok(resp.body(Logged { inner, expected, site, info, status, replay: r.replay, think: r.think, sent: 0, done: false })?)
}

async fn serve_tcp(tcp: tokio::net::TcpListener, acceptor: tokio_rustls::TlsAcceptor, site: Arc<Site>,
                   listener: Arc<Listener>, max_streams: u32) {
    loop {
        let (sock, peer) = match tcp.accept().await {
            Ok(x) => x,
            Err(_) => continue,
        };
        let (site, listener, acceptor) = (site.clone(), listener.clone(), acceptor.clone());
        tokio::spawn(async move {
            let _ = sock.set_nodelay(true); // as Go's (Caddy's) server does
            let cc = Arc::new(tcp_congestion(&sock));
            let rtt = tcp_rtt_ms(&sock);
            let tls = match acceptor.accept(sock).await {
                Ok(t) => t,
                Err(_) => return,
            };
            let (h2, resumed) = {
                let (_, conn) = tls.get_ref();
                (conn.alpn_protocol() == Some(b"h2"),
                 conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed))
            };
            let proto: &'static str = if h2 { "h2" } else { "h1" };
            let service = hyper::service::service_fn(move |req| {
                handle_tcp(req, site.clone(), listener.clone(), proto, peer.port(), resumed, cc.clone(), rtt)
            });
            let io = TokioIo::new(tls);
            if h2 {
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .max_concurrent_streams(max_streams)
                    .serve_connection(io, service)
                    .await;
            } else {
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
            }
        });
    }
}

fn tcp_tls(certs: &[rustls::pki_types::CertificateDer<'static>], key: &rustls::pki_types::PrivateKeyDer<'static>,
           listener: &Listener) -> Result<tokio_rustls::TlsAcceptor, Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs.to_vec(), key.clone_key())?;
    tls.alpn_protocols = if listener.offers("h2") { vec![b"h2".to_vec(), b"http/1.1".to_vec()] } else { vec![b"http/1.1".to_vec()] };
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(tls)))
}

async fn run(cfg: Config) -> Result<(), Error> {
    let certs = rustls_pemfile::certs(&mut std::io::BufReader::new(std::fs::File::open(&cfg.cert)
        .map_err(|e| format!("cert {}: {e}", cfg.cert.display()))?))
        .collect::<Result<Vec<_>, _>>()?;
    let key = rustls_pemfile::private_key(&mut std::io::BufReader::new(std::fs::File::open(&cfg.key)
        .map_err(|e| format!("key {}: {e}", cfg.key.display()))?))?
        .ok_or("key: no private key in the file")?;
    let served = regex::Regex::new(&cfg.served).map_err(|e| format!("served: {e}"))?;
    let upstream = match &cfg.replay_upstream {
        Some(a) => Some(a.parse::<SocketAddr>().map_err(|e| format!("replay_upstream {a}: {e}"))?),
        None => None,
    };
    let log = AccessLog::open(&cfg.access_log).map_err(|e| format!("access_log {}: {e}", cfg.access_log.display()))?;
    let site = Arc::new(Site { sites: cfg.sites.clone(), served, log, upstream, think_file: cfg.think_file.clone() });
    let mut configs = Vec::new();
    for cc in config::CONTROLLERS {
        configs.push((*cc, quic_config(&cfg, cc, &certs, &key)?));
    }
    let quic = Arc::new(Quic { configs, default: cfg.cc.clone(), cc_file: cfg.cc_file.clone() });
    let (_, first) = quic.for_new_connection();
    for l in &cfg.listeners {
        let addr = SocketAddr::new(l.addr, l.port);
        let listener = Arc::new(l.clone());
        if l.offers("h3") {
            let ep = quinn::Endpoint::server(first.clone(), addr).map_err(|e| format!("UDP {addr}: {e}"))?;
            tokio::spawn(serve_h3(ep, site.clone(), listener.clone(), quic.clone()));
        }
        if l.offers("h2") || l.offers("h1") {
            let tcp = tokio::net::TcpListener::bind(addr).await.map_err(|e| format!("TCP {addr}: {e}"))?;
            tokio::spawn(serve_tcp(tcp, tcp_tls(&certs, &key, l)?, site.clone(), listener, cfg.max_streams));
        }
    }
    eprintln!("listening");
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    Ok(())
}

/// The competing flows' modes (bulk.rs): None when the arguments name neither.
fn bulk(args: &[String]) -> Option<Result<(), Error>> {
    let rt = || tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    match args {
        [_, flag, addr, cc, cert, key] if flag == "--bulk-server" => Some(
            addr.parse::<SocketAddr>().map_err(|e| format!("{addr}: {e}").into())
                .and_then(|a| rt().block_on(bulk::server(a, cc, cert, key)))),
        [_, flag, addr, flows, cc, dir, cert, seconds] if flag == "--bulk-client" => Some((|| {
            let a = addr.parse::<SocketAddr>().map_err(|e| format!("{addr}: {e}"))?;
            let n = flows.parse::<usize>().map_err(|e| format!("flows {flows}: {e}"))?;
            let s = seconds.parse::<u64>().map_err(|e| format!("seconds {seconds}: {e}"))?;
            if dir != "down" && dir != "up" {
                return Err(format!("direction {dir}: expected down or up").into());
            }
            rt().block_on(bulk::client(a, n, cc, dir == "down", cert, s))
        })()),
        [_, flag, addr] if flag == "--web-server" => Some(
            addr.parse::<SocketAddr>().map_err(|e| format!("{addr}: {e}").into())
                .and_then(|a| rt().block_on(bulk::web_server(a)))),
        [_, flag, addr, rate, mean, seed, seconds] if flag == "--web-client" => Some((|| {
            let a = addr.parse::<SocketAddr>().map_err(|e| format!("{addr}: {e}"))?;
            let r = rate.parse::<f64>().map_err(|e| format!("rate {rate}: {e}"))?;
            let m = mean.parse::<f64>().map_err(|e| format!("mean {mean}: {e}"))?;
            let seed = seed.parse::<u64>().map_err(|e| format!("seed {seed}: {e}"))?;
            let s = seconds.parse::<u64>().map_err(|e| format!("seconds {seconds}: {e}"))?;
            if !(r > 0.0 && m >= 1.0) {
                return Err(format!("rate {rate} and mean {mean}: expected both positive").into());
            }
            rt().block_on(bulk::web_client(a, r, m, seed, s))
        })()),
        _ => None,
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(result) = bulk(&args) {
        if let Err(e) = result {
            eprintln!("quinnserve: {e}");
            std::process::exit(1);
        }
        std::process::exit(0);
    }
    let path = match args.as_slice() {
        [_, flag, path] if flag == "--config" => path.clone(),
        [_, flag] if flag == "--version" => {
            println!("quinnserve {} (quinn 0.11, h3 0.0.8, hyper 1, rustls 0.23)", env!("CARGO_PKG_VERSION"));
            return;
        }
        _ => {
            eprintln!("usage: quinnserve --config FILE | --version | --bulk-server ADDR:PORT CC CERT KEY | \
                       --bulk-client ADDR:PORT FLOWS CC down|up CERT SECONDS | --web-server ADDR:PORT | \
                       --web-client ADDR:PORT RATE_PER_S MEAN_BYTES SEED SECONDS");
            std::process::exit(2);
        }
    };
    let cfg = match std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}")).and_then(|t| Config::parse(&t)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("quinnserve: {e}");
            std::process::exit(2);
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    if let Err(e) = rt.block_on(run(cfg)) {
        eprintln!("quinnserve: {e}");
        std::process::exit(1);
    }
    std::process::exit(0); // every connection ends with the process, as Caddy's do on its grace period
}
