package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/rpc/approvalrpc"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/secret"
	"github.com/relaystation/relay/services/approvals"
	"github.com/relaystation/relay/services/console"
)

// Operators named by configuration sign in with their own token and are
// recorded by that name whatever they type; with the shared token the typed
// name is recorded as self-declared.
func TestOperatorsNamedByConfiguration(t *testing.T) {
	t.Parallel()
	const aliceToken, shared = "alice-token-0123456789", "shared-token-0123456789"
	ops, err := console.ParseOperators("alice=" + aliceToken + ",\nbob=bob-token-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	base, b := startConsole(t, console.Config{Operators: ops, Token: secret.New(shared)})
	worker, err := approvals.New(t.Context(), approvals.Config{SweepInterval: time.Hour}, b, nil)
	if err != nil {
		t.Fatalf("approvals.New: %v", err)
	}
	testenv.Go(t, "approvals", worker.Run)
	for _, task := range []string{"task-a", "task-b"} {
		e := envelope.New(envelope.ChannelInternal, envelope.RoleAssistant, "An answer for "+task)
		e.Meta.TaskID, e.Meta.Thread = task, "github:acme/widgets#7"
		e.Meta.SetTarget(&envelope.Target{Channel: "github", Owner: "acme", Repo: "widgets", Number: 7})
		if _, err := b.Publish(t.Context(), approvals.SubjectSuggestion, e); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitFor(t, 10*time.Second, "both suggestions pending", func() bool {
		items, err := approvalrpc.List(t.Context(), b.Conn(), b.Prefix(), approvalrpc.ListRequest{})
		return err == nil && len(items) == 2
	})
	decide := func(form url.Values, task, want string) {
		t.Helper()
		c := newClient(t, base)
		if code, _, h := c.do(http.MethodPost, "/login", form); code != http.StatusSeeOther {
			t.Fatalf("sign in with %v: %d to %q, want 303", form["operator"], code, h.Get("Location"))
		}
		csrf := c.csrf("/approvals")
		if code, _, h := c.do(http.MethodPost, "/approvals/"+task+"/approve", url.Values{"csrf": {csrf}, "round": {"1"}}); code != http.StatusSeeOther {
			t.Fatalf("approve %s: %d to %q", task, code, h.Get("Location"))
		}
		it, err := approvalrpc.Get(t.Context(), b.Conn(), b.Prefix(), approvalrpc.GetRequest{TaskID: task})
		if err != nil || it.DecidedBy != want {
			t.Fatalf("%s decided by %q (%v), want %q", task, it.DecidedBy, err, want)
		}
	}
	// Alice's token names her; the name typed is ignored.
	decide(url.Values{"operator": {"bob"}, "token": {aliceToken}}, "task-a", "console:alice")
	// The shared token: the typed name, marked.
	decide(url.Values{"operator": {"carol"}, "token": {shared}}, "task-b", "console:carol (self-declared)")

	c := newClient(t, base)
	if code, _, _ := c.do(http.MethodPost, "/login", url.Values{"operator": {"alice"}, "token": {"alice-token-wrong-0000"}}); code != http.StatusUnauthorized {
		t.Errorf("a wrong token: %d, want 401", code)
	}
}

func TestOperatorsSetting(t *testing.T) {
	t.Parallel()
	tests := []struct {
		value, wantErr string
	}{
		{"alice=alice-token-0123456789,bob=bob-token-0123456789", ""},
		{"# operators\nalice=alice-token-0123456789\n", ""},
		{"alice=short", "token too short"},
		{"alice", "want name=token"},
		{"alice=alice-token-0123456789,alice=other-token-0123456789", "named twice"},
		{"alice=same-token-0123456789,bob=same-token-0123456789", "the same token as operator alice"},
		{"al ice=alice-token-0123456789", "a name is letters"},
		{"local=local-token-0123456789", "reserved"},
		{"alice=shared-token-0123456789", "the same token as RELAY_CONSOLE_TOKEN"},
	}
	for _, tt := range tests {
		env := config.FromMap(map[string]string{"RELAY_CONSOLE_OPERATORS": tt.value, "RELAY_CONSOLE_TOKEN": "shared-token-0123456789"})
		s := console.ReadSettings(env)
		err := env.Err()
		if (err == nil) != (tt.wantErr == "") || err != nil && (!strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "RELAY_CONSOLE_OPERATORS")) {
			t.Errorf("RELAY_CONSOLE_OPERATORS=%q: got %v, want an error naming the setting and %q", tt.value, err, tt.wantErr)
		}
		if err != nil && strings.Contains(err.Error(), "0123456789") {
			t.Errorf("RELAY_CONSOLE_OPERATORS=%q: the error %q shows a token", tt.value, err)
		}
		if tt.wantErr == "" && len(s.Config.Operators) == 0 {
			t.Errorf("RELAY_CONSOLE_OPERATORS=%q: no operators read", tt.value)
		}
	}
	// Named operators alone let the console listen off loopback.
	env := config.FromMap(map[string]string{"RELAY_CONSOLE_ADDR": "0.0.0.0:8081", "RELAY_CONSOLE_OPERATORS": "alice=alice-token-0123456789"})
	if console.ReadSettings(env); env.Err() != nil {
		t.Errorf("off loopback with operators: %v, want no error", env.Err())
	}
}

// Each operator's token is redacted on its own, not only the setting's
// whole value.
func TestOperatorTokensRedacted(t *testing.T) {
	t.Parallel()
	const tok = "carol-token-redact-0123456789"
	s := console.ReadSettings(config.FromMap(map[string]string{"RELAY_CONSOLE_OPERATORS": "carol=" + tok + ",dave=dave-token-redact-0123456789"}))
	if len(s.Config.Operators) != 2 {
		t.Fatalf("got %d operators, want 2", len(s.Config.Operators))
	}
	for _, v := range []string{tok, "dave-token-redact-0123456789"} {
		if got, _ := secret.RedactKnown("token " + v); strings.Contains(got, v) {
			t.Errorf("got %q, want the operator's token redacted", got)
		}
	}
}
