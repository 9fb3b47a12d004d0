package toolrunner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/relaystation/relay/tools"
	"github.com/relaystation/relay/tools/mcpconfig"
)

// reloader is the runner as the watcher uses it.
type reloader interface {
	Reload(servers []mcpconfig.Server) tools.ReloadResult
}

// reloadDebounce lets a burst of events (an editor's write, chmod and
// rename) settle into one reload.
const reloadDebounce = 150 * time.Millisecond

// ConfigWatcher reloads a runner when its mcp.json changes: an install, an
// uninstall or a hand edit. It watches the file's directory, so a file
// replaced by a rename (as `relay mcp install` and editors write it) or
// created later is seen. A file that does not load keeps the running
// configuration and is reported once per distinct problem.
type ConfigWatcher struct {
	// Path is the mcp.json watched.
	Path string
	// Options substitute variables as at startup (Lookup, DataDir).
	Options mcpconfig.Options
	// Logger; nil discards.
	Logger *slog.Logger
	// OnReload, when set, is called after every reload that changed
	// something, and with the error of a file that did not load.
	OnReload func(tools.ReloadResult, error)

	last    []byte
	lastErr string
}

// Run watches until ctx ends. The current file is loaded once at the start,
// so a change between startup and Run is not missed.
func (w *ConfigWatcher) Run(ctx context.Context, r reloader) error {
	if w.Logger == nil {
		w.Logger = slog.New(slog.DiscardHandler)
	}
	path, err := filepath.Abs(w.Path)
	if err != nil {
		return err
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", path, err)
	}
	defer fw.Close()
	if err := fw.Add(filepath.Dir(path)); err != nil {
		return fmt.Errorf("watch %s: %w", filepath.Dir(path), err)
	}
	w.reload(path, r)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-fw.Events:
			if !ok {
				return nil
			}
			if filepath.Clean(ev.Name) == path {
				timer.Reset(reloadDebounce)
			}
		case err, ok := <-fw.Errors:
			if !ok {
				return nil
			}
			w.Logger.Warn("mcp.json watch", "file", path, "err", err)
		case <-timer.C:
			w.reload(path, r)
		}
	}
}

// reload loads the file and hands it to the runner unless it is unchanged
// or invalid.
func (w *ConfigWatcher) reload(path string, r reloader) {
	data, err := os.ReadFile(path)
	if err == nil && w.last != nil && bytes.Equal(data, w.last) {
		w.lastErr = ""
		return
	}
	var servers []mcpconfig.Server
	switch {
	case errors.Is(err, os.ErrNotExist):
		err = fmt.Errorf("%s: %w", path, mcpconfig.ErrNotFound)
	case err == nil:
		opts := w.Options
		if opts.Lookup == nil {
			opts.Lookup = os.LookupEnv
		}
		if opts.BaseDir == "" {
			opts.BaseDir = filepath.Dir(path)
		}
		servers, err = mcpconfig.Parse(data, opts)
		if err != nil {
			err = fmt.Errorf("%s: %w", path, err)
		}
	}
	if err != nil && w.last == nil && errors.Is(err, mcpconfig.ErrNotFound) {
		return // no mcp.json yet: no servers, as at startup
	}
	if err != nil {
		if err.Error() != w.lastErr {
			w.lastErr = err.Error()
			w.Logger.Warn("mcp.json not reloaded: keeping the running servers", "err", err)
			if w.OnReload != nil {
				w.OnReload(tools.ReloadResult{}, err)
			}
		}
		return
	}
	w.last, w.lastErr = data, ""
	res := r.Reload(servers)
	if res.Changed() && w.OnReload != nil {
		w.OnReload(res, nil)
	}
}
