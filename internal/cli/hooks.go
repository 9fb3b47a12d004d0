package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/clip"
	"github.com/relaystation/relay/secret"
	"github.com/relaystation/relay/services/hooks"
	"github.com/relaystation/relay/services/toolrunner"
	"github.com/relaystation/relay/tools"
)

func init() {
	registerService(&service{
		name:        "hooks",
		summary:     "runs the hooks file's MCP actions on matching inbound envelopes; `relay hooks list|validate|test|log`",
		configure:   configureHooks,
		subcommands: runHooksCLI,
	})
}

// configureHooks reads the worker's settings (hooks.ReadSettings) and builds
// the worker; results are redacted of the secrets the tool runner redacts.
func configureHooks(env *config.Env) buildFunc {
	s := hooks.ReadSettings(env)
	red := hooksRedactor(env)
	return func(ctx context.Context, d *deps) (*runner, error) {
		d.Log.Info("hooks configured", "file", s.Path, "hooks", len(s.Hooks.Hooks))
		cfg := hooks.Config{Hooks: s.Hooks, Concurrency: s.Concurrency, Redactor: red, Logger: d.Log}
		if _, err := os.Stat(s.Path); err == nil || s.Explicit {
			cfg.Path = s.Path
			cfg.Servers = func() []string { return hooks.ServerNames(s.MCPConfig, s.DataDir) }
		}
		return runnerOf(hooks.New(ctx, cfg, d.Bus))
	}
}

func hooksRedactor(env *config.Env) *tools.Redactor {
	var secrets []secret.Value
	for _, name := range slices.Concat(toolrunner.KnownSecrets, env.List("RELAY_REDACT_SECRETS")) {
		if v := env.Secret(name); v.IsSet() {
			secrets = append(secrets, v)
		}
	}
	return tools.NewRedactor(secrets...)
}

const hooksUsage = `usage:
  relay hooks                                    run the hooks worker
  relay hooks list [-json]                       each hook, its triggers, actions and last outcome
  relay hooks validate [--offline]               check the hooks file (and its tools, when a tool runner answers); exit 1 on an error
  relay hooks test NAME --envelope FILE [--run] [-json]
                                                 show the match, the resolved parameters and their validation; --run calls the tools
  relay hooks log [-n N] [--hook NAME] [-json]   execution records from hook.executed`

func runHooksCLI(ctx context.Context, a *app, args []string) error {
	if !isHelp(args[0]) {
		if err := a.checkEnv(); err != nil { // a misspelt RELAY_HOOKS must not validate ./hooks.yaml instead
			return err
		}
	}
	return subcommands{"validate": hooksValidate, "list": hooksList, "test": hooksTest, "log": hooksLog}.run(ctx, a, "hooks", hooksUsage, args)
}

// hooksFile loads the hooks file RELAY_HOOKS names (the default may be missing).
func hooksFile(a *app) (*hooks.File, string, error) {
	path := a.env.String("RELAY_HOOKS", "")
	explicit := path != ""
	if !explicit {
		path = hooks.DefaultPath
	}
	f, err := hooks.Load(path)
	if errors.Is(err, hooks.ErrNotFound) && !explicit {
		return &hooks.File{}, path, nil
	}
	return f, path, err
}

// hooksClient connects to the running relay and builds a hooks service on
// it (for its tool discovery and calls), or returns nil when no bus answers.
func hooksClient(ctx context.Context, a *app, f *hooks.File) (*hooks.Service, func(), error) {
	b, err := a.clientBus(ctx)
	if err != nil {
		return nil, func() {}, err
	}
	svc, err := hooks.New(ctx, hooks.Config{Hooks: f, Redactor: hooksRedactor(a.env), Logger: a.log}, b)
	if err != nil {
		b.Close()
		return nil, func() {}, err
	}
	return svc, b.Close, nil
}

