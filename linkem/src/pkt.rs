//! linkem's other way in and out: a bridge over AF_PACKET sockets, no NFQUEUE.
//!
//! A direction reads the frames arriving on its input interface from a TPACKET_V2 receive ring
//! (memory shared with the kernel: no system call per packet; poll wakes the loop) and sends the
//! frames it releases on its output interface with sendmmsg, a batch per call, through that
//! interface's qdisc (htb, when the rate is the kernel's). The kernel's own forwarding of those
//! frames is stopped by a tc ingress filter on the input interface that drops IPv4 (packet sockets
//! see a frame before tc ingress): if linkem dies, the filter stays and traffic stops, never runs
//! unshaped. A frame's Ethernet addresses are rewritten for its next hop and its IPv4 TTL
//! decremented (checksum updated), as the router's forwarding would.

use std::io;

const ETH_P_ALL: u16 = 0x0003;
const ETH_P_IP: u16 = 0x0800;
const SOL_PACKET: i32 = 263;
const PACKET_RX_RING: i32 = 5;
const PACKET_VERSION: i32 = 10;
const PACKET_IGNORE_OUTGOING: i32 = 23;
const TPACKET_V2: i32 = 1;
const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1;
const TP_STATUS_LOSING: u32 = 1 << 2;

#[repr(C)]
struct TpacketReq {
    tp_block_size: u32,
    tp_block_nr: u32,
    tp_frame_size: u32,
    tp_frame_nr: u32,
}

#[repr(C)]
struct Tpacket2Hdr {
    tp_status: u32,
    tp_len: u32,
    tp_snaplen: u32,
    tp_mac: u16,
    tp_net: u16,
    tp_sec: u32,
    tp_nsec: u32,
    tp_vlan_tci: u16,
    tp_vlan_tpid: u16,
    tp_padding: [u8; 4],
}

fn err(what: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

fn ifindex(name: &str) -> io::Result<i32> {
    let c = std::ffi::CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name"))?;
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        return Err(err(&format!("interface {name}")));
    }
    Ok(i as i32)
}

fn sockaddr(ifindex: i32, proto: u16) -> libc::sockaddr_ll {
    let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sa.sll_family = libc::AF_PACKET as u16;
    sa.sll_protocol = proto.to_be();
    sa.sll_ifindex = ifindex;
    sa
}

/// The receive ring of one interface.
pub struct Rx {
    pub fd: i32,
    map: *mut u8,
    map_len: usize,
    frame_size: usize,
    frame_nr: usize,
    cur: usize,
    /// frames the kernel could not put in the ring (TP_STATUS_LOSING seen)
    pub losing: u64,
}

unsafe impl Send for Rx {}

