package github

import (
	"testing"

	gh "github.com/google/go-github/v60/github"
)

// Every row of the table reads the type go-github decodes its event kind into;
// a row keyed by the wrong kind would silently fall back to the generic path.
func TestTypedKindsMatchGoGitHub(t *testing.T) {
	t.Parallel()
	for event, fill := range typedKinds {
		ev := gh.EventForType(event)
		if ev == nil {
			t.Errorf("%s: go-github knows no such event type", event)
			continue
		}
		if !fill(&facts{}, ev, 100) {
			t.Errorf("%s: the filler does not read go-github's %T", event, ev)
		}
	}
}
