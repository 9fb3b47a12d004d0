package memory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/memory"
	"github.com/relaystation/relay/memory/remote"
	svc "github.com/relaystation/relay/services/memory"
)

// TestRunOwnsTheService: the worker's micro service answers while Run runs
// and is gone once Run returned.
func TestRunOwnsTheService(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	st := embeddedStores(t, b)
	_, w := newWorker(t, b, memory.Config{Sessions: st.sessions, LongTerm: st.longterm}, svc.Config{})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	nc := bustest.Connect(t, b).Conn()
	ping := func() error {
		_, err := nc.Request("$SRV.PING."+remote.ServiceName, nil, 10*time.Second)
		return err
	}
	testenv.Poll(t, 10*time.Second, func() (bool, string) {
		err := ping()
		return err == nil, "ping: " + errString(err)
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if err := ping(); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("ping after Run returned: got %v, want no responders", err)
	}
}

func errString(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}
