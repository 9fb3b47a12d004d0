package memory_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/memory"
	"github.com/relaystation/relay/memory/embed"
	"github.com/relaystation/relay/memory/longterm"
	"github.com/relaystation/relay/memory/memtest"
	"github.com/relaystation/relay/memory/pii"
	"github.com/relaystation/relay/memory/session"
)

// newMemory builds a Memory on the embedded defaults: a JetStream key-value
// session store and the embedded long-term store.
func newMemory(t *testing.T) *memory.Memory {
	t.Helper()
	ss, lt := memtest.Stores(t, bustest.Embedded(t), session.KVConfig{}, 384)
	m, err := memory.New(memory.Config{Sessions: ss, LongTerm: lt, Embedder: embed.NewLocal(384),
		Scrubber: pii.New([]string{"Ann Lee"})})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// env is memtest.Envelope under this package's short name.
var env = memtest.Envelope

// threadMemory is newMemory and a thread of it no other test uses.
func threadMemory(t *testing.T, prefix string) (*memory.Memory, string) {
	t.Helper()
	return newMemory(t), memtest.Thread(prefix)
}

func TestObserveTurnsAndFold(t *testing.T) {
	t.Parallel()
	m, th := threadMemory(t, "github:acme/api#")
	ctx := t.Context()
	first := env(th, envelope.RoleUser, "The deploy of api failed with exit code 2. Please look.")
	for range 2 { // a redelivery is not a second turn
		if err := m.Observe(ctx, first); err != nil {
			t.Fatal(err)
		}
	}
	tool := env(th, envelope.RoleTool, "")
	tool.ToolCall = &envelope.ToolCall{Name: "github.get_issue", Result: map[string]any{"state": "open"}}
	if err := m.Observe(ctx, tool); err != nil {
		t.Fatal(err)
	}
	c, err := m.Context(ctx, th, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Turns) != 2 || c.Turns[0].ID != first.ID || c.Turns[1].Content != `[tool github.get_issue result: {"state":"open"}]` {
		t.Fatalf("got turns %+v, want the user turn once and the tool result", c.Turns)
	}
	// Push the session past 2 KB: the older turns fold into the summary.
	for i := range 30 {
		if err := m.Observe(ctx, env(th, envelope.RoleAssistant, fmt.Sprintf("Step %d of the investigation. %s", i, strings.Repeat("detail ", 10)))); err != nil {
			t.Fatal(err)
		}
	}
	c, err = m.Context(ctx, th, 0)
	if err != nil {
		t.Fatal(err)
	}
	if c.Summary == "" || !strings.Contains(c.Summary, "user: The deploy of api failed with exit code 2.") {
		t.Fatalf("summary %q: want the first turn's first sentence", c.Summary)
	}
	size := len(c.Summary)
	for _, tu := range c.Turns {
		size += len(tu.Content)
	}
	if size > 2048+200 {
		t.Fatalf("session holds %d bytes after folding, want about 2 KB at most", size)
	}
	if c.Tokens != memory.Tokens(c.Text()) || c.Tokens == 0 {
		t.Fatalf("tokens %d, want the estimate of the rendered text (%d)", c.Tokens, memory.Tokens(c.Text()))
	}
	small, err := m.Context(ctx, th, 100)
	if err != nil {
		t.Fatal(err)
	}
	if small.Dropped == 0 || len(small.Turns) >= len(c.Turns) || small.Summary != c.Summary {
		t.Fatalf("budget 100: got %d turns (%d dropped), want fewer than %d with the summary kept", len(small.Turns), small.Dropped, len(c.Turns))
	}
}

func TestObserveUpdates(t *testing.T) {
	t.Parallel()
	m, th := threadMemory(t, "slack:T1/C1/")
	ctx := t.Context()

	ep := env(th, envelope.RoleAssistant, "noted")
	ep.MemoryUpdate = &envelope.MemoryUpdate{Kind: envelope.MemoryEpisodic, Data: map[string]any{"prefers": "short answers"}, TTL: 3600}
	if err := m.Observe(ctx, ep); err != nil {
		t.Fatal(err)
	}
	lt := env(th, envelope.RoleAssistant, "")
	lt.MemoryUpdate = &envelope.MemoryUpdate{Kind: envelope.MemoryLongTerm, Data: map[string]any{
		"text": "Ann Lee (ann@example.com, +49 30 1234 5678) owns the billing service; deploys happen on Tuesdays."}}
	if err := m.Observe(ctx, lt); err != nil {
		t.Fatal(err)
	}
	doc := env(th, envelope.RoleSystem, "")
	doc.MemoryUpdate = &envelope.MemoryUpdate{Kind: envelope.MemoryLongTerm, Data: map[string]any{
		"text": "Runbook: restarting the billing service safely", "uri": "https://wiki.example.com/runbooks/billing", "id": "doc-billing"}}
	if err := m.Observe(ctx, doc); err != nil {
		t.Fatal(err)
	}

	c, err := m.Context(ctx, th, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Episodes) != 1 || c.Episodes[0].Data["prefers"] != "short answers" || !strings.Contains(c.Text(), "short answers") {
		t.Fatalf("episodes %+v: want the episodic memory", c.Episodes)
	}
	refs, err := m.Retrieve(ctx, memory.Query{Text: "who owns billing deploys", K: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) == 0 || refs[0].ID != lt.ID {
		t.Fatalf("got refs %+v, want the billing memory first", refs)
	}
	for _, leak := range []string{"Ann Lee", "ann@example.com", "1234 5678"} {
		if strings.Contains(refs[0].Text, leak) {
			t.Fatalf("stored text %q still contains %q", refs[0].Text, leak)
		}
	}
	if !strings.Contains(refs[0].Text, "[NAME]") || !strings.Contains(refs[0].Text, "[EMAIL]") {
		t.Fatalf("stored text %q: want [NAME] and [EMAIL]", refs[0].Text)
	}
	docs, err := m.RetrieveDocs(ctx, "how to restart billing", 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) != 1 || docs[0].ID != "doc-billing" || docs[0].URI != "https://wiki.example.com/runbooks/billing" {
		t.Fatalf("got docs %+v, want only the runbook", docs)
	}
	if got := memory.RefIDs(docs); len(got) != 1 || got[0] != "doc-billing" {
		t.Fatalf("RefIDs = %v", got)
	}

	f, err := m.Forget(ctx, th)
	if err != nil || f.Memories != 2 {
		t.Fatalf("Forget = %+v, %v; want 2 memories", f, err)
	}
	if c, _ := m.Context(ctx, th, 0); len(c.Turns)+len(c.Episodes) != 0 {
		t.Fatalf("after Forget: %+v", c)
	}
}

func TestObserveBadUpdates(t *testing.T) {
	t.Parallel()
	m := newMemory(t)
	th := "github:o/r#1"
	tests := []struct {
		name   string
		thread string
		update envelope.MemoryUpdate
		field  string
	}{
		{"long_term without text", th, envelope.MemoryUpdate{Kind: envelope.MemoryLongTerm, Data: map[string]any{"note": "x"}}, "/memory_update/data/text"},
		{"long_term text not string", th, envelope.MemoryUpdate{Kind: envelope.MemoryLongTerm, Data: map[string]any{"text": 5.0}}, "/memory_update/data/text"},
		{"long_term blank text", th, envelope.MemoryUpdate{Kind: envelope.MemoryLongTerm, Data: map[string]any{"text": "  "}}, "/memory_update/data/text"},
		{"long_term uri not string", th, envelope.MemoryUpdate{Kind: envelope.MemoryLongTerm, Data: map[string]any{"text": "t", "uri": 1.0}}, "/memory_update/data/uri"},
		{"long_term with ttl", th, envelope.MemoryUpdate{Kind: envelope.MemoryLongTerm, Data: map[string]any{"text": "t"}, TTL: 60}, "/memory_update/ttl"},
		{"long_term bad kind", th, envelope.MemoryUpdate{Kind: envelope.MemoryLongTerm, Data: map[string]any{"text": "t", "kind": "poem"}}, "/memory_update/data/kind"},
		{"episodic without thread", "", envelope.MemoryUpdate{Kind: envelope.MemoryEpisodic, Data: map[string]any{"a": "b"}}, "/memory_update"},
		{"episodic empty data", th, envelope.MemoryUpdate{Kind: envelope.MemoryEpisodic, Data: map[string]any{}}, "/memory_update/data"},
		{"unknown kind", th, envelope.MemoryUpdate{Kind: "forever", Data: map[string]any{"a": "b"}}, "/memory_update/kind"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := env(tt.thread, envelope.RoleAssistant, "hello")
			u := tt.update
			e.MemoryUpdate = &u
			err := m.Observe(t.Context(), e)
			var ue *memory.UpdateError
			if !errors.As(err, &ue) || !errors.Is(err, memory.ErrBadUpdate) || ue.Field != tt.field {
				t.Fatalf("got %v, want an UpdateError on %s", err, tt.field)
			}
		})
	}
}

func TestNewDimensionMismatch(t *testing.T) {
	t.Parallel()
	lt, err := longterm.NewEmbedded(longterm.EmbeddedConfig{Dir: t.TempDir(), Dimensions: 384})
	if err != nil {
		t.Fatal(err)
	}
	_, err = memory.New(memory.Config{Sessions: nopSessions{}, LongTerm: lt, Embedder: embed.NewLocal(768)})
	var de *embed.DimensionError
	if !errors.As(err, &de) || de.Want != 384 || de.Got != 768 || !strings.Contains(err.Error(), "384") {
		t.Fatalf("got %v, want a DimensionError 384 vs 768", err)
	}
}

type nopSessions struct{ session.Store }
