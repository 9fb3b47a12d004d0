package toolrunner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/relaystation/relay/tools"
	"github.com/relaystation/relay/tools/mcpconfig"
)

// reloader is the runner as the watcher uses it.
type reloader interface {
	Reload(servers []mcpconfig.Server) tools.ReloadResult
	SetInvalid(entries []tools.InvalidEntry)
}

// reloadDebounce lets a burst of events (an editor's write, chmod and
// rename) settle into one reload.
const reloadDebounce = 150 * time.Millisecond

// ConfigWatcher reloads a runner when its mcp.json changes: an install, an
// uninstall or a hand edit. It watches the file's directory, so a file
// replaced by a rename (as `relay mcp install` and editors write it) or
// created later is seen. The file is read entry by entry: valid entries are
// reloaded, an entry that became invalid keeps its last good version
// running and one that never was valid is skipped, each said once per
// distinct problem. A file that cannot be read at all (a syntax error)
// keeps the running configuration and is reported once, with its place.
type ConfigWatcher struct {
	// Path is the mcp.json watched.
	Path string
	// Options substitute variables as at startup (Lookup, DataDir).
	Options mcpconfig.Options
	// Servers are the servers the runner started with: the last good
	// version of each entry until the first reload.
	Servers []mcpconfig.Server
	// Logger; nil discards.
	Logger *slog.Logger
	// OnReload, when set, is called after every reload that changed
	// something or found an entry newly invalid (err then names the
	// entries), and with the error of a file that did not load (res empty).
	OnReload func(res tools.ReloadResult, err error)

	last    []byte
	lastErr string
	good    map[string]mcpconfig.Server // by id: what runs
	warned  map[string]string           // invalid entry id -> reason said
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

// reload loads the file and hands its valid entries (and the last good
// version of invalid ones) to the runner, unless it is unchanged or cannot
// be read.
func (w *ConfigWatcher) reload(path string, r reloader) {
	if w.good == nil {
		w.good = map[string]mcpconfig.Server{}
		for _, s := range w.Servers {
			w.good[s.Name] = s
		}
	}
	data, err := os.ReadFile(path)
	if err == nil && w.last != nil && bytes.Equal(data, w.last) {
		w.lastErr = ""
		return
	}
	var f *mcpconfig.File
	switch {
	case errors.Is(err, os.ErrNotExist):
		err = fmt.Errorf("%s: %w", path, mcpconfig.ErrNotFound)
	case err == nil:
		opts := w.Options
		if opts.Lookup == nil {
			opts.Lookup = os.LookupEnv
		}
		f, err = mcpconfig.ParseFileAt(path, data, opts)
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
	servers, invalid, newly := w.merge(path, f)
	res := r.Reload(servers)
	r.SetInvalid(invalid)
	if (res.Changed() || newly != nil) && w.OnReload != nil {
		w.OnReload(res, newly)
	}
}

// merge adds the last good version of each invalid entry to the valid
// ones, says each new problem once and returns the invalid entries for
// status; newly joins the problems not said before.
func (w *ConfigWatcher) merge(path string, f *mcpconfig.File) (servers []mcpconfig.Server, invalid []tools.InvalidEntry, newly error) {
	servers = slices.Clone(f.Servers)
	warned := map[string]string{}
	var errs []error
	for _, iv := range f.Invalid {
		reason := iv.Reason()
		prev, running := w.good[iv.ID]
		if running && !slices.ContainsFunc(servers, func(s mcpconfig.Server) bool { return s.Name == iv.ID }) {
			prev.Line = iv.Line
			servers = append(servers, prev)
		} else {
			running = false
		}
		invalid = append(invalid, tools.InvalidEntry{Name: iv.Name, ID: iv.ID, Reason: reason, Running: running})
		warned[iv.ID] = reason
		if w.warned[iv.ID] == reason {
			continue
		}
		errs = append(errs, errors.New(reason))
		if running {
			w.Logger.Warn("mcp.json entry invalid: keeping its last good version running", "server", iv.Name, "err", reason)
		} else {
			w.Logger.Warn("mcp.json entry invalid: skipped", "server", iv.Name, "err", reason)
		}
	}
	for _, n := range f.Notes {
		w.Logger.Info("mcp.json: " + n)
	}
	w.warned = warned
	slices.SortStableFunc(servers, func(a, b mcpconfig.Server) int { return a.Line - b.Line })
	w.good = map[string]mcpconfig.Server{}
	for _, s := range servers {
		w.good[s.Name] = s
	}
	return servers, invalid, errors.Join(errs...)
}
