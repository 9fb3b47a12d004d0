package memtest

import (
	"path/filepath"
	"testing"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/memory/longterm"
	"github.com/relaystation/relay/memory/session"
)

// Stores opens the embedded defaults of memory on b for a test: a session
// store in a JetStream key-value bucket (cfg) and an embedded long-term
// store of dims dimensions in a directory of the test's.
func Stores(tb testing.TB, b *bus.Bus, cfg session.KVConfig, dims int) (*session.KV, *longterm.Embedded) {
	tb.Helper()
	ss, err := session.NewKV(tb.Context(), b.JetStream(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	lt, err := longterm.NewEmbedded(longterm.EmbeddedConfig{Dir: filepath.Join(tb.TempDir(), "memory"), Dimensions: dims})
	if err != nil {
		tb.Fatal(err)
	}
	return ss, lt
}
