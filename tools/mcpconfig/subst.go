package mcpconfig

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/compose-spec/compose-go/v2/dotenv"
)

var varRE = regexp.MustCompile(`\$\{([^}]*)\}`)

// builtin are the variables that are never an environment variable's bare
// name.
var builtin = map[string]bool{
	"dataDir": true, "workspaceFolder": true, "workspaceFolderBasename": true,
	"userHome": true, "pathSeparator": true,
}

// substitute replaces ${env:NAME}, ${input:id}, ${dataDir} and VS Code's
// ${workspaceFolder}, ${workspaceFolderBasename}, ${userHome},
// ${pathSeparator} and ${/}; with bare
// (env values) also ${NAME}, as the agent orchestrator writes it. A missing
// variable or an unknown form is an error naming it. used are the values
// that came from the environment or inputs.
func substitute(s string, opts Options, bare bool) (out string, used []string, err error) {
	if !strings.Contains(s, "${") {
		return s, nil, nil
	}
	var errs []string
	out = varRE.ReplaceAllStringFunc(s, func(m string) string {
		inner := m[2 : len(m)-1]
		kind, arg, _ := strings.Cut(inner, ":")
		if bare && envNameRE.MatchString(inner) && !builtin[inner] {
			kind, arg = "env", inner
		}
		switch {
		case inner == "dataDir":
			return opts.DataDir
		case inner == "workspaceFolder" || inner == "workspaceFolderBasename":
			if opts.Workspace == "" {
				errs = append(errs, fmt.Sprintf("%s: no workspace folder (set %s)", m, WorkspaceEnv))
				break
			}
			if inner == "workspaceFolderBasename" {
				return filepath.Base(opts.Workspace)
			}
			return opts.Workspace
		case inner == "userHome":
			if opts.Home != "" {
				return opts.Home
			}
			home, err := os.UserHomeDir()
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s: %v", m, err))
				break
			}
			return home
		case inner == "pathSeparator" || inner == "/":
			return string(filepath.Separator)
		case kind == "env" && arg != "":
			if v, ok := opts.Lookup(arg); ok {
				used = append(used, v)
				return v
			}
			errs = append(errs, fmt.Sprintf("environment variable %s is not set (%s)", arg, m))
		case kind == "input" && arg != "":
			v, err := opts.input(arg)
			if err != nil {
				errs = append(errs, err.Error())
				break
			}
			used = append(used, v)
			return v
		default:
			errs = append(errs, fmt.Sprintf("unknown variable %s (want ${env:NAME}, ${input:id}, ${dataDir}, ${workspaceFolder}, ${workspaceFolderBasename}, ${userHome}, ${pathSeparator} or ${/})", m))
		}
		return m
	})
	if len(errs) > 0 {
		return "", nil, errors.New(strings.Join(errs, "; "))
	}
	return out, used, nil
}

// input is the value of ${input:id}: the environment variable
// InputEnvName(id), else the input's declared default.
func (o Options) input(id string) (string, error) {
	name := InputEnvName(id)
	if v, ok := o.Lookup(name); ok {
		return v, nil
	}
	if in, ok := o.inputs[id]; ok && in.Default != "" {
		return in.Default, nil
	}
	return "", fmt.Errorf("input %q: environment variable %s is not set", id, name)
}

// InputEnvName is the environment variable that supplies ${input:id}: the id
// upper-cased with every character other than a letter or digit turned into
// '_' ("github-token" -> GITHUB_TOKEN).
func InputEnvName(id string) string {
	b := []byte(strings.ToUpper(id))
	for i, c := range b {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			b[i] = '_'
		}
	}
	return string(b)
}

// ParseEnvFile reads a dotenv file with compose-go's parser (Docker
// Compose's rules): NAME=value lines, '#' comments (also after an unquoted
// value, following a space), an optional "export " prefix, single quotes
// (literal), double quotes (escapes such as \n, values across lines) and
// ${NAME} expansion from variables defined earlier in the same file; the
// relay's own environment is never consulted. Another ${NAME} is blank, and
// compose-go warns of it through logrus's standard logger (the relay routes
// that into its own log).
func ParseEnvFile(data []byte) (map[string]string, error) {
	vars, err := dotenv.UnmarshalBytesWithLookup(data, func(string) (string, bool) { return "", false })
	if err != nil {
		return nil, err
	}
	for k := range vars {
		if !envNameRE.MatchString(k) {
			return nil, fmt.Errorf("%q is not a valid variable name", k)
		}
	}
	return vars, nil
}
