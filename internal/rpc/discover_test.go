package rpc

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/internal/testenv"
)

func TestDiscover(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	nc := bustest.Connect(t, b).Conn()
	if got, err := Discover(t.Context(), nc, "", 5*time.Second); err != nil || len(got) != 0 {
		t.Fatalf("no services: got %+v, %v", got, err)
	}
	start(t, b.Conn(), b.Prefix(), echoEndpoint(b.Subject("rpc.echo"), nil))
	start(t, bustest.Connect(t, b).Conn(), b.Prefix(), echoEndpoint(b.Subject("rpc.echo"), nil))
	other, err := Start(t.Context(), b.Conn(), Config{Name: "relay-echo", Prefix: "elsewhere", QueueGroup: "echo"},
		echoEndpoint("elsewhere.rpc.echo", nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Stop() })
	foreign, err := micro.AddService(b.Conn(), micro.Config{Name: "not-relay", Version: "1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = foreign.Stop() })
	if _, err := Call(t.Context(), nc, b.Subject("rpc.echo"), "bad", time.Second, target); err == nil {
		t.Fatal("want the bad request to fail")
	}

	// micro counts a request after its handler has sent the reply: the bad
	// request's error may be counted after Call returned.
	testenv.Poll(t, 10*time.Second, func() (bool, string) {
		got, err := Discover(t.Context(), nc, b.Prefix(), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0].Info.ID >= got[1].Info.ID {
			t.Fatalf("got %+v, want the two instances with prefix %s, sorted", got, b.Prefix())
		}
		errs := 0
		for _, in := range got {
			if in.Info.Name != "relay-echo" || len(in.Info.Endpoints) != 1 || in.Stats == nil || len(in.Stats.Endpoints) != 1 {
				t.Fatalf("instance: got %+v", in)
			}
			errs += in.Stats.Endpoints[0].NumErrors
		}
		if errs > 1 {
			t.Fatalf("stats: got %d errors in all, want the one bad request", errs)
		}
		return errs == 1, fmt.Sprintf("stats: %d errors counted in all, want the one bad request", errs)
	})
	all, err := Discover(t.Context(), nc, "", time.Second)
	if err != nil || len(all) != 4 {
		t.Errorf("every service: got %d, %v; want 4", len(all), err)
	}
}
