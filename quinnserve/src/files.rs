//! What a request for a file gets (pure): which paths are served, their types, validators and
//! caching headers, and when a conditional request is answered 304. The same rules as plt-bench's
//! Caddyfile (plt_bench/data/Caddyfile.template), so that a page is the same page on either server.

use std::time::{SystemTime, UNIX_EPOCH};

/// The Content-Type of a file by its extension, as Go's mime table gives Caddy's file_server.
pub fn content_type(path: &str) -> &'static str {
    let ext = path.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase()).unwrap_or_default();
    match ext.as_str() {
        "html" | "htm" => "text/html; charset=utf-8",
        "png" => "image/png",
        "bin" => "application/octet-stream",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "json" => "application/json",
        "svg" => "image/svg+xml",
        "woff2" => "font/woff2",
        "woff" => "font/woff",
        "ttf" => "font/ttf",
        "otf" => "font/otf",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "avif" => "image/avif",
        "ico" => "image/vnd.microsoft.icon",
        "xml" => "text/xml; charset=utf-8",
        "txt" => "text/plain; charset=utf-8",
        "wasm" => "application/wasm",
        "mp4" => "video/mp4",
        "webm" => "video/webm",
        _ => "application/octet-stream",
    }
}

fn base36(mut n: u64) -> String {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    if n == 0 {
        return "0".into();
    }
    let mut out = Vec::new();
    while n > 0 {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
    }
    out.reverse();
    String::from_utf8(out).unwrap()
}

/// The ETag of a file of this modification time and size, in Caddy's manner (the modification
/// time in nanoseconds and the size, each in base 36, quoted): a strong validator that changes with
/// either.
pub fn etag(mtime: SystemTime, size: u64) -> String {
    let nanos = mtime.duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
    format!("\"{}{}\"", base36(nanos), base36(size))
}

/// Whether a GET or HEAD with these validators is answered 304 Not Modified (RFC 9110 13.2.2:
/// If-None-Match decides where it is given, by weak comparison; else If-Modified-Since).
pub fn not_modified(if_none_match: Option<&str>, if_modified_since: Option<&str>, etag: &str, mtime: SystemTime) -> bool {
    if let Some(inm) = if_none_match {
        let strip = |t: &str| t.trim().trim_start_matches("W/").to_string();
        let want = strip(etag);
        return inm.split(',').any(|t| t.trim() == "*" || strip(t) == want);
    }
    if let Some(ims) = if_modified_since {
        if let Ok(since) = httpdate::parse_http_date(ims.trim()) {
            let secs = |t: SystemTime| t.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
            return secs(mtime) <= secs(since);
        }
    }
    false
}

/// The Cache-Control a served path gets: a page is revalidated on every visit, its images and a
/// replayed page set's objects kept for a day (the Caddyfile's @html and @object).
pub fn cache_control(path: &str) -> Option<&'static str> {
    if path.ends_with(".html") {
        Some("no-cache")
    } else if path.ends_with(".png") || path.starts_with("/replay/") {
        Some("max-age=86400")
    } else {
        None
    }
}

/// The headers every response of the pages' site carries besides its type and validators, in
/// order: (name, value). origin: the request had an Origin header; tcp_offers_h3: it came over TCP
/// on a listener that also offers HTTP/3 (one Alt-Svc entry, as real servers send).
pub fn site_headers(path: &str, origin: bool, tcp_offers_h3: bool) -> Vec<(&'static str, &'static str)> {
    let mut out = vec![("timing-allow-origin", "*")];
    if origin || path.starts_with("/replay/") {
        out.push(("access-control-allow-origin", "*"));
    }
    if tcp_offers_h3 {
        out.push(("alt-svc", "h3=\":443\"; ma=2592000"));
    }
    if let Some(cc) = cache_control(path) {
        out.push(("cache-control", cc));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn etag_is_caddys() {
        let t = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(etag(t, 5000), "\"cwyvpelgpse83uw\"");
        assert_eq!(base36(0), "0");
        assert_eq!(base36(35), "z");
        assert_eq!(base36(36), "10");
    }

    #[test]
    fn conditionals_follow_rfc_9110() {
        let t = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let tag = etag(t, 10);
        assert!(not_modified(Some(&tag), None, &tag, t));
        assert!(not_modified(Some(&format!("\"x\", W/{tag}")), None, &tag, t));
        assert!(not_modified(Some("*"), None, &tag, t));
        assert!(!not_modified(Some("\"other\""), Some(&httpdate::fmt_http_date(t)), &tag, t)); // INM decides
        assert!(not_modified(None, Some(&httpdate::fmt_http_date(t)), &tag, t));
        assert!(!not_modified(None, Some(&httpdate::fmt_http_date(t - Duration::from_secs(1))), &tag, t));
        assert!(!not_modified(None, Some("not a date"), &tag, t));
        assert!(!not_modified(None, None, &tag, t));
    }

    #[test]
    fn caching_and_site_headers_are_the_caddyfiles() {
        assert_eq!(cache_control("/index_5KB.html"), Some("no-cache"));
        assert_eq!(cache_control("/replay/x/index.html"), Some("no-cache"));
        assert_eq!(cache_control("/obj_5KB.png"), Some("max-age=86400"));
        assert_eq!(cache_control("/replay/x/3-app.js"), Some("max-age=86400"));
        assert_eq!(cache_control("/bulk.bin"), None);
        let h = site_headers("/obj_5KB.png", false, true);
        assert_eq!(h, vec![("timing-allow-origin", "*"), ("alt-svc", "h3=\":443\"; ma=2592000"),
                           ("cache-control", "max-age=86400")]);
        let h = site_headers("/replay/x/3-app.js", false, false);
        assert!(h.contains(&("access-control-allow-origin", "*")) && !h.iter().any(|(k, _)| *k == "alt-svc"));
        assert!(site_headers("/obj_5KB.png", true, false).contains(&("access-control-allow-origin", "*")));
    }

    #[test]
    fn types_by_extension() {
        assert_eq!(content_type("/index_5KB.html"), "text/html; charset=utf-8");
        assert_eq!(content_type("/replay/a/2-font.WOFF2"), "font/woff2");
        assert_eq!(content_type("/bulk.bin"), "application/octet-stream");
        assert_eq!(content_type("/noext"), "application/octet-stream");
    }
}
