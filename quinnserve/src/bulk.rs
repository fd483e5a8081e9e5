//! Competing QUIC bulk flows (plt-bench's `--cross NxquicCC[:down|up]`, link/cross.py): long-lived
//! QUIC connections on quinn, each carrying one endless stream, between the cross traffic's own
//! namespaces, through the page's bottleneck. The sender's congestion controller is the flow's:
//! the server's for a download, the client's for an upload (quinn's NewReno, CUBIC or BBR).
//!
//!     quinnserve --bulk-server ADDR:PORT CC CERT KEY
//!     quinnserve --bulk-client ADDR:PORT FLOWS CC down|up CERT SECONDS
//!
//! The client opens FLOWS connections, one stream each, asks for a download ('d': the server writes
//! until the connection ends) or offers an upload ('u': it writes, the server reads), and exits 0
//! after SECONDS; a connection that fails ends it with 1 and the reason on stderr, so that plt-bench
//! sees a flow that died. The client trusts the server's one certificate, byte for byte (the
//! testbed's own, made for the cross server's address): no CA, no other certificate.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

type Error = Box<dyn std::error::Error + Send + Sync>;
const ALPN: &[u8] = b"plt-bench-bulk";
const CHUNK: usize = 64 * 1024;
// the windows: past a 100 Mbit/s, 500 ms path's bandwidth-delay product (6.25 MB), so the controller,
// not flow control, sets the rate (quinn's defaults hold 1.25 MB per stream)
const STREAM_WINDOW: u32 = 16 * 1024 * 1024;
const SEND_WINDOW: u64 = 64 * 1024 * 1024;

/// The transport of every bulk connection: large windows and the named controller.
pub fn transport(cc: &str) -> Result<quinn::TransportConfig, Error> {
    let mut t = quinn::TransportConfig::default();
    t.stream_receive_window(STREAM_WINDOW.into());
    t.send_window(SEND_WINDOW);
    t.keep_alive_interval(Some(Duration::from_secs(1)));
    match cc {
        "newreno" => t.congestion_controller_factory(Arc::new(quinn::congestion::NewRenoConfig::default())),
        "cubic" => t.congestion_controller_factory(Arc::new(quinn::congestion::CubicConfig::default())),
        "bbr" => t.congestion_controller_factory(Arc::new(quinn::congestion::BbrConfig::default())),
        other => return Err(format!("unknown congestion controller '{other}' (newreno, cubic or bbr)").into()),
    };
    Ok(t)
}

fn read_pem(cert: &str, key: &str) -> Result<(Vec<rustls::pki_types::CertificateDer<'static>>,
                                               rustls::pki_types::PrivateKeyDer<'static>), Error> {
    let certs = rustls_pemfile::certs(&mut std::io::BufReader::new(std::fs::File::open(cert)?))
        .collect::<Result<Vec<_>, _>>()?;
    let key = rustls_pemfile::private_key(&mut std::io::BufReader::new(std::fs::File::open(key)?))?
        .ok_or_else(|| format!("{key}: no private key"))?;
    Ok((certs, key))
}

pub async fn server(addr: SocketAddr, cc: &str, cert: &str, key: &str) -> Result<(), Error> {
    let (certs, key) = read_pem(cert, key)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(quinn::crypto::rustls::QuicServerConfig::try_from(tls)?));
    config.transport_config(Arc::new(transport(cc)?));
    let endpoint = quinn::Endpoint::server(config, addr)?;
    eprintln!("listening");
    while let Some(incoming) = endpoint.accept().await {
        tokio::spawn(async move {
            let Ok(conn) = incoming.await else { return };
            while let Ok((send, recv)) = conn.accept_bi().await {
                tokio::spawn(async move {
                    let _ = serve_stream(send, recv).await;
                });
            }
        });
    }
    Ok(())
}

async fn serve_stream(mut send: quinn::SendStream, mut recv: quinn::RecvStream) -> Result<(), Error> {
    let mut ask = [0u8; 1];
    recv.read_exact(&mut ask).await?;
    match &ask {
        b"d" => write_forever(&mut send).await,
        _ => read_forever(&mut recv).await,
    }
}

async fn write_forever(send: &mut quinn::SendStream) -> Result<(), Error> {
    let chunk = bytes::Bytes::from(vec![0u8; CHUNK]);
    loop {
        send.write_chunk(chunk.clone()).await?;
    }
}

