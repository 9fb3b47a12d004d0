package remote

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/memory"
	"github.com/relaystation/relay/memory/embed"
	"github.com/relaystation/relay/memory/memtest"
	"github.com/relaystation/relay/memory/session"
)

func newMemory(t testing.TB) *memory.Memory {
	t.Helper()
	ss, lt := memtest.Stores(t, bustest.Embedded(t), session.KVConfig{}, 64)
	m, err := memory.New(memory.Config{Sessions: ss, LongTerm: lt, Embedder: embed.NewLocal(64)})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestNoWorker(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	c := NewClient(b.Conn(), b.Prefix(), time.Second)
	if _, err := c.Context(t.Context(), "github:o/r#1", 0); !errors.Is(err, ErrNoWorker) {
		t.Fatalf("got %v, want ErrNoWorker", err)
	}
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	m := newMemory(t)
	for _, tt := range []struct{ op, body string }{
		{"context", `{"thread":""}`},
		{"context", `not json`},
		{"forget", `{}`},
		{"retrieve", `{"query":""}`},
		{"remember", `{"text":"  "}`},
		{"nope", `{}`},
	} {
		_, err := handle(t.Context(), m, tt.op, []byte(tt.body))
		var bad *badRequest
		if err == nil || !(errors.As(err, &bad) || errors.Is(err, memory.ErrBadUpdate) || errors.Is(err, memory.ErrEmptyQuery)) {
			t.Errorf("%s %s: got %v, want a bad request", tt.op, tt.body, err)
		}
	}
}

func FuzzHandle(f *testing.F) {
	m := newMemory(f)
	for _, s := range []string{
		`{"thread":"github:o/r#1","budget":10}`, `{"query":"deploy","k":3}`, `{"query":"x","k":-1,"thread":"t"}`,
		`{"text":"remember me","uri":"https://x"}`, `{"thread":"slack:T/C/1"}`, `[]`, `{"k":1e309}`, ``,
	} {
		for _, op := range []string{"context", "retrieve", "docs", "remember", "forget"} {
			f.Add(op, s)
		}
	}
	f.Fuzz(func(t *testing.T, op, body string) {
		res, err := handle(t.Context(), m, op, []byte(body))
		if err != nil {
			return
		}
		if _, err := json.Marshal(res); err != nil {
			t.Fatalf("%s %q: result does not marshal: %v", op, body, err)
		}
	})
}
