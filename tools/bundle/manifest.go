package bundle

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/tailscale/hujson"
	"gopkg.in/yaml.v3"
)

// Bundle is a loaded bundle: its identity, where it lives and its servers
// as written in its manifest, in manifest order.
type Bundle struct {
	ID string
	// Name is an MCP Bundle's own name, of which ID is made ("" for others).
	Name        string
	Version     string
	Description string
	// Dir is the absolute directory of the installed bundle: ${bundlePath}.
	Dir string
	// Source is what was installed from (the path given).
	Source string
	// Kind is "relay" (bundle.json / bundle.yaml) or "mcpb".
	Kind    string
	Servers []Entry
	// vars are the install-time variables besides bundlePath, bundleId and
	// bundleVersion (an MCP Bundle's ${__dirname}, ${user_config.KEY}).
	vars map[string]string
}

// Entry is one server of a bundle: its own name and its mcp.json entry as
// standard JSON, before substitution.
type Entry struct {
	Name string
	JSON json.RawMessage
}

// Manifest file names of a relay bundle, in the order they are looked for.
var manifestNames = []string{"bundle.json", "bundle.yaml", "bundle.yml"}

// ErrNoManifest is returned (wrapped) when a path holds no bundle manifest.
var ErrNoManifest = errors.New("no bundle manifest (bundle.json, bundle.yaml or an MCP Bundle's manifest.json)")

// findRelayManifest returns the relay manifest file of path (a manifest
// file or a directory holding one), or "" when there is none.
func findRelayManifest(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if !st.IsDir() {
		switch filepath.Ext(path) {
		case ".json", ".yaml", ".yml":
			if filepath.Base(path) == "manifest.json" {
				return "", nil
			}
			return path, nil
		}
		return "", nil
	}
	for _, n := range manifestNames {
		p := filepath.Join(path, n)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
	}
	return "", nil
}

// relayManifest is a bundle.json / bundle.yaml without its servers.
type relayManifest struct {
	ID          string `json:"id" yaml:"id"`
	Version     string `json:"version" yaml:"version"`
	Description string `json:"description" yaml:"description"`
}

// LoadRelay reads a relay bundle manifest (JSON, JSONC or YAML).
func LoadRelay(file string) (*Bundle, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read bundle manifest: %w", err)
	}
	abs, err := filepath.Abs(filepath.Dir(file))
	if err != nil {
		return nil, err
	}
	b := &Bundle{Dir: abs, Source: file, Kind: "relay"}
	var m relayManifest
	var std []byte
	if strings.HasSuffix(file, ".json") {
		b.Servers, std, err = jsonServers(data, &m)
	} else {
		b.Servers, std, err = yamlServers(data, &m)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	b.ID, b.Version, b.Description = m.ID, m.Version, m.Description
	if err := b.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	// The schema is a backstop for what the Go checks do not cover.
	if err := validateManifest(std); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return b, nil
}

func (b *Bundle) check() error {
	if err := CheckID(b.ID); err != nil {
		return err
	}
	if strings.TrimSpace(b.Version) == "" {
		return fmt.Errorf("bundle %s: version is required", b.ID)
	}
	if len(b.Servers) == 0 {
		return fmt.Errorf("bundle %s: mcpServers is empty", b.ID)
	}
	for _, e := range b.Servers {
		if _, err := ServerName(b.ID, e.Name); err != nil {
			return err
		}
	}
	return nil
}

// jsonServers reads a JSON(C) manifest: its fields into m and its
// mcpServers (or servers) in file order.
func jsonServers(data []byte, m *relayManifest) ([]Entry, []byte, error) {
	v, err := hujson.Parse(data)
	if err != nil {
		return nil, nil, err
	}
	v.Standardize()
	std := v.Pack()
	if err := json.Unmarshal(std, m); err != nil {
		return nil, nil, fmt.Errorf("not a bundle manifest: %w", err)
	}
	root, ok := v.Value.(*hujson.Object)
	if !ok {
		return nil, nil, errors.New("not a JSON object")
	}
	for _, key := range []string{"mcpServers", "servers"} {
		mem := member(root, key)
		if mem == nil {
			continue
		}
		obj, ok := mem.Value.Value.(*hujson.Object)
		if !ok {
			return nil, nil, fmt.Errorf("%s must be an object of servers", key)
		}
		var out []Entry
		for _, s := range obj.Members {
			name, _ := unquote(s.Name)
			raw := bytes.TrimSpace(s.Value.Clone().Pack())
			if _, ok := s.Value.Value.(*hujson.Object); !ok {
				return nil, nil, fmt.Errorf("%s.%s must be an object", key, name)
			}
			out = append(out, Entry{Name: name, JSON: compact(raw)})
		}
		return out, std, nil
	}
	return nil, nil, errors.New("no mcpServers")
}

