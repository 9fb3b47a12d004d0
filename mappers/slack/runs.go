package slack

// ActionCancelRun is the action_id of the Cancel button on a running
// code-block run's message (posted by the agent, clicked through the
// approvals worker); its value is the execution id (the tool-call envelope's
// id).
const ActionCancelRun = "relay_run_cancel"
