package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/relaystation/relay/tools"
	"github.com/relaystation/relay/tools/bundle"
	"github.com/relaystation/relay/tools/mcpconfig"
)

const bundlesUsage = "usage:\n" + bundlesUsageLines

const bundlesUsageLines = `  relay mcp install <path> [--config FILE] [--set KEY=VALUE]... [--allow-env NAME]... [--dry-run] [--force]
                         a bundle.json / bundle.yaml (or its directory), an MCP Bundle directory or a .mcpb file
  relay mcp uninstall <bundle-id> [--config FILE] [--dry-run] [--force]
  relay mcp bundles [--config FILE] [-json]           installed bundles: id, version, servers, installed at`

// bundleCommands are the `relay mcp` subcommands that edit mcp.json. They
// run before the runner's settings are read: they must work on a missing
// mcp.json, and their own validation names what is wrong with the result.
var bundleCommands = map[string]func(context.Context, *app, []string) error{
	"install":   mcpInstall,
	"uninstall": mcpUninstall,
	"bundles":   mcpBundles,
}

// kvFlags collects repeated --set KEY=VALUE flags: every value of a key
// repeated is kept (a "multiple" setting gets each as its own argument).
type kvFlags map[string][]string

func (k kvFlags) String() string { return fmt.Sprint(map[string][]string(k)) }

func (k kvFlags) Set(s string) error {
	key, v, ok := strings.Cut(s, "=")
	if !ok || key == "" {
		return fmt.Errorf("want KEY=VALUE, got %q", s)
	}
	k[key] = append(k[key], v)
	return nil
}

// listFlags collects a repeated flag's values.
type listFlags []string

func (l *listFlags) String() string { return strings.Join(*l, ",") }

func (l *listFlags) Set(s string) error {
	if s == "" {
		return errors.New("empty")
	}
	*l = append(*l, s)
	return nil
}

// parseArgs parses flags before and after the positional arguments
// (`install ./b --dry-run` as well as `install --dry-run ./b`).
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// installer is the bundle installer for --config (else RELAY_MCP_CONFIG,
// else ./mcp.json) and RELAY_DATA_DIR.
func (a *app) installer(config string) *bundle.Installer {
	if config == "" {
		config = a.env.String("RELAY_MCP_CONFIG", "./mcp.json")
	}
	dataDir := a.base.DataDir
	if abs, err := filepath.Abs(dataDir); err == nil {
		dataDir = abs
	}
	return &bundle.Installer{
		Config:  config,
		DataDir: dataDir,
		Lookup: func(name string) (string, bool) {
			v := a.env.String(name, "")
			return v, v != ""
		},
		Check: a.checkWithRunner,
	}
}

// checkWithRunner asks the running tool runner (the relay started from this
// folder, or NATS_URL's) how it would load the candidate mcp.json at path,
// in its own environment. No bus, no runner, or a runner that reads
// another file is bundle.ErrNoChecker: the install checks it itself.
func (a *app) checkWithRunner(ctx context.Context, path string, data []byte) ([]mcpconfig.Invalid, string, error) {
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	b, err := a.clientBus(cctx)
	cancel()
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", bundle.ErrNoChecker, err)
	}
	defer b.Close()
	resp, err := tools.ValidateRemote(ctx, b.Conn(), b.Prefix(), path, data)
	switch {
	case errors.Is(err, tools.ErrNoRunner):
		return nil, "", fmt.Errorf("%w: %v", bundle.ErrNoChecker, err)
	case err != nil:
		return nil, "the running tool runner", err
	case resp.ConfigPath != path:
		fmt.Fprintf(a.stderr, "relay: the running tool runner reads %s, not %s: checking here\n", resp.ConfigPath, path)
		return nil, "", bundle.ErrNoChecker
	}
	invalid := make([]mcpconfig.Invalid, len(resp.Invalid))
	for i, iv := range resp.Invalid {
		invalid[i] = mcpconfig.Invalid{Name: iv.Name, ID: iv.ID, Err: errors.New(iv.Reason)}
	}
	return invalid, "the running tool runner, in its environment", nil
}

