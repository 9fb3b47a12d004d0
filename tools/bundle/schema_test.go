package bundle

import "testing"

func TestManifestSchema(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, doc string
		ok        bool
	}{
		{"valid", `{"id": "acme", "version": "1.0.0", "mcpServers": {"s": {"command": "node"}}}`, true},
		{"servers layout", `{"id": "a-b_c", "version": "1", "servers": {"s": {"url": "https://x"}}}`, true},
		{"double underscore", `{"id": "a__b", "version": "1", "mcpServers": {"s": {}}}`, false},
		{"no version", `{"id": "a", "mcpServers": {"s": {}}}`, false},
		{"no servers", `{"id": "a", "version": "1"}`, false},
		{"empty servers", `{"id": "a", "version": "1", "mcpServers": {}}`, false},
		{"bad server name", `{"id": "a", "version": "1", "mcpServers": {"a.b": {}}}`, false},
		{"entry not an object", `{"id": "a", "version": "1", "mcpServers": {"s": "node"}}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := validateManifest([]byte(tc.doc))
			if (err == nil) != tc.ok {
				t.Errorf("got %v, want ok=%v", err, tc.ok)
			}
		})
	}
}
