// Package memory is the relay's memory: per-thread session context (recent
// turns, a running summary and episodic memories; package session) and
// long-term memory (PII-scrubbed, embedded, searched by relevance and recency;
// packages pii, embed and longterm).
//
// Memory ties the parts together. The memory worker (services/memory) feeds
// it every envelope with Observe; the agent asks it for a thread's context
// (Context), for long-term memories (Retrieve) and for document references
// (RetrieveDocs), in-process or over the bus (package remote).
//
// # Context layers
//
//	system   static per deployment        configuration           never truncated
//	session  up to 100 turns or 24 h      session store           summarised past 2 KB
//	task     minutes to hours             the agent, by task id   dropped when done
//	live     the current message          the envelope            none
package memory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/clip"
	"github.com/relaystation/relay/memory/embed"
	"github.com/relaystation/relay/memory/longterm"
	"github.com/relaystation/relay/memory/pii"
	"github.com/relaystation/relay/memory/session"
	"github.com/relaystation/relay/memory/summary"
)

// Config wires a Memory.
type Config struct {
	// Sessions keeps turns, summaries and episodes. Required.
	Sessions session.Store
	// LongTerm keeps long-term memories. Required.
	LongTerm longterm.Store
	// Embedder embeds memories and queries; its Dimensions must equal
	// LongTerm's. Required.
	Embedder embed.Embedder
	// Scrubber removes PII before anything reaches long-term memory. Default
	// pii.New(nil).
	Scrubber *pii.Scrubber
	// Summariser folds old turns. Default summary.Extractive{}.
	Summariser summary.Summariser
	// FoldAt is the session size (bytes of text) past which older turns are
	// folded into the summary. Default 2048.
	FoldAt int
	// KeepRecent is how many bytes of the newest turns stay unfolded (at least
	// one turn always stays). Default 1024.
	KeepRecent int
	// EpisodeTTL is the lifetime of an episodic memory whose update has no
	// ttl. Default 7 days.
	EpisodeTTL time.Duration
	// Logger; nil discards.
	Logger *slog.Logger
}

// Memory is the relay's memory. It is safe for concurrent use.
type Memory struct {
	cfg Config
	log *slog.Logger
}

// New checks cfg and returns a Memory. It does not own the stores: the
// caller closes them.
func New(cfg Config) (*Memory, error) {
	if cfg.Sessions == nil || cfg.LongTerm == nil || cfg.Embedder == nil {
		return nil, errors.New("memory: sessions, long-term store and embedder are required")
	}
	if cfg.Embedder.Dimensions() != cfg.LongTerm.Dimensions() {
		return nil, &embed.DimensionError{Where: "the long-term store", Want: cfg.LongTerm.Dimensions(), Got: cfg.Embedder.Dimensions()}
	}
	if cfg.Scrubber == nil {
		cfg.Scrubber = pii.New(nil)
	}
	if cfg.Summariser == nil {
		cfg.Summariser = summary.Extractive{}
	}
	if cfg.FoldAt <= 0 {
		cfg.FoldAt = 2048
	}
	if cfg.KeepRecent <= 0 {
		cfg.KeepRecent = cfg.FoldAt / 2
	}
	if cfg.EpisodeTTL <= 0 {
		cfg.EpisodeTTL = 7 * 24 * time.Hour
	}
	m := &Memory{cfg: cfg, log: cfg.Logger}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	return m, nil
}

// ErrBadUpdate is wrapped by every *UpdateError.
var ErrBadUpdate = errors.New("memory: malformed memory_update")

// UpdateError reports a memory_update of the wrong shape; retrying cannot fix
// it (the worker dead-letters the envelope with this reason).
type UpdateError struct {
	EnvelopeID string
	// Field is a JSON pointer into the envelope, e.g. "/memory_update/data/text".
	Field  string
	Reason string
}

