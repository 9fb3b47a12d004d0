package tools

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/relaystation/relay/bus/bustest"
)

// TestRefreshWithoutRunner: with no tool runner but a listener on
// rpc.tool.refresh that never answers (a hooks worker, the agent), a refresh
// fails at once with ErrNoRunner instead of waiting out its timeout.
func TestRefreshWithoutRunner(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	hooks := bustest.Connect(t, b).Conn()
	if _, err := hooks.Subscribe(b.Subject(SubjectRefresh), func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	if err := hooks.Flush(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := RefreshRemote(t.Context(), b.Conn(), b.Prefix(), "")
	if took := time.Since(start); !errors.Is(err, ErrNoRunner) || took > remoteTimeout/2 {
		t.Fatalf("got %v after %v, want ErrNoRunner at once", err, took)
	}
}
