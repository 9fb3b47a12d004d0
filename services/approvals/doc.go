// Package approvals is the approvals worker: it puts the agent's suggestions
// that would act outside Slack in front of a human in a Slack thread, with
// Approve, Edit and Reject buttons, and turns an authorised approval into
// exactly one outbound envelope.
//
// # Flow
//
// The worker consumes agent.suggestion (durable consumer "approvals"). A
// suggestion whose meta.target is Slack goes straight to out.slack. Any other
// target (envelope.Target.NeedsApproval) is posted to the approval channel
// (Config.Channel, overridable per target channel) as a Block Kit message
// showing the text, where it will be posted (Target.String), the source link
// (meta.source.url) and the refs the answer cites without having been given
// them (meta.unknown_refs). One approval record, and one Slack thread, exists
// per task: a second suggestion of a pending task updates the message in place;
// one arriving after a decision opens a new round in the same thread.
//
// Button clicks and modal submissions arrive as envelopes on
// in.slack.block_actions (durable "approvals-actions") and
// in.slack.view_submission (durable "approvals-views"), mapped by
// mappers/slack from the webhook gateway or from Socket Mode (SocketMode).
// Slack was answered by the gateway before the work happens here.
//
//   - Approve publishes the answer on out.{target channel} with Nats-Msg-Id
//     "approve:{task}" and meta.idempotency_key "out:{task}" (":{round}" is
//     appended from the second round on), and meta.approval {id, decided_by,
//     decided_at, slack_channel, slack_ts}; then chat.update shows who decided
//     and removes the buttons.
//   - Edit opens a modal (views.open) with the text; its submission replaces the
//     stored text and updates the message (chat.update).
//   - Reject opens a modal asking for a reason; its submission records the
//     decision and updates the message.
//
// Only approvers (user ids U…/W…, or user-group ids S… whose members are read
// with usergroups.users.list and cached) may decide; anyone else gets an
// ephemeral refusal (chat.postEphemeral) and an audit record on
// audit.approvals. Every decision is published on approval.decided and
// audited too.
//
// # Tool steps of per-user servers
//
// An agent's call of a server whose mcp.json entry says "oauth": {"per":
// "user"} arrives on agent.toolstep (durable "approvals-steps") instead of
// going to the tool runner. It is put up in the task's Slack thread (for a
// task from GitHub and the like, the target's approval channel, in the thread
// its first step opened) with Approve and Reject, under the same records,
// claims, approvers and audit as suggestions. Approve publishes the call on
// tool.call acting for the approver (meta approved_by); Reject and expiry
// answer it with a tool.failed naming who rejected it (toolstep.go).
//
// # Questions of MCP servers (elicitation)
//
// A server may ask for input while a tool call runs (elicitation/create).
// When the call belongs to a Slack thread, the tool runner sends the question
// on rpc.elicit.ask (tools.BusElicitor; request/reply to the micro service
// "relay-approvals", queue group "approvals") and this worker posts it in that thread with Answer…, Decline
// and Cancel. Answer opens a form built from the question's requestedSchema
// (text, email, URL, date and date-time inputs, number inputs with their
// bounds, a checkbox per boolean, selects for enums; defaults pre-filled).
// Only the person the call acts for may answer (the author of a code block),
// or any approver for an agent's task; others get an ephemeral refusal.
// Accept, decline and cancel go back to the runner's inbox as the MCP
// actions; at the deadline the runner asks rpc.elicit.expire and the question
// is declined, the message saying so. Records live in "{prefix}_elicit",
// changed by revision-checked updates only.
//
// # State and exactly once
//
// Records live in the JetStream key-value bucket "{prefix}_approvals", keyed by
// task id. Every transition (pending to approved, rejected or expired; a text
// edit; the message and outbound bookkeeping) is a revision-checked update, so
// a double click, a Slack retry, two workers or a redelivery after a crash all
// agree on one decision. The outbound publish is de-duplicated by its
// Nats-Msg-Id and, downstream, by the idempotency key; a crash between the
// decision and the publish is finished by the redelivery.
//
// The approval message is posted once per round: the handler that posts it
// claims the round in the record first (a short-lived claim), so a second
// handler of the same round waits for it instead of posting too, and the
// message carries the round's approval id in its Slack metadata
// (MetadataEventType). A claim left by a worker that died between posting and
// recording the ts expires; the handler that takes it over looks for the
// message in the thread or channel history (conversations.replies/history)
// before posting.
//
// A suggestion expires after Config.TTL (RELAY_APPROVAL_TTL, default 24h): a
// click after that fails closed (the message says "expired", nothing is
// posted) and a periodic sweep marks expired records and their messages.
package approvals