func hooksValidate(ctx context.Context, a *app, args []string) error {
	fs := a.flags("hooks validate")
	offline := fs.Bool("offline", false, "do not ask a running tool runner for the tools")
	if err := fs.Parse(args); err != nil {
		return err
	}
	f, path, err := hooksFile(a)
	var ve *hooks.ValidationError
	if errors.As(err, &ve) {
		for _, p := range ve.Problems {
			fmt.Fprintln(a.stdout, "error:", p)
		}
		return &exitError{code: 1, msg: fmt.Sprintf("%s: %d error(s)", path, len(ve.Problems))}
	}
	if err != nil {
		return err
	}
	cat := hooks.Catalog{Servers: hooks.ServerNames(a.env.String("RELAY_MCP_CONFIG", "./mcp.json"), a.env.String("RELAY_DATA_DIR", "./data"))}
	if !*offline && len(f.Hooks) > 0 {
		if svc, closeBus, err := hooksClient(ctx, a, f); err == nil {
			if c := svc.CatalogFrom(ctx, f); c.Servers != nil {
				cat = c
			}
			closeBus()
		} else {
			fmt.Fprintln(a.stderr, "warning: no running relay to ask for the tools:", clip.Line(err.Error(), 200))
		}
	}
	probs := f.Check(cat)
	for _, p := range probs {
		kind := "error"
		if p.Warning {
			kind = "warning"
		}
		fmt.Fprintf(a.stdout, "%s: %s\n", kind, p)
	}
	if n := len(hooks.Errors(probs)); n > 0 {
		return &exitError{code: 1, msg: fmt.Sprintf("%s: %d error(s)", path, n)}
	}
	fmt.Fprintf(a.stdout, "%s: %d hook(s), valid\n", path, len(f.Hooks))
	return nil
}

func hooksList(ctx context.Context, a *app, args []string) error {
	fs := a.flags("hooks list")
	asJSON := fs.Bool("json", false, "print a JSON array")
	if err := fs.Parse(args); err != nil {
		return err
	}
	f, path, err := hooksFile(a)
	if err != nil {
		return err
	}
	last := map[string]hooks.Execution{}
	if b, err := a.clientBus(ctx); err == nil {
		if log, err := hooks.ReadLog(ctx, b, 0, ""); err == nil {
			for _, x := range log {
				last[x.Hook] = x
			}
		}
		b.Close()
	}
	type row struct {
		Name    string           `json:"name"`
		On      []string         `json:"on"`
		If      string           `json:"if,omitempty"`
		Role    string           `json:"role"`
		Actions []string         `json:"actions"`
		Last    *hooks.Execution `json:"last,omitempty"`
	}
	rows := []row{}
	for _, h := range f.Hooks {
		r := row{Name: h.Name, On: h.On, If: h.If, Role: h.Role}
		for _, act := range h.Actions {
			r.Actions = append(r.Actions, act.Parameters.Tool())
		}
		if x, ok := last[h.Name]; ok {
			r.Last = &x
		}
		rows = append(rows, r)
	}
	if *asJSON {
		return json.NewEncoder(a.stdout).Encode(rows)
	}
	return writeTable(a.stdout, "HOOK\tON\tIF\tROLE\tACTIONS\tLAST OUTCOME", func(line func(string, ...any)) {
		for _, r := range rows {
			outcome := "-"
			if r.Last != nil {
				outcome = fmt.Sprintf("%s (action %d, %s ago)", r.Last.Status, r.Last.Action, time.Since(r.Last.At).Round(time.Second))
			}
			line("%s\t%s\t%s\t%s\t%s\t%s", r.Name, strings.Join(r.On, ","), clip.Line(r.If, 60), r.Role, strings.Join(r.Actions, " -> "), outcome)
		}
	}, fmt.Sprintf("%d hook(s) in %s", len(rows), path))
}

