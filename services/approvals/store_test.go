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

// TestMutateGoesOnFromItsOwnWrite: a store changes a record it wrote last
// without reading it back, and never goes by that past another writer: a
// write decided on it fails and is decided again on the stored record, and so
// is a "no change" decided on it.
func TestMutateGoesOnFromItsOwnWrite(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := bustest.Embedded(t)
	open := func() (*store, *countingKV) {
		st, err := openStore(ctx, b, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		c := &countingKV{KeyValue: st.kv}
		st.kv = c
		return st, c
	}
	mine, reads := open()
	other, _ := open()
	const task = "task-1"
	set := func(st *store, text string, status Status) {
		t.Helper()
		if _, err := st.mutate(ctx, task, func(r *Record) (*Record, error) {
			if r == nil {
				r = &Record{TaskID: task, Round: 1}
			}
			r.Text, r.Status = text, status
			return r, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	// onlyPending writes text when the record is pending, else changes nothing.
	onlyPending := func(text string) *Record {
		t.Helper()
		rec, err := mine.mutate(ctx, task, func(r *Record) (*Record, error) {
			if r.Status != StatusPending {
				return nil, errNoChange
			}
			r.Text = text
			return r, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	stored := func() *Record {
		t.Helper()
		r, _, err := other.get(ctx, task)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	set(mine, "a", StatusPending)
	before := reads.reads.Load()
	set(mine, "b", StatusPending)
	if n := reads.reads.Load() - before; n != 0 {
		t.Errorf("changing its own last write read the record %d times, want 0", n)
	}

	// Another writer decides; the pending-only change must not go through.
	set(other, "b", StatusRejected)
	if rec := onlyPending("c"); rec.Status != StatusRejected || rec.Text != "b" {
		t.Errorf("after another writer rejected: mutate returned %q %q, want rejected b", rec.Status, rec.Text)
	}
	if r := stored(); r.Status != StatusRejected || r.Text != "b" {
		t.Errorf("stored %q %q, want rejected b", r.Status, r.Text)
	}

	// This store last wrote it rejected; another writer opens it again. A "no
	// change" decided on its own write would miss that.
	set(mine, "b", StatusRejected)
	set(other, "b", StatusPending)
	if rec := onlyPending("d"); rec.Text != "d" {
		t.Errorf("after another writer reopened it: mutate returned %q, want d", rec.Text)
	}
	if r := stored(); r.Status != StatusPending || r.Text != "d" {
		t.Errorf("stored %q %q, want pending d", r.Status, r.Text)
	}

	// A record deleted behind it is created again, not updated at a stale revision.
	if err := other.kv.Delete(ctx, key(task)); err != nil {
		t.Fatal(err)
	}
	set(mine, "e", StatusPending)
	if r := stored(); r.Text != "e" {
		t.Errorf("after a delete: stored %q, want e", r.Text)
	}
	if _, err := mine.mutate(ctx, "task-2", func(*Record) (*Record, error) { return nil, errors.New("stop") }); err == nil {
		t.Error("an error of fn was not returned")
	}
}
