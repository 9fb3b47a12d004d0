package bundle

import (
	"archive/zip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// MCPBServer is the name of an MCP Bundle's one server: it is installed as
// "<id>__main", the id being the manifest's name with every run of
// characters other than letters and digits turned into '-'.
const MCPBServer = "main"

// mcpbManifest is the part of an MCP Bundle's manifest.json the installer
// reads (modelcontextprotocol/mcpb MANIFEST.md).
type mcpbManifest struct {
	Name        string `json:"name"`
	Version     string `json:"version"`
	Description string `json:"description"`
	Server      struct {
		Type       string     `json:"type"`
		EntryPoint string     `json:"entry_point"`
		MCPConfig  mcpbConfig `json:"mcp_config"`
	} `json:"server"`
	UserConfig    map[string]mcpbUserConfig `json:"user_config"`
	Compatibility mcpbCompat                `json:"compatibility"`
}

type mcpbConfig struct {
	Command           string                `json:"command"`
	Args              []string              `json:"args"`
	Env               map[string]string     `json:"env"`
	PlatformOverrides map[string]mcpbConfig `json:"platform_overrides"`
}

type mcpbUserConfig struct {
	Type      string   `json:"type"`
	Title     string   `json:"title"`
	Sensitive bool     `json:"sensitive"`
	Required  bool     `json:"required"`
	Default   any      `json:"default"`
	Multiple  bool     `json:"multiple"`
	Min       *float64 `json:"min"`
	Max       *float64 `json:"max"`
}

// UserConfigEnv is the environment variable a sensitive user_config value
// comes from, and that mcp.json references as ${env:…}:
// MCPB_USER_CONFIG_<KEY>, upper-cased.
func UserConfigEnv(key string) string {
	b := []byte(strings.ToUpper(key))
	for i, c := range b {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			b[i] = '_'
		}
	}
	return "MCPB_USER_CONFIG_" + string(b)
}

// platformKey is the manifest's name for this platform.
func platformKey() string {
	if runtime.GOOS == "windows" {
		return "win32"
	}
	return runtime.GOOS
}

// loadMCPB reads an MCP Bundle (a .mcpb archive or a directory with a
// manifest.json), unpacks or copies it to DataDir/bundles/<id>/<version>
// and turns its server into an mcp.json entry. cleanup removes the copy
// unless the install was kept. A dry run unpacks into a temporary
// directory outside DataDir, and cleanup removes it.
func (in *Installer) loadMCPB(source string, opts Options) (*Bundle, func(bool), error) {
	if in.DataDir == "" {
		return nil, nil, errors.New("an MCP Bundle needs a data directory to unpack into (RELAY_DATA_DIR)")
	}
	stage, err := in.stageDir(opts.DryRun)
	if err != nil {
		return nil, nil, err
	}
	fail := func(err error) (*Bundle, func(bool), error) {
		_ = os.RemoveAll(stage)
		return nil, nil, fmt.Errorf("MCP Bundle %s: %w", source, err)
	}
	b, err := in.readMCPB(source, stage, opts)
	if err != nil {
		return fail(err)
	}
	if opts.DryRun {
		return b, func(bool) { _ = os.RemoveAll(stage) }, nil
	}
	cleanup, err := placeMCPB(stage, b.Dir)
	if err != nil {
		return fail(err)
	}
	return b, cleanup, nil
}

// stageDir makes a fresh directory under DataDir (creating DataDir if need
// be) to unpack a bundle into before it goes into place; for a dry run, one
// in the system's temporary directory.
func (in *Installer) stageDir(dryRun bool) (string, error) {
	if dryRun {
		return os.MkdirTemp("", "relay-bundle-dry-run-*")
	}
	removeStale(in.DataDir)
	stage, err := os.MkdirTemp(in.DataDir, ".bundle-*")
	if err == nil {
		return stage, nil
	}
	if err := os.MkdirAll(in.DataDir, 0o755); err != nil {
		return "", err
	}
	return os.MkdirTemp(in.DataDir, ".bundle-*")
}

// staleAfter is the age past which a staging folder is taken to be left by
// an install that was killed, and removed at the next install.
const staleAfter = time.Hour

