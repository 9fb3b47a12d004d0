package bundle

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/tailscale/hujson"

	"github.com/relaystation/relay/tools/mcpconfig"
)

// Installer installs bundles into one mcp.json. Its methods are safe to
// call concurrently, also from several processes: every change of the file
// holds an advisory lock on <Config>.lock.
type Installer struct {
	// Config is the mcp.json path. A missing file is created on the first
	// install.
	Config string
	// DataDir is the relay's data directory: MCP Bundles are unpacked under
	// DataDir/bundles/<id>/<version>, and it replaces ${dataDir} when the
	// result is validated.
	DataDir string
	// Lookup reads environment variables (an MCP Bundle's sensitive
	// user_config values); nil means os.LookupEnv.
	Lookup func(string) (string, bool)
	// Now stamps installs; nil means time.Now.
	Now func() time.Time
	// Check asks the relay that will run the new mcp.json how it would load
	// it: the invalid entries it reports, and who checked ("the running
	// tool runner ..."). An error matching ErrNoChecker (no relay answers,
	// or it reads another file) makes the install check the file here,
	// with Lookup. nil checks here.
	Check func(ctx context.Context, path string, data []byte) (invalid []mcpconfig.Invalid, by string, err error)

	// writeFile replaces a file atomically; nil means writeAtomic (tests
	// make it fail).
	writeFile func(path string, data []byte, perm os.FileMode) error
}

func (in *Installer) write(path string, data []byte, perm os.FileMode) error {
	if in.writeFile != nil {
		return in.writeFile(path, data, perm)
	}
	return writeAtomic(path, data, perm)
}

// Options change one install or uninstall.
type Options struct {
	// Set are non-sensitive user_config values of an MCP Bundle (--set K=V);
	// Values the same with every value of a repeated --set (a "multiple"
	// setting gets each as its own argument). Both may be used.
	Set    map[string]string
	Values map[string][]string
	// AllowEnv names the ${env:NAME} (and "input:ID" for ${input:ID})
	// references of an MCP Bundle's server that may read the relay's
	// environment (--allow-env); others are refused.
	AllowEnv []string
	// DryRun computes the change and its diff but writes nothing.
	DryRun bool
	// Force removes servers the user has edited since they were installed.
	Force bool
}

// Result is what an install or uninstall changed.
type Result struct {
	ID, Version string
	// Added and Removed are server names.
	Added, Removed []string
	// Disabled and Enabled are the duplicate rule's changes.
	Disabled, Enabled []string
	// Diff is the change of mcp.json as a unified diff ("" when unchanged).
	Diff string
	// Written is false for a dry run.
	Written bool
	// CheckedBy says who checked that the relay loads the new servers:
	// the running tool runner, or this process with its settings.
	CheckedBy string
}

// ErrNoChecker is what Installer.Check returns (wrapped) when no running
// relay can check the file: the install checks it itself.
var ErrNoChecker = errors.New("no running relay checks this mcp.json")

// ErrNotInstalled is returned (wrapped) by Uninstall for an unknown bundle.
var ErrNotInstalled = errors.New("bundle not installed")

// EditedError is returned when a server to be removed was edited by hand
// since it was installed and Force is not set.
type EditedError struct {
	Bundle, Server string
}

func (e *EditedError) Error() string {
	return fmt.Sprintf("bundle %s: server %q was edited since it was installed; use --force to remove it anyway", e.Bundle, e.Server)
}

// ConflictError is returned when a bundle's server name is already taken by
// a server the bundle did not install.
type ConflictError struct {
	Bundle, Server string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("bundle %s: mcp.json already has a server %q it did not install", e.Bundle, e.Server)
}

// Install installs the bundle at source (a relay bundle manifest, a
// directory holding one, an MCP Bundle directory or a .mcpb archive). A
// bundle with the same id already installed is replaced (an upgrade).
func (in *Installer) Install(ctx context.Context, source string, opts Options) (*Result, error) {
	b, cleanup, err := in.load(source, opts)
	if err != nil {
		return nil, err
	}
	res, err := in.InstallBundle(ctx, b, opts)
	if cleanup != nil {
		cleanup(err == nil && !opts.DryRun)
	}
	return res, err
}

