//! `infraflow`: run, submit, inspect and control durable provisioning workflows.

fn main() -> std::process::ExitCode {
    infraflow_cmd::main_infraflow()
}
