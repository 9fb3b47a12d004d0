package bundle

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/Masterminds/semver/v3"
)

// mcpbCompat is a manifest's compatibility object.
type mcpbCompat struct {
	Platforms []string          `json:"platforms"`
	Runtimes  map[string]string `json:"runtimes"`
}

// lookPath finds a program on PATH; tests replace it.
var lookPath = exec.LookPath

// checkCompat refuses a bundle made for other platforms or needing a
// runtime that is not on PATH, naming why. Force skips it.
func checkCompat(m mcpbManifest) error {
	c := m.Compatibility
	var errs []string
	if len(c.Platforms) > 0 && !slices.Contains(c.Platforms, platformKey()) {
		errs = append(errs, fmt.Sprintf("compatibility.platforms is %s, this is %s", strings.Join(c.Platforms, ", "), platformKey()))
	}
	rts := mapKeys(c.Runtimes)
	sort.Strings(rts)
	for _, rt := range rts {
		progs := map[string][]string{"node": {"node"}, "python": {"python3", "python"}}[rt]
		if progs == nil {
			continue // a runtime the relay does not know how to find
		}
		path := ""
		for _, p := range progs {
			if found, err := lookPath(p); err == nil {
				path = found
				break
			}
		}
		if path == "" {
			errs = append(errs, fmt.Sprintf("compatibility.runtimes.%s (%s): %s is not on PATH", rt, c.Runtimes[rt], progs[0]))
			continue
		}
		if err := checkRuntimeVersion(path, c.Runtimes[rt]); err != nil {
			errs = append(errs, fmt.Sprintf("compatibility.runtimes.%s (%s): %v", rt, c.Runtimes[rt], err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("not compatible with this machine: %s (--force installs it anyway)", strings.Join(errs, "; "))
	}
	return nil
}

// runtimeVersion runs prog --version ("v20.20.2", "Python 3.11.9"); tests
// replace it.
var runtimeVersion = func(prog string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, prog, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", prog, err)
	}
	return string(out), nil
}

// versionRE finds the version in a runtime's --version output.
var versionRE = regexp.MustCompile(`\d+(\.\d+){0,2}`)

// checkRuntimeVersion checks the runtime at prog against want, a version
// range as npm writes them (">=16.0.0", "^3.10", ">=3.8 <4"); an empty or "*"
// range accepts any version.
func checkRuntimeVersion(prog, want string) error {
	want = strings.TrimSpace(want)
	if want == "" || want == "*" {
		return nil
	}
	c, err := semver.NewConstraint(want)
	if err != nil {
		return fmt.Errorf("not a version range: %v", err)
	}
	out, err := runtimeVersion(prog)
	if err != nil {
		return err
	}
	v, err := semver.NewVersion(versionRE.FindString(out))
	if err != nil {
		return fmt.Errorf("cannot read the version of %s from %q", prog, strings.TrimSpace(out))
	}
	if !c.Check(v) {
		return fmt.Errorf("%s is %s, outside the range", prog, v)
	}
	return nil
}

func mapKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// uvCommand fills the command of a server.type "uv" bundle: uv must be on
// PATH; without a command the bundle runs as `uv run --directory
// ${__dirname} <entry_point>`.
func uvCommand(m mcpbManifest, cfg mcpbConfig) (mcpbConfig, error) {
	if _, err := lookPath("uv"); err != nil {
		return cfg, errors.New(`server.type "uv" needs uv on PATH (https://docs.astral.sh/uv/), which was not found`)
	}
	if cfg.Command == "" {
		if m.Server.EntryPoint == "" {
			return cfg, errors.New(`server.type "uv": server.entry_point or server.mcp_config.command is required`)
		}
		cfg.Command = "uv"
		cfg.Args = append([]string{"run", "--directory", "${__dirname}", m.Server.EntryPoint}, cfg.Args...)
	}
	return cfg, nil
}

var envRefRE = regexp.MustCompile(`\$\{(env|input):([^}]*)\}`)

// checkEnvRefs refuses ${env:…} and ${input:…} references in the server's
// command, args and env other than the bundle's own user_config values,
// unless allow names them: a bundle gets no secret of the relay it was not
// given. It returns the references allowed, sorted.
func checkEnvRefs(cfg mcpbConfig, allow []string) ([]string, error) {
	refs := map[string]bool{}
	scan := func(s string) {
		for _, m := range envRefRE.FindAllStringSubmatch(s, -1) {
			name := m[2]
			if m[1] == "input" {
				name = "input:" + name
			}
			refs[name] = true
		}
	}
	scan(cfg.Command)
	for _, a := range cfg.Args {
		scan(a)
	}
	for _, v := range cfg.Env {
		scan(v)
	}
	var refused, allowed []string
	for r := range refs {
		if slices.Contains(allow, r) {
			allowed = append(allowed, r)
		} else {
			refused = append(refused, r)
		}
	}
	sort.Strings(refused)
	sort.Strings(allowed)
	if len(refused) > 0 {
		return nil, fmt.Errorf("the server reads %s from the relay's environment, which the bundle was not given: allow each with --allow-env NAME if you trust it", quoteRefs(refused))
	}
	return allowed, nil
}

func quoteRefs(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		if strings.HasPrefix(n, "input:") {
			q[i] = "${" + n + "}"
		} else {
			q[i] = "${env:" + n + "}"
		}
	}
	return strings.Join(q, ", ")
}

// checkSensitiveArgs refuses a sensitive user_config value used in args: a
// command line shows in ps to every local user; the bundle must pass it in
// env. Force skips it.
func checkSensitiveArgs(m mcpbManifest, cfg mcpbConfig) error {
	var bad []string
	for k, uc := range m.UserConfig {
		if !uc.Sensitive {
			continue
		}
		for _, a := range cfg.Args {
			if strings.Contains(a, "${user_config."+k+"}") {
				bad = append(bad, k)
				break
			}
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return fmt.Errorf("sensitive user_config %s would be passed in args, where ps shows it to every local user: the bundle must pass it in env (--force installs it anyway)", strings.Join(bad, ", "))
	}
	return nil
}

// checkPathValue checks a directory or file value.
func checkPathValue(typ, v string) error {
	st, err := os.Stat(v)
	switch {
	case err != nil:
		return fmt.Errorf("%q: %v", v, errors.Unwrap(err))
	case typ == "directory" && !st.IsDir():
		return fmt.Errorf("%q is not a directory", v)
	case typ == "file" && !st.Mode().IsRegular():
		return fmt.Errorf("%q is not a regular file", v)
	}
	return nil
}