// InstallBundle installs a loaded bundle.
func (in *Installer) InstallBundle(ctx context.Context, b *Bundle, opts Options) (*Result, error) {
	if err := b.check(); err != nil {
		return nil, err
	}
	res := &Result{ID: b.ID, Version: b.Version}
	var oldDir string
	err := in.change(ctx, opts, res, func(d *document, t *Tracking) error {
		if _, old := t.find(b.ID); old != nil {
			if old.Name != "" && b.Name != "" && old.Name != b.Name {
				return fmt.Errorf("bundle %q has the id %s of the installed bundle %q: uninstall %s first or rename the bundle", b.Name, b.ID, old.Name, b.ID)
			}
			if err := d.removeBundle(old, opts.Force, res); err != nil {
				return err
			}
			if old.Kind == "mcpb" && old.Path != b.Dir {
				oldDir = old.Path
			}
			t.remove(b.ID)
		}
		rec := Installed{ID: b.ID, Name: b.Name, Version: b.Version, Description: b.Description, Kind: b.Kind,
			Source: b.Source, Path: b.Dir, InstalledAt: in.now()}
		target, parent, err := d.target()
		if err != nil {
			return err
		}
		for _, e := range b.Servers {
			name, _ := ServerName(b.ID, e.Name)
			if _, m := d.find(name); m != nil {
				return &ConflictError{Bundle: b.ID, Server: name}
			}
			value, err := substituteEntry(e.JSON, b)
			if err != nil {
				return fmt.Errorf("bundle %s: server %s: %w", b.ID, e.Name, err)
			}
			if err := addMember(target, parent, name, value); err != nil {
				return fmt.Errorf("bundle %s: server %s: %w", b.ID, e.Name, err)
			}
			var desc struct {
				Description string `json:"description"`
			}
			_ = json.Unmarshal(value, &desc)
			rec.Servers = append(rec.Servers, Tracked{Name: name, Description: desc.Description})
			res.Added = append(res.Added, name)
		}
		t.Bundles = append(t.Bundles, rec)
		return nil
	})
	if err == nil && !opts.DryRun && oldDir != "" {
		in.removeUnpacked(oldDir) // the version this one replaced
	}
	return res, err
}

// Uninstall removes the servers bundle id installed.
func (in *Installer) Uninstall(ctx context.Context, id string, opts Options) (*Result, error) {
	res := &Result{ID: id}
	var dir string
	err := in.change(ctx, opts, res, func(d *document, t *Tracking) error {
		_, old := t.find(id)
		if old == nil {
			return fmt.Errorf("%s: %w", id, ErrNotInstalled)
		}
		res.Version = old.Version
		if old.Kind == "mcpb" {
			dir = old.Path
		}
		if err := d.removeBundle(old, opts.Force, res); err != nil {
			return err
		}
		t.remove(id)
		return nil
	})
	if err == nil && !opts.DryRun && dir != "" {
		in.removeUnpacked(dir)
	}
	return res, err
}

// removeUnpacked removes an unpacked MCP Bundle's directory, only ever
// under DataDir/bundles.
func (in *Installer) removeUnpacked(dir string) {
	if in.DataDir == "" {
		return
	}
	rel, err := filepath.Rel(filepath.Join(in.DataDir, "bundles"), dir)
	if err != nil || rel == "." || !filepath.IsLocal(rel) {
		return
	}
	_ = os.RemoveAll(dir)
	_ = os.Remove(filepath.Dir(dir)) // the bundle's directory, when no version is left
}

// List returns the installed bundles.
func (in *Installer) List() ([]Installed, error) {
	t, err := ReadTracking(in.Config)
	if err != nil {
		return nil, err
	}
	return t.Bundles, nil
}

func (in *Installer) now() time.Time {
	if in.Now != nil {
		return in.Now().UTC()
	}
	return time.Now().UTC()
}

func (t *Tracking) remove(id string) {
	t.Bundles = slices.DeleteFunc(t.Bundles, func(b Installed) bool { return b.ID == id })
}

// change runs one locked read-modify-write of mcp.json and its tracking
// file: mutate edits the document, the duplicate rule runs, the result is
// validated, and both files are replaced atomically. A dry run creates
// and writes nothing.
func (in *Installer) change(ctx context.Context, opts Options, res *Result, mutate func(*document, *Tracking) error) error {
	if in.Config == "" {
		return errors.New("bundle: no mcp.json path")
	}
	if !opts.DryRun {
		if err := os.MkdirAll(filepath.Dir(in.Config), 0o755); err != nil {
			return err
		}
	}
	unlock, err := lockFile(ctx, in.Config+".lock", opts.DryRun)
	if err != nil {
		return err
	}
	defer unlock()

	old, err := os.ReadFile(in.Config)
	existed := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read %s: %w", in.Config, err)
	}
	perm := os.FileMode(0o644)
	if st, err := os.Stat(in.Config); err == nil {
		perm = st.Mode().Perm()
	}
	trackPath := in.Config + TrackingSuffix
	t, oldTrack, err := readTracking(trackPath)
	if err != nil {
		return err
	}
	d, err := parseDocument(old)
	if err != nil {
		return fmt.Errorf("%s: %w", in.Config, err)
	}
	if err := mutate(d, t); err != nil {
		return err
	}
	res.Disabled, res.Enabled = d.dedupe(t)
	out := d.v.Pack()
	by, err := in.validate(ctx, out, res.Added)
	if err != nil {
		return fmt.Errorf("the new %s would not load (checked by %s), nothing was written: %w", in.Config, by, err)
	}
	res.CheckedBy = by
	if err := d.hashes(t); err != nil {
		return err
	}
	res.Diff = unifiedDiff(in.Config, old, out)
	if opts.DryRun {
		return nil
	}
	track, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return err
	}
	track = append(track, '\n')
	if existed {
		if err := in.write(in.Config+".bak", old, perm); err != nil {
			return fmt.Errorf("back up %s: %w", in.Config, err)
		}
	}
	if !bytes.Equal(old, out) || !existed {
		if err := in.write(in.Config, out, perm); err != nil {
			return fmt.Errorf("write %s: %w", in.Config, err)
		}
	}
	if err := in.write(trackPath, track, 0o644); err != nil {
		// Put mcp.json back so the two files agree.
		if existed {
			_ = writeAtomic(in.Config, old, perm)
		} else {
			_ = os.Remove(in.Config)
		}
		_ = oldTrack
		return fmt.Errorf("write %s: %w", trackPath, err)
	}
	res.Written = true
	return nil
}