// yamlServers reads a YAML manifest.
func yamlServers(data []byte, m *relayManifest) ([]Entry, []byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, nil, err
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, nil, errors.New("not a YAML mapping")
	}
	root := doc.Content[0]
	if err := root.Decode(m); err != nil {
		return nil, nil, fmt.Errorf("not a bundle manifest: %w", err)
	}
	budget := maxNodes
	std, err := nodeJSON(root, 0, &budget)
	if err != nil {
		return nil, nil, err
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		key := root.Content[i].Value
		if key != "mcpServers" && key != "servers" {
			continue
		}
		list := root.Content[i+1]
		if list.Kind != yaml.MappingNode {
			return nil, nil, fmt.Errorf("%s must be a mapping of servers", key)
		}
		var out []Entry
		for j := 0; j+1 < len(list.Content); j += 2 {
			name := list.Content[j].Value
			v := list.Content[j+1]
			for v.Kind == yaml.AliasNode && v.Alias != nil {
				v = v.Alias
			}
			if v.Kind != yaml.MappingNode {
				return nil, nil, fmt.Errorf("%s.%s must be a mapping", key, name)
			}
			budget := maxNodes
			raw, err := nodeJSON(v, 0, &budget)
			if err != nil {
				return nil, nil, fmt.Errorf("%s.%s: %w", key, name, err)
			}
			out = append(out, Entry{Name: name, JSON: raw})
		}
		return out, std, nil
	}
	return nil, nil, errors.New("no mcpServers")
}

// compact standardizes and compacts a JSONC value.
func compact(raw []byte) json.RawMessage {
	std, err := hujson.Standardize(bytes.Clone(raw))
	if err != nil {
		return raw
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, std); err != nil {
		return std
	}
	return buf.Bytes()
}

// maxDepth bounds YAML nesting (and alias chains) in a manifest, maxNodes
// the nodes one conversion visits (aliases expanded: no alias bombs).
const (
	maxDepth = 64
	maxNodes = 100_000
)

// nodeJSON converts a YAML node to JSON, keeping the order of mappings (so
// an installed entry reads as its author wrote it).
func nodeJSON(n *yaml.Node, depth int, budget *int) ([]byte, error) {
	if depth > maxDepth {
		return nil, errors.New("nested too deeply")
	}
	if *budget--; *budget < 0 {
		return nil, errors.New("too large (or too many aliases)")
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return []byte("null"), nil
		}
		return nodeJSON(n.Content[0], depth+1, budget)
	case yaml.AliasNode:
		if n.Alias == nil {
			return nil, errors.New("unresolved alias")
		}
		return nodeJSON(n.Alias, depth+1, budget)
	case yaml.MappingNode:
		var b bytes.Buffer
		b.WriteByte('{')
		for i := 0; i+1 < len(n.Content); i += 2 {
			if i > 0 {
				b.WriteByte(',')
			}
			k, _ := json.Marshal(n.Content[i].Value)
			b.Write(k)
			b.WriteByte(':')
			v, err := nodeJSON(n.Content[i+1], depth+1, budget)
			if err != nil {
				return nil, err
			}
			b.Write(v)
		}
		b.WriteByte('}')
		return b.Bytes(), nil
	case yaml.SequenceNode:
		var b bytes.Buffer
		b.WriteByte('[')
		for i, c := range n.Content {
			if i > 0 {
				b.WriteByte(',')
			}
			v, err := nodeJSON(c, depth+1, budget)
			if err != nil {
				return nil, err
			}
			b.Write(v)
		}
		b.WriteByte(']')
		return b.Bytes(), nil
	default:
		var v any
		if err := n.Decode(&v); err != nil {
			return nil, err
		}
		out, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n.Line, err)
		}
		return out, nil
	}
}
