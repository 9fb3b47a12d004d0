package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relaystation/relay/internal/testenv"
)

// FuzzAuditLineMatchesMarshal checks the audit line encoder byte for byte
// against json.Marshal of the same Record.
func FuzzAuditLineMatchesMarshal(f *testing.F) {
	f.Add("id", "exec", "", "<thread&>", "a\u2028\xff", "error: \"x\"\n", 12.345, 2, true, int64(1))
	f.Add("", "", "", "", "", "", 0.0, 0, false, int64(0))
	f.Add("i", "e", "c", "t", "r", "", 1e-7, -1, false, int64(-62135596800))
	f.Add("i", "e", "c", "t", "r", "", 3e21, 1, true, int64(253402300799))
	f.Fuzz(func(t *testing.T, id, exec, call, thread, role, errText string, ms float64, attempts int, redacted bool, unix int64) {
		r := Record{ID: id, Time: time.Unix(unix, 123456789).UTC(), ExecutionID: exec, RunID: exec, CallID: call, TaskID: call,
			Thread: thread, AgentID: role, Actor: thread, Role: role, Server: id, Tool: exec, ArgsSHA256: ArgsHash(nil),
			Redacted: redacted, DurationMS: ms, Status: Status(role), Error: errText, CancelledBy: errText, Attempts: attempts, MCPTask: thread}
		want, werr := json.Marshal(&r)
		got, gerr := r.appendJSON(nil)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("appendJSON err %v, json.Marshal err %v", gerr, werr)
		}
		if werr == nil && !bytes.Equal(got, want) {
			t.Fatalf("got  %s\nwant %s", got, want)
		}
	})
}

func TestAuditLogWritesOneLinePerRecord(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := OpenAuditLog(path)
	if err != nil {
		t.Fatal(err)
	}
	recs := []Record{{ID: "1", Server: "s", Tool: "t", Status: StatusSuccess, DurationMS: 1.5},
		{ID: "2", Server: "s", Tool: "t", Status: StatusSuccess, Error: "line\nbreak", Attempts: 2}}
	for i := range recs {
		if err := l.Write(&recs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	b := testenv.ReadFile(t, path)
	var want []byte
	for i := range recs {
		line, _ := json.Marshal(&recs[i])
		want = append(append(want, line...), '\n')
	}
	if !bytes.Equal(b, want) {
		t.Fatalf("got %s\nwant %s", b, want)
	}
	if err := l.Write(&recs[0]); err == nil {
		t.Fatal("write after close: got no error, want ErrClosed")
	}
}

// TestNewIDIsUniqueRandomUUID: ids are version 4 UUIDs, distinct across
// goroutines.
func TestNewIDIsUniqueRandomUUID(t *testing.T) {
	t.Parallel()
	const workers, each = 4, 500
	got := make(chan string, workers*each)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				got <- newID()
			}
		})
	}
	wg.Wait()
	close(got)
	seen := map[string]bool{}
	for id := range got {
		u, err := uuid.Parse(id)
		if err != nil || u.Version() != 4 || u.Variant() != uuid.RFC4122 || u.String() != id {
			t.Fatalf("id %q: got version %d, variant %v, err %v; want a v4 RFC 4122 UUID", id, u.Version(), u.Variant(), err)
		}
		if seen[id] {
			t.Fatalf("id %s handed out twice", id)
		}
		seen[id] = true
	}
}

// newAuditLog opens an audit log with the given flush delay in a temporary
// directory, closed when the test ends, and returns it with its path.
func newAuditLog(t *testing.T, delay time.Duration) (*AuditLog, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := openAuditLog(path, delay)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l, path
}

