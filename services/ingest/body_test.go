package ingest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/semaphore"

	"github.com/relaystation/relay/internal/httpserver"
	"github.com/relaystation/relay/internal/testenv"
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

// countingBody counts the reads of a request body.
type countingBody struct {
	io.ReadCloser
	reads int
}

func (b *countingBody) Read(p []byte) (int, error) {
	b.reads++
	return b.ReadCloser.Read(p)
}

// A body that has arrived whole when the handler starts is read into one
// buffer of its pooled size at once, in two reads (net/http's buffered part,
// then what the server read ahead), not four buffers' worth of reads and
// copies; whatever the arrival, a body comes back intact and reserves at
// most twice its size.
func TestReadBodySizedToArrival(t *testing.T) {
	t.Parallel()
	s := &Service{inflight: semaphore.NewWeighted(1 << 20)}
	type read struct {
		arrived, cap, reads int
		reserved            int64
		intact              bool
		err                 error
	}
	reads := make(chan read, 1)
	srv := httpserver.New(nil, prometheus.NewRegistry())
	var want []byte
	srv.Echo.POST("/in", func(c echo.Context) error {
		r := c.Request()
		arrived := httpserver.Arrived(r)
		counted := &countingBody{ReadCloser: r.Body}
		r.Body = counted
		body, reserved, err := s.readBody(r, 1<<20)
		s.inflight.Release(reserved)
		reads <- read{arrived: arrived, cap: cap(body), reads: counted.reads, reserved: reserved, intact: bytes.Equal(body, want), err: err}
		putBuffer(body)
		return c.NoContent(http.StatusNoContent)
	})
	ln := testenv.Listen(t)
	testenv.Go(t, "http server", func(ctx context.Context) error { return srv.ServeListener(ctx, ln) })

	for _, tc := range []struct {
		name      string
		size      int
		oneWrite  bool
		wantReads int // 0: not checked
	}{
		{"13.5 kB in one write", 13_521, true, 2},
		{"2 kB in one write", 2_000, true, 1},
		{"5 kB in one write", 5_000, true, 0},
		{"40 kB in one write", 40_000, true, 0},
		{"13.5 kB, headers then body", 13_521, false, 0},
	} {
		want = bytes.Repeat([]byte{'x'}, tc.size)
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		head := fmt.Sprintf("POST /in HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", tc.size)
		if tc.oneWrite {
			_, err = io.WriteString(c, head+string(want))
		} else if _, err = io.WriteString(c, head); err == nil {
			_, err = c.Write(want)
		}
		if err != nil {
			t.Fatal(err)
		}
		rd := <-reads
		c.Close()
		if rd.err != nil || !rd.intact {
			t.Fatalf("%s: got %v, intact %v; want the body", tc.name, rd.err, rd.intact)
		}
		if rd.reserved > int64(max(2*tc.size, firstChunk)) {
			t.Errorf("%s: reserved %d, more than twice the body", tc.name, rd.reserved)
		}
		if tc.wantReads > 0 && rd.reads != tc.wantReads {
			t.Errorf("%s: got %d reads into a %d-byte buffer (%d bytes read ahead), want %d", tc.name, rd.reads, rd.cap, rd.arrived, tc.wantReads)
		}
	}
}

func TestFitting(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]int64{
		0: 0, 1: 1, firstChunk: firstChunk, firstChunk + 1: 2 * firstChunk, 13_521: 16 << 10,
		firstChunk << maxPooledShift: firstChunk << maxPooledShift, firstChunk<<maxPooledShift + 1: firstChunk<<maxPooledShift + 1,
	} {
		if got := fitting(n); got != want {
			t.Errorf("fitting(%d): got %d, want %d", n, got, want)
		}
	}
}
