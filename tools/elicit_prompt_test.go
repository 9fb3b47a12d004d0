package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestPrompter(t *testing.T) {
	t.Parallel()
	schema := map[string]any{
		"type": "object",
		"properties": map[string]any{
			"env":    map[string]any{"type": "string", "enum": []any{"staging", "production"}, "enumNames": []any{"Staging", "Production"}},
			"count":  map[string]any{"type": "integer", "minimum": 1.0},
			"force":  map[string]any{"type": "boolean", "default": false},
			"note":   map[string]any{"type": "string"},
			"owners": map[string]any{"type": "array", "items": map[string]any{"enum": []any{"ann", "bob"}}},
		},
		"required": []any{"env", "count"},
	}
	tests := []struct {
		name, input, want string
		err               error
	}{
		{"answered, retrying bad values", "\n0\n2.5\n3\nProduction\n\n\nann, bob\n", `{"action":"accept","content":{"count":3,"env":"production","force":false,"owners":["ann","bob"]}}`, nil},
		{"required asked again", "a\n\n1\nstaging\nyes\nhi\n\n", `{"action":"accept","content":{"count":1,"env":"staging","force":true,"note":"hi"}}`, nil},
		{"declined", "d\n", `{"action":"decline"}`, nil},
		{"cancelled", "cancel\n", `{"action":"cancel"}`, nil},
		{"nobody there", "", "", ErrNoHuman},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			p := NewPrompter(strings.NewReader(tc.input), &out)
			a, err := p.Elicit(t.Context(), &Question{Server: "deploy", Tool: "release", Message: "Where to?", Schema: schema, Deadline: time.Now().Add(time.Minute)})
			if !errors.Is(err, tc.err) {
				t.Fatalf("got %v, want %v", err, tc.err)
			}
			if tc.err != nil {
				return
			}
			b, _ := json.Marshal(a)
			if string(b) != tc.want {
				t.Errorf("got %s, want %s\noutput:\n%s", b, tc.want, out.String())
			}
			if !strings.Contains(out.String(), "deploy.release asks: Where to?") {
				t.Errorf("output %q lacks the question", out.String())
			}
		})
	}
}
