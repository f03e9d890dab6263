//! Reading a workflow's input JSON from a file or standard input, with errors that name the place.

use std::io::Read;

use serde_json::Value;

use crate::failure::Failure;

pub fn read_input(source: &str) -> Result<Value, Failure> {
    let (name, text) = if source == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|e| Failure::usage(format!("invalid input: cannot read standard input: {e}")))?;
        ("standard input".to_string(), s)
    } else {
        let text = std::fs::read_to_string(source)
            .map_err(|e| Failure::usage(format!("invalid input: cannot read {source}: {e}")))?;
        (source.to_string(), text)
    };
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| Failure::usage(format!("invalid input: {name} is not valid JSON: {e}")))?;
    if !value.is_object() {
        return Err(Failure::usage(format!("invalid input: {name} must hold a JSON object")));
    }
    Ok(value)
}