impl Rx {
    pub fn open(ifname: &str, frames: usize) -> io::Result<Rx> {
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, ETH_P_ALL.to_be() as i32) };
        if fd < 0 {
            return Err(err("AF_PACKET socket"));
        }
        let set = |opt: i32, v: i32, what: &str| -> io::Result<()> {
            let r = unsafe { libc::setsockopt(fd, SOL_PACKET, opt, &v as *const i32 as *const libc::c_void, 4) };
            if r < 0 { Err(err(what)) } else { Ok(()) }
        };
        set(PACKET_VERSION, TPACKET_V2, "PACKET_VERSION")?;
        set(PACKET_IGNORE_OUTGOING, 1, "PACKET_IGNORE_OUTGOING")?;
        let frame_size = 2048usize;
        let block_size = 1usize << 16;
        let per_block = block_size / frame_size;
        let blocks = frames.div_ceil(per_block);
        let req = TpacketReq { tp_block_size: block_size as u32, tp_block_nr: blocks as u32,
                               tp_frame_size: frame_size as u32, tp_frame_nr: (blocks * per_block) as u32 };
        let r = unsafe { libc::setsockopt(fd, SOL_PACKET, PACKET_RX_RING, &req as *const TpacketReq as *const libc::c_void,
                                          std::mem::size_of::<TpacketReq>() as u32) };
        if r < 0 {
            return Err(err("PACKET_RX_RING"));
        }
        let map_len = block_size * blocks;
        let map = unsafe { libc::mmap(std::ptr::null_mut(), map_len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED,
                                      fd, 0) };
        if map == libc::MAP_FAILED {
            return Err(err("mmap of the receive ring"));
        }
        // bound to IPv4 only: ARP and the rest go to the kernel alone
        let sa = sockaddr(ifindex(ifname)?, ETH_P_IP);
        let r = unsafe { libc::bind(fd, &sa as *const libc::sockaddr_ll as *const libc::sockaddr,
                                    std::mem::size_of::<libc::sockaddr_ll>() as u32) };
        if r < 0 {
            return Err(err(&format!("bind to {ifname}")));
        }
        Ok(Rx { fd, map: map as *mut u8, map_len, frame_size, frame_nr: blocks * per_block, cur: 0, losing: 0 })
    }

    /// Every frame the kernel has put in the ring, in order, at most `max`: `f(frame)` for each,
    /// its slot handed back to the kernel right after. Returns how many.
    pub fn drain(&mut self, max: usize, mut f: impl FnMut(&[u8])) -> usize {
        let mut n = 0;
        while n < max {
            let hdr = unsafe { self.map.add(self.cur * self.frame_size) } as *mut Tpacket2Hdr;
            let status = unsafe { std::ptr::read_volatile(&(*hdr).tp_status) };
            if status & TP_STATUS_USER == 0 {
                break;
            }
            std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
            if status & TP_STATUS_LOSING != 0 {
                self.losing += 1;
            }
            let (mac, len) = unsafe { ((*hdr).tp_mac as usize, (*hdr).tp_snaplen as usize) };
            let frame = unsafe { std::slice::from_raw_parts((hdr as *const u8).add(mac), len) };
            f(frame);
            std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
            unsafe { std::ptr::write_volatile(&mut (*hdr).tp_status, TP_STATUS_KERNEL) };
            self.cur = (self.cur + 1) % self.frame_nr;
            n += 1;
        }
        n
    }
}

impl Drop for Rx {
    fn drop(&mut self) {
        unsafe {
            libc::munmap(self.map as *mut libc::c_void, self.map_len);
            libc::close(self.fd);
        }
    }
}

/// The sending side of one interface.
pub struct Tx {
    fd: i32,
    /// frames the qdisc refused (its queue full): a bottleneck's drops
    pub refused: u64,
}

impl Tx {
    pub fn open(ifname: &str) -> io::Result<Tx> {
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(err("AF_PACKET socket"));
        }
        let sndbuf: i32 = 16 << 20;
        unsafe { libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, &sndbuf as *const i32 as *const libc::c_void, 4) };
        let sa = sockaddr(ifindex(ifname)?, ETH_P_IP);
        let r = unsafe { libc::bind(fd, &sa as *const libc::sockaddr_ll as *const libc::sockaddr,
                                    std::mem::size_of::<libc::sockaddr_ll>() as u32) };
        if r < 0 {
            return Err(err(&format!("bind to {ifname}")));
        }
        Ok(Tx { fd, refused: 0 })
    }

    /// Send every frame, in order, in as few system calls as the kernel allows.
    pub fn send(&mut self, frames: &[&[u8]]) -> io::Result<()> {
        let mut iov: Vec<libc::iovec> = frames.iter()
            .map(|f| libc::iovec { iov_base: f.as_ptr() as *mut libc::c_void, iov_len: f.len() }).collect();
        let mut msgs: Vec<libc::mmsghdr> = iov.iter_mut().map(|v| {
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_iov = v as *mut libc::iovec;
            h.msg_hdr.msg_iovlen = 1;
            h
        }).collect();
        let mut at = 0;
        while at < msgs.len() {
            let chunk = (msgs.len() - at).min(1024);
            let r = unsafe { libc::sendmmsg(self.fd, msgs[at..].as_mut_ptr(), chunk as u32, 0) };
            if r < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::ENOBUFS) => {
                        self.refused += 1; // the qdisc's queue is full: this frame is its drop
                        at += 1;
                    }
                    Some(libc::EINTR) | Some(libc::EAGAIN) => continue,
                    _ => return Err(io::Error::new(e.kind(), format!("sendmmsg: {e}"))),
                }
            } else {
                at += r as usize;
            }
        }
        Ok(())
    }
}

