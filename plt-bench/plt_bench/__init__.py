"""plt-bench: page-load-time testbed comparing HTTP/3 (QUIC) and HTTP/1.1+TLS (TCP) in a real Chromium."""

__version__ = "0.1.0"
