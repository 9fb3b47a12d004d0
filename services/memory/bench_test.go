package memory_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/memory"
	"github.com/relaystation/relay/memory/memtest"
	"github.com/relaystation/relay/memory/session"
	svc "github.com/relaystation/relay/services/memory"
)

// BenchmarkHotThread measures the memory worker alone on one hot thread:
// turns/s while it drains a backlog of envelopes of one thread, spread over
// the inbound, tool and agent subjects (three of its consumers, four
// handlers each, default fold at 2 KB with the extractive summariser, the
// JetStream key-value session store on an in-process server). Beside it, in
// the same run and on the same server, the ceiling: one writer putting a
// value of the session's size to one key of the same bucket, as fast as
// JetStream takes it. Each iteration runs both, alternating which goes first,
// so load on the machine hits both alike; it reports the medians, ranges and
// their ratio, and per turn the session reads (each a decode of the value),
// writes (each an encode), revision conflicts and id-key reads and writes,
// counted on the bucket.
//
//	go test ./services/memory -run '^$' -bench HotThread -benchtime 7x
//
// HOTTHREAD_TURNS sets the turns per iteration (default 2000).
func BenchmarkHotThread(b *testing.B) {
	turns := 2000
	if v, err := strconv.Atoi(os.Getenv("HOTTHREAD_TURNS")); err == nil && v > 0 {
		turns = v
	}
	bb := bustest.Embedded(b)
	ctx := context.Background()
	kv, lt := memtest.Stores(b, bb, session.KVConfig{Bucket: "bench_sessions"}, dims)
	_, w := newWorker(b, bb, memory.Config{Sessions: kv, LongTerm: lt}, svc.Config{DisableRPC: true, Concurrency: benchConcurrency()})
	th := envelope.GitHubThread("octo-org", "hello-world", 1347)
	hb := &hotBench{b: b, bus: bb, worker: w, thread: th}

	hb.drain(ctx, turns) // warm-up: consumers, stream files, a folded session
	raw, err := bb.JetStream().KeyValue(ctx, "bench_sessions")
	if err != nil {
		b.Fatal(err)
	}
	value := hb.sessionValue(ctx, raw)

	var worker, ceiling []float64
	start := kv.Stats()
	i := 0
	for b.Loop() {
		runWorker := func() { worker = append(worker, hb.drain(ctx, turns)) }
		runRaw := func() { ceiling = append(ceiling, rawPuts(b, ctx, raw, value, turns)) }
		if i%2 == 0 {
			runWorker()
			runRaw()
		} else {
			runRaw()
			runWorker()
		}
		i++
	}
	n := float64(turns * len(worker))
	end := kv.Stats()
	d := session.KVStats{
		Reads: end.Reads - start.Reads, Decodes: end.Decodes - start.Decodes, Encodes: end.Encodes - start.Encodes,
		Writes: end.Writes - start.Writes, MarkerReads: end.MarkerReads - start.MarkerReads,
		MarkerWrites: end.MarkerWrites - start.MarkerWrites,
		// A write lost to another writer, or a create that found the
		// session (a miss), is a conflict.
		Conflicts: end.Conflicts + end.Misses - start.Conflicts - start.Misses,
	}
	b.ReportMetric(median(worker), "turns/s")
	b.ReportMetric(median(ceiling), "raw-puts/s")
	b.ReportMetric(median(worker)/median(ceiling), "worker/raw")
	b.ReportMetric(float64(d.Decodes)/n, "decodes/turn")
	b.ReportMetric(float64(d.Encodes)/n, "encodes/turn")
	b.ReportMetric(float64(d.Conflicts)/n, "conflicts/turn")
	b.ReportMetric(0, "ns/op")
	b.Logf("worker on one thread: %s turns/s (median, range %s); raw KV put of the %d-byte session value: %s puts/s (range %s); "+
		"per turn: %.2f session reads, %.2f decodes, %.2f writes, %.2f encodes, %.3f conflicts, %.2f id-key reads, %.2f id-key writes",
		fmtf(median(worker)), spread(worker), len(value), fmtf(median(ceiling)), spread(ceiling),
		float64(d.Reads)/n, float64(d.Decodes)/n, float64(d.Writes)/n, float64(d.Encodes)/n, float64(d.Conflicts)/n,
		float64(d.MarkerReads)/n, float64(d.MarkerWrites)/n)
}

