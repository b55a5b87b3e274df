"""The workflow config: one contract (``workflow.WorkflowConfig``, composed of the stage models), how a
run's files become one config (``prepare``), how a stage reads its slice (``slices``) and the generated
reference and JSON schema (``reference``)."""