func (e *UpdateError) Error() string {
	return fmt.Sprintf("envelope %s: memory_update %s: %s", e.EnvelopeID, e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrBadUpdate) true.
func (e *UpdateError) Is(target error) bool { return target == ErrBadUpdate }

// Tokens estimates the tokens of a text: one per four bytes, rounded up.
func Tokens(s string) int { return (len(s) + 3) / 4 }

// Observe records what an envelope means for memory: a turn of its thread
// (when meta.thread is set) and its memory_update (when present). It is
// idempotent by envelope id. A malformed memory_update is an *UpdateError;
// other errors are transient (a store or endpoint unreachable).
func (m *Memory) Observe(ctx context.Context, e *envelope.Envelope) error {
	return m.ObserveAll(ctx, e.Meta.Thread, e)[0]
}

// ObserveAll is Observe for envelopes whose meta.thread is thread, in order:
// their turns go to the session together (one write of the session with
// the fold it needs, session.Store.AppendFold), and errs[i] is what Observe
// would have returned for es[i]. The memory worker hands it the envelopes of
// a hot thread that arrived while it was writing the previous ones.
func (m *Memory) ObserveAll(ctx context.Context, thread string, es ...*envelope.Envelope) (errs []error) {
	errs = make([]error, len(es))
	var turns []session.Turn
	var of []int // turns[j] is the turn of es[of[j]]
	for i, e := range es {
		if e.MemoryUpdate != nil {
			// Check the shape first, so a bad update is rejected before anything is stored.
			if errs[i] = checkUpdate(e); errs[i] != nil {
				continue
			}
		}
		if thread != "" {
			if tu, ok := turnOf(e); ok {
				turns = append(turns, tu)
				of = append(of, i)
			}
		}
	}
	if len(turns) > 0 {
		if _, err := m.cfg.Sessions.AppendFold(ctx, thread, m.folder(), turns...); err != nil {
			for _, i := range of {
				errs[i] = err
			}
		}
	}
	for i, e := range es {
		if errs[i] == nil && e.MemoryUpdate != nil {
			errs[i] = m.apply(ctx, e)
		}
	}
	return errs
}

// turnOf is the session turn of e, if it has text. The turn owns its bytes:
// a parsed envelope's strings share one copy of the whole message, and the
// session store keeps its recent sessions in memory (up to 4,096), so a turn
// sliced from the envelope would keep the whole message alive with it.
func turnOf(e *envelope.Envelope) (session.Turn, bool) {
	text := clip.To(TurnText(e), maxTurnBytes)
	if text == "" {
		return session.Turn{}, false
	}
	return session.Turn{ID: strings.Clone(e.ID), Role: strings.Clone(string(e.Role)), Content: strings.Clone(text),
		Time: e.Timestamp}, true
}

// maxTurnBytes caps one turn's text, so a huge message cannot outgrow a
// key-value entry or a Redis value; the envelope on the bus keeps it whole.
const maxTurnBytes = 16 << 10

// TurnText is the text a turn keeps of an envelope: its content, plus the tool
// call or result it carries (results cut to 500 bytes).
func TurnText(e *envelope.Envelope) string {
	text := strings.TrimSpace(e.Content)
	if tc := e.ToolCall; tc != nil {
		var part string
		switch {
		case tc.Result != nil:
			b, _ := json.Marshal(tc.Result)
			part = fmt.Sprintf("[tool %s result: %s]", tc.Name, clip.To(string(b), 500))
		default:
			b, _ := json.Marshal(tc.Args)
			part = fmt.Sprintf("[calls tool %s with %s]", tc.Name, clip.To(string(b), 500))
		}
		if text == "" {
			return part
		}
		return text + " " + part
	}
	return text
}

// AppendTurn appends t to the thread's session (idempotent by t.ID) and, once
// the session passes FoldAt bytes, folds its older turns into the summary in
// the same write (session.Store.AppendFold).
func (m *Memory) AppendTurn(ctx context.Context, thread string, t session.Turn) (bool, error) {
	added, err := m.cfg.Sessions.AppendFold(ctx, thread, m.folder(), t)
	return err == nil && added[0], err
}

func (m *Memory) folder() session.Folder { return session.Folder{At: m.cfg.FoldAt, Fold: m.fold} }

// fold chooses the turns to fold, all but the newest KeepRecent bytes (at
// least one turn stays), and summarises them.
func (m *Memory) fold(ctx context.Context, s *session.Session) (int, string, error) {
	keep, kept := 0, 0
	for i := len(s.Turns) - 1; i >= 0; i-- {
		if keep > 0 && kept+len(s.Turns[i].Content) > m.cfg.KeepRecent {
			break
		}
		keep++
		kept += len(s.Turns[i].Content)
	}
	n := len(s.Turns) - keep
	if n <= 0 {
		return 0, "", nil
	}
	sum, err := m.cfg.Summariser.Summarise(ctx, s.Summary, s.Turns[:n])
	if err != nil {
		return 0, "", fmt.Errorf("summarise session %s: %w", s.Thread, err)
	}
	m.log.Debug("session folded", "thread", s.Thread, "turns", n, "summary_bytes", len(sum))
	return n, sum, nil
}

func checkUpdate(e *envelope.Envelope) error {
	u := e.MemoryUpdate
	bad := func(field, reason string) error {
		return &UpdateError{EnvelopeID: e.ID, Field: "/memory_update" + field, Reason: reason}
	}
	if u.TTL < 0 {
		return bad("/ttl", "must not be negative")
	}
	switch u.Kind {
	case envelope.MemoryEpisodic:
		if e.Meta.Thread == "" {
			return bad("", "an episodic memory needs meta.thread")
		}
		if len(u.Data) == 0 {
			return bad("/data", "is empty")
		}
	case envelope.MemoryLongTerm:
		// Long-term memories do not expire (recency lowers their score);
		// keeping one past the ttl its sender asked for would be worse
		// than refusing it.
		if u.TTL > 0 {
			return bad("/ttl", "long-term memories do not expire; ttl is for episodic memories")
		}
		text, ok := u.Data["text"].(string)
		if !ok {
			return bad("/data/text", "is required and must be a string")
		}
		if strings.TrimSpace(text) == "" {
			return bad("/data/text", "is empty")
		}
		for _, k := range []string{"uri", "id", "kind", "title"} {
			if v, present := u.Data[k]; present {
				if _, ok := v.(string); !ok {
					return bad("/data/"+k, "must be a string")
				}
			}
		}
		if k, _ := u.Data["kind"].(string); k != "" && k != longterm.KindNote && k != longterm.KindDoc {
			return bad("/data/kind", fmt.Sprintf("%q is not note or doc", k))
		}
	default:
		return bad("/kind", fmt.Sprintf("%q is not episodic or long_term", u.Kind))
	}
	return nil
}

func (m *Memory) apply(ctx context.Context, e *envelope.Envelope) error {
	u := e.MemoryUpdate
	switch u.Kind {
	case envelope.MemoryEpisodic:
		ttl := m.cfg.EpisodeTTL
		if u.TTL > 0 {
			ttl = time.Duration(u.TTL) * time.Second
		}
		created := e.Timestamp
		if created.IsZero() {
			created = time.Now()
		}
		return m.cfg.Sessions.PutEpisode(ctx, e.Meta.Thread, session.Episode{
			ID: e.ID, Data: u.Data, Created: created, Expires: time.Now().Add(ttl),
		})
	default: // long_term; checkUpdate vetted the shape
		str := func(k string) string { s, _ := u.Data[k].(string); return s }
		n := Note{ID: str("id"), Text: str("text"), URI: str("uri"), Kind: str("kind"), Title: str("title"),
			Thread: e.Meta.Thread, Channel: string(e.Channel), Source: sourceOf(e), Created: e.Timestamp}
		if n.ID == "" {
			n.ID = e.ID
		}
		_, err := m.Remember(ctx, n)
		return err
	}
}

func sourceOf(e *envelope.Envelope) string {
	if s := e.Meta.Source; s != nil && s.Event != "" {
		if s.Action != "" {
			return string(e.Channel) + ":" + s.Event + "." + s.Action
		}
		return string(e.Channel) + ":" + s.Event
	}
	return string(e.Channel) + ":" + string(e.Role)
}

// Note is something to remember long-term.
type Note struct {
	// ID makes Remember an upsert; empty picks the text's thread and hash.
	ID string `json:"id,omitempty"`
	// Text is remembered after PII scrubbing. Required.
	Text string `json:"text"`
	// Title, when set, is put before the text.
	Title string `json:"title,omitempty"`
	// URI locates the original; a note with a URI defaults to kind doc.
	URI string `json:"uri,omitempty"`
	// Kind is longterm.KindNote or longterm.KindDoc.
	Kind    string    `json:"kind,omitempty"`
	Thread  string    `json:"thread,omitempty"`
	Channel string    `json:"channel,omitempty"`
	Source  string    `json:"source,omitempty"`
	Created time.Time `json:"created,omitzero"`
}

// Remember scrubs, embeds and upserts a note, and returns what was stored.
func (m *Memory) Remember(ctx context.Context, n Note) (longterm.Memory, error) {
	text := strings.TrimSpace(n.Text)
	if n.Title != "" {
		text = strings.TrimSpace(n.Title) + "\n" + text
	}
	if text == "" {
		return longterm.Memory{}, &UpdateError{EnvelopeID: n.ID, Field: "/memory_update/data/text", Reason: "is empty"}
	}
	scrubbed, rep := m.cfg.Scrubber.Scrub(text)
	if n.Kind == "" {
		n.Kind = longterm.KindNote
		if n.URI != "" {
			n.Kind = longterm.KindDoc
		}
	}
	if n.ID == "" {
		n.ID = noteID(n.Thread, scrubbed)
	}
	if n.Created.IsZero() {
		n.Created = time.Now()
	}
	vec, err := embed.One(ctx, m.cfg.Embedder, scrubbed)
	if err != nil {
		return longterm.Memory{}, fmt.Errorf("remember %s: %w", n.ID, err)
	}
	mem := longterm.Memory{ID: n.ID, Text: scrubbed, Thread: n.Thread, Channel: n.Channel, Source: n.Source,
		URI: n.URI, Kind: n.Kind, Created: n.Created.UTC(), LastAccessed: n.Created.UTC()}
	if err := m.cfg.LongTerm.Upsert(ctx, longterm.Record{Memory: mem, Vector: vec}); err != nil {
		return longterm.Memory{}, fmt.Errorf("remember %s: %w", n.ID, err)
	}
	m.log.Debug("long-term memory stored", "memory_id", n.ID, "thread", n.Thread, "pii_removed", rep.Total())
	return mem, nil
}
