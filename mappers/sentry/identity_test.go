package sentry_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/relaystation/relay/mappers"
)

// Sentry-Hook-Resource is unsigned: a stored signed body replayed under
// another resource is refused when the body says otherwise, and never gets a
// new identity when the body cannot say.
func TestResourceHeaderMustAgreeWithBody(t *testing.T) {
	t.Parallel()
	p := newProvider("test-org")
	_, issue := payload(t, "issue.created.json")
	_, seer := payload(t, "seer.root_cause_started.json")
	for name, tc := range map[string]struct {
		resource string
		body     []byte
		ok       bool
	}{
		"issue as issue":        {"issue", issue, true},
		"issue as comment":      {"comment", issue, false},
		"issue as unknown":      {"seer", issue, false},
		"unknown as unknown":    {"seer", seer, true},
		"unknown as issue":      {"issue", seer, false},
		"4 KiB header":          {strings.Repeat("x", 4096), issue, false},
		"header with dots":      {"issue.x", issue, false},
		"header with uppercase": {"Issue", issue, false},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := signed(tc.resource, tc.body)
			if err := p.Verify(r); err != nil {
				t.Fatalf("Verify: %v", err)
			}
			_, err := p.Map(r)
			var pe *mappers.ParseError
			switch {
			case tc.ok && err != nil:
				t.Fatalf("got %v, want nil", err)
			case !tc.ok && !errors.As(err, &pe):
				t.Fatalf("got %v, want a *mappers.ParseError (400)", err)
			}
		})
	}

	// A body the header cannot be checked against keeps one identity under
	// any resource name.
	ids := map[string]bool{}
	for _, res := range []string{"seer", "seer_two", "preprod_artifact"} {
		got, err := p.Map(signed(res, seer))
		if err != nil {
			t.Fatalf("%s: %v", res, err)
		}
		ids[got.Items[0].MsgID] = true
	}
	if len(ids) != 1 {
		t.Errorf("got %d identities for one signed body under three resource headers, want 1: %v", len(ids), ids)
	}
}
