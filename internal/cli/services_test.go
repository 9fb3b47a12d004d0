package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/internal/rpc"
	"github.com/relaystation/relay/tools"
)

// TestServicesCommand: `relay services` lists the request/reply services of
// a running `relay serve`, with their endpoints and request counts.
func TestServicesCommand(t *testing.T) {
	t.Parallel()
	env := embeddedEnv(t)
	defer serveReady(t, env, nil, 10*time.Second)()
	cli := cliRunner(t, env)

	peer, err := bus.Connect(t.Context(), bus.Config{URL: "nats://" + env["RELAY_NATS_LISTEN"]})
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := tools.ListRemote(t.Context(), peer.Conn(), peer.Prefix(), "agent")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the tool runner never answered: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // poll interval
	}

	code, out, errOut := cli("services", "-wait", "2s")
	if code != 0 {
		t.Fatalf("services: exit %d\n%s", code, errOut)
	}
	for _, want := range []string{"relay-toolrunner", "relay.rpc.tool.list", "toolrunner", "relay-memory", "relay.rpc.memory.retrieve",
		"relay-approvals", "relay.rpc.approvals.decide", "3 service instance(s) (prefix relay)"} {
		if !strings.Contains(out, want) {
			t.Errorf("services output lacks %q:\n%s", want, out)
		}
	}

	code, out, errOut = cli("services", "-json", "-wait", "2s")
	if code != 0 {
		t.Fatalf("services -json: exit %d\n%s", code, errOut)
	}
	var found []rpc.Instance
	// The tool runner, the memory worker and the approvals worker (which
	// runs for the console without Slack settings).
	if err := json.Unmarshal([]byte(out), &found); err != nil || len(found) != 3 {
		t.Fatalf("-json: got %d instances, %v; want an array of 3:\n%s", len(found), err, out)
	}
	lists := -1
	for _, in := range found {
		if in.Info.Name == tools.ServiceName && in.Stats != nil {
			for _, ep := range in.Stats.Endpoints {
				if ep.Name == "list" {
					lists = ep.NumRequests
				}
			}
		}
	}
	if lists != 1 {
		t.Errorf("-json: got %d list requests in the runner's stats, want 1:\n%s", lists, out)
	}
}

// TestMCPListSaysNoRunner: without a tool runner on the bus, `relay mcp list`
// says which subject nobody answered before it probes the servers itself,
// and its -json output stays pure JSON.
func TestMCPListSaysNoRunner(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	cfg := writeTemp(t, "mcp.json", `{"servers": {}}`)
	env := map[string]string{"NATS_URL": b.ClientURL(), "RELAY_MCP_CONFIG": cfg, "RELAY_DATA_DIR": t.TempDir()}
	var out, errb syncBuffer
	if code := Run(t.Context(), []string{"mcp", "list", "-json"}, config.FromMap(env), &out, &errb); code != 0 {
		t.Fatalf("mcp list: exit %d\n%s", code, errb.String())
	}
	want := "no tool runner answering on relay.rpc.tool.status: is `relay toolrunner` or `relay serve` running?; probing the MCP servers instead"
	if !strings.Contains(errb.String(), want) {
		t.Errorf("stderr: got %q, want it to contain %q", errb.String(), want)
	}
	var v struct{ Source string }
	if err := json.Unmarshal([]byte(out.String()), &v); err != nil || !strings.HasPrefix(v.Source, "probed") {
		t.Errorf("stdout: got %q (%v), want the probed listing as JSON", out.String(), err)
	}
}
