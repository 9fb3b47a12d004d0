package github

import "embed"

// Examples are real GitHub deliveries from testdata/payloads (see the
// golden tests), one per event `relay send github --event` offers: the
// files are named {event}.{action}.json.
//
//go:embed testdata/payloads/issues.opened.json testdata/payloads/issue_comment.created.json testdata/payloads/pull_request.opened.json testdata/payloads/ping.json
var Examples embed.FS
