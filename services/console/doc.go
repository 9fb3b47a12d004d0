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
//   - Events: envelopes as they pass (see Following the bus), filtered by
//     channel, subject, thread and actor; each opens its JSON.
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
// # Following the bus
//
// The Overview's rates, Events, an envelope's JSON, the hook executions and
// audit records of Tools (and Story, when no Storyteller is wired) read the
// last Config.Recent envelopes of the IN and WORK streams from a ring in
// memory, the hub. The hub follows the bus only while the console is looked
// at: until a request asks for its envelopes it holds none and has no
// subscription, and costs the relay nothing. Such a request wakes it: it
// subscribes with core NATS to relay.in.> and every work root (never rpc.*,
// where a subscriber would hide "no responders" from requesters), makes sure
// the server has the subscriptions, then loads the last envelopes of both
// streams, in stream order, into its ring, and only then adds what the
// subscriptions delivered meanwhile, in the order it came: an envelope
// published during the wake comes both ways and is kept once, by its id,
// and none falls between. While it follows, every such request first syncs with the bus
// (a flush, then the messages already received are added), so a page shows
// every envelope published before it was asked for. A live page of those
// envelopes keeps the hub following while it is connected. After
// Config.Idle (RELAY_CONSOLE_IDLE, default 5 minutes) with no such request
// and no live page, the hub unsubscribes and empties its ring; the next
// request loads it again.
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
