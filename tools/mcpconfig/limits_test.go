package mcpconfig

import (
	"strings"
	"testing"
	"time"
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

// TestTimeoutSource: the source named matches the limit TimeoutOr picks.
func TestTimeoutSource(t *testing.T) {
	t.Parallel()
	p, err := ParsePolicy([]byte("budgets:\n  a.x: {timeout: 5s}\n  a: {timeout: 7s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		server, tool string
		def          time.Duration
		want         string
	}{
		{"a", "x", 9 * time.Second, "the timeout of policy budget a.x"},
		{"a", "y", 9 * time.Second, "the timeout of policy budget a"},
		{"b", "y", 9 * time.Second, `the "timeout" of server b in mcp.json`},
		{"b", "y", 0, "the default 30s; a policy budget's timeout or the server's \"timeout\" in mcp.json sets another"},
	}
	for _, tt := range tests {
		if got := p.TimeoutSource(tt.server, tt.tool, tt.def); got != tt.want {
			t.Errorf("TimeoutSource(%s, %s, %s) = %q, want %q", tt.server, tt.tool, tt.def, got, tt.want)
		}
	}
}
