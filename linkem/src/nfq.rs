//! Just enough of the netfilter queue netlink protocol (nfnetlink_queue): bind queues, receive
//! packet ids in batches, send verdicts in batches. Payloads are cut to a few bytes: linkem
//! decides from the packet's length and its queue, never from its content.

use std::io;

const NETLINK_NETFILTER: i32 = 12;
const NFNL_SUBSYS_QUEUE: u16 = 3;
const NFQNL_MSG_PACKET: u16 = 0;
const NFQNL_MSG_VERDICT: u16 = 1;
const NFQNL_MSG_CONFIG: u16 = 2;
const NFQA_CFG_CMD: u16 = 1;
const NFQA_CFG_PARAMS: u16 = 2;
const NFQA_CFG_QUEUE_MAXLEN: u16 = 3;
const NFQA_CFG_MASK: u16 = 4;
const NFQA_CFG_FLAGS: u16 = 5;
const NFQA_CFG_F_FAIL_OPEN: u32 = 1;
const NFQNL_CFG_CMD_BIND: u8 = 1;
const NFQNL_COPY_PACKET: u8 = 2;
const NFQA_PACKET_HDR: u16 = 1;
const NFQA_VERDICT_HDR: u16 = 2;
const NFQA_MARK: u16 = 3;
const NFQA_PAYLOAD: u16 = 10;
const NFQA_CAP_LEN: u16 = 13;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const NLMSG_ERROR: u16 = 2;
const NLMSG_HDRLEN: usize = 16;
const NFGEN_HDRLEN: usize = 4;
pub const NF_DROP: u32 = 0;
pub const NF_ACCEPT: u32 = 1;
const COPY_RANGE: u32 = 64;
const VERDICT_MSG_LEN: usize = NLMSG_HDRLEN + NFGEN_HDRLEN + 4 + 8;

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// Datagrams read per recvmmsg, and the room for each (a packet message with a 64-byte copy is
/// well under 512 bytes; a full page leaves room for every attribute the kernel may add).
pub const BATCH: usize = 64;
const SLOT: usize = 4096;

/// The packets in one netlink datagram.
fn parse_datagram(buf: &[u8], out: &mut Vec<Packet>) {
    let n = buf.len();
    let mut off = 0usize;
    while off + NLMSG_HDRLEN <= n {
        let len = u32::from_ne_bytes(buf[off..off + 4].try_into().unwrap()) as usize;
        let ty = u16::from_ne_bytes(buf[off + 4..off + 6].try_into().unwrap());
        if len < NLMSG_HDRLEN || off + len > n {
            break;
        }
        if ty == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET {
            let queue = u16::from_be_bytes(buf[off + 18..off + 20].try_into().unwrap());
            let (mut id, mut plen, mut cap, mut flow, mut ecn) = (None, 0u32, None, 0u32, 0u8);
            let mut addrs = [[0u8; 16]; 2];
            let mut a = off + NLMSG_HDRLEN + NFGEN_HDRLEN;
            while a + 4 <= off + len {
                let alen = u16::from_ne_bytes(buf[a..a + 2].try_into().unwrap()) as usize;
                let aty = u16::from_ne_bytes(buf[a + 2..a + 4].try_into().unwrap()) & 0x7fff;
                if alen < 4 || a + alen > off + len {
                    break;
                }
                let data = &buf[a + 4..a + alen];
                match aty {
                    NFQA_PACKET_HDR if data.len() >= 4 => id = Some(u32::from_be_bytes(data[0..4].try_into().unwrap())),
                    NFQA_PAYLOAD => {
                        plen = data.len() as u32;
                        (flow, ecn) = flow_of(data);
                        addrs = addrs_of(data);
                    }
                    NFQA_CAP_LEN if data.len() >= 4 => cap = Some(u32::from_be_bytes(data[0..4].try_into().unwrap())),
                    _ => {}
                }
                a += align4(alen);
            }
            if let Some(id) = id {
                out.push(Packet { queue, id, len: cap.unwrap_or(plen), flow, ecn, addrs });
            }
        }
        off += align4(len);
    }
}

/// A packet's flow (a hash of its addresses, protocol and ports: FQ-CoDel's 5-tuple) and its ECN
/// codepoint (the IP header's two ECN bits: 0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE), from its first
/// bytes (pure). A packet that is neither IPv4 nor IPv6 is flow 0, Not-ECT.
pub fn flow_of(ip: &[u8]) -> (u32, u8) {
    let fnv = |bytes: &[&[u8]]| {
        let mut h: u32 = 0x811c_9dc5;
        for part in bytes {
            for &b in *part {
                h = (h ^ b as u32).wrapping_mul(0x0100_0193);
            }
        }
        h
    };
    match ip.first().map(|b| b >> 4) {
        Some(4) if ip.len() >= 20 => {
            let ihl = ((ip[0] & 0x0f) as usize) * 4;
            let ports = ip.get(ihl..ihl + 4).unwrap_or(&[]);
            (fnv(&[&ip[12..20], &ip[9..10], ports]), ip[1] & 3)
        }
        Some(6) if ip.len() >= 40 => {
            let tclass = ((ip[0] & 0x0f) << 4) | (ip[1] >> 4);
            let ports = ip.get(40..44).unwrap_or(&[]);
            (fnv(&[&ip[8..40], &ip[6..7], ports]), tclass & 3)
        }
        _ => (0, 0),
    }
}

