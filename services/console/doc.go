// Package console is the operator console: a small web application on its
// own listener (RELAY_CONSOLE_ADDR, default 127.0.0.1:8081, never the
// webhook listener) that shows what passes on the bus and lets an operator
// act on it.
//
// Pages are rendered on the server with html/template; each page's live part
// is re-rendered on the server and pushed over server-sent events
// (/live/{page}), which a few lines of embedded JavaScript put in place.
// Without JavaScript every page still reads, and every action is a plain
// HTML form that POSTs. Assets are embedded with go:embed.
//
//   - Overview: webhooks per second by provider, dead letters, pending
//     approvals, the tool servers' health (rpc.tool.status).
//   - Events: envelopes as they pass (a core NATS subscription on the bus
//     prefix), filtered by channel, subject, thread and actor; each opens
//     its JSON.
//   - Story: the hops of one delivery id, thread key or task id.
//   - Approvals: pending suggestions with Approve, Edit and Reject, sent to
//     the approvals worker's rpc.approvals.decide (the same exactly-once
//     transitions as Slack's buttons), decided as "console:{operator}".
//     Texts are listed as previews (rpc.approvals.list with a preview, so
//     a hundred long ones fit one NATS reply); ?edit={task} reads one whole
//     (rpc.approvals.get), and only a whole text is offered for editing.
//   - Dead letters: list, inspect, replay one or all, delete.
//   - Tools: MCP servers' state, enable / disable and the stop switch (the
//     tool runners' shared state, as `relay mcp enable|disable|stop`), hook
//     executions (hook.executed) and audit records (audit.>).
//
// # Access
//
// On a loopback address the console needs no login unless a token is set.
// Bound elsewhere it needs RELAY_CONSOLE_TOKEN and refuses to start without
// it. With a token, /login compares it in constant time and sets an
// HttpOnly, SameSite=Strict session cookie. Every state-changing request
// (every POST but the login) must carry the session's CSRF token, in the
// form field "csrf" or the X-CSRF-Token header, or it is refused with 403.
package console
