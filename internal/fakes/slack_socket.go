package fakes

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"

	"github.com/gorilla/websocket"
)

// SlackSocket is a Slack Socket Mode WebSocket endpoint: to each connection
// it says hello, sends the queued requests and records the
// acknowledgements it gets back. Point a fake Slack at it with
// Slack.SetSocketURL(s.URL()). Safe for concurrent use.
type SlackSocket struct {
	srv      *httptest.Server
	requests []map[string]any
	mu       sync.Mutex
	acks     []string
}

// NewSlackSocket starts the endpoint with the requests (Socket Mode
// envelopes: envelope_id, type, payload) to send, closed when the test ends.
func NewSlackSocket(t Cleaner, requests ...map[string]any) *SlackSocket {
	f := &SlackSocket{requests: requests}
	// Slack's client sends Origin: https://api.slack.com.
	up := websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer conn.Close()
		_ = conn.WriteJSON(map[string]any{"type": "hello", "num_connections": 1,
			"connection_info": map[string]any{"app_id": "A0APP01"}, "debug_info": map[string]any{"host": "fake"}})
		for _, req := range f.requests {
			_ = conn.WriteJSON(req)
		}
		for {
			var ack struct {
				EnvelopeID string `json:"envelope_id"`
			}
			if err := conn.ReadJSON(&ack); err != nil {
				return
			}
			f.mu.Lock()
			f.acks = append(f.acks, ack.EnvelopeID)
			f.mu.Unlock()
		}
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// URL is the WebSocket URL apps.connections.open answers.
func (f *SlackSocket) URL() string { return "ws" + strings.TrimPrefix(f.srv.URL, "http") + "/link" }

// Acked returns the envelope ids acknowledged so far, in order.
func (f *SlackSocket) Acked() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.acks...)
}