/// A packet's source and destination addresses, each in IPv6's 16 bytes (an IPv4 address mapped,
/// ::ffff:a.b.c.d), from its first bytes (pure); zeros for a packet that is neither.
pub fn addrs_of(ip: &[u8]) -> [[u8; 16]; 2] {
    let mut out = [[0u8; 16]; 2];
    match ip.first().map(|b| b >> 4) {
        Some(4) if ip.len() >= 20 => {
            for (k, at) in [12usize, 16].into_iter().enumerate() {
                out[k][10] = 0xff;
                out[k][11] = 0xff;
                out[k][12..16].copy_from_slice(&ip[at..at + 4]);
            }
        }
        Some(6) if ip.len() >= 40 => {
            out[0].copy_from_slice(&ip[8..24]);
            out[1].copy_from_slice(&ip[24..40]);
        }
        _ => {}
    }
    out
}

pub struct Packet {
    pub queue: u16,
    pub id: u32,
    pub len: u32,
    pub flow: u32,
    /// the ECN codepoint (flow_of)
    pub ecn: u8,
    /// its source and destination (addrs_of): an origin's own path delay is found by them
    pub addrs: [[u8; 16]; 2],
}

pub struct Socket {
    pub fd: i32,
    seq: u32,
    rbuf: Vec<u8>,
    wbuf: Vec<u8>,
    pub enobufs: u64,
}

fn put_attr(buf: &mut Vec<u8>, ty: u16, data: &[u8]) {
    buf.extend_from_slice(&((4 + data.len()) as u16).to_ne_bytes());
    buf.extend_from_slice(&ty.to_ne_bytes());
    buf.extend_from_slice(data);
    while buf.len() % 4 != 0 {
        buf.push(0);
    }
}

fn put_header(buf: &mut Vec<u8>, msg: u16, flags: u16, seq: u32, queue: u16) -> usize {
    let start = buf.len();
    buf.extend_from_slice(&0u32.to_ne_bytes()); // length, patched by finish()
    buf.extend_from_slice(&((NFNL_SUBSYS_QUEUE << 8) | msg).to_ne_bytes());
    buf.extend_from_slice(&(NLM_F_REQUEST | flags).to_ne_bytes());
    buf.extend_from_slice(&seq.to_ne_bytes());
    buf.extend_from_slice(&0u32.to_ne_bytes());
    buf.extend_from_slice(&[libc::AF_UNSPEC as u8, 0]);
    buf.extend_from_slice(&queue.to_be_bytes());
    start
}

fn finish(buf: &mut [u8], start: usize) {
    let len = (buf.len() - start) as u32;
    buf[start..start + 4].copy_from_slice(&len.to_ne_bytes());
}