async fn read_forever(recv: &mut quinn::RecvStream) -> Result<(), Error> {
    while recv.read_chunk(CHUNK, false).await?.is_some() {}
    Ok(())
}

/// Trusts one certificate, byte for byte, and signatures by its key.
#[derive(Debug)]
struct Pinned {
    cert: rustls::pki_types::CertificateDer<'static>,
    algorithms: rustls::crypto::WebPkiSupportedAlgorithms,
}

impl rustls::client::danger::ServerCertVerifier for Pinned {
    fn verify_server_cert(&self, end_entity: &rustls::pki_types::CertificateDer<'_>,
                          _intermediates: &[rustls::pki_types::CertificateDer<'_>],
                          _server_name: &rustls::pki_types::ServerName<'_>, _ocsp: &[u8],
                          _now: rustls::pki_types::UnixTime)
                          -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        if end_entity.as_ref() == self.cert.as_ref() {
            Ok(rustls::client::danger::ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General("not the cross server's certificate".into()))
        }
    }

    fn verify_tls12_signature(&self, _message: &[u8], _cert: &rustls::pki_types::CertificateDer<'_>,
                              _dss: &rustls::DigitallySignedStruct)
                              -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::General("TLS 1.2 is not offered".into()))
    }

    fn verify_tls13_signature(&self, message: &[u8], cert: &rustls::pki_types::CertificateDer<'_>,
                              dss: &rustls::DigitallySignedStruct)
                              -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

pub async fn client(addr: SocketAddr, flows: usize, cc: &str, down: bool, cert: &str, seconds: u64)
                    -> Result<(), Error> {
    let pem = rustls_pemfile::certs(&mut std::io::BufReader::new(std::fs::File::open(cert)?))
        .next().ok_or_else(|| format!("{cert}: no certificate"))??;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = Arc::new(Pinned { cert: pem, algorithms: provider.signature_verification_algorithms });
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let mut config = quinn::ClientConfig::new(Arc::new(quinn::crypto::rustls::QuicClientConfig::try_from(tls)?));
    config.transport_config(Arc::new(transport(cc)?));
    let mut endpoint = quinn::Endpoint::client("0.0.0.0:0".parse()?)?;
    endpoint.set_default_client_config(config);
    let (failed, mut why) = tokio::sync::mpsc::channel::<String>(flows.max(1));
    for k in 0..flows {
        let (endpoint, failed) = (endpoint.clone(), failed.clone());
        tokio::spawn(async move {
            let result: Result<(), Error> = async {
                let conn = endpoint.connect(addr, "cross.test")?.await?;
                let (mut send, mut recv) = conn.open_bi().await?;
                send.write_all(if down { b"d" } else { b"u" }).await?;
                if down { read_forever(&mut recv).await } else { write_forever(&mut send).await }
            }.await;
            let reason = match result {
                Ok(()) => "the server ended the stream".to_string(),
                Err(e) => e.to_string(),
            };
            let _ = failed.send(format!("flow {k}: {reason}")).await;
        });
    }
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_secs(seconds)) => Ok(()),
        Some(reason) = why.recv() => Err(reason.into()),
    }
}

// ---- a web-like background over TCP (`--cross web-RATE-MEAN`) ----
//
//     quinnserve --web-server ADDR:PORT
//     quinnserve --web-client ADDR:PORT RATE_PER_S MEAN_BYTES SEED SECONDS
//
// Requests arrive as a Poisson process of RATE_PER_S (exponential gaps), each on a new TCP
// connection (the kernel's controller) asking for a size drawn from a Pareto distribution of shape
// PARETO_SHAPE with the given mean, truncated at MAX_OVER_MEAN times it: short transfers, most
// small, a few long, as web objects are. The server sends what is asked and closes. SEED makes the
// sequence repeat. A request that fails ends the client with 1 and the reason.

pub const PARETO_SHAPE: f64 = 1.5;
pub const MAX_OVER_MEAN: f64 = 1000.0;

/// splitmix64: a small, seedable generator of uniform doubles in (0, 1).
pub struct Uniform(u64);

impl Uniform {
    pub fn new(seed: u64) -> Self {
        Uniform(seed)
    }

