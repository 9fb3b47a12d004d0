package hooks_test

import (
	"testing"
	"time"

	"github.com/relaystation/relay/services/hooks"
	"github.com/relaystation/relay/tools"
)

func TestDiscoveryTTLFollowsTheServers(t *testing.T) {
	t.Parallel()
	def := 5 * time.Minute
	tests := []struct {
		name string
		list []tools.ToolInfo
		want time.Duration
	}{
		{"no tools", nil, def},
		{"no server ttl", []tools.ToolInfo{{Name: "a.x"}}, def},
		{"server ttl shorter", []tools.ToolInfo{{Name: "a.x", ServerTTLMs: 30000}}, 30 * time.Second},
		{"server ttl longer", []tools.ToolInfo{{Name: "a.x", ServerTTLMs: 3600000}}, time.Hour},
		{"shortest of the servers", []tools.ToolInfo{{Name: "a.x", ServerTTLMs: 3600000}, {Name: "b.y", ServerTTLMs: 20000}}, 20 * time.Second},
		{"a server without ttl counts for the default", []tools.ToolInfo{{Name: "a.x", ServerTTLMs: 3600000}, {Name: "b.y"}}, def},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := hooks.DiscoveryTTL(tc.list, def); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}
