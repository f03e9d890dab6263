//! Which process a loopback connection comes from: the kernel's socket table (`/proc/net/tcp`)
//! gives the client socket's inode, and a process holds that socket if one of its descriptors
//! names it. A chain of kills asks it of every call, so that a request its killed process had
//! sent — read by the proxy only after the next process started — is not taken for the next
//! process's.

use std::net::TcpStream;

/// Whether `conn` comes from another process than `pid` (when a process is named).
pub fn not_from(conn: &TcpStream, pid: Option<u32>) -> bool {
    pid.is_some_and(|pid| !held_by(conn, pid))
}

/// Whether `conn`'s other end is a socket that process `pid` holds now.
pub fn held_by(conn: &TcpStream, pid: u32) -> bool {
    let (Ok(peer), Ok(local)) = (conn.peer_addr(), conn.local_addr()) else { return false };
    let Some(inode) = client_inode(peer.port(), local.port()) else { return false };
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    let wanted = format!("socket:[{inode}]");
    fds.flatten().any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.to_string_lossy() == wanted))
}

/// The inode of the client socket bound to `port` and connected to `server_port` (0, a closed
/// socket's, is none).
fn client_inode(port: u16, server_port: u16) -> Option<u64> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    let (local, remote) = (format!(":{port:04X}"), format!(":{server_port:04X}"));
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (l, r, inode) = (f.get(1)?, f.get(2)?, f.get(9)?);
        (l.ends_with(&local) && r.ends_with(&remote)).then(|| inode.parse().ok()).flatten().filter(|i| *i != 0)
    })
}