func mcpInstall(ctx context.Context, a *app, args []string) error {
	return changeBundle(ctx, a, args, "install", "replace an installed version's servers even if edited by hand")
}

func mcpUninstall(ctx context.Context, a *app, args []string) error {
	return changeBundle(ctx, a, args, "uninstall", "remove servers even if edited by hand since the install")
}

// changeBundle runs `relay mcp install|uninstall` (verb) on its one bundle
// argument, with the flags both take (-set only for install).
func changeBundle(ctx context.Context, a *app, args []string, verb, forceHelp string) error {
	fs := a.flags("mcp " + verb)
	config := fs.String("config", "", "mcp.json to edit (default RELAY_MCP_CONFIG, else ./mcp.json)")
	set := kvFlags{}
	var allowEnv listFlags
	if verb == "install" {
		fs.Var(set, "set", "a non-sensitive user_config value of an MCP Bundle, KEY=VALUE (repeatable; repeat a key for a \"multiple\" setting)")
		fs.Var(&allowEnv, "allow-env", "let the MCP Bundle's server read ${env:NAME} (input:ID for ${input:ID}) from the relay's environment (repeatable)")
	}
	dry := fs.Bool("dry-run", false, "print the change to mcp.json as a diff and write nothing")
	force := fs.Bool("force", false, forceHelp)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return &exitError{code: 2, msg: bundlesUsage}
	}
	in := a.installer(*config)
	change := in.Uninstall
	if verb == "install" {
		change = in.Install
	}
	res, err := change(ctx, pos[0], bundle.Options{Values: set, AllowEnv: allowEnv, DryRun: *dry, Force: *force})
	if err != nil {
		return err
	}
	if len(allowEnv) > 0 {
		fmt.Fprintf(a.stdout, "allowed to read from the relay's environment (--allow-env): %s\n", strings.Join(allowEnv, ", "))
	}
	a.printResult(in, res, verb+"ed")
	if res.CheckedBy != "" {
		fmt.Fprintf(a.stdout, "the relay loads the new servers (checked by %s)\n", res.CheckedBy)
	}
	return nil
}

// printResult prints the diff of a dry run, else a summary.
func (a *app) printResult(in *bundle.Installer, res *bundle.Result, verb string) {
	if !res.Written {
		if res.Diff == "" {
			fmt.Fprintf(a.stdout, "dry run: %s would not change\n", in.Config)
		}
		fmt.Fprint(a.stdout, res.Diff)
		return
	}
	fmt.Fprintf(a.stdout, "%s %s %s in %s\n", verb, res.ID, res.Version, in.Config)
	for _, l := range []struct {
		what  string
		names []string
	}{{"added", res.Added}, {"removed", res.Removed}, {"disabled as duplicate", res.Disabled}, {"enabled again", res.Enabled}} {
		if len(l.names) > 0 {
			fmt.Fprintf(a.stdout, "  %s: %s\n", l.what, strings.Join(l.names, ", "))
		}
	}
}

func mcpBundles(_ context.Context, a *app, args []string) error {
	fs := a.flags("mcp bundles")
	config := fs.String("config", "", "mcp.json (default RELAY_MCP_CONFIG, else ./mcp.json)")
	asJSON := fs.Bool("json", false, "print JSON")
	if _, err := parseArgs(fs, args); err != nil {
		return err
	}
	in := a.installer(*config)
	list, err := in.List()
	if err != nil {
		return err
	}
	sort.Slice(list, func(i, j int) bool { return list[i].ID < list[j].ID })
	if *asJSON {
		if list == nil {
			list = []bundle.Installed{}
		}
		return json.NewEncoder(a.stdout).Encode(map[string]any{"config": in.Config, "bundles": list})
	}
	return writeTable(a.stdout, "BUNDLE\tVERSION\tKIND\tSERVERS\tINSTALLED AT", func(line func(string, ...any)) {
		for _, b := range list {
			line("%s\t%s\t%s\t%s\t%s", b.ID, b.Version, b.Kind, strings.Join(b.Names(), ","), b.InstalledAt.Format(time.RFC3339))
		}
	}, fmt.Sprintf("%d bundle(s) in %s", len(list), in.Config))
}
