package session

import (
	"hash/maphash"
	"sync"
	"time"
)

// owned is what a KV knows of a session that only it has written since the
// session was created: the ids of the turns that have left it. An id key
// exists only for a turn that was in the session and was removed by a write
// (or marked by a writer whose write then lost the race, which needs the turn
// in a version of the session): while every write of the session is the
// KV's own, such a turn is one the KV removed, so a turn neither in the
// session nor in owned has no id key and the KV need not read one.
//
// Ids are kept by the time they left, in generations, and dropped once they
// are older than the id window (their keys have expired: the store would no
// longer recognise them either). A session whose ids outgrow maxOwnedIDs is
// no longer owned, and its appends read the id keys again.
type owned struct {
	mu     sync.Mutex
	window time.Duration
	gens   []generation // oldest first
	n      int          // ids in gens
	max    int          // ids it keeps at most
	lost   bool         // outgrew max: ask the id keys
}

type generation struct {
	start time.Time
	ids   map[uint64]struct{}
}

// maxOwnedIDs bounds the ids one owned session keeps (about 40 bytes each),
// so a thread hotter than that over the id window costs memory no more.
const maxOwnedIDs = 1 << 20

// ownedSeed hashes ids; a collision only makes a new turn look seen to a
// KV, which then reads its id key.
var ownedSeed = maphash.MakeSeed()

func newOwned(window time.Duration) *owned { return &owned{window: window, max: maxOwnedIDs} }

// left records ids as having left the session at now.
func (o *owned) left(now time.Time, ids []string) {
	if len(ids) == 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.lost {
		return
	}
	o.prune(now)
	step := max(o.window/8, time.Second)
	if len(o.gens) == 0 || now.Sub(o.gens[len(o.gens)-1].start) >= step {
		o.gens = append(o.gens, generation{start: now, ids: make(map[uint64]struct{}, len(ids))})
	}
	g := o.gens[len(o.gens)-1].ids
	for _, id := range ids {
		h := maphash.String(ownedSeed, id)
		if _, ok := g[h]; !ok {
			g[h] = struct{}{}
			o.n++
		}
	}
	if o.n > o.max {
		o.lost, o.gens, o.n = true, nil, 0
	}
}

// mayHaveLeft reports whether id may have an id key: it left the session
// within the window, or the session outgrew what owned keeps.
func (o *owned) mayHaveLeft(id string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.lost {
		return true
	}
	h := maphash.String(ownedSeed, id)
	for _, g := range o.gens {
		if _, ok := g.ids[h]; ok {
			return true
		}
	}
	return false
}

// prune drops the generations whose newest id left more than the window
// (and a minute's grace for the server's expiry) before now.
func (o *owned) prune(now time.Time) {
	step := max(o.window/8, time.Second)
	drop := 0
	for drop < len(o.gens) && now.Sub(o.gens[drop].start) > step+o.window+time.Minute {
		o.n -= len(o.gens[drop].ids)
		drop++
	}
	o.gens = o.gens[drop:]
}
