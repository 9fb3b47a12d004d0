package openproject

import "embed"

// Examples are real OpenProject deliveries from testdata/payloads (see the
// golden tests), one per resource `relay send openproject --event` offers:
// the files are named {resource}.{action}.json.
//
//go:embed testdata/payloads/work_package.created.json testdata/payloads/project.created.json
var Examples embed.FS
