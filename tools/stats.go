package tools

import "time"

// latencyWindow is how many recent calls the average latency covers.
const latencyWindow = 100

// callStats counts a server's invocations, guarded by conn.mu.
type callStats struct {
	invocations, successes, errors int64
	last                           time.Time
	latencies                      [latencyWindow]time.Duration
	n, next                        int
}

func (s *callStats) add(at time.Time, d time.Duration, ok bool) {
	s.invocations++
	if ok {
		s.successes++
	} else {
		s.errors++
	}
	s.last = at
	s.latencies[s.next] = d
	s.next = (s.next + 1) % latencyWindow
	s.n = min(s.n+1, latencyWindow)
}

// avg is the mean latency of the last latencyWindow calls.
func (s *callStats) avg() time.Duration {
	if s.n == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range s.latencies[:s.n] {
		sum += d
	}
	return sum / time.Duration(s.n)
}

// recordCall adds a finished call that reached the server's checks (a call
// refused before the server was chosen is not counted).
func (c *conn) recordCall(at time.Time, d time.Duration, ok bool) {
	c.mu.Lock()
	c.calls.add(at, d, ok)
	c.mu.Unlock()
}
