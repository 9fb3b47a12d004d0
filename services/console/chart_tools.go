package console

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/tools"
)

// subjectToolAudit carries the tool runner's audit records, one per
// invocation (meta.audit: server, tool, status, ...).
const subjectToolAudit = envelope.SubjectAudit + ".tool"

// toolMinutes counts the tool runner's invocations and their failures per
// minute per server, from its audit records on the work stream (each read
// once, from where the last refresh stopped; a restarted console reads the
// hour back), so a refresh costs the records stored since the last one. A
// failure is every status but success (error, timeout, cancelled,
// permission_denied, rate_limited, limit_exceeded, disabled).
type toolMinutes struct {
	mu    sync.Mutex
	every time.Duration // the least time between two reads
	read  time.Time
	cur   cursor
	// minutes holds, per minute, each server's calls and failures.
	minutes map[time.Time]map[string]*[2]int
}

// counts returns the calls and the failures per server over the last n
// minutes and the minute under way (the servers in the same order in
// both, by name), with the first minute's time; on an error, what was
// read before.
func (tm *toolMinutes) counts(ctx context.Context, b *bus.Bus, now time.Time, n int) (calls, failed []series, first time.Time, err error) {
	first = now.Truncate(time.Minute).Add(-time.Duration(n) * time.Minute)
	tm.mu.Lock()
	defer tm.mu.Unlock()
	if tm.minutes == nil {
		tm.minutes = map[time.Time]map[string]*[2]int{}
	}
	maps.DeleteFunc(tm.minutes, func(t time.Time, _ map[string]*[2]int) bool { return t.Before(first) })
	if tm.every <= 0 || now.Sub(tm.read) >= tm.every {
		tm.read = now
		err = tm.cur.read(ctx, b.JetStream(), b.StreamName(subjectToolAudit), []string{b.Subject(subjectToolAudit)}, first, false,
			func(msg jetstream.Msg, md *jetstream.MsgMetadata) {
				server, ok := auditOutcome(msg.Data())
				if server == "" {
					return
				}
				at := md.Timestamp.Truncate(time.Minute)
				if at.Before(first) {
					return
				}
				m := tm.minutes[at]
				if m == nil {
					m = map[string]*[2]int{}
					tm.minutes[at] = m
				}
				c := m[server]
				if c == nil {
					c = new([2]int)
					m[server] = c
				}
				c[0]++
				if !ok {
					c[1]++
				}
			})
	}
	servers := map[string]bool{}
	for _, m := range tm.minutes {
		for s := range m {
			servers[s] = true
		}
	}
	for _, s := range slices.Sorted(maps.Keys(servers)) {
		c, f := series{Name: s, Counts: make([]int, n+1)}, series{Name: s, Counts: make([]int, n+1)}
		for i := range n + 1 {
			if v := tm.minutes[first.Add(time.Duration(i)*time.Minute)][s]; v != nil {
				c.Counts[i], f.Counts[i] = v[0], v[1]
			}
		}
		calls, failed = append(calls, c), append(failed, f)
	}
	return calls, failed, first, err
}

// auditOutcome reads an audit.tool envelope's server and whether the
// invocation succeeded.
func auditOutcome(data []byte) (server string, ok bool) {
	var e struct {
		Meta struct {
			Audit struct {
				Server string `json:"server"`
				Status string `json:"status"`
			} `json:"audit"`
		} `json:"meta"`
	}
	if json.Unmarshal(data, &e) != nil {
		return "", false
	}
	return e.Meta.Audit.Server, e.Meta.Audit.Status == string(tools.StatusSuccess)
}