// validate checks that the relay would load the servers added by the new
// file: the running tool runner, asked through Check, else this process
// with Lookup (the relay's settings as this shell has them). The runner
// reads entry by entry, so another entry's problem is not this change's.
// It returns who checked.
func (in *Installer) validate(ctx context.Context, data []byte, added []string) (by string, err error) {
	if len(added) == 0 {
		return "", nil // an uninstall: what stays was loaded before
	}
	var invalid []mcpconfig.Invalid
	if in.Check != nil {
		invalid, by, err = in.Check(ctx, in.Config, data)
		if err != nil && !errors.Is(err, ErrNoChecker) {
			return by, err
		}
	}
	if in.Check == nil || err != nil {
		by = "this process with the relay's settings (no running tool runner reads this file)"
		f, err := mcpconfig.ParseFileAt(in.Config, data, mcpconfig.Options{Lookup: in.Lookup, DataDir: in.DataDir})
		if err != nil {
			return by, err
		}
		invalid = f.Invalid
	}
	var errs []error
	for _, iv := range invalid {
		if slices.Contains(added, iv.Name) {
			errs = append(errs, iv.Err)
		}
	}
	return by, errors.Join(errs...)
}

// installVarRE matches the variables substituted at install time; every
// other ${...} (${env:VAR}, ${input:id}, ${dataDir}) stays for run time.
var installVarRE = regexp.MustCompile(`\$\{(bundlePath|bundleId|bundleVersion|__dirname|HOME|DESKTOP|DOCUMENTS|DOWNLOADS|pathSeparator|/|user_config\.[^}]*)\}`)

// substituteEntry substitutes the install-time variables in an entry
// (standard JSON): each value is inserted JSON-escaped into the strings
// that hold it.
func substituteEntry(entry []byte, b *Bundle) ([]byte, error) {
	vars := map[string]string{"bundlePath": b.Dir, "bundleId": b.ID, "bundleVersion": b.Version}
	for k, v := range b.vars {
		vars[k] = v
	}
	var missing []string
	out := installVarRE.ReplaceAllFunc(entry, func(m []byte) []byte {
		name := string(m[2 : len(m)-1])
		v, ok := vars[name]
		if !ok {
			missing = append(missing, string(m))
			return m
		}
		q, _ := json.Marshal(v)
		return q[1 : len(q)-1]
	})
	if len(missing) > 0 {
		return nil, fmt.Errorf("no value for %s", strings.Join(missing, ", "))
	}
	if !json.Valid(out) {
		return nil, errors.New("not valid JSON after substitution")
	}
	return out, nil
}

// document is an mcp.json being edited.
type document struct {
	v    hujson.Value
	root *hujson.Object
}

// emptyConfig is the file an install into a missing mcp.json starts from.
const emptyConfig = "{\n  \"mcpServers\": {}\n}\n"

func parseDocument(data []byte) (*document, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		data = []byte(emptyConfig)
	}
	v, err := hujson.Parse(data)
	if err != nil {
		return nil, err
	}
	root, ok := v.Value.(*hujson.Object)
	if !ok {
		return nil, errors.New("not a JSON object")
	}
	return &document{v: v, root: root}, nil
}

// lists are the server objects, in the order mcpconfig reads them.
func (d *document) lists() []*hujson.Object {
	var out []*hujson.Object
	for _, key := range []string{"servers", "mcpServers"} {
		if m := member(d.root, key); m != nil {
			if obj, ok := m.Value.Value.(*hujson.Object); ok {
				out = append(out, obj)
			}
		}
	}
	return out
}

// rootIndent is the indentation of the top-level members.
func (d *document) rootIndent() string {
	ind, _, _ := indents(d.root, "")
	return ind
}

