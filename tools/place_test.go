package tools

import (
	"errors"
	"testing"

	"github.com/relaystation/relay/tools/mcpconfig"
)

// TestVerbsAndPlaces runs two everything servers under verb capabilities and
// bindings: "<server>.read" offers and allows only read-only tools, a
// channel's binding offers only its server, a workspace's binding reaches a
// channel without its own.
func TestVerbsAndPlaces(t *testing.T) {
	t.Parallel()
	cfg := fastConfig(t, everythingStdio(t, "everything"), everythingStdio(t, "other"))
	cfg.Policy = policy(t, `
roles:
  - role: reader
    capabilities: ["everything.read"]
  - role: writer
    capabilities: ["everything.write"]
  - role: admin
    capabilities: ["*.*"]
bindings:
  - slack: {team: T0ACME}
    servers: [other]
    inheritToChildren: true
  - slack: {channel: C0OPS}
    servers: [everything]
`)
	r := startRunner(t, cfg)
	ctx := t.Context()

	reads, writes := r.Tools(ctx, "reader"), r.Tools(ctx, "writer")
	if len(reads) == 0 || len(writes) == 0 {
		t.Fatalf("reader sees %d tools, writer %d; want some each", len(reads), len(writes))
	}
	for _, ti := range reads {
		if !ti.ReadOnly || ti.Server != "everything" {
			t.Errorf("reader offered %s (read-only %t), want only read-only tools of everything", ti.Name, ti.ReadOnly)
		}
	}
	for _, ti := range writes {
		if ti.ReadOnly {
			t.Errorf("writer offered read-only %s", ti.Name)
		}
	}
	res := r.Call(ctx, Request{Tool: writes[0].Name, Caller: Caller{Role: "reader"}})
	if !errors.Is(res.Err, ErrPermissionDenied) || res.Attempts != 0 {
		t.Errorf("reader calling %s: got %v (attempts %d), want permission denied before sending", writes[0].Name, res.Err, res.Attempts)
	}
	if res := r.Call(ctx, Request{Tool: "everything.echo", Args: map[string]any{"message": "x"}, Caller: Caller{Role: "reader"}}); res.Err != nil {
		t.Errorf("reader calling the read-only echo: %v", res.Err)
	}

	places := []struct {
		name   string
		at     mcpconfig.Location
		server string
	}{
		{"bound channel", mcpconfig.Location{Provider: "slack", Parent: "T0ACME", Place: "C0OPS"}, "everything"},
		{"channel inheriting its workspace", mcpconfig.Location{Provider: "slack", Parent: "T0ACME", Place: "C0DEV"}, "other"},
	}
	for _, p := range places {
		list := r.ToolsAt(ctx, "admin", p.at)
		if len(list) == 0 {
			t.Errorf("%s: no tools offered", p.name)
		}
		for _, ti := range list {
			if ti.Server != p.server {
				t.Errorf("%s: offered %s, want only %s's tools", p.name, ti.Name, p.server)
			}
		}
	}
	if all, one := len(r.ToolsAt(ctx, "admin", mcpconfig.Location{Provider: "slack", Parent: "T0ELSE", Place: "C1"})), len(r.ToolsAt(ctx, "admin", places[0].at)); all != 2*one {
		t.Errorf("unbound place offers %d tools, want both servers' %d", all, 2*one)
	}
}
