package github_test

import (
	"reflect"
	"testing"

	"github.com/relaystation/relay/mappers"
)

// TestFacts: meta.facts carries what a hook or the agent reads without
// parsing the content, per event kind; empty facts are left out.
func TestFacts(t *testing.T) {
	t.Parallel()
	p := newProvider()
	cases := []struct {
		name, event, body string
		want              map[string]any
	}{
		{"push to a branch", "push", `{"ref":"refs/heads/main","after":"abc123","repository":{"full_name":"o/r"}}`,
			map[string]any{"repository": "o/r", "ref": "refs/heads/main", "branch": "main", "sha": "abc123"}},
		{"labelled issue", "issues", `{"action":"labeled","issue":{"number":7,"title":"Down","state":"open","labels":[{"name":"bug"},{"name":"incident"}]},"label":{"name":"incident"},"repository":{"full_name":"o/r"}}`,
			map[string]any{"repository": "o/r", "number": 7, "title": "Down", "state": "open", "labels": []any{"bug", "incident"}}},
		{"merged pull request", "pull_request", `{"action":"closed","number":3,"pull_request":{"number":3,"title":"Fix","state":"closed","merged":true,"head":{"ref":"fix","sha":"def"},"base":{"ref":"main"}},"repository":{"full_name":"o/r"}}`,
			map[string]any{"repository": "o/r", "number": 3, "title": "Fix", "state": "merged", "branch": "fix", "base": "main", "sha": "def"}},
		{"workflow run", "workflow_run", `{"action":"completed","workflow_run":{"head_branch":"dev","head_sha":"123"},"repository":{"full_name":"o/r"}}`,
			map[string]any{"repository": "o/r", "branch": "dev", "sha": "123"}},
		{"branch created", "create", `{"ref":"feature","ref_type":"branch","repository":{"full_name":"o/r"}}`,
			map[string]any{"repository": "o/r", "ref": "feature", "branch": "feature"}},
		{"unknown event on an issue", "future_event", `{"action":"x","issue":{"number":9,"title":"T","labels":[{"name":"l"}]},"repository":{"full_name":"o/r"}}`,
			map[string]any{"repository": "o/r", "number": 9, "title": "T", "labels": []any{"l"}}},
		{"organization event", "organization", `{"action":"member_added","organization":{"login":"o"}}`, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res, err := p.Map(request(tc.event, "d", []byte(tc.body)))
			if err != nil {
				t.Fatal(err)
			}
			got, ok := res.Items[0].Envelope.Meta.Get(mappers.FactsKey)
			if tc.want == nil {
				if ok {
					t.Fatalf("got facts %v, want none", got)
				}
				return
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %#v, want %#v", got, tc.want)
			}
		})
	}
}
