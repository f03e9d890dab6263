//! `workflow-status`: where each infraflow workflow stands (the same view as `infraflow status`).

fn main() -> std::process::ExitCode {
    infraflow_cmd::main_workflow_status()
}
