//! Instance user data from a file (the ignition pointer a HyperShift NodePool hands its
//! machines, which carries a token): read when a node is launched, on whichever host runs the
//! workflow, and never journaled or logged — the journal keeps its path and SHA-256 only, so a
//! changed file is refused rather than giving one pool two kinds of node.

use infraflow_engine::{ActivityError, InputError};
use sha2::{Digest, Sha256};

/// What RunInstances takes before base64.
pub const MAX_BYTES: usize = 16 * 1024;

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// At submit: the file's absolute path (a daemon's working folder is not the submitter's) and
/// its digest; `given`, a digest already in the input, must agree.
pub fn pin(path: &str, given: Option<&str>) -> Result<(String, String), InputError> {
    let field = |problem: String| InputError::field("userDataFile", problem);
    let abs = std::fs::canonicalize(path).map_err(|e| field(format!("cannot read {path}: {e}")))?;
    let bytes = std::fs::read(&abs).map_err(|e| field(format!("cannot read {}: {e}", abs.display())))?;
    if bytes.len() > MAX_BYTES {
        return Err(field(format!("{} has {} bytes; AWS takes at most {MAX_BYTES}", abs.display(), bytes.len())));
    }
    let digest = sha256(&bytes);
    if let Some(g) = given.filter(|g| *g != digest) {
        return Err(InputError::field(
            "userDataSHA256",
            format!("{g} is not the SHA-256 of {} ({digest})", abs.display()),
        ));
    }
    Ok((abs.to_string_lossy().into_owned(), digest))
}

/// At launch: the file's bytes, if they are still what was submitted. Missing or changed, only
/// the operator can fix it (restore the file on this host, or submit the pool again).
pub fn load(path: &str, digest: &str) -> Result<Vec<u8>, ActivityError> {
    let operator = |message: String| ActivityError { operator: true, ..ActivityError::terminal(message) };
    let bytes = std::fs::read(path).map_err(|e| {
        operator(format!(
            "cannot read the user data file {path} on this host: {e}; put it back, then `infraflow retry`"
        ))
    })?;
    if sha256(&bytes) != digest {
        return Err(operator(format!(
            "the user data file {path} changed since the node pool was submitted; restore it, or submit the node pool again"
        )));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pinned_file_loads_until_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("ud");
        std::fs::write(&f, "token=abc").unwrap();
        let (path, digest) = pin(f.to_str().unwrap(), None).unwrap();
        assert_eq!(digest.len(), 64);
        assert_eq!(load(&path, &digest).unwrap(), b"token=abc");
        assert!(pin(f.to_str().unwrap(), Some("00")).is_err(), "a digest that disagrees");
        std::fs::write(&f, "token=xyz").unwrap();
        let e = load(&path, &digest).unwrap_err();
        assert!(e.operator && e.message.contains("changed") && !e.message.contains("xyz"), "{e:?}");
        std::fs::write(&f, vec![b'a'; MAX_BYTES + 1]).unwrap();
        assert!(pin(f.to_str().unwrap(), None).unwrap_err().0.contains("at most"));
    }
}