type hotBench struct {
	b      *testing.B
	bus    *bus.Bus
	worker *svc.Service
	thread string
	seq    int
}

var hotSubjects = []string{"in.github.issue_comment", envelope.SubjectToolCall, envelope.SubjectToolResult, "agent.answer"}

// drain publishes n envelopes of the thread with the worker stopped, then
// runs the worker until it has acked them all, and returns turns/s.
func (h *hotBench) drain(ctx context.Context, n int) float64 {
	h.b.Helper()
	text := "octocat commented on issue #1347: the login page still crashes with a password that contains an emoji; " +
		"the log shows a UTF-8 decoding error in the session middleware. Comment number "
	for range n {
		h.seq++
		e := envelope.New(envelope.ChannelGitHub, envelope.RoleUser, text+strconv.Itoa(h.seq))
		e.Meta.Thread = h.thread
		if _, err := h.bus.PublishAsync(ctx, hotSubjects[h.seq%len(hotSubjects)], e); err != nil {
			h.b.Fatal(err)
		}
	}
	<-h.bus.PublishAsyncComplete()
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	t0 := time.Now()
	go func() { done <- h.worker.Run(wctx) }()
	for !h.drained(ctx) {
		select {
		case err := <-done:
			h.b.Fatalf("worker stopped: %v", err)
		case <-time.After(2 * time.Millisecond):
		}
	}
	rate := float64(n) / time.Since(t0).Seconds()
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		h.b.Fatal(err)
	}
	// The stopped worker's last pull requests stay on the server until they
	// expire; messages of the next round handed to them would wait for the
	// ack wait. Start the next round once they are gone.
	deadline := time.Now().Add(30 * time.Second)
	for h.pulls(ctx) > 0 {
		if time.Now().After(deadline) {
			h.b.Fatal("pull requests of the stopped worker did not expire")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return rate
}

// pulls is the number of pull requests waiting on the worker's consumers.
func (h *hotBench) pulls(ctx context.Context) int {
	n := 0
	for _, c := range hotConsumers {
		info, err := bustest.ConsumerInfo(ctx, h.bus, c.subject, c.name)
		if err != nil {
			h.b.Fatal(err)
		}
		n += info.NumWaiting
	}
	return n
}

var hotConsumers = []struct{ subject, name string }{{"in.x", "memory-in"}, {"tool.x", "memory-tool"}, {"agent.x", "memory-agent"}}

// drained reports whether the worker's consumers have acked every message
// of their filters.
func (h *hotBench) drained(ctx context.Context) bool {
	for _, c := range hotConsumers {
		ok, err := bustest.Drained(ctx, h.bus, h.bus.StreamName(c.subject), c.name)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			return false
		}
		if err != nil {
			h.b.Fatal(err)
		}
		if !ok {
			return false
		}
	}
	return true
}

// sessionValue is the stored value of the hot thread's session.
func (h *hotBench) sessionValue(ctx context.Context, kv jetstream.KeyValue) []byte {
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		h.b.Fatal(err)
	}
	for k := range keys.Keys() {
		if strings.HasPrefix(k, "t.") {
			e, err := kv.Get(ctx, k)
			if err != nil {
				h.b.Fatal(err)
			}
			return e.Value()
		}
	}
	h.b.Fatal("no session stored")
	return nil
}

// rawPuts puts value to one key n times, one after the other, and returns puts/s.
func rawPuts(b *testing.B, ctx context.Context, kv jetstream.KeyValue, value []byte, n int) float64 {
	t0 := time.Now()
	for range n {
		if _, err := kv.Put(ctx, "raw.ceiling", value); err != nil {
			b.Fatal(err)
		}
	}
	return float64(n) / time.Since(t0).Seconds()
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func spread(xs []float64) string {
	return fmtf(slices.Min(xs)) + "-" + fmtf(slices.Max(xs))
}

func fmtf(x float64) string { return strconv.FormatFloat(x, 'f', 0, 64) }

func benchConcurrency() int {
	n, _ := strconv.Atoi(os.Getenv("HOTTHREAD_CONCURRENCY"))
	return n
}
