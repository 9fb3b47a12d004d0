package envelope

import (
	"encoding/json"
)

// Meta is the envelope's free-form metadata. The keys the project fills have
// fields; any other key is kept in Extra and survives a round trip.
type Meta struct {
	// MCPVersion is the envelope format's semantic version.
	MCPVersion string `json:"mcp_version,omitempty"`
	// Thread is the stable thread key (see the Thread* functions).
	Thread string `json:"thread,omitempty"`
	// TaskID is kept across agent, tool and approval hops.
	TaskID string `json:"task_id,omitempty"`
	// Source describes the originating webhook.
	Source *Source `json:"source,omitempty"`
	// Budget is the token estimate used by truncation.
	Budget *Budget `json:"budget,omitempty"`
	// Extra holds every other key.
	Extra map[string]any `json:"-"`
}

// metaFields is Meta without its methods, for the default codec.
type metaFields Meta

var knownMeta = map[string]bool{"mcp_version": true, "thread": true, "task_id": true, "source": true, "budget": true}

// MarshalJSON writes the known fields and Extra as one object, its keys
// sorted as encoding/json sorts a map's. Known fields win over an Extra key
// of the same name.
func (m Meta) MarshalJSON() ([]byte, error) {
	return m.appendJSON(nil)
}

// UnmarshalJSON reads the known fields and keeps the rest in Extra.
func (m *Meta) UnmarshalJSON(b []byte) error {
	var f metaFields
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	var all map[string]any
	if err := json.Unmarshal(b, &all); err != nil {
		return err
	}
	for name := range knownMeta {
		delete(all, name)
	}
	*m = Meta(f)
	if len(all) > 0 {
		m.Extra = all
	}
	return nil
}

// Set stores an extra meta key.
func (m *Meta) Set(key string, v any) {
	if m.Extra == nil {
		m.Extra = make(map[string]any)
	}
	m.Extra[key] = v
}

// Get returns an extra meta key.
func (m *Meta) Get(key string) (any, bool) {
	v, ok := m.Extra[key]
	return v, ok
}

// GetString returns an extra meta key that holds a string, or "".
func (m *Meta) GetString(key string) string {
	s, _ := m.Extra[key].(string)
	return s
}
