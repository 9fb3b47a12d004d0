package bundle

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"
)

// TrackingSuffix names the tracking file beside mcp.json.
const TrackingSuffix = ".bundles.json"

// Tracking is the tracking file: which servers of mcp.json each installed
// bundle wrote, and a hash of each as written.
type Tracking struct {
	Version int         `json:"version"`
	Bundles []Installed `json:"bundles"`
	// Descriptions keeps the description of a server no bundle installed
	// while the duplicate rule has it disabled, to give it back.
	Descriptions map[string]string `json:"descriptions,omitempty"`
}

// Installed is one installed bundle.
type Installed struct {
	ID string `json:"id"`
	// Name is an MCP Bundle's own name, of which ID is made.
	Name        string    `json:"name,omitempty"`
	Version     string    `json:"version"`
	Description string    `json:"description,omitempty"`
	Kind        string    `json:"kind"`
	Source      string    `json:"source"`
	Path        string    `json:"path"`
	InstalledAt time.Time `json:"installedAt"`
	Servers     []Tracked `json:"servers"`
}

// Tracked is one server an installed bundle wrote.
type Tracked struct {
	// Name is the server's name in mcp.json.
	Name string `json:"name"`
	// Identity is the duplicate identity (stdio:… or remote:…).
	Identity string `json:"identity"`
	// Hash is the SHA-256 of the entry as written, with "disabled" and
	// "description" left out (the duplicate rule changes those).
	Hash string `json:"hash"`
	// Description is the entry's own description, restored when a disabled
	// duplicate is enabled again.
	Description string `json:"description,omitempty"`
}

// Names are the server names of an installed bundle.
func (in Installed) Names() []string {
	out := make([]string, len(in.Servers))
	for i, s := range in.Servers {
		out[i] = s.Name
	}
	return out
}

func (t *Tracking) find(id string) (int, *Installed) {
	for i := range t.Bundles {
		if t.Bundles[i].ID == id {
			return i, &t.Bundles[i]
		}
	}
	return -1, nil
}

// owner returns the tracked record of a server name.
func (t *Tracking) owner(name string) *Tracked {
	for i := range t.Bundles {
		for j := range t.Bundles[i].Servers {
			if t.Bundles[i].Servers[j].Name == name {
				return &t.Bundles[i].Servers[j]
			}
		}
	}
	return nil
}

// readTracking reads the tracking file; a missing file is an empty one.
func readTracking(path string) (*Tracking, []byte, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &Tracking{Version: 1}, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read bundle tracking: %w", err)
	}
	var t Tracking
	if err := json.Unmarshal(data, &t); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return &t, data, nil
}

// ReadTracking returns the bundles installed into the mcp.json at config.
func ReadTracking(config string) (*Tracking, error) {
	t, _, err := readTracking(config + TrackingSuffix)
	return t, err
}

// entryHash hashes an entry (standard JSON) without disabled and
// description, with sorted keys.
func entryHash(entry []byte) (string, error) {
	var m map[string]any
	if err := json.Unmarshal(entry, &m); err != nil {
		return "", err
	}
	delete(m, "disabled")
	delete(m, "description")
	canon, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:]), nil
}

// identity computes an entry's duplicate identity from its fields as
// written: "stdio:{command}:{args joined by |}" or "remote:{url}".
func identity(entry []byte) string {
	var e struct {
		Command string   `json:"command"`
		Args    []string `json:"args"`
		URL     string   `json:"url"`
		BaseURL string   `json:"baseURL"`
	}
	_ = json.Unmarshal(entry, &e)
	if e.Command == "" && (e.URL != "" || e.BaseURL != "") {
		if e.URL == "" {
			e.URL = e.BaseURL
		}
		return "remote:" + e.URL
	}
	args := ""
	for i, a := range e.Args {
		if i > 0 {
			args += "|"
		}
		args += a
	}
	return "stdio:" + e.Command + ":" + args
}
