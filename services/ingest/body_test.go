package ingest

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"golang.org/x/sync/semaphore"
)

// TestReadBodyPooledGrowth: bodies of every size around the pooled buffer
// sizes, with and without a declared length, read concurrently, come back
// byte for byte, stay intact while later bodies reuse the outgrown buffers,
// and give back all they reserved.
func TestReadBodyPooledGrowth(t *testing.T) {
	t.Parallel()
	const budget = 64 << 20
	s := &Service{inflight: semaphore.NewWeighted(budget)}
	sizes := []int{0, 1, firstChunk - 1, firstChunk, firstChunk + 1, 2*firstChunk + 1, 13_521, 100_000, firstChunk << 9}
	type read struct{ sent, got []byte }
	var (
		mu    sync.Mutex
		reads []read
		wg    sync.WaitGroup
	)
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for i := range 40 {
				sent := make([]byte, sizes[(g+i)%len(sizes)])
				for j := range sent {
					sent[j] = byte(rng.Uint32())
				}
				r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(sent))
				if i%2 == 1 {
					r.ContentLength, r.Body = -1, io.NopCloser(bytes.NewReader(sent)) // chunked: no length
				}
				got, reserved, err := s.readBody(r, 1<<30)
				s.inflight.Release(reserved)
				if err != nil {
					t.Errorf("%d bytes: %v", len(sent), err)
					return
				}
				if !bytes.Equal(got, sent) {
					t.Errorf("%d bytes (length known %v): got %d bytes, not the ones sent", len(sent), i%2 == 0, len(got))
				}
				mu.Lock()
				reads = append(reads, read{sent, got})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, rd := range reads {
		if !bytes.Equal(rd.got, rd.sent) {
			t.Fatalf("a %d-byte body changed after it was read: its buffer was reused", len(rd.sent))
		}
	}
	if !s.inflight.TryAcquire(budget) {
		t.Error("the in-flight budget was not all given back")
	}
}

func TestPoolIndex(t *testing.T) {
	t.Parallel()
	for size, want := range map[int64]int{firstChunk: 0, 2 * firstChunk: 1, firstChunk << maxPooledShift: maxPooledShift} {
		if i, ok := poolIndex(size); !ok || i != want {
			t.Errorf("poolIndex(%d): got %d, %v; want %d, true", size, i, ok, want)
		}
	}
	for _, size := range []int64{0, 1, firstChunk - 1, firstChunk + 1, 3 * firstChunk, firstChunk << (maxPooledShift + 1)} {
		if _, ok := poolIndex(size); ok {
			t.Errorf("poolIndex(%d): got a pool, want none", size)
		}
	}
}
