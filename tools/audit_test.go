package tools

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
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
			Redacted: redacted, DurationMS: ms, Status: Status(role), Error: errText, CancelledBy: errText, Attempts: attempts}
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
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
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
