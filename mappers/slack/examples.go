package slack

import "embed"

// Examples are real Events API deliveries from testdata/events (see the
// golden tests), one per event `relay send slack --event` offers: the
// files are named {event}.json.
//
//go:embed testdata/events/app_mention.json testdata/events/message.json
var Examples embed.FS
