// Package openproject verifies OpenProject webhooks and maps them into
// envelopes.
//
// # Verification
//
// X-OP-Signature must be "sha1=" + hex HMAC-SHA1(webhook secret, raw body),
// compared in constant time. Without a secret every request is refused
// (mappers.ErrNoSecret).
//
// # Payloads
//
// OpenProject posts {"action": "{event}:{verb}", "{key}": {API v3 resource}}:
// work_package:created and :updated carry "work_package";
// work_package_comment:comment carries "activity" (an Activity::Comment);
// project:created and :updated carry "project"; time_entry:created and :updated
// carry "time_entry"; attachment:created carries "attachment". Any other action
// is mapped generically from the one resource object beside it. A body that is
// not such an object, or has no action, is a *mappers.ParseError (400).
// Subjects are envelope.Inbound(ChannelOpenProject, event):
// in.openproject.work_package, in.openproject.work_package_comment,
// in.openproject.project, in.openproject.time_entry, in.openproject.attachment.
//
// # Threads
//
// Everything about one work package (the work package itself, comments on it,
// time logged on it, files attached to it) shares
// envelope.OpenProjectThread(host, id). The id comes from the resource (or the
// /api/v3/work_packages/{id} link of a comment, time entry or attachment). The
// host is the one of Config.BaseURL (OPENPROJECT_URL) when set, else the host
// of an absolute _links.self href, else "openproject"; OpenProject writes its
// links as paths, so set BaseURL to get stable, meaningful keys
// (Config.Validate checks it at startup). With BaseURL set, meta.source.url is
// the work package's (or project's) page. Projects have no thread.
//
// # Delivery identity (Nats-Msg-Id)
//
// OpenProject sends no delivery id, and a retried job renders the resource
// again, so the identity is derived from the resource's version rather than from
// the bytes:
//
//	openproject:{action}:work_package:{id}:v{lockVersion}   work packages
//	openproject:{action}:activity:{id}                      comments
//	openproject:{action}:{type}:{id}:{updatedAt}            projects, time entries
//	openproject:{action}:attachment:{id}                    attachments
//	openproject:{action}:sha256:{hex of the raw body}       anything without an id
//
// Each update of a work package increments lockVersion, so distinct updates
// never collide, while a redelivery of one update stores nothing new.
// meta.source.delivery_id carries the same value.
package openproject
