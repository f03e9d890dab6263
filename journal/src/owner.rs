//! Who holds a lease: an owner id that says which host and process it is, so a restarted daemon
//! can tell a dead predecessor (take over at once) from a live one (respect the lease).
//!
//! The lease rule this serves (`rules::lease_is_free`): an owner id is
//! `host~boot~pidns:pid:process-start-ticks:nonce` (the nonce the random half of a UUIDv7). A lease
//! is free when expired, or when its owner is a process of this host, boot and pid namespace that
//! no longer exists (a restarted daemon takes over at once); a live owner, or one elsewhere, is
//! respected until expiry (15 s, renewed every second, self-fenced at 10 s: the engine's
//! `EngineConfig` and `lease`).

/// The identity of one running process, as written into leases:
/// `host~boot~pidns:pid:start:nonce`. The boot id and the pid-namespace inode say where the pid
/// means something: two containers on one kernel can share a hostname but not a pid namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    pub id: String,
}

impl Owner {
    /// An owner id for this process. Each call gives a new id (a nonce tells apart two engines
    /// in one process, as tests have).
    pub fn for_this_process() -> Owner {
        let pid = std::process::id();
        let start = process_start_ticks(pid).unwrap_or(0);
        // The random half of a UUIDv7: unique among the engines of one process and its successors.
        let nonce = uuid::Uuid::now_v7().simple().to_string();
        Owner { id: format!("{}:{pid}:{start}:{}", machine(), &nonce[16..]) }
    }
}

/// `host~boot~pidns` of this process: where its pids can be looked up.
fn machine() -> String {
    static MACHINE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    MACHINE
        .get_or_init(|| {
            let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                .map(|b| b.trim().replace('-', "").chars().take(16).collect::<String>())
                .unwrap_or_default();
            // "pid:[4026531836]": the inode tells pid namespaces apart.
            let pidns = std::fs::read_link("/proc/self/ns/pid")
                .ok()
                .and_then(|l| l.to_str().and_then(|s| s.strip_prefix("pid:[")?.strip_suffix(']').map(str::to_string)))
                .unwrap_or_default();
            format!("{}~{boot}~{pidns}", host_name())
        })
        .clone()
}

/// Whether the owner named by `owner_id` is a process on this host that no longer runs.
/// An owner on another host, or one we cannot judge, is presumed alive: only its lease expiry
/// frees what it holds.
pub fn owner_is_gone(owner_id: &str) -> bool {
    let mut parts = owner_id.rsplitn(3, ':');
    let (Some(_nonce), Some(start), Some(rest)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let Some((place, pid)) = rest.rsplit_once(':') else {
        return false;
    };
    // Another host, boot or pid namespace — or one we cannot name: presumed alive.
    if place != machine() || place.split('~').any(str::is_empty) {
        return false;
    }
    let (Ok(pid), Ok(start)) = (pid.parse::<u32>(), start.parse::<u64>()) else {
        return false;
    };
    if pid == std::process::id() {
        // Another engine of this very process: alive as long as the process is.
        return false;
    }
    match process_start_ticks(pid) {
        // A process with that pid exists; it is the owner only if it started at the same tick.
        Some(now_start) => start != 0 && now_start != start,
        None => !pid_exists(pid),
    }
}

fn host_name() -> String {
    static HOST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HOST.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .or_else(|_| std::fs::read_to_string("/etc/hostname"))
            .map(|s| s.trim().replace([':', '~'], "_"))
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "localhost".to_string())
    })
    .clone()
}

/// The start time of a process in clock ticks since boot (Linux `/proc/PID/stat` field 22).
fn process_start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces and parentheses: parse after the last ')'.
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(19)?.parse().ok()
}

fn pid_exists(pid: u32) -> bool {
    if std::path::Path::new("/proc/self").exists() {
        return std::path::Path::new(&format!("/proc/{pid}")).exists();
    }
    // Without /proc we cannot tell; presume alive so that only expiry frees the lease.
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_not_gone() {
        assert!(!owner_is_gone(&Owner::for_this_process().id));
    }

    #[test]
    fn a_finished_child_process_is_gone() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let start = process_start_ticks(pid).unwrap_or(1);
        child.wait().unwrap();
        let id = format!("{}:{pid}:{start}:0", machine());
        assert!(owner_is_gone(&id));
    }

    #[test]
    fn a_dead_pid_of_another_pid_namespace_or_boot_is_presumed_alive() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let (host, rest) = machine().split_once('~').map(|(h, r)| (h.to_string(), r.to_string())).unwrap();
        let (boot, pidns) = rest.split_once('~').unwrap();
        assert!(!owner_is_gone(&format!("{host}~{boot}~1:{pid}:1:0")), "another pid namespace");
        assert!(!owner_is_gone(&format!("{host}~0000~{pidns}:{pid}:1:0")), "another boot");
        assert!(!owner_is_gone(&format!("{host}:{pid}:1:0")), "an owner id without them (older versions)");
    }

    #[test]
    fn an_owner_on_another_host_is_presumed_alive() {
        assert!(!owner_is_gone("some-other-host:1:1:0"));
        assert!(!owner_is_gone("garbage"));
    }
}
