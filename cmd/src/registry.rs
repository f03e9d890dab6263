//! Every workflow this binary can run.

use infraflow_workflows::Registry;

pub fn full_registry() -> Registry {
    infraflow_workflows::base_registry()
}
