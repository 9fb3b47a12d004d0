// Package sentry verifies Sentry integration-platform webhooks and maps them
// into envelopes.
//
// # Verification
//
// Sentry-Hook-Signature must be the hex HMAC-SHA256 of the raw body under the
// integration's client secret (no prefix), compared in constant time. Without a
// client secret every request is refused (mappers.ErrNoSecret).
//
// # Resources
//
// Sentry-Hook-Resource selects the mapping: issue (created, resolved, assigned,
// archived, unresolved), event_alert (triggered), metric_alert (critical,
// warning, resolved), error (created), comment (created, updated, deleted) and
// installation (created, deleted; role system). Any other resource (Sentry adds
// some, seer and preprod_artifact for example) is mapped generically from its
// JSON rather than refused, so that Sentry does not count the endpoint as
// failing; a request without the header, or whose body is not a JSON object
// with the resource's data, is a *mappers.ParseError (400).
//
// The header is not signed, so it must agree with the signed body: a known
// resource needs its data key (data.issue, data.event, data.metric_alert,
// data.error, data.comment, data.installation), an unknown one must carry none
// of them, and a name that is not a lowercase word of at most 64 characters is
// refused (400). Subjects are
// envelope.Inbound(ChannelSentry, resource): in.sentry.issue,
// in.sentry.event_alert, in.sentry.metric_alert, in.sentry.error,
// in.sentry.comment, in.sentry.installation.
//
// # Threads
//
// Everything about one Sentry issue (the issue's own webhooks, alerts and errors
// for it, comments on it) shares envelope.SentryThread(org, issue id). Issue,
// alert, error and comment payloads do not all name the organization, so org is
// Config.Org (the organization slug) when set, else the installation uuid that
// every payload carries (one installation belongs to one organization). A metric
// alert incident has no issue: it is threaded as SentryThread(org,
// "incident-{id}"), so its critical and resolved webhooks meet. Installation
// webhooks have no thread.
//
// # Delivery identity (Nats-Msg-Id)
//
// Sentry sends no delivery id that survives a retry: Request-ID identifies one
// request for debugging and is kept in meta extra "sentry".request_id only. The
// identity is derived as
//
//	sentry:{resource}:{action}:{object id}:{hex SHA-256 of the raw body}
//
// where the resource is the one the body is about ("other" for resources this
// package does not know, so that a replay under another header is still a
// duplicate), the object id is the issue id, event id, incident id, comment id or
// installation uuid. A byte-identical redelivery therefore stores nothing new,
// while two distinct webhooks about one object (issue resolved, then
// unresolved) never collide. meta.source.delivery_id carries the same value.
package sentry
