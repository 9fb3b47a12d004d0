package sentry

import "embed"

// Examples are real Sentry deliveries from testdata/payloads (see the
// golden tests), one per resource `relay send sentry --event` offers: the
// files are named {resource}.{action}.json.
//
//go:embed testdata/payloads/issue.created.json testdata/payloads/error.created.json testdata/payloads/comment.created.json testdata/payloads/metric_alert.critical.json
var Examples embed.FS
