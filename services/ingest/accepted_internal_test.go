package ingest

import (
	"sync"
	"testing"
	"time"
)

func TestLineSampler(t *testing.T) {
	t.Parallel()
	l := &lineSampler{per: 3}
	t0 := time.Unix(1_800_000_000, 0)
	allowed := 0
	for range 10 {
		if l.allow(t0.Add(200 * time.Millisecond)) {
			allowed++
		}
	}
	if allowed != 3 {
		t.Errorf("allowed %d lines in one second, want 3", allowed)
	}
	if k := l.takeSuppressed(); k != 7 {
		t.Errorf("suppressed %d, want 7", k)
	}
	if k := l.takeSuppressed(); k != 0 {
		t.Errorf("suppressed %d after it was taken, want 0", k)
	}
	if !l.allow(t0.Add(time.Second)) {
		t.Error("the next second's first line was suppressed")
	}
	off := &lineSampler{per: -1}
	if off.allow(t0) {
		t.Error("a sampler with per -1 let a line through")
	}
}

func TestLineSamplerConcurrent(t *testing.T) {
	t.Parallel()
	l := &lineSampler{per: 5}
	now := time.Unix(1_800_000_000, 0)
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if l.allow(now) {
					mu.Lock()
					allowed++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if allowed != 5 || l.takeSuppressed() != 795 {
		t.Errorf("allowed %d of 800 in one second, want 5 (and 795 suppressed)", allowed)
	}
}

// BenchmarkLineSampler is the cost of the accepted line past the limit, what
// a webhook pays at thousands per second: one atomic load and add.
//
//	go test ./services/ingest -run '^$' -bench LineSampler
func BenchmarkLineSampler(b *testing.B) {
	l := &lineSampler{per: DefaultLogPerSecond}
	now := time.Now()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.allow(now)
		}
	})
}
