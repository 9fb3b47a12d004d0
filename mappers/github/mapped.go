package github

import (
	"maps"
	"slices"
)

// MappedEvents are the webhook events (X-GitHub-Event) whose content the
// mapper builds from go-github's types, sorted: the events a webhook should
// subscribe to (`relay setup github`). GitHub sends ping on its own.
func MappedEvents() []string {
	out := slices.Sorted(maps.Keys(typedKinds))
	return slices.DeleteFunc(out, func(e string) bool { return e == "ping" })
}