impl Drop for Tx {
    fn drop(&mut self) {
        unsafe { libc::close(self.fd) };
    }
}

/// Rewrite a frame for its next hop: Ethernet destination and source, and the IPv4 TTL (less one,
/// its header checksum updated as RFC 1624 does). False: the frame must not go on (TTL spent, or
/// not IPv4).
pub fn forward(frame: &mut [u8], dst: &[u8; 6], src: &[u8; 6]) -> bool {
    if frame.len() < 34 || frame[12..14] != [0x08, 0x00] || frame[22] <= 1 {
        return false;
    }
    frame[0..6].copy_from_slice(dst);
    frame[6..12].copy_from_slice(src);
    frame[22] -= 1;
    // the TTL is the high byte of the header's 5th word: the word falls by 0x0100, the checksum rises by it
    let sum = u16::from_be_bytes([frame[24], frame[25]]) as u32 + 0x0100;
    let sum = (sum & 0xffff) + (sum >> 16);
    frame[24..26].copy_from_slice(&(sum as u16).to_be_bytes());
    true
}

pub fn parse_mac(text: &str) -> Option<[u8; 6]> {
    let parts: Vec<u8> = text.split(':').filter_map(|h| u8::from_str_radix(h, 16).ok()).collect();
    if parts.len() == 6 && text.split(':').count() == 6 {
        let mut m = [0u8; 6];
        m.copy_from_slice(&parts);
        Some(m)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checksum(h: &[u8]) -> u16 {
        let mut s: u32 = h.chunks(2).map(|w| u16::from_be_bytes([w[0], w[1]]) as u32).sum();
        while s >> 16 != 0 {
            s = (s & 0xffff) + (s >> 16);
        }
        !(s as u16)
    }

    #[test]
    fn forwarding_rewrites_the_addresses_and_keeps_the_header_checksum_right() {
        let mut f = vec![0u8; 60];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        let ip = [0x45, 0, 0, 46, 0x12, 0x34, 0x40, 0, 64, 17, 0, 0, 198, 18, 0, 2, 198, 18, 1, 2];
        f[14..34].copy_from_slice(&ip);
        let c = checksum(&f[14..34]);
        f[24..26].copy_from_slice(&c.to_be_bytes());
        for ttl in [64u8, 2, 255] {
            f[22] = ttl;
            f[24..26].copy_from_slice(&[0, 0]);
            let c = checksum(&f[14..34]);
            f[24..26].copy_from_slice(&c.to_be_bytes());
            assert!(forward(&mut f, &[1; 6], &[2; 6]));
            assert_eq!((&f[0..6], &f[6..12], f[22]), (&[1u8; 6][..], &[2u8; 6][..], ttl - 1));
            assert_eq!(checksum(&f[14..34]), 0, "a header with its checksum sums to zero (ttl {ttl})");
        }
        f[22] = 1;
        assert!(!forward(&mut f, &[1; 6], &[2; 6]), "a spent TTL goes no further");
        f[12] = 0x86;
        f[22] = 64;
        assert!(!forward(&mut f, &[1; 6], &[2; 6]), "not IPv4");
        assert_eq!(parse_mac("aa:bb:cc:00:11:2f"), Some([0xaa, 0xbb, 0xcc, 0, 0x11, 0x2f]));
        assert_eq!(parse_mac("aa:bb:cc:00:11"), None);
    }
}
