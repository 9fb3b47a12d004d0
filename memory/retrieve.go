package memory

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/relaystation/relay/memory/embed"
	"github.com/relaystation/relay/memory/longterm"
	"github.com/relaystation/relay/memory/session"
)

// SessionContext is what the agent gets for a thread: the running summary,
// the recent turns that fit the token budget, the live episodic memories and
// the token estimate of all of it (for meta.budget).
type SessionContext struct {
	Thread   string            `json:"thread"`
	Summary  string            `json:"summary,omitempty"`
	Turns    []session.Turn    `json:"turns,omitempty"`
	Episodes []session.Episode `json:"episodes,omitempty"`
	// Tokens estimates the tokens of Text().
	Tokens int `json:"tokens"`
	// Dropped counts the oldest turns left out to fit the budget.
	Dropped int `json:"dropped,omitempty"`
}

// Text renders the context for an envelope's context.session.
func (c *SessionContext) Text() string {
	var b strings.Builder
	if c.Summary != "" {
		b.WriteString("Summary so far:\n")
		b.WriteString(c.Summary)
		b.WriteString("\n")
	}
	if len(c.Episodes) > 0 {
		b.WriteString("Remembered for this thread:\n")
		for _, e := range c.Episodes {
			d, _ := jsonString(e.Data)
			b.WriteString("- ")
			b.WriteString(d)
			b.WriteString("\n")
		}
	}
	if len(c.Turns) > 0 {
		b.WriteString("Recent turns:\n")
		for _, t := range c.Turns {
			b.WriteString(t.Role)
			b.WriteString(": ")
			b.WriteString(t.Content)
			b.WriteString("\n")
		}
	}
	return b.String()
}

// Context returns the thread's session context. With budget > 0 the oldest
// turns are dropped until the estimate fits (the summary and episodes stay).
func (m *Memory) Context(ctx context.Context, thread string, budget int) (SessionContext, error) {
	c := SessionContext{Thread: thread}
	s, err := m.cfg.Sessions.Load(ctx, thread)
	if err != nil {
		return c, err
	}
	eps, err := m.cfg.Sessions.Episodes(ctx, thread)
	if err != nil {
		return c, err
	}
	c.Summary, c.Turns, c.Episodes = s.Summary, s.Turns, eps
	c.Tokens = Tokens(c.Text())
	for budget > 0 && c.Tokens > budget && len(c.Turns) > 0 {
		c.Turns = c.Turns[1:]
		c.Dropped++
		c.Tokens = Tokens(c.Text())
	}
	return c, nil
}

// Query asks long-term memory.
type Query struct {
	// Text is embedded and compared with the memories. Required.
	Text string `json:"query"`
	// K is how many refs to return. Default 5, at most 100.
	K int `json:"k,omitempty"`
	// Thread and Channel, when set, restrict the search.
	Thread  string `json:"thread,omitempty"`
	Channel string `json:"channel,omitempty"`
	// Kind, when set, restricts to notes or docs.
	Kind string `json:"kind,omitempty"`
}

// Ref is a retrieved memory, as cited by the agent ([[ref:ID]]) and listed in
// an envelope's retrieval_refs.
type Ref struct {
	ID         string    `json:"id"`
	URI        string    `json:"uri,omitempty"`
	Text       string    `json:"text"`
	Score      float64   `json:"score"`
	Similarity float64   `json:"similarity"`
	Kind       string    `json:"kind,omitempty"`
	Thread     string    `json:"thread,omitempty"`
	Channel    string    `json:"channel,omitempty"`
	Source     string    `json:"source,omitempty"`
	Created    time.Time `json:"created"`
}

// ErrEmptyQuery is returned for a query without text.
var ErrEmptyQuery = errors.New("memory: empty query")

// Retrieve returns the best long-term memories for q, scored by relevance and
// recency (see package longterm), and marks them accessed.
func (m *Memory) Retrieve(ctx context.Context, q Query) ([]Ref, error) {
	if strings.TrimSpace(q.Text) == "" {
		return nil, ErrEmptyQuery
	}
	if q.K <= 0 {
		q.K = 5
	}
	q.K = min(q.K, 100)
	// Queries are scrubbed too: a query is compared with scrubbed texts.
	text, _ := m.cfg.Scrubber.Scrub(q.Text)
	vec, err := embed.One(ctx, m.cfg.Embedder, text)
	if err != nil {
		return nil, fmt.Errorf("retrieve: %w", err)
	}
	hits, err := m.cfg.LongTerm.Search(ctx, longterm.Query{Vector: vec, K: q.K, Thread: q.Thread,
		Channel: q.Channel, Kind: q.Kind, Touch: true})
	if err != nil {
		return nil, fmt.Errorf("retrieve: %w", err)
	}
	refs := make([]Ref, len(hits))
	for i, h := range hits {
		refs[i] = Ref{ID: h.ID, URI: h.URI, Text: h.Text, Score: h.Score, Similarity: h.Similarity, Kind: h.Kind,
			Thread: h.Thread, Channel: h.Channel, Source: h.Source, Created: h.Created}
	}
	return refs, nil
}

// RetrieveDocs is retrieve_docs(query, k): the best document references
// (memories of kind doc, each with a URI) for the query. Their ids go into an
// envelope's retrieval_refs and are cited as [[ref:id]].
func (m *Memory) RetrieveDocs(ctx context.Context, query string, k int) ([]Ref, error) {
	return m.Retrieve(ctx, Query{Text: query, K: k, Kind: longterm.KindDoc})
}

// RefIDs returns the ids of refs, for an envelope's retrieval_refs.
func RefIDs(refs []Ref) []string {
	out := make([]string, len(refs))
	for i, r := range refs {
		out[i] = r.ID
	}
	return out
}

// Forgotten says what Forget removed.
type Forgotten struct {
	Thread   string `json:"thread"`
	Memories int    `json:"memories"`
}

// Forget removes a thread's session, episodes and long-term memories.
func (m *Memory) Forget(ctx context.Context, thread string) (Forgotten, error) {
	f := Forgotten{Thread: thread}
	if thread == "" {
		return f, session.ErrNoThread
	}
	if err := m.cfg.Sessions.Forget(ctx, thread); err != nil {
		return f, err
	}
	n, err := m.cfg.LongTerm.Delete(ctx, longterm.Filter{Thread: thread})
	f.Memories = n
	if err != nil {
		return f, fmt.Errorf("forget %s: %w", thread, err)
	}
	m.log.Info("thread forgotten", "thread", thread, "memories", n)
	return f, nil
}

func noteID(thread, text string) string {
	h := sha256.Sum256([]byte(thread + "\x00" + text))
	return "mem-" + hex.EncodeToString(h[:12])
}

func jsonString(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}