// target is the server object new servers go into ("servers" when the file
// has it, as VS Code writes it, else "mcpServers", added when missing) and
// the indentation of its line.
func (d *document) target() (*hujson.Object, string, error) {
	for _, key := range []string{"servers", "mcpServers"} {
		if m := member(d.root, key); m != nil {
			if obj, ok := m.Value.Value.(*hujson.Object); ok {
				return obj, d.rootIndent(), nil
			}
			if m.Value.Value.Kind() != 'n' { // null: as if absent
				return nil, "", fmt.Errorf("%q is not an object of servers", key)
			}
		}
	}
	if m := member(d.root, "mcpServers"); m != nil {
		removeMember(d.root, "mcpServers")
	}
	if err := addMember(d.root, "", "mcpServers", []byte("{}")); err != nil {
		return nil, "", err
	}
	return d.lists()[0], d.rootIndent(), nil
}

// find returns a server's object and member.
func (d *document) find(name string) (*hujson.Object, *hujson.ObjectMember) {
	for _, l := range d.lists() {
		if m := member(l, name); m != nil {
			return l, m
		}
	}
	return nil, nil
}

// removeBundle removes an installed bundle's servers, refusing edited ones
// unless force.
func (d *document) removeBundle(rec *Installed, force bool, res *Result) error {
	for _, s := range rec.Servers {
		_, m := d.find(s.Name)
		if m == nil || force {
			continue
		}
		if h, err := entryHash(standard(m.Value)); err != nil || h != s.Hash {
			return &EditedError{Bundle: rec.ID, Server: s.Name}
		}
	}
	for _, s := range rec.Servers {
		if l, _ := d.find(s.Name); l != nil {
			removeMember(l, s.Name)
			res.Removed = append(res.Removed, s.Name)
		}
	}
	return nil
}

// hashes records the identity and hash of every tracked server as the
// document now has it.
func (d *document) hashes(t *Tracking) error {
	for i := range t.Bundles {
		for j := range t.Bundles[i].Servers {
			s := &t.Bundles[i].Servers[j]
			_, m := d.find(s.Name)
			if m == nil || s.Hash != "" {
				continue
			}
			std := standard(m.Value)
			h, err := entryHash(std)
			if err != nil {
				return fmt.Errorf("server %s: %w", s.Name, err)
			}
			s.Hash, s.Identity = h, identity(std)
		}
	}
	return nil
}

// dupPrefix starts the description of a server the duplicate rule disabled.
const dupPrefix = "Duplicate of "

// dedupe applies the duplicate rule to the file: servers it disabled
// earlier are reconsidered, then the first enabled server of each identity
// stays enabled and later ones are disabled with "Duplicate of X".
func (d *document) dedupe(t *Tracking) (disabled, enabled []string) {
	first := map[string]string{}
	for _, l := range d.lists() {
		indent := d.rootIndent()
		for i := range l.Members {
			m := &l.Members[i]
			name, _ := unquote(m.Name)
			obj, ok := m.Value.Value.(*hujson.Object)
			if !ok {
				continue
			}
			var e struct {
				Disabled    bool   `json:"disabled"`
				Description string `json:"description"`
			}
			std := standard(m.Value)
			if json.Unmarshal(std, &e) != nil {
				continue
			}
			ours := e.Disabled && strings.HasPrefix(e.Description, dupPrefix)
			if e.Disabled && !ours {
				continue // disabled by the user
			}
			id := identity(std)
			memberIndent, _, _ := indents(l, indent)
			if orig, seen := first[id]; seen {
				want := dupPrefix + orig
				if !ours && e.Description != "" && t.owner(name) == nil {
					if t.Descriptions == nil {
						t.Descriptions = map[string]string{}
					}
					t.Descriptions[name] = e.Description
				}
				if !ours || e.Description != want {
					_ = setMember(obj, memberIndent, "disabled", []byte("true"))
					q, _ := json.Marshal(want)
					_ = setMember(obj, memberIndent, "description", q)
					disabled = append(disabled, name)
				}
				continue
			}
			first[id] = name
			if ours {
				removeMember(obj, "disabled")
				own := t.Descriptions[name]
				if tr := t.owner(name); tr != nil {
					own = tr.Description
				}
				delete(t.Descriptions, name)
				if own != "" {
					q, _ := json.Marshal(own)
					_ = setMember(obj, memberIndent, "description", q)
				} else {
					removeMember(obj, "description")
				}
				enabled = append(enabled, name)
			}
		}
	}
	return disabled, enabled
}

// values merges Set and Values.
func (o Options) values() map[string][]string {
	out := map[string][]string{}
	for k, v := range o.Set {
		out[k] = []string{v}
	}
	for k, vs := range o.Values {
		out[k] = append(out[k], vs...)
	}
	return out
}
