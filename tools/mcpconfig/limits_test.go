package mcpconfig

import (
	"strings"
	"testing"
)

// TestPolicyPerSession: limits.perSession defaults to 25, takes -1
// (unlimited) or a positive count, and refuses 0 and other negatives.
func TestPolicyPerSession(t *testing.T) {
	t.Parallel()
	tests := []struct {
		doc  string
		want int
		err  bool
	}{
		{"{}", DefaultPerSession, false},
		{"limits: {concurrency: 3}", DefaultPerSession, false},
		{"limits: {perSession: -1}", -1, false},
		{"limits: {perSession: 1}", 1, false},
		{"limits: {perSession: 0}", 0, true},
		{"limits: {perSession: -2}", 0, true},
		{"limits: {perSession: many}", 0, true},
	}
	for _, tt := range tests {
		p, err := ParsePolicy([]byte(tt.doc))
		switch {
		case tt.err && (err == nil || !strings.Contains(err.Error(), "perSession")):
			t.Errorf("%s: got %v, want an error naming perSession", tt.doc, err)
		case !tt.err && err != nil:
			t.Errorf("%s: %v", tt.doc, err)
		case !tt.err && p.Limits.PerSession != tt.want:
			t.Errorf("%s: got perSession %d, want %d", tt.doc, p.Limits.PerSession, tt.want)
		}
	}
}