impl Socket {
    pub fn open(rcvbuf: i32) -> io::Result<Socket> {
        let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, NETLINK_NETFILTER) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as u16;
        if unsafe { libc::bind(fd, &addr as *const _ as *const libc::sockaddr, std::mem::size_of_val(&addr) as u32) } < 0 {
            return Err(io::Error::last_os_error());
        }
        // a large receive buffer rides out bursts; what still does not fit is dropped by the kernel
        // (never passed: the queue is not fail-open) and counted here as ENOBUFS
        unsafe {
            libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &rcvbuf as *const i32 as *const libc::c_void, 4);
        }
        Ok(Socket { fd, seq: 1, rbuf: vec![0; BATCH * SLOT], wbuf: Vec::with_capacity(64 * 1024), enobufs: 0 })
    }

    fn request(&mut self, queue: u16, attrs: &[(u16, Vec<u8>)]) -> io::Result<()> {
        let mut buf = Vec::with_capacity(128);
        self.seq += 1;
        let start = put_header(&mut buf, NFQNL_MSG_CONFIG, NLM_F_ACK, self.seq, queue);
        for (ty, data) in attrs {
            put_attr(&mut buf, *ty, data);
        }
        finish(&mut buf, start);
        self.send(&buf)?;
        // wait for the ACK (an NLMSG_ERROR carrying errno 0)
        loop {
            let n = unsafe { libc::recv(self.fd, self.rbuf.as_mut_ptr() as *mut libc::c_void, self.rbuf.len(), 0) };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            let mut off = 0usize;
            while off + NLMSG_HDRLEN <= n as usize {
                let len = u32::from_ne_bytes(self.rbuf[off..off + 4].try_into().unwrap()) as usize;
                let ty = u16::from_ne_bytes(self.rbuf[off + 4..off + 6].try_into().unwrap());
                if ty == NLMSG_ERROR {
                    let err = i32::from_ne_bytes(self.rbuf[off + 16..off + 20].try_into().unwrap());
                    return if err == 0 { Ok(()) } else { Err(io::Error::from_raw_os_error(-err)) };
                }
                if len == 0 {
                    break;
                }
                off += align4(len);
            }
        }
    }

    /// Bind a queue: copy only the first bytes of each packet, a long queue, never fail open.
    pub fn bind_queue(&mut self, queue: u16, maxlen: u32) -> io::Result<()> {
        self.request(queue, &[(NFQA_CFG_CMD, vec![NFQNL_CFG_CMD_BIND, 0, 0, 0])])?;
        let mut params = COPY_RANGE.to_be_bytes().to_vec();
        params.push(NFQNL_COPY_PACKET);
        self.request(queue, &[(NFQA_CFG_PARAMS, params)])?;
        self.request(queue, &[(NFQA_CFG_QUEUE_MAXLEN, maxlen.to_be_bytes().to_vec())])?;
        self.request(queue, &[(NFQA_CFG_MASK, NFQA_CFG_F_FAIL_OPEN.to_be_bytes().to_vec()),
                              (NFQA_CFG_FLAGS, 0u32.to_be_bytes().to_vec())])
    }

    fn send(&self, buf: &[u8]) -> io::Result<()> {
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as u16;
        let n = unsafe {
            libc::sendto(self.fd, buf.as_ptr() as *const libc::c_void, buf.len(), 0,
                         &addr as *const _ as *const libc::sockaddr, std::mem::size_of_val(&addr) as u32)
        };
        if n < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
    }

    /// Receive up to BATCH waiting datagrams (one packet each) in one recvmmsg, without blocking;
    /// returns the number of datagrams read (0: nothing was there).
    pub fn recv_batch(&mut self, out: &mut Vec<Packet>) -> io::Result<usize> {
        let mut iov: [libc::iovec; BATCH] = unsafe { std::mem::zeroed() };
        let mut hdrs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
        for i in 0..BATCH {
            iov[i].iov_base = self.rbuf[i * SLOT..].as_mut_ptr() as *mut libc::c_void;
            iov[i].iov_len = SLOT;
            hdrs[i].msg_hdr.msg_iov = &mut iov[i];
            hdrs[i].msg_hdr.msg_iovlen = 1;
        }
        let n = unsafe { libc::recvmmsg(self.fd, hdrs.as_mut_ptr(), BATCH as u32, libc::MSG_DONTWAIT, std::ptr::null_mut()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN) => Ok(0),
                Some(libc::ENOBUFS) => {
                    self.enobufs += 1;
                    Ok(1)
                }
                _ => Err(e),
            };
        }
        for i in 0..n as usize {
            let len = hdrs[i].msg_len as usize;
            parse_datagram(&self.rbuf[i * SLOT..i * SLOT + len], out);
        }
        Ok(n as usize)
    }

    /// Queue a verdict; `flush` sends every queued verdict in one datagram.
    pub fn verdict(&mut self, queue: u16, id: u32, verdict: u32) -> io::Result<()> {
        if self.wbuf.len() + VERDICT_MSG_LEN > 60 * 1024 {
            self.flush()?;
        }
        let start = put_header(&mut self.wbuf, NFQNL_MSG_VERDICT, 0, 0, queue);
        let mut vh = verdict.to_be_bytes().to_vec();
        vh.extend_from_slice(&id.to_be_bytes());
        put_attr(&mut self.wbuf, NFQA_VERDICT_HDR, &vh);
        finish(&mut self.wbuf, start);
        Ok(())
    }

    /// Queue an accept verdict that sets the packet's mark (a rule after the queue turns the mark
    /// into the IP header's CE codepoint: ECN).
    pub fn accept_marked(&mut self, queue: u16, id: u32, mark: u32) -> io::Result<()> {
        if self.wbuf.len() + VERDICT_MSG_LEN + 8 > 60 * 1024 {
            self.flush()?;
        }
        let start = put_header(&mut self.wbuf, NFQNL_MSG_VERDICT, 0, 0, queue);
        let mut vh = NF_ACCEPT.to_be_bytes().to_vec();
        vh.extend_from_slice(&id.to_be_bytes());
        put_attr(&mut self.wbuf, NFQA_VERDICT_HDR, &vh);
        put_attr(&mut self.wbuf, NFQA_MARK, &mark.to_be_bytes());
        finish(&mut self.wbuf, start);
        Ok(())
    }

    pub fn flush(&mut self) -> io::Result<()> {
        if self.wbuf.is_empty() {
            return Ok(());
        }
        let r = self.send(&self.wbuf);
        self.wbuf.clear();
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_packet_message() {
        // nlmsghdr + nfgenmsg(queue 1) + PACKET_HDR(id 77) + PAYLOAD(64 bytes) + CAP_LEN(1514)
        let mut buf = Vec::new();
        let start = put_header(&mut buf, NFQNL_MSG_PACKET, 0, 0, 1);
        put_attr(&mut buf, NFQA_PACKET_HDR, &[0, 0, 0, 77, 8, 0, 2, 0]);
        put_attr(&mut buf, NFQA_PAYLOAD, &[0u8; 64]);
        put_attr(&mut buf, NFQA_CAP_LEN, &1514u32.to_be_bytes());
        finish(&mut buf, start);
        let mut out = vec![];
        parse_datagram(&buf, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].queue, out[0].id, out[0].len), (1, 77, 1514));
        assert_eq!((out[0].flow, out[0].ecn), (0, 0)); // 64 zero bytes: not IP
        parse_datagram(&buf[..buf.len() - 3], &mut out); // a cut message is skipped, not misread
        assert_eq!(out.len(), 1);
    }

    #[test]
    fn verdict_message_layout() {
        let mut buf = Vec::new();
        let start = put_header(&mut buf, NFQNL_MSG_VERDICT, 0, 0, 7);
        put_attr(&mut buf, NFQA_VERDICT_HDR, &[0, 0, 0, 1, 0, 0, 0, 42]);
        finish(&mut buf, start);
        assert_eq!(buf.len(), VERDICT_MSG_LEN);
        assert_eq!(u32::from_ne_bytes(buf[0..4].try_into().unwrap()) as usize, VERDICT_MSG_LEN);
        assert_eq!(u16::from_ne_bytes(buf[4..6].try_into().unwrap()), (3 << 8) | 1);
        assert_eq!(&buf[18..20], &7u16.to_be_bytes());
        assert_eq!(&buf[20..24], &(12u16.to_ne_bytes().iter().chain(2u16.to_ne_bytes().iter()).copied().collect::<Vec<u8>>())[..]);
    }

    #[test]
    fn a_flow_is_its_addresses_protocol_and_ports_and_ect_is_read_from_the_header() {
        // IPv4 UDP 10.0.0.1:443 -> 10.0.0.2:5000, TOS ECT(0)
        let mut v4 = vec![0x45, 0x02, 0, 60, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, 0x01, 0xbb, 0x13, 0x88];
        v4.resize(64, 0);
        let (f, ecn) = flow_of(&v4);
        assert!(ecn == 2 && f != 0); // ECT(0)
        let mut other_port = v4.clone();
        other_port[23] = 0x89;
        assert_ne!(flow_of(&other_port).0, f, "another port, another flow");
        let mut not_ect = v4.clone();
        not_ect[1] = 0x00;
        assert_eq!(flow_of(&not_ect), (f, 0), "the ECN bits are not the flow");
        // IPv6 TCP, traffic class 0x03 (CE): ECN-capable
        let mut v6 = vec![0x60, 0x30, 0, 0, 0, 20, 6, 64];
        v6.extend_from_slice(&[0xfd; 32]);
        v6.extend_from_slice(&[0x01, 0xbb, 0xc0, 0x00]);
        assert_eq!(flow_of(&v6).1, 3); // CE
        assert_eq!(flow_of(&[0x45, 0x02]), (0, 0), "too short: not read");
    }

    #[test]
    fn addresses_are_read_v4_mapped_or_v6() {
        let mut v4 = vec![0x45, 0, 0, 60, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 198, 19, 3, 12];
        v4.resize(40, 0);
        let [src, dst] = addrs_of(&v4);
        assert_eq!(std::net::Ipv6Addr::from(src).to_ipv4_mapped(), Some(std::net::Ipv4Addr::new(10, 0, 0, 1)));
        assert_eq!(std::net::Ipv6Addr::from(dst).to_ipv4_mapped(), Some(std::net::Ipv4Addr::new(198, 19, 3, 12)));
        let mut v6 = vec![0x60, 0, 0, 0, 0, 20, 6, 64];
        v6.extend_from_slice(&[0xfd; 16]);
        v6.extend_from_slice(&[0xfe; 16]);
        assert_eq!(addrs_of(&v6), [[0xfd; 16], [0xfe; 16]]);
        assert_eq!(addrs_of(&[0x45, 0]), [[0; 16]; 2], "too short: none");
    }
}