func hooksTest(ctx context.Context, a *app, args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return &exitError{code: 2, msg: "usage: relay hooks test NAME --envelope FILE [--run] [-json]"}
	}
	name := args[0]
	fs := a.flags("hooks test")
	file := fs.String("envelope", "", "a JSON envelope (or a golden file's {\"envelope\": ...})")
	run := fs.Bool("run", false, "also call the tools (through the running tool runner)")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *file == "" {
		return &exitError{code: 2, msg: "relay hooks test: --envelope FILE is required"}
	}
	f, _, err := hooksFile(a)
	if err != nil {
		return err
	}
	h := f.Hook(name)
	if h == nil {
		return fmt.Errorf("no hook %q in the hooks file", name)
	}
	e, err := readEnvelopeFile(*file)
	if err != nil {
		return err
	}
	svc, closeBus, err := hooksClient(ctx, a, f)
	if err != nil {
		return err
	}
	defer closeBus()
	matched, trials, err := svc.Try(ctx, h, e, *run)
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(a.stdout).Encode(map[string]any{"hook": name, "matched": matched, "actions": trials})
	}
	fmt.Fprintf(a.stdout, "hook %s: envelope %s (%s) matches: %v\n", name, e.ID, triggerOf(e), matched)
	bad := false
	for _, tr := range trials {
		p, _ := json.Marshal(tr.Params)
		fmt.Fprintf(a.stdout, "action %d %s\n  params: %s\n", tr.Action, tr.Tool, p)
		if tr.Problem != "" {
			bad = true
			fmt.Fprintf(a.stdout, "  invalid: %s\n", tr.Problem)
		} else {
			fmt.Fprintln(a.stdout, "  valid against the tool's inputSchema")
		}
		if x := tr.Execution; x != nil {
			fmt.Fprintf(a.stdout, "  ran: %s in %.1f ms", x.Status, x.DurationMS)
			if x.Error != "" {
				fmt.Fprintf(a.stdout, ": %s", clip.Line(x.Error, 300))
			}
			if x.Result != "" {
				fmt.Fprintf(a.stdout, "\n  result: %s", clip.Line(x.Result, 300))
			}
			fmt.Fprintln(a.stdout)
			bad = bad || x.Status != hooks.StatusSuccess
		}
	}
	if bad {
		return &exitError{code: 1}
	}
	return nil
}

func triggerOf(e *envelope.Envelope) string {
	if e.Meta.Source == nil {
		return string(e.Channel)
	}
	s := string(e.Channel) + "." + e.Meta.Source.Event
	if e.Meta.Source.Action != "" {
		s += "." + e.Meta.Source.Action
	}
	return s
}

// readEnvelopeFile reads an envelope, or the "envelope" of a golden file.
func readEnvelopeFile(path string) (*envelope.Envelope, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var wrapped struct {
		Envelope json.RawMessage `json:"envelope"`
	}
	if json.Unmarshal(raw, &wrapped) == nil && len(wrapped.Envelope) > 0 {
		raw = wrapped.Envelope
	}
	e, err := envelope.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return e, nil
}

func hooksLog(ctx context.Context, a *app, args []string) error {
	fs := a.flags("hooks log")
	n := fs.Int("n", 20, "the last N records (0: all)")
	hook := fs.String("hook", "", "only this hook's records")
	asJSON := fs.Bool("json", false, "print a JSON array")
	b, err := a.parseDial(ctx, fs, args)
	if err != nil {
		return err
	}
	defer b.Close()
	log, err := hooks.ReadLog(ctx, b, *n, *hook)
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(a.stdout).Encode(log)
	}
	return writeTable(a.stdout, "TIME\tHOOK\tACTION\tTOOL\tSTATUS\tDURATION\tENVELOPE\tTHREAD\tRESULT OR ERROR", func(line func(string, ...any)) {
		for _, x := range log {
			detail := x.Error
			if detail == "" {
				detail = x.Result
			}
			line("%s\t%s\t%d\t%s.%s\t%s\t%.1fms\t%s\t%s\t%s", x.At.Format(time.RFC3339), x.Hook, x.Action, x.Server, x.Tool,
				x.Status, x.DurationMS, x.EnvelopeID, x.Thread, clip.Line(detail, 100))
		}
	}, fmt.Sprintf("%d record(s)", len(log)))
}
