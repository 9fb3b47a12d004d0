package approvals

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/bus/bustest"
)

// countingKV counts the reads of a bucket.
type countingKV struct {
	jetstream.KeyValue
	reads atomic.Int64
}

func (c *countingKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	c.reads.Add(1)
	return c.KeyValue.Get(ctx, key)
}

// twoStores are two stores on one bucket, changing one record: mine, whose
// reads are counted, and other, a second writer.
type twoStores struct {
	t           *testing.T
	mine, other *store
	reads       *countingKV
	task        string
}

func newTwoStores(t *testing.T) *twoStores {
	b := bustest.Embedded(t)
	open := func() (*store, *countingKV) {
		st, err := openStore(t.Context(), b, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		c := &countingKV{KeyValue: st.kv}
		st.kv = c
		return st, c
	}
	ts := &twoStores{t: t, task: "task-1"}
	ts.mine, ts.reads = open()
	ts.other, _ = open()
	return ts
}

// set writes the record through st with text and status.
func (ts *twoStores) set(st *store, text string, status Status) {
	ts.t.Helper()
	if _, err := st.mutate(ts.t.Context(), ts.task, func(r *Record) (*Record, error) {
		if r == nil {
			r = &Record{TaskID: ts.task, Round: 1}
		}
		r.Text, r.Status = text, status
		return r, nil
	}); err != nil {
		ts.t.Fatal(err)
	}
}

// onlyPending writes text through mine when the record is pending, else
// changes nothing; it returns what mutate returned.
func (ts *twoStores) onlyPending(text string) *Record {
	ts.t.Helper()
	rec, err := ts.mine.mutate(ts.t.Context(), ts.task, func(r *Record) (*Record, error) {
		if r.Status != StatusPending {
			return nil, errNoChange
		}
		r.Text = text
		return r, nil
	})
	if err != nil {
		ts.t.Fatal(err)
	}
	return rec
}

// stored is the record as the other store reads it from the bucket.
func (ts *twoStores) stored() *Record {
	ts.t.Helper()
	r, _, err := ts.other.get(ts.t.Context(), ts.task)
	if err != nil {
		ts.t.Fatal(err)
	}
	return r
}

// TestMutateGoesOnFromItsOwnWrite: a store changes a record it wrote last
// without reading it back, and never goes by that past another writer: a
// write decided on it fails and is decided again on the stored record, and so
// is a "no change" decided on it.
func TestMutateGoesOnFromItsOwnWrite(t *testing.T) {
	t.Parallel()
	ts := newTwoStores(t)
	mine, other := ts.mine, ts.other

	ts.set(mine, "a", StatusPending)
	before := ts.reads.reads.Load()
	ts.set(mine, "b", StatusPending)
	if n := ts.reads.reads.Load() - before; n != 0 {
		t.Errorf("changing its own last write read the record %d times, want 0", n)
	}

	// Another writer decides; the pending-only change must not go through.
	ts.set(other, "b", StatusRejected)
	if rec := ts.onlyPending("c"); rec.Status != StatusRejected || rec.Text != "b" {
		t.Errorf("after another writer rejected: mutate returned %q %q, want rejected b", rec.Status, rec.Text)
	}
	if r := ts.stored(); r.Status != StatusRejected || r.Text != "b" {
		t.Errorf("stored %q %q, want rejected b", r.Status, r.Text)
	}

	// This store last wrote it rejected; another writer opens it again. A "no
	// change" decided on its own write would miss that.
	ts.set(mine, "b", StatusRejected)
	ts.set(other, "b", StatusPending)
	if rec := ts.onlyPending("d"); rec.Text != "d" {
		t.Errorf("after another writer reopened it: mutate returned %q, want d", rec.Text)
	}
	if r := ts.stored(); r.Status != StatusPending || r.Text != "d" {
		t.Errorf("stored %q %q, want pending d", r.Status, r.Text)
	}

	// A record deleted behind it is created again, not updated at a stale revision.
	if err := other.kv.Delete(t.Context(), key(ts.task)); err != nil {
		t.Fatal(err)
	}
	ts.set(mine, "e", StatusPending)
	if r := ts.stored(); r.Text != "e" {
		t.Errorf("after a delete: stored %q, want e", r.Text)
	}
	if _, err := mine.mutate(t.Context(), "task-2", func(*Record) (*Record, error) { return nil, errors.New("stop") }); err == nil {
		t.Error("an error of fn was not returned")
	}
}