// removeStale removes the staging folders under dataDir older than
// staleAfter.
func removeStale(dataDir string) {
	old, _ := filepath.Glob(filepath.Join(dataDir, ".bundle-*"))
	for _, p := range old {
		if st, err := os.Stat(p); err == nil && time.Since(st.ModTime()) > staleAfter {
			_ = os.RemoveAll(p)
		}
	}
}

// readMCPB unpacks or copies the bundle at source into stage and reads its
// manifest into a Bundle whose Dir is where this version will be installed.
func (in *Installer) readMCPB(source, stage string, opts Options) (*Bundle, error) {
	if err := copyMCPB(source, stage); err != nil {
		return nil, err
	}
	m, id, err := readMCPBManifest(stage)
	if err != nil {
		return nil, err
	}
	final := filepath.Join(in.DataDir, "bundles", id, m.Version)
	cfg := m.Server.MCPConfig.forPlatform(platformKey())
	if !opts.Force {
		if err := checkCompat(m); err != nil {
			return nil, err
		}
	}
	if m.Server.Type == "uv" {
		if cfg, err = uvCommand(m, cfg); err != nil {
			return nil, err
		}
	}
	if cfg.Command == "" {
		return nil, errors.New("manifest.json: server.mcp_config.command is required")
	}
	if _, err := checkEnvRefs(cfg, opts.AllowEnv); err != nil {
		return nil, err
	}
	if !opts.Force {
		if err := checkSensitiveArgs(m, cfg); err != nil {
			return nil, err
		}
	}
	vars, lists, err := in.userConfig(m, final, opts.values())
	if err != nil {
		return nil, err
	}
	cfg.Args, cfg.Env = expandLists(cfg.Args, cfg.Env, lists)
	if c := filepath.FromSlash(cfg.Command); strings.ContainsRune(c, filepath.Separator) && !filepath.IsAbs(c) && !strings.HasPrefix(c, "${") {
		cfg.Command = filepath.Join(final, c) // relative to the bundle, as server/my-server in MANIFEST.md
	}
	entry := struct {
		Command     string            `json:"command"`
		Args        []string          `json:"args,omitempty"`
		Env         map[string]string `json:"env,omitempty"`
		Description string            `json:"description,omitempty"`
	}{cfg.Command, cfg.Args, cfg.Env, m.Description}
	raw, err := json.Marshal(entry)
	if err != nil {
		return nil, err
	}
	return &Bundle{ID: id, Name: m.Name, Version: m.Version, Description: m.Description, Dir: final, Source: source, Kind: "mcpb",
		Servers: []Entry{{Name: MCPBServer, JSON: raw}}, vars: vars}, nil
}

// copyMCPB copies a bundle directory (named by itself or by its
// manifest.json) into stage, or unpacks a .mcpb archive there.
func copyMCPB(source, stage string) error {
	src := source
	if filepath.Base(src) == "manifest.json" {
		src = filepath.Dir(src)
	}
	if st, err := os.Stat(src); err == nil && st.IsDir() {
		return os.CopyFS(stage, os.DirFS(src))
	}
	return unzip(src, stage)
}

// readMCPBManifest reads dir/manifest.json and checks that its name makes a
// valid bundle id and its version a usable directory name.
func readMCPBManifest(dir string) (mcpbManifest, string, error) {
	var m mcpbManifest
	data, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		return m, "", err
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, "", fmt.Errorf("manifest.json: %w", err)
	}
	id := sanitizeID(m.Name)
	if err := CheckID(id); err != nil {
		return m, "", fmt.Errorf("manifest.json name %q: %w", m.Name, err)
	}
	if !semverRE.MatchString(m.Version) {
		return m, "", fmt.Errorf("manifest.json: version %q is not a semantic version (MAJOR.MINOR.PATCH, e.g. 1.0.0)", m.Version)
	}
	return m, id, nil
}

// forPlatform is cfg with the overrides for platform applied: a command or
// args replace the base ones, env entries are added to (or replace) the
// base env.
func (cfg mcpbConfig) forPlatform(platform string) mcpbConfig {
	o, ok := cfg.PlatformOverrides[platform]
	if !ok {
		return cfg
	}
	if o.Command != "" {
		cfg.Command = o.Command
	}
	if o.Args != nil {
		cfg.Args = o.Args
	}
	for k, v := range o.Env {
		if cfg.Env == nil {
			cfg.Env = map[string]string{}
		}
		cfg.Env[k] = v
	}
	return cfg
}

