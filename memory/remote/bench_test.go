package remote

import (
	"testing"
	"time"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/memory"
)

// BenchmarkClientRetrieve asks the micro service for long-term memories over
// an in-process NATS server, one caller at a time and with GOMAXPROCS×4
// callers (each endpoint answers one request at a time per worker), beside
// the same retrieval in-process.
func BenchmarkClientRetrieve(b *testing.B) {
	bus := bustest.Embedded(b)
	mem := newMemory(b)
	for _, text := range []string{"deploys run at noon", "the api crashes without CONFIG_PATH", "on-call rota is in the wiki"} {
		if _, err := mem.Remember(b.Context(), memory.Note{Text: text, Thread: "github:o/r#1"}); err != nil {
			b.Fatal(err)
		}
	}
	serve(b, bus.Conn(), bus.Prefix(), mem)
	c := NewClient(bustest.Connect(b, bus).Conn(), bus.Prefix(), 10*time.Second)
	q := memory.Query{Text: "when do deploys run", K: 3}
	b.Run("in-process", func(b *testing.B) {
		for b.Loop() {
			if _, err := mem.Retrieve(b.Context(), q); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			if _, err := c.Retrieve(b.Context(), q); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := c.Retrieve(b.Context(), q); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