// TestAuditLogKeepsEveryRecordInOrder: records written concurrently are all
// in the file after Close, each line whole, each writer's in its order.
func TestAuditLogKeepsEveryRecordInOrder(t *testing.T) {
	t.Parallel()
	l, path := newAuditLog(t, AuditFlushDelay)
	const writers, each = 8, 300
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				if i == each/2 && w == 0 {
					if err := l.Flush(); err != nil {
						t.Error(err)
					}
				}
				r := Record{ID: fmt.Sprintf("%d-%d", w, i), Server: "s", Tool: "t", Status: StatusSuccess}
				if err := l.Write(&r); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	b := testenv.ReadFile(t, path)
	next := make([]int, writers)
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	for _, line := range lines {
		var r Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		var w, i int
		if _, err := fmt.Sscanf(r.ID, "%d-%d", &w, &i); err != nil || w < 0 || w >= writers {
			t.Fatalf("record id %q: not one this test wrote", r.ID)
		}
		if i != next[w] {
			t.Fatalf("writer %d: got record %d, want %d", w, i, next[w])
		}
		next[w]++
	}
	if len(lines) != writers*each {
		t.Fatalf("got %d lines, want %d", len(lines), writers*each)
	}
}

// TestAuditLogWritesFullBatchAtOnce: the Write that fills a batch writes it
// before returning.
func TestAuditLogWritesFullBatchAtOnce(t *testing.T) {
	t.Parallel()
	l, path := newAuditLog(t, time.Hour) // no background flush in this test
	lines := func() int {
		b := testenv.ReadFile(t, path)
		return bytes.Count(b, []byte("\n"))
	}
	for i := range auditFlushRecords {
		if n := lines(); n != 0 {
			t.Fatalf("before the batch is full (%d records): got %d lines in the file, want 0", i, n)
		}
		r := Record{ID: strconv.Itoa(i), Server: "s", Tool: "t", Status: StatusSuccess}
		if err := l.Write(&r); err != nil {
			t.Fatal(err)
		}
	}
	if n := lines(); n != auditFlushRecords {
		t.Fatalf("after the Write that filled the batch: got %d lines, want %d", n, auditFlushRecords)
	}
}

// TestAuditLogFlushesInTheBackground: a record reaches the file without
// Flush or Close.
func TestAuditLogFlushesInTheBackground(t *testing.T) {
	t.Parallel()
	l, path := newAuditLog(t, AuditFlushDelay)
	r := Record{ID: "last", Server: "s", Tool: "t", Status: StatusSuccess}
	if err := l.Write(&r); err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(&r)
	testenv.WaitFor(t, 10*time.Second, "the background flush", func() bool {
		b, _ := os.ReadFile(path)
		return bytes.Equal(b, append(want, '\n'))
	})
}

// TestAuditLogLeavesOutWhatItCannotEncode: a record that cannot be
// encoded is reported and left out; the others of its batch are written.
func TestAuditLogLeavesOutWhatItCannotEncode(t *testing.T) {
	t.Parallel()
	l, path := newAuditLog(t, time.Hour)
	good := Record{ID: "good", Server: "s", Tool: "t", Status: StatusSuccess}
	bad := Record{ID: "bad", Time: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), Server: "s", Tool: "t"}
	for _, r := range []*Record{&good, &bad, &good} {
		if err := l.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Flush(); err == nil || !strings.Contains(err.Error(), "encode audit record bad") {
		t.Fatalf("Flush: got %v, want the error of record bad", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	line, _ := json.Marshal(&good)
	if want := append(append(line, '\n'), append(line, '\n')...); !bytes.Equal(b, want) {
		t.Fatalf("got %s\nwant %s", b, want)
	}
}

// TestAuditLogReportsFailedBackgroundWrite: a batch the background flush
// cannot write is told to OnError with its number of records.
func TestAuditLogReportsFailedBackgroundWrite(t *testing.T) {
	t.Parallel()
	l, _ := newAuditLog(t, AuditFlushDelay)
	failed := make(chan int, 1)
	l.OnError(func(err error, records int) {
		if !errors.Is(err, os.ErrClosed) {
			t.Errorf("OnError: got %v, want os.ErrClosed", err)
		}
		failed <- records
	})
	_ = l.f.Close() // every write fails from here on
	if err := l.Write(&Record{ID: "a", Server: "s", Tool: "t"}); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-failed:
		if n != 1 {
			t.Errorf("OnError: got %d records, want 1", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("OnError was not called for the failed batch")
	}
	if err := l.Flush(); err != nil {
		t.Errorf("Flush after a reported failure: got %v, want nil (OnError had it)", err)
	}
}
