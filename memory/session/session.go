// Package session keeps the short-lived memory of each thread: its recent
// turns (role, content, envelope id, time), a running summary of the turns
// that were folded away, and episodic memories with their own expiry.
//
// Two stores implement Store with the same behaviour, checked by one
// conformance suite (package sessiontest): Redis (REDIS_URL; the turns of a
// thread live in the list "session:{thread}") and a JetStream key-value bucket,
// the embedded default when no Redis is configured.
//
// A session keeps at most Options.MaxTurns turns (default 100) and expires
// Options.TTL (default 24h) after its last turn. Appending is idempotent by the
// turn's id (the envelope id), so a redelivered envelope is not kept twice.
//
// AppendFold appends turns and, once the session outgrows Folder.At, folds
// its oldest turns into the summary, in one atomic write: a turn costs at
// most one read-modify-write of the session, whatever the session's age, and
// the turns of one thread that arrive together share one.
package session

import (
	"context"
	"errors"
	"time"
)

// Turn is one message of a thread.
type Turn struct {
	// ID is the envelope id; appends are idempotent by it.
	ID string `json:"id"`
	// Role is user, assistant, tool or system.
	Role string `json:"role"`
	// Content is the text of the turn.
	Content string `json:"content"`
	// Time is when the envelope was created.
	Time time.Time `json:"time"`
}

// Session is what a store holds for one thread.
type Session struct {
	// Thread is the thread key.
	Thread string
	// Summary folds the turns that were removed by Fold; "" when none were.
	Summary string
	// Turns are the kept turns, oldest first.
	Turns []Turn
}

// Size is the number of bytes of text in the session (summary and turns).
func (s *Session) Size() int {
	n := len(s.Summary)
	for _, t := range s.Turns {
		n += len(t.Content)
	}
	return n
}

// Episode is an episodic memory of a thread (memory_update kind "episodic").
type Episode struct {
	// ID makes PutEpisode idempotent (the envelope id).
	ID string `json:"id"`
	// Data is the memory_update's data.
	Data map[string]any `json:"data"`
	// Created is when the episode was recorded.
	Created time.Time `json:"created"`
	// Expires is when the episode is forgotten.
	Expires time.Time `json:"expires"`
}

// Store keeps sessions and episodes. Implementations are safe for concurrent
// use, also by several processes sharing one server.
type Store interface {
	// Append adds t to the thread's turns unless a turn with t.ID was already
	// appended; it reports whether t was added. The oldest turns beyond
	// MaxTurns are dropped and the session's expiry is reset.
	Append(ctx context.Context, thread string, t Turn) (bool, error)
	// AppendFold appends the turns ts, in order, each unless a turn with its
	// id was already appended (added[i] reports whether ts[i] was), and, when
	// the session is then larger than f.At (Session.Size), folds the oldest
	// turns f.Fold chooses, all in one write where the store allows: the
	// session never holds the turns without the fold f asked for. With one
	// turn and a zero Folder it is Append.
	AppendFold(ctx context.Context, thread string, f Folder, ts ...Turn) (added []bool, err error)
	// Load returns the thread's session; an unknown thread has an empty one.
	Load(ctx context.Context, thread string) (Session, error)
	// Fold replaces the n oldest turns with summary, if the n-th oldest turn
	// still has the id lastID (otherwise another worker folded first, and Fold
	// reports false without a change). Folded turns' ids stay known to Append.
	Fold(ctx context.Context, thread string, n int, lastID, summary string) (bool, error)
	// PutEpisode stores e under the thread, replacing an episode with the
	// same id. An e.Expires in the past or beyond MaxEpisodeTTL is clamped.
	PutEpisode(ctx context.Context, thread string, e Episode) error
	// Episodes returns the thread's episodes that have not expired, oldest first.
	Episodes(ctx context.Context, thread string) ([]Episode, error)
	// Forget removes the thread's turns, summary and episodes. It need not
	// remember which turns were appended: one redelivered later may be
	// appended again.
	Forget(ctx context.Context, thread string) error
	// Close releases the store's connections (not a shared bus).
	Close() error
}

// Folder folds a session's oldest turns into its summary as part of an
// append (Store.AppendFold).
type Folder struct {
	// At is the session size (Session.Size, bytes of text) past which Fold
	// is asked; 0 never folds.
	At int
	// Fold returns how many of the oldest turns of s to fold and the summary
	// that replaces them and s.Summary; n <= 0 folds nothing. It may be
	// called more than once for one append (once per attempt when another
	// writer got in first) and must not keep s.
	Fold func(ctx context.Context, s *Session) (n int, summary string, err error)
}

// fold asks f about s; it returns n == 0 when nothing is to be folded.
func (f Folder) fold(ctx context.Context, s *Session) (int, string, error) {
	if f.Fold == nil || f.At <= 0 || s.Size() <= f.At {
		return 0, "", nil
	}
	n, sum, err := f.Fold(ctx, s)
	if err != nil || n <= 0 {
		return 0, "", err
	}
	return min(n, len(s.Turns)), sum, nil
}

// Options are the limits every store applies.
type Options struct {
	// MaxTurns is the most turns kept per thread. Default 100.
	MaxTurns int
	// TTL is how long a session lives after its last turn. Default 24h.
	TTL time.Duration
	// MaxEpisodeTTL caps an episode's lifetime. Default 30 days.
	MaxEpisodeTTL time.Duration
	// MaxSeen is how many appended ids per thread the Redis store remembers
	// for idempotency (beyond the kept turns). Default 1000. The key-value
	// store remembers every id for TTL instead, one small key per id that
	// left the session.
	MaxSeen int
}

func (o *Options) setDefaults() {
	if o.MaxTurns <= 0 {
		o.MaxTurns = 100
	}
	if o.TTL <= 0 {
		o.TTL = 24 * time.Hour
	}
	if o.MaxEpisodeTTL <= 0 {
		o.MaxEpisodeTTL = 30 * 24 * time.Hour
	}
	if o.MaxSeen < o.MaxTurns {
		o.MaxSeen = max(1000, o.MaxTurns)
	}
}

// ErrNoThread is returned for an empty thread key.
var ErrNoThread = errors.New("session: empty thread key")

// appendOne is a store's Append in terms of its AppendFold.
func appendOne(ctx context.Context, s Store, thread string, t Turn) (bool, error) {
	added, err := s.AppendFold(ctx, thread, Folder{}, t)
	return err == nil && added[0], err
}

// startAppend checks an AppendFold's arguments for a store: it returns the
// results to fill in, and done when there is nothing to write (with
// ErrNoThread for an empty thread, nil for no turns).
func startAppend(thread string, ts []Turn) (added []bool, done bool, err error) {
	added = make([]bool, len(ts))
	if thread == "" {
		return added, true, ErrNoThread
	}
	return added, len(ts) == 0, nil
}

// clampExpiry keeps an episode's expiry within (now, now+max].
func clampExpiry(e *Episode, now time.Time, maxTTL time.Duration) {
	if e.Created.IsZero() {
		e.Created = now
	}
	if e.Expires.IsZero() || e.Expires.After(now.Add(maxTTL)) {
		e.Expires = now.Add(maxTTL)
	}
}
