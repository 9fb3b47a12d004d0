package bundle

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// load reads the bundle at source. cleanup (when not nil) is called after
// the install with whether it was kept: an MCP Bundle unpacked for an
// install that failed or was a dry run is removed again.
func (in *Installer) load(source string, opts Options) (b *Bundle, cleanup func(keep bool), err error) {
	if _, err := os.Stat(source); err != nil {
		return nil, nil, fmt.Errorf("bundle %s: %w", source, err)
	}
	if abs, err := filepath.Abs(source); err == nil {
		source = abs // recorded in the tracking file
	}
	if strings.EqualFold(filepath.Ext(source), ".mcpb") || isMCPBDir(source) {
		return in.loadMCPB(source, opts)
	}
	file, err := findRelayManifest(source)
	if err != nil {
		return nil, nil, fmt.Errorf("bundle %s: %w", source, err)
	}
	if file == "" {
		return nil, nil, fmt.Errorf("%s: %w", source, ErrNoManifest)
	}
	b, err = LoadRelay(file)
	return b, nil, err
}

// isMCPBDir reports whether dir is an unpacked MCP Bundle: a directory with
// a manifest.json and no relay manifest, or a manifest.json itself.
func isMCPBDir(p string) bool {
	if filepath.Base(p) == "manifest.json" {
		return true
	}
	if rel, _ := findRelayManifest(p); rel != "" {
		return false
	}
	st, err := os.Stat(filepath.Join(p, "manifest.json"))
	return err == nil && !st.IsDir()
}