    pub fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        ((z >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
}

/// One request's size in bytes: Pareto of PARETO_SHAPE whose mean is mean_bytes, truncated.
pub fn pareto_bytes(u: f64, mean_bytes: f64) -> u64 {
    let scale = mean_bytes * (PARETO_SHAPE - 1.0) / PARETO_SHAPE;
    (scale / u.powf(1.0 / PARETO_SHAPE)).min(mean_bytes * MAX_OVER_MEAN).round().max(1.0) as u64
}

/// The gap before the next request (s) of a Poisson process of rate_per_s.
pub fn exponential_gap_s(u: f64, rate_per_s: f64) -> f64 {
    -u.ln() / rate_per_s
}

pub async fn web_server(addr: SocketAddr) -> Result<(), Error> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind(addr).await?;
    eprintln!("listening");
    loop {
        let (mut sock, _) = listener.accept().await?;
        tokio::spawn(async move {
            let result: Result<(), Error> = async {
                let mut ask = [0u8; 8];
                sock.read_exact(&mut ask).await?;
                let mut left = u64::from_be_bytes(ask);
                let buf = vec![0u8; CHUNK];
                while left > 0 {
                    let n = left.min(CHUNK as u64) as usize;
                    sock.write_all(&buf[..n]).await?;
                    left -= n as u64;
                }
                sock.shutdown().await?;
                Ok(())
            }.await;
            let _ = result;
        });
    }
}

pub async fn web_client(addr: SocketAddr, rate_per_s: f64, mean_bytes: f64, seed: u64, seconds: u64)
                        -> Result<(), Error> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut rng = Uniform::new(seed);
    let (failed, mut why) = tokio::sync::mpsc::channel::<String>(16);
    let end = tokio::time::Instant::now() + Duration::from_secs(seconds);
    let mut next = tokio::time::Instant::now();
    loop {
        next += Duration::from_secs_f64(exponential_gap_s(rng.next(), rate_per_s));
        if next >= end {
            return Ok(());
        }
        tokio::select! {
            _ = tokio::time::sleep_until(next) => {}
            Some(reason) = why.recv() => return Err(reason.into()),
        }
        let size = pareto_bytes(rng.next(), mean_bytes);
        let failed = failed.clone();
        tokio::spawn(async move {
            let result: Result<(), Error> = async {
                let mut sock = tokio::net::TcpStream::connect(addr).await?;
                sock.write_all(&size.to_be_bytes()).await?;
                let mut got = 0u64;
                let mut buf = vec![0u8; CHUNK];
                loop {
                    let n = sock.read(&mut buf).await?;
                    if n == 0 {
                        break;
                    }
                    got += n as u64;
                }
                if got != size {
                    return Err(format!("asked for {size} bytes, got {got}").into());
                }
                Ok(())
            }.await;
            if let Err(e) = result {
                let _ = failed.send(format!("a request of {size} bytes: {e}")).await;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sizes_have_the_stated_mean_and_the_gaps_the_stated_rate() {
        let mut u = Uniform::new(7);
        let n = 200_000;
        let sizes: Vec<u64> = (0..n).map(|_| pareto_bytes(u.next(), 100_000.0)).collect();
        let mean = sizes.iter().sum::<u64>() as f64 / n as f64;
        // shape 1.5 has an infinite variance: the sample mean converges slowly; the truncation at 1000x
        // the mean (3000x the scale) lowers the mean by 3000^-0.5 x (1 - 1/3) = 1.2%
        assert!((0.85..1.05).contains(&(mean / 100_000.0)), "mean {mean}");
        let scale = 100_000.0 * (PARETO_SHAPE - 1.0) / PARETO_SHAPE;
        assert!(sizes.iter().all(|&s| s as f64 >= scale.floor() && s as f64 <= 100_000.0 * MAX_OVER_MEAN));
        let median = { let mut s = sizes.clone(); s.sort(); s[n / 2] as f64 };
        // Pareto's median: scale x 2^(1/shape)
        assert!((median / (scale * 2f64.powf(1.0 / PARETO_SHAPE)) - 1.0).abs() < 0.02, "median {median}");
        let gaps: f64 = (0..n).map(|_| exponential_gap_s(u.next(), 10.0)).sum::<f64>() / n as f64;
        assert!((gaps - 0.1).abs() < 0.002, "mean gap {gaps}");
    }

    #[test]
    fn an_unknown_controller_is_refused() {
        assert!(transport("reno").is_err());
        assert!(transport("bbr").is_ok());
    }
}
