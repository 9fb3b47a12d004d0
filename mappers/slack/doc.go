// Package slack verifies Slack requests and maps them into envelopes: Events
// API callbacks (route "events", including the url_verification handshake),
// slash commands (route "commands", form-encoded) and interactivity payloads
// (route "interactions", the JSON in the payload= form field).
//
// # Verification
//
// X-Slack-Signature must be "v0=" + hex HMAC-SHA256(signing secret,
// "v0:{X-Slack-Request-Timestamp}:{raw body}"), compared in constant time; a
// timestamp more than five minutes from the receive time is refused. Without a
// signing secret every request is refused (mappers.ErrNoSecret).
//
// # Subjects and threads
//
// Every envelope goes to envelope.Inbound(ChannelSlack, type): in.slack.message,
// in.slack.app_mention, in.slack.command, in.slack.block_actions,
// in.slack.view_submission, and in.slack.{type} for any other event or
// interaction type (mapped generically, never refused). Messages and app
// mentions are threaded by envelope.SlackThread(team, channel, thread_ts, else
// ts); for an edit (subtype message_changed) the edited message's own thread_ts
// or ts is used, so an edit lands in the thread of the message it changes.
// An interaction on a message is threaded by the message's thread_ts, else its
// ts. A view_submission carries no channel: its thread is taken from the view's
// private_metadata, which is either a thread key ("slack:T/C/ts") or a JSON
// object {"thread": "...", "task_id": "..."}; the approval flow that opens the
// view writes it. A slash command starts its own conversation, threaded
// "slack:{team}/{channel}/cmd-{trigger_id}" (the last part is not a message ts:
// whoever answers first posts top-level and continues in that message's thread).
//
// # Self-recognition
//
// Messages written by bots (a bot_id, a bot_profile or subtype bot_message) and
// edits (subtype message_changed, or an app_mention carrying "edited") are
// mapped like any other message but marked in meta extra "slack": {"bot": true}
// and {"edit": true}, so the relay never answers itself or an edit twice. A bot
// message posted by the app the event is for (its app_id or bot_profile.app_id
// is the event's api_app_id) is the relay's own post: {"self": true}, which
// hooks skip too.
//
// # Delivery identity (Nats-Msg-Id)
//
//   - Events API: "slack:{team_id}:{event_id}". A retry (X-Slack-Retry-Num) has
//     the same event_id, so it is de-duplicated by the bus, never dropped on
//     sight: a retry whose first delivery failed is the one that gets through.
//   - Slash commands: "slack:{team_id}:command:{trigger_id}".
//   - Interactions: "slack:{team.id}:{type}:{trigger_id}".
//
// Slack issues one trigger_id per user invocation, so the trigger identifies the
// invocation across redeliveries. Where Slack sends no event_id or trigger_id,
// the identity is "slack:{team}:{kind}:sha256:{hex of the raw body}", the same
// for a byte-identical redelivery.
//
// # Meta
//
// meta.source is {event: type, action: subtype, command or first action_id,
// delivery_id: event_id or trigger_id, actor: user id}. meta extra "slack"
// holds what later hops need: team, channel, ts, thread_ts, user, bot, edit; for
// commands the command, text and response_url; for interactions the action ids,
// values, user id, channel, message ts, response_url, trigger_id and, for views,
// the view id, callback_id, private_metadata and the submitted state as
// {block_id: {action_id: value}}.
package slack