// placeMCPB puts a staged bundle at final. A new version goes into place
// now, before mcp.json names it, so a runner reloading the file finds the
// files there, and the cleanup it returns removes it unless the install is
// kept. A version already installed is replaced only when the install is
// kept.
func placeMCPB(stage, final string) (func(bool), error) {
	if _, err := os.Stat(final); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
			return nil, err
		}
		if err := os.Rename(stage, final); err != nil {
			return nil, err
		}
		return func(keep bool) {
			if !keep {
				_ = os.RemoveAll(final)
				_ = os.Remove(filepath.Dir(final))
			}
		}, nil
	}
	return func(keep bool) {
		if !keep {
			_ = os.RemoveAll(stage)
			return
		}
		_ = os.MkdirAll(filepath.Dir(final), 0o755)
		_ = os.RemoveAll(final) // the same version installed again
		if err := os.Rename(stage, final); err != nil {
			_ = os.RemoveAll(stage)
		}
	}, nil
}

// userConfig resolves ${__dirname}, ${HOME}, ${pathSeparator}, ${/} and
// every ${user_config.KEY}: a sensitive value becomes a reference to its
// environment variable (checked to be set when required), others come from
// set, else the default.
func (in *Installer) userConfig(m mcpbManifest, dir string, set map[string][]string) (map[string]string, map[string][]string, error) {
	lookup := in.Lookup
	if lookup == nil {
		lookup = os.LookupEnv
	}
	home, _ := os.UserHomeDir()
	vars := map[string]string{"__dirname": dir, "HOME": home, "pathSeparator": string(filepath.Separator), "/": string(filepath.Separator),
		"DESKTOP": filepath.Join(home, "Desktop"), "DOCUMENTS": filepath.Join(home, "Documents"), "DOWNLOADS": filepath.Join(home, "Downloads")}
	// lists holds the values an argument that is exactly ${user_config.KEY}
	// becomes: none for an optional value not given, one each for a list.
	lists := map[string][]string{}
	var errs []string
	for _, k := range slices.Sorted(maps.Keys(m.UserConfig)) {
		uc := m.UserConfig[k]
		vs, given := set[k]
		v := strings.Join(vs, ",")
		switch {
		case given && len(vs) > 1 && !uc.Multiple:
			errs = append(errs, fmt.Sprintf("user_config.%s takes one value, got %d (it is not \"multiple\")", k, len(vs)))
		case uc.Sensitive && given:
			errs = append(errs, fmt.Sprintf("user_config.%s is sensitive: set it in the environment as %s, not with --set", k, UserConfigEnv(k)))
		case uc.Sensitive:
			env := UserConfigEnv(k)
			_, ok := lookup(env)
			switch {
			case ok:
				vars["user_config."+k] = "${env:" + env + "}"
			case uc.Required && uc.Default == nil:
				errs = append(errs, fmt.Sprintf("user_config.%s is required: set %s", k, env))
			default: // optional and not given: left out
				vars["user_config."+k] = ""
				lists[k] = nil
			}
		case given:
			for _, v := range vs {
				if err := checkUserValue(uc, v); err != nil {
					errs = append(errs, fmt.Sprintf("user_config.%s: %v", k, err))
				}
			}
			vars["user_config."+k] = v
			if uc.Multiple {
				lists[k] = vs // each value its own argument
			}
		case uc.Default != nil:
			var ds []string
			if l, ok := uc.Default.([]any); ok {
				for _, e := range l {
					ds = append(ds, fmt.Sprint(e))
				}
			} else {
				ds = []string{fmt.Sprint(uc.Default)}
			}
			for i, d := range ds {
				for name, val := range vars {
					if !strings.HasPrefix(name, "user_config.") {
						d = strings.ReplaceAll(d, "${"+name+"}", val)
					}
				}
				ds[i] = d
			}
			vars["user_config."+k] = strings.Join(ds, ",")
			if _, ok := uc.Default.([]any); ok {
				lists[k] = ds
			}
		case uc.Required:
			errs = append(errs, fmt.Sprintf("user_config.%s is required: pass --set %s=VALUE", k, k))
		default:
			vars["user_config."+k] = ""
			lists[k] = nil
		}
	}
	for k := range set {
		if _, ok := m.UserConfig[k]; !ok {
			errs = append(errs, fmt.Sprintf("--set %s: the bundle has no user_config %q", k, k))
		}
	}
	if len(errs) > 0 {
		sort.Strings(errs)
		return nil, nil, errors.New(strings.Join(errs, "; "))
	}
	return vars, lists, nil
}

