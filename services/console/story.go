package console

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/relaystation/relay/internal/clip"
)

// Storyteller builds the story of a delivery id, thread key, task id or
// envelope id. The command layer wires the relay's story builder; without
// one the console tells it from the envelopes it has seen (hubStory).
type Storyteller interface {
	Story(ctx context.Context, id string) (*Story, error)
}

// Story is one webhook's way through the relay: its hops in time order.
type Story struct {
	Query      string
	Thread     string
	Tasks      []string
	Deliveries []string
	Hops       []Hop
}

// Hop is one step of a story.
type Hop struct {
	Time     time.Time
	Since    time.Duration // since the previous hop
	Kind     string        // inbound, agent, tool, suggestion, approval, outbound, hook, audit, ...
	Subject  string
	Actor    string
	Summary  string
	Link     string
	Duration time.Duration
	Tokens   int
	TraceID  string
	Envelope json.RawMessage
}

// hubStory tells stories from the envelopes the console holds: every
// envelope sharing a thread or task with the ones the id names.
type hubStory struct{ h *hub }

// Story implements Storyteller.
func (hs hubStory) Story(_ context.Context, id string) (*Story, error) {
	st := &Story{Query: id}
	if id == "" {
		return st, nil
	}
	threads, tasks := map[string]bool{}, map[string]bool{}
	for _, e := range hs.h.filter(hs.h.size, func(e *Event) bool {
		return e.h.ID == id || e.h.Thread == id || e.h.TaskID == id || e.h.Delivery == id
	}) {
		threads[e.h.Thread] = e.h.Thread != ""
		tasks[e.h.TaskID] = e.h.TaskID != ""
	}
	evs := hs.h.filter(hs.h.size, func(e *Event) bool {
		return threads[e.h.Thread] || tasks[e.h.TaskID] || e.h.ID == id
	})
	slices.Reverse(evs)
	deliveries := map[string]bool{}
	for i, e := range evs {
		hop := Hop{Time: e.Seen, Kind: kindOf(e.Subject), Subject: e.Subject, Actor: e.Actor(),
			Summary: clip.To(clip.Line(e.Env().Content, 200), 200), Envelope: e.Raw}
		if src := e.Env().Meta.Source; src != nil && hop.Kind == "inbound" {
			hop.Link = src.URL
		}
		if i > 0 {
			hop.Since = e.Seen.Sub(evs[i-1].Seen)
		}
		st.Hops = append(st.Hops, hop)
		if d := e.Delivery(); d != "" && !deliveries[d] {
			deliveries[d] = true
			st.Deliveries = append(st.Deliveries, d)
		}
		if st.Thread == "" {
			st.Thread = e.h.Thread
		}
	}
	for t, ok := range tasks {
		if ok {
			st.Tasks = append(st.Tasks, t)
		}
	}
	slices.Sort(st.Tasks)
	return st, nil
}

// kindOf names a hop by its subject's first token.
func kindOf(subject string) string {
	root, rest, _ := strings.Cut(subject, ".")
	switch root {
	case "in":
		return "inbound"
	case "out":
		return "outbound"
	case "agent":
		if strings.HasPrefix(rest, "suggestion") {
			return "suggestion"
		}
		return "agent"
	}
	return root
}