// checkUserValue checks a value given with --set against its user_config
// type and bounds.
func checkUserValue(uc mcpbUserConfig, v string) error {
	switch uc.Type {
	case "number":
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return fmt.Errorf("%q is not a number", v)
		}
		if uc.Min != nil && f < *uc.Min {
			return fmt.Errorf("%v is below the minimum %v", f, *uc.Min)
		}
		if uc.Max != nil && f > *uc.Max {
			return fmt.Errorf("%v is above the maximum %v", f, *uc.Max)
		}
	case "boolean":
		if v != "true" && v != "false" {
			return fmt.Errorf("%q is not a boolean (true or false)", v)
		}
	case "directory", "file":
		return checkPathValue(uc.Type, v)
	}
	return nil
}

// expandLists replaces each argument that is exactly ${user_config.KEY}
// with KEY's list of values (none for an optional value not given) and
// drops env entries whose value is exactly such a reference with no value.
func expandLists(args []string, env map[string]string, lists map[string][]string) ([]string, map[string]string) {
	key := func(s string) (string, bool) {
		k, ok := strings.CutPrefix(s, "${user_config.")
		if !ok || !strings.HasSuffix(k, "}") {
			return "", false
		}
		k = strings.TrimSuffix(k, "}")
		_, ok = lists[k]
		return k, ok
	}
	var out []string
	for _, a := range args {
		if k, ok := key(a); ok {
			out = append(out, lists[k]...)
			continue
		}
		out = append(out, a)
	}
	var outEnv map[string]string
	for n, v := range env {
		if k, ok := key(v); ok && len(lists[k]) == 0 {
			continue
		}
		if outEnv == nil {
			outEnv = map[string]string{}
		}
		outEnv[n] = v
	}
	return out, outEnv
}

// semverRE is a semantic version (semver.org 2.0.0), which MCPB manifests
// carry and which names the unpacked bundle's directory.
var semverRE = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$`)

// Limits on what one archive may unpack to: the total size, the number of
// entries, and the ratio of the unpacked size to the archive's size (a
// zip bomb), the last checked once the total passes minRatioCheck.
const (
	maxUnpacked   = 1 << 30
	maxEntries    = 10000
	maxRatio      = 100
	minRatioCheck = 16 << 20
)

// unzip extracts a .mcpb (zip) archive into dir, refusing entries that
// would land outside it and symbolic links.
func unzip(archive, dir string) error {
	zr, err := zip.OpenReader(archive)
	if err != nil {
		return err
	}
	defer zr.Close()
	if len(zr.File) > maxEntries {
		return fmt.Errorf("archive has %d entries, at most %d allowed", len(zr.File), maxEntries)
	}
	st, err := os.Stat(archive)
	if err != nil {
		return err
	}
	limit := int64(maxUnpacked)
	if r := st.Size() * maxRatio; r > minRatioCheck && r < limit {
		limit = r
	} else if r <= minRatioCheck {
		limit = minRatioCheck
	}
	var total int64
	for _, f := range zr.File {
		name := filepath.FromSlash(f.Name)
		if !filepath.IsLocal(name) {
			return fmt.Errorf("archive entry %q leaves the bundle directory", f.Name)
		}
		dst := filepath.Join(dir, name)
		mode := f.Mode()
		switch {
		case mode.IsDir():
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return err
			}
			continue
		case !mode.IsRegular():
			return fmt.Errorf("archive entry %q is not a regular file", f.Name)
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		rc, err := f.Open()
		if err != nil {
			return err
		}
		out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode.Perm()|0o600)
		if err != nil {
			rc.Close()
			return err
		}
		n, err := io.Copy(out, io.LimitReader(rc, limit-total+1))
		rc.Close()
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		if total += n; total > limit {
			return fmt.Errorf("archive of %d bytes unpacks to more than %d bytes (at most %d bytes, %d times the archive's size beyond %d bytes)", st.Size(), limit, maxUnpacked, maxRatio, minRatioCheck)
		}
	}
	return nil
}
